"""Per-dir state: small saves go to a log beside the base file, and a fresh process reads both."""

import os
import stat
from pathlib import Path

import pytest

from memoryd.state import LOG_FOLD_BYTES, STATE_MAX_BYTES, DirState, StateStore
from tests.conftest import lock_held_elsewhere


def seen_of(n: int) -> dict[str, list[str]]:
    return {f"m{i}.md": [f"m{i}", f"description {i}"] for i in range(n)}


def saved_once(tmp_path: Path, n: int, *, known: bool = False) -> tuple[StateStore, Path, DirState]:
    """A store under tmp_path, a dir's state with `n` seen files, saved once (the base file)."""
    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    state = DirState(path=str(folder), known=known, seen=seen_of(n))
    store.save(folder, state)
    return store, folder, state


def test_a_save_of_one_changed_file_appends_instead_of_rewriting(tmp_path: Path) -> None:
    """After the first save, changing one file's entry appends one short line to the log."""
    store, folder, state = saved_once(tmp_path, 2000, known=True)
    base = next((tmp_path / "dirs").glob("*.json"))
    base_bytes = base.read_bytes()
    state.seen["m7.md"] = ["m7", "changed"]
    del state.seen["m8.md"]
    state.last_index_ts = 12.5
    store.save(folder, state, seen_changed={"m7.md", "m8.md"})
    assert base.read_bytes() == base_bytes
    log = next((tmp_path / "dirs").glob("*.log"))
    assert 0 < log.stat().st_size < 300
    assert stat.S_IMODE(log.stat().st_mode) == 0o600  # private, like the base (§2.8)
    assert StateStore(tmp_path).load(folder) == state  # a fresh process sees both


def test_memoryds_own_lines_are_saved_per_name_and_read_by_a_fresh_store(tmp_path: Path) -> None:
    """The record of memoryd's own pointer lines (DirState.own) changes per name in the log,
    as `seen` does: a save after one new pointer appends a short line, even at 2,000
    records; a change beyond the names announced writes the base whole instead."""
    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    own = {f"m{i}.md": f"{i:016x}" for i in range(2000)}
    state = DirState(path=str(folder), known=True, seen=seen_of(2000), own=own)
    store.save(folder, state)
    base = next((tmp_path / "dirs").glob("*.json"))
    base_bytes = base.read_bytes()
    state.seen["new.md"] = ["new", "d"]
    state.own["new.md"] = "00ff00ff00ff00ff"
    del state.own["m3.md"]  # its line went (the agent rewrote it)
    store.save(folder, state, seen_changed={"new.md"}, own_changed={"new.md", "m3.md"})
    assert base.read_bytes() == base_bytes
    log = next((tmp_path / "dirs").glob("*.log"))
    assert 0 < log.stat().st_size < 300
    assert StateStore(tmp_path).load(folder) == store.load(folder) == state  # a restart
    del state.own["m4.md"]  # not announced: the count shows it
    store.save(folder, state, seen_changed=set(), own_changed={"m5.md"})
    assert base.read_bytes() != base_bytes
    assert StateStore(tmp_path).load(folder) == state
    state.own["m6.md"] = "2222222222222222"  # own_changed unsaid: seen_changed's names
    store.save(folder, state, seen_changed={"m6.md"})
    assert StateStore(tmp_path).load(folder).own["m6.md"] == "2222222222222222"


def test_a_torn_last_log_line_is_skipped(tmp_path: Path) -> None:
    """A crash mid-append leaves a partial line: the saves before it still load."""
    store, folder, state = saved_once(tmp_path, 3)
    state.seen["m1.md"] = ["m1", "second"]
    store.save(folder, state, seen_changed={"m1.md"})
    log = next((tmp_path / "dirs").glob("*.log"))
    with log.open("ab") as f:
        f.write(b'{"seen":{"m2.md":["m2","tor')
    loaded = StateStore(tmp_path).load(folder)
    assert loaded.seen["m1.md"] == ["m1", "second"]
    assert loaded.seen["m2.md"] == ["m2", "description 2"]


