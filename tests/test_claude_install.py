"""`memoryd claude install|uninstall|plugin-path` on real settings files under a private HOME:
what goes where, what is kept, what comes back, and what is refused."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.claude import claude_settings as cs
from memoryd.paths import program
from tests.conftest import Env, Result

Cli = Callable[..., Result]

USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}


def hooks_of(settings: dict[str, Any]) -> dict[str, list[str]]:
    return {
        event: [h["command"] for g in groups for h in g["hooks"]]
        for event, groups in settings.get("hooks", {}).items()
    }


def write(path: Path, data: object, indent: int | None = 4) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent) + "\n")
    return path.read_bytes()


def test_install_adds_the_three_hooks_and_the_server_keeping_every_user_setting(
    env: Env, cli: Cli
) -> None:
    settings = env.claude / "settings.json"
    write(settings, USER_SETTINGS)
    claude_json = env.home / ".claude.json"
    write(claude_json, {"numStartups": 3, "mcpServers": {"gh": {"command": "gh-mcp"}}})
    result = cli("claude", "install")
    assert result.code == 0, result.err
    data = json.loads(settings.read_text())
    me = " ".join(program())
    assert hooks_of(data) == {
        "PreToolUse": ["audit.sh", f"{me} hook pre-tool-use"],
        "Stop": ["notify-send done"],
        "PostToolUse": [f"{me} hook post-tool-use"],
        "SessionStart": [f"{me} hook session-start"],
    }
    assert data["model"] == "opus" and data["permissions"] == USER_SETTINGS["permissions"]
    pre = data["hooks"]["PreToolUse"][1]
    assert pre["matcher"] == "Read|Edit|Write|MultiEdit"
    assert data["hooks"]["PostToolUse"][0]["matcher"] == "Write|Edit|MultiEdit"
    mcp = json.loads(claude_json.read_text())
    assert mcp["numStartups"] == 3
    assert mcp["mcpServers"] == {
        "gh": {"command": "gh-mcp"},
        "memoryd": {"type": "stdio", "command": program()[0], "args": ["mcp"], "env": {}},
    }


def test_install_twice_changes_nothing_the_second_time(env: Env, cli: Cli) -> None:
    write(env.claude / "settings.json", USER_SETTINGS)
    assert cli("claude", "install").code == 0
    once = {p: p.read_bytes() for p in (env.claude / "settings.json", env.home / ".claude.json")}
    again = cli("claude", "install")
    assert again.code == 0
    assert again.out.count("unchanged: ") == 2
    assert {p: p.read_bytes() for p in once} == once


def test_uninstall_gives_back_the_files_as_they_were(env: Env, cli: Cli) -> None:
    settings = env.claude / "settings.json"
    before = write(settings, USER_SETTINGS)
    assert cli("claude", "install").code == 0
    assert cli("claude", "uninstall").code == 0
    assert settings.read_bytes() == before
    assert not (env.home / ".claude.json").exists()  # there was none before


def test_uninstall_after_the_client_rewrote_the_file_takes_out_memoryds_entries_only(
    env: Env, cli: Cli
) -> None:
    """Claude Code rewrites .claude.json as it runs (and a person edits settings.json): the
    bytes from before cannot come back, memoryd's entries go, all else stays."""
    settings = env.claude / "settings.json"
    write(settings, USER_SETTINGS)
    claude_json = env.home / ".claude.json"
    write(claude_json, {"numStartups": 3})
    assert cli("claude", "install").code == 0
    data = json.loads(settings.read_text())
    data["theme"] = "dark"
    write(settings, data, indent=2)
    mcp = json.loads(claude_json.read_text())
    mcp["numStartups"] = 4
    write(claude_json, mcp, indent=2)
    assert cli("claude", "uninstall").code == 0
    assert json.loads(settings.read_text()) == {**USER_SETTINGS, "theme": "dark"}
    assert json.loads(claude_json.read_text()) == {"numStartups": 4}


@pytest.mark.parametrize(
    ("name", "text"),
    [("settings.json", "{ not json"), ("settings.json", "[1, 2]"), (".claude.json", '{"a": ')],
)
def test_a_malformed_settings_file_is_an_error_naming_it_and_nothing_changes(
    env: Env, cli: Cli, name: str, text: str
) -> None:
    settings = env.claude / "settings.json"
    before = write(settings, USER_SETTINGS)
    target = settings if name == "settings.json" else env.home / name
    target.write_text(text)
    result = cli("claude", "install")
    assert result.code == 1
    assert str(target) in result.err and "nothing was changed" in result.err
    assert target.read_text() == text
    if target != settings:
        assert settings.read_bytes() == before


