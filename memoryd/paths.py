"""Where memoryd's own files live, where the Claude home is, and bounded readers for files
named by the config or found on disk (never a FIFO or a device)."""

import contextlib
import errno
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "memoryd"


@dataclass(frozen=True, slots=True)
class AppPaths:
    """memoryd's own folders: config, state (the state store, versions, status), logs."""

    config_file: Path
    state_dir: Path
    log_dir: Path

    @property
    def audit_log(self) -> Path:
        return self.log_dir / "audit.jsonl"

    @property
    def status_file(self) -> Path:
        return self.state_dir / "status.json"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "memoryd.lock"


def app_paths() -> AppPaths:
    """Resolve the platform folders now, so XDG_* and HOME changes in tests are honoured."""
    config_dir = Path(platformdirs.user_config_dir(APP, appauthor=False))
    # On macOS config and state are one folder; the file names below never collide.
    state_dir = Path(platformdirs.user_state_dir(APP, appauthor=False))
    log_dir = Path(platformdirs.user_log_dir(APP, appauthor=False))
    return AppPaths(config_file=config_dir / "config.toml", state_dir=state_dir, log_dir=log_dir)


def default_claude_home() -> Path:
    """`$CLAUDE_CONFIG_DIR`, else `~/.claude` (which may not exist yet)."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".claude"


def expand(path: str) -> Path:
    """Expand `~` and environment variables the way a person writing a config expects."""
    return Path(os.path.expandvars(os.path.expanduser(path)))


def ensure_private_dir(path: Path) -> Path:
    """Create memoryd's own folders 0700 (memories hold private text), missing parents too.

    XDG asks for 0700 base folders as well, so creating `~/.local/state` that way is right.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    return path


class NotRegularFile(OSError):
    """A path memoryd reads is a FIFO, a device, a socket or a folder: never read it."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} is {what}, not a regular file")
        self.path = path
        self.what = what


class FileTooLarge(OSError):
    """A path memoryd reads is over the size it will read whole."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(f"{path} is over {limit} bytes ({size})")
        self.path = path
        self.size = size
        self.limit = limit


def read_problem(error: OSError) -> str:
    """Why a file could not be read, for a person, without its path (the caller names it)."""
    if isinstance(error, NotRegularFile):
        return f"it is {error.what}, not a regular file"
    if isinstance(error, FileTooLarge):
        return f"it is over {error.limit} bytes ({error.size})"
    return f"it cannot be read ({error.strerror or error})"


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a person."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
)


def open_regular(
    path: Path | str,
    *,
    dir_fd: int | None = None,
    follow: bool = True,
    looked: os.stat_result | None = None,
    shown: Path | None = None,
) -> tuple[int, os.stat_result]:
    """Open a regular file for reading, never blocking on a FIFO nor acting on a device; the
    descriptor (the caller closes it) and its fstat.

    `path` is relative to `dir_fd` when one is given. It is looked at before the open (opening
    some devices acts on them), unless the caller's own lstat of it (`looked`) said it is a
    regular file; then it is opened O_NONBLOCK and looked at again through the descriptor: a
    FIFO swapped in meanwhile opens at once, and is refused then. `follow=False`: a symlink is
    refused, never followed. `shown`: the path errors name (default `path`).
    Raises NotRegularFile or OSError.
    """
    name = shown if shown is not None else Path(path)
    if looked is None:
        looked = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)
    if not stat.S_ISREG(looked.st_mode):
        raise NotRegularFile(name, file_kind(looked.st_mode))
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow:  # a link swapped in since the look
            raise NotRegularFile(name, "a symbolic link") from error
        raise
    return fd, regular_fd(fd, name)


def regular_fd(fd: int, name: Path) -> os.stat_result:
    """The fstat of an open descriptor that must be a regular file; otherwise the descriptor
    is closed and NotRegularFile (naming `name`) raised. A FIFO opened O_NONBLOCK, or for
    writing, opens at once: this look through the descriptor is what refuses it."""
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(name, file_kind(st.st_mode))
    return st


