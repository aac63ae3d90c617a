"""What every hook shares apart from its dispatch: memoryd's state and log dirs (without
platformdirs on Linux), the line a failed hook logs, and the file a tool call names."""

import os
import sys
from typing import Any

LOG_MAX_BYTES = 1024 * 1024  # hooks.log is started anew past this


def state_dir() -> str:
    """memoryd's state dir (memoryd.paths.app_paths), computed without platformdirs on Linux,
    where it is `$XDG_STATE_HOME/memoryd` (importing platformdirs costs a hook ~5 ms)."""
    if sys.platform.startswith("linux"):
        base = os.environ.get("XDG_STATE_HOME", "").strip()
        if not os.path.isabs(base):
            base = os.path.expanduser("~/.local/state")
        return os.path.join(base, "memoryd")
    import platformdirs

    return str(platformdirs.user_state_dir("memoryd", appauthor=False))


def log_dir() -> str:
    if sys.platform.startswith("linux"):
        return os.path.join(state_dir(), "log")
    import platformdirs

    return str(platformdirs.user_log_dir("memoryd", appauthor=False))


def log_failure(event: str, error: BaseException) -> None:
    """One line in hooks.log for a hook that failed (never raises)."""
    import time

    try:
        folder = log_dir()
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, "hooks.log")
        if os.path.exists(path) and os.path.getsize(path) > LOG_MAX_BYTES:
            os.replace(path, path + ".1")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = f"{stamp} {event}: {type(error).__name__}: {error}".replace("\n", " ")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line[:2000] + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except Exception:  # noqa: S110 - a hook that cannot even log still exits 0, silently
        pass


def abs_path(data: dict[str, Any], key: str) -> str | None:
    """The input's `key` when it is an absolute path (`cwd`, `transcript_path`), else None."""
    value = data.get(key)
    return value if isinstance(value, str) and os.path.isabs(value) else None


def tool_path(data: dict[str, Any]) -> str | None:
    """The absolute path of the file a tool call names (`tool_input.file_path`)."""
    tool_input = data.get("tool_input")
    path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    base = abs_path(data, "cwd") or os.getcwd()
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))
