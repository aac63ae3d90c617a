"""The process around the daemon's loop: its instance lock, its own folders, its heap."""

import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from memoryd.errors import MemorydError
from memoryd.paths import AppPaths, NotRegularFile, ensure_private_dir, regular_fd
from memoryd.storage import fsops


class AlreadyRunning(MemorydError):
    pass


def acquire_lock(paths: AppPaths) -> int:
    """One instance per user: an exclusive flock on a file in the state dir, holding our pid."""
    ensure_private_dir(paths.state_dir)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        regular_fd(fd, paths.lock_file)  # a FIFO opened O_RDWR never blocks, but is no lock file
    except NotRegularFile as error:
        raise MemorydError(
            f"{paths.lock_file} is {error.what}, not memoryd's lock file: remove it and start again"
        ) from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            f"memoryd is already running (pid {holder}, lock {paths.lock_file}); stop it first "
            "(`systemctl --user stop memoryd`, or kill that pid)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


# glibc's (None elsewhere, macOS or musl: nothing to do), from the process's own symbols.
_malloc_trim: Callable[[int], int] | None = fsops.libc_function("malloc_trim")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_ARENA_MAX = -8


def tune_malloc() -> None:
    """Keep glibc's heap from holding what a long-running daemon has freed.

    One arena: by default a thread that allocates gets an arena of its own (up to 8 per core),
    and one that ran a 10,000-file pass keeps its fragments (~7 MB of RSS measured, for an
    idle daemon, when passes ran on a thread of their own). The event thread allocates too;
    its events and the loop's passes rarely overlap, so sharing one lock costs nothing.
    A fixed mmap threshold: a pass copies a few 10,000-entry containers (hundreds of KB
    each); glibc would otherwise raise the threshold after the first frees and carve them
    from the heap, where they leave holes that malloc_trim cannot return (RSS grew ~6 MB
    over 30 changes). Mapped, each goes back to the system when freed.
    """
    mallopt = fsops.libc_function("mallopt")
    if mallopt is not None:  # not glibc: none of this applies
        mallopt(M_ARENA_MAX, 1)
        mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def return_freed_memory() -> None:
    """Hand memory freed after a big pass back to the OS (glibc keeps it otherwise).

    A first pass over 10,000 files allocates tens of MB that are freed but stay in the
    process's heap; for a daemon that then idles for weeks, that is RSS for nothing.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


class FolderUnusable(MemorydError):
    pass


def check_own_folders(paths: AppPaths) -> None:
    """Raise FolderUnusable naming the first of memoryd's own folders the daemon cannot write
    (called once the instance lock, a file in the state dir, is held): it would otherwise die
    on its first save, or run for weeks with no audit trail."""
    state = paths.state_dir
    for folder, what, probe in (
        (state / "dirs", "state", None),
        (state / "journal", "state", None),
        (paths.log_dir, "log", paths.audit_log.name),
    ):
        try:
            ensure_private_dir(folder)
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(folder))
            if probe is not None:  # opened as the audit writer opens it; nothing written
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                os.close(os.open(folder / probe, flags, 0o600))
        except OSError as error:
            raise unusable(folder if what == "log" else state, what, error) from error


def unusable(folder: Path, what: str, error: OSError) -> FolderUnusable:
    where = f": {error.filename}" if error.filename and str(error.filename) != str(folder) else ""
    return FolderUnusable(
        f"{folder}: memoryd cannot write its {what} folder ({error.strerror}{where}). Make it "
        "a folder this user can write (free disk space, fix its permissions, or move aside "
        "a file in its place), or point XDG_STATE_HOME elsewhere; then start memoryd again."
    )
