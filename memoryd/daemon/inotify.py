"""Every watch on one inotify descriptor read by one thread (Linux).

watchdog's inotify observer gives each watched folder a descriptor and two threads (its
emitter and the buffer that pairs moves): 61 threads for 31 dirs. Here every folder is a
watch of one descriptor, so the daemon's thread count does not grow with its dirs. Raw events
are turned into watchdog's event classes, so `watch.classify` reads them as it reads
watchdog's own. A move is not paired: its two halves read as a delete and a create, which
name the same files for memoryd's purposes (each changed name is looked at again).
"""

import contextlib
import ctypes
import errno
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

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
)

IN_OPEN, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x20, 0x08, 0x10
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_ISDIR = 0x4000, 0x8000, 0x1000000, 0x40000000
IN_CLOEXEC, IN_NONBLOCK = 0o2000000, 0o4000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

# What each watchdog event class asks of the kernel (a watch's mask is their union).
MOVES = IN_MOVED_FROM | IN_MOVED_TO
MASKS: dict[type[FileSystemEvent], int] = {
    FileClosedEvent: IN_CLOSE_WRITE,
    FileClosedNoWriteEvent: IN_CLOSE_NOWRITE,
    FileOpenedEvent: IN_OPEN,
    FileCreatedEvent: IN_MOVED_TO,  # a file moved in (IN_CREATE is asked by DirCreatedEvent)
    DirCreatedEvent: IN_CREATE | IN_MOVED_TO,
    FileDeletedEvent: IN_DELETE | IN_MOVED_FROM,
    DirDeletedEvent: IN_DELETE | IN_MOVED_FROM,
    FileMovedEvent: MOVES,
    DirMovedEvent: MOVES,
}
# A move's halves come as a delete and a create: a caller asking for moves gets those.
HALVES: dict[type[FileSystemEvent], tuple[type[FileSystemEvent], ...]] = {
    FileMovedEvent: (FileDeletedEvent, FileCreatedEvent),
    DirMovedEvent: (DirDeletedEvent, DirCreatedEvent),
}
SELF = IN_DELETE_SELF | IN_MOVE_SELF  # the folder itself went: asked by every watch

Handler = Callable[[FileSystemEvent], None]


def event_of(mask: int, path: str) -> FileSystemEvent | None:
    """The watchdog event a raw inotify event stands for (pure)."""
    is_dir = bool(mask & IN_ISDIR)
    if mask & (IN_DELETE | IN_MOVED_FROM):
        return DirDeletedEvent(path) if is_dir else FileDeletedEvent(path)
    if mask & (IN_CREATE | IN_MOVED_TO):
        return DirCreatedEvent(path) if is_dir else FileCreatedEvent(path)
    if mask & IN_CLOSE_WRITE:
        return FileClosedEvent(path)
    if mask & IN_CLOSE_NOWRITE:
        return FileClosedNoWriteEvent(path)
    if mask & IN_OPEN:
        return FileOpenedEvent(path)
    return None


def parse(buffer: bytes) -> list[tuple[int, int, str]]:
    """(wd, mask, name) of each event in what one read returned (pure)."""
    out, offset = [], 0
    while offset + _HEADER.size <= len(buffer):
        wd, mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
        offset += _HEADER.size
        name = buffer[offset : offset + length].rstrip(b"\0")
        offset += length
        out.append((wd, mask, os.fsdecode(name)))
    return out


@dataclass(eq=False)
class Watch:
    """One caller's interest in a folder: the event classes it wants and who is told."""

    path: Path
    kinds: tuple[type[FileSystemEvent], ...]
    handler: Handler
    accepted: frozenset[type[FileSystemEvent]] = frozenset()

    def __post_init__(self) -> None:
        halves = (h for k in self.kinds for h in HALVES.get(k, ()))
        self.accepted = frozenset((*self.kinds, *halves))

    def mask(self) -> int:
        return SELF | IN_ONLYDIR | _union(MASKS.get(k, 0) for k in self.kinds)

    def deliver(self, mask: int, name: str) -> None:
        if mask & SELF:
            # Said as watchdog says it: the watched folder itself deleted.
            self.handler(DirDeletedEvent(os.fsdecode(self.path)))
            return
        if not name:  # the folder itself read (a listing): nothing memoryd asks about
            return
        event = event_of(mask, os.path.join(self.path, name))
        if event is not None and type(event) in self.accepted:
            self.handler(event)


