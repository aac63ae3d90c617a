"""Which memoryd holds the instance lock: light to import, for `memoryd status`."""

import fcntl
import os

from memoryd.paths import AppPaths


def lock_holder(paths: AppPaths) -> int | None:
    """The pid holding the instance lock, or None when no daemon runs."""
    try:
        # Non-blocking: a FIFO planted there must not hang `memoryd status`.
        fd = os.open(paths.lock_file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
