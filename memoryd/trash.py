"""The trash: `<memory dir>/.trash/YYYY-MM-DD/` day folders with a JSONL manifest each.

memoryd never deletes a memory: it renames it into today's day folder (same filesystem, never
overwriting) and appends a manifest record saying why. Restore renames it back. Day folders past
their retention are purged, but only when the clock looks sane.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from memoryd import fsops, gitwork, openfiles, safejson, versions
from memoryd.errors import MemorydError, UnsafeFilesystemOperation
from memoryd.indexing.scan import skip_reason
from memoryd.paths import (
    BoundedLines,
    NotRegularFile,
    app_paths,
    ensure_private_dir,
    open_regular,
    read_problem,
    regular_fd,
)
from memoryd.state import dir_key

TRASH_DIR = ".trash"
REPO_TRASH = "trash"  # the state dir's folder of the trashes of dirs in git work trees
MANIFEST = "manifest.jsonl"
# Appended to a trashed file's name (see free_name); a trash written before has plain names.
TRASHED_SUFFIX = ".trashed"
PURGING_PREFIX = ".purging-"
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
FAR_FORWARD_DAYS = 366  # a jump this far since the last run is a broken clock, not a holiday


@dataclass(frozen=True, slots=True)
class TrashRecord:
    id: str
    original_name: str
    stored_name: str
    day: str
    sha256: str
    size: int
    reason: str
    pass_id: str
    time: str
    duplicate_of: str | None = None
    superseded_by: str | None = None
    index_line: str | None = None  # the pointer line it had, so a restore can put it back
    # Where that line sat in MEMORY.md (index.Place as JSON: the pointer line before it and the
    # heading it was under), so a restore puts it back there; None in older manifests.
    index_place: dict[str, str | None] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=True, sort_keys=True)


def parse_day(name: str) -> date | None:
    if not _DAY.match(name):
        return None
    try:
        return date.fromisoformat(name)
    except ValueError:
        return None


def new_id() -> str:
    return secrets.token_hex(5)


def trash_root(memory_dir: Path) -> Path:
    """Where a dir's trash is: `<memory dir>/.trash`; for a dir in a git work tree (whose
    `git status` must show only what memoryd changed), `trash/<dir key>` in the state dir.

    A trash that is there already stays where it is, whatever the dir has become since (a
    `.trash` an older memoryd made in a repo dir, a dir that entered or left a work tree):
    no entry is ever left where no command looks. A state dir on another filesystem than the
    memory dir cannot take a move (a rename): the trash is then `.trash` after all."""
    local = memory_dir / TRASH_DIR
    if os.path.lexists(local):
        return local
    real = Path(os.path.realpath(memory_dir))
    kept = app_paths().state_dir / REPO_TRASH / dir_key(real)
    if os.path.lexists(kept):
        return kept
    if gitwork.work_tree(memory_dir) is None or not _same_filesystem(real, kept):
        return local
    return kept


def _same_filesystem(memory_dir: Path, kept: Path) -> bool:
    """Whether a rename from the memory dir can reach `kept` (the nearest folder of it that
    exists is on the dir's filesystem); a dir that cannot be looked at counts as yes (the
    move's own check says what is wrong)."""
    try:
        device = os.stat(memory_dir).st_dev
    except OSError:
        return True
    for folder in kept.parents:
        try:
            return os.stat(folder).st_dev == device
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return True


def stored_label(memory_dir: Path, day: str, stored_name: str) -> str:
    """Where a trashed file is, as reports show it: relative to the memory dir (`.trash/...`),
    or the full path of a trash in the state dir."""
    root = trash_root(memory_dir)
    if root.name == TRASH_DIR:
        return f"{TRASH_DIR}/{day}/{stored_name}"
    return str(root / day / stored_name)


def _not_plain(path: Path) -> UnsafeFilesystemOperation:
    return UnsafeFilesystemOperation(
        f"{path} is not a plain folder (a symlink or a file): memoryd will not put memories "
        "there, nor read or remove anything through it. Move it aside and rerun."
    )


def _ensure_real_dir(path: Path) -> None:
    """Create a trash folder 0700, refusing a symlink or a non-folder in its place."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _not_plain(path)


_NO_FOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def open_trash(memory_dir: Path) -> Iterator[int | None]:
    """The memory dir's `.trash`, opened without following a link; None when there is none.

    Everything that reads, moves or removes in the trash goes through this descriptor (never
    through a path), so a `.trash` that is, or becomes, a symlink can never lead a purge or a
    restore out of the memory dir: it is refused.
    """
    root = trash_root(memory_dir)
    holder = memory_dir if root.name == TRASH_DIR else root.parent
    fd = -1
    if root.name == TRASH_DIR or holder.is_dir():
        with fsops.open_dir(holder) as dir_fd:
            try:
                fd = os.open(root.name, _NO_FOLLOW_DIR, dir_fd=dir_fd)
            except FileNotFoundError:
                fd = -1
            except OSError as error:  # ELOOP: a symlink; ENOTDIR: a file
                raise _not_plain(root) from error
    try:
        yield fd if fd >= 0 else None
    finally:
        if fd >= 0:
            os.close(fd)


@contextlib.contextmanager
def open_day(memory_dir: Path, day: str) -> Iterator[int]:
    """A day folder of the trash, reached without following any link (raises when it is not
    a plain folder, FileNotFoundError when it does not exist)."""
    with open_trash(memory_dir) as trash_fd:
        if trash_fd is None:
            raise FileNotFoundError(2, "No such file or directory", str(trash_root(memory_dir)))
        try:
            fd = os.open(day, _NO_FOLLOW_DIR, dir_fd=trash_fd)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise _not_plain(trash_root(memory_dir) / day) from error
    try:
        yield fd
    finally:
        os.close(fd)


def _day_dirs(trash_fd: int) -> list[str]:
    """The names of the trash's day folders that are plain folders (links are no days)."""
    out = []
    for name in os.listdir(trash_fd):
        if parse_day(name) is None:
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(name, dir_fd=trash_fd, follow_symlinks=False).st_mode):
                out.append(name)
    return sorted(out)


