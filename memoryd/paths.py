"""Where memoryd's own files live, where the Claude home is, and a bounded reader for files
named by the config or found on disk (never a FIFO or a device)."""

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "memoryd"


@dataclass(frozen=True, slots=True)
class AppPaths:
    """memoryd's own folders: config, state (journals, per-dir state, status), logs."""

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


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a person."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def read_bounded(path: Path, limit: int, *, follow: bool = True, prefix: bool = False) -> bytes:
    """Read a regular file whole (at most `limit` bytes), never blocking on a FIFO or reading
    a device without end.

    `follow`: a symlink is followed (a config kept in a dotfiles repo); else ELOOP. The path
    is looked at before the open (opening some devices acts on them) and the open file again
    after it (a FIFO swapped in between opens at once with O_NONBLOCK, and is refused then).
    `prefix`: read the first `limit` bytes of a longer file instead of refusing it.
    Raises NotRegularFile, FileTooLarge (without `prefix`) or OSError.
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    before = os.stat(path, follow_symlinks=follow)
    if not stat.S_ISREG(before.st_mode):
        raise NotRegularFile(path, file_kind(before.st_mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, file_kind(st.st_mode))
        if st.st_size > limit and not prefix:
            raise FileTooLarge(path, st.st_size, limit)
        chunks: list[bytes] = []
        remaining = limit + 1  # one byte more: a file that grew past the limit since fstat
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        if not prefix:
            raise FileTooLarge(path, len(data), limit)
        data = data[:limit]
    return data
