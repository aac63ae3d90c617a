"""Hostile inputs at the size limits: every parser is linear, and a dream pass has a time budget.

The timeouts are generous bounds, not timings: the quadratic code each test replaced takes
minutes to hours on the same input (figures in each docstring), the linear code well under a
second.
"""

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rapidfuzz import process

from memoryd.config import Config, DreamConfig, build_config
from memoryd.discover.found import MemoryDir
from memoryd.dream.budget import PassBudget
from memoryd.dream.consult import ConsultLog, Subject
from memoryd.dream.refs import extract_refs
from memoryd.dream.repocache import RepoCache
from memoryd.dream.run import dream_dir
from memoryd.errors import ConfigError
from memoryd.model.memfile import MAX_FILE_BYTES, MAX_FRONTMATTER_BYTES, Memory, parse_memory
from tests.conftest import Env, tree_digest, write_memory
from tests.helpers import make_small_repo, memory_dir


def _body_of(unit: str, suffix: str, size: int = MAX_FILE_BYTES - 200) -> str:
    return unit * (size // len(unit)) + suffix


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("unit", "suffix"),
    [
        (":1", "a"),  # `x.md:1:1:…:1a`: the `:line` suffix regex, from every `:` (1 MiB ~1.7 h)
        (":1", ".md"),
        ("x.md#", "/"),  # `#anchor` with a `/` at the very end, from every `#`
        ("#a", "/"),
    ],
)
def test_references_of_a_memory_at_the_size_limit_are_found_in_linear_time(
    unit: str, suffix: str
) -> None:
    """A 1 MiB body of one hostile run, bare and in backticks, is read in well under the bound
    (the old suffix regex took minutes on 200 KB)."""
    body = "x.md" + _body_of(unit, suffix)
    for text in (body, f"`{body}`"):
        refs = extract_refs(text)
        assert len(refs.paths) <= 1


def test_line_suffixes_are_still_stripped() -> None:
    """`:12`, `:12-30`, `:12:5`, `#L12`, `#anchor` go; a `#` before a `/` or a bare `:` stays."""
    body = (
        "see src/a.py:12 and src/b.py:12-30 and src/c.py:3:5 and docs/d.md#L12 and "
        "docs/e.md#setup and lib#x/f.py and g/h.py:12a and j.py:"
    )
    assert extract_refs(body).paths == (
        "src/a.py", "src/b.py", "src/c.py", "docs/d.md", "docs/e.md", "lib#x/f.py", "j.py",
    )  # fmt: skip


def _frontmatter_file(value_line: str) -> bytes:
    return f"---\nname: n\ntype: project\n{value_line}\n---\nbody\n".encode()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "line",
    [
        # Not YAML (a second `: ` on the line): the lenient reader's value regex rescanned the
        # trailing blanks from every blank (0.7 s a file; 60 files: 56 s to index).
        "description: a" + " " * 15000 + "b: c",
        "description: a: b" + " " * 15000 + "c",
        "description: `a" + " " * 15000 + "c: d",
        # YAML, with ` #` in a plain value: the `#`-keeping regex did the same.
        "description: a #" + " " * 15000 + "c",
    ],
)
def test_frontmatter_at_its_size_limit_parses_in_linear_time(line: str) -> None:
    """600 files of 15 KB frontmatter with a long run of blanks parse in well under the bound
    (old: 0.7 s a file, 7 minutes)."""
    data = _frontmatter_file(line)
    assert len(data) < MAX_FRONTMATTER_BYTES
    for _ in range(600):
        parsed = parse_memory("m.md", data)
    assert parsed.filename == "m.md"


def test_the_lenient_and_hash_readers_keep_their_values() -> None:
    """What the regexes returned, the string code returns: blanks around a value dropped."""
    lenient = parse_memory("m.md", _frontmatter_file("description: avoid `: object`  "))
    hashed = parse_memory("m.md", _frontmatter_file("description: fix #2041 dedup \t"))
    assert isinstance(lenient, Memory) and lenient.description == "avoid `: object`"
    assert isinstance(hashed, Memory) and hashed.description == "fix #2041 dedup"


