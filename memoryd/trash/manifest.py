"""Reading a trash: its manifests' records checked line by line, what each day folder holds, and
restoring a trashed file to its memory dir.
"""

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.errors import MemorydError
from memoryd.indexing.scan import skip_reason
from memoryd.model import safejson
from memoryd.paths import BoundedLines, open_regular, read_problem
from memoryd.storage import fsops
from memoryd.trash.store import (
    MANIFEST,
    TRASHED_SUFFIX,
    TrashRecord,
    append_record,
    day_dirs,
    open_day,
    open_trash,
    trash_root,
)

# A manifest is a file anyone who can write the memory dir can plant. So every name read from
# it must be one the mover could have written (DESIGN §2.7): a memory file's plain name
# (`scan.skip_reason`), one directory entry (no `/` or NUL, at most NAME_MAX bytes), ids as
# `new_id` makes them. A newline or a quote is legal in a POSIX name: harmless relative to a
# folder descriptor, and shown escaped.
NAME_MAX_BYTES = fsops.NAME_MAX_BYTES
# A record is a few hundred bytes: a longer line is none the mover wrote, and a manifest is
# read up to MANIFEST_MAX_BYTES (~100,000 records), so a planted one cannot hold a reader long.
MANIFEST_LINE_MAX = 1 << 20
MANIFEST_MAX_BYTES = 64 << 20
_ID = re.compile(r"^[0-9a-f]{10}$")
_TEXT_FIELDS = ("id", "original_name", "stored_name", "day", "sha256", "reason", "pass_id", "time")


def _entry_problem(name: object) -> str | None:
    """Why `name` is no single directory entry's name, or None."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if "/" in name or "\0" in name:
        return "not a plain file name (it has a path separator or a NUL)"
    try:
        size = len(os.fsencode(name))
    except UnicodeError:
        return "not a file name this system can encode"
    return f"longer than {NAME_MAX_BYTES} bytes" if size > NAME_MAX_BYTES else None


def name_problem(name: object) -> str | None:
    """Why `name` is not a name the mover could have written, or None when it is."""
    why = _entry_problem(name)
    if why is None and (skipped := skip_reason(str(name))) is not None:
        return f"not a memory file's name ({skipped})"
    return why


def stored_problem(name: object) -> str | None:
    """Why `name` is no name the mover could have stored a file under (`<memory
    name>.trashed`, or a plain memory name as memoryd stored them before), or None."""
    if isinstance(name, str) and name.endswith(TRASHED_SUFFIX):
        return _entry_problem(name) or name_problem(name.removesuffix(TRASHED_SUFFIX))
    return name_problem(name)


def record_problem(row: dict[str, Any], day: str) -> str | None:
    """Why a manifest row is not a move record memoryd wrote into day folder `day`, or None."""
    for key in _TEXT_FIELDS:
        if not isinstance(row.get(key), str):
            return f"its {key!r} is missing or not text"
    if not _ID.match(row["id"]):
        return f"its id {row['id']!r} is not one memoryd makes"
    if row["day"] != day:
        return f"it says day {row['day']!r} but sits in {day}"
    for key in ("original_name", "stored_name"):
        why = name_problem(row[key]) if key == "original_name" else stored_problem(row[key])
        if why is not None:
            return f"its {key} {row[key]!r} is {why}"
    if not isinstance(row.get("size", 0), int):
        return "its size is not a number"
    return None


@dataclass(frozen=True, slots=True)
class Invalid:
    """A manifest line memoryd will not act on: listed as such, never restored."""

    folder: Path
    line: int  # 0: the manifest as a whole
    problem: str
    id: str = ""  # the id the line gives, if it is text: what a person may ask to restore

    @property
    def message(self) -> str:
        if not self.line:
            return (
                f"{self.folder / MANIFEST}: {self.problem}; memoryd does not read it nor act on "
                "any record in this folder (none is restorable). If you trust the files here, "
                "move them back by hand; else move the manifest aside"
            )
        return (
            f"{self.folder / MANIFEST} line {self.line}: {self.problem}; memoryd does not act "
            "on this record (it is not restorable). If you trust the file it names, move it "
            "back by hand; else delete the line"
        )


@dataclass(slots=True)
class Entry:
    """A record with where its file is now; `restored_as` and `restored_at` once it went back."""

    record: TrashRecord
    folder: Path
    restored_as: str | None = None
    restored_at: str | None = None

    @property
    def stored_path(self) -> Path:
        return self.folder / self.record.stored_name


Line = dict[str, Any] | str | None  # a row; why it was not read (str); no JSON object (None)


def manifest_lines(memory_dir: Path, day: str) -> Iterator[tuple[int, Line]]:
    """(line number, row) of a day folder's manifest, None for a line that is no JSON object.
    Nothing when there is no manifest; (0, why) when it is no regular file or cannot be read;
    (n, why) for a line over MANIFEST_LINE_MAX and from MANIFEST_MAX_BYTES on. A last line
    without its newline is torn (a power cut): not a line yet."""
    try:
        with open_day(memory_dir, day) as day_fd:
            fd, _ = open_regular(
                MANIFEST, dir_fd=day_fd, follow=False, shown=trash_root(memory_dir) / day
            )
    except FileNotFoundError:
        return
    except MemorydError:
        return  # the day folder is not a plain folder: it is no day (see day_dirs)
    except OSError as error:
        yield 0, read_problem(error)
        return
    try:
        lines = BoundedLines(fd, max_line=MANIFEST_LINE_MAX, max_bytes=MANIFEST_MAX_BYTES)
        for number, raw in lines:
            if raw is None:
                yield number, f"the line is over {MANIFEST_LINE_MAX} bytes: none memoryd wrote"
                continue
            try:
                row = safejson.loads(raw)
            except (ValueError, RecursionError):  # nested past json's depth: none we wrote
                row = None
            yield number, row if isinstance(row, dict) else None
        if lines.cut:
            why = f"the manifest is over {MANIFEST_MAX_BYTES} bytes: this line and all after it"
            yield lines.cut, why + " are not read"
    except OSError as error:
        yield 0, read_problem(error)
    finally:
        os.close(fd)


def manifest_rows(memory_dir: Path, day: str) -> Iterator[dict[str, Any]]:
    """The rows of a day folder's manifest (none when it or its folder cannot be read)."""
    for _, row in manifest_lines(memory_dir, day):
        if isinstance(row, dict):
            yield row


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(slots=True)
class Contents:
    entries: list[Entry] = field(default_factory=list)
    invalid: list[Invalid] = field(default_factory=list)


