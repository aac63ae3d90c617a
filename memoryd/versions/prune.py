"""The version store's size: retention and cap, and the rows no listed version needs.

A prune is one transaction: no scan in any process can find an object stored while the prune
drops it, nor add a row naming one the prune is about to drop.
"""

import hashlib
import os
import sqlite3
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.storage import fsops
from memoryd.versions import retention
from memoryd.versions.records import OBJECT_MAX, Record, versions

if TYPE_CHECKING:
    from memoryd.versions.kept import VersionStore

DAY = 86400.0


@dataclass(slots=True)
class PruneResult:
    removed: list[str] = field(default_factory=list)  # object shas
    freed: int = 0
    kept_bytes: int = 0
    lines_dropped: int = 0  # history rows dropped (compaction)
    busy: bool = False  # kept for callers: a prune now waits for a writer's transaction
    repaired: int = 0  # current versions whose bytes were missing, stored again from the file


def histories(store: "VersionStore", path: Path) -> dict[str, list[Record]]:
    """A dir's rows by name (read once, not once a name), oldest first."""
    by_name: dict[str, list[Record]] = {}
    for rec in store.records(path):
        by_name.setdefault(rec.f, []).append(rec)
    return by_name


def prune(store: "VersionStore", now: float | None = None) -> PruneResult:
    """Drop versions past `keep_days` after they were replaced or deleted, then, while the
    store is over `max_bytes`, replaced versions of files that still exist (oldest first),
    then older replaced versions of deleted files; never a current version, and never the
    last version of a deleted file within keep_days. Objects no kept version names go."""
    with store.db.transaction() as tx:
        store.conn()
        result = _prune(store, tx, store.clock() if now is None else now)
        fsops.crash_point("versions.pruned")  # all of the prune is done, or none of it
        return result


@dataclass(slots=True)
class _Plan:
    needed: set[str] = field(default_factory=set)
    # Per object that only ended versions name: (tier, when it ended); tier 0: an old
    # version of a file that exists; 1: of a deleted file, not its last.
    candidates: dict[str, tuple[int, float]] = field(default_factory=dict)
    stale: list[Path] = field(default_factory=list)  # dirs with rows to compact
    missing: list[tuple[Path, str, str, bool]] = field(default_factory=list)


def _look(store: "VersionStore", path: Path, ages: retention.Ages, sizes: dict[str, int],
          plan: _Plan) -> None:  # fmt: skip
    """One dir's part of the plan: what its versions need, what may go, what is missing.
    A version deleted outside memoryd is the last of a deleted file for its retention even
    when a new file has taken the name since (`deleted` lists it; its restore names it)."""
    keep = store.keep_days * DAY
    old = False
    for recs in histories(store, path).values():
        found = versions(recs, sizes.__contains__)
        gone = bool(found) and found[-1].until is not None
        if found and found[-1].until is None:
            now_v = found[-1]
            if not now_v.stored or sizes[now_v.sha256] != now_v.size:
                plan.missing.append((path, recs[-1].f, now_v.sha256, now_v.stored))
        for i, v in enumerate(found):
            young = v.until is not None and ages.young(path, recs[0].f, v.sha256, v.until, keep)
            if v.until is not None and not young:
                old = not ages.young(path, recs[0].f, v.sha256, v.until, 2 * keep) or old
            deleted_here = (i == len(found) - 1 and gone) or v.ended_by == "deleted"
            if v.until is None or (young and deleted_here):
                plan.needed.add(v.sha256)
            elif young:
                was = plan.candidates.get(v.sha256)
                if was is None or (int(gone), v.until) > was:
                    plan.candidates[v.sha256] = (int(gone), v.until)
    if old:
        plan.stale.append(path)


def _prune(store: "VersionStore", tx: sqlite3.Connection, now: float) -> PruneResult:
    # How long ago a version ended is the time memoryd watched pass since it found it ended,
    # never the wall clock's reading alone (see `retention`).
    ages = retention.Ages(tx, store.observe_clock(now))
    sizes = store.object_sizes()
    plan = _Plan()
    for path in store.known_dirs():
        _look(store, path, ages, sizes, plan)
    ages.save()
    result = PruneResult(repaired=_store_missing(store, plan.missing))
    needed, candidates = plan.needed, plan.candidates
    doomed = [s for s in sizes if s not in needed and s not in candidates]  # past retention
    total = sum(sizes.values()) - sum(sizes[s] for s in doomed)
    for sha, _ in sorted(
        ((s, c) for s, c in candidates.items() if s not in needed and s in sizes),
        key=lambda item: item[1],
    ):
        if total <= store.max_bytes:
            break
        doomed.append(sha)
        total -= sizes[sha]
    dropped = store.drop_objects(set(doomed))
    result.removed = [sha for sha in doomed if sha in dropped]
    result.freed = sum(sizes[sha] for sha in result.removed)
    result.kept_bytes = total
    kept = sizes.keys() - set(result.removed)
    for path in plan.stale:
        result.lines_dropped += compact(store, path, now, kept)
    return result


