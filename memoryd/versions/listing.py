"""What a person asks of the version store: a file's versions (`memoryd history`), the files
deleted outside memoryd (`trash list`), a diff between versions, and the alarm for a memory
dir deleted whole."""

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memoryd.discover import gitwork
from memoryd.versions.kept import Row, VersionStore
from memoryd.versions.prune import bytes_if
from memoryd.versions.records import (
    MEMORYD,
    OTHER,
    Record,
    Version,
    deleted_id,
    id_time,
    versions,
)
from memoryd.versions.scanned import INDEX_FILES


def versions_of(store: VersionStore, path: Path, name: str) -> list[Version]:
    """The versions of `name` in the dir at `path`, oldest first."""
    return versions([rec for rec in store.records(path) if rec.f == name], store.has_object)


@dataclass(frozen=True, slots=True)
class Deleted:
    """A memory file another process deleted (or moved out of its dir), restorable."""

    id: str
    dir: Path
    name: str
    sha256: str
    size: int
    when: float
    # Its whole dir is gone (`rm -rf` of the folder): no scan could record the file gone, so
    # `when` is the time it was last seen (see VersionStore.vanished).
    vanished: bool = False


def _deletions(
    recs: Sequence[Record],
) -> tuple[dict[tuple[str, str], Record], dict[str, list[tuple[str, Record]]], dict[str, Record]]:
    """The deletions by others the rows hold (name, sha256 -> the newest), those a
    `restoring` row took out (sha256 -> the name it was restored as, the deletion), and each
    name whose latest row is `seen`."""
    found: dict[tuple[str, str], Record] = {}
    names_of: dict[str, set[str]] = {}  # sha256 -> the names `found` holds it under
    held: dict[str, list[tuple[str, Record]]] = {}
    there: dict[str, Record] = {}
    for rec in recs:
        if rec.e == "seen":
            there[rec.f] = rec
        else:
            there.pop(rec.f, None)
        if rec.e == "gone" and rec.by == OTHER and "to" not in rec.extra and "git" not in rec.extra:
            found.pop((rec.f, rec.h), None)
            found[(rec.f, rec.h)] = rec
            names_of.setdefault(rec.h, set()).add(rec.f)
        elif rec.e == "seen":
            for name in names_of.pop(rec.h, ()):
                del found[(name, rec.h)]
            held.pop(rec.h, None)
        elif rec.e == "restoring":
            for name in names_of.pop(rec.h, ()):
                held.setdefault(rec.h, []).append((rec.f, found.pop((name, rec.h))))
        elif "restored_as" in rec.extra and found.pop((rec.f, rec.h), None) is not None:
            names_of[rec.h].discard(rec.f)  # an older memoryd's mark of a restore
    return found, held, there


def deleted(store: VersionStore, path: Path) -> list[Deleted]:
    """Files of the dir deleted outside memoryd, whose last version is kept, oldest first.

    A deletion stays listed until its bytes are back in the dir (read again under any name,
    or restored: in place under the name memoryd wrote them as), also when a new file has
    taken its name since: an agent that deletes a memory and writes another under the same
    name must not make the first unrestorable (the `memory.deleted_outside` row's restore
    command names it). When the dir itself is gone, so is every file the rows hold as there
    (`vanished`). A `restoring` row is written before the file, so it proves nothing by
    itself: a restore that failed or was killed before its swap leaves the deletion listed."""
    found, held, there = _deletions(store.records(path))
    if held:
        _unheld(path, held, found)
    vanished: set[tuple[str, str]] = set()
    if there and not os.path.isdir(path):  # gone, or something else in its place
        for rec in there.values():
            if (rec.f, rec.h) not in found:
                found[(rec.f, rec.h)] = rec
                vanished.add((rec.f, rec.h))
    rows = [r for r in sorted(found.values(), key=lambda r: (r.t, r.f)) if r.f not in INDEX_FILES]
    has = _stored_lookup(store, len(rows))
    return [
        Deleted(deleted_id(path, rec.f, id_time(rec)), path, rec.f, rec.h, rec.n, rec.t,
                (rec.f, rec.h) in vanished)
        for rec in rows
        if has(rec.h)
    ]  # fmt: skip


def _stored_lookup(store: VersionStore, count: int) -> Callable[[str], bool]:
    """Whether an object is stored, for `count` lookups: one at a time for a few, else the
    objects listed once (a dir deleted whole lists every file it held)."""
    if count <= 32:
        return store.has_object
    return store.object_sizes().keys().__contains__


