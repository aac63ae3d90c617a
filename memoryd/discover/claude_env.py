"""Where Claude Code keeps auto memory and whether it loads it: its environment variables and
`settings.json` files, read as the client reads them (checked against 2.1.332).

The environment is read once (`config.ClaudeEnv.from_environ`, a default of `Config`) and passed
down. Settings files are untrusted: read bounded; one that is no JSON object is a warning.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from memoryd.config import (
    DISABLE_AUTO_MEMORY,
    LOADS_NONE,
    MEMORY_STORES,
    ON_WORDS,
    REMOTE,
    ClaudeEnv,
)
from memoryd.model import safejson
from memoryd.paths import read_bounded, read_problem

SETTINGS_MAX_BYTES = 1024 * 1024  # a settings file is a few KB


@dataclass(frozen=True, slots=True)
class Settings:
    """One settings file's two auto-memory keys (None: not set there, or not usable)."""

    path: Path
    enabled: bool | None = None  # autoMemoryEnabled
    directory: str | None = None  # autoMemoryDirectory, as written
    env: tuple[tuple[str, str], ...] = ()  # its `env` entries among LOADS_NONE


def read_settings(path: Path, warnings: list[str]) -> Settings | None:
    """A settings file's auto-memory keys; None when there is no such file. A file that cannot
    be read or is not a JSON object adds a warning naming it and counts as saying nothing."""
    try:
        raw = read_bounded(path, SETTINGS_MAX_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        warnings.append(
            f"{path}: not read ({read_problem(error)}); its auto-memory settings are ignored"
        )
        return Settings(path)
    try:
        data = safejson.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as error:
        warnings.append(
            f"{path}: not valid JSON ({error}); its auto-memory settings are "
            "ignored until it is fixed"
        )
        return Settings(path)
    if not isinstance(data, dict):
        warnings.append(f"{path}: not a JSON object; its auto-memory settings are ignored")
        return Settings(path)
    enabled = data.get("autoMemoryEnabled")
    directory = data.get("autoMemoryDirectory")
    env = data.get("env")
    env = env if isinstance(env, dict) else {}
    return Settings(
        path,
        enabled if isinstance(enabled, bool) else None,
        directory if isinstance(directory, str) and directory else None,
        tuple((n, str(env[n])) for n in LOADS_NONE if isinstance(env.get(n), str | int | bool)),
    )


def setting_dir(value: str, home: Path) -> Path | None:
    """An `autoMemoryDirectory` value as the client takes it: `~/` is the home (climbing out
    of it is ignored), trailing slashes dropped; a relative or near-empty path is ignored."""
    text = value
    if text.startswith(("~/", "~\\")):
        rest = os.path.normpath(text[2:] or ".")
        if rest in (".", "..") or rest.startswith(("../", "..\\")):
            return None
        text = str(home / rest)
    if not os.path.isabs(text) or "\x00" in text:
        return None
    normal = os.path.normpath(text)
    if len(normal) < 3:
        return None
    return Path(normal)


@dataclass(frozen=True, slots=True)
class Switch:
    """Whether auto memory is on, and what said so last (empty when nothing did)."""

    on: bool
    source: str = ""


def _loads_none(env: ClaudeEnv, layers: list[Settings | None]) -> str:
    """What makes Claude Code load no MEMORY.md at all (a LOADS_NONE variable set), or "".
    A settings file's `env` is applied over the environment, the highest layer first."""
    for name in LOADS_NONE:
        found = [
            (dict(s.env)[name], f"the env of {s.path}") for s in layers if s and name in dict(s.env)
        ]
        found += [(value, "memoryd's environment") for n, value in env.loads_none if n == name]
        if not found:
            continue
        value, where = found[0]
        on = bool(value.strip()) if name == MEMORY_STORES else value.strip().lower() in ON_WORDS
        if name == REMOTE and (env.remote_memory_dir or env.cowork_override):
            on = False  # a remote session with a memory dir of its own loads it
        if on:
            return f"{name}={value} in {where}"
    return ""


def auto_memory_switch(env: ClaudeEnv, layers: list[Settings | None]) -> Switch:
    """On or off: a LOADS_NONE variable, then CLAUDE_CODE_DISABLE_AUTO_MEMORY, else the first
    layer (local, project, user) that sets `autoMemoryEnabled`; on by default."""
    loads_none = _loads_none(env, layers)
    if loads_none:
        return Switch(False, loads_none)
    forced = env.switch()
    if forced is not None:
        return Switch(
            not forced, f"{DISABLE_AUTO_MEMORY}={env.disable_auto_memory} in memoryd's environment"
        )
    for layer in layers:
        if layer is not None and layer.enabled is not None:
            return Switch(
                layer.enabled, f"autoMemoryEnabled: {str(layer.enabled).lower()} in {layer.path}"
            )
    return Switch(True)


def user_settings(claude_home: Path, warnings: list[str]) -> Settings | None:
    return read_settings(claude_home / "settings.json", warnings)


def project_settings(
    cwd: Path, root: Path, warnings: list[str]
) -> tuple[Settings | None, Settings | None, Settings | None]:
    """A session's project layers, highest precedence first (2.1.332, observed): the canonical
    git root's `.claude/settings.local.json`, the cwd's, then the cwd's checked-in
    `.claude/settings.json` (a git root's does not count for a subfolder)."""
    cwd_local = read_settings(cwd / ".claude" / "settings.local.json", warnings)
    root_local = (
        read_settings(root / ".claude" / "settings.local.json", warnings) if root != cwd else None
    )
    return root_local, cwd_local, read_settings(cwd / ".claude" / "settings.json", warnings)
