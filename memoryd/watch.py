"""File events: watchdog wiring, a pure event filter, the overflow hook and the Debouncer.

The watchdog handler runs on the observer thread and must only filter and enqueue; every bit of
file work happens later on the worker. Events are hints, never the truth: the worker re-stats.
"""

import contextlib
import errno
import logging
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
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileOpenedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from memoryd.fsops import is_own_temp
from memoryd.indexing.scan import TRASH_DIR, skip_reason

# Only close-after-write, delete and move: not every open, attribute change and modify. This is
# what keeps a 10,000-file checkout from overflowing the inotify queue (DESIGN §10). An atomic
# save arrives as a move onto the file; an in-place write as a close-after-write.
# FileCreatedEvent: watchdog's name for a file moved in from a folder it does not watch (a
# restore from the trash, a `mv` from elsewhere), an unpaired IN_MOVED_TO. Not for IN_CREATE,
# which on Linux is kept out of these watches (see _observer): every new file also closes.
MEMORY_DIR_EVENTS: list[type[FileSystemEvent]] = [
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
READ_EVENTS: list[type[FileSystemEvent]] = [FileClosedNoWriteEvent]
READERS_EVENTS: list[type[FileSystemEvent]] = [FileOpenedEvent, FileClosedNoWriteEvent]
READERS_SUFFIX = ".readers"  # the state dir's files memoryd commands hold open while reading
# A symlink made where memory dirs live is a file event (a link to a memory dir elsewhere).
PARENT_EVENTS: list[type[FileSystemEvent]] = [
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
]
INOTIFY_LOGGER = "watchdog.observers.inotify_c"


class Kind(Enum):
    DIRTY = "dirty"  # a memory dir changed: re-stat it
    READ = "read"  # an agent read a memory file (the consult signal)
    STRUCTURE = "structure"  # a folder appeared or went where memory dirs live: rediscover
    LOST = "lost"  # the watched folder itself was deleted or moved: its watch is dead
    READER_OPENED = "reader_opened"  # a memoryd command began reading a dir (name: its file)
    READER_CLOSED = "reader_closed"  # ... and ended


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
        if isinstance(event, FileClosedNoWriteEvent):
            if skip_reason(name) is None:
                out.append(Signal(Kind.READ, watched_dir, name))
            continue
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

    def touch(self, key: Any, part: Any = None) -> None:
        now = self.clock()
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


class OverflowHook(logging.Handler):
    """watchdog only logs an inotify queue overflow; turn that warning into a callback."""

    def __init__(self, on_overflow: Callable[[str], None]) -> None:
        super().__init__(level=logging.WARNING)
        self.on_overflow = on_overflow

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "overflow" in message.lower():
            self.on_overflow(message)


def install_overflow_hook(on_overflow: Callable[[str], None]) -> OverflowHook:
    hook = OverflowHook(on_overflow)
    logger = logging.getLogger(INOTIFY_LOGGER)
    logger.addHandler(hook)
    logger.setLevel(min(logger.level or logging.WARNING, logging.WARNING))
    return hook


def classify_readers(event: FileSystemEvent) -> list[Signal]:
    """An event in the state dir: a readers file opened or closed, or nothing (pure)."""
    path = Path(os.fsdecode(event.src_path))
    if not path.name.endswith(READERS_SUFFIX):
        return []
    if isinstance(event, FileOpenedEvent):
        return [Signal(Kind.READER_OPENED, path.parent, path.name)]
    if isinstance(event, FileClosedNoWriteEvent):
        return [Signal(Kind.READER_CLOSED, path.parent, path.name)]
    return []


class _ReadersHandler(FileSystemEventHandler):
    def __init__(self, sink: Callable[[Signal], None]) -> None:
        self.sink = sink

    def on_any_event(self, event: FileSystemEvent) -> None:
        for signal in classify_readers(event):
            self.sink(signal)


class _Handler(FileSystemEventHandler):
    def __init__(self, watched: Path, parent: bool, sink: Callable[[Signal], None]) -> None:
        self.watched = watched
        self.parent = parent
        self.sink = sink

    def on_any_event(self, event: FileSystemEvent) -> None:
        for signal in classify(event, self.watched, parent=self.parent):
            self.sink(signal)


def _observer() -> Any:
    """The platform's observer; on Linux one whose memory-dir watches leave out IN_CREATE.

    Asking watchdog for FileCreatedEvent (to learn of files moved in from elsewhere) also asks
    the kernel for IN_CREATE on every new file, which a file's IN_CLOSE_WRITE reports anyway:
    in a 10,000-file checkout that is 10,000 more events for the same queue. Should a watchdog
    version not take the emitter this way, the watches simply get IN_CREATE too.
    """
    try:
        from watchdog.observers.inotify import InotifyEmitter, InotifyObserver
        from watchdog.observers.inotify_c import InotifyConstants
    except ImportError:  # not Linux
        return Observer()

    class MovesInEmitter(InotifyEmitter):
        def get_event_mask_from_filter(self) -> Any:
            mask = super().get_event_mask_from_filter()
            wanted = self._event_filter
            if wanted is not None and DirCreatedEvent not in wanted:
                return mask & ~InotifyConstants.IN_CREATE
            return mask

    observer = InotifyObserver()
    if getattr(observer, "_emitter_class", None) is InotifyEmitter:
        observer._emitter_class = MovesInEmitter
    return observer


@dataclass(slots=True)
class WatchError:
    path: Path
    error: str
    limit: bool  # ENOSPC/EMFILE: the user's inotify limits are exhausted


@dataclass
class Watcher:
    """Owns the watchdog observer; adds and removes non-recursive watches by real path."""

    sink: Callable[[Signal], None]
    reads: bool = True
    observer: Any = field(default=None)
    _watches: dict[tuple[Path, bool], Any] = field(default_factory=dict)
    _readers: dict[tuple[Path, bool], Any] = field(default_factory=dict)  # kept out of sync()

    def start(self) -> None:
        self.observer = _observer()
        self.observer.daemon = True
        self.observer.start()

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)

    def watched(self) -> set[tuple[Path, bool]]:
        return set(self._watches)

    def add(self, path: Path, *, parent: bool, reads: bool | None = None) -> WatchError | None:
        """Watch a memory dir (`parent`: a folder where memory dirs appear). `reads`: whether
        its read events are wanted, when not as the watcher was made."""
        key = (path, parent)
        if key in self._watches:
            return None
        with_reads = self.reads if reads is None else reads
        kinds = PARENT_EVENTS if parent else MEMORY_DIR_EVENTS + (READ_EVENTS if with_reads else [])
        try:
            watch = self.observer.schedule(
                _Handler(path, parent, self.sink), str(path), recursive=False, event_filter=kinds
            )
        except OSError as error:
            limit = error.errno in (errno.ENOSPC, errno.EMFILE)
            return WatchError(path, error.strerror or str(error), limit)
        self._watches[key] = watch
        return None

    def add_readers(self, state_dirs: Path) -> WatchError | None:
        """Watch the state dir where memoryd commands hold readers files open while they read
        a memory dir (see StateStore.reading), so their reads are not taken for an agent's."""
        key = (state_dirs, True)
        if key in self._readers:
            return None
        try:
            self._readers[key] = self.observer.schedule(
                _ReadersHandler(self.sink),
                str(state_dirs),
                recursive=False,
                event_filter=READERS_EVENTS,
            )
        except OSError as error:
            return WatchError(state_dirs, error.strerror or str(error), False)
        return None

    def rewatch(self, path: Path, *, reads: bool) -> WatchError | None:
        """Watch a memory dir again, with or without its read events. Events in between are
        lost: the caller looks at the dir again in full afterwards."""
        if (path, False) not in self._watches:
            return None
        self.remove(path, parent=False)
        return self.add(path, parent=False, reads=reads)

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
