"""RepoIndex: one walk of a repo root, on real trees under tmp_path."""

import os
from pathlib import Path
from typing import Any

import pytest

from memoryd.dream import repo as repo_module
from memoryd.dream.refs import RefChecker, Refs, Status
from memoryd.dream.repo import RepoIndex
from memoryd.paths import open_regular
from tests.helpers import write_file


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write_file(root, "src/app.py", "def parse_config(path):\n    return MemoryStore(path)\n")
    write_file(root, "src/lib/util.ts", "export function renderPage() { return ab; }\n")
    write_file(root, "README.md", "The memory_store module.\n")
    write_file(root, "docs/notes.md", "kept_token\n")
    write_file(root, ".claude/agent-memory/x/notes.md", "memory_only_token\n")
    write_file(root, "node_modules/pkg/index.js", "function vendored_only() {}\n")
    write_file(root, "build/out.js", "function built_only() {}\n")
    write_file(root, "deep/__pycache__/app.cpython-311.pyc", b"\0\0cached_only")
    write_file(root, ".git/HEAD", "ref: refs/heads/main\n")
    write_file(root, "assets/logo.png", b"\x89PNG\0png_only")
    write_file(root, "src/blob.py", b"binary_only = 1\0\0\0")
    outside = tmp_path / "outside"
    write_file(outside, "secret.py", "outside_only = 1\n")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "src/alias.py").symlink_to(root / "src/app.py")
    return root


def test_build_lists_files_dirs_and_top_level(tree: Path) -> None:
    """Files and folders are relative posix paths; the top level lists every entry of the root."""
    index = RepoIndex.build(tree)
    assert index.files == {
        "src/app.py",
        "src/alias.py",
        "src/blob.py",
        "src/lib/util.ts",
        "README.md",
        "docs/notes.md",
        "assets/logo.png",
        "linked",
    }
    assert {"src", "src/lib", ".claude", "docs", "node_modules"} <= index.dirs
    assert index.top_level == {
        "src", "README.md", ".claude", "node_modules", "build", "deep", ".git", "assets",
        "linked", "docs",
    }  # fmt: skip
    assert index.complete


def test_skipped_folders_are_not_walked(tree: Path) -> None:
    """node_modules, build, .git and __pycache__ exist but nothing inside them is indexed."""
    index = RepoIndex.build(tree)
    assert not any(f.startswith(("node_modules/", "build/", ".git/", "deep/")) for f in index.files)
    assert {"node_modules", "build", ".git", "deep/__pycache__"} <= index.opaque
    assert index.tokens.isdisjoint({"vendored_only", "built_only", "cached_only"})
    assert index.under_opaque("node_modules/pkg/index.js")
    assert not index.under_opaque("node_modules")


def test_symlinks_are_listed_but_never_entered(tree: Path) -> None:
    """A symlink counts as an entry by name; the folder it points to, outside, is not read."""
    index = RepoIndex.build(tree)
    assert "linked" in index.files
    assert "linked/secret.py" not in index.files
    assert "outside_only" not in index.tokens
    assert index.under_opaque("linked/secret.py")
    (check,) = RefChecker(index).check(Refs(paths=("linked/secret.py",), symbols=()))
    assert check.status is Status.UNCHECKED


def test_tokens_come_from_text_sources_only(tree: Path) -> None:
    """Identifiers of 3+ characters from text files; binary and non-source files are skipped."""
    index = RepoIndex.build(tree)
    assert {"parse_config", "MemoryStore", "renderPage", "memory_store", "kept_token"} <= (
        index.tokens
    )
    assert "ab" not in index.tokens
    assert index.tokens.isdisjoint({"binary_only", "png_only"})


def test_files_over_the_size_limit_give_no_tokens(tmp_path: Path) -> None:
    """A source file bigger than max_token_file_bytes is listed but not tokenised."""
    write_file(tmp_path, "small.py", "small_token = 1\n")
    write_file(tmp_path, "big.py", "big_token = 1\n" + "x" * 200)
    index = RepoIndex.build(tmp_path, max_token_file_bytes=100)
    assert {"small.py", "big.py"} <= index.files
    assert "small_token" in index.tokens
    assert "big_token" not in index.tokens


