"""One scan's part in a dir's history: its reads (`Session`, recorded in one transaction
when the scan ends), and what they add (memoryd.versions.kept.end_scan): the rows of its new
versions and of the files gone since, and the outside changes among them."""

import array
import hashlib
import sqlite3
from collections.abc import Iterator, Mapping, Set
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.storage import fsops
from memoryd.versions.records import MEMORYD, OBJECT_MAX, OTHER

if TYPE_CHECKING:
    from memoryd.model.scanned import Scanned
    from memoryd.versions.kept import Row, Told, VersionStore, _Dir

INDEX_FILES = (INDEX_NAME, ARCHIVE_NAME)  # kept as any memory, never counted toward an alarm
COUNTS: Mapping[str, Any] = {"alarm": 1}
# What a scan found: the names present, the files before it, the names it looked at (None:
# all of them).
Found = tuple[Set[str], Mapping[str, "Scanned"], Set[str] | None]


class Session:
    """One scan's reads, recorded in one transaction when the scan ends (`begin_scan`)."""

    def __init__(self, store: "VersionStore", path: Path) -> None:
        self.store = store
        self.path = path
        # What each read found, in columns (a tuple a read, made among the scan's long-lived
        # objects, left the daemon's heap bigger after a first start); the names and sha256
        # strings are the scan's own. Kind: 0 a memory, 1 a note.
        self.names: list[str] = []
        self.shas: list[str] = []
        self.sizes = array.array("q")
        self.kinds = bytearray()
        # New objects' bytes, copied into one buffer: each read's own bytes are freed when
        # the scan is done with them, as without the store. Their sha256 and place in it.
        self.held: list[str] = []
        self.held_at = array.array("q")
        self.spool = bytearray()
        self._pending: set[str] = set()
        self.known: dict[str, str] | None = None

    def reads(self) -> Iterator[tuple[str, str, int, int]]:
        """Each read: its name, sha256, size and kind (1: a note)."""
        return zip(self.names, self.shas, self.sizes, self.kinds, strict=True)

    def objects(self, view: memoryview) -> Iterator[tuple[str, int, memoryview]]:
        """Each new object held: its sha256, size and bytes (a view into the spool)."""
        ends = [*self.held_at[1:], len(self.spool)] if self.held else []
        for sha, start, end in zip(self.held, self.held_at, ends, strict=True):
            yield sha, end - start, view[start:end]

    def read(self, name: str, data: bytes, sha: str, kind: str) -> None:
        """scan.ScanSeen's: a scan read `name` and found it a memory or a note (`kind`)."""
        try:
            self._read(name, data, sha, kind)
        except sqlite3.OperationalError as error:
            self.store._say(f"{self.store.db.path}: {error}")

    def end(
        self,
        dir_fd: int,
        files: Mapping[str, "Scanned"],
        present: Set[str],
        before: Mapping[str, "Scanned"],
        only: Set[str] | None,
    ) -> None:
        """scan.ScanSeen's: the scan is done; what it read and found is recorded."""
        store = self.store
        if getattr(store._scans, "session", None) is self:
            store._scans.session = None
        try:
            store._guard(store.end_scan, self, dir_fd, files, present, before, only)
        finally:
            self.abort()

    def _read(self, name: str, data: bytes, sha: str, kind: str) -> None:
        if self.known is None:
            self.known = self.store.seen_of(self.path)
        if self.known.get(name) == sha:
            return  # the version the store has (a restart without a parse cache)
        self.names.append(name)
        self.shas.append(sha)
        self.sizes.append(len(data))
        self.kinds.append(kind != "memory")
        if sha in self._pending:
            return
        # Held even when the store has these bytes now: a prune in another process may drop
        # them before this scan's transaction, which then stores them again (INSERT OR IGNORE).
        self._pending.add(sha)
        self.held.append(sha)
        self.held_at.append(len(self.spool))
        self.spool += data

    def abort(self) -> None:
        """The scan ended (or raised): what it held goes."""
        self.held, self.held_at, self.spool = [], array.array("q"), bytearray()


def rows_of(
    store: "VersionStore", d: "_Dir", session: "Session", found: Found, now: float
) -> tuple[list["Row"], list["Told"]]:
    """The rows a scan adds (new versions, then the files gone) and its outside changes."""
    present, before, only = found
    rows: list[Row] = []
    told: list[Told] = []
    for name, sha, size, note in session.reads():
        had = d.seen.get(name)
        if had == sha:
            continue
        by = OTHER
        if had is None and d.other.get(name) == (sha, "restoring"):
            by = MEMORYD  # the bytes memoryd announced it was writing back
        extra: Mapping[str, Any] | None = None
        if had is not None:
            prev = before.get(name)
            counts = not note or (prev is not None and prev.kind == "memory")
            told.append(("rewritten", name, sha, had, size, counts))
            extra = COUNTS if counts else None
        rows.append((now, name, sha, size, "seen", by, extra))
    if only is None:
        gone = [n for n in d.seen if n not in present]
    else:
        gone = [n for n in only if n in d.seen and n not in present]
    arrived: dict[str, str] = {}  # sha -> a name it came under (a rename's other half)
    for r in rows:
        arrived.setdefault(r[2], r[1])
    for name in sorted(gone):
        sha = d.seen[name]
        prev = before.get(name)
        # An index file is in no scan's files: its size is its stored version's.
        size = prev.size if prev is not None else store.stored_size(sha)
        if sha in arrived:
            extra = {"to": arrived[sha]}  # renamed: nothing was lost
        else:
            # Memories count toward the alarm, never the index files memoryd rebuilds.
            counts = name not in INDEX_FILES and (prev is None or prev.kind == "memory")
            told.append(("deleted", name, sha, "", size, counts))
            extra = COUNTS if counts else None
        rows.append((now, name, sha, size, "gone", OTHER, extra))
    return rows, told


def backfill(
    session: "Session", dir_fd: int, files: Mapping[str, "Scanned"], seen: Mapping[str, str]
) -> None:
    """Files a full scan took from its cache that the store never recorded (a cache older
    than the store, a history pruned or lost): read once, so that each has its version."""
    read = set(session.names)
    for name, info in files.items():
        if info.kind not in ("memory", "note") or name in seen or name in read:
            continue
        try:
            data, _ = fsops.read_regular(dir_fd, name, OBJECT_MAX)
        except (OSError, ValueError):
            continue
        sha = hashlib.sha256(data).hexdigest()
        if sha == info.sha256:  # else it changed since: the next scan reads it
            session._read(name, data, sha, info.kind)
