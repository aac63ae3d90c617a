"""One memory dir as the daemon keeps it (`DirSession`), and the checks made on its folder."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.discover.found import MemoryDir
from memoryd.indexing.read import Held
from memoryd.indexing.scan import DirScan


@dataclass(slots=True)
class DirSession:
    """One memory dir as the daemon keeps it, from its discovery until it is lost: what the
    events reported since its last pass and what that pass left for the next (all of it the
    loop's: one thread reads and writes it). A dir that goes takes all of it with it; one
    found again starts a session afresh."""

    md: MemoryDir
    identity: tuple[int, int]
    watch: str = "ok"  # ok | polling (no watch could be added) | lost
    last_index_write: float = 0.0
    last_status: str = ""
    reading: tuple[float, float] = (0.0, 0.0)  # when memoryd itself last read the dir
    scan: DirScan | None = None  # the last full picture of the dir, for incremental passes
    held: Held | None = None  # what the last pass left for one over just the changed files
    managed: bool = False  # whether memoryd managed its index at the last pass
    # What the events said since the last pass:
    changed: set[str] | None = None  # the names events reported since the last pass
    # Look at every file next time, not just those events named (a watch made anew).
    rescan: bool = False
    # The identity (inode, size, mtime_ns) each index file memoryd wrote has: its events
    # are memoryd's own, not news.
    own_writes: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def take_changes(self) -> tuple[set[str] | None, bool]:
        """The names reported since the last pass, and whether to look at every file."""
        names, self.changed = self.changed, None
        rescan, self.rescan = self.rescan, False
        return names, rescan

    def forget_view(self) -> None:
        """The files may have changed unseen (a dream pass's moves, a lost watch): the next
        pass looks at the whole dir."""
        self.scan, self.held = None, None

    def is_own_write(self, name: str) -> bool:
        """Whether `name` holds the content memoryd itself just wrote (same file, size and
        mtime): its events are dropped."""
        expected = self.own_writes.get(name)
        if expected is None:
            return False
        try:
            st = os.lstat(self.md.real_path / name)
        except OSError:
            return False
        return (st.st_ino, st.st_size, st.st_mtime_ns) == expected


def identity_of(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
