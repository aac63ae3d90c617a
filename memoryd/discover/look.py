"""Looking at the file system once per discovery: folders, symlinks on the way, `.git` entries and
the git roots Claude Code keys auto memory by (read from the files; no `git` process).
"""

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from memoryd.paths import read_bounded


class _Look:
    """What one discovery learnt of the file system, so that it looks once at each thing. A
    run is short; a change during it is a race the uncached code has as well."""

    def __init__(self) -> None:
        self.plain: dict[str, bool] = {"/": True}  # no symlink on the way: its own real path
        self.known: dict[tuple[str, str], Any] = {}  # (what, path) -> what was found
        self.fs_types: dict[int, str] | None = None  # device -> its file system's type

    def is_plain(self, path: str) -> bool:
        """No component of the absolute, normal `path` is a symlink (a missing one is none)."""
        unknown = []
        while path not in self.plain:
            unknown.append(path)
            path = os.path.dirname(path)
        known = self.plain[path]
        for folder in reversed(unknown):  # from the top down, one lstat each
            known = known and not os.path.islink(folder)
            self.plain[folder] = known
        return known


_LOOK: ContextVar[_Look | None] = ContextVar("memoryd_discover_look", default=None)
T = TypeVar("T")


@contextlib.contextmanager
def one_look() -> Iterator[None]:
    """Within it, the file system is looked at once per thing (the discovery of one run)."""
    if _LOOK.get() is not None:
        yield
        return
    token = _LOOK.set(_Look())
    try:
        yield
    finally:
        _LOOK.reset(token)


def _once(look_at: Callable[[Path], T], path: Path) -> T:
    """`look_at(path)`, asked once within `one_look` (each time outside it)."""
    look = _LOOK.get()
    if look is None:
        return look_at(path)
    key = (look_at.__name__, str(path))
    if key not in look.known:
        look.known[key] = look_at(path)
    return look.known[key]  # type: ignore[no-any-return]


def is_dir(path: Path) -> bool:
    return _once(_is_dir, path)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def subdirs(path: Path) -> list[Path]:
    """The folders (or links to folders) in `path` but hidden ones, by name."""
    return [path / name for name in _once(_subdir_names, path)]


# File systems whose folders have 2 links and one more for each subfolder: a folder with 2
# links there holds no folder, and a 10,000-memory dir need not be listed (~8 ms) to see it.
# Elsewhere (btrfs says 1, an SMB mount may say 2 whatever it holds) the folder is listed.
_COUNTS_SUBDIRS = frozenset({"ext2", "ext3", "ext4", "xfs", "tmpfs"})
_TRASH = ".trash"  # memoryd's trash in a memory dir (trash.store.TRASH_DIR): hidden, not listed


def holds_no_folder(path: Path) -> bool:
    """Whether `path` surely holds no folder `subdirs` lists (links to folders aside; the
    trash, hidden, may be there): its link count says so, on a file system that counts them
    (as /proc/self/mountinfo names it). False when unsure."""
    try:
        st = os.stat(path)
        trash = st.st_nlink == 3 and stat.S_ISDIR(os.lstat(path / _TRASH).st_mode)
    except OSError:
        return False
    if st.st_nlink != 2 and not trash:
        return False
    look = _LOOK.get()
    types = look.fs_types if look is not None else None
    if types is None:  # read once a discovery: a mount made meanwhile is a new run's
        types = _fs_types()
        if look is not None:
            look.fs_types = types
    return types.get(st.st_dev) in _COUNTS_SUBDIRS


def _fs_types() -> dict[int, str]:
    """Each mounted device's file system type (Linux; empty elsewhere)."""
    out: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split()  # ID PARENT MAJOR:MINOR ROOT MOUNT OPTIONS... - TYPE ...
                major, _, minor = fields[2].partition(":")
                out[os.makedev(int(major), int(minor))] = fields[fields.index("-") + 1]
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _subdir_names(path: Path) -> list[str]:
    names = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir():  # follows a link, as Path.is_dir does
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return []
    return sorted(names)


def no_claude(folder: Path) -> bool:
    """No `.claude/` folder here, so none of its settings files exist (a `.claude/` that
    cannot be looked at is no answer: its files are read, and fail, as they would)."""
    return _once(_no_claude, folder)


def _no_claude(folder: Path) -> bool:
    try:
        return not stat.S_ISDIR(os.stat(folder / ".claude").st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False


def _dot_git(folder: Path) -> int | None:
    """The st_mode of the folder's `.git` (not followed), None when there is none."""
    try:
        return os.lstat(folder / ".git").st_mode
    except OSError:
        return None


def git_root(path: Path) -> Path | None:
    """The nearest folder at or above `path` with a `.git` (a folder or a file), as the client
    finds it: a `.git` symlink ends the search with none."""
    for folder in (path, *path.parents):
        mode = _once(_dot_git, folder)
        if mode is None:
            continue
        if stat.S_ISLNK(mode):
            return None
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return folder
    return None


def canonical_root(cwd: Path, top: Path | None = None) -> Path:
    """What Claude Code keys a session's auto memory by: the canonical git root of its cwd (a
    worktree's main work tree), else the cwd. `top`: the cwd's git_root, if known."""
    top = top if top is not None else git_root(cwd)
    if top is None:
        return cwd
    main = git_common_root(top)
    return resolved(main if main is not None else top)


def resolved(path: Path) -> Path:
    return _once(_resolved, path)


def _resolved(path: Path) -> Path:
    look, key = _LOOK.get(), str(path)
    # A path with no link on its way is its own real path: one lstat for its last part (its
    # parents are known), where resolve() looks at every part, every time.
    normal = os.path.abspath(key) == key and "/.." not in key
    if look is not None and normal and look.is_plain(key):
        return path
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: nothing resolves inside it
        return path.absolute()


def is_repo(path: Path) -> bool:
    """A folder with `.git` (a folder, or the file a git worktree has) or `.claude/`."""
    return os.path.lexists(path / ".git") or is_dir(path / ".claude")


def git_common_root(repo: Path) -> Path | None:
    """A git worktree's main work tree (from its `.git` file and the `commondir` it leads
    to), which keys Claude Code's auto memory; None for anything else."""
    return _once(_common_root, repo)


def _common_root(repo: Path) -> Path | None:
    mode = _once(_dot_git, repo)
    if mode is None or not stat.S_ISREG(mode):
        return None  # a folder (an ordinary repo) or no `.git`: known without a read
    from memoryd.discover.gitwork import GIT_FILE_BYTES, gitdir_of  # a worktree's `.git` file

    try:
        gitdir = gitdir_of(repo, follow=False)
    except OSError:
        return None  # a folder (an ordinary repo), or nothing readable
    if gitdir is None:
        return None
    try:
        common = read_bounded(gitdir / "commondir", GIT_FILE_BYTES, follow=False)
    except OSError:
        return None
    common_dir = Path(common.decode("utf-8", "replace").strip())
    common_dir = resolved(common_dir if common_dir.is_absolute() else gitdir / common_dir)
    if common_dir.name != ".git" or not is_dir(common_dir.parent):
        return None  # a bare repo: no main work tree
    return common_dir.parent