def _store_missing(store: "VersionStore", missing: Sequence[tuple[Path, str, str, bool]]) -> int:
    """Store again the bytes of current versions the rows name but the store lacks (objects
    found damaged, a store restored from an older backup): no scan would, since each such
    file's version is already recorded. Read from the file while it still holds those bytes;
    returns how many. A damaged one is said, stored again or not."""
    done = 0
    for path, name, sha, damaged in missing:
        if damaged:
            store._say(
                f"{store.db.path}: the kept bytes of {sha} are damaged (their size is not that "
                f"of the version of {path / name}); stored again from the file if it still "
                "holds those bytes, else that version cannot be restored"
            )
        try:
            dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = bytes_if(dir_fd, name, sha)  # None: it changed, and the next scan reads it
        finally:
            os.close(dir_fd)
        if data is not None:
            store.store_object(data, sha, again=damaged)
            done += 1
    return done


def bytes_if(dir_fd: int, name: str, sha: str) -> bytes | None:
    """The file's bytes if they are the version `sha` (a regular file, not too big)."""
    try:
        data, _ = fsops.read_regular(dir_fd, name, OBJECT_MAX)
    except (OSError, ValueError):
        return None
    return data if hashlib.sha256(data).hexdigest() == sha else None


def compact(
    store: "VersionStore", path: Path, now: float | None = None, stored: Set[str] | None = None
) -> int:
    """Drop from a dir's history the rows no listed version needs any more: for each name,
    every row before its oldest version still restorable, current or ended less than twice
    keep_days ago (older versions whose bytes were pruned, and the moves, deletions and
    restores that ended them), all of a name none of whose versions is. Returns the rows
    dropped."""
    now = store.clock() if now is None else now
    stored = store.object_sizes().keys() if stored is None else stored
    with store.db.transaction() as tx:
        store.conn()
        rows = tx.execute(
            "SELECT l.seq, l.t, l.f, l.h, l.n, l.e, l.by, l.dir FROM versions_log l JOIN "
            "versions_dirs d ON d.id = l.dir WHERE d.path = ? ORDER BY l.seq",
            (str(path),),
        ).fetchall()
        by_name: dict[str, list[tuple[int, Record]]] = {}
        for seq, t, f, h, n, e, by, _ in rows:
            by_name.setdefault(f, []).append((seq, Record(t, f, h, n, e, by)))
        doomed: list[int] = []
        for items in by_name.values():
            cut = _first_needed(store, [rec for _, rec in items], now, stored)
            doomed.extend(seq for seq, _ in items[:cut])
        if not doomed:
            return 0
        tx.executemany("DELETE FROM versions_log WHERE seq = ?", [(seq,) for seq in doomed])
        tx.execute(
            "DELETE FROM versions_latest WHERE dir = ? AND f NOT IN "
            "(SELECT f FROM versions_log WHERE dir = ?)",
            (rows[0][7], rows[0][7]),
        )
        store.stale(path)
        return len(doomed)


def _first_needed(
    store: "VersionStore", recs: Sequence[Record], now: float, stored: Set[str]
) -> int:
    """Where one name's rows (oldest first) start to matter: the first row of its oldest
    version that is current, whose bytes are kept, or that ended less than twice keep_days
    ago (its bytes pruned, `history` still lists it as such for keep_days more); a trailing
    `restoring` stays (memoryd is about to write those bytes); len(recs) when nothing does."""
    found: list[tuple[int, str, float | None]] = []  # (first row, sha256, ended when)
    open_sha: str | None = None
    for i, rec in enumerate(recs):
        ends = rec.e in ("gone", "moved") or (rec.e == "seen" and rec.h != open_sha)
        if ends and open_sha is not None:
            found[-1] = (found[-1][0], found[-1][1], rec.t)
            open_sha = None
        if rec.e == "seen" and open_sha is None:
            found.append((i, rec.h, None))
            open_sha = rec.h
    listed = 2 * store.keep_days * DAY
    cut = len(recs)
    for first, sha, until in found:
        if until is None or now - until < listed or sha in stored:
            cut = first
            break
    if recs and recs[-1].e == "restoring":
        cut = min(cut, len(recs) - 1)
    return cut
