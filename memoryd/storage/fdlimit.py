"""Whether an error means the process ran out of open files, and the message that says so.

SQLite reports a file it could not open as "unable to open database file", whatever the
reason, and a caller's generic advice (free disk space, fix permissions) is then wrong: at the
open-files limit (`ulimit -n`, often 1,024, 256 on macOS) neither helps. This module tells the
case apart, by the error's errno or, for an error that carries none, by trying to open a few
files now.
"""

import contextlib
import errno
import os

_PROBE = 3  # the files a search index needs open: the database, its -wal and its -shm


def _limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _at_limit() -> int | None:
    """The errno met opening _PROBE more files now (EMFILE, ENFILE), or None."""
    held: list[int] = []
    try:
        for _ in range(_PROBE):
            held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as error:
        return error.errno if error.errno in (errno.EMFILE, errno.ENFILE) else None
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)
    return None


def out_of_files(error: BaseException) -> str | None:
    """What to say when `error` came of too many open files (None when it did not)."""
    code = error.errno if isinstance(error, OSError) else None
    if code not in (errno.EMFILE, errno.ENFILE):
        code = _at_limit()
    if code == errno.ENFILE:
        return (
            "too many open files on this system (its file table is full): close programs "
            "holding many files, or raise the system's limit (fs.file-max), then rerun"
        )
    if code == errno.EMFILE:
        limit = _limit()
        at = f" (this process may open {limit})" if limit is not None else ""
        return (
            f"too many open files{at}: raise the limit with `ulimit -n` (e.g. "
            "`ulimit -n 4096`) in the shell or service that starts memoryd, then rerun"
        )
    return None