def test_has_path_accepts_files_dirs_and_spellings(tree: Path) -> None:
    """has_path knows files and folders, with or without ./ and a trailing slash."""
    index = RepoIndex.build(tree)
    assert index.has_path("src/app.py")
    assert index.has_path("./src/app.py")
    assert index.has_path("src/lib/")
    assert index.has_path("src")
    assert not index.has_path("src/gone.py")
    assert not index.has_path("../repo/src/app.py")


def test_moved_picks_the_shortest_then_first_candidate(tmp_path: Path) -> None:
    """A missing path whose name exists elsewhere is MOVED to one deterministic candidate."""
    for rel in ("b/x/helpers.py", "c/helpers.py", "a/helpers.py", "src/keep.py"):
        write_file(tmp_path, rel)
    index = RepoIndex.build(tmp_path)
    assert index.by_basename["helpers.py"] == ("a/helpers.py", "c/helpers.py", "b/x/helpers.py")
    (check,) = RefChecker(index).check(Refs(paths=("src/helpers.py",), symbols=()))
    assert (check.status, check.moved_to) == (Status.MOVED, "a/helpers.py")


def test_build_is_deterministic_and_capped(tmp_path: Path) -> None:
    """Two walks agree, and a walk cut by max_files keeps the same files and says so."""
    for i in range(30):
        write_file(tmp_path, f"d{i % 4}/f{i:02}.py", f"tok_{i} = 1\n")
    assert RepoIndex.build(tmp_path) == RepoIndex.build(tmp_path)
    first = RepoIndex.build(tmp_path, max_files=10)
    assert len(first.files) == 10
    assert not first.complete
    assert RepoIndex.build(tmp_path, max_files=10).files == first.files


def test_unreadable_entries_are_skipped(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder or file that cannot be read is skipped silently; the folder becomes opaque."""
    real_scandir, real_open = os.scandir, open_regular  # repo calls it by its own name

    def scandir(path: str) -> Any:
        if path.endswith(os.sep + "lib"):
            raise PermissionError(path)
        return real_scandir(path)

    def fake_open(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("app.py"):
            raise PermissionError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(repo_module, "open_regular", fake_open)
    index = RepoIndex.build(tree)
    assert "src/lib" in index.opaque
    assert "src/lib/util.ts" not in index.files
    assert "src/app.py" in index.files
    assert "parse_config" not in index.tokens
    assert "kept_token" in index.tokens
    (check,) = RefChecker(index).check(Refs(paths=("src/lib/util.ts",), symbols=()))
    assert check.status is Status.UNCHECKED


def test_root_must_be_a_folder(tmp_path: Path) -> None:
    """Building on a missing root or a file raises instead of reporting an empty repo."""
    with pytest.raises(FileNotFoundError):
        RepoIndex.build(tmp_path / "nope")
    with pytest.raises(NotADirectoryError):
        RepoIndex.build(write_file(tmp_path, "file.txt", "x"))


@pytest.mark.timeout(30)  # the old code waited on the FIFO for ever
def test_special_files_are_listed_never_opened_even_when_swapped_in(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repo may hold FIFOs and sockets (a dev server's, say) under source names: they are
    listed, never read. One renamed onto a source's name after the walk looked at it is
    opened non-blocking and refused: the build finishes without its tokens and reads it again
    next time. The old code opened it blocking and waited for a writer for ever."""
    import socket

    os.mkfifo(tree / "src" / "pipe.py")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tree / "src" / "server.sock.py"))
        real_walk = repo_module._walk

        def swapping_walk(root: Path, max_files: int) -> Any:
            for item in real_walk(root, max_files):
                if item[1] == "src/app.py":
                    fifo = tree / "src" / "new-fifo"
                    os.mkfifo(fifo)
                    fifo.replace(tree / "src" / "app.py")  # after its lstat, before its read
                yield item

        monkeypatch.setattr(repo_module, "_walk", swapping_walk)
        index = RepoIndex.build(tree)
    assert {"src/pipe.py", "src/server.sock.py", "src/app.py"} <= index.files
    assert "parse_config" not in index.tokens and "renderPage" in index.tokens
    assert index.sources is not None and index.sources.files["src/app.py"][0] == repo_module._NEVER
