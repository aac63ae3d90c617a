"""JSONL record stores: every line validated with its number, the recall semantics exactly
(supersession, scope, the 90-day boundary on a fake clock), findings in `dirs` and `explain`,
and the store never written."""

import hashlib
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd import records
from tests.conftest import Env, Result, write_memory

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = 86400.0


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def rec(rid: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": rid,
        "scope": ["api"],
        "rule": f"rule {rid} about the {rid} module",
        "because": f"because {rid} broke once",
        "evidence": f"PR {rid}",
        "createdAt": _iso(NOW - timedelta(days=200)),
        "lastConfirmedAt": _iso(NOW - timedelta(days=1)),
    }
    row.update(over)
    return row


def store_bytes(*rows: dict[str, Any] | str) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()


def test_every_malformed_line_is_a_problem_with_its_line_number() -> None:
    """Bad JSON, a non-object, missing and mistyped fields, a duplicate id, an unknown
    supersededBy and an over-long line are each reported at their line; blank lines are no
    records; the valid records are kept."""
    data = store_bytes(
        rec("a"),
        "{not json",
        "[1, 2]",
        "",
        {"id": "b", "rule": "x"},
        rec("c", scope="api", lastConfirmedAt="last tuesday"),
        rec("a"),
        rec("d", supersededBy="nobody"),
        json.dumps(rec("e", evidence="x" * 500)),
    )
    store = records.parse(data, max_line=400)
    assert [r.id for r in store.records] == ["a", "d"]
    got = [(p.line, p.kind) for p in store.problems]
    assert got == [
        (2, "bad_json"),
        (3, "not_object"),
        (5, "missing_fields"),
        (6, "bad_field"),
        (7, "duplicate_id"),
        (8, "unknown_superseded_by"),
        (9, "too_long"),
    ]
    messages = {p.line: p.message for p in store.problems}
    assert "scope" in messages[5] and "because" in messages[5]
    assert "scope is not a list" in messages[6] and "lastConfirmedAt" in messages[6]
    assert "line 1" in messages[7]
    # A broken link supersedes nothing: d stays active.
    assert [r.id for r in records.active(store, None, NOW.timestamp())] == ["a", "d"]


def test_a_cycle_is_reported_and_supersedes_nothing() -> None:
    """a -> b -> c -> a is one cycle problem (at its first line), a self-link another; records
    in a cycle count as not superseded, and one leading into the cycle is superseded."""
    data = store_bytes(
        rec("a", supersededBy="b"),
        rec("b", supersededBy="c"),
        rec("c", supersededBy="a"),
        rec("s", supersededBy="s"),
        rec("x", supersededBy="a"),
    )
    store = records.parse(data)
    cycles = [p for p in store.problems if p.kind == "cycle"]
    assert [p.line for p in cycles] == [1, 4]
    assert "a -> b -> c -> a" in cycles[0].message and "lines 1, 2, 3" in cycles[0].message
    assert store.superseded == {"x": "a"}
    assert [r.id for r in records.active(store, None, NOW.timestamp())] == ["a", "b", "c", "s"]


def test_active_is_not_superseded_shares_a_scope_entry_and_is_confirmed_within_90_days() -> None:
    """The recall semantics, on a fake clock: 90 days exactly is still confirmed, a second
    more is not; scope entries compare exactly; superseded records never come back."""
    boundary = NOW - timedelta(days=90)
    data = store_bytes(
        rec("edge", lastConfirmedAt=_iso(boundary)),
        rec("late", lastConfirmedAt=_iso(boundary - timedelta(seconds=1))),
        rec("old", scope=["api", "db"], supersededBy="new"),
        rec("new", scope=["db"]),
        rec("ui", scope=["UI"]),
        rec("naive", lastConfirmedAt=boundary.replace(tzinfo=None).isoformat()),  # UTC
    )
    store = records.parse(data)
    now = NOW.timestamp()
    assert store.problems == []
    assert [r.id for r in records.active(store, None, now)] == ["edge", "new", "ui", "naive"]
    assert [r.id for r in records.active(store, ["api"], now)] == ["edge", "naive"]
    assert [r.id for r in records.active(store, ["db", "web"], now)] == ["new"]
    assert [r.id for r in records.active(store, ["ui"], now)] == []  # exact, case and all
    assert records.active(store, [], now) == []
    # One second later the boundary record is unconfirmed too.
    assert "edge" not in [r.id for r in records.active(store, None, now + 1)]
    report = records.report(store, now, 0.6)
    assert [r.id for r in report.unconfirmed] == ["late"]


