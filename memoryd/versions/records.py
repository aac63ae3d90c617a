"""The version store's tables in `state.sqlite`, its rows, and the history they give.

Every version of a memory file, MEMORY.md or MEMORY-ARCHIVE.md that memoryd reads is kept by
content: `versions_objects` holds each version's bytes once (by sha256, a blob), whatever
dirs and names hold them. `versions_log` holds, per memory dir (`versions_dirs`), one row
per event, oldest first: when (`t`), the file (`f`), its sha256 (`h`) and size (`n`), the
event (`e`: `seen` a version first read, `gone` the file left the dir, `moved` memoryd moved
it into the trash, `restoring` memoryd is about to write these bytes back) and who (`by`:
memoryd or another process); `alarm` marks an outside change that counts toward the
mass-change alarm, `extra` a few flat fields (`to` a rename's other name, `id` a trash id,
`git`, `dir_gone`, `id_t`). `versions_latest` is each name's latest row, kept in step.
`versions_own` is the ledger of memoryd's own index writes, `versions_alarms` the last
mass-change alarms (`memoryd status`), `versions_watched` what retention watched end.
"""

import hashlib
import json
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.model import safejson
from memoryd.storage.statedb import Schema, StateDB

MEMORYD, OTHER = "memoryd", "other"
EVENTS = ("seen", "gone", "moved", "restoring")
ALARMS_KEEP = 50
OBJECT_MAX = 64 << 20  # the archive's read limit is below this

SCHEMA = Schema(
    "versions",
    1,
    """
    CREATE TABLE versions_objects (sha TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL);
    CREATE TABLE versions_dirs (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE);
    CREATE TABLE versions_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, dir INTEGER NOT NULL REFERENCES versions_dirs,
        t REAL NOT NULL, f TEXT NOT NULL, h TEXT NOT NULL, n INTEGER NOT NULL, e TEXT NOT NULL,
        by TEXT NOT NULL, alarm INTEGER NOT NULL DEFAULT 0, extra TEXT);
    CREATE INDEX versions_log_dir ON versions_log (dir, f, seq);
    CREATE INDEX versions_log_alarm ON versions_log (dir, t) WHERE alarm = 1;
    CREATE TABLE versions_latest (dir INTEGER NOT NULL, f TEXT NOT NULL, h TEXT NOT NULL,
        e TEXT NOT NULL, PRIMARY KEY (dir, f)) WITHOUT ROWID;
    CREATE TABLE versions_own (seq INTEGER PRIMARY KEY AUTOINCREMENT, dir TEXT NOT NULL,
        f TEXT NOT NULL, h TEXT NOT NULL);
    CREATE INDEX versions_own_key ON versions_own (dir, f, h);
    CREATE TABLE versions_alarms (dir TEXT PRIMARY KEY, t REAL NOT NULL, deleted INTEGER,
        rewritten INTEGER, dir_gone INTEGER NOT NULL DEFAULT 0, seq INTEGER);
    CREATE TABLE versions_watched (dir TEXT NOT NULL, key TEXT NOT NULL, since REAL NOT NULL,
        PRIMARY KEY (dir, key)) WITHOUT ROWID;
    CREATE TABLE versions_meta (key TEXT PRIMARY KEY, value TEXT)
    """,
    ("versions_objects", "versions_dirs", "versions_log", "versions_latest", "versions_own",
     "versions_alarms", "versions_watched", "versions_meta"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Record:
    t: float
    f: str
    h: str
    n: int
    e: str
    by: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def extra_json(extra: Mapping[str, Any] | None) -> str | None:
    """A row's extra fields as stored (flat: every value a string, number or bool)."""
    return json.dumps(dict(extra), sort_keys=True) if extra else None


def to_record(row: Sequence[Any]) -> Record:
    """A `versions_log` row (t, f, h, n, e, by, extra) as a Record."""
    t, f, h, n, e, by, extra = row
    return Record(t, f, h, n, e, by, safejson.loads(extra) if extra else {})


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a file in a dir's history (numbered from 1, oldest first)."""

    number: int
    sha256: str
    size: int
    seen: float  # when memoryd first read it
    until: float | None  # when memoryd found it replaced or gone; None: still current
    by: str  # who wrote it: memoryd or another process
    stored: bool  # its bytes are in the store (pruned versions are listed, not restorable)
    ended_by: str = ""  # "rewritten", "deleted", "moved", "renamed" (what ended it), or ""


def versions(recs: Sequence[Record], has: Callable[[str], bool]) -> list[Version]:
    """The versions one file's records (oldest first) give; `has`: whether a sha is stored."""
    out: list[dict[str, Any]] = []
    open_: dict[str, Any] | None = None
    for rec in recs:
        if rec.e in ("gone", "moved"):
            if open_ is not None:
                renamed = "to" in rec.extra
                open_["until"] = rec.t
                open_["ended_by"] = "renamed" if renamed else rec.e.replace("gone", "deleted")
                out.append(open_)
                open_ = None
            continue
        if rec.e != "seen" or (open_ is not None and open_["sha256"] == rec.h):
            continue
        if open_ is not None:
            open_.update(until=rec.t, ended_by="rewritten")
            out.append(open_)
        open_ = {"sha256": rec.h, "size": rec.n, "seen": rec.t, "until": None, "by": rec.by}
    if open_ is not None:
        out.append(open_)
    return [
        Version(i + 1, v["sha256"], v["size"], v["seen"], v["until"], v["by"],
                has(v["sha256"]), v.get("ended_by", ""))
        for i, v in enumerate(out)
    ]  # fmt: skip


def deleted_id(path: Path, name: str, when: float) -> str:
    """The id `trash list` shows for a file deleted outside memoryd: `d` and 9 hex digits
    (a trash id is 10 hex digits, so the two never collide)."""
    key = f"{path}\0{name}\0{when!r}".encode("utf-8", "surrogateescape")
    return "d" + hashlib.sha256(key).hexdigest()[:9]


def id_time(rec: Record) -> float:
    """The time a deletion's id is made from: when it was found gone, or for a file whose
    folder went with it, when it was last seen (the id `trash list` gave it then)."""
    t = rec.extra.get("id_t")
    if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    return rec.t


def alarms_in(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The last mass-change alarms (one per dir, the newest), oldest first."""
    out: list[dict[str, Any]] = []
    rows = conn.execute(
        "SELECT dir, t, deleted, rewritten, dir_gone FROM versions_alarms ORDER BY seq"
    )
    for path, t, deleted, rewritten, dir_gone in rows:
        alarm = {"dir": path, "t": t, "deleted": deleted, "rewritten": rewritten}
        out.append({**alarm, "dir_gone": True} if dir_gone else alarm)
    return out


def alarms(state_dir: Path) -> list[dict[str, Any]]:
    """`memoryd status`'s alarms, read without the scan machinery."""
    from memoryd.versions import importer  # an older store's alarms are taken in first

    db = StateDB.in_state_dir(state_dir)
    if importer.pending(state_dir):
        conn: sqlite3.Connection | None = db.ensure(SCHEMA)
        importer.ensure_imported(db, state_dir)
    else:
        conn = db.reader(SCHEMA)  # nothing kept yet: `status` makes no store, nor its tables
    return alarms_in(conn) if conn is not None else []
