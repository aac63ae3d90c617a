"""`memoryd mcp`: the MCP server driven by the SDK's own client over stdio, as a real
subprocess; its calls are consult evidence a dream pass's guard honours (issue 15)."""

import asyncio
import json
import os
import stat
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.dream.consult import served_log
from tests.conftest import Env, tree_digest

pytest.importorskip(
    "mcp", reason="the MCP SDK is not installed: install the test extra (memoryd[test])"
)

from mcp import ClientSession  # only once the skip above let the module load
from mcp.client.stdio import StdioServerParameters, stdio_client

DAY = 86400
TOOLS = {"search_memories", "recall_for_paths", "read_memory", "recent_memories"}


def mem(folder: Path, name: str, body: str, *, age: float = 40, type_: str = "project") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    stem = name.removesuffix(".md")
    path.write_text(f"---\nname: {stem}\ndescription: about {stem}\ntype: {type_}\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repo whose memory dir holds one fully stale memory (it cites files that are gone)
    and fillers, so the breaker lets a pass move it."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    (root / ".git").mkdir()
    folder = root / ".claude" / "memory"
    mem(folder, "payment_flow.md", "Payments went through `src/removed_payments.py` nightly.")
    topics = ["anchor", "barley", "canyon", "dolphin", "ember", "fjord", "glacier", "harbor",
              "iris", "jasper", "kestrel", "lantern"]  # fmt: skip
    for i, topic in enumerate(topics):
        mem(folder, f"filler_{i}.md", f"{topic} {topic}s {topic}-like, see `src/app.py`")
    (folder / "MEMORY.md").write_text(
        "# app Memory\n\n"
        + "".join(f"- [{p.stem}]({p.name}) — about {p.stem}\n" for p in sorted(folder.glob("*.md")))
    )
    return root


def server(env: Env, *dirs: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", *map(str, dirs)],
        env={
            "HOME": str(env.home),
            "XDG_CONFIG_HOME": str(env.home / ".config"),
            "XDG_STATE_HOME": str(env.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(env.home / ".cache"),
        },
    )


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    # The SDK wraps a non-object result; a dict comes as it is.
    return data.get("result", data) if isinstance(data, dict) else data  # type: ignore[no-any-return]


async def drive(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        answers = [await session.call_tool(name, args) for name, args in calls]
        return init, tools, answers


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
    init, tools, answers = asyncio.run(drive(server(env, repo), calls))
    assert init.server_info.name == "memoryd"
    listed = {tool.name: tool for tool in tools.tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
    found = structured(answers[0])["results"]
    assert [Path(r["file"]).name for r in found] == ["payment_flow.md"]
    cli_json = json.loads(cli("search", "paymnts nightly", repo, "--json").out)["results"]
    assert found == cli_json
    assert {"file", "dir", "name", "description", "type", "tier", "date", "age_days",
            "snippet", "flags"} <= set(found[0])  # fmt: skip
    assert [Path(r["file"]).name for r in structured(answers[1])["results"]] == ["filler_1.md"]
    recalled = structured(answers[2])["results"]
    assert len(recalled) == 12 and all(r["why"] == ["cites src/app.py"] for r in recalled)
    shown = structured(answers[3])
    assert shown["text"] == (folder / "filler_3.md").read_text()
    assert shown["indexed"].startswith("indexed in MEMORY.md")
    assert len(structured(answers[4])["results"]) == 13
    assert answers[5].is_error and "last_quarter" in answers[5].content[0].text
    assert tree_digest(repo) == before
    log = served_log(env.state, folder.resolve())
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    rows = [json.loads(line) for line in log.read_text().splitlines()]
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
    asyncio.run(drive(server(env, folder), [("read_memory", {"file": "payment_flow"})]))
    report = json.loads(cli("dream", "--json", folder).out)["dirs"][0]
    assert report["changes"] == []
    flag = {f["file"]: f for f in report["flagged"]}["payment_flow.md"]
    assert flag["guard"] == "consulted"
    explained = json.loads(cli("explain", "--json", folder / "payment_flow.md").out)
    assert "memoryd's MCP server log" in json.dumps(explained)
    assert (folder / "payment_flow.md").exists()


def test_mcp_serves_without_the_sdk(env: Env, tmp_path: Path) -> None:
    """With the SDK not importable, `memoryd mcp` still answers the handshake and lists its
    tools: it speaks the protocol itself (the old one exited 2 asking for the extra)."""
    import subprocess

    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in ('mcp', 'mcp_types', 'pydantic') or name.startswith('mcp.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "resources/list"},
    ]
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "mcp"],
        env={**os.environ, "PYTHONPATH": str(blocker), "HOME": str(env.home)},
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert answers[0]["result"]["protocolVersion"] == "2025-06-18"
    assert answers[0]["result"]["serverInfo"]["name"] == "memoryd"
    assert {t["name"] for t in answers[1]["result"]["tools"]} == TOOLS
    assert answers[2]["error"]["code"] == -32601


def test_the_server_refreshes_by_stat_at_most_every_few_seconds(env: Env, repo: Path) -> None:
    """Between refreshes a query costs the query: a file written meanwhile is found once
    REFRESH_EVERY has passed (an injected monotonic clock), not before."""
    from memoryd import mcp_server

    folder = repo / ".claude" / "memory"
    now = [100.0]
    recall = mcp_server.Recall(env.runtime(), [folder], monotonic=lambda: now[0])
    try:
        assert recall.search("quince")["results"] == []
        mem(folder, "quince_notes.md", "Quince jam recipe.", age=1)
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
    """The served log never grows past MAX_LOG_BYTES: the newer half is kept, rows stay
    whole, and the guard still reads the newest."""
    from memoryd.dream.consult import ConsultLog, Subject
    from memoryd.recall import consults

    monkeypatch.setattr(consults, "MAX_LOG_BYTES", 4096)
    real = tmp_path / "mem"
    for i in range(200):
        path = consults.record(
            env.state, real, tool="read_memory", names=[f"m{i}.md"], query="", now=1e9 + i
        )
    assert path.stat().st_size <= 4096
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[-1]["names"] == ["m199.md"] and len(rows) > 10
    log = ConsultLog.load_file(path)
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
    _, _, answers = asyncio.run(drive(server(env, repo), calls))

    def records(answer: Any) -> list[str]:
        return [r["name"] for r in structured(answer)["results"] if r["tier"] == "record"]

    assert records(answers[0]) == ["r-pay"]
    assert records(answers[1]) == []
    assert records(answers[2]) == ["r-pay"]
    assert store.read_bytes() == before