def read_bounded(path: Path, limit: int, *, follow: bool = True, prefix: bool = False) -> bytes:
    """Read a regular file whole (at most `limit` bytes), never blocking on a FIFO or reading
    a device without end (see `open_regular`).

    `follow`: a symlink is followed (a config kept in a dotfiles repo); else it is refused.
    `prefix`: read the first `limit` bytes of a longer file instead of refusing it.
    Raises NotRegularFile, FileTooLarge (without `prefix`) or OSError.
    """
    fd, st = open_regular(path, follow=follow)
    try:
        if st.st_size > limit and not prefix:
            raise FileTooLarge(path, st.st_size, limit)
        data = read_open(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        if not prefix:
            raise FileTooLarge(path, len(data), limit)
        data = data[:limit]
    return data


def read_open(fd: int, limit: int) -> bytes:
    """An open file's bytes to its end, but never more than `limit` + 1 (one byte more: the
    caller tells a file that grew past the limit from one at it)."""
    chunks: list[bytes] = []
    remaining = limit + 1
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class BoundedLines:
    """The lines of an open file, read in pieces: memory bounded by `max_line`, reading by
    `max_bytes`, time linear in what is read.

    Iterating yields (line number, the line with its newline), or (line number, None) for a
    line over `max_line` bytes, which is never held whole. A last line without its newline is
    torn (a writer mid-append, a power cut): not a line yet, never yielded. Reading stops
    after `max_bytes`; `cut` is then the number of the first line not read whole (0 when the
    file ended within the limit), for the caller to report rather than drop in silence.
    `whole`, once iterated: the bytes of the whole lines read, over-long ones too (where the
    next read of an appended file starts: not the sum of the lines yielded).
    """

    CHUNK = 1 << 16

    def __init__(self, fd: int, *, max_line: int, max_bytes: int | None = None) -> None:
        self.fd = fd
        self.max_line = max_line
        self.max_bytes = max_bytes
        self.cut = 0
        self.whole = 0

    def __iter__(self) -> Iterator[tuple[int, bytes | None]]:
        held = bytearray()  # the start of the current line, while it is short enough
        over = False  # the current line is over max_line: skipped up to its newline
        number = 0
        left = self.max_bytes
        base = 0  # the bytes read before this chunk
        while True:
            want = self.CHUNK if left is None else min(self.CHUNK, left)
            if want == 0:
                if os.read(self.fd, 1):
                    self.cut = number + 1
                return
            chunk = os.read(self.fd, want)
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                number += 1
                if over or len(held) + end + 1 - start > self.max_line:
                    yield number, None
                elif held:
                    held += chunk[start : end + 1]
                    yield number, bytes(held)
                else:
                    yield number, chunk[start : end + 1]
                held.clear()
                over = False
                start = end + 1
            if start:
                self.whole = base + start
            base += len(chunk)
            if not over:
                if len(held) + len(chunk) - start > self.max_line:
                    over = True
                    held.clear()
                else:
                    held += chunk[start:]


def program() -> list[str]:
    """The absolute command that runs this memoryd, as stable as it can be: the `memoryd` on
    PATH when it is this one (not the venv it links into, which an upgrade replaces), else
    this console script, else python -m."""
    argv0 = Path(sys.argv[0])
    ours = argv0 if argv0.name == "memoryd" and argv0.exists() else None
    if ours is None:
        beside = Path(sys.executable).parent / "memoryd"
        ours = beside if beside.exists() else None
    found = shutil.which("memoryd")
    if found and ours is not None and Path(found).resolve() == ours.resolve():
        return [os.path.abspath(found)]
    if ours is not None:
        return [os.path.abspath(ours)]
    return [str(Path(sys.executable).absolute()), "-m", "memoryd"]


def in_clone(command: list[str]) -> Path | None:
    """The source checkout whose venv holds the command, if any."""
    path = Path(command[0])
    for folder in path.parents:
        if (folder / "pyproject.toml").is_file() and (folder / "memoryd").is_dir():
            return folder
    return None