def test_chains_are_transitive_and_duplicates_use_the_dream_overlap_rule() -> None:
    """c supersedes b supersedes a: one chain headed by c, nearest first. Two active records
    saying the same in a shared scope are duplicates; the same words in disjoint scopes, or a
    superseded one, are not."""
    same = {"rule": "always run pnpm install before the build step", "because": "lockfile drift"}
    data = store_bytes(
        rec("a", supersededBy="b"),
        rec("b", supersededBy="c"),
        rec("c"),
        rec("d1", **same),
        rec("d2", **same, scope=["api", "ci"]),
        rec("d3", **same, scope=["ops"]),
        rec("d4", **same, supersededBy="d1"),
    )
    store = records.parse(data)
    chains = records.chains(store)
    assert [(c.head.id, [r.id for r in c.superseded]) for c in chains] == [
        ("c", ["b", "a"]),
        ("d1", ["d4"]),
    ]
    dups = records.duplicates(store, NOW.timestamp(), 0.6)
    assert [(d.a.id, d.b.id, d.overlap) for d in dups] == [("d1", "d2", 1.0)]


@pytest.mark.timeout(60)
def test_parsing_and_chains_are_linear_at_the_size_limit() -> None:
    """A store at the 16 MiB limit that is one supersession chain (and a cycle as long) parses
    and resolves in seconds; a walk per record (quadratic) would take hours (the timeout)."""
    n = 30_000
    rows = [rec(f"r{i}", supersededBy=f"r{i + 1}") for i in range(n)]
    rows.append(rec(f"r{n}"))
    rows += [rec(f"c{i}", supersededBy=f"c{(i + 1) % n}") for i in range(n)]
    data = store_bytes(*rows)
    assert len(data) < records.MAX_STORE_BYTES
    store = records.parse(data)
    assert [p.kind for p in store.problems] == ["cycle"]
    (chain,) = records.chains(store)
    assert chain.head.id == f"r{n}" and len(chain.superseded) == n
    assert chain.superseded[0].id == f"r{n - 1}" and chain.superseded[-1].id == "r0"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def planted_store(repo: Path) -> Path:
    now = datetime.now(UTC)
    path = repo / ".agent" / "memory.jsonl"
    path.parent.mkdir()
    path.write_bytes(
        store_bytes(
            rec("fresh", lastConfirmedAt=_iso(now - timedelta(days=10))),
            rec("stale", lastConfirmedAt=_iso(now - timedelta(days=120))),
            "{broken",
            rec("x", supersededBy="y"),
            rec("y", supersededBy="x"),
            rec("old", supersededBy="fresh", lastConfirmedAt=_iso(now)),
        )
    )
    return path


