"""The trash: `<memory dir>/.trash/YYYY-MM-DD/` day folders with a JSONL manifest each.

memoryd never deletes a memory: `Mover` renames it into today's day folder (never
overwriting) and appends a manifest record saying why; `manifest` restores, `days` purges.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from memoryd.discover import gitwork
from memoryd.errors import MemorydError, UnsafeFilesystemOperation
from memoryd.paths import (
    NotRegularFile,
    app_paths,
    ensure_private_dir,
    regular_fd,
)
from memoryd.storage import fsops, openfiles
from memoryd.storage.state import dir_key
from memoryd.versions import kept

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
    # Where that line sat in MEMORY.md (index.Place as JSON); None in older manifests.
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

    A trash that exists stays where it is, whatever the dir has become since: no entry is
    left where no command looks. A state dir on another filesystem cannot take a rename: the
    trash is then `.trash` after all."""
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
    """Whether the nearest existing folder of `kept` is on the memory dir's filesystem (when
    unsure, yes: the move's own check says what is wrong)."""
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
    """A trashed file as reports show it: `.trash/...`, or its full path in the state dir."""
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
    """The dir's trash, opened without following a link; None when there is none.

    Everything that reads, moves or removes in the trash goes through this descriptor, never
    a path: a trash that is, or becomes, a symlink is refused, never followed out of the dir.
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
    a plain folder or does not exist)."""
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


def day_dirs(trash_fd: int) -> list[str]:
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
    ...: never a name in the trash (of the older naming, `<name>`, too) nor one of `taken`.

    No stored name ends in `.md`: Claude Code scans every `*.md` below the memory dir, dot
    folders included (2.1.197), and a trashed file must not come back as a live memory."""
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

    A power cut can leave the last line torn: a manifest not ending in a newline gets one
    first, so the next line is not glued to the torn one (which readers skip). One that is
    not a regular file (a planted FIFO would swallow records, then block) is refused.
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
    """One manifest line; a short write (a full disk) raises (its torn piece: open_manifest)."""
    data = (line + "\n").encode("ascii")
    if os.write(fd, data) != len(data):
        raise OSError(errno.ENOSPC, "the manifest line could not be written whole")


def holds_planned(folder_fd: int, record: TrashRecord, ino: int | None = None) -> bool:
    """Whether the stored file is a regular file of the planned bytes (and inode `ino`)."""
    try:
        data, st = fsops.read_regular(folder_fd, record.stored_name, 64 << 20)
    except (OSError, ValueError):
        return False
    if ino is not None and st.st_ino != ino:
        return False
    return hashlib.sha256(data).hexdigest() == record.sha256


def put_back(folder_fd: int, dir_fd: int, record: TrashRecord, where: tuple[Path, Path]) -> str:
    """Move a file the checks refused back into the memory dir, as its own name or, when a
    new file took that, `<stem>.kept-<n>.md`; the name it got. MemorydError when it cannot."""
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
    """For recovery: `put_back` the stored file unless it holds the planned bytes (None)."""
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
    """A planned move not made: why (MODIFIED, GONE, HELD), and `kept_as` when the file was
    moved, found not to be the one checked, and put back under another name."""

    why: str
    kept_as: str | None = None
    held_by: str = ""  # HELD: which programs (openfiles.describe)


class Mover:
    """Moves one pass's files into one day folder, syncing the disk once, at `close`.

    A move is a rename and a manifest line, neither fsynced on its own (four fsyncs a move
    were most of a pass): the pass's journal, fsynced first, names every planned move, and
    after a power cut recovery appends any line that did not reach the disk (journal.settle).

    `before_move`: called between a file's check and its rename (a test's concurrent writer).
    `versions`: told of each move. `refuse_held`: a file another program holds open for
    writing goes back, unmoved (HELD): its later bytes would not match the manifest.
    """

    def __init__(
        self,
        memory_dir: Path,
        day: date,
        *,
        before_move: Callable[[str], None] | None = None,
        versions: "kept.VersionStore | None" = None,
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
        """Move the file to its stored name if it still holds the planned bytes, and log it;
        the record with the file's size, or why the move was not made.

        A file renamed onto the name between the check and the rename would move unchecked,
        so the moved file is checked again (the inode checked, the planned bytes); if not, it
        goes back and the move is not made. So is a move whose manifest line cannot be written
        (a full disk): the trash never holds a file its manifest does not describe.
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
            return Unmoved(MODIFIED, self._put_back(record))
        # After the rename: no new open by name reaches the moved file.
        held = openfiles.writers(self._folder_fd, record.stored_name) if self.refuse_held else []
        if held:
            return Unmoved(HELD, self._put_back(record), openfiles.describe(held))
        try:
            _write_line(self._manifest, record.to_json())
        except OSError as error:
            kept_as = self._put_back(record)
            back = f" as {kept_as} (its name was taken)" if kept_as else ""
            raise MemorydError(
                f"{self.folder / MANIFEST}: could not record the move of "
                f"{record.original_name} ({error.strerror}); the file was put back{back} and "
                "nothing else moved. Free some disk space and rerun."
            ) from error
        kept.note_moved(self.versions, self.memory_dir, record.original_name, record.sha256,
                            record.size, record.id)  # fmt: skip
        return record

    def _put_back(self, record: TrashRecord) -> str | None:
        """`put_back`; the name it got if not its own (Unmoved.kept_as)."""
        name = put_back(self._folder_fd, self.dir_fd, record, (self.folder, self.memory_dir))
        return None if name == record.original_name else name

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