@pytest.mark.timeout(20)
def test_indexing_sixty_files_of_invalid_frontmatter_is_linear(
    env: Env, cli, tmp_path: Path
) -> None:
    """The issue's case end to end: `index` over 60 such files (old: 56 s) stays well inside."""
    folder = tmp_path / "mem"
    folder.mkdir()
    data = _frontmatter_file("description: a" + " " * 15000 + "b: c")
    for i in range(60):
        (folder / f"m{i:02}.md").write_bytes(data)
    result = cli("index", folder)
    assert result.code == 0, result.err


def _write_log(repo: Path, rows: list[dict[str, Any]]) -> None:
    logs = repo / ".claude" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "memory-consult.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_a_4mb_consult_log_is_matched_once_not_per_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 memories against a 4 MB log of distinct names and queries: the fuzzy matcher is
    called a bounded number of times per memory (old: once per memory per name of every row,
    1.5 million calls, 8 s), and the verdicts hold."""
    now = time.time()
    rows: list[dict[str, Any]] = []
    size = i = 0
    while size < 4_000_000:
        row = {"ts": now, "names": [f"note_{i}", "other_thing"], "query": f"how does topic{i} work"}
        rows.append(row)
        size += len(json.dumps(row)) + 1
        i += 1
    rows.append({"ts": now, "names": ["Deploy_Flw"]})  # fuzzy, by name
    rows.append({"ts": now, "query": "refunds handlingg"})  # fuzzy, by query word
    rows.append({"ts": now - 30 * 86400, "names": ["payment_flow"]})  # outside the window
    _write_log(tmp_path, rows)
    calls = 0
    real = process.extractOne

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(process, "extractOne", counting)  # the module consult calls it through
    log = ConsultLog.load(tmp_path)
    assert log is not None
    since = now - 14 * 86400
    subjects = [Subject(f"project_thing_{k}.md", f"thing {k}") for k in range(17)]
    subjects += [Subject("deploy_flow.md", ""), Subject("refund_handling.md", "")]
    subjects += [Subject("payment_flow.md", "payment flow")]
    found = {s.filename: log.evidence(s, since) for s in subjects}
    assert found["deploy_flow.md"] == "named in memory-consult.jsonl: deploy_flw"
    assert found["refund_handling.md"] == "query word 'handlingg' in memory-consult.jsonl"
    assert found["payment_flow.md"] is None
    assert sum(v is not None for v in found.values()) == 2
    assert calls < 20 * 40, calls


def _dupes_dir(repo: Path) -> MemoryDir:
    folder = repo / ".claude" / "memory"
    body = "the deploy pipeline runs staging checks before production release every night\n"
    for k in range(5):
        write_memory(folder, f"dup_{k}.md", body=body, age_days=40 + k)
    for k in range(10):
        write_memory(folder, f"own_{k}.md", body=f"topic {k} alpha{k} beta{k} gamma{k}\n")
    (folder / "MEMORY.md").write_text("<!-- memoryd: manage -->\n# Memory\n")
    md = memory_dir(folder)
    return replace(md, repo_root=None, repo_reason="test")


class StepClock:
    """A fake monotonic clock: every reading is `step` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(
    ("dream_config", "step", "key"),
    [
        (DreamConfig(breaker_min=10, pass_budget=30.0), 1.0, "dream.pass_budget"),
        (DreamConfig(breaker_min=10, file_budget=2.0), 3.0, "dream.file_budget"),
    ],
)
def test_a_pass_over_its_time_budget_stops_and_moves_nothing(
    env: Env, tmp_path: Path, dream_config: DreamConfig, step: float, key: str
) -> None:
    """Past the pass or the file budget (a planted overrun on a fake clock), the pass fails,
    says which budget ran out in its result and its dream.failed row, and moves nothing."""
    md = _dupes_dir(tmp_path / "repo")
    rt = env.runtime(Config(dream=dream_config))
    index_first = dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)
    assert index_first.plan is not None and len(index_first.plan.moves) == 4  # would move
    before = tree_digest(md.real_path)
    result = dream_dir(
        rt, md, repos=RepoCache.of(rt), budget=PassBudget.of(rt, clock=StepClock(step))
    )
    assert result.status == "failed"
    assert key in result.message and "moved nothing" in result.message
    assert result.moved == []
    assert tree_digest(md.real_path) == before
    failed = [r for r in env.audit_rows() if r["event"] == "dream.failed"]
    assert len(failed) == 1 and key in str(failed[0]["error"])
    assert not [r for r in env.audit_rows() if r["event"] == "trash.moved"]
    # Within budget, the same pass moves the duplicates.
    done = dream_dir(
        rt, md, repos=RepoCache.of(rt), budget=PassBudget.of(rt, clock=StepClock(0.001))
    )
    assert done.status == "completed" and len(done.moved) == 4


