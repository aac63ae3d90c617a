"""Claude Code's own consolidation lock (`.consolidate-lock`) in a memory dir."""

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass

from memoryd.discover.found import MemoryDir
from memoryd.paths import read_bounded

CLAUDE_LOCK = ".consolidate-lock"
CLAUDE_LOCK_FRESH = 3600.0

# As Claude Code 2.1.332 means it (its autoDream lock): held only while the file's mtime is under
# an hour old AND the PID its body starts with (`parseInt(body.trim(), 10)`) is alive and above
# 1. The file stays after a dream: its mtime is the last consolidation. Unlike Claude Code,
# memoryd counts EPERM from `kill(pid, 0)` as alive: deferring costs at most the hour.
_LOCK_PID = re.compile(rb"\s*([+-]?[0-9]+)")
_LOCK_READ = 64  # a PID, a newline and a timestamp: all Claude Code writes


def pid_alive(pid: int) -> bool:
    """Whether a process has this PID: `kill(pid, 0)` succeeds, or fails with EPERM."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):  # ESRCH; a number no PID can be
        return False
    return True


@dataclass(frozen=True, slots=True)
class ClaudeLock:
    """What a memory dir's `.consolidate-lock` says."""

    mtime: float  # Claude Code's last consolidation (or the start of the one under way)
    pid: int | None  # the PID its body names, if any
    held: bool  # fresh and its PID alive: Claude Code is consolidating the dir now

    @property
    def why(self) -> str:
        return f"Claude Code's {CLAUDE_LOCK} is held (PID {self.pid}, alive; under an hour old)"


def claude_lock(
    md: MemoryDir, now: float, alive: Callable[[int], bool] = pid_alive
) -> ClaudeLock | None:
    """The dir's `.consolidate-lock` (at its root only), or None when there is none (or it is
    no regular file: a link is not followed, a FIFO never opened)."""
    path = md.real_path / CLAUDE_LOCK
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        body = read_bounded(path, _LOCK_READ, follow=False, prefix=True)
    except OSError:
        return None
    found = _LOCK_PID.match(body)
    pid = int(found.group(1)) if found else None
    fresh = now - st.st_mtime < CLAUDE_LOCK_FRESH
    return ClaudeLock(st.st_mtime, pid, fresh and pid is not None and pid > 1 and alive(pid))


def lock_is_fresh(md: MemoryDir, now: float, alive: Callable[[int], bool] = pid_alive) -> bool:
    """Is Claude Code consolidating this dir itself (see `claude_lock`)?"""
    lock = claude_lock(md, now, alive)
    return lock is not None and lock.held
