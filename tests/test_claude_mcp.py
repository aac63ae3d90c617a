"""`memoryd mcp` registered with the real Claude Code binary (issue 15): the tools the agent
is offered, a search it calls, the answer it gets, and the consult evidence that call leaves.

Opt-in: every test skips unless `$MEMORYD_CLAUDE_BIN` names a Claude Code binary (see
tests/claude_client.py). The fake Messages API on 127.0.0.1 scripts the agent's tool call.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.claude_client import BIN_ENV, Reply, claude_bin, run_claude
from tests.conftest import write_memory
from tests.helpers import state_rows

pytestmark = pytest.mark.timeout(300)

if not os.environ.get(BIN_ENV):
    pytest.skip(
        f"set {BIN_ENV} to a Claude Code binary to run the real-client checks",
        allow_module_level=True,
    )

TOOLS = ("search_memories", "recall_for_paths", "read_memory", "recent_memories")


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def test_the_agent_is_offered_memoryds_tools_and_a_search_answers_with_the_memory(
    tmp_path: Path,
) -> None:
    """Registered as the README says (`memoryd mcp` over stdio), the binary names the four
    tools to the model by their MCP names; a scripted search call reaches memoryd, its
    answer (the memory's file and description) goes back to the model, and the call is
    consult evidence in memoryd's state dir, with nothing written in the memory dir."""
    claude_bin()
    home = tmp_path / "home"
    cwd = tmp_path / "work"
    cwd.mkdir(parents=True)
    folder = home / ".claude" / "projects" / "-elsewhere" / "memory"
    write_memory(folder, "deploy_flow.md", name="Deploy flow",
                 description="staging deploys need a green build")  # fmt: skip
    before = sorted(os.listdir(folder))
    memoryd = Path(sys.executable).parent / "memoryd"
    config = tmp_path / "mcp.json"
    server = {"command": str(memoryd), "args": ["mcp"]}
    config.write_text(json.dumps({"mcpServers": {"memoryd": server}}))
    run = run_claude(
        home,
        cwd,
        replies=[
            Reply(tool="mcp__memoryd__search_memories", tool_input={"query": "deploys"}),
            Reply(text="done"),
        ],
        args=[
            *("-p", "what do we know about deploys?", "--max-turns", "3"),
            *("--mcp-config", str(config), "--strict-mcp-config"),
            *("--allowedTools", "mcp__memoryd__search_memories"),
        ],
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    # 2.1.332 defers MCP tools: their names are listed in the request's text and their
    # schemas loaded through its ToolSearch tool, so the names are looked for in the text.
    first = "\n".join(_texts(run.agent_requests[0]))
    assert all(f"mcp__memoryd__{name}" in first for name in TOOLS)
    answered = [
        block
        for request in run.agent_requests[1:]
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert answered, "the tool's answer never reached the model"
    text = "\n".join(_texts(answered))
    assert "deploy_flow.md" in text and "green build" in text
    state = home / ".local" / "state" / "memoryd"
    served = state_rows(state, "SELECT tool, names FROM consult_served")
    rows = [{"tool": tool, "names": json.loads(names)} for tool, names in served]
    assert any(r.get("tool") == "search_memories" and "deploy_flow" in str(r) for r in rows), rows
    assert sorted(os.listdir(folder)) == before
