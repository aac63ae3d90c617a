"""`memoryd claude install|uninstall|plugin-path`: memoryd's hooks and MCP server in Claude
Code's settings (claude_settings), read → plan → write → report.

Every file is checked before any is written, and written whole only if nobody changed it since
it was read (Claude Code rewrites `.claude.json` as it runs). Install keeps each file's bytes
from before; uninstall puts them back while the file is as install left it, else takes out
memoryd's entries alone.
"""

import contextlib
import difflib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from memoryd.claude import claude_settings as cs
from memoryd.errors import MemorydError
from memoryd.model import safejson

SETTINGS_MAX_BYTES = 16 * 1024 * 1024  # `.claude.json` grows with every project
RECORD_FOLDER = "claude-install"
RETRIES = 3
PLUGIN_FOLDER = "claude_plugin"


@dataclass(frozen=True, slots=True)
class Target:
    path: Path
    install: Callable[[cs.Json, str], cs.Json]
    uninstall: Callable[[cs.Json, str, frozenset[str]], cs.Json]


def targets(scope: str, program: list[str], cwd: Path) -> list[Target]:
    """The settings file (hooks) and the MCP config file of a scope."""
    if scope == "project":
        from memoryd.discover.look import git_root

        root = git_root(cwd) or cwd
        settings, mcp = root / ".claude" / "settings.json", root / ".mcp.json"
    else:
        config_dir = os.environ.get("CLAUDE_CONFIG_DIR")
        home = Path(config_dir).expanduser() if config_dir else Path.home() / ".claude"
        settings = home / "settings.json"
        mcp = (Path(config_dir).expanduser() if config_dir else Path.home()) / ".claude.json"
    return [
        Target(settings, lambda d, w: cs.with_hooks(d, program, w), cs.without_hooks),
        Target(mcp, lambda d, w: cs.with_server(d, program, w), cs.without_server),
    ]


def read_json(path: Path) -> tuple[bytes | None, cs.Json]:
    """A settings file's bytes and object ({} when there is none); a file that is not a JSON
    object is an error naming it."""
    from memoryd.paths import read_bounded, read_problem

    try:
        raw = read_bounded(path, SETTINGS_MAX_BYTES)
    except FileNotFoundError:
        return None, {}
    except OSError as error:
        raise MemorydError(
            f"{path}: cannot be read ({read_problem(error)}); nothing was changed"
        ) from None
    try:
        data = safejson.loads(raw.decode("utf-8-sig")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError) as error:
        raise MemorydError(
            f"{path}: not valid JSON ({error}); nothing was changed. Fix the file (Claude Code "
            "does not read it either), then run the command again"
        ) from None
    if not isinstance(data, dict):
        raise MemorydError(f"{path}: not a JSON object; nothing was changed. Fix the file first")
    return raw, data


