"""The repo token cache: a build from an earlier build's sources (in this process or saved in
the state dir) reads only the sources whose stat changed, and says exactly what a fresh build
says."""

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.dream import repo as repo_module
from memoryd.dream.repo import RepoIndex, SourceTokens, dump_sources, load_sources
from memoryd.dream.repocache import RepoCache
from memoryd.runtime import DreamMemo
from memoryd.storage.state import StateStore
from tests.conftest import Result
from tests.helpers import saved_blobs, write_file

OLD = time.time() - 3600  # an mtime far enough back for a source's tokens to be kept


def write(root: Path, rel: str, text: str | bytes, *, mtime: float = OLD) -> None:
    os.utime(write_file(root, rel, text), (mtime, mtime))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources a build read, in order."""
    seen: list[str] = []
    original = repo_module._read_runs

    def counting(path: str, st: os.stat_result, max_bytes: int) -> list[bytes] | None:
        seen.append(Path(path).name)
        return original(path, st, max_bytes)

    monkeypatch.setattr(repo_module, "_read_runs", counting)
    return seen


@pytest.fixture(autouse=True)
def no_racy_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every file here was written (its ctime set) moments ago: without this, the racy rule
    # would have every build read every source again. Its own test sets it back.
    monkeypatch.setattr(repo_module, "_RACY_NS", 0)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, "src/app.py", "def parse_config(path):\n    return MemoryStore(path)\n")
    write(root, "src/lib/util.ts", "export function renderPage() { return ab; }\n")
    write(root, "README.md", "The memory_store module.\n")
    write(root, "assets/logo.png", b"\x89PNG\0png_only")
    return root


def test_an_unchanged_tree_is_not_read_again(tree: Path, reads: list[str]) -> None:
    first = RepoIndex.build(tree)
    assert sorted(reads) == ["README.md", "app.py", "util.ts"]
    again = RepoIndex.build(tree, previous=first.sources)
    assert sorted(reads) == ["README.md", "app.py", "util.ts"]  # nothing more
    assert again == first and again.sources is first.sources


def test_only_changed_sources_are_read_and_the_result_is_a_fresh_builds(
    tree: Path, reads: list[str]
) -> None:
    first = RepoIndex.build(tree)
    reads.clear()
    write(tree, "src/app.py", "def renamed_config(path): pass\n")  # same mtime: ctime moves
    write(tree, "src/new.go", "func brandNewThing() {}\n")
    (tree / "README.md").unlink()
    rebuilt = RepoIndex.build(tree, previous=first.sources)
    assert sorted(reads) == ["app.py", "new.go"]
    fresh = RepoIndex.build(tree)
    assert rebuilt == fresh
    assert "renamed_config" in rebuilt.tokens and "brandNewThing" in rebuilt.tokens
    assert "parse_config" not in rebuilt.tokens and "memory_store" not in rebuilt.tokens


def test_a_source_written_just_now_is_read_again_next_time(
    tree: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file modified within the timestamp tick of a read may change again unseen by its
    stat: its tokens are not kept (git's "racily clean" files). Recent by mtime or by ctime
    (an mtime set back by `cp -p` or tar says nothing of when the bytes were written)."""
    first = RepoIndex.build(tree)
    write(tree, "src/hot.py", "def hot_symbol(): pass\n", mtime=time.time())
    write(tree, "src/copied.py", "def copied_symbol(): pass\n")  # old mtime, new ctime
    monkeypatch.setattr(repo_module, "_RACY_NS", 3_600_000_000_000)  # everything is recent
    second = RepoIndex.build(tree, previous=first.sources)
    reads.clear()
    RepoIndex.build(tree, previous=second.sources)
    assert sorted(reads) == ["README.md", "app.py", "copied.py", "hot.py", "util.ts"]
    monkeypatch.setattr(repo_module, "_RACY_NS", 0)
    third = RepoIndex.build(tree, previous=second.sources)
    reads.clear()
    assert RepoIndex.build(tree, previous=third.sources) == third and reads == []


