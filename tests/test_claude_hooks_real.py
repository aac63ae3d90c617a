"""`memoryd claude install` with the real Claude Code binary: the hooks and the MCP server it
registers, seen from what the binary sends to the model and leaves on disk.

Opt-in: every test skips unless `$MEMORYD_CLAUDE_BIN` names a Claude Code binary (see
tests/claude_client.py); the fake Messages API on 127.0.0.1 scripts the agent's tool calls.
No daemon runs: whatever happens is the hooks' doing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.discover.slugs import slugify
from tests.claude_client import BIN_ENV, Captured, Reply, claude_bin, run_claude
from tests.conftest import write_memory
from tests.helpers import git
from tests.secret_samples import POSITIVES

pytestmark = pytest.mark.timeout(300)

if not os.environ.get(BIN_ENV):
    pytest.skip(
        f"set {BIN_ENV} to a Claude Code binary to run the real-client checks",
        allow_module_level=True,
    )

MEMORYD = Path(sys.executable).parent / "memoryd"
TOKEN = next(value for kind, value, _ in POSITIVES if kind == "GitHub token")


@pytest.fixture(autouse=True)
def _binary() -> None:
    claude_bin()


def home_env(home: Path) -> dict[str, str]:
    """memoryd's environment as the binary gives it to its hooks (tests/claude_client.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "ANTHROPIC_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
    )
    return env


def memoryd(home: Path, *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(MEMORYD), *args],
        env=home_env(home),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def hook_contexts(run: Captured, event: str) -> list[str]:
    """The `<event>:<tool> hook additional context:` texts of the last agent request."""
    last = run.agent_requests[-1]
    return [t for t in texts(last["messages"]) if t.startswith(f"{event}:")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def deploy():\n    return 1\n")
    git(root, "init", "-q")
    return root


def auto_dir(home: Path, root: Path) -> Path:
    return home / ".claude" / "projects" / slugify(str(root)) / "memory"


def test_a_file_cited_by_a_memory_brings_it_to_the_model_once_and_masked(
    tmp_path: Path, project: Path
) -> None:
    """After `memoryd claude install`, the agent reads then edits src/app.py: the read's hook
    gives the model the memory citing it (name, description, file, its line naming app.py,
    the token in it masked); the edit's hook says nothing more (once per session); a memory
    citing nothing of it is not sent."""
    home = tmp_path / "home"
    folder = auto_dir(home, project)
    write_memory(folder, "deploy_flow.md", name="Deploy flow",
                 description="staging deploys need a green build",
                 body=f"src/app.py deploy() must stay idempotent; export GH_TOKEN={TOKEN}\n"
                      "Other detail.\n")  # fmt: skip
    write_memory(folder, "unrelated.md", description="cites nothing here", body="docs/x.md\n")
    memoryd(home, "index", str(folder))
    memoryd(home, "recall", "--path", str(project / "src" / "app.py"), cwd=project)
    memoryd(home, "claude", "install")
    app = str(project / "src" / "app.py")
    run = run_claude(
        home,
        project,
        replies=[
            Reply(tool="Read", tool_input={"file_path": app}, tool_id="toolu_01read"),
            Reply(
                tool="Edit",
                tool_input={"file_path": app, "old_string": "return 1", "new_string": "return 2"},
                tool_id="toolu_02edit",
            ),
            Reply(text="done"),
        ],
        args=["-p", "change deploy", "--max-turns", "5", "--allowedTools", "Read,Edit"],
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    assert (project / "src" / "app.py").read_text().endswith("return 2\n")
    said = hook_contexts(run, "PreToolUse")
    assert len(said) == 1, said
    (context,) = said
    assert context.startswith("PreToolUse:Read hook additional context: memoryd:")
    assert "Deploy flow — staging deploys need a green build" in context
    assert str(folder / "deploy_flow.md") in context
    assert "src/app.py deploy() must stay idempotent" in context
    assert TOKEN not in json.dumps(run.agent_requests)
    assert "[secret: GitHub token]" in context
    assert "unrelated" not in context


def test_a_memory_the_agent_writes_has_its_pointer_at_once_without_a_daemon(
    tmp_path: Path, project: Path
) -> None:
    """The agent writes a memory, then reads MEMORY.md: the pointer is there by then (the
    post-write hook started the dir's index pass at once, no grace; the fake model answers
    once it is there, as a model takes its moment); its own pointer line, written next, is
    the one left (one line for the file)."""
    home = tmp_path / "home"
    folder = auto_dir(home, project)
    write_memory(folder, "old.md", description="an older memory")
    memoryd(home, "index", str(folder))
    memoryd(home, "claude", "install")
    new = folder / "release_day.md"
    body = "---\nname: Release day\ndescription: we release on Tuesdays\ntype: project\n---\n\nx\n"
    index = folder / "MEMORY.md"
    before = index.read_text()
    run = run_claude(
        home,
        project,
        replies=[
            Reply(tool="Write", tool_input={"file_path": str(new), "content": body},
                  tool_id="toolu_01write"),
            Reply(tool="Read", tool_input={"file_path": str(index)}, tool_id="toolu_02read",
                  after=lambda: "(release_day.md)" in index.read_text()),
            Reply(tool="Edit", tool_input={"file_path": str(index), "old_string": before.strip(),
                  "new_string": before.strip() + "\n- [Release day](release_day.md) — by agent"},
                  tool_id="toolu_03edit"),
            Reply(text="done"),
        ],
        args=["-p", "remember", "--max-turns", "6", "--allowedTools", "Read,Write,Edit"],
        timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    results = [
        t
        for request in run.agent_requests
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("tool_use_id") == "toolu_02read"
        for t in texts(block.get("content"))
    ]
    assert any("(release_day.md)" in t for t in results), results
    lines = [line for line in index.read_text().splitlines() if "(release_day.md)" in line]
    assert lines == ["- [Release day](release_day.md) — by agent"], index.read_text()


def test_memoryds_tools_are_offered_and_uninstall_gives_the_settings_back(
    tmp_path: Path, project: Path
) -> None:
    """A user's settings (a hook of their own, other keys) survive install; the next session
    is offered memoryd's MCP tools under the server name `memoryd`; after it (the binary
    rewrote .claude.json meanwhile), uninstall gives settings.json back byte for byte and
    takes only memoryd's server out of .claude.json.

    The client has run once before install, as it has for anyone who installs memoryd into
    it: a .claude.json the client never migrated (no `migrationVersion`) beside a
    settings.json makes 2.1.332's first session start without the user's MCP servers."""
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = {
        "model": "opus",
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
                                                                  "command": "true"}]}]},
    }  # fmt: skip
    settings.write_text(json.dumps(mine, indent=1) + "\n")
    original = settings.read_bytes()
    assert run_claude(home, project).returncode == 0
    claude_json = home / ".claude.json"
    kept = {**json.loads(claude_json.read_text()), "k": 1}
    claude_json.write_text(json.dumps(kept, indent=2))
    memoryd(home, "claude", "install")
    assert "memoryd" in json.loads(claude_json.read_text())["mcpServers"]
    # The client connects MCP servers without waiting for them (`memoryd mcp` answers in
    # ~1 s): a session may start before it is connected. Its own switch makes it wait.
    run = run_claude(home, project, {"MCP_CONNECTION_NONBLOCKING": "false"}, timeout=180)
    assert run.returncode == 0, run.stderr
    first = "\n".join(texts(run.agent_requests[0]))
    for tool in ("search_memories", "recall_for_paths", "read_memory", "recent_memories"):
        assert f"mcp__memoryd__{tool}" in first
    memoryd(home, "claude", "uninstall")
    assert settings.read_bytes() == original
    after = json.loads(claude_json.read_text())
    assert "memoryd" not in after.get("mcpServers", {})
    assert set(kept) <= set(after)
    assert after["k"] == 1


