"""A trash's day folders past their retention: which to purge (only when the clock looks sane),
what each holds, and purging them.
"""

import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

from memoryd.errors import MemorydError, UnsafeFilesystemOperation
from memoryd.storage import fsops
from memoryd.storage.state import StateStore, dir_key
from memoryd.storage.statedb import Schema, StateDB
from memoryd.trash.manifest import manifest_lines, record_problem
from memoryd.trash.store import (
    FAR_FORWARD_DAYS,
    MANIFEST,
    PURGING_PREFIX,
    day_dirs,
    open_day,
    open_trash,
    parse_day,
    trash_root,
)


# --- rotation ----------------------------------------------------------------------------------
@dataclass(slots=True)
class PurgePlan:
    purge: list[str] = field(default_factory=list)
    refused: str = ""


def plan_purge(
    day_names: list[str], today: date, keep_days: int, last_run: date | None
) -> PurgePlan:
    """Which day folders are past retention; nothing when the clock looks wrong (pure)."""
    days = sorted(d for d in (parse_day(n) for n in day_names) if d is not None)
    newest = days[-1] if days else None
    if last_run is not None and today < last_run - timedelta(days=1):
        return PurgePlan(refused=f"the clock went back from {last_run} to {today}")
    if last_run is not None and today > last_run + timedelta(days=FAR_FORWARD_DAYS):
        return PurgePlan(refused=f"the clock jumped forward from {last_run} to {today}")
    if newest is not None and today < newest - timedelta(days=1):
        return PurgePlan(refused=f"today ({today}) is before the newest trash folder ({newest})")
    cutoff = today - timedelta(days=keep_days)
    return PurgePlan(purge=[d.isoformat() for d in days if d < cutoff])


@dataclass(frozen=True, slots=True)
class DayFacts:
    """What a day folder itself says about when memoryd wrote it, for retention."""

    identity: str  # folder dev, ino, mtime_ns; manifest ino, size, mtime_ns ("": unknown)
    times: list[float]  # every valid record's `time` (moves and restores), as epoch seconds
    problem: str = ""  # why nothing here can say when memoryd moved its files


def _epoch(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.astimezone()).timestamp()


# Each dir's day folders as memoryd last saw them (`trash_day`, a row per folder): their
# identity (DayFacts.identity), the witnessed count when memoryd first saw them so (`since`:
# any write to a folder, a move or a restore, starts its retention again) and the problem
# said of one ("" when none).
SCHEMA = Schema(
    "trash_days",
    1,
    """CREATE TABLE trash_day (dir TEXT NOT NULL, day TEXT NOT NULL, identity TEXT NOT NULL,
                               since REAL NOT NULL, reported TEXT NOT NULL,
                               PRIMARY KEY (dir, day)) WITHOUT ROWID""",
    ("trash_day",),
)
Watched = tuple[str, float, str]  # identity, since, the problem said


def watched(store: StateStore, real_path: Path) -> dict[str, Watched]:
    """The dir's day folders as recorded."""
    conn = StateDB.in_state_dir(store.state_dir).reader(SCHEMA)
    sql = "SELECT day, identity, since, reported FROM trash_day WHERE dir = ?"
    rows = conn.execute(sql, (dir_key(real_path),)) if conn else ()
    return {day: (identity, since, said) for day, identity, since, said in rows}


def save_watched(store: StateStore, real_path: Path, days: dict[str, Watched]) -> None:
    key = dir_key(real_path)
    store.db().ensure(SCHEMA)
    with store.db().transaction() as conn:
        conn.execute("DELETE FROM trash_day WHERE dir = ?", (key,))
        rows = [(key, day, *row) for day, row in days.items()]
        conn.executemany("INSERT INTO trash_day VALUES (?, ?, ?, ?, ?)", rows)


def day_facts(memory_dir: Path, day: str) -> DayFacts:
    """The identity of a day folder and its manifest, and the times its records give.

    A folder whose manifest is missing or unreadable, or has no valid record, or a record
    without a readable time, has a `problem`: retention cannot rest on its name alone."""
    try:
        with open_day(memory_dir, day) as day_fd:
            folder = os.fstat(day_fd)
            manifest = os.stat(MANIFEST, dir_fd=day_fd, follow_symlinks=False)
    except FileNotFoundError:
        return DayFacts("", [], "it has no manifest.jsonl saying when memoryd moved its files")
    except (OSError, MemorydError) as error:
        return DayFacts("", [], f"its manifest cannot be read ({error})")
    if not stat.S_ISREG(manifest.st_mode):
        return DayFacts("", [], "its manifest.jsonl is not a regular file")
    numbers = (folder.st_dev, folder.st_ino, folder.st_mtime_ns, manifest.st_ino)
    identity = " ".join(map(str, (*numbers, manifest.st_size, manifest.st_mtime_ns)))
    times: list[float] = []
    records = 0
    for number, row in manifest_lines(memory_dir, day):
        if row is None:
            continue
        if isinstance(row, str):
            where = f"line {number} of its manifest" if number else "its manifest"
            return DayFacts(identity, [], f"{where}: {row}")
        moved = "restored" not in row
        if moved and record_problem(row, day) is not None:
            continue
        when = _epoch(row.get("time"))
        if when is None:
            return DayFacts(identity, [], f"line {number} of its manifest has no readable time")
        records += moved
        times.append(when)
    if not records:
        return DayFacts(identity, [], "its manifest has no valid move record")
    return DayFacts(identity, times)


def _remove_tree_at(trash_fd: int, name: str, memory_dir: Path) -> None:
    """Remove a folder of the trash without following any symlink inside it (a link is
    removed, not its target).

    shutil.rmtree uses the fd-based walk on Linux, which never follows links; on platforms
    where it cannot, refuse instead of risking a walk out of the trash.
    """
    if not shutil.rmtree.avoids_symlink_attacks:
        raise UnsafeFilesystemOperation(
            f"{trash_root(memory_dir) / name}: this platform cannot remove folders without "
            "following links; remove it by hand"
        )
    shutil.rmtree(name, dir_fd=trash_fd)


def _is_plain_dir(trash_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=trash_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def purge_days(memory_dir: Path, days: list[str]) -> list[str]:
    """Rename each day folder aside, then remove it; finished ones are returned. All of it
    relative to the trash's own descriptor: nothing is reached through a link."""
    done: list[str] = []
    with open_trash(memory_dir) as trash_fd:
        if trash_fd is None:
            return done
        for day in days:
            if not _is_plain_dir(trash_fd, day):
                continue
            aside = f"{PURGING_PREFIX}{day}-{secrets.token_hex(3)}"
            os.rename(day, aside, src_dir_fd=trash_fd, dst_dir_fd=trash_fd)
            fsops.crash_point("trash.purge_aside")
            _remove_tree_at(trash_fd, aside, memory_dir)
            done.append(day)
    return done


def finish_leftovers(memory_dir: Path) -> list[str]:
    """Remove aside-folders a crashed purge left behind."""
    done: list[str] = []
    with open_trash(memory_dir) as trash_fd:
        if trash_fd is None:
            return done
        for name in sorted(os.listdir(trash_fd)):
            if name.startswith(PURGING_PREFIX) and _is_plain_dir(trash_fd, name):
                _remove_tree_at(trash_fd, name, memory_dir)
                done.append(name)
    return done


def day_names(memory_dir: Path) -> list[str]:
    """The trash's day folders (plain folders only). Raises UnsafeFilesystemOperation when
    `.trash` is a symlink or a file."""
    with open_trash(memory_dir) as trash_fd:
        return day_dirs(trash_fd) if trash_fd is not None else []
