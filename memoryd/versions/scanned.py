"""What one scan's end adds to a dir's history: the rows of its new versions and of the
files gone since, and the outside changes among them (memoryd.versions.kept.end_scan)."""

import hashlib
from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any

from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.storage import fsops
from memoryd.versions.records import MEMORYD, OBJECT_MAX, OTHER

if TYPE_CHECKING:
    from memoryd.model.scanned import Scanned
    from memoryd.versions.kept import Row, Session, Told, VersionStore, _Dir

INDEX_FILES = (INDEX_NAME, ARCHIVE_NAME)  # kept as any memory, never counted toward an alarm
COUNTS: Mapping[str, Any] = {"alarm": 1}
# What a scan found: the names present, the files before it, the names it looked at (None:
# all of them).
Found = tuple[Set[str], Mapping[str, "Scanned"], Set[str] | None]


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