def test_a_pass_asked_to_stop_stops_before_its_moves(env: Env, tmp_path: Path) -> None:
    """The daemon's stop flag (SIGTERM) is consulted between steps: the pass moves nothing."""
    md = _dupes_dir(tmp_path / "repo")
    rt = env.runtime(Config(dream=DreamConfig(breaker_min=10)))
    before = tree_digest(md.real_path)
    asked = iter([False, False, True])  # set while the pass is reading files
    result = dream_dir(
        rt, md, repos=RepoCache.of(rt), budget=PassBudget.of(rt, stop=lambda: next(asked, True))
    )
    assert result.status == "failed" and "stopping" in result.message
    assert result.moved == [] and tree_digest(md.real_path) == before


@pytest.mark.parametrize("key", ["file_budget", "pass_budget"])
@pytest.mark.parametrize("value", ["0s", "soon", 5])
def test_budgets_are_validated_like_other_durations(key: str, value: object) -> None:
    """A budget is a duration longer than zero; anything else is a config problem by its key."""
    with pytest.raises(ConfigError) as raised:
        build_config({"dream": {key: value}}, "test.toml")
    assert f"dream.{key}" in str(raised.value)
    assert build_config({"dream": {key: "90s"}}, "t").dream.__getattribute__(key) == 90.0


@pytest.mark.timeout(30)
def test_explain_on_one_path_at_the_size_limit_is_linear(env: Env, cli, repo: Path) -> None:
    """`explain` on a 1 MiB memory whose body is one backticked `a/a/a/…` path: asking whether
    it lies in a memory dir hashed every prefix of it (25 KiB 0.7 s, 200 KiB 29 s, 1 MiB more
    than 150 s); the bound is far below that, and the path is still reported."""
    folder = repo / ".claude" / "agent-memory" / "a"
    path = "a/" * ((MAX_FILE_BYTES - 200) // 2)
    file = write_memory(folder, "big.md", body=f"`{path}`\n")
    assert file.stat().st_size <= MAX_FILE_BYTES
    result = cli("explain", "--json", file)
    assert result.code == 0, result.err
    [ref] = json.loads(result.out)["refs"]
    assert ref["kind"] == "path" and ref["ref"] == path


@pytest.mark.timeout(30)
def test_a_path_at_the_size_limit_is_placed_in_linear_time(tmp_path: Path) -> None:
    """`under_opaque` and `in_memory_dir` on a 1 MiB path: only prefixes as long as the
    longest folder are looked up (old: every prefix, minutes a call), with the same answers
    as before at both ends."""
    from memoryd.dream.repo import RepoIndex

    root = make_small_repo(tmp_path)
    (root / "node_modules" / "a").mkdir(parents=True)
    index = RepoIndex.build(root)
    assert "node_modules" in index.opaque and ".claude/memory" in index.memory_dirs
    deep = "a/" * (MAX_FILE_BYTES // 2)
    assert not index.under_opaque(deep) and not index.in_memory_dir(deep)
    assert index.under_opaque("node_modules/" + deep)
    assert index.in_memory_dir(".claude/memory/" + deep)
    assert index.in_memory_dir(".claude/memory") and not index.under_opaque("node_modules")
    assert not index.in_memory_dir(".claude/memoryX/a")
    assert not index.under_opaque("node_modulesX/a")
