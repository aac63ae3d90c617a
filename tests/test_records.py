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

from memoryd.discipline import records
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


def _alike_store(n: int, seed: int) -> list[dict[str, Any]]:
    """Records as an agent writes them: a few common words (Zipf), a few of their own, a
    scope of one or two of eight entries; every 50th a near copy of the one before it, in a
    scope that shares an entry with its."""
    import random

    rng = random.Random(seed)
    common = [f"common{i}" for i in range(2000)]
    weights = [1 / (i + 1) for i in range(2000)]
    rows, last, last_scope = [], ["x"], ["s0"]
    for i in range(n):
        words = rng.choices(common, weights, k=rng.randint(3, 6))
        words += [f"ident{rng.randrange(50 * n)}" for _ in range(rng.randint(4, 10))]
        scope = rng.sample([f"s{j}" for j in range(8)], rng.randint(1, 2))
        if i % 50 == 1:
            words, scope = [*last[:-1], "extra"], [*last_scope, "more"]
        last, last_scope = words, scope
        cut = len(words) * 2 // 3
        rows.append(rec(f"r{i}", rule=" ".join(words[:cut]), because=" ".join(words[cut:]),
                        scope=scope))  # fmt: skip
    return rows


def _every_pair(store: records.Store, threshold: float) -> list[tuple[str, str, float]]:
    """The duplicates by the rule's letter: every pair of active records, one by one."""
    from memoryd.dream.similar import significant_words
    from tests.helpers import overlap

    live = records.active(store, None, NOW.timestamp())
    words = [sorted(significant_words(f"{r.rule} {r.because}")) for r in live]
    ids = {w: n for n, w in enumerate(sorted({w for ws in words for w in ws}))}
    rows = [[ids[w] for w in ws] for ws in words]
    out = []
    for i, a in enumerate(live):
        for j in range(i + 1, len(live)):
            score = overlap(rows[i], rows[j])
            if rows[i] and score >= threshold and set(a.scope) & set(live[j].scope):
                out.append((a.id, live[j].id, score))
    return sorted(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_duplicates_are_every_pair_the_rule_names_and_no_other(seed: int) -> None:
    """The duplicate search equals checking every pair (exact copies found once per copy
    against the first, as the rule says), on stores with near copies and shared scopes."""
    store = records.parse(store_bytes(*_alike_store(1_000, seed)))
    found = records.duplicates(store, NOW.timestamp(), 0.6)
    pairs = {(d.a.id, d.b.id): d.overlap for d in found}
    expected = _every_pair(store, 0.6)
    assert len(expected) >= 20
    # Identical word sets pair with their group's first only: every other expected pair is
    # found with its exact overlap.
    assert {p for p in pairs if pairs[p] < 1.0} == {(a, b) for a, b, s in expected if s < 1.0}
    for a, b, score in expected:
        if (a, b) in pairs:
            assert pairs[(a, b)] == score


def test_the_duplicate_search_checks_about_one_candidate_per_record() -> None:
    """20,000 records, few alike: the search checks at most one candidate pair a record, not
    every pair (200 million), and the work grows with the store, not with its square."""
    from memoryd.dream.prefix_pairs import pairs_sharing_a_key
    from memoryd.dream.similar import Vocabulary, significant_words

    def work(n: int) -> int:
        store = records.parse(store_bytes(*_alike_store(n, 7)))
        vocabulary = Vocabulary()
        docs = [
            (r.scope, vocabulary.ids(significant_words(f"{r.rule} {r.because}")))
            for r in store.records
        ]
        return pairs_sharing_a_key(docs, 0.6).checked

    small, large = work(5_000), work(20_000)
    assert large <= 20_000
    assert large <= 8 * small  # 4x the records: 16x the work were it quadratic