def _union(masks: Iterable[int]) -> int:
    out = 0
    for mask in masks:
        out |= mask
    return out


class InotifyError(OSError):
    pass


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise InotifyError(code, os.strerror(code))
    return result


@dataclass(eq=False)
class Inotify:
    """One descriptor, one reading thread; `schedule` and `unschedule` as watchdog's observer.

    Folders are watched by path: the kernel gives one watch per folder and descriptor, so two
    interests in one folder (a memory dir that is also where others appear) share it, with
    the union of their masks."""

    on_overflow: Callable[[str], None]
    _fd: int = -1
    _wake: tuple[int, int] = (-1, -1)
    _by_wd: dict[int, list[Watch]] = field(default_factory=dict)
    _wd_of: dict[Path, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._fd = _check(_lib().inotify_init1(IN_CLOEXEC | IN_NONBLOCK))
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._read_loop, name="inotify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        os.write(self._wake[1], b"x")
        self._thread.join(timeout=5)
        self._thread = None
        for fd in (self._fd, *self._wake):
            os.close(fd)

    def schedule(
        self, path: Path, kinds: Iterable[type[FileSystemEvent]], handler: Handler
    ) -> Watch:
        watch = Watch(path, tuple(kinds), handler)
        with self._lock:
            wd = self._wd_of.get(path)
            others = self._by_wd.get(wd, []) if wd is not None else []
            new_wd = self._add(path, [*others, watch])
            if wd is not None and new_wd != wd:  # the folder was replaced: all move to it
                self._by_wd.pop(wd, None)
            self._wd_of[path] = new_wd
            self._by_wd[new_wd] = [*others, watch]
        return watch

    def unschedule(self, watch: Watch) -> None:
        with self._lock:
            wd = self._wd_of.get(watch.path)
            if wd is None:
                return
            rest = [w for w in self._by_wd.get(wd, []) if w is not watch]
            if rest:
                self._by_wd[wd] = rest
                with contextlib.suppress(OSError):  # the folder went: the kernel dropped it
                    self._add(watch.path, rest)
                return
            self._by_wd.pop(wd, None)
            self._wd_of.pop(watch.path, None)
            _lib().inotify_rm_watch(self._fd, wd)  # (EINVAL when the kernel dropped it)

    def unschedule_all(self) -> None:
        with self._lock:
            for wd in self._by_wd:
                _lib().inotify_rm_watch(self._fd, wd)
            self._by_wd.clear()
            self._wd_of.clear()

    def _add(self, path: Path, watches: list[Watch]) -> int:
        mask = _union(w.mask() for w in watches)
        return _check(_lib().inotify_add_watch(self._fd, os.fsencode(path), mask))

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake[0] in ready:
                return
            try:
                buffer = os.read(self._fd, 256 * 1024)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                raise
            self._dispatch(parse(buffer))

    def _dispatch(self, events: list[tuple[int, int, str]]) -> None:
        for wd, mask, name in events:
            if mask & IN_Q_OVERFLOW:
                self.on_overflow("inotify queue overflowed; file events were lost")
                continue
            with self._lock:
                watches = list(self._by_wd.get(wd, ()))
                if mask & IN_IGNORED:  # the kernel dropped the watch (its folder went)
                    self._forget(wd)
            for watch in watches:
                watch.deliver(mask, name)

    def _forget(self, wd: int) -> None:
        for watch in self._by_wd.pop(wd, []):
            if self._wd_of.get(watch.path) == wd:
                del self._wd_of[watch.path]
