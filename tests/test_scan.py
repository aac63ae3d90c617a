"""Scanning a memory dir: the incremental path sees exactly what a full scan sees."""

import contextlib
import marshal
import os
import random
from collections.abc import Callable, Set
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.indexing.scan import Names, scan_dir
from memoryd.model.scanned import dump_cache, load_cache
from tests.conftest import write_memory


def _same(a, b) -> None:
    assert a.present == b.present
    assert a.files == b.files
    assert sorted(a.conflicts) == sorted(b.conflicts)
    assert sorted(a.subdirs) == sorted(b.subdirs)


def test_incremental_scan_equals_a_full_scan_after_random_changes(tmp_path: Path) -> None:
    """Create, rewrite, delete, replace with a FIFO or a folder: named changes only, same result."""
    rng = random.Random(7)
    folder = tmp_path / "m"
    for i in range(40):
        write_memory(folder, f"m{i}.md", description=f"d{i}")
    previous = scan_dir(folder)
    for round_ in range(30):
        changed: set[str] = set()
        for _ in range(rng.randint(1, 5)):
            name = f"m{rng.randint(0, 50)}.md"
            path = folder / name
            action = rng.choice(["write", "delete", "odd", "conflict"])
            if path.is_dir():
                path.rmdir()
            elif path.exists() or path.is_symlink():
                path.unlink()
            if action == "write":
                write_memory(folder, name, description=f"round {round_}", age_days=None)
            elif action == "odd":
                odd: list[Callable[[Path], object]] = [
                    os.mkfifo,
                    Path.mkdir,
                    lambda p: p.write_text("---\nname: [x\n---\n"),
                ]
                rng.choice(odd)(path)
            elif action == "conflict":
                changed.add(name)  # the unlink above
                name = f"m{round_}.sync-conflict-1.md"
                (folder / name).write_text("x")
            changed.add(name)
        incremental = scan_dir(folder, previous=previous, only=changed)
        full = scan_dir(folder, previous.files)
        _same(incremental, full)
        # The daemon chains incremental scans (their listings carry what came and went).
        previous = incremental if round_ % 3 else full