def test_the_plugin_folder_gives_the_same_recall(tmp_path: Path, project: Path) -> None:
    """`--plugin-dir $(memoryd claude plugin-path)`, with `memoryd` on PATH and nothing in the
    settings: reading a cited file sends the memory to the model."""
    home = tmp_path / "home"
    folder = auto_dir(home, project)
    write_memory(folder, "deploy_flow.md", name="Deploy flow",
                 description="staging deploys need a green build",
                 body="see src/app.py\n")  # fmt: skip
    memoryd(home, "recall", "--path", str(project / "src" / "app.py"), cwd=project)
    plugin = memoryd(home, "claude", "plugin-path").strip()
    app = str(project / "src" / "app.py")
    run = run_claude(
        home,
        project,
        {"PATH": f"{MEMORYD.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        replies=[Reply(tool="Read", tool_input={"file_path": app}), Reply(text="done")],
        args=["-p", "go", "--max-turns", "3", "--allowedTools", "Read", "--plugin-dir", plugin],
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    (context,) = hook_contexts(run, "PreToolUse")
    assert "Deploy flow — staging deploys need a green build" in context
    assert not (home / ".claude" / "settings.json").exists()


def test_session_start_tells_the_model_when_auto_memory_is_off(
    tmp_path: Path, project: Path
) -> None:
    """With `autoMemoryEnabled: false` in the user's settings, the session-start hook's one
    line reaches the model; with auto memory on, nothing of memoryd's does."""
    home = tmp_path / "home"
    memoryd(home, "claude", "install")
    quiet = run_claude(home, project, timeout=180)
    assert quiet.returncode == 0, quiet.stderr
    assert "memoryd:" not in json.dumps(quiet.agent_requests[0])
    settings = home / ".claude" / "settings.json"
    settings.write_text(
        json.dumps({**json.loads(settings.read_text()), "autoMemoryEnabled": False})
    )
    run = run_claude(home, project, timeout=180)
    assert run.returncode == 0, run.stderr
    said = [t for t in texts(run.agent_requests[0]) if "SessionStart hook additional context" in t]
    assert len(said) == 1
    assert (
        "SessionStart hook additional context: memoryd: Claude Code's auto memory is off" in said[0]
    )
