"""The intent journal of a dream pass, and recovery of a pass that a crash left unfinished.

A pass writes (and fsyncs) its whole plan of moves before the first one, appends a line per move
made, and a commit line at the end. Recovery at the start of any writing command rolls forward
what was done (manifest records, index lines) and leaves the rest to the next pass.
"""

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memoryd import fsops, safejson
from memoryd.errors import MemorydError
from memoryd.paths import ensure_private_dir, read_bounded
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash
from memoryd.trash.store import TrashRecord

JOURNAL_DIR = "journal"


def journal_dir(state_dir: Path) -> Path:
    return state_dir / JOURNAL_DIR


@dataclass(slots=True)
class Journal:
    path: Path
    pass_id: str
    dir: Path
    moves: list[TrashRecord]
    done: set[str] = field(default_factory=set)
    committed: bool = False


def _append(path: Path, row: dict[str, Any], *, sync: bool = True) -> None:
    # O_NONBLOCK: a FIFO in its place fails the append (ENXIO) instead of waiting for a reader.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, (json.dumps(row, ensure_ascii=True) + "\n").encode("ascii"))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def begin(state_dir: Path, pass_id: str, memory_dir: Path, moves: list[TrashRecord]) -> Journal:
    folder = ensure_private_dir(journal_dir(state_dir))
    path = folder / f"{pass_id}.jsonl"
    intent = {
        "intent": pass_id,
        "dir": str(memory_dir),
        "moves": [safejson.loads(m.to_json()) for m in moves],
    }
    tmp = folder / f".{pass_id}{fsops.TEMP_MARK}intent.tmp"
    fsops.write_private(tmp, (json.dumps(intent, ensure_ascii=True) + "\n").encode("ascii"))
    os.rename(tmp, path)  # the journal appears whole or not at all
    with fsops.open_dir(folder) as fd:
        fsops.fsync_dir(fd)
    fsops.crash_point("journal.begun")
    return Journal(path, pass_id, memory_dir, moves)


def mark_done(journal: Journal, record_id: str) -> None:
    # Not fsynced: a "done" line is a hint. Recovery decides from where each file is.
    _append(journal.path, {"done": record_id}, sync=False)
    journal.done.add(record_id)
    fsops.crash_point("journal.marked")


def commit(journal: Journal) -> None:
    _append(journal.path, {"commit": journal.pass_id})
    fsops.crash_point("journal.committed")
    journal.path.unlink()


# An intent lists a pass's moves (a few hundred bytes each, at most a fifth of a dir's files):
# a journal over this is none memoryd wrote.
JOURNAL_MAX_BYTES = 256 << 20


def load(path: Path) -> Journal | None:
    """A journal as `begin` and the appends wrote it; None when it cannot be read (not a
    regular file, a symlink, over JOURNAL_MAX_BYTES) or its intent does not parse."""
    try:
        lines = read_bounded(path, JOURNAL_MAX_BYTES, follow=False).split(b"\n")
    except OSError:
        return None
    try:
        intent = safejson.loads(lines[0])
        moves = [TrashRecord(**m) for m in intent["moves"]]
        journal = Journal(path, intent["intent"], Path(intent["dir"]), moves)
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    for raw in lines[1:]:
        try:
            row = safejson.loads(raw)
        except ValueError:
            continue  # a torn last line
        if not isinstance(row, dict):
            continue
        if "done" in row:
            journal.done.add(row["done"])
        if "commit" in row:
            journal.committed = True
    return journal


def pending(state_dir: Path) -> list[Path]:
    folder = journal_dir(state_dir)
    try:
        return sorted(folder / n for n in os.listdir(folder) if n.endswith(".jsonl"))
    except OSError:
        return []


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
        # The journal stays until a person moves it aside (the message says so).
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