def test_a_file_written_while_it_is_read_is_unstable_and_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer appending mid-read: the scan reports it as unstable, and the next scan re-reads."""
    folder = tmp_path / "m"
    path = write_memory(folder, "a.md", description="first")
    real_read = os.read

    def read_during_a_write(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        with path.open("a") as out:
            out.write("more body\n")
        os.utime(path, ns=(1, 2))
        return data

    monkeypatch.setattr(os, "read", read_during_a_write)
    first = scan_dir(folder)
    monkeypatch.undo()
    assert first.files["a.md"].problem_kind == "unstable"
    again = scan_dir(folder, first.files)
    assert again.reread == 1
    assert again.files["a.md"].kind == "memory"
    assert again.files["a.md"].description == "first"


def test_cache_round_trips_and_a_bad_cache_is_no_cache(tmp_path: Path) -> None:
    """A saved cache loads back equal; truncated, foreign or old-format bytes load as empty."""
    folder = tmp_path / "m"
    for i in range(5):
        write_memory(folder, f"m{i}.md", description=f"d{i}")
    (folder / "notes.md").write_text("no frontmatter\n")
    (folder / "bad.md").write_text("---\nname: [x\n---\n")
    files = scan_dir(folder).files
    data = dump_cache(files)
    assert load_cache(data) == files
    assert load_cache(dump_cache({})) == {}
    old_rows = marshal.dumps([s.as_tuple() for s in files.values()])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    for bad in (data[: len(data) // 2], b"", b"\x00garbage", old_rows, bytes(flipped)):
        assert load_cache(bad) == {}
    assert scan_dir(folder, load_cache(data)).reread == 0


@settings(max_examples=200, deadline=None)
@given(
    base=st.frozensets(st.sampled_from("abcdefghij"), max_size=10),
    steps=st.lists(st.sets(st.sampled_from("abcdefghijkl"), max_size=4), max_size=12),
    compact_at=st.sampled_from([0, 2, 256]),
)
def test_names_after_changes_are_the_set_they_stand_for(
    base: frozenset[str], steps: list[set[str]], compact_at: int
) -> None:
    """The daemon's dir listing after names came and went (toggled here, step by step) holds,
    counts and lists exactly what a plain set would, whether or not it compacts on the way."""
    Names.COMPACT_AT, saved = compact_at, Names.COMPACT_AT
    try:
        names: Set[str] = base
        truth = set(base)
        for toggled in steps:
            came = {n for n in toggled if n not in truth}
            gone = toggled & truth
            names = Names.changed(names, came, gone)
            truth = (truth | came) - gone
            assert len(names) == len(truth)
            assert sorted(names) == sorted(truth)
            assert all((n in names) == (n in truth) for n in "abcdefghijklm")
            assert names == truth
            # Set's operators give plain frozensets of the right names.
            assert names - {"a", "k"} == truth - {"a", "k"}
            assert (names | {"m"}) == truth | {"m"} and (names & {"a", "b"}) == truth & {"a", "b"}
    finally:
        Names.COMPACT_AT = saved


def test_files_removed_while_the_dir_is_scanned_are_simply_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file deleted between the listing and its stat (a skipped temp file) or its read (a
    new memory) is neither a crash nor a problem to report: it is not there."""
    from memoryd.storage import fsops

    folder = tmp_path / "m"
    write_memory(folder, "kept.md")
    first = scan_dir(folder)
    write_memory(folder, "new.md")
    (folder / "sedXYZ12").write_text("an editor's temp file")
    real_scandir, real_read = os.scandir, fsops.read_regular

    def listing_then_delete(fd):
        entries = list(real_scandir(fd))
        (folder / "sedXYZ12").unlink()
        return contextlib.nullcontext(iter(entries))

    def read_after_delete(dir_fd, name, *args, **kwargs):
        if name == "new.md":
            (folder / "new.md").unlink()
        return real_read(dir_fd, name, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", listing_then_delete)
    monkeypatch.setattr(fsops, "read_regular", read_after_delete)
    result = scan_dir(folder, first.files)
    assert set(result.files) == {"kept.md"} and result.problems == {}
    assert "new.md" not in result.present and "sedXYZ12" not in result.present
    assert result.vanished == ["new.md"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cached", [False, True], ids=["new file", "changed file"])
def test_a_fifo_swapped_in_after_the_listing_is_reported_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """A memory replaced by a FIFO between the listing's look at it and its read (a new file,
    and one whose cache entry no longer matches): the read opens it non-blocking and refuses
    it, the file is reported unreadable, the others are read. (fsops.read_regular held this
    already; without its O_NONBLOCK the scan waits here for ever.)"""
    from memoryd.storage import fsops

    folder = tmp_path / "m"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="other")
    cache = scan_dir(folder).files if cached else None
    if cached:
        write_memory(folder, "a.md", description="changed")
    real = fsops.read_regular

    def swap_then_read(dir_fd: int, name: str, limit: int, **kwargs: bool) -> object:
        if name == "a.md":
            os.unlink(name, dir_fd=dir_fd)
            os.mkfifo(name, dir_fd=dir_fd)
        return real(dir_fd, name, limit, **kwargs)

    monkeypatch.setattr(fsops, "read_regular", swap_then_read)
    result = scan_dir(folder, cache)
    assert result.files["a.md"].problem_kind == "unreadable"
    assert result.files["b.md"].description == "other"


def test_a_scan_lstats_each_listed_file_once_and_never_through_its_dir_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file of the listing is lstat'ed once (inode, size and mtime compared with the
    cache), by os.stat, not by DirEntry.stat, whose own copy of the result cost ~5 ms of a
    scan of 10,000 files (the old scan took each entry's). A file rewritten with its size kept
    is still read again."""
    folder = tmp_path / "m"
    for i in range(20):
        write_memory(folder, f"m{i:02}.md", description=f"d{i}")
    cache = scan_dir(folder).files
    write_memory(folder, "m05.md", description="d9")  # same size, another inode or mtime
    os.utime(folder / "m05.md", ns=(1, 1))
    real_scandir, real_stat = os.scandir, os.stat
    entry_stats: list[str] = []
    lstats: list[str] = []

    class Entry:
        def __init__(self, entry: os.DirEntry[str]) -> None:
            self._entry, self.name = entry, entry.name

        def is_file(self, *, follow_symlinks: bool = True) -> bool:
            return self._entry.is_file(follow_symlinks=follow_symlinks)

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            entry_stats.append(self.name)
            return self._entry.stat(follow_symlinks=follow_symlinks)

    def listing(fd: int) -> contextlib.nullcontext[list[Entry]]:
        with real_scandir(fd) as entries:
            return contextlib.nullcontext([Entry(e) for e in entries])

    def counting_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if kwargs.get("dir_fd") is not None and isinstance(path, str):
            lstats.append(path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", listing)
    monkeypatch.setattr(os, "stat", counting_stat)
    result = scan_dir(folder, cache)
    monkeypatch.undo()
    assert entry_stats == []
    assert sorted(lstats) == sorted(cache)  # once each
    assert result.changed == ["m05.md"] and result.files["m05.md"].description == "d9"


def test_a_scan_from_the_cache_holds_each_name_once(tmp_path: Path) -> None:
    """A restart's scan takes its files from the saved cache: the names it holds (its files'
    keys, each file's own and the dir's listing) are the cache's strings, not the listing's
    equal copies beside them."""
    folder = tmp_path / "m"
    for i in range(5):
        write_memory(folder, f"m{i}.md", description=f"d{i}")
    (folder / "notes.md").write_text("no frontmatter\n")
    again = scan_dir(folder, load_cache(dump_cache(scan_dir(folder).files)))
    assert again.reread == 0 and again.present == set(again.files)
    ids = {id(s.filename) for s in again.files.values()}
    assert {id(n) for n in again.files} == ids
    assert {id(n) for n in again.present if n in again.files} == ids
