"""The intent journal of a dream pass, and recovery of a pass that a crash left unfinished.

A pass writes its whole plan of moves to the state store (one durable transaction) before the
first one, a row per move made, and removes its journal at the end. Recovery at the start of
any writing command rolls forward what was done (manifest records, index lines) and leaves
the rest to the next pass.
"""

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from memoryd.errors import MemorydError
from memoryd.model import safejson
from memoryd.storage import fsops
from memoryd.storage.statedb import Schema, StateDB
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash
from memoryd.trash.store import TrashRecord

# `cli._journals_left` looks for a row of this table without importing this module (a test
# keeps the names equal).
TABLE = "journal_pass"
SCHEMA = Schema(
    "journal",
    1,
    """CREATE TABLE journal_pass (pass_id TEXT PRIMARY KEY, dir TEXT NOT NULL, moves TEXT NOT NULL);
        CREATE TABLE journal_done (pass_id TEXT NOT NULL REFERENCES journal_pass ON DELETE CASCADE,
                                   record_id TEXT NOT NULL, PRIMARY KEY (pass_id, record_id))
                                   WITHOUT ROWID""",
    ("journal_pass", "journal_done"),
)


@dataclass(slots=True)
class Journal:
    state_dir: Path
    pass_id: str
    dir: Path
    moves: list[TrashRecord]
    done: set[str] = field(default_factory=set)


def _db(state_dir: Path) -> StateDB:
    db = StateDB.in_state_dir(state_dir)
    db.ensure(SCHEMA)
    return db


def begin(state_dir: Path, pass_id: str, memory_dir: Path, moves: list[TrashRecord]) -> Journal:
    db = _db(state_dir)
    moves_json = json.dumps([safejson.loads(m.to_json()) for m in moves], ensure_ascii=True)
    # The intent is durable before the first move (a power cut after a move must find it).
    with db.durable() as tx:
        tx.execute(
            "INSERT INTO journal_pass VALUES (?, ?, ?)", (pass_id, str(memory_dir), moves_json)
        )
    fsops.crash_point("journal.begun")
    return Journal(state_dir, pass_id, memory_dir, moves)


def mark_done(journal: Journal, record_id: str) -> None:
    # Not synced: a "done" row is a hint. Recovery decides from where each file is.
    with _db(journal.state_dir).transaction() as tx:
        tx.execute("INSERT OR IGNORE INTO journal_done VALUES (?, ?)", (journal.pass_id, record_id))
    journal.done.add(record_id)
    fsops.crash_point("journal.marked")


def commit(journal: Journal) -> None:
    """The pass is done: its journal goes."""
    discard(journal)
    fsops.crash_point("journal.committed")


def discard(journal: Journal) -> None:
    """Remove a journal and its rows of moves made (recovery finished its pass)."""
    with _db(journal.state_dir).transaction() as tx:
        tx.execute("DELETE FROM journal_pass WHERE pass_id = ?", (journal.pass_id,))


def load(state_dir: Path, pass_id: str) -> Journal | None:
    """A pass's journal as `begin` and `mark_done` wrote it; None when there is none (the
    pass ended meanwhile) or its intent does not parse."""
    conn = _db(state_dir).connection()
    row = conn.execute("SELECT dir, moves FROM journal_pass WHERE pass_id = ?", (pass_id,))
    found = row.fetchone()
    if found is None:
        return None
    try:
        moves = [TrashRecord(**m) for m in safejson.loads(found[1])]
    except (ValueError, KeyError, TypeError):
        return None
    done = conn.execute("SELECT record_id FROM journal_done WHERE pass_id = ?", (pass_id,))
    return Journal(state_dir, pass_id, Path(found[0]), moves, {r for (r,) in done})


def pending(state_dir: Path) -> list[str]:
    """The pass ids of the journals in the store, oldest first."""
    conn = _db(state_dir).connection()
    return [p for (p,) in conn.execute("SELECT pass_id FROM journal_pass ORDER BY pass_id")]


@dataclass(slots=True)
class Recovery:
    journal: Journal
    moved: list[TrashRecord] = field(default_factory=list)
    not_moved: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)  # moved, manifest line still to write

    @property
    def outcome(self) -> str:
        text = (
            f"rolled forward {len(self.moved)} move(s); {len(self.not_moved)} not made "
            "(the next pass decides again)"
        )
        return text + (f"; {'; '.join(self.problems)}" if self.problems else "")


def _manifest_ids(memory_dir: Path, day: str) -> set[str]:
    return {
        str(row.get("id")) for row in trash_manifest.manifest_rows(memory_dir, day) if "id" in row
    }


def _record_once(memory_dir: Path, record: TrashRecord, dst: Path, result: "Recovery") -> bool:
    """Give a file the journal moved its manifest record, unless it has one; False when it
    could not be written (the journal is then kept for the next command)."""
    if record.id in _manifest_ids(memory_dir, record.day):
        return True
    # The journal's record was made before the move: the size is the file's.
    done = replace(record, size=os.lstat(dst).st_size)
    try:
        trash.append_record(memory_dir, record.day, done.to_json())
    except (OSError, MemorydError) as error:
        result.unrecorded.append(record.original_name)
        result.problems.append(
            f"{dst}: its manifest record could not be written ({error}); free some disk "
            "space: the next memoryd command writes it"
        )
        return False
    return True


def settle(journal: Journal) -> Recovery:
    """Find out which planned moves happened, and finish their bookkeeping. Idempotent."""
    result = Recovery(journal)
    memory_dir = journal.dir
    try:
        with trash.open_trash(memory_dir):
            pass
    except MemorydError as error:
        # `.trash` became a symlink or a file: nothing is looked at or written through it.
        # The journal stays, tried again by every command, until a person moves `.trash`
        # aside (the message says so).
        result.problems.append(str(error))
        result.unrecorded.extend(r.original_name for r in journal.moves)
        return result
    for record in journal.moves:
        folder = trash.trash_root(memory_dir) / record.day
        src = memory_dir / record.original_name
        dst = folder / record.stored_name
        src_there = os.path.lexists(src)
        dst_there = os.path.lexists(dst)
        if src_there and dst_there and os.lstat(src).st_ino == os.lstat(dst).st_ino:
            os.unlink(src)  # the link-then-unlink fallback stopped halfway
            src_there = False
        if dst_there and record.id not in _manifest_ids(memory_dir, record.day):
            # Moved, not yet recorded: the pass may have died before it looked at what it
            # moved. A version it never checked (renamed onto the name between its check and
            # its rename) goes back into the dir; it is no move of this pass.
            try:
                kept = trash.put_back_unchecked(memory_dir, record)
            except (OSError, MemorydError) as error:
                result.unrecorded.append(record.original_name)
                result.problems.append(f"{dst}: could not be checked ({error})")
                continue
            if kept is not None:
                result.not_moved.append(record.original_name)
                back = "" if kept == record.original_name else f" as {kept}"
                result.problems.append(
                    f"{record.original_name}: what was moved was not the version the pass "
                    f"checked; it was put back{back}"
                )
                continue
        if src_there and dst_there:
            # A new file took the name after the move (a move undone that could not be):
            # the trashed one still gets its record, so it can be restored.
            result.problems.append(
                f"{record.original_name} is both in the dir and the trash: a new file took "
                "its name; the trashed one stays restorable"
            )
            _record_once(memory_dir, record, dst, result)
            continue
        if dst_there and not src_there:
            if _record_once(memory_dir, record, dst, result):
                result.moved.append(record)
        elif src_there:
            result.not_moved.append(record.original_name)
        else:
            result.problems.append(f"{record.original_name} is in neither the dir nor the trash")
    return result
