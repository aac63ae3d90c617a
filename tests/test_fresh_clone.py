"""The suite in a clone of the project alone: the corpus is not part of it, so the tests that
need it skip and say why (naming MEMORYD_CORPUS), and a MEMORYD_CORPUS naming no folder stops
the run before any test, with the reason."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS_TESTS = (
    "tests/test_corpus_index.py",
    "tests/test_dream_corpus.py",
    "tests/test_index_after_dream.py::test_dream_over_the_corpus_gives_the_same_index_either_way",
)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The project's tests and pytest settings, somewhere with no shared/corpus above."""
    root = tmp_path / "memoryd"
    if any((p / "shared" / "corpus").is_dir() for p in root.parents):
        pytest.skip(f"a shared/corpus lies above {tmp_path}: no place for a clone without one")
    (root / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", root)
    for name in (
        "__init__.py",
        "conftest.py",
        "helpers.py",
        *(t.split("::")[0][6:] for t in CORPUS_TESTS),
    ):
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    return root


def _pytest(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MEMORYD_CORPUS"} | env
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *CORPUS_TESTS],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_the_corpus_its_tests_skip_naming_memoryd_corpus(clone: Path) -> None:
    run = _pytest(clone)
    assert run.returncode == 0, run.stdout + run.stderr
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 4, run.stdout  # two parametrised over the corpus, two single tests
    assert all("set MEMORYD_CORPUS" in line for line in skipped), run.stdout
    assert " passed" not in run.stdout and "failed" not in run.stdout


def test_a_memoryd_corpus_naming_no_folder_stops_the_run(clone: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-corpus-here"
    run = _pytest(clone, MEMORYD_CORPUS=str(missing))
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert f"MEMORYD_CORPUS={missing}: no such folder" in run.stderr
