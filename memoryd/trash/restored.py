"""Restores are final (DESIGN §5, Amendments): a memory a person brought back from the trash
is not moved again by any pass until its bytes change.

`memoryd trash restore` records a pin in the state store (the `pins` table, a row per pin):
the file's name, the sha256 of the bytes restored, when, and the trash id. A dream
pass (a command's or the daemon's) leaves a pinned memory out of every move: not moved as the
loser of a duplicate or a contradiction, nor as fully stale, and not the winner that sends
another memory to the trash either (the person's choice was about this pair; the other one
stays until a person or a change decides). A pin holds while some file holds exactly those
bytes:
- under the recorded name; or, when that name no longer holds them, under the first name
  (in name order) that does: an agent's rename keeps the pin, the content is what the person
  chose;
- a change to the bytes ends it: the changed memory is judged again like any other (and the
  same bytes written again are pinned again: they are what the person restored).
"""

from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime
from pathlib import Path

from memoryd.storage.state import StateStore, dir_key
from memoryd.storage.statedb import Schema, StateDB

PINS_KEEP = 1_000  # restores are a person's doing, one at a time: the oldest go past this
# `seq` orders a dir's pins oldest first; a dir holds one pin per name and per trash id.
SCHEMA = Schema(
    "pins",
    1,
    """CREATE TABLE pins (dir TEXT NOT NULL, seq INTEGER NOT NULL, file TEXT NOT NULL,
                          sha256 TEXT NOT NULL, time TEXT NOT NULL, id TEXT NOT NULL,
                          PRIMARY KEY (dir, seq), UNIQUE (dir, file), UNIQUE (dir, id))""",
    ("pins",),
)


@dataclass(frozen=True, slots=True)
class Pin:
    file: str
    sha256: str
    time: str  # ISO-8601, local time with its offset
    id: str  # the trash record it came back from

    @property
    def detail(self) -> str:
        """What `explain` and the pass say about it."""
        return f"restored by a person on {self.time[:10]}; not moved again until it changes"


def load(store: StateStore, real_path: Path) -> list[Pin]:
    """The dir's pins, oldest first."""
    conn = StateDB.in_state_dir(store.state_dir).reader(SCHEMA)
    sql = "SELECT file, sha256, time, id FROM pins WHERE dir = ? ORDER BY seq"
    return [Pin(*row) for row in conn.execute(sql, (dir_key(real_path),))] if conn else []


def record(store: StateStore, real_path: Path, pin: Pin) -> None:
    """Add a pin (replacing one for the same name or trash id; the dir's oldest past PINS_KEEP
    go), in one transaction synced in full: committed before the file moves back, so that no
    pass can see the restored file unpinned. The caller holds the dir's writer lock (every
    pass that reads pins does too)."""
    key = dir_key(real_path)
    store.db().ensure(SCHEMA)
    with store.db().durable() as conn:
        replaced = "DELETE FROM pins WHERE dir = ? AND (file = ? OR id = ?)"
        conn.execute(replaced, (key, pin.file, pin.id))
        conn.execute(
            "INSERT INTO pins SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ? FROM pins "
            "WHERE dir = ?",
            (key, *astuple(pin), key),
        )
        conn.execute(
            "DELETE FROM pins WHERE dir = ? AND seq <= (SELECT seq FROM pins WHERE dir = ? "
            "ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (key, key, PINS_KEEP),
        )


def reset(store: StateStore, real_path: Path, pins: Sequence[Pin]) -> None:
    """Make the dir's pins `pins` again (as `load` gave them before a restore that failed)."""
    key = dir_key(real_path)
    store.db().ensure(SCHEMA)
    with store.db().durable() as conn:
        conn.execute("DELETE FROM pins WHERE dir = ?", (key,))
        conn.executemany(
            "INSERT INTO pins VALUES (?, ?, ?, ?, ?, ?)",
            [(key, seq, *astuple(pin)) for seq, pin in enumerate(pins, 1)],
        )


def pinned(pins: Iterable[Pin], files: Iterable[tuple[str, str]]) -> dict[str, Pin]:
    """Which of the dir's memory files (name, sha256 of its bytes now) are pinned, and by
    which pin (see the module's rules)."""
    by_name = dict(files)
    by_sha: dict[str, list[str]] = {}
    for name in sorted(by_name):
        by_sha.setdefault(by_name[name], []).append(name)
    out: dict[str, Pin] = {}
    for pin in pins:
        if by_name.get(pin.file) == pin.sha256:
            out[pin.file] = pin
    for pin in pins:
        if by_name.get(pin.file) != pin.sha256:
            moved = [n for n in by_sha.get(pin.sha256, []) if n not in out]
            if moved:
                out[moved[0]] = pin
    return out


def now_iso(clock: float) -> str:
    return datetime.fromtimestamp(clock).astimezone().isoformat(timespec="seconds")