def day_folder(memory_dir: Path, day: date) -> Path:
    root = trash_root(memory_dir)
    if root.name != TRASH_DIR:
        ensure_private_dir(root.parent)
    _ensure_real_dir(root)
    folder = root / day.isoformat()
    _ensure_real_dir(folder)
    return folder


def free_name(folder: Path, name: str, taken: Collection[str] = ()) -> str:
    """The name a trashed `name` is stored under: `<name>.trashed`, or `<stem>.2.md.trashed`,
    `<stem>.3.md.trashed`... : never overwriting in the trash (a file of the older naming,
    `<name>` itself, counts as taken too), never one of `taken`.

    No stored name ends in `.md`: Claude Code scans every `*.md` below the memory dir for
    memories (2.1.197 dot-folders included, so `.trash/` too), and a trashed file must not
    come back to the agent as a live memory."""
    stem = name.removesuffix(".md")
    n = 1
    while True:
        stored = fsops.fit_name(stem, (".md" if n == 1 else f".{n}.md") + TRASHED_SUFFIX)
        older = stored.removesuffix(TRASHED_SUFFIX)
        if stored not in taken and not any(os.path.lexists(folder / x) for x in (stored, older)):
            return stored
        n += 1


def open_manifest(dir_fd: int, folder: Path | None = None) -> int:
    """The manifest of the day folder open as `dir_fd` (`folder`, for messages), opened for
    appending lines.

    A power cut can leave a manifest's last line torn (or, on some filesystems, its tail
    zero-filled): a line appended to that would be glued to it and lost with it. So a
    manifest that does not end in a newline gets one first; the torn line stays a line of
    its own that readers skip. A manifest that is not a regular file (a FIFO planted there
    would swallow the records, then block) is refused before anything moves.
    """
    fd = os.open(
        MANIFEST,
        os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    where = (folder / MANIFEST) if folder is not None else Path(MANIFEST)
    try:
        st = regular_fd(fd, where)
    except NotRegularFile as error:
        raise UnsafeFilesystemOperation(
            f"{error}: memoryd records no move in it (and so moves nothing into this folder). "
            "Move it aside and rerun."
        ) from error
    try:
        size = st.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_line(fd: int, line: str) -> None:
    """One manifest line, whole or not at all as far as readers go: a short write (a full
    disk) raises, and its torn piece is a line of its own for the next writer (open_manifest)."""
    data = (line + "\n").encode("ascii")
    if os.write(fd, data) != len(data):
        raise OSError(errno.ENOSPC, "the manifest line could not be written whole")


def holds_planned(folder_fd: int, record: TrashRecord, ino: int | None = None) -> bool:
    """Whether the record's stored file is a regular file holding the planned bytes (and,
    given `ino`, is that inode)."""
    try:
        data, st = fsops.read_regular(folder_fd, record.stored_name, 64 << 20)
    except (OSError, ValueError):
        return False
    if ino is not None and st.st_ino != ino:
        return False
    return hashlib.sha256(data).hexdigest() == record.sha256


def put_back(folder_fd: int, dir_fd: int, record: TrashRecord, where: tuple[Path, Path]) -> str:
    """Move a file the checks refused from the trash back into the memory dir, under its
    own name or, when a new file took that, `<stem>.kept-<n>.md`; the name it got.

    Raises MemorydError when it cannot (the file is then named, for a person to move)."""
    try:
        name = fsops.rename_to_free(
            folder_fd, record.stored_name, dir_fd, record.original_name, KEPT_VARIANT, where=where
        )
    except OSError as error:
        raise MemorydError(
            f"{where[0] / record.stored_name}: a version of {record.original_name} that "
            f"memoryd had not checked was moved here and could not be put back "
            f"({error.strerror}); move it back to {where[1]} by hand"
        ) from error
    fsops.crash_point("trash.put_back")
    return name


def put_back_unchecked(memory_dir: Path, record: TrashRecord) -> str | None:
    """For recovery: if the record's stored file is not the planned bytes, put it back into
    the dir (see `put_back`) and return the name it got; None when it is the planned file."""
    with fsops.open_dir(memory_dir) as dir_fd, open_day(memory_dir, record.day) as day_fd:
        if holds_planned(day_fd, record):
            return None
        return put_back(day_fd, dir_fd, record, (trash_root(memory_dir) / record.day, memory_dir))


def append_record(memory_dir: Path, day: str, line: str) -> None:
    with open_day(memory_dir, day) as day_fd:
        fd = open_manifest(day_fd, trash_root(memory_dir) / day)
    try:
        _write_line(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


MODIFIED = "modified since plan"
GONE = "gone since plan"
HELD = "open for writing by another program"
KEPT_VARIANT = ".kept-"  # `<stem>.kept-<n>.md`: a file put back whose name was taken meanwhile


@dataclass(frozen=True, slots=True)
class Unmoved:
    """A planned move not made: why (MODIFIED or GONE), and `kept_as` when the file was
    moved, found not to be the one checked, and put back under another name because a new
    file had taken its own."""

    why: str
    kept_as: str | None = None
    held_by: str = ""  # HELD: which programs (openfiles.describe)


class Mover:
    """Moves one pass's files into one day folder, syncing the disk once, at `close`.

    Each move is a rename and a manifest line, neither fsynced on its own (four fsyncs a move
    were most of a pass that moves hundreds of files). That is safe because the pass's intent
    journal, fsynced before the first move, names every planned move: after a power cut,
    recovery finds each file where it is and appends any manifest line that did not reach the
    disk (journal.settle). `close` fsyncs the manifest, then both folders.

    `before_move` is called with a file's name between its check and its rename (a test's
    concurrent writer). `versions`: the version store, told of each move (memoryd's own).
    `refuse_held`: a file another program holds open for writing (`tool > a.md` not done)
    goes back, unmoved (HELD): its later bytes would make the trashed file one the manifest
    does not describe, which `trash restore` refuses.
    """

    def __init__(
        self,
        memory_dir: Path,
        day: date,
        *,
        before_move: Callable[[str], None] | None = None,
        versions: "versions.VersionStore | None" = None,
        refuse_held: bool = False,
    ) -> None:
        self.memory_dir = memory_dir
        self.versions = versions
        self.refuse_held = refuse_held
        self.folder = day_folder(memory_dir, day)
        self._before_move = before_move
        self._stack = contextlib.ExitStack()
        self._manifest = -1
        try:
            self.dir_fd = self._stack.enter_context(fsops.open_dir(memory_dir))
            # Through the trash's own descriptor: a `.trash` swapped for a link since it was
            # checked is refused, never followed.
            self._folder_fd = self._stack.enter_context(open_day(memory_dir, self.folder.name))
            fsops.check_same_filesystem(self.dir_fd, memory_dir, self._folder_fd, self.folder)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> "Mover":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def move(self, record: TrashRecord) -> TrashRecord | Unmoved:
        """Move `record.original_name` to `record.stored_name` in the day folder if it still
        holds the planned bytes (`record.sha256`), and log it. Returns the record with the
        file's size, or why the move was not made.

        The check and the rename are two steps, and a file renamed onto the name between them
        would be moved unchecked. So what was moved is looked at again in the trash: it must
        be the very file checked (its inode) and still hold the planned bytes. If not, it goes
        back (under a `.kept-<n>` name if a new file took its own meanwhile), and the move
        counts as not made: the trash never holds a file its manifest's sha256 does not match.
        A move whose manifest line cannot be written (a full disk) is undone too: no file sits
        in the trash without its record.
        """
        try:
            found = fsops.identity_of(self.dir_fd, record.original_name)
        except (OSError, ValueError):  # a symlink, a FIFO, too big: no longer what was planned
            return Unmoved(MODIFIED)
        if found is None:
            return Unmoved(GONE)
        checked = found[1]
        if checked.sha256 != record.sha256:
            return Unmoved(MODIFIED)
        record = replace(record, size=checked.size)
        if self._manifest < 0:
            self._manifest = open_manifest(self._folder_fd, self.folder)
        if self._before_move is not None:
            self._before_move(record.original_name)
        fsops.rename_no_replace(
            self.dir_fd,
            record.original_name,
            self._folder_fd,
            record.stored_name,
            where=(self.memory_dir, self.folder),
        )
        fsops.crash_point("trash.after_move")
        if not holds_planned(self._folder_fd, record, checked.ino):
            name = self._put_back(record)
            return Unmoved(MODIFIED, None if name == record.original_name else name)
        # After the rename: no new open by name reaches the moved file.
        held = openfiles.writers(self._folder_fd, record.stored_name) if self.refuse_held else []
        if held:
            name = self._put_back(record)
            kept_as = None if name == record.original_name else name
            return Unmoved(HELD, kept_as, openfiles.describe(held))
        try:
            _write_line(self._manifest, record.to_json())
        except OSError as error:
            name = self._put_back(record)
            back = "" if name == record.original_name else f" as {name} (its name was taken)"
            raise MemorydError(
                f"{self.folder / MANIFEST}: could not record the move of "
                f"{record.original_name} ({error.strerror}); the file was put back{back} and "
                "nothing else moved. Free some disk space and rerun."
            ) from error
        versions.note_moved(self.versions, self.memory_dir, record.original_name, record.sha256,
                            record.size, record.id)  # fmt: skip
        return record

    def _put_back(self, record: TrashRecord) -> str:
        return put_back(self._folder_fd, self.dir_fd, record, (self.folder, self.memory_dir))

    def close(self) -> None:
        """Make every move so far durable: the manifest first, then both folders."""
        try:
            if self._manifest >= 0:
                os.fsync(self._manifest)
                os.close(self._manifest)
                self._manifest = -1
            fsops.fsync_dir(self._folder_fd)
            fsops.fsync_dir(self.dir_fd)
        finally:
            self._stack.close()


# --- reading manifests -----------------------------------------------------------------------
# A manifest is a file in the memory dir: anyone who can write there can plant one. So every
# name read from it must be one the mover could have written (DESIGN §2.7): a memory file's
# plain name (what `scan.skip_reason` lets through: no leading dot, `*.md`, not an index), one
# directory entry (no `/`, no NUL, not over NAME_MAX bytes), ids as `new_id` makes them. A
# newline, a quote or a backslash are legal in a POSIX name and the mover does write them
# (test_odd_names_move_and_come_back); they are harmless in a name used only relative to a
# folder descriptor, and shown escaped.
NAME_MAX_BYTES = fsops.NAME_MAX_BYTES
# A record is a few hundred bytes (its pointer line and details included): a line over this is
# none the mover wrote, and a manifest over this (~100,000 records in one day folder) is read up
# to here, the rest reported. Both keep a planted manifest from holding a reader for long.
MANIFEST_LINE_MAX = 1 << 20
MANIFEST_MAX_BYTES = 64 << 20
_ID = re.compile(r"^[0-9a-f]{10}$")
_TEXT_FIELDS = ("id", "original_name", "stored_name", "day", "sha256", "reason", "pass_id", "time")


def name_problem(name: object) -> str | None:
    """Why `name` is not a name the mover could have written, or None when it is."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if "/" in name or "\0" in name:
        return "not a plain file name (it has a path separator or a NUL)"
    try:
        size = len(os.fsencode(name))
    except UnicodeError:
        return "not a file name this system can encode"
    if size > NAME_MAX_BYTES:
        return f"longer than {NAME_MAX_BYTES} bytes"
    why = skip_reason(name)
    if why is not None:
        return f"not a memory file's name ({why})"
    return None


def stored_problem(name: object) -> str | None:
    """Why `name` is no name the mover could have stored a file under (`<memory
    name>.trashed`, or a plain memory name as memoryd stored them before), or None."""
    if isinstance(name, str) and name.endswith(TRASHED_SUFFIX):
        try:
            if len(os.fsencode(name)) > NAME_MAX_BYTES:
                return f"longer than {NAME_MAX_BYTES} bytes"
        except UnicodeError:
            return "not a file name this system can encode"
        return name_problem(name.removesuffix(TRASHED_SUFFIX))
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
    """A record with where its file is now; `restored_as` (and when: `restored_at`) once it
    went back."""

    record: TrashRecord
    folder: Path
    restored_as: str | None = None
    restored_at: str | None = None

    @property
    def stored_path(self) -> Path:
        return self.folder / self.record.stored_name


Line = dict[str, Any] | str | None  # a row; why it was not read (str); no JSON object (None)


def _manifest_lines(memory_dir: Path, day: str) -> Iterator[tuple[int, Line]]:
    """(line number, row) of a day folder's manifest, None for a line that is no JSON object.
    Nothing when there is no manifest (or folder); (0, why) when it is not a regular file (a
    symlink is never followed, a FIFO never waited on) or cannot be read; (n, why) for a line
    over MANIFEST_LINE_MAX and for line n onwards past MANIFEST_MAX_BYTES. A last line without
    its newline is torn (a power cut): not a line yet."""
    try:
        with open_day(memory_dir, day) as day_fd:
            fd, _ = open_regular(
                MANIFEST, dir_fd=day_fd, follow=False, shown=trash_root(memory_dir) / day
            )
    except FileNotFoundError:
        return
    except MemorydError:
        return  # the day folder is not a plain folder: it is no day (see _day_dirs)
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
            yield (
                lines.cut,
                (
                    f"the manifest is over {MANIFEST_MAX_BYTES} bytes: this line and all after it "
                    "are not read"
                ),
            )
    except OSError as error:
        yield 0, read_problem(error)
    finally:
        os.close(fd)


def manifest_rows(memory_dir: Path, day: str) -> Iterator[dict[str, Any]]:
    """The rows of a day folder's manifest (none when it or its folder cannot be read)."""
    for _, row in _manifest_lines(memory_dir, day):
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
    record memoryd will not act on. Raises UnsafeFilesystemOperation when `.trash` is a
    symlink or a file."""
    root = trash_root(memory_dir)
    out: dict[str, Entry] = {}
    invalid: list[Invalid] = []
    with open_trash(memory_dir) as trash_fd:
        days = _day_dirs(trash_fd) if trash_fd is not None else []
    for day in days:
        folder = root / day
        for number, row in _manifest_lines(memory_dir, day):
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
    """Every valid trashed file of a dir, oldest first, with its restore state (see
    `contents`, which also gives the records memoryd will not act on)."""
    return contents(memory_dir).entries


def _same(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError, RuntimeError):
        return a == b or a.resolve() == b.resolve()
    return False


def matches(memory_dir: Path, entry: Entry, key: str) -> bool:
    """Whether `key` names the entry in one of the forms `trash list` prints or a person types:
    its trashed file's path (absolute, relative to the working folder or to the memory dir,
    with or without the `.trash/` prefix), the path it had (`<dir>/<file>`, the dir through
    a link or not), or its original or stored name."""
    record = entry.record
    if "/" not in key:
        return key in (record.original_name, record.stored_name)
    path = Path(key).expanduser()
    candidates = [path]
    if not path.is_absolute():
        candidates = [memory_dir / path, trash_root(memory_dir) / path]
        with contextlib.suppress(OSError):  # a working folder that is gone
            candidates.append(Path.cwd() / path)
    # The trashed file's path under the naming of older memoryd versions (its name without
    # `.trashed`) still names it: a person may have that path from before.
    older = entry.folder / record.stored_name.removesuffix(TRASHED_SUFFIX)
    known = (entry.stored_path, older, memory_dir / record.original_name)
    return any(_same(c, k) for c in candidates for k in known)


def find(memory_dir: Path, key: str) -> Entry | None:
    """An entry by id, or by a path or a name (see `matches`; valid records only).

    A path or a name can fit several entries (a stored name is used again once its file was
    restored, a name trashed twice): it means the newest one still in the trash, else the
    newest restored one (which `restore` refuses, saying when and as what it came back)."""
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
    to fit NAME_MAX_BYTES (`fsops.fit_name`): a name near the limit plus `.restored-1` was
    too long for any file, and the restore failed every time it was tried."""
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
        data, _ = _read_stored(memory_dir, entry)
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
    append_record(
        memory_dir,
        entry.folder.name,
        json.dumps(
            {
                "restored": entry.record.id,
                "as": name,
                "time": datetime.now().astimezone().isoformat(),
            }
        ),
    )
    return name


def _read_stored(memory_dir: Path, entry: Entry) -> tuple[bytes, os.stat_result]:
    with open_day(memory_dir, entry.folder.name) as fd:
        return fsops.read_regular(fd, entry.record.stored_name, 64 << 20)


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

    identity: list[int]  # folder dev, ino, mtime_ns; manifest ino, size, mtime_ns
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


def day_facts(memory_dir: Path, day: str) -> DayFacts:
    """The identity of a day folder and its manifest, and the times its records give.

    A folder whose manifest is missing or unreadable, or has no valid record, or a record
    without a readable time, has a `problem`: retention cannot rest on its name alone."""
    try:
        with open_day(memory_dir, day) as day_fd:
            folder = os.fstat(day_fd)
            manifest = os.stat(MANIFEST, dir_fd=day_fd, follow_symlinks=False)
    except FileNotFoundError:
        return DayFacts([], [], "it has no manifest.jsonl saying when memoryd moved its files")
    except (OSError, MemorydError) as error:
        return DayFacts([], [], f"its manifest cannot be read ({error})")
    if not stat.S_ISREG(manifest.st_mode):
        return DayFacts([], [], "its manifest.jsonl is not a regular file")
    identity = [folder.st_dev, folder.st_ino, folder.st_mtime_ns]
    identity += [manifest.st_ino, manifest.st_size, manifest.st_mtime_ns]
    times: list[float] = []
    records = 0
    for number, row in _manifest_lines(memory_dir, day):
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
        return _day_dirs(trash_fd) if trash_fd is not None else []