def test_a_key_of_the_wrong_type_is_refused_naming_the_file(env: Env, cli: Cli) -> None:
    settings = env.claude / "settings.json"
    write(settings, {"hooks": {"PreToolUse": {"matcher": "x"}}})
    result = cli("claude", "install")
    assert result.code == 1
    assert f"{settings}: `hooks.PreToolUse` is a dict, not a list" in result.err
    assert not (env.home / ".claude.json").exists()


def test_a_server_named_memoryd_that_is_not_memoryd_is_refused(env: Env, cli: Cli) -> None:
    claude_json = env.home / ".claude.json"
    before = write(claude_json, {"mcpServers": {"memoryd": {"command": "something-else"}}})
    result = cli("claude", "install")
    assert result.code == 1 and "does not run memoryd" in result.err
    assert claude_json.read_bytes() == before
    assert not (env.claude / "settings.json").exists()


def test_dry_run_shows_the_change_and_writes_nothing(env: Env, cli: Cli) -> None:
    result = cli("claude", "install", "--dry-run")
    assert result.code == 0
    assert f"+++ {env.claude / 'settings.json'}" in result.out
    assert '+    "memoryd": {' in result.out
    assert "[DRY RUN] nothing written" in result.out
    assert not env.claude.exists() and not (env.home / ".claude.json").exists()


def test_claude_config_dir_moves_both_files(
    env: Env, cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As `claude mcp add --scope user` does: `$CLAUDE_CONFIG_DIR/.claude.json`."""
    config = tmp_path / "cc"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    assert cli("claude", "install").code == 0
    assert "hooks" in json.loads((config / "settings.json").read_text())
    assert "memoryd" in json.loads((config / ".claude.json").read_text())["mcpServers"]
    assert not env.claude.exists() and not (env.home / ".claude.json").exists()


def test_project_scope_writes_the_repos_files_with_memoryd_by_name(
    env: Env, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    assert cli("claude", "install", "--scope", "project").code == 0
    settings = json.loads((repo / ".claude" / "settings.json").read_text())
    assert hooks_of(settings)["SessionStart"] == ["memoryd hook session-start"]
    assert json.loads((repo / ".mcp.json").read_text())["mcpServers"]["memoryd"]["command"] == (
        "memoryd"
    )
    assert cli("claude", "uninstall", "--scope", "project").code == 0
    assert not (repo / ".mcp.json").exists() and not (repo / ".claude" / "settings.json").exists()


def test_an_older_install_from_another_path_is_replaced_in_place() -> None:
    old = cs.with_hooks(USER_SETTINGS, ["/old/venv/bin/memoryd"], "s")
    new = cs.with_hooks(old, ["/home/u/.local/bin/memoryd"], "s")
    commands = [c for cs_ in hooks_of(new).values() for c in cs_]
    assert not any(c.startswith("/old/") for c in commands)
    assert sum("memoryd hook" in c for c in commands) == 3
    assert cs.without_hooks(new, "s") == USER_SETTINGS


def test_plugin_path_names_the_shipped_plugin_folder(cli: Cli) -> None:
    result = cli("claude", "plugin-path")
    folder = Path(result.out.strip())
    manifest = json.loads((folder / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "memoryd"
    hooks = json.loads((folder / "hooks" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {"PreToolUse", "PostToolUse", "SessionStart"}
    assert all(cs.is_our_hook(h["command"]) for g in hooks.values() for x in g for h in x["hooks"])
    servers = json.loads((folder / ".mcp.json").read_text())["mcpServers"]
    assert cs.is_our_server(servers["memoryd"])
    assert os.path.isdir(folder)


def test_a_settings_file_that_is_a_link_stays_a_link(env: Env, cli: Cli, tmp_path: Path) -> None:
    """Settings kept in a dotfiles repo and linked into ~/.claude: the target is edited, the
    link stays."""
    target = tmp_path / "dotfiles" / "claude-settings.json"
    write(target, USER_SETTINGS)
    env.claude.mkdir()
    (env.claude / "settings.json").symlink_to(target)
    assert cli("claude", "install").code == 0
    assert (env.claude / "settings.json").is_symlink()
    assert "SessionStart" in json.loads(target.read_text())["hooks"]


def test_a_memoryd_in_a_source_checkout_is_said(env: Env, cli: Cli) -> None:
    """The tests run the checkout's own memoryd: the hooks would break with the clone."""
    result = cli("claude", "install")
    assert result.code == 0
    assert f"note: {program()[0]} is in the source checkout" in result.out
    assert "uv tool install" in result.out
