"""Deeply nested JSON, JSONL and TOML where others write (a cloned repo's settings, consult log
and record store; the config) and in memoryd's own state: each bad file is that file's
problem, named and skipped (or, memoryd's own, done without and rebuilt), never the whole
command's or the daemon's. Before the bounded readers, json's and tomllib's RecursionError
came out of every one of these reads and ended the command."""

import asyncio
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.discover.slugs import slugify
from memoryd.dream.consult import CONSULT_LOG
from tests.conftest import Env, Result, write_memory
from tests.helpers import (
    DAY,
    Running,
    filler,
    make_planted_repo,
    make_small_repo,
    mem,
    moved,
    start,
    state_rows,
    wait_for,
)

NESTED = "[" * 5000 + "]" * 5000  # 10 KB
NESTED_ROW = '{"names": ' + NESTED + "}"


def _repo_with_session(home: Path, root: Path) -> Path:
    """A git repo Claude Code has a session in (its transcript records the cwd), with the
    hostile `.claude/settings.json` a clone may bring."""
    (root / ".git").mkdir(parents=True)
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text(NESTED)
    project = home / ".claude" / "projects" / slugify(str(root))
    project.mkdir(parents=True)
    (project / "s.jsonl").write_text(json.dumps({"type": "user", "cwd": str(root)}) + "\n")
    return root / ".claude" / "settings.json"


def test_a_repos_nested_settings_json_is_a_warning_and_every_command_runs(
    env: Env, cli: Callable[..., Result], tmp_path: Path
) -> None:
    """`index`, `dirs`, `search`, `recall`, `status`, `dream` all run; `dirs` names the file
    and says its settings are ignored; the other project's memory is indexed and found."""
    settings = _repo_with_session(env.home, tmp_path / "code" / "cloned")
    other = env.claude / "projects" / "-work-other" / "memory"
    write_memory(other, "deploy_notes.md", body="Deploys go out on Tuesdays.\n")
    for args in (["index"], ["dirs"], ["search", "tuesdays"], ["recall", "--symbol", "x"],
                 ["status"], ["dream"]):  # fmt: skip
        result = cli(*args)
        assert result.code in (0, 1), (args, result.err)
    assert "deploy_notes.md" in (other / "MEMORY.md").read_text()
    listed = cli("dirs").out
    assert f"warning: {settings}: not valid JSON (nested 5000 levels deep" in listed
    assert "its auto-memory settings are ignored" in listed
    found = json.loads(cli("search", "tuesdays", "--json").out)["results"]
    assert [r["name"] for r in found] == ["deploy_notes"]


