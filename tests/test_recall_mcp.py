"""`memoryd mcp`: the MCP server driven by the SDK's own client over stdio, as a real
subprocess; its calls are consult evidence a dream pass's guard honours (issue 15)."""

import asyncio
import json
import os
import stat
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.commands.mcp import MCP_MISSING
from memoryd.storage.state import dir_key
from tests.conftest import Env, tree_digest
from tests.helpers import (
    make_served_repo,
    mcp_drive,
    mcp_server,
    mcp_structured,
    memory_at,
    state_rows,
)

pytest.importorskip(
    "mcp", reason="the MCP SDK is not installed: install the test extra (memoryd[test])"
)


pytestmark = pytest.mark.repo_tree.with_args(make_served_repo)

DAY = 86400
TOOLS = {"search_memories", "recall_for_paths", "read_memory", "recent_memories"}


@pytest.mark.timeout(120)
def test_the_sdk_client_lists_and_calls_every_tool(env: Env, repo: Path, cli) -> None:
    """initialize, list_tools (four tools, each annotated read-only), a call of each; the
    results carry the CLI's --json fields; nothing is written in the repo or memory dir; each
    answer is a consult row in the state dir."""
    folder = repo / ".claude" / "memory"
    before = tree_digest(repo)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_memories", {"query": "paymnts nightly"}),
        ("search_memories", {"query": "barley", "timeframe": "last_quarter", "type": "project"}),
        ("recall_for_paths", {"paths": [str(repo / "src" / "app.py")], "limit": 50}),
        ("read_memory", {"file": str(folder / "filler_3.md")}),
        ("recent_memories", {"timeframe": "last_quarter", "limit": 50}),
        ("search_memories", {"query": "x", "timeframe": "lastweek"}),
    ]
    init, tools, answers = asyncio.run(mcp_drive(mcp_server(env, repo), calls))
    assert init.server_info.name == "memoryd"
    listed = {tool.name: tool for tool in tools.tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
    found = mcp_structured(answers[0])["results"]
    assert [Path(r["file"]).name for r in found] == ["payment_flow.md"]
    cli_json = json.loads(cli("search", "paymnts nightly", repo, "--json").out)["results"]
    assert found == cli_json
    assert {"file", "dir", "name", "description", "type", "tier", "date", "age_days",
            "snippet", "flags"} <= set(found[0])  # fmt: skip
    assert [Path(r["file"]).name for r in mcp_structured(answers[1])["results"]] == ["filler_1.md"]
    recalled = mcp_structured(answers[2])["results"]
    assert len(recalled) == 12 and all(r["why"] == ["cites src/app.py"] for r in recalled)
    shown = mcp_structured(answers[3])
    assert shown["text"] == (folder / "filler_3.md").read_text()
    assert shown["indexed"].startswith("indexed in MEMORY.md")
    assert len(mcp_structured(answers[4])["results"]) == 13
    assert answers[5].is_error and "last_quarter" in answers[5].content[0].text
    assert tree_digest(repo) == before
    assert stat.S_IMODE((env.state / "state.sqlite").stat().st_mode) == 0o600
    query = "SELECT ts, tool, names, query FROM consult_served WHERE dir = ? ORDER BY seq"
    rows = [
        {"ts": ts, "tool": tool, "names": json.loads(names), "query": q}
        for ts, tool, names, q in state_rows(env.state, query, dir_key(folder.resolve()))
    ]
    assert [r["tool"] for r in rows] == [
        "search_memories",
        "search_memories",
        "recall_for_paths",
        "read_memory",
        "recent_memories",
    ]
    assert rows[0]["names"] == ["payment_flow.md"] and rows[0]["query"] == "paymnts nightly"
    assert rows[3]["names"] == ["filler_3.md"]
    assert all(set(r) == {"ts", "tool", "names", "query"} for r in rows)


@pytest.mark.timeout(120)
def test_an_mcp_read_is_consult_evidence_for_the_dream_guard(env: Env, repo: Path, cli) -> None:
    """A fully stale memory the dream pass would move is kept (guard `consulted`, naming the
    server's log) once the agent read it through the MCP server."""
    folder = repo / ".claude" / "memory"
    plan = json.loads(cli("dream", "--dry-run", "--json", folder).out)["dirs"][0]
    assert {m["file"]: m["reason"] for m in plan["planned"]} == {"payment_flow.md": "stale"}
    asyncio.run(mcp_drive(mcp_server(env, folder), [("read_memory", {"file": "payment_flow"})]))
    report = json.loads(cli("dream", "--json", folder).out)["dirs"][0]
    assert report["changes"] == []
    flag = {f["file"]: f for f in report["flagged"]}["payment_flow.md"]
    assert flag["guard"] == "consulted"
    explained = json.loads(cli("explain", "--json", folder / "payment_flow.md").out)
    assert "memoryd's MCP server log" in json.dumps(explained)
    assert (folder / "payment_flow.md").exists()


def test_mcp_without_the_sdk_says_how_to_install_it(env: Env, tmp_path: Path) -> None:
    """With the SDK not importable, `memoryd mcp` exits 2 naming the extra to install."""
    import subprocess

    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "mcp"],
        env={**os.environ, "PYTHONPATH": str(blocker)},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "'.[mcp]'" in result.stderr and MCP_MISSING in result.stderr


