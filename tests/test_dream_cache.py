"""What one dream pass keeps for the next in the same process: facts by content, repo snapshots."""

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Config, ParseConfig
from memoryd.dream import inventory as inventory_module
from memoryd.dream.facts import FactsCache, derive
from memoryd.dream.inventory import Inventory, inventory
from memoryd.dream.refs import Classification, RefChecker
from memoryd.dream.repo import RepoIndex
from memoryd.dream.repocache import RepoCache
from memoryd.dream.similar import Vocabulary
from memoryd.model.memfile import Memory, parse_memory
from memoryd.runtime import DreamMemo, Runtime
from tests.conftest import Env
from tests.helpers import SavedBlob, make_repo_memory_outside, memory_dir, saved_blobs


def signature(repo: Path) -> int:
    """What a snapshot of the tree as it is now says of it (names, kinds, source stats)."""
    return RepoIndex.build(repo).signature


pytestmark = pytest.mark.repo_tree.with_args(make_repo_memory_outside)

DAY = 86400


class Process:
    """What one process keeps between its passes: every Runtime `take` makes shares it, as
    one process's commands do; `new_process` starts another."""

    memo = DreamMemo()


@pytest.fixture(autouse=True)
def fresh_caches() -> FactsCache:
    """Each test starts as a new process: nothing kept by an earlier test."""
    cache = FactsCache()
    Process.memo = DreamMemo(facts=cache)
    return cache