@pytest.mark.timeout(120)
def test_the_daemon_keeps_every_other_dir_past_a_nested_settings_json(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """A repo with a nested settings.json and a session in it: the daemon still watches the
    other projects, so a memory written there and deleted by someone else is kept and comes
    back byte-identical (before, discovery died on every rescan and nothing was watched)."""
    running = start(tmp_path)
    try:
        _repo_with_session(running.home, tmp_path / "code" / "cloned")
        folder = project(running, "app")
        data = b"---\nname: fact\ndescription: a fact\ntype: project\n---\n\nbody\n"
        (folder / "fact.md").write_bytes(data)
        wait_for(
            lambda: (
                (folder / "MEMORY.md").exists() and "fact.md" in (folder / "MEMORY.md").read_text()
            ),
            what="the other project's memory indexed",
        )
        (folder / "fact.md").unlink()
        wait_for(lambda: running.rows("memory.deleted_outside"), what="the deletion seen")
        listing = running.cli("trash", "list")
        [line] = [ln for ln in listing.stdout.splitlines() if "deleted outside memoryd" in ln]
        restored = running.cli("trash", "restore", line.split()[0])
        assert restored.returncode == 0, restored.stderr
        assert (folder / "fact.md").read_bytes() == data
        assert running.proc.poll() is None
    finally:
        assert running.stop() == 0


def test_a_nested_row_in_a_repos_consult_log_is_skipped_and_the_rest_counts(
    env: Env, cli: Callable[..., Result], tmp_path: Path
) -> None:
    """`memory-consult.jsonl` with a nested row among good ones: the dream pass runs, and the
    consult the good row records still keeps its stale memory."""
    repo = make_planted_repo(tmp_path)
    log = repo / CONSULT_LOG
    log.parent.mkdir(parents=True)
    rows = [json.dumps({"ts": time.time() - 2 * DAY, "names": ["payment_flow"]}), NESTED_ROW]
    log.write_text("\n".join(rows) + "\n")
    mem(repo, "payment_flow.md", "Payments go through `src/removed_payments.py` nightly.")
    mem(repo, "billing_notes.md", "Invoices were rendered by `src/removed_invoices.py` once.")
    filler(repo)
    result = cli("dream", "--json", repo / ".claude" / "memory")
    assert result.code in (0, 1), result.err
    report = json.loads(result.out)["dirs"][0]
    assert moved(report) == {"billing_notes.md": "stale"}
    assert {f["file"]: f["guard"] for f in report["flagged"]} == {"payment_flow.md": "consulted"}


def _record_store(repo: Path) -> Path:
    """A JSONL record store whose line 2 is nested 5000 deep, between two good records."""
    now = datetime.now(UTC)

    def row(rid: str, rule: str) -> str:
        return json.dumps({
            "id": rid, "scope": ["payments"], "rule": rule, "because": "the bank drops calls",
            "evidence": "PR 7", "createdAt": (now - timedelta(days=100)).isoformat(),
            "lastConfirmedAt": (now - timedelta(days=2)).isoformat(),
        })  # fmt: skip

    store = repo / ".agent" / "memory.jsonl"
    store.parent.mkdir()
    store.write_text("\n".join([row("r-pay", "Retry nightly payments twice"), NESTED,
                                row("r-refund", "Refund payments by hand")]) + "\n")  # fmt: skip
    return store


def test_a_nested_line_in_a_record_store_is_that_stores_problem(
    env: Env, cli: Callable[..., Result], tmp_path: Path
) -> None:
    """`search`, `recall` and `dirs` over two repos, one of whose `.agent/memory.jsonl` has a
    nested line: the other repo's memory and the store's good records are served; `dirs`
    names the line as that store's problem."""
    hostile = make_small_repo(tmp_path / "a")
    store = _record_store(hostile)
    calm = make_small_repo(tmp_path / "b")
    write_memory(calm / ".claude" / "memory", "payments.md", body="Nightly payments batch.\n")
    found = cli("search", "nightly payments", hostile, calm, "--json")
    assert found.code == 0, found.err
    names = {r["name"] for r in json.loads(found.out)["results"]}
    assert {"r-pay", "payments"} <= names
    recalled = cli("recall", hostile, calm, "--symbol", "x", "--scope", "payments", "--json")
    assert recalled.code == 0, recalled.err
    names = {r["name"] for r in json.loads(recalled.out)["results"]}
    assert {"r-pay", "r-refund"} <= names
    listed = cli("dirs", hostile, calm)
    assert listed.code in (0, 1), listed.err
    assert str(store) in listed.out
    assert "line 2: bad_json — not JSON (nested 5000 levels deep" in listed.out


@pytest.mark.timeout(120)
def test_the_mcp_tools_serve_past_a_nested_record_store_line(env: Env, tmp_path: Path) -> None:
    """search_memories and recall_for_paths answer (no error) with the store's good records,
    call after call, though the store has a nested line."""
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: install the test extra")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    repo = make_small_repo(tmp_path)
    _record_store(repo)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", str(repo)],
        env={
            "HOME": str(env.home),
            "XDG_CONFIG_HOME": str(env.home / ".config"),
            "XDG_STATE_HOME": str(env.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(env.home / ".cache"),
        },
    )
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_memories", {"query": "nightly payments"}),
        ("recall_for_paths", {"paths": [str(repo / "src" / "app.py")], "symbols": ["payments"]}),
        ("search_memories", {"query": "refund payments"}),
    ]

    async def drive() -> list[Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [await session.call_tool(name, args) for name, args in calls]

    answers = asyncio.run(drive())
    names = []
    for answer in answers:
        assert not answer.is_error, answer.content
        data = answer.structured_content or json.loads(answer.content[0].text)
        names.append([r["name"] for r in data.get("result", data)["results"]])
    assert names[0][0] == "r-pay" and "r-pay" in names[1] and names[2][0] == "r-refund"


# memoryd's own state files (under the state dir), each with a nested line: a base file
# replaced whole, a log or JSONL appended to (the dir's files, the clock file and the version
# log are an older memoryd's, taken into state.sqlite at the next start: the nested line is
# skipped there; restore pins and refused links that do not parse are left, and named).
OWN_STATE = {
    "dirs/{key}.json": "replace",
    "dirs/{key}.0.log": "append",
    "dirs/{key}.trash-days.json": "replace",
    "dirs/{key}.restored": "replace",
    "refused-links.json": "replace",
    "status.json": "replace",
    "trash-clock.json": "replace",
    "transcript-cwds.json": "replace",
    "consults/transcripts.json": "replace",
    "log/audit.jsonl": "append",
    "versions/logs/{key}.jsonl": "append",
}


@pytest.mark.timeout(180)
def test_nested_json_in_memoryds_own_state_is_done_without_and_rebuilt(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """Every JSON state file memoryd keeps, damaged with a nested line: the daemon starts and
    indexes a new memory; `index`, `status`, `dream`, `log` and `dirs` run; the dir's state
    is said once on stderr as damaged (the old layout's base file, met at the import) and the
    dir's state in the state store stays."""
    from memoryd.storage.state import dir_key

    running = start(tmp_path)
    folder = project(running, "app")
    (folder / "first.md").write_text("---\nname: first\ndescription: d\ntype: project\n---\nx\n")
    wait_for(lambda: (folder / "MEMORY.md").exists(), what="the first index")
    assert running.cli("dream").returncode in (0, 1)
    assert running.stop() == 0
    key = dir_key(folder.resolve())
    for name, how in OWN_STATE.items():
        path = running.state / name.format(key=key)
        path.parent.mkdir(parents=True, exist_ok=True)  # (each is there after a pass and a dream)
        if how == "replace":
            path.write_text(NESTED)
        else:
            with path.open("a") as log:
                log.write(NESTED + "\n")
    running = start(tmp_path)
    try:
        write_memory(folder, "second.md")
        wait_for(lambda: "second.md" in (folder / "MEMORY.md").read_text(), what="indexed")
        for args in (["index"], ["status"], ["dream"], ["log"], ["dirs"]):
            result = running.cli(*args)
            assert result.returncode in (0, 1), (args, result.stderr)
        assert state_rows(running.state, "SELECT path FROM dirstate WHERE dir = ?", key) == [
            (str(folder.resolve()),)
        ]
        seen = "SELECT name FROM dirstate_seen WHERE dir = ? AND name = 'second.md'"
        assert state_rows(running.state, seen, key)
        assert not (running.state / "dirs" / f"{key}.json").exists()  # imported or said
        assert running.proc.poll() is None
    finally:
        assert running.stop() == 0
    said = (tmp_path / "daemon-d.log").read_text()
    assert f"{key}.json" in said and "rebuilds it" in said


@pytest.mark.parametrize(
    "value",
    ["[" * 5000 + "]" * 5000, "{a = " * 400 + "1" + "}" * 400],
    ids=["arrays", "inline-tables"],
)
def test_a_nested_config_is_a_config_error_naming_the_file(
    env: Env, cli: Callable[..., Result], tmp_path: Path, value: str
) -> None:
    """`config check` exits 2 naming the file and the nesting (it crashed with a traceback)."""
    config = tmp_path / "config.toml"
    config.write_text(f"[index]\nx = {value}\n")
    result = cli("--config", config, "config", "check")
    assert result.code == 2
    assert str(config) in result.err and "nested" in result.err