def test_a_source_that_could_not_be_read_is_read_again(
    tree: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed read (EMFILE, EIO) may pass: its empty result is not kept under the stamp."""
    original = repo_module._read_runs
    failing = {"app.py"}

    def flaky(path: str, st: os.stat_result, max_bytes: int) -> list[bytes] | None:
        if Path(path).name in failing:
            return None
        return original(path, st, max_bytes)

    monkeypatch.setattr(repo_module, "_read_runs", flaky)
    first = RepoIndex.build(tree)
    assert "parse_config" not in first.tokens
    failing.clear()
    again = RepoIndex.build(tree, previous=first.sources)
    assert "parse_config" in again.tokens and again == RepoIndex.build(tree)


def test_another_size_cap_reads_everything_again(tree: Path, reads: list[str]) -> None:
    first = RepoIndex.build(tree)
    reads.clear()
    small = RepoIndex.build(tree, previous=first.sources, max_token_file_bytes=10)
    assert len(reads) == 3 and small == RepoIndex.build(tree, max_token_file_bytes=10)


def test_saved_sources_round_trip_and_a_damaged_file_is_no_cache(tree: Path) -> None:
    sources = RepoIndex.build(tree).sources
    assert sources is not None
    data = dump_sources(tree, sources)
    assert load_sources(tree, data) == sources
    assert load_sources(tree.parent / "other", data) is None  # saved for another root
    for broken in (b"", data[:-1], data[:10] + bytes([data[10] ^ 1]) + data[11:], b"x" * 64):
        assert load_sources(tree, broken) is None
    assert load_sources(tree, None) is None


# A tree of a few sources, changed by random steps; each build from the previous one's sources
# must equal a fresh build.
_NAMES = ("a.py", "b.ts", "sub/c.go", "sub/d.md", "e.png")
_WORDS = ("alpha_one", "betaTwo", "gamma_three", "deltaFour", "x1", "ab", "epsilon_five")


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    kinds = st.sampled_from(("write", "delete", "touch", "binary"))
    step = st.tuples(kinds, st.sampled_from(_NAMES), st.lists(st.sampled_from(_WORDS), max_size=4))
    out = draw(st.lists(step, min_size=1, max_size=12))
    return [(k, n, " ".join(w)) for k, n, w in out]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=steps())
def test_incremental_builds_equal_fresh_builds(
    tmp_path: Path, changes: list[tuple[str, str, str]]
) -> None:
    root = tmp_path / f"t{time.monotonic_ns()}"
    root.mkdir()
    previous: SourceTokens | None = None
    for k, (kind, name, text) in enumerate(changes):
        path = root / name
        if kind == "delete":
            path.unlink(missing_ok=True)
        elif kind == "touch" and path.exists():
            os.utime(path, (OLD + k, OLD + k))
        elif kind == "binary":
            write(root, name, b"\0" + text.encode(), mtime=OLD + k)
        else:
            write(root, name, f"{text}\n", mtime=OLD + k)
        built = RepoIndex.build(root, previous=previous)
        assert built == RepoIndex.build(root)
        previous = built.sources
        # And through the state dir, as the next process would see it.
        assert previous is not None
        assert load_sources(root, dump_sources(root, previous)) == previous


def test_a_real_pass_saves_the_cache_a_dry_run_only_reads_it(
    tree: Path, tmp_path: Path, reads: list[str]
) -> None:
    store = StateStore(tmp_path / "state")
    process = DreamMemo()
    RepoCache(store, process).checker(tree)  # save=False: what a dry run asks for
    assert store.load_repo_tokens(tree) is None
    assert not (tmp_path / "state").exists()
    reads.clear()
    RepoCache(store, process).checker(tree, save=True)  # the held snapshot, saved
    assert reads == []
    saved = store.load_repo_tokens(tree)
    assert saved is not None
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    # A new process: nothing held in memory, the cache read from the state dir.
    process = DreamMemo()
    repo = RepoCache(store, process).checker(tree).repo
    assert reads == [] and repo == RepoIndex.build(tree)
    # Nothing changed: the saved entry is not written again.
    (tokens,) = saved_blobs(tmp_path / "state", "tokens")
    before = tokens.stamp()
    RepoCache(store, process).checker(tree, save=True)
    assert tokens.stamp() == before


def test_dream_dry_run_writes_no_repo_cache(
    cli: Callable[..., Result], tmp_path: Path, tree: Path
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "a.md").write_text(
        "---\nname: a\ndescription: d\ntype: project\n---\nSee `src/app.py`.\n"
    )
    state = Path(os.environ["XDG_STATE_HOME"]) / "memoryd"
    assert cli("dream", memory, "--dry-run", "--repo-root", tree).code == 0
    assert saved_blobs(state, "tokens") == []
    assert cli("dream", memory, "--repo-root", tree).code == 0
    assert len(saved_blobs(state, "tokens")) == 1


def test_a_file_that_is_no_source_still_changes_the_snapshot(tree: Path) -> None:
    """Only sources are read for tokens, but every name counts for path references: adding a
    picture or removing a data file must not leave the held snapshot as it was."""
    from memoryd.dream.refs import Refs, Status

    refs = Refs(("src/new.png", "assets/logo.png"), ())
    process = DreamMemo()
    checker = RepoCache(memo=process).checker(tree)
    assert [c.status for c in checker.check(refs)] == [Status.MISSING, Status.FOUND]
    write(tree, "src/new.png", b"\x89PNG\0")
    (tree / "assets/logo.png").unlink()
    again = RepoCache(memo=process).checker(tree)
    assert again is not checker  # the held snapshot was looked at again, not kept
    assert again.repo == RepoIndex.build(tree)
    assert [c.status for c in again.check(refs)] == [Status.FOUND, Status.MISSING]


def test_a_cache_file_with_the_right_header_but_wrong_fields_is_no_cache(tree: Path) -> None:
    from memoryd.model.sealed import seal

    header = repo_module._SOURCES_HEADER
    root = str(tree)
    for payload in (
        (root, "big", ("tok",), ("a.py",), ((1, 2, 3, 4, 5),), (b"tok",)),
        (root, 10, (1,), ("a.py",), ((1, 2, 3, 4, 5),), (b"tok",)),
        (root, 10, ("tok",), ("a.py",), ((1, 2, 3),), (b"tok",)),
        (root, 10, ("tok",), ("a.py",), ((1, 2, 3, 4, 5),), ("tok",)),
        (root, 10, ("tok",), (7,), ((1, 2, 3, 4, 5),), (b"tok",)),
    ):
        assert load_sources(tree, seal(header, payload)) is None