def test_an_old_log_never_replays_over_a_newer_base(tmp_path: Path) -> None:
    """A crash after a fold wrote the new base but before the old log was removed: the old
    log belongs to the previous generation and is ignored."""
    store, folder, state = saved_once(tmp_path, 3)
    state.seen["m0.md"] = ["m0", "old change"]
    store.save(folder, state, seen_changed={"m0.md"})
    old_log = next((tmp_path / "dirs").glob("*.log"))
    kept = old_log.read_bytes()
    state.seen["m0.md"] = ["m0", "newest"]
    state.seen["m5.md"] = ["m5", "not announced"]  # beyond seen_changed: a full write
    store.save(folder, state, seen_changed={"m0.md"})
    assert not old_log.exists()
    old_log.write_bytes(kept)  # as if the crash came before its removal
    assert StateStore(tmp_path).load(folder).seen["m0.md"] == ["m0", "newest"]


def test_the_log_is_folded_into_the_base_once_it_grows(tmp_path: Path) -> None:
    """Appends stop once the log outgrows LOG_FOLD_BYTES: the next save writes a new base."""
    store, folder, state = saved_once(tmp_path, 10)
    long = "x" * 4000
    for i in range(LOG_FOLD_BYTES // 4000 + 2):
        state.seen["m1.md"] = ["m1", f"{i}{long}"]
        store.save(folder, state, seen_changed={"m1.md"})
    logs = list((tmp_path / "dirs").glob("*.log"))
    assert all(log.stat().st_size <= LOG_FOLD_BYTES + 5000 for log in logs)
    assert StateStore(tmp_path).load(folder) == state


def test_a_change_by_another_process_is_read_not_overwritten(tmp_path: Path) -> None:
    """Two stores on one state dir (a CLI command beside the daemon): each sees the other's
    saves, because the held copy is trusted only while the files are unchanged."""
    folder = tmp_path / "memory"
    one, two = StateStore(tmp_path), StateStore(tmp_path)
    state = DirState(path=str(folder), seen=seen_of(3))
    one.save(folder, state)
    other = two.load(folder)
    other.last_dream_ts = 99.0
    two.save(folder, other)
    mine = one.load(folder)
    assert mine.last_dream_ts == 99.0
    mine.seen["m0.md"] = ["m0", "mine"]
    one.save(folder, mine, seen_changed={"m0.md"})
    assert two.load(folder) == mine


def test_a_logged_save_leaves_the_held_copy_equal_to_what_a_new_store_reads(
    tmp_path: Path,
) -> None:
    """A save with `seen_changed` updates the store's own copy from the logged change: the
    next load from memory and a load by another process agree, and a caller mutating its
    state afterwards does not reach into the store."""
    store, folder, state = saved_once(tmp_path, 50)
    state.seen["m3.md"] = ["m3", "changed"]
    state.seen.pop("m4.md")
    state.seen["new.md"] = ["new", "d"]
    state.reported["x"] = "1"
    state.changed_since_dream.append("new.md")
    store.save(folder, state, seen_changed={"m3.md", "m4.md", "new.md"})
    assert len(list((tmp_path / "dirs").glob("*.log"))) == 1  # appended, not rewritten
    state.reported["later"] = "caller's own"
    state.changed_since_dream.append("later.md")
    state.reported.pop("later")
    state.changed_since_dream.pop()
    assert store.load(folder) == StateStore(tmp_path).load(folder) == state


def test_the_seen_token_changes_exactly_when_seen_may_have(tmp_path: Path) -> None:
    """The daemon trusts `seen` to name the files it held while the token is the same object:
    a save that leaves `seen` alone keeps it; a change to `seen`, a rewrite of the base file
    and a save by another process each give a new one (or none)."""
    store, folder, state = saved_once(tmp_path, 20, known=True)
    token = store.seen_token(folder)
    assert token is not None
    state.last_index_ts = 3.0
    store.save(folder, state, seen_changed=set())
    assert store.seen_token(folder) is token
    state.seen["m1.md"] = ["m1", "changed"]
    store.save(folder, state, seen_changed={"m1.md"})
    changed = store.seen_token(folder)
    assert changed is not None and changed is not token
    store.save(folder, state)  # nothing changed: no write at all
    assert store.seen_token(folder) is changed
    other = StateStore(tmp_path)
    theirs = other.load(folder)
    theirs.seen.pop("m2.md")
    other.save(folder, theirs, seen_changed={"m2.md"})
    assert store.seen_token(folder) is None  # written by someone else since
    assert store.load(folder) == theirs
    reread = store.seen_token(folder)
    assert reread is not None and reread is not changed
    assert StateStore(tmp_path).seen_token(folder) is None  # never read: nothing to trust


def test_a_line_another_process_appends_meanwhile_is_not_taken_for_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between this store's look at the log and its append, another process appends too: the
    store must not keep its own copy as if the log held only its change."""
    import os

    store, folder, state = saved_once(tmp_path, 10, known=True)
    theirs_store = StateStore(tmp_path)
    theirs = theirs_store.load(folder)
    theirs.seen["m1.md"] = ["m1", "theirs"]
    real_open = os.open
    raced: list[int] = []

    def open_then_race(path, flags, *args, **kwargs):
        if str(path).endswith(".log") and not raced:
            raced.append(1)
            theirs_store.save(folder, theirs, seen_changed={"m1.md"})  # their line first
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_then_race)
    state.seen["m2.md"] = ["m2", "mine"]
    store.save(folder, state, seen_changed={"m2.md"})
    monkeypatch.setattr(os, "open", real_open)
    assert raced
    on_disk = StateStore(tmp_path).load(folder)
    assert on_disk.seen["m1.md"] == ["m1", "theirs"] and on_disk.seen["m2.md"] == ["m2", "mine"]
    assert store.load(folder) == on_disk
    assert store.seen_token(folder) is not None  # read again: its own token, trusted afresh


def test_the_dir_lock_is_one_writer_across_processes_and_reentrant_within_one(
    tmp_path: Path,
) -> None:
    """A dir's writer lock: another process holding it makes a non-waiting caller get False;
    the holder may take it again (a dream pass runs index passes); released on exit."""
    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    with lock_held_elsewhere(tmp_path, folder), store.lock(folder, wait=False) as got:
        assert got is False
    with store.lock(folder, wait=False) as got:
        assert got is True
        with store.lock(folder, wait=False) as again:
            assert again is True
    with store.lock(tmp_path / "other", wait=False) as got:
        assert got is True


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files in /proc")
def test_reading_opens_the_readers_file_once_however_passes_nest(tmp_path: Path) -> None:
    """A daemon pairs the readers file's opens and closes, and repeated identical events are
    merged on their way to it: a pass inside a pass (the dream's probe, say) must not open
    the file a second time."""
    store = StateStore(tmp_path / "state")
    real = tmp_path / "memory"
    store.root.mkdir(parents=True)
    store.readers_path(real).touch()

    def opened() -> int:
        fds = Path("/proc/self/fd")
        target = str(store.readers_path(real))
        return sum(1 for fd in fds.iterdir() if _link(fd) == target)

    with store.reading(real):
        assert opened() == 1
        with store.reading(real), store.reading(real):
            assert opened() == 1
        assert opened() == 1
    assert opened() == 0
    with store.reading(real):  # and again afterwards
        assert opened() == 1
    assert opened() == 0


def _link(fd: Path) -> str:
    try:
        return str(fd.readlink())
    except OSError:
        return ""


def test_the_scan_cache_is_saved_without_fsyncs(tmp_path: Path, monkeypatch) -> None:
    """The parse cache is a cache: the previous one after a power cut is still true entry by
    entry (scan checks each against its file's stat), a damaged one is read as none. Its
    fsyncs (a 2 MB file at 10,000 memories) were most of a one-change `memoryd index`; the old
    store made two per save. A fresh store reads back what was saved."""
    from memoryd.indexing.scan import Scanned

    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    files = {"a.md": Scanned("a.md", 1, 2, 3, "memory", "f" * 64, "a", "about a")}
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    store.save_cache(folder, files)
    assert synced == []
    assert StateStore(tmp_path).load_cache(folder) == files


# --- damaged state: special files, links, sizes (DESIGN §2.7) -----------------------------------
def _all_state_files(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A dir with every state file memoryd keeps for it (base, log, cache, facts, readers, a
    repo's tokens), and the store's paths of each."""
    store, folder, state = saved_once(tmp_path, 3)
    state.seen["m1.md"] = ["m1", "second"]
    store.save(folder, state, seen_changed={"m1.md"})  # the log
    store.save_cache(folder, {})
    store.save_facts(folder, [b"facts"])
    store.save_repo_tokens(folder, b"tokens")
    store.readers_path(folder).touch()
    root = tmp_path / "dirs"
    files = {
        "base": next(root.glob("*.json")),
        "log": next(root.glob("*.log")),
        "cache": next(root.glob("*.cache")),
        "facts": next(root.glob("*.facts")),
        "readers": store.readers_path(folder),
        "tokens": next((tmp_path / "repos").glob("*.tokens")),
    }
    return folder, files


def _use_every_file(store: StateStore, folder: Path) -> tuple[DirState, object, object, object]:
    with store.reading(folder):
        pass
    return (
        store.load(folder),
        store.load_cache(folder),
        store.load_facts(folder),
        store.load_repo_tokens(folder),
    )


@pytest.mark.timeout(30)  # the old code waited on the FIFO for ever
@pytest.mark.parametrize("kind", ["fifo", "symlink", "oversize"])
def test_a_state_file_that_is_no_regular_file_is_damaged_state_said_once(
    tmp_path: Path, kind: str
) -> None:
    """Each state file replaced by a FIFO, a symlink to a copy of itself, or a sparse file
    over STATE_MAX_BYTES: none is waited on, followed or read; each counts as damaged (a fresh
    state, no cache) and is said once however often it is met. The old code blocked on the
    FIFO, followed the link and read the big file whole."""
    folder, files = _all_state_files(tmp_path)
    for name, path in files.items():
        if name == "log":
            continue  # met only while the base is good: below
        copy = path.with_name(path.name + ".copy")
        path.rename(copy)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            path.symlink_to(copy)
        else:
            with path.open("wb") as big:
                big.truncate(STATE_MAX_BYTES + 1)
    said: list[tuple[Path, str]] = []
    store = StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why)))
    state, cache, facts, tokens = _use_every_file(store, folder)
    assert state == DirState(path=str(folder)) and cache == {}
    assert facts is None and tokens is None
    _use_every_file(store, folder)
    unread = {"log"} | ({"readers"} if kind == "oversize" else set())  # held open, never read
    assert sorted(p for p, _ in said) == sorted(p for n, p in files.items() if n not in unread)
    assert all(why.startswith("it is ") for _, why in said)
    store.save(folder, DirState(path=str(folder), seen=seen_of(1)))  # replaces the damaged base
    assert StateStore(tmp_path).load(folder).seen == seen_of(1)


@pytest.mark.timeout(30)
def test_a_fifo_as_the_state_log_is_done_without_and_replaced(tmp_path: Path) -> None:
    """A FIFO as the base's log: the base alone is loaded, said once, and the next save writes
    the base whole (removing the FIFO) instead of appending into it."""
    folder, files = _all_state_files(tmp_path)
    files["log"].unlink()
    os.mkfifo(files["log"])
    said: list[tuple[Path, str]] = []
    store = StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why)))
    state = store.load(folder)
    assert state.seen == seen_of(3) and said == [
        (files["log"], "it is a FIFO (named pipe), not a regular file")
    ]
    state.seen["m2.md"] = ["m2", "after"]
    store.save(folder, state, seen_changed={"m2.md"})
    assert not files["log"].exists() and StateStore(tmp_path).load(folder) == state