def contents(memory_dir: Path) -> Contents:
    """Every trashed file of a dir, oldest first, with its restore state, and every manifest
    record memoryd will not act on (UnsafeFilesystemOperation: the trash is no folder)."""
    root = trash_root(memory_dir)
    out: dict[str, Entry] = {}
    invalid: list[Invalid] = []
    with open_trash(memory_dir) as trash_fd:
        days = day_dirs(trash_fd) if trash_fd is not None else []
    for day in days:
        folder = root / day
        for number, row in manifest_lines(memory_dir, day):
            if row is None:
                continue  # a torn line a power cut left: readers skip it (open_manifest)
            if isinstance(row, str):
                invalid.append(Invalid(folder, number, row))
                continue
            if "restored" in row:
                restored, name = row["restored"], row.get("as")
                why = name_problem(name)
                if why is not None:
                    why = f"its restored name {name!r} is {why}"
                    invalid.append(Invalid(folder, number, why, _text(restored)))
                elif isinstance(restored, str) and restored in out:
                    out[restored].restored_as = str(name)
                    out[restored].restored_at = _text(row.get("time")) or None
                continue
            why = record_problem(row, day)
            if why is None:
                try:
                    record = TrashRecord(
                        **{k: v for k, v in row.items() if k in TrashRecord.__dataclass_fields__}
                    )
                except TypeError:
                    why = "it is not a move record"
                else:
                    out[record.id] = Entry(record, folder)
            if why is not None:
                invalid.append(Invalid(folder, number, why, _text(row.get("id"))))
    return Contents(list(out.values()), invalid)


def entries(memory_dir: Path) -> list[Entry]:
    """`contents(memory_dir).entries`: the valid records only."""
    return contents(memory_dir).entries


def _same(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError, RuntimeError):
        return a == b or a.resolve() == b.resolve()
    return False


