"""`memoryd ack FILE`: a flag a person saw is not listed again until the memory's bytes or its
references' status change (issue 16). The record is memoryd's, never in the file."""

import json
import os
import stat
import time
from pathlib import Path

import pytest

from tests.conftest import Env, tree_digest
from tests.helpers import make_half_stale_repo, state_rows

pytestmark = pytest.mark.repo_tree.with_args(make_half_stale_repo)

DAY = 86400


def _mem(path: Path, body: str, age: float = 40) -> None:
    path.write_text(f"---\nname: {path.stem}\ndescription: d\ntype: project\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))


def _flag_lines(cli, folder: Path) -> list[str]:
    result = cli("dream", folder)
    assert result.code == 0, result.err
    return [line.strip() for line in result.out.splitlines() if line.strip().startswith("half.md:")]


def test_an_acknowledged_flag_is_not_listed_until_the_memory_changes(
    env: Env, cli, repo: Path
) -> None:
    folder = repo / ".claude" / "memory"
    half = folder / "half.md"
    assert _flag_lines(cli, folder) == [
        "half.md: partially stale, missing: src/removed.py, src/later.py"
    ]
    before = tree_digest(folder)
    done = cli("ack", half)
    assert done.code == 0, done.err
    assert f"acknowledged {half}" in done.out
    assert tree_digest(folder) == before  # the file, its mtime, the dir: untouched
    [(record,)] = state_rows(env.state, "SELECT file FROM acked")
    assert record == "half.md"
    assert stat.S_IMODE((env.state / "state.sqlite").stat().st_mode) == 0o600
    [row] = [r for r in env.audit_rows() if r["event"] == "flag.acknowledged"]
    assert row["file"] == "half.md" and row["dir"] == str(folder)

    result = cli("dream", folder)
    assert "half.md:" not in result.out
    assert "1 flagged memory acknowledged already, not listed" in result.out
    report = json.loads(cli("dream", "--json", folder).out)["dirs"][0]
    assert report["flagged"] == [] and report["counts"]["flagged"] == 0
    [flag] = report["acknowledged"]
    assert flag["file"] == "half.md" and flag["classification"] == "partially_stale"
    [listed] = json.loads(cli("dirs", "--json", folder).out)["dirs"]
    assert listed["flagged"] == 0  # the last pass's flags, less those acknowledged
    explained = cli("explain", half).out
    assert "acknowledged: acknowledged by a person on " in explained
    assert "not listed for review again until" in explained

    # Its references' status changes (one of its paths exists again): listed again.
    (repo / "src" / "later.py").write_text("x = 1\n")
    assert _flag_lines(cli, folder) == ["half.md: partially stale, missing: src/removed.py"]
    assert "but it changed since" in cli("explain", half).out
    assert cli("ack", half).code == 0
    assert _flag_lines(cli, folder) == []

    # Its bytes change: listed again.
    _mem(half, "See `src/app.py` and `src/removed.py`, edited.")
    assert _flag_lines(cli, folder) == ["half.md: partially stale, missing: src/removed.py"]


def test_a_dry_run_lists_for_review_exactly_what_its_pass_would(env: Env, cli, repo: Path) -> None:
    """An acknowledged flag is listed neither by a dry run's text nor by its JSON; the other
    flag still is, in both, and the counts agree with the real pass's."""
    folder = repo / ".claude" / "memory"
    _mem(folder / "other.md", "See `src/app.py` and `src/dropped.py`.")
    assert cli("ack", folder / "half.md").code == 0
    before = tree_digest(folder)
    text = cli("dream", "--dry-run", folder).out
    assert "half.md:" not in text and "other.md: partially stale" in text
    assert "1 flagged memory acknowledged already, not listed" in text
    dry = json.loads(cli("dream", "--dry-run", "--json", folder).out)
    [report] = dry["dirs"]
    assert [f["file"] for f in report["flagged"]] == ["other.md"]
    assert [f["file"] for f in report["acknowledged"]] == ["half.md"]
    assert tree_digest(folder) == before
    real = json.loads(cli("dream", "--json", folder).out)
    assert real["dirs"][0]["flagged"] == report["flagged"]
    assert real["dirs"][0]["counts"] == report["counts"]
    assert dry["totals"]["flagged"] == real["totals"]["flagged"] == 1


def test_only_a_flagged_memory_can_be_acknowledged(env: Env, cli, repo: Path) -> None:
    folder = repo / ".claude" / "memory"
    result = cli("ack", folder / "filler_0.md")
    assert result.code == 1 and "not flagged for review; nothing to acknowledge" in result.out
    assert not state_rows(env.state, "SELECT file FROM acked")
    missing = cli("ack", folder / "nope.md")
    assert missing.code == 1 and "nope.md" in missing.err
    assert not [r for r in env.audit_rows() if r["event"] == "flag.acknowledged"]


def test_the_pass_explain_and_ack_plan_with_one_read(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dream`, `dream explain` and `ack` each plan the dir once, through the one read and
    plan a pass makes (dream.read.read_and_plan): what explain and ack say of a flag is what
    the pass decides, not a second reading of their own."""
    from memoryd.dream import read

    planned: list[str] = []
    real = read.plan_pass  # type: ignore[attr-defined]  # patched where the read calls it

    def counted(*args, **kwargs):
        planned.append("plan")
        return real(*args, **kwargs)

    monkeypatch.setattr(read, "plan_pass", counted)
    folder = repo / ".claude" / "memory"
    half = folder / "half.md"
    for args in (("dream", "--dry-run", folder), ("explain", half), ("ack", half)):
        planned.clear()
        result = cli(*args)
        assert result.code == 0, result.err
        assert planned == ["plan"], args
