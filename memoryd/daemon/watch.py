"""File events: the watches, a pure event filter and the Debouncer.

A watch's handler runs on the event thread and must only classify and enqueue; every bit of
file work happens later in the daemon's loop. Events are hints, never the truth: it re-stats.
"""

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from memoryd.indexing.scan import TRASH_DIR, skip_reason
from memoryd.storage.fsops import is_own_temp

# Only close-after-write, delete and move: not every open, attribute change and modify. This is
# what keeps a 10,000-file checkout from overflowing the inotify queue (DESIGN §10). An atomic
# save arrives as a move onto the file; an in-place write as a close-after-write.
# FileCreatedEvent: watchdog's name for a file moved in from a folder it does not watch (a
# restore from the trash, a `mv` from elsewhere), an unpaired IN_MOVED_TO. Not for IN_CREATE,
# which on Linux is kept out of these watches (inotify.MASKS): every new file also closes.
MEMORY_DIR_EVENTS: list[type[FileSystemEvent]] = [
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
# A symlink made where memory dirs live is a file event (a link to a memory dir elsewhere).
PARENT_EVENTS: list[type[FileSystemEvent]] = [
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
]


class Kind(Enum):
    DIRTY = "dirty"  # a memory dir changed: re-stat it
    STRUCTURE = "structure"  # a folder appeared or went where memory dirs live: rediscover
    LOST = "lost"  # the watched folder itself was deleted or moved: its watch is dead


@dataclass(frozen=True, slots=True)
class Signal:
    kind: Kind
    dir: Path
    name: str = ""


def _names(event: FileSystemEvent) -> list[str]:
    paths = [event.src_path]
    if getattr(event, "dest_path", ""):
        paths.append(event.dest_path)
    return [os.fsdecode(p) for p in paths if p]


def classify(event: FileSystemEvent, watched_dir: Path, *, parent: bool) -> list[Signal]:
    """What an event means for memoryd (pure: the event and the watch in, signals out)."""
    if parent:
        if Path(os.fsdecode(event.src_path)) == watched_dir:
            # The folder itself went: a new one in its place (even with the same inode
            # number) needs a new watch.
            return [Signal(Kind.LOST, watched_dir, "parent")]
        relevant = event.is_directory or isinstance(
            event, DirDeletedEvent | DirMovedEvent | FileCreatedEvent
        )
        return [Signal(Kind.STRUCTURE, watched_dir)] if relevant else []
    out: list[Signal] = []
    for raw in _names(event):
        path = Path(raw)
        if path == watched_dir:  # the memory dir itself was deleted or moved
            out.append(Signal(Kind.LOST, watched_dir))
            continue
        if path.parent != watched_dir:
            continue
        name = path.name
        if name == TRASH_DIR or is_own_temp(name):
            continue  # our own writes never retrigger work
        reason = skip_reason(name)
        if reason in ("dotfile",) and name != ".consolidate-lock":
            continue
        out.append(Signal(Kind.DIRTY, watched_dir, name))
    return out


class Debouncer:
    """Per-key quiet period with a maximum wait; the clock is injected (pure, thread-safe).

    A key (a dir) is touched for one of its parts (a file): it is due once any part has been
    quiet for `quiet` seconds, or `max_wait` seconds after the key's first touch in a burst,
    whichever comes first. A file's own quiet decides, not the dir's: a version that sits on
    disk while another file of the dir changes every second is read once it has sat `quiet`
    (the dir's quiet never came, and that version was replaced unseen before `max_wait`).
    `schedule` asks for a look at a given time.
    """

    def __init__(self, quiet: float, max_wait: float, clock: Callable[[], float]) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self.clock = clock
        self._first: dict[Any, float] = {}
        self._last: dict[Any, dict[Any, float]] = {}  # key -> part -> its last touch
        self._at: dict[Any, float] = {}
        self._lock = threading.Lock()

    def touch(self, key: Any, part: Any = None, at: float | None = None) -> None:
        """`at`: when the change was seen, if not now (it waited in a queue)."""
        now = self.clock() if at is None else at
        with self._lock:
            self._first.setdefault(key, now)
            self._last.setdefault(key, {})[part] = now

    def schedule(self, key: Any, at: float) -> None:
        with self._lock:
            self._at[key] = min(at, self._at.get(key, at))

    def _due_at(self, key: Any) -> float:
        times = []
        if key in self._last:
            quiet = min(self._last[key].values()) + self.quiet  # the part quiet the longest
            times.append(min(quiet, self._first[key] + self.max_wait))
        if key in self._at:
            times.append(self._at[key])
        return min(times)

    def next_deadline(self) -> float | None:
        with self._lock:
            keys = set(self._last) | set(self._at)
            return min((self._due_at(k) for k in keys), default=None)

    def pop_due(self) -> list[Any]:
        now = self.clock()
        with self._lock:
            keys = set(self._last) | set(self._at)
            due = sorted((k for k in keys if self._due_at(k) <= now), key=str)
            for key in due:
                self._first.pop(key, None)
                self._last.pop(key, None)
                self._at.pop(key, None)
            return due

    def pop_all(self) -> list[Any]:
        with self._lock:
            keys = sorted(set(self._last) | set(self._at), key=str)
            self._first.clear()
            self._last.clear()
            self._at.clear()
            return keys

    def pending(self) -> set[Any]:
        with self._lock:
            return set(self._last) | set(self._at)


class _Callback(FileSystemEventHandler):
    def __init__(self, handler: Callable[[FileSystemEvent], None]) -> None:
        self.handler = handler

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.handler(event)


class _Observed:
    """watchdog's observer where there is no inotify (macOS: FSEvents, one stream)."""

    def __init__(self) -> None:
        # Imported here: on Linux (inotify) a daemon never needs it, and holds it for weeks.
        from watchdog.observers import Observer

        self.observer: Any = Observer()

    def start(self) -> None:
        self.observer.daemon = True
        self.observer.start()

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=5)

    def schedule(
        self, path: Path, kinds: list[type[FileSystemEvent]], handler: Callable[..., None]
    ) -> Any:
        return self.observer.schedule(
            _Callback(handler), str(path), recursive=False, event_filter=kinds
        )

    def unschedule(self, watch: Any) -> None:
        self.observer.unschedule(watch)

    def unschedule_all(self) -> None:
        self.observer.unschedule_all()