def matches(memory_dir: Path, entry: Entry, key: str) -> bool:
    """Whether `key` names the entry as `trash list` prints it or a person types it: its
    trashed file's path (absolute, or relative to the working folder, the memory dir or the
    trash), the path it had, or its original or stored name."""
    record = entry.record
    if "/" not in key:
        return key in (record.original_name, record.stored_name)
    path = Path(key).expanduser()
    candidates = [path]
    if not path.is_absolute():
        candidates = [memory_dir / path, trash_root(memory_dir) / path]
        with contextlib.suppress(OSError):  # a working folder that is gone
            candidates.append(Path.cwd() / path)
    # The path under the older naming (without `.trashed`) still names it.
    older = entry.folder / record.stored_name.removesuffix(TRASHED_SUFFIX)
    known = (entry.stored_path, older, memory_dir / record.original_name)
    return any(_same(c, k) for c in candidates for k in known)


def find(memory_dir: Path, key: str) -> Entry | None:
    """An entry by id, or by a path or a name (`matches`; valid records only): of several,
    the newest still in the trash, else the newest restored one (which `restore` refuses)."""
    found = entries(memory_dir)
    for entry in found:
        if entry.record.id == key:
            return entry
    fitting = [e for e in found if matches(memory_dir, e, key)]
    live = [e for e in fitting if not e.restored_as]
    pick = live or fitting  # oldest first (by day folder, then manifest line): the last
    return pick[-1] if pick else None


def restore_name(memory_dir: Path, original: str) -> str:
    """The original name, or `<stem>.restored-<n>.md` when that is taken again, the stem cut
    to fit NAME_MAX_BYTES (`fsops.fit_name`: else a long name could never be restored)."""
    if not os.path.lexists(memory_dir / original):
        return original
    stem = original.removesuffix(".md")
    n = 1
    while os.path.lexists(memory_dir / fsops.fit_name(stem, f".restored-{n}.md")):
        n += 1
    return fsops.fit_name(stem, f".restored-{n}.md")


def restore(memory_dir: Path, entry: Entry) -> str:
    """Move a trashed file back; returns the name it got. The sha256 must still match."""
    if entry.restored_as:
        when = f" on {entry.restored_at}" if entry.restored_at else ""
        raise MemorydError(
            f"{entry.record.id} ({entry.record.original_name}, trashed {entry.record.day}) was "
            f"already restored{when} as {entry.restored_as}: the current file is "
            f"{memory_dir / entry.restored_as}; nothing was done (`memoryd trash list` shows "
            "what is still in the trash)"
        )
    # Checked again here, whoever made the entry: these names are used as they are.
    why = record_problem(asdict(entry.record), entry.folder.name)
    if why is not None:
        raise MemorydError(
            f"{entry.folder / MANIFEST}: the record of {entry.record.id!r}: {why}; memoryd "
            "does not act on it. If you trust the file it names, move it back by hand"
        )
    try:
        with open_day(memory_dir, entry.folder.name) as fd:
            data, _ = fsops.read_regular(fd, entry.record.stored_name, 64 << 20)
    except FileNotFoundError as error:
        raise MemorydError(
            f"{entry.stored_path}: the trashed file is gone (purged or moved by hand); "
            "nothing to restore"
        ) from error
    if hashlib.sha256(data).hexdigest() != entry.record.sha256:
        raise MemorydError(
            f"{entry.stored_path}: its content no longer matches the manifest's sha256; "
            "restore it by hand if you trust it"
        )
    name = restore_name(memory_dir, entry.record.original_name)
    with fsops.open_dir(memory_dir) as dir_fd, open_day(memory_dir, entry.folder.name) as day_fd:
        fsops.check_same_filesystem(day_fd, entry.folder, dir_fd, memory_dir)
        fsops.rename_no_replace(
            day_fd, entry.record.stored_name, dir_fd, name, where=(entry.folder, memory_dir)
        )
        fsops.fsync_dir(dir_fd)
        fsops.fsync_dir(day_fd)
    now = datetime.now().astimezone().isoformat()
    line = json.dumps({"restored": entry.record.id, "as": name, "time": now})
    append_record(memory_dir, entry.folder.name, line)
    return name
