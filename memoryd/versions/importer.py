"""The version store of an older memoryd, taken into `state.sqlite` once.

That memoryd kept the store in files under `<state>/versions/`: `objects/<sha256>` (and
temps `.<sha256>.memoryd-<pid>-<hex>.tmp` not yet put in place), `packs/<id>.pack` (the
objects of a big batch one after the other, an index of (sha256, offset, size) sorted by
sha256, and a trailer: magic, entries, where the index starts), `logs/<dir key>.jsonl` (a
first line naming the dir, then one JSON line per event), `own/<dir key>.own` (`<sha256>
<name>` lines), `watched/<dir key>.json`, `alarms.json`, and caches (`tables/`) rebuilt from
the logs. Everything is read and written in one transaction, which also marks the import
done; the old files are removed only after it commits. A kill before the commit leaves the
old files (the next start imports them again, from scratch); a kill after it leaves the
mark (the next start only removes what is left). A line or object that is not whole (its
bytes not its sha256) is skipped, as the old store skipped it.
"""

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memoryd.logsetup import get_logger
from memoryd.model import safejson
from memoryd.paths import BoundedLines, open_regular, read_bounded
from memoryd.storage import fsops
from memoryd.storage.statedb import StateDB
from memoryd.versions import witness

OLD_ROOT = "versions"
PARTS = ("objects", "packs", "logs", "own", "watched", "tables", "alarms.json", ".lock")
_PACK_HEAD = b"memoryd pack 1\n"
_PACK_ENTRY = struct.Struct(">32sQQ")  # sha256, offset, size
_PACK_TRAILER = struct.Struct(">8sQQ")  # magic, entries, where the index starts
_PACK_MAGIC = b"mdpackix"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_EXTRA = ("to", "id", "git", "dir_gone", "id_t", "restored_as")  # flat fields it wrote
OBJECT_MAX = 64 << 20
_done: set[Path] = set()
_done_lock = threading.Lock()


def _dir_key(path: Path) -> str:
    return hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def pending(state_dir: Path) -> bool:
    """Whether an older store is left to take in (this process has not taken it in, and its
    files are there): a read takes it in first, as a write does. Looked for once a process,
    as `ensure_imported` does."""
    if state_dir in _done:
        return False
    root = state_dir / OLD_ROOT
    if os.path.lexists(state_dir / witness.CLOCK_FILE) or (
        os.path.lexists(root) and any(os.path.lexists(root / p) for p in PARTS)
    ):
        return True
    with _done_lock:
        _done.add(state_dir)
    return False


def ensure_imported(db: StateDB, state_dir: Path) -> None:
    """Take an older memoryd's store in (once a process looks; nothing when there is none)."""
    if state_dir in _done:
        return
    if os.path.lexists(state_dir / witness.CLOCK_FILE):
        witness.take_in(state_dir)
    root = state_dir / OLD_ROOT
    if os.path.lexists(root) and any(os.path.lexists(root / p) for p in PARTS):
        with db.transaction() as tx:
            mark = "SELECT 1 FROM versions_meta WHERE key = 'imported'"
            if tx.execute(mark).fetchone() is None:
                counts = import_all(tx, root)
                fsops.crash_point("versions.import_commit")
                tx.execute("INSERT INTO versions_meta (key, value) VALUES ('imported', ?)",
                           (json.dumps(counts),))  # fmt: skip
                get_logger().debug("version store imported", state=str(db.path), **counts)
        if db.in_transaction():
            return  # the import commits with the caller's transaction: removed after it
        fsops.crash_point("versions.imported")
        for part in PARTS:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if os.path.isdir(root / part) and not os.path.islink(root / part):
                    shutil.rmtree(root / part)
                else:
                    os.unlink(root / part)
            fsops.crash_point("versions.import_removing")
        with contextlib.suppress(OSError):
            os.rmdir(root)
    with _done_lock:
        _done.add(state_dir)


def import_all(tx: sqlite3.Connection, root: Path) -> dict[str, int]:
    """Every object, row, ledger line, retention record and alarm of the old store."""
    counts = {"objects": 0, "rows": 0}
    for sha, data in _objects(root):
        cur = tx.execute(
            "INSERT OR IGNORE INTO versions_objects (sha, size, data) VALUES (?, ?, ?)",
            (sha, len(data), data),
        )
        counts["objects"] += cur.rowcount
    dirs: dict[str, Path] = {}
    for log in sorted(_listing(root / "logs")):
        if log.endswith(".jsonl"):
            path, rows = _log(root / "logs" / log)
            if path is not None and log == f"{_dir_key(path)}.jsonl":
                dirs[log[: -len(".jsonl")]] = path
                counts["rows"] += _add_rows(tx, path, rows)
    for key, path in dirs.items():
        _own(tx, root / "own" / f"{key}.own", path)
        _watched(tx, root / "watched" / f"{key}.json", path)
    _alarms(tx, root / "alarms.json")
    return counts


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _objects(root: Path) -> Iterator[tuple[str, bytes]]:
    """Each whole object: loose ones, whole temps, then the packs' (each checked)."""
    folder = root / "objects"
    for name in _listing(folder):
        sha = name[1:].partition(fsops.TEMP_MARK)[0] if fsops.is_own_temp(name) else name
        if _SHA256.fullmatch(sha):
            with contextlib.suppress(OSError, ValueError):
                data = read_bounded(folder / name, OBJECT_MAX, follow=False)
                if hashlib.sha256(data).hexdigest() == sha:
                    yield sha, data
    for name in sorted(_listing(root / "packs")):
        if name.endswith(".pack") and not name.startswith("."):
            yield from _pack(root / "packs" / name)


