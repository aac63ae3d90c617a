"""How an index pass ended (`IndexStatus`, `IndexOutcome`)."""

from dataclasses import dataclass, field
from enum import StrEnum

from memoryd.discover.found import MemoryDir
from memoryd.indexing.read import Held, Snapshot
from memoryd.indexing.scan import DirScan
from memoryd.model.index import Ownership
from memoryd.model.index_edit import IndexEdit

CONFLICT_RETRIES = 3


class IndexStatus(StrEnum):
    """How an index pass ended (a str: JSON output and audit rows carry the value)."""

    UNCHANGED = "unchanged"  # nothing to do, nothing written
    UPDATED = "updated"  # written and verified
    WOULD_CHANGE = "would_change"  # --check or a dry run: an update would write (see `diff`)
    UNMANAGED = "unmanaged"  # not memoryd's to edit (see `message`)
    CONFLICT = "conflict"  # another writer kept changing it: nothing was lost, nothing written
    BUSY = "busy"  # another memoryd process holds the dir (the daemon looks again)
    SETTLING = "settling"  # an index file is being written by another program
    ERROR = "error"  # the write failed, or what was written failed verification


@dataclass(slots=True)
class IndexOutcome:
    dir: MemoryDir
    status: IndexStatus
    ownership: Ownership | None = None
    edit: IndexEdit | None = None
    diff: str = ""
    message: str = ""
    problems: list[str] = field(default_factory=list)
    scan: DirScan | None = None
    retry_after: float | None = None  # when to look again (files in their grace, settling)
    held: Held | None = None  # for the next pass of a caller that keeps it (the daemon)
    held_edit: bool = False  # the pass took the held view (the changed files only), not the full
    # ownership_for_dream: what it read, for the dream pass to take rather than read again.
    snapshot: Snapshot | None = None

    @property
    def write_failed(self) -> bool:
        """Whether the index could not be written at all (a full disk, permissions), as
        opposed to written and then failing verification."""
        return self.status is IndexStatus.ERROR and not self.problems


BUSY_RETRY = 1.0  # seconds until a caller that would not wait for the dir's lock looks again
