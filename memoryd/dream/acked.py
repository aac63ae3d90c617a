"""Flags a person has seen (`memoryd ack FILE`): a memory flagged for review (partially stale,
or fully stale and kept by a guard) is listed by every pass's report until someone says they
saw it; then it is not listed again until it changes.

The record is memoryd's (the `acked` table), never in the memory file: per file, the sha256 of
its bytes and a digest of its references' status when acknowledged, and when. It holds while
both are what they were: an edit, or a reference found again or gone since, lists it again.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memoryd.dream.plan import Item, Plan
from memoryd.storage.state import StateStore, dir_key
from memoryd.storage.statedb import Schema, StateDB

ACKS_KEEP = 10_000  # a person's doing, one file at a time: the oldest go past this
# `seq` orders a dir's acknowledgements oldest first (a new one for a file replaces its row).
SCHEMA = Schema(
    "acked",
    1,
    """CREATE TABLE acked (dir TEXT NOT NULL, seq INTEGER NOT NULL, file TEXT NOT NULL,
                           sha256 TEXT NOT NULL, refs TEXT NOT NULL, time TEXT NOT NULL,
                           PRIMARY KEY (dir, file));
       CREATE INDEX acked_by_seq ON acked (dir, seq)""",
    ("acked",),
)


@dataclass(frozen=True, slots=True)
class Ack:
    file: str
    sha256: str  # the file's bytes when acknowledged
    refs: str  # refs_digest of its references then
    time: str  # ISO-8601, local time with its offset

    @property
    def detail(self) -> str:
        """What `explain` says of it."""
        return (
            f"acknowledged by a person on {self.time[:10]}; not listed for review again until "
            "its bytes or its references' status change"
        )


def refs_digest(item: Item) -> str:
    """The status of every reference the memory names, as one digest."""
    checks = sorted(
        (c.ref, c.kind, c.scope.value, c.status.value, c.moved_to or "") for c in item.checks
    )
    return hashlib.sha256(json.dumps(checks).encode()).hexdigest()[:32]


def load(store: StateStore, real_path: Path) -> list[Ack]:
    """The dir's acknowledgements, oldest first."""
    conn = StateDB.in_state_dir(store.state_dir).reader(SCHEMA)
    sql = "SELECT file, sha256, refs, time FROM acked WHERE dir = ? ORDER BY seq"
    return [Ack(*row) for row in conn.execute(sql, (dir_key(real_path),))] if conn else []


def record(store: StateStore, real_path: Path, acks: Iterable[Ack]) -> None:
    """Add acknowledgements (each replacing one for the same file), in one transaction; the
    dir's oldest past ACKS_KEEP go. The caller holds the dir's writer lock."""
    key = dir_key(real_path)
    store.db().ensure(SCHEMA)
    with store.db().transaction() as conn:
        (top,) = conn.execute("SELECT coalesce(max(seq), 0) FROM acked WHERE dir = ?", (key,))
        conn.executemany(
            "INSERT OR REPLACE INTO acked VALUES (?, ?, ?, ?, ?, ?)",
            [(key, top[0] + i, a.file, a.sha256, a.refs, a.time) for i, a in enumerate(acks, 1)],
        )
        conn.execute(
            "DELETE FROM acked WHERE dir = ? AND seq <= (SELECT seq FROM acked WHERE dir = ? "
            "ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (key, key, ACKS_KEEP),
        )


def holds(ack: Ack | None, item: Item) -> bool:
    """Whether `ack` still covers the memory as `item` sees it now."""
    return ack is not None and ack.sha256 == item.sha256 and ack.refs == refs_digest(item)


def acknowledged(acks: Iterable[Ack], plan: Plan) -> set[str]:
    """The flagged memories of `plan` a person acknowledged as they are now."""
    by_file = {a.file: a for a in acks}
    return {
        f.filename
        for f in plan.flagged
        if f.filename in plan.items and holds(by_file.get(f.filename), plan.items[f.filename])
    }