def test_the_server_refreshes_by_stat_at_most_every_few_seconds(env: Env, repo: Path) -> None:
    """Between refreshes a query costs the query: a file written meanwhile is found once
    REFRESH_EVERY has passed (an injected monotonic clock), not before."""
    from memoryd.recall import mcp_server

    folder = repo / ".claude" / "memory"
    now = [100.0]
    recall = mcp_server.Recall(env.runtime(), [folder], monotonic=lambda: now[0])
    try:
        assert recall.search("quince")["results"] == []
        memory_at(folder, "quince_notes.md", "Quince jam recipe.", age=1)
        now[0] += mcp_server.REFRESH_EVERY / 2
        assert recall.search("quince")["results"] == []
        now[0] += mcp_server.REFRESH_EVERY
        found = recall.search("quince")["results"]
        assert [Path(r["file"]).name for r in found] == ["quince_notes.md"]
    finally:
        recall.close()


def test_the_served_log_keeps_its_newer_half_past_its_size(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dir's served rows never grow past MAX_ROWS: the newer half is kept, and the guard
    still reads the newest."""
    from memoryd.dream import consults
    from memoryd.dream.consult import Subject

    monkeypatch.setattr(consults, "MAX_ROWS", 40)
    real = tmp_path / "mem"
    for i in range(200):
        consults.record(
            env.state, real, tool="read_memory", names=[f"m{i}.md"], query="", now=1e9 + i
        )
    rows = state_rows(env.state, "SELECT names FROM consult_served ORDER BY seq")
    assert len(rows) <= 40 and rows[-1] == ('["m199.md"]',) and len(rows) > 10
    log = consults.served(env.state, real)
    assert log is not None
    assert log.evidence(Subject("m199.md", "m199"), since=0) is not None
    assert log.evidence(Subject("m0.md", "m0"), since=0) is None


@pytest.mark.timeout(120)
def test_the_tools_serve_a_stores_active_records_by_scope(env: Env, repo: Path) -> None:
    """search_memories and recall_for_paths include a JSONL record store's active records:
    by query words and `scope`, or by the paths and symbols as the task's scope; the store is
    never written."""
    store = repo / ".agent" / "memory.jsonl"
    store.parent.mkdir()
    now = datetime.now(UTC)
    row = {
        "id": "r-pay",
        "scope": ["payments"],
        "rule": "Retry nightly payments twice",
        "because": "the bank drops the first call",
        "evidence": "PR 7",
        "createdAt": (now - timedelta(days=100)).isoformat(),
        "lastConfirmedAt": (now - timedelta(days=2)).isoformat(),
    }
    store.write_text(json.dumps(row) + "\n")
    before = store.read_bytes()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_memories", {"query": "nightly payments", "scope": ["payments"]}),
        ("search_memories", {"query": "nightly payments", "scope": ["billing"]}),
        (
            "recall_for_paths",
            {"paths": [str(repo / "src" / "app.py")], "symbols": ["payments"], "limit": 50},
        ),
    ]
    _, _, answers = asyncio.run(mcp_drive(mcp_server(env, repo), calls))

    def records(answer: Any) -> list[str]:
        return [r["name"] for r in mcp_structured(answer)["results"] if r["tier"] == "record"]

    assert records(answers[0]) == ["r-pay"]
    assert records(answers[1]) == []
    assert records(answers[2]) == ["r-pay"]
    assert store.read_bytes() == before
