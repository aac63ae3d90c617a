"""`history` of a memory deleted outside memoryd: named with or without `.md`, by its name or
its path, it lists the kept version; `--diff` shows what the deletion removed (the old code
said the bytes were no longer kept, while `trash restore` brought them back)."""

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env
from tests.conftest import write_lesson as _mem


@pytest.fixture
def folder(env: Env, cli: Any) -> Path:
    """A dir whose a.md another process deleted, seen by memoryd before and after."""
    path = env.home / "mem"
    path.mkdir()
    path = path.resolve()
    _mem(path, "a.md", "the deleted lesson")
    _mem(path, "b.md", "another lesson")
    assert cli("index", path).code == 0
    (path / "a.md").unlink()
    assert cli("index", path).code == 0
    return path


def test_diff_of_a_deleted_memory_shows_what_the_deletion_removed(folder: Path, cli: Any) -> None:
    shown = cli("history", folder / "a.md", "--diff")
    assert shown.code == 0, shown.err
    assert "no longer kept" not in shown.out, shown.out
    assert "+++ a.md (deleted)" in shown.out and "-the deleted lesson" in shown.out
    assert "-the deleted lesson" in cli("history", folder / "a.md", "--diff", "1").out


@pytest.mark.parametrize("how", ["name", "path"])
def test_history_of_a_deleted_memory_without_its_md_suffix_is_that_of_the_md_file(
    folder: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """`history a` failed ("no memory of that name") where `history a.md` listed the
    version; by path, `history DIR/a` listed nothing."""
    monkeypatch.chdir(folder)
    key = "a" if how == "name" else str(folder / "a")
    full = cli("history", "a.md")
    short = cli("history", key)
    assert short.code == 0, short.err
    assert "1 version kept" in short.out and f"{folder}/a.md" in short.out
    assert full.out.split("Versions:")[-1] == short.out.split("Versions:")[-1]
    assert "-the deleted lesson" in cli("history", key, "--diff").out
