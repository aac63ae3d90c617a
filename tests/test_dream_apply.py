"""A plan the circuit breaker refused can be applied after review (issue 16):
`memoryd dream DIR --apply PASS_ID` moves exactly its files, and only while each still holds
the bytes it was planned from."""

import json
import os
import stat
import time
from pathlib import Path

import pytest

from tests.conftest import Env, tree_digest
from tests.helpers import state_rows

DAY = 86400


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    memory = root / ".claude" / "memory"
    memory.mkdir(parents=True)
    for i in range(5):
        _mem(memory / f"stale_{i}.md", f"Lived in `src/removed_{i}.py`, topic {i}.")
    _mem(memory / "keep.md", "Nothing to check here.")
    return memory


def _mem(path: Path, body: str, age: float = 40) -> None:
    path.write_text(f"---\nname: {path.stem}\ndescription: d\ntype: project\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))


def _refuse(env: Env, cli, folder: Path) -> str:
    report = cli("dream", "--json", folder)
    assert report.code == 1, report.err
    [result] = json.loads(report.out)["dirs"]
    assert result["status"] == "refused"
    pass_id = str(result["pass_id"])
    [row] = [r for r in env.audit_rows() if r["event"] == "dream.refused"]
    assert row["pass_id"] == pass_id
    return pass_id


def test_a_refused_plan_is_applied_after_review(env: Env, cli, folder: Path) -> None:
    text = cli("dream", folder)
    assert text.code == 1
    pass_id = text.out.split("--apply ")[1].split("`")[0]
    [row] = [r for r in env.audit_rows() if r["event"] == "dream.refused"]
    assert row["pass_id"] == pass_id
    stored = "SELECT dir FROM refused_plan WHERE pass_id = ?"
    assert len(state_rows(env.state, stored, pass_id)) == 1
    assert stat.S_IMODE((env.state / "state.sqlite").stat().st_mode) == 0o600
    assert "stale_0.md" in (folder / "MEMORY.md").read_text()

    applied = cli("dream", folder, "--apply", pass_id)
    assert applied.code == 0, applied.out + applied.err
    assert "Changes made:" in applied.out and "done, 5 moved to the trash" in applied.out
    assert sorted(p.name for p in folder.glob("*.md") if p.name != "MEMORY.md") == ["keep.md"]
    index = (folder / "MEMORY.md").read_text()
    assert "stale_" not in index and "keep.md" in index
    moved = [r for r in env.audit_rows() if r["event"] == "trash.moved"]
    assert sorted(str(r["file"]) for r in moved) == [f"stale_{i}.md" for i in range(5)]
    listed = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert len(listed) == 5
    assert not state_rows(env.state, stored, pass_id)
    again = cli("dream", folder, "--apply", pass_id)
    assert again.code == 1 and f"no refused plan {pass_id}" in again.err


def test_a_plan_whose_files_changed_is_not_applied(env: Env, cli, folder: Path) -> None:
    pass_id = _refuse(env, cli, folder)
    _mem(folder / "stale_2.md", "Lived in `src/removed_2.py`, and a person edited this.")
    before = tree_digest(folder.parent.parent)
    rows = len(env.audit_rows())
    result = cli("dream", folder, "--apply", pass_id)
    # The one row it may add is the version store's note that another process rewrote a file.
    seen = [r for r in env.audit_rows()[rows:] if r["event"] == "memory.rewritten_outside"]
    assert [r["file"] for r in seen] in ([], ["stale_2.md"])
    assert result.code == 1
    assert "stale_2.md changed since the plan" in result.err and "nothing moved" in result.err
    assert "stale_1.md" not in result.err
    assert tree_digest(folder.parent.parent) == before
    assert len(env.audit_rows()) == rows + len(seen)
    stored = "SELECT dir FROM refused_plan WHERE pass_id = ?"
    assert state_rows(env.state, stored, pass_id)  # still there to read


def test_apply_wants_a_pass_id_and_its_dir(env: Env, cli, folder: Path) -> None:
    pass_id = _refuse(env, cli, folder)
    assert cli("dream", "--apply", pass_id).code == 2
    assert cli("dream", folder, "--apply", pass_id, "--dry-run").code == 2
    bad = cli("dream", folder, "--apply", "../../etc/passwd")
    assert bad.code == 1 and "is no pass id" in bad.err


def test_a_dry_run_keeps_no_plan_and_offers_none(env: Env, cli, folder: Path) -> None:
    dry = cli("dream", "--dry-run", folder)
    assert dry.code == 1 and "--apply" not in dry.out
    assert "a pass without --dry-run keeps it" in dry.out
    assert not state_rows(env.state, "SELECT dir FROM refused_plan")
