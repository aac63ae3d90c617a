"""Where memoryd's own files live, and where the Claude home is."""

import contextlib
import os
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
