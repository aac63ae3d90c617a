"""`memoryd dream`'s report for a person (issue 16): the counts last, so that they stay on
screen; no internal status word; symbols as symbols; no "rebuilt" for line edits."""

import os
import re
import time
from pathlib import Path

import pytest

from tests.conftest import Env

DAY = 86400


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    memory = root / ".claude" / "memory"
    memory.mkdir(parents=True)
    topics = ["anchor", "barley", "canyon", "dolphin", "ember", "fjord", "glacier", "harbor"]
    for i, topic in enumerate(topics):
        _mem(memory, f"filler_{i}.md", f"{topic} {topic}s {topic}-like")
    _mem(memory, "half.md", "See `src/app.py`, `src/removed.py` and `vanished_helper()`.")
    _mem(memory, "gone.md", "Lived in `src/gone.py`, called `old_entry_point()`.")
    return memory


def _mem(folder: Path, name: str, body: str, age: float = 40) -> None:
    path = folder / name
    path.write_text(f"---\nname: {name[:-3]}\ndescription: d\ntype: project\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))


STATUS_WORDS = re.compile(r"\b(dry_run|partially_stale|fully_stale)\b|: (completed|refused)$", re.M)


@pytest.mark.parametrize("dry", [True, False])
def test_the_report_ends_with_its_counts_and_speaks_plainly(
    env: Env, cli, folder: Path, dry: bool
) -> None:
    result = cli("dream", *(["--dry-run"] if dry else []), folder)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("Dream report")
    # The counts close the report: nothing after them but the last count.
    assert lines[-1].split()[:2] == ["promotion", "candidates"]
    counts = lines.index("Would do:" if dry else "Totals:")
    assert all(re.fullmatch(r"  [a-z ]+ +\d+", line) for line in lines[counts + 1 :]), lines
    assert "Housekeeping:" in lines[:counts]
    assert STATUS_WORDS.search(result.out) is None, result.out
    assert "rebuilt" not in result.out and "indexes updated" in result.out
    # Symbols are named as symbols, paths as paths.
    [half] = [line for line in lines if line.strip().startswith("half.md:")]
    assert half.endswith("partially stale, missing: src/removed.py, `vanished_helper`"), half
    [gone] = [line for line in lines if "gone.md" in line and "stale" in line]
    assert "src/gone.py" in gone and "`old_entry_point`" in gone, gone
    header = next(line for line in lines if f"({folder}): " in line)
    assert header.endswith("would move 1 to the trash" if dry else "done, 1 moved to the trash")


def test_why_a_dir_is_unmanaged_is_said_once_by_dream(env: Env, cli, folder: Path) -> None:
    (folder / "MEMORY.md").write_text("# my notes\n\nprose of my own, no pointers\n")
    first = cli("dream", folder)
    header = next(line for line in first.out.splitlines() if f"({folder}): " in line)
    assert "report only — " in header and "pointer targets" in header, header
    again = cli("dream", folder)
    header = next(line for line in again.out.splitlines() if f"({folder}): " in line)
    assert header.endswith(
        f"({folder}): not managed by memoryd, report only (why: memoryd dirs {folder})"
    )