@pytest.fixture
def derived(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The bodies the pass derived facts from, in order (a cache hit derives nothing)."""
    seen: list[str] = []

    def counting(memory: Memory, vocabulary: Vocabulary) -> Any:
        seen.append(memory.body.strip())
        return derive(memory, vocabulary)

    monkeypatch.setattr(inventory_module, "derive", counting)
    return seen


def folder(repo: Path) -> Path:
    return repo.parent / "memory"


def mem(repo: Path, name: str, body: str, *, age: float = 40) -> Path:
    path = folder(repo) / name
    path.write_text(f"---\nname: {name[:-3]}\ndescription: d\ntype: project\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))
    return path


def runtime(env: Env, config: Config | None = None) -> Runtime:
    rt: Runtime = env.runtime(config)
    return replace(rt, dream=Process.memo)


def take(env: Env, repo: Path, config: Config | None = None, *, save: bool = False) -> Inventory:
    rt = runtime(env, config)
    return inventory(
        memory_dir(folder(repo), repo_root=repo), rt, RepoCache.of(rt).checker(repo), save=save
    )


def new_process() -> FactsCache:
    """What a new process holds: no facts, nothing known of the state dir's files."""
    cache = FactsCache()
    Process.memo = DreamMemo(facts=cache)
    return cache


def words_of(inv: Inventory, vocabulary: Vocabulary) -> dict[str, list[str]]:
    return {i.filename: sorted(vocabulary.all_words()[w] for w in i.words) for i in inv.items}


def facts_files(env: Env) -> list[SavedBlob]:
    return saved_blobs(env.state, "facts")


def facts_of(inv: Inventory) -> dict[str, tuple[object, ...]]:
    """Every item as the planner sees it, words as text (ids depend on the vocabulary)."""
    return {
        i.filename: (
            i.name, i.type, i.sha256, i.age_ts, i.checks, i.classification,
            len(i.words), i.positives, i.negatives, i.prohibition, i.promotion_declined,
        )
        for i in inv.items
    }  # fmt: skip


def test_second_pass_derives_nothing_and_sees_the_same(
    env: Env, repo: Path, derived: list[str]
) -> None:
    """Unchanged files are not parsed again, and every fact the planner sees is the same."""
    mem(repo, "a.md", "Always use pnpm in `src/app.py`, never yarn.")
    mem(repo, "b.md", "Do not edit `src/gone.py`; call handle_request() instead.")
    first = take(env, repo)
    assert len(derived) == 2
    second = take(env, repo)
    assert len(derived) == 2
    assert facts_of(second) == facts_of(first)
    assert [list(i.words) for i in second.items] == [list(i.words) for i in first.items]


def test_a_changed_file_is_derived_again(env: Env, repo: Path, derived: list[str]) -> None:
    """Entries are keyed by content: an edited file never gets its old facts."""
    path = mem(repo, "a.md", "Keep `src/app.py` small.")
    assert take(env, repo).items[0].classification is Classification.FRESH
    stat = path.stat()
    # Same size and mtime as before: only the bytes tell the edit apart.
    path.write_text(path.read_text().replace("src/app.py", "src/xyz.py"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    item = take(env, repo).items[0]
    assert item.classification is Classification.FULLY_STALE
    assert derived == ["Keep `src/app.py` small.", "Keep `src/xyz.py` small."]


def test_copies_share_facts_but_keep_their_own_name_and_age(
    env: Env, repo: Path, derived: list[str]
) -> None:
    """Facts depend on the bytes alone; the file name and mtime stay each file's own."""
    mem(repo, "a.md", "Same words in both files here.", age=30)
    (folder(repo) / "b.md").write_bytes((folder(repo) / "a.md").read_bytes())
    items = {i.filename: i for i in take(env, repo).items}
    assert len(derived) == 1
    assert items["a.md"].sha256 == items["b.md"].sha256
    assert items["a.md"].age_ts < items["b.md"].age_ts


def test_entries_of_files_gone_from_every_dir_are_dropped(
    env: Env, repo: Path, fresh_caches: FactsCache
) -> None:
    mem(repo, "a.md", "First memory body words.")
    mem(repo, "b.md", "Second memory body words.")
    take(env, repo)
    assert len(fresh_caches) == 2
    (folder(repo) / "b.md").unlink()
    take(env, repo)
    assert len(fresh_caches) == 1


def test_the_vocabulary_starts_again_after_churn(
    env: Env, repo: Path, fresh_caches: FactsCache
) -> None:
    """Dropped entries leave their words behind: once they outnumber the kept ones, start over."""
    path = mem(repo, "a.md", "version 0 of this body")
    take(env, repo)
    vocabulary = fresh_caches.vocabulary
    for k in range(1, 3):
        path.write_text(path.read_text().replace(f"version {k - 1} ", f"version {k} "))
        take(env, repo)
    assert fresh_caches.vocabulary is not vocabulary
    assert len(fresh_caches) == 0  # the next pass derives afresh, in the new vocabulary
    assert len(take(env, repo).items) == 1 and len(fresh_caches) == 1


def test_what_passes_keep_belongs_to_their_runtime(
    env: Env, repo: Path, derived: list[str]
) -> None:
    """Passes made with one Runtime share facts and snapshots; another Runtime (another
    process, another test) starts with nothing; the daemon may let the facts go."""
    mem(repo, "a.md", "Keep `src/app.py` small.")
    one, other = env.runtime(), env.runtime()

    def take_with(rt: Runtime) -> Inventory:
        return inventory(
            memory_dir(folder(repo), repo_root=repo), rt, RepoCache.of(rt).checker(repo)
        )

    take_with(one)
    take_with(one)
    assert len(derived) == 1
    take_with(other)
    assert len(derived) == 2
    # The checker (with the checks made) is kept while the tree is the same.
    assert RepoCache.of(one).checker(repo) is RepoCache.of(one).checker(repo)
    assert RepoCache.of(one).checker(repo) is not RepoCache.of(other).checker(repo)
    one.dream.release_facts()
    take_with(one)
    assert len(derived) == 3


def test_other_parse_limits_parse_again(env: Env, repo: Path) -> None:
    """What parses at all depends on the limits: a pass with other limits derives afresh."""
    mem(repo, "a.md", "x" * 3000)
    assert len(take(env, repo).items) == 1
    small = Config(parse=ParseConfig(max_file_bytes=2048))
    inv = take(env, repo, small)
    assert inv.items == [] and inv.unparseable == ["a.md"]
    assert len(take(env, repo).items) == 1


def test_facts_match_a_direct_parse(repo: Path) -> None:
    path = mem(repo, "a.md", "Never use yarn; always use `pnpm` with `src/app.py`.")
    parsed = parse_memory("a.md", path.read_bytes())
    assert isinstance(parsed, Memory)
    vocabulary = Vocabulary()
    facts = derive(parsed, vocabulary)
    assert (facts.name, facts.type, facts.prohibition) == ("a", "project", "never")
    assert facts.refs.paths == ("src/app.py",)
    assert (facts.positives, facts.negatives) == (frozenset({"pnpm"}), frozenset({"yarn"}))
    assert sorted(vocabulary.all_words()[w] for w in facts.words) == sorted(
        {"never", "use", "yarn;", "always", "`pnpm`", "`src/app.py`."}
    )


# --- repo snapshots ------------------------------------------------------------------------------


def test_signature_follows_names_kinds_and_sources(repo: Path) -> None:
    before = signature(repo)
    assert signature(repo) == before
    source = repo / "src/app.py"
    stat = source.stat()
    source.write_text(source.read_text().replace("handle", "HANDLE"))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ctime still moves
    changed = signature(repo)
    assert changed != before
    (repo / "src/new.txt").write_text("")
    assert signature(repo) != changed
    (repo / "src/new.txt").unlink()
    assert signature(repo) == changed
    (repo / "src/new").mkdir()
    assert signature(repo) != changed


def test_snapshot_is_reused_while_the_tree_is_unchanged(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.dream import repo as repo_module

    # A source written just now (by ctime) would be read again by every build (racy).
    monkeypatch.setattr(repo_module, "_RACY_NS", 0)
    memo = DreamMemo()
    first = RepoCache(memo=memo).checker(repo).repo
    assert first is not None and RepoCache(memo=memo).checker(repo).repo is first
    assert RepoCache(memo=memo).checker(repo) is RepoCache(memo=memo).checker(repo)
    assert RepoCache().checker(repo).repo is not first  # another process's memo holds nothing
    (repo / "src/more.py").write_text("def later_symbol(): pass\n")
    second = RepoCache(memo=memo).checker(repo).repo
    assert second is not first and second is not None
    checker = RepoCache(memo=memo).checker(repo)  # more.py is read again (racy), checks kept
    assert checker is RepoCache(memo=memo).checker(repo) and checker.repo == second
    assert "later_symbol" in second.tokens and "later_symbol" not in first.tokens


def test_a_pass_sees_a_symbol_defined_since_the_last_pass(env: Env, repo: Path) -> None:
    """A reused snapshot's checked references go with it: a rebuilt one checks again."""
    mem(repo, "a.md", "The `src/gone.py` helper calls later_symbol() for us.")
    (item,) = take(env, repo).items
    assert item.classification is Classification.FULLY_STALE
    (repo / "src/more.py").write_text("def later_symbol(): pass\n")
    (item,) = take(env, repo).items
    assert item.classification is Classification.PARTIALLY_STALE


def test_a_missing_root_is_not_kept(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    memo = DreamMemo()
    assert RepoCache(memo=memo).checker(gone).repo is None
    checker = RepoCache(memo=memo).checker(gone)
    assert isinstance(checker, RefChecker) and checker.repo is None
    assert memo.snapshots == {}


# --- facts saved in the state dir, for the next process ------------------------------------------


def test_a_new_process_takes_the_saved_facts_and_sees_the_same(
    env: Env, repo: Path, derived: list[str], fresh_caches: FactsCache
) -> None:
    mem(repo, "a.md", "Always use pnpm in `src/app.py`, never yarn. Call handle_request().")
    mem(repo, "b.md", "Do not edit `src/gone.py`; the staging deploy needs it.")
    first = take(env, repo, save=True)
    vocabulary = fresh_caches.vocabulary
    assert len(derived) == 2 and len(facts_files(env)) == 1
    cache = new_process()
    second = take(env, repo)
    assert len(derived) == 2  # nothing derived again
    assert facts_of(second) == facts_of(first)
    assert words_of(second, cache.vocabulary) == words_of(first, vocabulary)
    assert ((env.state / "state.sqlite").stat().st_mode & 0o777) == 0o600


def test_saved_facts_join_a_cache_that_holds_others(
    env: Env, repo: Path, derived: list[str], fresh_caches: FactsCache
) -> None:
    """Taken into a cache with its own vocabulary, the saved ids are renumbered."""
    mem(repo, "a.md", "Prefer ruff over black for `src/app.py` formatting.")
    first = take(env, repo, save=True)
    words_before = words_of(first, fresh_caches.vocabulary)
    cache = new_process()
    parse = Config().parse
    cache.begin((parse.max_file_bytes, parse.max_frontmatter_bytes))
    for word in ("unrelated", "words", "first", "formatting"):
        cache.vocabulary.id(word)
    second = take(env, repo)
    assert len(derived) == 1
    assert words_of(second, cache.vocabulary) == words_before


def test_only_a_saving_pass_writes_and_only_when_the_contents_changed(env: Env, repo: Path) -> None:
    mem(repo, "a.md", "One body.")
    take(env, repo)  # a dry run's inventory
    assert facts_files(env) == []
    take(env, repo, save=True)
    (saved,) = facts_files(env)
    stamp = saved.stamp()
    take(env, repo, save=True)
    assert saved.stamp() == stamp
    mem(repo, "b.md", "Another body.")
    take(env, repo, save=True)
    assert saved.stamp() != stamp


def test_a_damaged_or_foreign_facts_file_is_derived_again(
    env: Env, repo: Path, derived: list[str]
) -> None:
    mem(repo, "a.md", "Keep `src/app.py` small.")
    first = take(env, repo, save=True)
    (saved,) = facts_files(env)
    data = saved.read_bytes()
    for broken in (data[:-3], data[:40] + bytes([data[40] ^ 0xFF]) + data[41:], b"\0" * 99):
        saved.write_bytes(broken)
        new_process()
        assert facts_of(take(env, repo)) == facts_of(first)
    assert len(derived) == 4
    # Saved under other parse limits: not used either.
    saved.write_bytes(data)
    new_process()
    take(env, repo, Config(parse=ParseConfig(max_file_bytes=4096)))
    assert len(derived) == 5


def test_dream_dry_run_writes_no_facts(env: Env, cli: Any, repo: Path) -> None:
    mem(repo, "a.md", "Keep `src/app.py` small.")
    assert cli("dream", folder(repo), "--dry-run", "--repo-root", repo).code == 0
    assert facts_files(env) == []
    assert cli("dream", folder(repo), "--repo-root", repo).code == 0
    assert len(facts_files(env)) == 1


def test_saved_facts_are_taken_frame_by_frame_up_to_a_damaged_one(
    env: Env, repo: Path, derived: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is written and read a frame at a time; a damaged frame ends it, and the
    frames before it are still taken."""
    from memoryd.dream import facts as facts_module

    monkeypatch.setattr(facts_module, "_ROWS_PER_FRAME", 2)
    for k in range(7):
        mem(repo, f"m{k}.md", f"Body number {k} with its own words w{k}.")
    first = take(env, repo, save=True)
    (saved,) = facts_files(env)
    data = saved.read_bytes()
    new_process()
    assert facts_of(take(env, repo)) == facts_of(first)
    assert len(derived) == 7  # all seven taken from the file
    # Damage the last frame (one row): the three frames before it are taken.
    saved.write_bytes(data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:])
    new_process()
    assert facts_of(take(env, repo)) == facts_of(first)
    assert len(derived) == 8


def test_saved_facts_keep_this_dirs_rows_when_the_cache_starts_again(
    env: Env, repo: Path, derived: list[str]
) -> None:
    """Churn makes the cache start afresh at the end of a pass (finish): the file that pass
    saves still holds every memory of the dir."""
    path = mem(repo, "a.md", "version 0 of this body")
    mem(repo, "b.md", "another steady body text")
    take(env, repo, save=True)
    for k in range(1, 4):
        path.write_text(path.read_text().replace(f"version {k - 1} ", f"version {k} "))
        take(env, repo, save=True)
    seen = len(derived)
    new_process()
    take(env, repo)
    assert len(derived) == seen  # both taken from the file


def test_rows_that_pass_the_checksum_but_not_the_format_are_derived_again(
    env: Env, repo: Path, derived: list[str]
) -> None:
    """A file with our header whose rows hold other types (another version's, a bug's) is
    not taken, and no pass fails on it."""
    from memoryd.dream import facts as facts_module
    from memoryd.model.sealed import frame

    mem(repo, "a.md", "Keep `src/app.py` small.")
    first = take(env, repo, save=True)
    (saved,) = facts_files(env)
    parse = Config().parse
    limits = (parse.max_file_bytes, parse.max_frontmatter_bytes)
    head = frame((facts_module._SAVED_HEADER, limits, ("keep", "small.")))
    good: tuple[object, ...]
    good = (first.items[0].sha256, "a", "project", 0.0, False, b"\0\0\0\0", (), (),
            frozenset(), frozenset(), "")  # fmt: skip
    bad: tuple[object, ...]
    for bad in (
        (*good[:2], 7, *good[3:]),  # a type that is no str
        (*good[:5], [-1], *good[6:]),  # ids that are no bytes
        (*good[:5], b"\x05\x00\x00\x00", *good[6:]),  # an id past the words
        (*good[:6], (1, 2), *good[7:]),  # paths that are no str
        (*good[:8], {"x"}, *good[9:]),  # a set where a frozenset belongs
    ):
        saved.write_bytes(head + frame((bad,)))
        new_process()
        before = len(derived)
        assert facts_of(take(env, repo)) == facts_of(first)
        assert len(derived) == before + 1