def _backend(on_overflow: Callable[[str], None]) -> Any:
    """One inotify descriptor and thread for every watch on Linux; watchdog's observer
    elsewhere. Either way the thread count does not grow with the watched folders."""
    if hasattr(os, "pipe2") and os.path.isdir("/proc/sys/fs/inotify"):
        from memoryd.daemon.inotify import Inotify

        return Inotify(on_overflow)
    return _Observed()


@dataclass(slots=True)
class WatchError:
    path: Path
    error: str
    limit: bool  # ENOSPC/EMFILE: the user's inotify limits are exhausted


@dataclass
class Watcher:
    """Owns the event backend; adds and removes non-recursive watches by real path."""

    sink: Callable[[Signal], None]
    on_overflow: Callable[[str], None] = lambda _detail: None
    observer: Any = field(default=None)
    _watches: dict[tuple[Path, bool], Any] = field(default_factory=dict)

    def start(self) -> None:
        self.observer = _backend(self.on_overflow)
        try:
            self.observer.start()
        except OSError:
            # No inotify instance to be had (fs.inotify.max_user_instances): watchdog's
            # observer asks for one a watch, so each that fails is reported and its dir
            # polled (see sync), as when a watch cannot be added.
            self.observer = _Observed()
            self.observer.start()

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()

    def watched(self) -> set[tuple[Path, bool]]:
        return set(self._watches)

    def add(self, path: Path, *, parent: bool) -> WatchError | None:
        """Watch a memory dir (`parent`: a folder where memory dirs appear)."""
        key = (path, parent)
        if key in self._watches:
            return None
        kinds = PARENT_EVENTS if parent else MEMORY_DIR_EVENTS

        def handler(event: FileSystemEvent) -> None:
            for signal in classify(event, path, parent=parent):
                self.sink(signal)

        try:
            watch = self.observer.schedule(path, kinds, handler)
        except OSError as error:
            limit = error.errno in (errno.ENOSPC, errno.EMFILE)
            return WatchError(path, error.strerror or str(error), limit)
        self._watches[key] = watch
        return None

    def remove(self, path: Path, *, parent: bool) -> None:
        watch = self._watches.pop((path, parent), None)
        if watch is not None:
            # The kernel may have dropped it already (the folder is gone).
            with contextlib.suppress(KeyError, OSError):
                self.observer.unschedule(watch)

    def sync(self, wanted: Iterable[tuple[Path, bool]]) -> list[WatchError]:
        """Make the set of watches exactly `wanted`; return the ones that could not be added."""
        wanted = set(wanted)
        for path, parent in self.watched() - wanted:
            self.remove(path, parent=parent)
        errors = []
        for path, parent in sorted(wanted - self.watched(), key=lambda k: (str(k[0]), k[1])):
            problem = self.add(path, parent=parent)
            if problem is not None:
                errors.append(problem)
        return errors
