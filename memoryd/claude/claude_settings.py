"""memoryd's entries in Claude Code's settings, added and taken out again; pure, JSON in and out.

As Claude Code 2.1.332 reads them: hooks in `settings.json` (`"hooks": {"PreToolUse":
[{"matcher": …, "hooks": [{"type": "command", "command": …}]}]}`); the MCP server `memoryd`
(a server named `memory` breaks Desktop subagents) in `mcpServers` of `<$CLAUDE_CONFIG_DIR or
home>/.claude.json`, or of `<project>/.mcp.json`. Everything else is kept, in its order; a
`memoryd` server that does not run memoryd is refused, never replaced.
"""

import copy
import os
import shlex
from typing import Any

from memoryd.claude.hooks import EVENTS
from memoryd.errors import MemorydError

SERVER = "memoryd"
HOOK_TIMEOUT = 30  # seconds; a hook is one short process, the index pass after a write included

Json = dict[str, Any]


class SettingsError(MemorydError):
    """A settings file memoryd cannot edit safely (not an object, a key of the wrong type)."""


def hook_command(program: list[str], event: str) -> str:
    return shlex.join([*program, "hook", event])


def is_our_hook(command: object) -> bool:
    """Whether a hook command is memoryd's (`<memoryd> hook EVENT`, whatever its path)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if len(words) < 3 or words[-2] != "hook" or words[-1] not in EVENTS:
        return False
    return os.path.basename(words[0]) == "memoryd" or words[-3] == "memoryd"


def is_our_server(entry: object) -> bool:
    """Whether an `mcpServers` entry runs memoryd's MCP server."""
    if not isinstance(entry, dict):
        return False
    command, args = entry.get("command"), entry.get("args") or []
    if not isinstance(command, str) or not isinstance(args, list) or args[-1:] != ["mcp"]:
        return False
    return os.path.basename(command) == "memoryd" or "memoryd" in args


def _object(parent: Json, key: str, where: str) -> Json | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, dict):
        raise SettingsError(f"{where}: `{key}` is a {type(value).__name__}, not an object")
    return value


def _groups(hooks: Json, event: str, where: str) -> list[Any] | None:
    value = hooks.get(event)
    if value is not None and not isinstance(value, list):
        raise SettingsError(f"{where}: `hooks.{event}` is a {type(value).__name__}, not a list")
    return value


def _without_ours(groups: list[Any]) -> list[Any]:
    """The event's groups less memoryd's commands; a group left with none is dropped."""
    out = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list) or not any(
            isinstance(h, dict) and is_our_hook(h.get("command")) for h in inner
        ):
            out.append(group)
            continue
        kept = [h for h in inner if not (isinstance(h, dict) and is_our_hook(h.get("command")))]
        if kept:
            out.append({**group, "hooks": kept})
    return out


def _our_group(program: list[str], event: str) -> Json:
    hook = {"type": "command", "command": hook_command(program, event), "timeout": HOOK_TIMEOUT}
    matcher = EVENTS[event][1]
    return {"matcher": matcher, "hooks": [hook]} if matcher else {"hooks": [hook]}


def with_hooks(settings: Json, program: list[str], where: str) -> Json:
    """The settings with memoryd's three hooks (each once, an older one of memoryd's replaced),
    every other key and hook as it was. `where` names the file in errors."""
    out = copy.deepcopy(settings)
    hooks = _object(out, "hooks", where)
    if hooks is None:
        hooks = out["hooks"] = {}
    for event in EVENTS:
        name = EVENTS[event][0]
        groups = _groups(hooks, name, where)
        wanted = _our_group(program, event)
        if (
            groups is not None
            and wanted in groups
            and _without_ours(groups) == [g for g in groups if g != wanted]
        ):
            continue  # installed as it would be: left in its place
        hooks[name] = [*_without_ours(groups or []), wanted]
    return out


def without_hooks(settings: Json, where: str, keep: frozenset[str] = frozenset()) -> Json:
    """The settings less memoryd's hooks; an event list, or `hooks` itself, that this leaves
    empty goes too, unless it is in `keep` (`hooks`, `hooks.<Event>`: there before install)."""
    out = copy.deepcopy(settings)
    hooks = _object(out, "hooks", where)
    if hooks is None:
        return out
    for name, _ in EVENTS.values():
        groups = _groups(hooks, name, where)
        if groups is None:
            continue
        kept = _without_ours(groups)
        if kept == groups:
            continue
        if kept or f"hooks.{name}" in keep:
            hooks[name] = kept
        else:
            del hooks[name]
    if not hooks and settings.get("hooks") and "hooks" not in keep:
        del out["hooks"]
    return out


def present_keys(data: Json) -> frozenset[str]:
    """The containers memoryd adds to that a file holds already (kept by uninstall)."""
    found: set[str] = {key for key in ("hooks", "mcpServers") if key in data}
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        found |= {f"hooks.{name}" for name, _ in EVENTS.values() if name in hooks}
    return frozenset(found)


def with_server(config: Json, program: list[str], where: str) -> Json:
    """The MCP config with memoryd's server as `memoryd` (an older entry of memoryd's replaced
    in its place); a `memoryd` server that is not memoryd's is refused."""
    out = copy.deepcopy(config)
    servers = _object(out, "mcpServers", where)
    if servers is None:
        servers = out["mcpServers"] = {}
    present = servers.get(SERVER)
    if present is not None and not is_our_server(present):
        raise SettingsError(
            f"{where}: an MCP server named `{SERVER}` is there and does not run memoryd "
            f"({present!r}); rename or remove it, then install again"
        )
    wanted = {"type": "stdio", "command": program[0], "args": [*program[1:], "mcp"], "env": {}}
    if present != wanted:
        servers[SERVER] = wanted
    return out


def without_server(config: Json, where: str, keep: frozenset[str] = frozenset()) -> Json:
    """The MCP config less memoryd's server; `mcpServers` left empty by that goes too, unless
    it is in `keep`."""
    out = copy.deepcopy(config)
    servers = _object(out, "mcpServers", where)
    if servers is None or not is_our_server(servers.get(SERVER)):
        return out
    del servers[SERVER]
    if not servers and "mcpServers" not in keep:
        del out["mcpServers"]
    return out