def _unheld(
    path: Path,
    held: Mapping[str, Sequence[tuple[str, Record]]],
    found: dict[tuple[str, str], Record],
) -> None:
    """Put back into `found` each held deletion whose restore did not happen: the name it
    was restored as does not hold its bytes now (nothing read them back since either)."""
    holds: dict[tuple[str, str], bool] = {}
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        dir_fd = -1  # the dir is gone: so is every restore into it
    try:
        for sha, items in held.items():
            for restored_as, rec in items:
                key = (restored_as, sha)
                if key not in holds:
                    holds[key] = dir_fd >= 0 and bytes_if(dir_fd, restored_as, sha) is not None
                if not holds[key] and (rec.f, sha) not in found:
                    found[(rec.f, sha)] = rec
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def find_deleted(store: VersionStore, dirs: Sequence[Path], key: str) -> Deleted | None:
    """A deleted-elsewhere file by its id, or by its name or `<dir>/<name>` (the newest)."""
    found = [d for path in dirs for d in deleted(store, path)]
    for item in found:
        if item.id == key:
            return item
    fitting = [d for d in found if key in (d.name, str(d.dir / d.name))]
    return max(fitting, key=lambda d: d.when) if fitting else None


def render_versions(path: Path, name: str, found: Sequence[Version], now: float) -> str:
    """`memoryd history FILE`: one line per version, newest first (the file's path shown
    as a terminal should get it, its lines as lines)."""
    from memoryd.model.display import shown
    from memoryd.model.humanize import ago

    if not found:
        return (
            f"{shown(path / name)}: memoryd has kept no version of it (it never read it while "
            "running, or its versions are past versions.keep_days).\n"
        )
    lines = [f"{shown(path / name)}: {len(found)} version{'s' if len(found) != 1 else ''} kept"]
    for v in reversed(found):
        by = "memoryd" if v.by == MEMORYD else "another process"
        ended = f"{v.ended_by or 'replaced'} {ago(v.until, now)}" if v.until is not None else ""
        state = ended or "current"
        kept = "" if v.stored else "  (bytes pruned: not restorable)"
        lines.append(
            f"  {v.number:>3}  seen {ago(v.seen, now):<12} {v.size:>8} B  {v.sha256[:12]}  "
            f"by {by:<15}  {state}{kept}"
        )
    return "\n".join(lines) + "\n"


def diff(
    store: VersionStore,
    name: str,
    older: Version,
    newer: Version | None,
    current: bytes | None,
    *,
    gone: bool = False,
) -> str:
    """What changed from `older` to `newer` (None: the file as it is now; `gone`: it is not
    in the dir now, so every line went), as a unified diff."""
    import difflib

    a = store.read_object(older.sha256)
    if newer is None and gone:
        b: bytes | None = b""
    else:
        b = current if newer is None else store.read_object(newer.sha256)
    if a is None or (b is None and newer is not None):
        return f"{name}: the bytes of one of these versions are no longer kept\n"
    if b is None:
        return f"{name}: the file as it is now cannot be read (not a regular file, or too big)\n"
    left = f"{name}@{older.number}"
    now = "(deleted)" if gone else "(now)"
    right = f"{name}@{newer.number}" if newer is not None else f"{name} {now}"
    return "".join(
        difflib.unified_diff(
            a.decode("utf-8", "replace").splitlines(keepends=True),
            b.decode("utf-8", "replace").splitlines(keepends=True),
            left,
            right,
        )
    )


def dir_deleted(store: VersionStore, path: Path) -> int:
    """The memory dir at `path` was deleted whole (`rm -rf` under a running daemon): no scan
    can record its files gone, so this raises the alarm for them (memory.mass_change, shown
    by `memoryd status`): the memory files the store holds as there, which `trash list`
    lists and `trash restore` brings back. The one place a dir's deletion is alarmed: a
    caller that knows it was no loss does not call it. Returns how many files it named (0:
    the dir is there, or held none)."""
    if os.path.isdir(path):
        return 0
    gone = [d for d in deleted(store, path) if d.vanished]
    if not gone:
        return 0
    now = store.clock()
    gone = _checked_out(store, path, gone, now)
    if not gone:
        return 0
    store._guard(store._keep_alarm, path, now, len(gone), 0, True)
    if store.audit is not None:
        store.audit(
            "memory.mass_change", dir=path, deleted=len(gone), rewritten=0,
            files=sorted(d.name for d in gone)[:50], window_s=int(store.alarm_window),
            restore=f"memoryd trash list {path}; memoryd trash restore ID",
            detail="the whole memory dir was deleted",
        )  # fmt: skip
    return len(gone)


def _checked_out(store: VersionStore, path: Path, gone: list[Deleted], now: float) -> list[Deleted]:
    """Of a dir's files gone with it, those a git operation did not remove (a checkout of a
    branch without the dir): git's are one `memory.checkout` row and recorded gone as git's
    (no alarm, not listed by `trash list`; their versions stay kept), as a scan records the
    files a checkout removes from a dir that stays."""
    changes = [gitwork.Change(d.name, store.read_object(d.sha256), None, True) for d in gone]
    made, at = gitwork.git_made(path, changes)
    if not made:
        return gone
    ours = [d for d in gone if d.name in made]
    rows: list[Row] = [(now, d.name, d.sha256, d.size, "gone", OTHER, {"git": at}) for d in ours]
    store._guard(store.add_rows, path, rows)
    if store.audit is not None:
        store.audit(
            "memory.checkout", dir=path, deleted=len(ours), rewritten=0, at=at,
            files=sorted(made)[:50],
        )  # fmt: skip
    return [d for d in gone if d.name not in made]
