"""Plans the circuit breaker refused, kept so that a person can apply one after review
(`memoryd dream DIR --apply PASS_ID`).

A refused pass keeps its plan (the `refused_plan` table): each move with its reason, and the
sha256 of every file the plan rests on (those to move, the newer ones kept). Applying it moves
exactly those files, only while all still hold those bytes. A dir's newest PLANS_KEEP are
kept; an applied plan is removed.
"""

import json
import re
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.dream.kinds import MoveReason
from memoryd.dream.plan import Move, Plan
from memoryd.errors import MemorydError
from memoryd.model import safejson
from memoryd.storage.state import dir_key
from memoryd.storage.statedb import Schema, StateDB

PLANS_KEEP = 10  # per dir: a person reviews the last few refusals, not a history
SCHEMA = Schema(
    "refused",
    1,
    """CREATE TABLE refused_plan (dir TEXT NOT NULL, pass_id TEXT NOT NULL, plan TEXT NOT NULL,
                                  PRIMARY KEY (dir, pass_id)) WITHOUT ROWID""",
    ("refused_plan",),
)
_PASS_ID = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$")


@dataclass(frozen=True, slots=True)
class StoredPlan:
    pass_id: str
    dir: str  # the memory dir's real path
    time: str
    moves: list[dict[str, Any]]  # Move fields, and `missing` (the references gone)
    files: dict[str, str] = field(default_factory=dict)  # every file the plan rests on: sha256

    def as_moves(self) -> list[Move]:
        return [
            Move(
                str(m["filename"]),
                str(m["sha256"]),
                MoveReason(str(m["reason"])),
                str(m.get("detail") or ""),
                m.get("duplicate_of"),
                m.get("superseded_by"),
                m.get("overlap"),
            )
            for m in self.moves
        ]

    def missing(self) -> dict[str, list[str]]:
        return {str(m["filename"]): list(m.get("missing") or []) for m in self.moves}


def _db(state_dir: Path) -> StateDB:
    db = StateDB.in_state_dir(state_dir)
    db.ensure(SCHEMA)
    return db


def keep(conn: sqlite3.Connection, stored: StoredPlan) -> None:
    """Write one plan in the caller's transaction; the dir's oldest past PLANS_KEEP go."""
    key = dir_key(Path(stored.dir))
    conn.execute(
        "INSERT OR REPLACE INTO refused_plan VALUES (?, ?, ?)",
        (key, stored.pass_id, json.dumps(asdict(stored))),
    )
    conn.execute(
        "DELETE FROM refused_plan WHERE dir = ? AND pass_id NOT IN (SELECT pass_id FROM "
        "refused_plan WHERE dir = ? ORDER BY pass_id DESC LIMIT ?)",
        (key, key, PLANS_KEEP),
    )


def save(state_dir: Path, real_path: Path, pass_id: str, plan: Plan) -> None:
    """Keep a refused pass's plan (a person may apply it tomorrow)."""
    files: dict[str, str] = {}
    moves = []
    for move in plan.moves:
        item = plan.items.get(move.filename)
        moves.append({**asdict(move), "missing": item.missing if item else []})
        files[move.filename] = move.sha256
        for other in (move.duplicate_of, move.superseded_by):
            if other and other in plan.items:
                files[other] = plan.items[other].sha256
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    with _db(state_dir).transaction() as conn:
        keep(conn, StoredPlan(pass_id, str(real_path), now, moves, files))


def load(state_dir: Path, real_path: Path, pass_id: str) -> StoredPlan:
    """The plan a refused pass of this dir kept; MemorydError saying why there is none."""
    if not _PASS_ID.match(pass_id):
        raise MemorydError(
            f"{pass_id!r} is no pass id (one looks like 20261201T124558-86f002: the refused "
            "pass's report and its dream.refused row give it)"
        )
    conn = _db(state_dir).connection()
    row = conn.execute(
        "SELECT plan FROM refused_plan WHERE dir = ? AND pass_id = ?",
        (dir_key(real_path), pass_id),
    ).fetchone()
    if row is None:
        other = conn.execute("SELECT plan FROM refused_plan WHERE pass_id = ?", (pass_id,))
        found = other.fetchone()
        where = f" (it was refused in {safejson.loads(found[0])['dir']})" if found else ""
        raise MemorydError(
            f"{real_path}: no refused plan {pass_id} to apply{where}; it was applied already, "
            f"or is older than the last {PLANS_KEEP} refusals (run `memoryd dream` again for a "
            "new plan)"
        )
    stored = StoredPlan(**safejson.loads(row[0]))
    if stored.dir != str(real_path) or stored.pass_id != pass_id:
        raise MemorydError(f"{_db(state_dir).path}: the stored plan is for another dir or pass")
    return stored


def exists(state_dir: Path, real_path: Path, pass_id: str) -> bool:
    if not _PASS_ID.match(pass_id):
        return False
    query = "SELECT 1 FROM refused_plan WHERE dir = ? AND pass_id = ?"
    found = _db(state_dir).connection().execute(query, (dir_key(real_path), pass_id))
    return found.fetchone() is not None


def remove(state_dir: Path, real_path: Path, pass_id: str) -> None:
    with _db(state_dir).transaction() as conn:
        conn.execute(
            "DELETE FROM refused_plan WHERE dir = ? AND pass_id = ?", (dir_key(real_path), pass_id)
        )
