"""Time memoryd can vouch for: the one clock check behind every retention (the trash's day
folders, the version store's ended versions).

Retention rests on time memoryd itself has watched pass, never on one reading of the wall
clock (a clock a month fast would make everything "old"; a deletion seen while the clock was
a year slow would look a year old once it is right). The clock record (the `witness_clock`
table of `state.sqlite`, shared by every memoryd process; an older memoryd's
`trash-clock.json` is taken in once and removed) keeps:
- `wall`, `boot`: the wall clock and the boot clock (`Runtime.boot`) at the last reading;
- `high_water`: the latest wall time memoryd ever recorded;
- `witnessed`: a running count of the time memoryd can vouch for. Each reading adds the boot
  clock's advance when the boot is the same (it cannot be set: it is the time that really
  passed, however the wall clock moved); after a reboot, the time since that boot (the last
  reading was before it), or the wall clock's step when it is a plausible one (0 to a day);
  a longer wall-clock jump across a reboot is credited nothing. Too little credit only keeps
  things longer; too much would lose memories.
A thing under retention is recorded with the `witnessed` count when memoryd first saw it so
(`since`); it may go once `witnessed - since` reaches the retention and no clock memoryd has
seen (the wall clock now, the high-water mark) puts one of its own times within it.
"""

import contextlib
import json
import math
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.model import safejson
from memoryd.paths import read_bounded
from memoryd.storage import fsops
from memoryd.storage.statedb import Schema, StateDB

CLOCK_FILE = "trash-clock.json"  # an older memoryd's record, taken in once
_DDL = "CREATE TABLE witness_clock (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
SCHEMA = Schema("witness", 1, _DDL, ("witness_clock",))
MAX_STEP = 86400.0  # the longest wall-clock step taken on trust across a reboot
Boot = tuple[str, float] | None


def number(value: object) -> float | None:
    """A finite number read from a state file, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Clock:
    wall: float  # the wall clock now
    high_water: float  # the latest wall time memoryd has recorded, now included
    witnessed: float  # the running count of time memoryd can vouch for, now


def _old_record(state_dir: Path) -> dict[str, Any] | None:
    data: object = None
    with contextlib.suppress(OSError, ValueError, RecursionError):
        data = safejson.loads(read_bounded(state_dir / CLOCK_FILE, 1 << 20, follow=False))
    return data if isinstance(data, dict) else None


def take_in(state_dir: Path) -> sqlite3.Connection:
    """The store's connection, with an older memoryd's clock file taken in (once: in the
    transaction that writes its rows, then removed; a kill between the two leaves rows and a
    file, and the file is then only removed)."""
    db = StateDB.in_state_dir(state_dir)
    conn = db.ensure(SCHEMA)
    if os.path.lexists(state_dir / CLOCK_FILE):
        with db.transaction() as tx:
            if tx.execute("SELECT count(*) FROM witness_clock").fetchone()[0] == 0:
                _write(tx, _old_record(state_dir) or {})
        if not db.in_transaction():  # else removed once the caller's commit holds the rows
            fsops.crash_point("witness.imported")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(state_dir / CLOCK_FILE)
    return conn


def _peek(state_dir: Path) -> dict[str, Any]:
    """The record as it is, read without writing anything (a dry run's): no store made, no
    table made, no older file taken in."""
    old = _old_record(state_dir)
    conn = StateDB.in_state_dir(state_dir).reader(SCHEMA) if old is None else None
    if conn is None:
        return old or {}
    return {k: safejson.loads(v) for k, v in conn.execute("SELECT key, value FROM witness_clock")}


def _write(conn: sqlite3.Connection, record: dict[str, Any]) -> None:
    conn.execute("DELETE FROM witness_clock")
    conn.executemany(
        "INSERT INTO witness_clock (key, value) VALUES (?, ?)",
        [(str(k), json.dumps(v)) for k, v in record.items()],
    )


def transaction(state_dir: Path) -> contextlib.AbstractContextManager[sqlite3.Connection]:
    """One read-then-write of the record, as one transaction (no other process's between)."""
    take_in(state_dir)
    return StateDB.in_state_dir(state_dir).transaction()


def read_record(state_dir: Path) -> dict[str, Any]:
    return _peek(state_dir)


def write_record(state_dir: Path, record: dict[str, Any]) -> None:
    take_in(state_dir)
    with StateDB.in_state_dir(state_dir).transaction() as tx:
        _write(tx, record)


def credit(before: dict[str, Any], wall: float, boot: Boot) -> float:
    """How much of the time since the last reading memoryd can vouch for."""
    last_boot = before.get("boot")
    if (
        boot is not None
        and isinstance(last_boot, list)
        and len(last_boot) == 2
        and last_boot[0] == boot[0]
        and number(last_boot[1]) is not None
    ):
        return max(0.0, boot[1] - float(last_boot[1]))
    last_wall = number(before.get("wall"))
    step = wall - last_wall if last_wall is not None else 0.0
    return max(step if 0.0 <= step <= MAX_STEP else 0.0, boot[1] if boot is not None else 0.0)


def observe(state_dir: Path, wall: float, boot: Boot, *, save: bool = True) -> Clock:
    """Take a reading of the clocks; `save=False` (a dry run) records nothing."""
    if not save:
        return _reading(_peek(state_dir), wall, boot)[0]
    conn = take_in(state_dir)
    with StateDB.in_state_dir(state_dir).transaction():
        before = {
            k: safejson.loads(v) for k, v in conn.execute("SELECT key, value FROM witness_clock")
        }
        clock, after = _reading(before, wall, boot)
        _write(conn, after)
    return clock


def _reading(before: dict[str, Any], wall: float, boot: Boot) -> tuple[Clock, dict[str, Any]]:
    """The clock now, from the record `before`, and the record to keep."""
    counted = number(before.get("witnessed"))
    witnessed = wall if counted is None else counted + credit(before, wall, boot)
    high_water = max(wall, number(before.get("high_water")) or wall)
    after = {"wall": wall, "boot": list(boot) if boot is not None else None}
    return Clock(wall, high_water, witnessed), {
        **before,
        **after,
        "high_water": high_water,
        "witnessed": witnessed,
    }


def seen_within(clock: Clock, times: Iterable[float], span: float) -> bool:
    """Whether a clock memoryd has seen (now, or the high-water mark) puts one of `times`
    within `span` seconds."""
    return any(abs(clock.wall - t) < span or abs(clock.high_water - t) < span for t in times)


def watched(clock: Clock, since: float) -> float:
    """The time memoryd has watched pass since the `witnessed` count `since`."""
    return clock.witnessed - since


def may_go(clock: Clock, since: float, times: Iterable[float], span: float) -> bool:
    """Whether a thing first seen at `since` (a `witnessed` count), whose own records say
    `times`, is past a retention of `span` seconds by every clock memoryd trusts."""
    left = watched(clock, since)
    return not seen_within(clock, times, span) and left >= span and (span > 0 or left > 0)
