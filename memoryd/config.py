"""TOML configuration: load once into a frozen `Config`; validation reports every problem.
With it, Claude Code's environment as memoryd reads it once (`ClaudeEnv`): what the user set."""

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args, get_type_hints

from memoryd.errors import ConfigError
from memoryd.model import safejson
from memoryd.paths import (
    AppPaths,
    FileTooLarge,
    NotRegularFile,
    default_claude_home,
    expand,
    read_bounded,
)

IndexMode = Literal["auto", "manage", "off"]
BudgetMode = Literal["never", "hard", "target"]
LogLevel = Literal["debug", "info", "warning", "error"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# A configuration is a few KB; a bigger file is the wrong file (read whole, it would be held
# in memory, and a device such as /dev/zero never ends).
CONFIG_MAX_BYTES = 1024 * 1024


# --- Claude Code's environment: where it keeps auto memory, and whether it loads it ----------
REMOTE_MEMORY_DIR = "CLAUDE_CODE_REMOTE_MEMORY_DIR"  # base: <it>/projects/<slug>/memory/
COWORK_OVERRIDE = "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE"  # the memory dir itself
DISABLE_AUTO_MEMORY = "CLAUDE_CODE_DISABLE_AUTO_MEMORY"
ON_WORDS = frozenset({"1", "true", "yes", "on"})  # the client's own spellings of a switch
# With one of these set (in the environment or a settings file's `env`), Claude Code loads no
# MEMORY.md at all, whatever CLAUDE_CODE_DISABLE_AUTO_MEMORY says (observed, 2.1.332): simple
# and safe mode, memory stores instead of files, a remote session without a memory dir, and
# no CLAUDE.md-style files. CLAUDE_MEMORY_STORES counts with any value, the others when true.
REMOTE = "CLAUDE_CODE_REMOTE"
MEMORY_STORES = "CLAUDE_MEMORY_STORES"
LOADS_NONE = (
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_CODE_SAFE_MODE",
    MEMORY_STORES,
    REMOTE,
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS",
)
OFF_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class ClaudeEnv:
    """The part of the environment that moves or turns off Claude Code's auto memory."""

    home: Path = field(default_factory=Path.home)  # what a setting's `~/` means
    remote_memory_dir: Path | None = None
    cowork_override: Path | None = None
    disable_auto_memory: str | None = None  # the raw value, for saying where it was turned off
    loads_none: tuple[tuple[str, str], ...] = ()  # the LOADS_NONE variables set, raw values

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "ClaudeEnv":
        env = os.environ if environ is None else environ

        def folder(name: str) -> Path | None:
            value = env.get(name)
            return Path(value).expanduser() if value else None

        home = env.get("HOME")
        return cls(
            home=Path(home) if home else Path.home(),
            remote_memory_dir=folder(REMOTE_MEMORY_DIR),
            cowork_override=folder(COWORK_OVERRIDE),
            disable_auto_memory=env.get(DISABLE_AUTO_MEMORY),
            loads_none=tuple((name, env[name]) for name in LOADS_NONE if name in env),
        )

    def switch(self) -> bool | None:
        """CLAUDE_CODE_DISABLE_AUTO_MEMORY: True turns auto memory off, False forces it on
        (settings no longer count), None leaves it to the settings."""
        value = (self.disable_auto_memory or "").strip().lower()
        if value in ON_WORDS:
            return True
        if value in OFF_WORDS and self.disable_auto_memory is not None:
            return False
        return None


def parse_duration(text: str) -> float:
    """`"2s"`, `"10m"`, `"1h"`, `"7d"`, `"250ms"` -> seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f'not a duration: {text!r} (write e.g. "2s", "10m", "1h", "7d")')
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def format_duration(seconds: float) -> str:
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


# --- validation -------------------------------------------------------------------------------
# Each leaf key maps to a converter that returns the typed value or raises ValueError with a
# message for a person. Unknown keys are errors: a typo must not silently fall back to a default.

Converter = Callable[[object], object]


def _type_name(value: object) -> str:
    return type(value).__name__


def _int(minimum: int) -> Converter:
    def convert(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {_type_name(value)} {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return convert


def _fraction(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number between 0 and 1, got {_type_name(value)} {value!r}")
    if not 0 < float(value) <= 1:
        raise ValueError(f"must be between 0 and 1, got {value}")
    return float(value)


def _duration(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError(f'expected a duration string like "2s", got {_type_name(value)} {value!r}')
    return parse_duration(value)


def _positive_duration(value: object) -> object:
    seconds = _duration(value)
    if seconds == 0:
        raise ValueError(f"must be longer than 0, got {value!r}")
    return seconds


def _str(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_type_name(value)} {value!r}")
    return value


def _choice(*options: str) -> Converter:
    def convert(value: object) -> object:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}; got {value!r}")
        return value

    return convert


def _folder(value: object) -> object:
    """A folder path: may not exist yet, but must not be a file."""
    text = _str(value)
    assert isinstance(text, str)
    path = expand(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file, not a folder")
    return path


def _str_list(value: object) -> object:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(value)


def _folder_list(value: object) -> object:
    items = _str_list(value)
    assert isinstance(items, tuple)
    return tuple(_folder(v) for v in items)


def _file_list(value: object) -> object:
    """File paths: may not exist yet, but must not be folders."""
    items = _str_list(value)
    assert isinstance(items, tuple)
    out = []
    for text in items:
        path = expand(text)
        if path.is_dir():
            raise ValueError(f"{path} is a folder, not a file")
        out.append(path)
    return tuple(out)


# Each section is a NamedTuple (immutable, as the dataclass it was; ~0.1 ms to define against a
# frozen dataclass's ~0.7, which every command paid at start-up for ten of them). A key's
# annotation carries the converter that checks a file's value: `Annotated[type, converter]`.
_MODE = _choice(*get_args(IndexMode))


class DirOverride(NamedTuple):
    """Per-dir settings from `[dirs."<path>"]`."""

    mode: Annotated[IndexMode, _MODE] = "auto"
    repo_root: Annotated[Path | None, _folder] = None


@dataclass(frozen=True, slots=True)
class PathsConfig:
    """A dataclass, not a NamedTuple: `claude_home` follows the environment at construction."""

    claude_home: Annotated[Path, _folder] = field(default_factory=default_claude_home)
    repos: Annotated[tuple[str, ...], _str_list] = ()
    extra_memory_dirs: Annotated[tuple[Path, ...], _folder_list] = ()
    # JSONL record stores beyond <repo>/.agent/memory.jsonl
    record_stores: Annotated[tuple[Path, ...], _file_list] = ()
    # Globs of git work trees whose tracked memory dirs memoryd manages for this user alone.
    manage_repos: Annotated[tuple[str, ...], _str_list] = ()


class IndexConfig(NamedTuple):
    separator: Annotated[str, _str] = " — "
    new_file_grace: Annotated[float, _duration] = 10.0
    budget: Annotated[BudgetMode, _choice(*get_args(BudgetMode))] = "hard"
    max_lines: Annotated[int, _int(1)] = 200
    max_chars: Annotated[int, _int(1)] = 25_000
    target_bytes: Annotated[int, _int(1)] = 17_408
    keep_recent: Annotated[float, _duration] = 7 * 86400.0


class WatchConfig(NamedTuple):
    debounce: Annotated[float, _duration] = 2.0
    max_wait: Annotated[float, _duration] = 30.0
    reconcile_every: Annotated[float, _duration] = 300.0


class DreamConfig(NamedTuple):
    pile_up: Annotated[int, _int(1)] = 5
    quiet: Annotated[float, _duration] = 600.0
    min_interval: Annotated[float, _duration] = 3600.0
    duplicate_threshold: Annotated[float, _fraction] = 0.6
    contradiction_threshold: Annotated[float, _fraction] = 0.4
    guard_recent: Annotated[float, _duration] = 14 * 86400.0
    consult_window: Annotated[float, _duration] = 14 * 86400.0
    breaker_min: Annotated[int, _int(0)] = 3
    breaker_fraction: Annotated[float, _fraction] = 0.2
    # A pass that spends longer on one file stops, moving nothing; and one that runs longer in all.
    file_budget: Annotated[float, _positive_duration] = 10.0
    pass_budget: Annotated[float, _positive_duration] = 600.0


class TrashConfig(NamedTuple):
    keep_days: Annotated[int, _int(1)] = 30


class VersionsConfig(NamedTuple):
    keep_days: Annotated[int, _int(1)] = 30  # a replaced or deleted version is kept this long
    max_bytes: Annotated[int, _int(1024 * 1024)] = 512 * 1024 * 1024  # see versions.prune
    # More memory files than this deleted or rewritten by others within alarm_window:
    # memory.mass_change. An agent's clean-up touches many files within a minute or two; a
    # person's editing (a few files, minutes apart) never reaches it.
    alarm_files: Annotated[int, _int(0)] = 5
    alarm_window: Annotated[float, _positive_duration] = 120.0


class LogConfig(NamedTuple):
    level: Annotated[LogLevel, _choice(*get_args(LogLevel))] = "info"
    max_bytes: Annotated[int, _int(4096)] = 10_000_000
    backups: Annotated[int, _int(1)] = 5


class ParseConfig(NamedTuple):
    max_file_bytes: Annotated[int, _int(1024)] = 1024 * 1024
    max_frontmatter_bytes: Annotated[int, _int(256)] = 16 * 1024


class RecallConfig(NamedTuple):
    # Older than this (newest of mtime and frontmatter dates): stale.
    stale_after: Annotated[float, _positive_duration] = 90 * 86400.0


@dataclass(frozen=True, slots=True)
class Config:
    paths: PathsConfig = field(default_factory=PathsConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    dream: DreamConfig = field(default_factory=DreamConfig)
    trash: TrashConfig = field(default_factory=TrashConfig)
    versions: VersionsConfig = field(default_factory=VersionsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    parse: ParseConfig = field(default_factory=ParseConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    dirs: Mapping[Path, DirOverride] = field(default_factory=dict)
    source: str = "built-in defaults"
    # Claude Code's variables that move or turn off its auto memory, as memoryd started with
    # them (read once, here at the edge; tests pass their own).
    claude_env: ClaudeEnv = field(default_factory=ClaudeEnv.from_environ)

    def override_for(self, memory_dir: Path) -> DirOverride:
        """The `[dirs]` entry for a dir, matched by its path or its resolved path."""
        for candidate in (memory_dir, memory_dir.resolve()):
            if candidate in self.dirs:
                return self.dirs[candidate]
        return DirOverride()


_SECTIONS: dict[str, type[Any]] = {
    "paths": PathsConfig,
    "index": IndexConfig,
    "watch": WatchConfig,
    "dream": DreamConfig,
    "trash": TrashConfig,
    "versions": VersionsConfig,
    "log": LogConfig,
    "parse": ParseConfig,
    "recall": RecallConfig,
}


def _converters(cls: type[Any]) -> dict[str, Converter]:
    """Each key of a section and its converter, from the key's `Annotated` type."""
    hints = get_type_hints(cls, include_extras=True)
    return {name: hint.__metadata__[0] for name, hint in hints.items()}


# Keys memoryd no longer reads: an unknown key as any other (the configuration is refused, so
# that nothing the file asks for is silently dropped), with what replaced it.
_REMOVED: dict[str, str] = {
    "watch.consult_signal": "removed: reads of memory files no longer count as consults; "
    "the agent's tool calls in its session transcripts and memoryd's MCP server answers "
    "always do. Delete this line",
}


def _convert(
    prefix: str,
    table: Mapping[str, object],
    converters: Mapping[str, Converter],
    problems: list[str],
) -> dict[str, object]:
    """A table's values converted; each unknown key or bad value is added to `problems`."""
    values: dict[str, object] = {}
    for key, raw in table.items():
        converter = converters.get(key)
        if converter is None:
            known = f"unknown key (known: {', '.join(converters)})"
            problems.append(f"{prefix}.{key}: {_REMOVED.get(f'{prefix}.{key}', known)}")
            continue
        try:
            values[key] = converter(raw)
        except ValueError as error:
            problems.append(f"{prefix}.{key}: {error}")
    return values


def build_config(data: Mapping[str, object], source: str) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem."""
    problems: list[str] = []
    sections: dict[str, object] = {}
    for key in sorted(set(data) - set(_SECTIONS) - {"dirs"}):
        problems.append(f"{key}: unknown section (known: {', '.join([*_SECTIONS, 'dirs'])})")
    for name, cls in _SECTIONS.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            problems.append(f"{name}: expected a table, got {_type_name(table)}")
            continue
        sections[name] = cls(**_convert(name, table, _converters(cls), problems))

    dirs = _dir_overrides(data.get("dirs", {}), problems)
    watch = sections.get("watch")
    if isinstance(watch, WatchConfig) and watch.max_wait < watch.debounce:
        problems.append("watch.max_wait: must not be shorter than watch.debounce")
    dream = sections.get("dream")
    if isinstance(dream, DreamConfig) and dream.contradiction_threshold > dream.duplicate_threshold:
        problems.append("dream.contradiction_threshold: must not exceed dream.duplicate_threshold")
    if problems:
        raise ConfigError(source, problems)
    return Config(dirs=dirs, source=source, **sections)  # type: ignore[arg-type]


def _dir_overrides(raw_dirs: object, problems: list[str]) -> dict[Path, DirOverride]:
    """The `[dirs."<folder>"]` tables."""
    if not isinstance(raw_dirs, dict):
        problems.append(f"dirs: expected a table of folders, got {_type_name(raw_dirs)}")
        return {}
    dirs: dict[Path, DirOverride] = {}
    for dir_key, table in raw_dirs.items():
        prefix = f'dirs."{dir_key}"'
        if not isinstance(table, dict):
            problems.append(f"{prefix}: expected a table with mode / repo_root")
            continue
        values = _convert(prefix, table, _converters(DirOverride), problems)
        dirs[expand(dir_key)] = DirOverride(**values)  # type: ignore[arg-type]
    return dirs


def _is_null_device(path: Path) -> bool:
    """`--config /dev/null` is the usual way to say "no configuration": it reads as empty."""
    try:
        st, null = os.stat(path), os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev


def load_config(explicit: Path | None, paths: AppPaths) -> Config:
    """`--config FILE`, else `<user_config_dir>/config.toml`, else built-in defaults."""
    path = explicit if explicit is not None else paths.config_file
    if explicit is None:
        try:
            if not path.exists():
                return Config()
        except OSError as error:
            raise ConfigError(str(path), [f"cannot check the file: {error.strerror}"]) from error
    try:
        # A FIFO would block the reader (the daemon's worker, on SIGHUP) until someone writes.
        raw = b"" if _is_null_device(path) else read_bounded(path, CONFIG_MAX_BYTES)
    except NotRegularFile as error:
        raise ConfigError(
            str(path),
            [
                f"{error.what}, not a regular file: name a TOML file "
                "(a symlink to one is fine) with --config or at this path"
            ],
        ) from error
    except FileTooLarge as error:
        raise ConfigError(
            str(path),
            [
                f"the file is over {CONFIG_MAX_BYTES} bytes ({error.size}): a memoryd "
                "configuration is a few KB; name the right file"
            ],
        ) from error
    except OSError as error:
        raise ConfigError(str(path), [f"cannot read the file: {error.strerror}"]) from error
    try:
        data = safejson.loads_toml(raw.decode("utf-8"), max_bytes=CONFIG_MAX_BYTES)
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), ["the file is not UTF-8 text"]) from error
    except ValueError as error:  # tomllib's TOMLDecodeError, or safejson's OverLimit
        raise ConfigError(str(path), [f"not valid TOML: {error}"]) from error
    return build_config(data, str(path))


def config_as_dict(config: Config) -> dict[str, object]:
    """The effective configuration as plain TOML-like values, for `memoryd config show`."""
    out: dict[str, object] = {}
    for section in _SECTIONS:
        values = getattr(config, section)
        table: dict[str, object] = {}
        for name, convert in _converters(type(values)).items():
            value = getattr(values, name)
            if convert in (_duration, _positive_duration):
                value = format_duration(value)
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = [str(v) for v in value]
            table[name] = value
        out[section] = table
    out["dirs"] = {
        str(path): {
            "mode": o.mode,
            **({"repo_root": str(o.repo_root)} if o.repo_root else {}),
        }
        for path, o in sorted(config.dirs.items())
    }
    return out