def dump(data: cs.Json, like: bytes | None) -> bytes:
    """JSON as Claude Code writes it (two-space indent), ending as the old file ended."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    return (text + ("\n" if like is None or like.endswith(b"\n") else "")).encode()


@dataclass(slots=True)
class Edit:
    path: Path
    before: bytes | None  # the file as read (None: no file)
    after: bytes | None  # what to write (None: remove the file)
    record: dict[str, Any] | None  # the install record to keep (None: drop it)


def _record_path(state_dir: Path, path: Path) -> Path:
    key = hashlib.sha256(str(path.absolute()).encode("utf-8", "surrogateescape")).hexdigest()
    return state_dir / RECORD_FOLDER / f"{key[:20]}.json"


def _load_record(state_dir: Path, path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = safejson.loads(_record_path(state_dir, path).read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("file") == str(path.absolute()):
            return data
    return None


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def plan(action: str, target: Target, state_dir: Path) -> Edit:
    """What install or uninstall does to one file (raises on a malformed one)."""
    raw, data = read_json(target.path)
    where = str(target.path)
    record = _load_record(state_dir, target.path)
    if action == "install":
        new = target.install(data, where)
        if new == data:
            return Edit(target.path, raw, raw, record)
        after = dump(new, raw)
        if record is None or record.get("written") != _sha(raw):
            present = cs.present_keys(data)
            # The bytes to give back: only a file without memoryd's entries in it already.
            clean = target.uninstall(data, where, present) == data
            record = {
                "file": str(target.path.absolute()),
                "exact": clean,
                "before": raw.decode("utf-8", "surrogateescape") if raw is not None else None,
                "present": sorted(present),
            }
        return Edit(target.path, raw, after, {**record, "written": _sha(after)})
    if record is not None and record.get("exact") and record.get("written") == _sha(raw):
        before = record.get("before")
        back = None if before is None else str(before).encode("utf-8", "surrogateescape")
        return Edit(target.path, raw, back, None)
    keep = frozenset(record.get("present", [])) if record else frozenset()
    new = target.uninstall(data, where, keep)
    return Edit(target.path, raw, raw if new == data else dump(new, raw), None)


def _write(path: Path, data: bytes | None, expected: bytes | None) -> None:
    """Replace the file whole, or remove it, unless someone changed it since it was read."""
    try:
        now: bytes | None = path.read_bytes()
    except FileNotFoundError:
        now = None
    if now != expected:
        raise _Changed(path)
    if data is None:
        path.unlink()
        return
    if path.is_symlink():  # a settings file kept in a dotfiles repo: its target is written
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (os.stat(path).st_mode & 0o777) if expected is not None else 0o600
    temp = path.with_name(f".{path.name}.memoryd-{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


class _Changed(Exception):
    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path


def _keep_record(state_dir: Path, edit: Edit) -> None:
    path = _record_path(state_dir, edit.path)
    if edit.record is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    from memoryd.paths import ensure_private_dir

    ensure_private_dir(path.parent)
    path.write_text(json.dumps(edit.record), encoding="utf-8")
    os.chmod(path, 0o600)


def diff(edit: Edit) -> str:
    old = (edit.before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    new = (edit.after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    name = str(edit.path)
    gone = " (removed)" if edit.after is None else ""
    return "".join(difflib.unified_diff(old, new, name, name + gone))


def run(action: str, scope: str, *, dry_run: bool, state_dir: Path, cwd: Path, out: TextIO) -> None:
    """Plan every file, then write them (nothing written when one cannot be planned)."""
    from memoryd.paths import program

    stable = ["memoryd"] if scope == "project" else program()
    for attempt in range(RETRIES):
        edits = [plan(action, t, state_dir) for t in targets(scope, stable, cwd)]
        if dry_run:
            for edit in edits:
                out.write(diff(edit) or f"{edit.path}: unchanged\n")
            out.write("[DRY RUN] nothing written\n")
            return
        try:
            for edit in edits:
                if edit.after != edit.before:
                    _write(edit.path, edit.after, edit.before)
                _keep_record(state_dir, edit)
        except _Changed as changed:
            if attempt == RETRIES - 1:
                raise MemorydError(
                    f"{changed.path}: changed by another process while memoryd was writing it; "
                    "run the command again"
                ) from None
            continue
        break
    for edit in edits:
        said = (
            "unchanged"
            if edit.after == edit.before
            else ("removed" if edit.after is None else "updated")
        )
        out.write(f"{said}: {edit.path}\n")
    if action == "install":
        out.write(
            f"memoryd is registered in Claude Code ({scope} scope): MCP server `memoryd` and the "
            f"hooks `{cs.hook_command(stable, 'EVENT')}`. New sessions use them.\n"
        )
        from memoryd.paths import in_clone

        clone = in_clone(stable) if scope == "user" else None
        if clone is not None:
            out.write(
                f"note: {stable[0]} is in the source checkout {clone}: Claude Code's hooks and "
                "server stop working if it goes. Install memoryd as a tool (`uv tool install "
                "'.[mcp]'`) and run `memoryd claude install` again from there.\n"
            )


def plugin_path() -> Path:
    return Path(__file__).resolve().parent / PLUGIN_FOLDER