def _pack(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        fd, st = open_regular(path, follow=False)
    except OSError:
        return
    try:
        tail = os.pread(fd, _PACK_TRAILER.size, st.st_size - _PACK_TRAILER.size)
        if st.st_size < len(_PACK_HEAD) + _PACK_TRAILER.size or len(tail) != _PACK_TRAILER.size:
            return
        magic, count, start = _PACK_TRAILER.unpack(tail)
        if magic != _PACK_MAGIC or start + count * _PACK_ENTRY.size > st.st_size:
            return
        index = os.pread(fd, count * _PACK_ENTRY.size, start)
        for key, offset, size in _PACK_ENTRY.iter_unpack(index):
            data = os.pread(fd, size, offset) if size <= OBJECT_MAX else b""
            sha = key.hex()
            if hashlib.sha256(data).hexdigest() == sha:
                yield sha, data
    finally:
        os.close(fd)


def _log(log: Path) -> tuple[Path | None, list[tuple[Any, ...]]]:
    """The dir an old log names, and its valid rows, oldest first."""
    from memoryd.indexing.scan import skip_reason

    try:
        fd, _ = open_regular(log, follow=False)
    except OSError:
        return None, []
    path: Path | None = None
    rows: list[tuple[Any, ...]] = []
    try:
        for number, raw in BoundedLines(fd, max_line=1 << 16):
            if raw is None:
                continue
            with contextlib.suppress(ValueError, RecursionError):
                data = safejson.loads(raw)
                if number == 1 and isinstance(data, dict) and isinstance(data.get("dir"), str):
                    named = data["dir"]
                    path = Path(named) if named.startswith("/") and _entry_name(named) else None
                    continue
                row = _row(data, skip_reason)
                if row is not None:
                    rows.append(row)
    finally:
        os.close(fd)
    return path, rows


def _row(row: object, skip_reason: Callable[[str], str | None]) -> tuple[Any, ...] | None:
    """An old log line as a row (t, f, h, n, e, by, alarm, extra); None if it is not one."""
    if not isinstance(row, dict):
        return None
    t, f, h, n, e, by = (row.get(k) for k in ("t", "f", "h", "n", "e", "by"))
    if not (
        isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)
        and isinstance(f, str) and isinstance(h, str) and _SHA256.fullmatch(h) is not None
        and isinstance(n, int) and not isinstance(n, bool) and n >= 0
        and e in ("seen", "gone", "moved", "restoring") and by in ("memoryd", "other")
    ):  # fmt: skip
        return None
    if skip_reason(f) not in (None, "index") or "/" in f or not _entry_name(f):
        return None  # a name no scan could have recorded: never used
    extra = {
        k: v for k, v in row.items()
        if k in _EXTRA and isinstance(v, str | int | float | bool)
    }  # fmt: skip
    return float(t), f, h, n, e, by, int(row.get("alarm") == 1), extra


def _entry_name(name: str) -> bool:
    """Whether a name could be a directory entry's (no NUL, no lone surrogate)."""
    if "\0" in name:
        return False
    try:
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def _add_rows(tx: sqlite3.Connection, path: Path, rows: list[tuple[Any, ...]]) -> int:
    tx.execute("INSERT OR IGNORE INTO versions_dirs (path) VALUES (?)", (str(path),))
    dir_id = tx.execute("SELECT id FROM versions_dirs WHERE path = ?", (str(path),)).fetchone()[0]
    tx.executemany(
        "INSERT INTO versions_log (dir, t, f, h, n, e, by, alarm, extra) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(dir_id, *row[:7], json.dumps(row[7], sort_keys=True) if row[7] else None)
         for row in rows],
    )  # fmt: skip
    latest = {row[1]: (row[2], row[4]) for row in rows}
    tx.executemany(
        "INSERT OR REPLACE INTO versions_latest (dir, f, h, e) VALUES (?, ?, ?, ?)",
        [(dir_id, f, h, e) for f, (h, e) in latest.items()],
    )
    return len(rows)


def _own(tx: sqlite3.Connection, ledger: Path, path: Path) -> None:
    with contextlib.suppress(OSError):
        for line in (
            read_bounded(ledger, 1 << 17, follow=False).decode("utf-8", "replace").split("\n")
        ):
            sha, _, name = line.partition(" ")
            if _SHA256.fullmatch(sha) and name:
                tx.execute(
                    "INSERT INTO versions_own (dir, f, h) VALUES (?, ?, ?)", (str(path), name, sha)
                )


def _watched(tx: sqlite3.Connection, record: Path, path: Path) -> None:
    with contextlib.suppress(OSError, ValueError, RecursionError):
        data = safejson.loads(read_bounded(record, 64 << 20, follow=False))
        if isinstance(data, dict):
            tx.executemany(
                "INSERT OR REPLACE INTO versions_watched (dir, key, since) VALUES (?, ?, ?)",
                [(str(path), k, float(v)) for k, v in data.items() if isinstance(k, str)
                 and isinstance(v, int | float) and not isinstance(v, bool)
                 and math.isfinite(v)],
            )  # fmt: skip


def _alarms(tx: sqlite3.Connection, record: Path) -> None:
    with contextlib.suppress(OSError, ValueError, RecursionError):
        data = safejson.loads(read_bounded(record, 1 << 20, follow=False))
        for seq, a in enumerate(data if isinstance(data, list) else []):
            t = a.get("t") if isinstance(a, dict) else None
            if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
                tx.execute(
                    "INSERT OR REPLACE INTO versions_alarms (dir, t, deleted, rewritten, "
                    "dir_gone, seq) VALUES (?, ?, ?, ?, ?, ?)",
                    (str(a.get("dir")), t, _int(a.get("deleted")), _int(a.get("rewritten")),
                     int(a.get("dir_gone") is True), seq),
                )  # fmt: skip


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