def test_dirs_and_explain_report_a_repos_store_and_never_write_it(
    env: Env, repo: Path, planted_store: Path, cli: Callable[..., Result]
) -> None:
    """`dirs` finds the repo's `.agent/memory.jsonl`; `dirs`, `explain STORE` (text and
    JSON) report each problem at its line, the unconfirmed record and the chain; the store's
    bytes are the same after every command, index and dream included."""
    before = _sha(planted_store)
    out = cli("dirs", repo)
    assert out.code == 0, out.err
    assert str(planted_store) in out.out
    assert "line 3: bad_json" in out.out
    assert "line 4: cycle" in out.out
    assert "line 2: 'stale' unconfirmed for over 90 days" in out.out
    assert "line 1: 'fresh' supersedes 'old' (line 6)" in out.out
    explained = cli("explain", planted_store)
    assert explained.code == 0, explained.err
    assert "line 3: bad_json" in explained.out
    doc = json.loads(cli("explain", planted_store, "--json").out)
    assert [p["line"] for p in doc["problems"]] == [3, 4]
    assert [r["id"] for r in doc["unconfirmed"]] == ["stale"]
    doc = json.loads(cli("dirs", repo, "--json").out)
    (row,) = doc["record_stores"]
    assert row["records"] == 5 and row["active"] == 3  # fresh, x, y
    memory = write_memory(repo / ".claude" / "memory", "project_rule.md", body="Use pnpm.\n")
    files = [planted_store, memory]
    digests = [_sha(p) for p in files]
    commands = [
        ("dirs", repo),
        ("dirs", repo, "--secrets", "--json"),
        ("dirs", planted_store),
        ("explain", planted_store),
        ("explain", memory),
        ("history", memory),
        ("forget", "pnpm", repo, "--dry-run"),
        ("forget", "pnpm", repo),  # no terminal, no --yes: nothing happens
        ("index", repo),
        ("index", repo, "--check"),
        ("dream", repo, "--dry-run"),
        ("dream", repo),
        ("trash", "list", repo),
        ("status",),
        ("log",),
    ]
    for args in commands:
        cli(*args)
        assert [_sha(p) for p in files] == digests, args
    assert _sha(planted_store) == before


def test_a_store_over_the_limit_is_read_to_its_last_whole_line_and_said_so(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """Past 16 MiB nothing is read; the cut is a finding, no record is read in half."""
    line = json.dumps(rec("r", evidence="e" * 1000)) + "\n"
    count = records.MAX_STORE_BYTES // len(line) + 5
    path = repo / ".agent" / "memory.jsonl"
    path.parent.mkdir()
    lines = [line.replace('"r"', f'"r{i}"', 1) for i in range(count)]
    path.write_text("".join(lines))
    whole = sum(
        1 for end in itertools.accumulate(map(len, lines)) if end <= records.MAX_STORE_BYTES
    )
    doc = json.loads(cli("explain", path, "--json").out)
    assert doc["records"] == whole
    assert len(doc["duplicates"]) == whole - 1  # copies: each paired with the first only
    assert [p["kind"] for p in doc["problems"]] == ["cut"]


def test_configured_stores_are_read_and_a_folder_there_is_a_config_error(
    env: Env, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """`paths.record_stores` names stores anywhere; naming a folder is an error of that key."""
    store = tmp_path / "notes" / "rules.jsonl"
    store.parent.mkdir()
    store.write_bytes(store_bytes(rec("a"), "nope"))
    env.config_dir.mkdir(parents=True)
    (env.config_dir / "config.toml").write_text(f"[paths]\nrecord_stores = [{str(store)!r}]\n")
    out = cli("dirs")
    assert out.code == 0, out.err
    assert f"{store}\n  kind: record store (paths.record_stores)" in out.out
    assert "line 2: bad_json" in out.out
    (env.config_dir / "config.toml").write_text(f"[paths]\nrecord_stores = [{str(tmp_path)!r}]\n")
    bad = cli("config", "check")
    assert bad.code == 2 and "paths.record_stores" in bad.err and "a folder" in bad.err


def test_a_store_that_is_a_fifo_is_never_opened(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """A FIFO at `.agent/memory.jsonl` is said to be no regular file; nothing waits on it."""
    import os

    (repo / ".agent").mkdir()
    os.mkfifo(repo / ".agent" / "memory.jsonl")
    out = cli("dirs", repo)
    assert out.code == 0
    assert "not read: it is a FIFO" in out.out
