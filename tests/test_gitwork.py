"""What memoryd asks git, on real repos: blob ids as git computes them, work trees (linked
ones too), conflict hunks, and a git that is missing or hangs (the dir is left alone)."""

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.discover import gitwork
from memoryd.model.conflicts import conflict_line
from tests.conftest import Env, Result, write_memory
from tests.helpers import git

Cli = Callable[..., Result]


def _repo(root: Path) -> Path:
    folder = root / ".claude" / "agent-memory" / "reviewer"
    write_memory(folder, "style.md", description="style")
    (folder / "MEMORY.md").write_text("- [Style](style.md) — style\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "memory")
    return folder


@pytest.mark.parametrize("data", [b"", b"hello\n", "ünïcode — memory\r\n".encode(), b"\0" * 70])
def test_blob_ids_are_the_ones_git_gives(tmp_path: Path, data: bytes) -> None:
    """The SHA-1 blob id memoryd computes for bytes is `git hash-object`'s."""
    out = subprocess.run(
        ["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True
    )
    assert gitwork.blob_ids(data)[0] == out.stdout.decode().strip()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a\n<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> theirs\n", 2),
        ("<<<<<<< ours\nx\n||||||| base\nb\n=======\ny\n>>>>>>> theirs\n", 1),
        ("<<<<<<< HEAD\r\nx\r\n=======\r\ny\r\n>>>>>>> b\r\n", 1),
        ("quoting a marker: <<<<<<< HEAD in a sentence\n=======\n>>>>>>> x\n", None),
        ("<<<<<<< HEAD\nonly a start\n", None),
        ("=======\n>>>>>>> x\n<<<<<<< HEAD\n", None),
        ("<<<<<<<< eight\n=======\n>>>>>>> x\n", None),
        ("no markers at all\n", None),
    ],
)
def test_a_conflict_is_a_whole_hunk_at_line_starts(text: str, line: int | None) -> None:
    """Start, middle and end markers, in order, each at a line start; a lone one is a quote."""
    assert conflict_line(text) == line


def test_an_empty_git_folder_is_no_work_tree_and_a_linked_worktree_is_one(
    tmp_path: Path,
) -> None:
    """A `.git` folder without HEAD (no repo to git) is none; `git worktree add` makes a
    `.git` file that is followed to its git dir, whose files git tracks there too."""
    (tmp_path / "fake" / ".git").mkdir(parents=True)
    assert gitwork.work_tree(tmp_path / "fake") is None
    root = tmp_path / "app"
    folder = _repo(root)
    git(root, "worktree", "add", "-q", str(tmp_path / "wt"))
    linked = tmp_path / "wt" / ".claude" / "agent-memory" / "reviewer"
    tree = gitwork.work_tree(linked)
    assert tree is not None and tree.top == tmp_path / "wt"
    assert tree.git_dir != root / ".git" and (tree.git_dir / "HEAD").is_file()
    assert sorted(gitwork.tracked(linked) or {}) == ["MEMORY.md", "style.md"]
    assert gitwork.hands_off_reason(linked).startswith("tracked by git (in ")
    assert gitwork.hands_off_reason(folder, named=[root]) == ""


def test_one_reader_of_a_git_file_serves_the_work_tree_and_the_canonical_root(
    tmp_path: Path,
) -> None:
    """A linked worktree's `.git` file is read by gitwork.gitdir_of for both gitwork's work
    tree and discovery's canonical root (Claude Code's key: the main work tree), a relative
    `gitdir:` taken from the worktree's folder; a file that names no git dir is none."""
    from memoryd.discover.look import canonical_root

    root = tmp_path / "app"
    _repo(root)
    wt = tmp_path / "wt"
    git(root, "worktree", "add", "-q", str(wt))
    named = Path((wt / ".git").read_text().removeprefix("gitdir:").strip())
    assert gitwork.gitdir_of(wt) == named
    relative = os.path.relpath(named, wt)
    (wt / ".git").write_text(f"gitdir: {relative}\n")
    assert gitwork.gitdir_of(wt, follow=False) == wt / relative
    tree = gitwork.work_tree(wt / ".claude")
    assert tree is not None and (tree.top, tree.git_dir) == (wt, wt / relative)
    assert canonical_root(wt) == root.resolve()
    (wt / ".git").write_text("not a git dir\n")
    assert gitwork.gitdir_of(wt) is None and canonical_root(wt) == wt
    with pytest.raises(OSError):
        gitwork.gitdir_of(tmp_path)


def test_without_git_a_repo_dir_is_left_alone_and_said_so(
    tmp_path: Path, env: Env, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `git` on PATH: memoryd cannot tell what git tracks, so a memory dir in a work tree
    is read and reported, not written, and the reason says why."""
    root = tmp_path / "app"
    folder = _repo(root)
    write_memory(folder, "deploy.md", description="deploy")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    before = (folder / "MEMORY.md").read_bytes()
    why = gitwork.hands_off_reason(folder)
    assert why.startswith("tracked by git, maybe") and "no `git` on PATH" in why
    env.config_dir.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text(f'[paths]\nrepos = ["{root}"]\n')
    assert cli("index").code == 0
    assert (folder / "MEMORY.md").read_bytes() == before


def test_a_git_that_hangs_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A git that never answers (a network filesystem, a hung hook) is killed at the timeout
    and counts as one that cannot say: the dir is left alone, the pass goes on."""
    root = tmp_path / "app"
    folder = _repo(root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(gitwork, "GIT_TIMEOUT", 0.3)
    assert gitwork.tracked(folder) is None
    assert gitwork.hands_off_reason(folder).startswith("tracked by git, maybe")
