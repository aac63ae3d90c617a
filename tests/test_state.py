"""Per-dir state in the state store: a save writes only what changed, a fresh store reads it,
a held copy is trusted only while its row is unchanged, and damage is named."""

import os
import sqlite3
from pathlib import Path

import pytest

from memoryd.storage.state import DirState, StateStore
from memoryd.storage.statedb import StateDamaged, forget_shared
from tests.conftest import Env, lock_held_elsewhere
from tests.helpers import memoryd_child


def seen_of(n: int) -> dict[str, list[str]]:
    return {f"m{i}.md": [f"m{i}", f"description {i}"] for i in range(n)}


def saved_once(tmp_path: Path, n: int, *, known: bool = False) -> tuple[StateStore, Path, DirState]:
    """A store under tmp_path, a dir's state with `n` seen files, saved once (whole)."""
    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    state = DirState(path=str(folder), known=known, seen=seen_of(n))
    store.save(folder, state)
    return store, folder, state


def rows_written(store: StateStore) -> int:
    """Rows this process's connection has inserted, updated or deleted so far."""
    return store.db().connection().total_changes


def fresh(tmp_path: Path) -> StateStore:
    """A store as another process has it: its own connection, nothing held."""
    forget_shared()
    return StateStore(tmp_path)


def test_a_save_of_one_changed_file_writes_its_rows_instead_of_rewriting(tmp_path: Path) -> None:
    """After the first save, changing one file's entry writes that entry's rows and the dir's
    row, not the 2,000 others."""
    store, folder, state = saved_once(tmp_path, 2000, known=True)
    before = rows_written(store)
    state.seen["m7.md"] = ["m7", "changed"]
    del state.seen["m8.md"]
    state.last_index_ts = 12.5
    store.save(folder, state, seen_changed={"m7.md", "m8.md"})
    assert rows_written(store) - before <= 4
    assert oct(os.stat(tmp_path / "state.sqlite").st_mode & 0o777) == "0o600"  # private (§2.8)
    assert fresh(tmp_path).load(folder) == state  # a fresh process sees it


def test_memoryds_own_lines_are_saved_per_name_and_read_by_a_fresh_store(tmp_path: Path) -> None:
    """The record of memoryd's own pointer lines (DirState.own) is written per name, as `seen`
    is: a save after one new pointer writes a few rows, even at 2,000 records; a change
    beyond the names announced writes the state whole instead."""
    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    own = {f"m{i}.md": f"{i:016x}" for i in range(2000)}
    state = DirState(path=str(folder), known=True, seen=seen_of(2000), own=own)
    store.save(folder, state)
    before = rows_written(store)
    state.seen["new.md"] = ["new", "d"]
    state.own["new.md"] = "00ff00ff00ff00ff"
    del state.own["m3.md"]  # its line went (the agent rewrote it)
    store.save(folder, state, seen_changed={"new.md"}, own_changed={"new.md", "m3.md"})
    assert rows_written(store) - before <= 4
    assert StateStore(tmp_path).load(folder) == store.load(folder) == state  # a restart
    del state.own["m4.md"]  # not announced: the count shows it
    before = rows_written(store)
    store.save(folder, state, seen_changed=set(), own_changed={"m5.md"})
    assert rows_written(store) - before > 2000
    assert StateStore(tmp_path).load(folder) == state
    state.own["m6.md"] = "2222222222222222"  # own_changed unsaid: seen_changed's names
    store.save(folder, state, seen_changed={"m6.md"})
    assert fresh(tmp_path).load(folder).own["m6.md"] == "2222222222222222"


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


def test_a_save_per_name_leaves_the_held_copy_equal_to_what_a_new_store_reads(
    tmp_path: Path,
) -> None:
    """A save with `seen_changed` updates the store's own copy from the change it wrote: the
    next load from memory and a load by another process agree, and a caller mutating its
    state afterwards does not reach into the store."""
    store, folder, state = saved_once(tmp_path, 50)
    state.seen["m3.md"] = ["m3", "changed"]
    state.seen.pop("m4.md")
    state.seen["new.md"] = ["new", "d"]
    state.reported["x"] = "1"
    state.changed_since_dream.append("new.md")
    before = rows_written(store)
    store.save(folder, state, seen_changed={"m3.md", "m4.md", "new.md"})
    assert rows_written(store) - before <= 4  # per name, not rewritten
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


def test_the_scan_cache_is_read_back_and_held_while_its_row_is_unchanged(tmp_path: Path) -> None:
    """The parse cache is a cache: a fresh store reads back what was saved; the store that
    saved it hands out its own copy until another process saves a new one."""
    from memoryd.model.scanned import Scanned

    store = StateStore(tmp_path)
    folder = tmp_path / "memory"
    files = {"a.md": Scanned("a.md", 1, 2, 3, "memory", "f" * 64, "a", "about a")}
    store.save_cache(folder, files)
    assert store.load_cache(folder) is files
    other = StateStore(tmp_path)
    assert other.load_cache(folder) == files
    newer = {"b.md": Scanned("b.md", 4, 5, 6, "memory", "e" * 64, "b", "about b")}
    other.save_cache(folder, newer)
    assert store.load_cache(folder) == newer


@pytest.mark.timeout(30)  # a FIFO opened for reading would wait for ever
@pytest.mark.parametrize("kind", ["fifo", "directory", "garbage"])
def test_a_state_store_that_cannot_be_used_is_named_damage(tmp_path: Path, kind: str) -> None:
    """A FIFO, a folder or bytes SQLite cannot read in state.sqlite's place: loading a dir's
    state is StateDamaged naming the file, never a fresh state in silence."""
    forget_shared()
    path = tmp_path / "state.sqlite"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"someone's bytes, not a database" * 300)
    with pytest.raises(StateDamaged, match="move the file aside") as caught:
        StateStore(tmp_path).load(tmp_path / "memory")
    assert str(path) in str(caught.value)
    forget_shared()


def test_the_caches_are_dropped_and_rebuilt_when_their_format_changes(tmp_path: Path) -> None:
    """A cache table of another version is made again (empty: rebuilt from the dirs); the
    dirs' state in the same file stays."""
    store, folder, state = saved_once(tmp_path, 3)
    store.save_facts(folder, [b"facts"])
    conn = sqlite3.connect(tmp_path / "state.sqlite")
    with conn:
        conn.execute("UPDATE schemas SET version = 0 WHERE name = 'cache'")
    conn.close()
    again = fresh(tmp_path)
    assert again.load_facts(folder) is None and again.load(folder) == state


# --- the files of the old layout, imported once -------------------------------------------------
def _old_layout(state_dir: Path, folder: Path) -> dict[str, Path]:
    """Every file the old store wrote for a dir, as it wrote them: the base state (generation
    1) with its log (lines of foreign shapes, a torn last line) and an older generation's log,
    the caches, the repo's tokens, the acknowledgements, the restore pins, the trash's day
    folders as seen, a refused plan and the refused links said."""
    import json

    from memoryd.storage.state import dir_key

    key = dir_key(folder)
    dirs = state_dir / "dirs"
    dirs.mkdir(parents=True)
    base = {"path": str(folder), "known": True, "seen": seen_of(3), "own": {"m0.md": "ab" * 8},
            "reported": {"x": "1"}, "reads": {"m0.md": 5.0}, "last_dream_ts": 7.0,
            "_log": 1}  # fmt: skip
    files = {"base": dirs / f"{key}.json", "log": dirs / f"{key}.1.log"}
    files["base"].write_text(json.dumps(base))
    files["log"].write_text(
        '{"seen":{"m1.md":["m1","logged"],"m2.md":null},"own":{},"set":{"last_index_ts":3.5}}\n'
        '{"seen":[1],"own":"x","set":[2]}\n{"seen":{"m9.md":[["not"],"a title"]}}\n'
        '{"seen":{"m0.md":["m0","tor'
    )
    files["old log"] = dirs / f"{key}.0.log"
    files["old log"].write_text('{"seen":{"m0.md":["m0","older"]},"own":{},"set":{}}\n')
    for suffix in ("cache", "facts", "held", "readers"):
        files[suffix] = dirs / f"{key}.{suffix}"
        files[suffix].write_bytes(b"\\x00old cache")
    when = "2026-11-30T10:00:00+01:00"
    ack = {"file": "half.md", "sha256": "a" * 64, "refs": "b" * 32, "time": when}
    files["acked"] = dirs / f"{key}.acked"
    files["acked"].write_text(json.dumps([ack, {**ack, "file": "other.md"}]))
    pin = {"file": "kept.md", "sha256": "d" * 64, "time": when, "id": "0123456789"}
    files["pins"] = dirs / f"{key}.restored"
    files["pins"].write_text(json.dumps([pin, {**pin, "file": "newer.md", "id": "9876543210"}]))
    days = {
        "2026-11-01": {"identity": [1, 2, 3, 4, 5, 6], "since": 86400.5},
        "2026-11-02": {"identity": [], "since": 99.0},
        "2026-11-03": "not a day",
    }
    files["days"] = dirs / f"{key}.trash-days.json"
    files["days"].write_text(json.dumps({"days": days, "reported": {"2026-11-02": "no manifest"}}))
    (state_dir / "refused").mkdir()
    pass_id = "20261130T100000-abcdef"
    plan = {"pass_id": pass_id, "dir": str(folder), "time": when,
            "moves": [{"filename": "stale.md", "sha256": "c" * 64, "reason": "stale"}],
            "files": {"stale.md": "c" * 64}}  # fmt: skip
    files["plan"] = state_dir / "refused" / f"{key}.{pass_id}.json"
    files["plan"].write_text(json.dumps(plan))
    (state_dir / "repos").mkdir()
    files["tokens"] = state_dir / "repos" / f"{key}.tokens"
    files["tokens"].write_bytes(b"tokens")
    files["links"] = state_dir / "refused-links.json"
    files["links"].write_text(json.dumps(LINKS, indent=1, sort_keys=True))
    return files


LINKS = {"/repo/.claude/agent-memory/notes": "/vault/notes", "/home/.claude/memo": "/elsewhere"}


def said_links(state_dir: Path) -> dict[str, str]:
    """The refused links said, as the state store holds them (none: no table)."""
    from memoryd.discover.finder import REFUSED
    from memoryd.storage.statedb import StateDB

    conn = StateDB.in_state_dir(state_dir).reader(REFUSED)
    return dict(conn.execute("SELECT link, target FROM refused_link")) if conn else {}


def test_the_old_files_are_imported_once_and_removed(tmp_path: Path) -> None:
    """On first start the old state (base and its log, the torn line and the older log
    skipped), the acknowledgements, the restore pins (oldest first), the trash's day folders
    (one of another shape left out), the refused plan and the refused links said are imported
    in one go and every old file goes; the caches are dropped, not imported; the read events
    are not carried over."""
    from memoryd.commands import legacy
    from memoryd.dream import acked, refused
    from memoryd.trash import days, restored

    forget_shared()
    folder = tmp_path / "memory"
    files = _old_layout(tmp_path, folder)
    store = StateStore(tmp_path)
    legacy.import_once(store)
    state = fresh(tmp_path).load(folder)
    assert state.seen == {"m0.md": ["m0", "description 0"], "m1.md": ["m1", "logged"]}
    assert state.own == {"m0.md": "ab" * 8} and state.reported == {"x": "1"}
    assert (state.known, state.last_dream_ts, state.last_index_ts) == (True, 7.0, 3.5)
    assert [a.file for a in acked.load(store, folder)] == ["half.md", "other.md"]
    assert [(p.file, p.id) for p in restored.load(store, folder)] == [
        ("kept.md", "0123456789"), ("newer.md", "9876543210")
    ]  # fmt: skip
    assert days.watched(store, folder) == {
        "2026-11-01": ("1 2 3 4 5 6", 86400.5, ""),
        "2026-11-02": ("", 99.0, "no manifest"),
    }
    plan = refused.load(tmp_path, folder, "20261130T100000-abcdef")
    assert [m.filename for m in plan.as_moves()] == ["stale.md"]
    assert said_links(tmp_path) == LINKS
    assert store.load_cache(folder) == {} and store.load_facts(folder) is None
    assert [name for name, path in files.items() if path.exists()] == []
    assert not legacy.pending(tmp_path)


def test_an_acknowledgement_file_that_cannot_be_read_is_left_in_place(tmp_path: Path) -> None:
    """A person's record the import cannot read (here a FIFO, never waited on) is not removed:
    it is said, and stays for a person to look at; the rest is imported."""
    from memoryd.commands import legacy

    forget_shared()
    folder = tmp_path / "memory"
    files = _old_layout(tmp_path, folder)
    files["acked"].unlink()
    os.mkfifo(files["acked"])
    said: list[tuple[Path, str]] = []
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why))))
    assert said == [(files["acked"], "it is a FIFO (named pipe), not a regular file")]
    assert files["acked"].exists() and not files["base"].exists()
    assert fresh(tmp_path).load(folder).seen["m1.md"] == ["m1", "logged"]


@pytest.mark.parametrize(
    "text", ["[" * 100_000, '[{"file": "a.md"}]', "{}"], ids=["nested", "no-bytes", "not-a-list"]
)
def test_a_pins_file_that_cannot_be_parsed_is_left_in_place_and_named(
    tmp_path: Path, text: str
) -> None:
    """A person's restore pins the import cannot take (nested past JSON's depth, a pin
    without its bytes, not a list) are not removed, nor read as no pins: the file is named
    and stays for a person to look at, the rest is imported; the next start says it again."""
    from memoryd.commands import legacy
    from memoryd.trash import restored

    forget_shared()
    folder = tmp_path / "memory"
    files = _old_layout(tmp_path, folder)
    files["pins"].write_text(text)
    said: list[tuple[Path, str]] = []
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why))))
    assert [p for p, _ in said] == [files["pins"]]
    assert files["pins"].read_text() == text and not files["acked"].exists()
    assert restored.load(fresh(tmp_path), folder) == []
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why))))
    assert [p for p, _ in said] == [files["pins"]] * 2


@pytest.mark.parametrize(
    "text", ["[" * 100_000, '{"/a/link": 1}', "[]"], ids=["nested", "no-target", "not-a-map"]
)
def test_a_refused_links_file_that_cannot_be_parsed_is_left_in_place_and_named(
    tmp_path: Path, text: str
) -> None:
    """An older memoryd's record of the refused links said, damaged (nested past JSON's
    depth, a target that is no path, not a mapping): named and left where it is, nothing of
    it imported (its links are said again), the rest imported; the next start says it again."""
    from memoryd.commands import legacy

    forget_shared()
    files = _old_layout(tmp_path, tmp_path / "memory")
    files["links"].write_text(text)
    said: list[tuple[Path, str]] = []
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why))))
    assert [p for p, _ in said] == [files["links"]]
    assert files["links"].read_text() == text and not files["pins"].exists()
    assert said_links(tmp_path) == {} and legacy.pending(tmp_path)
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: said.append((p, why))))
    assert [p for p, _ in said] == [files["links"]] * 2


def test_an_import_killed_after_its_commit_adds_nothing_twice_at_the_next_start(
    env: Env,
) -> None:
    """kill -9 between the import's commit and its removals leaves the old files with their
    rows in; the next start imports them again and adds nothing twice: a pin the store has
    for the same name or trash id (the same, or one recorded since) stays, newer ones stay
    newer, a link's target said since stays, and the files go."""
    from memoryd.commands import legacy
    from memoryd.trash import days, restored

    folder = env.home / "memory"
    files = _old_layout(env.state, folder)
    killed = memoryd_child(env, "trash", "list", crash_at="1:legacy.removing")
    assert killed.returncode == -9, killed.stderr
    assert all(path.exists() for path in files.values())  # nothing removed
    store = fresh(env.state)
    before = restored.load(store, folder), days.watched(store, folder)
    assert [p.file for p in before[0]] == ["kept.md", "newer.md"] and len(before[1]) == 2
    late = restored.Pin("late.md", "e" * 64, "2026-12-01T10:00:00+01:00", "5555555555")
    restored.record(store, folder, late)
    assert said_links(env.state) == LINKS
    with store.db().transaction() as tx:  # said again since, with its new target
        tx.execute("UPDATE refused_link SET target = '/moved' WHERE link = '/home/.claude/memo'")
    again = memoryd_child(env, "trash", "list")
    assert again.returncode == 0, again.stderr
    store = fresh(env.state)
    assert restored.load(store, folder) == [*before[0], late]
    assert days.watched(store, folder) == before[1]
    assert said_links(env.state) == {**LINKS, "/home/.claude/memo": "/moved"}
    assert [name for name, path in files.items() if path.exists()] == []
    assert not legacy.pending(env.state)


def test_an_unfinished_passs_old_journal_is_imported_for_recovery(tmp_path: Path) -> None:
    """An old journal file (intent, a move made, a torn line) becomes the store's journal, so
    that recovery finishes that pass; a committed one is dropped, one whose intent does not
    parse is left for a person."""
    import json

    from memoryd.commands import legacy
    from memoryd.trash import journal

    forget_shared()
    folder = tmp_path / "journal"
    folder.mkdir()
    move = {"id": "r1", "original_name": "stale.md", "stored_name": "stale.md.trashed",
            "day": "2026-11-30", "sha256": "c" * 64, "size": 3, "reason": "stale",
            "pass_id": "p-open", "time": "2026-11-30T10:00:00+01:00"}  # fmt: skip
    intent = {"intent": "p-open", "dir": str(tmp_path / "memory"), "moves": [move]}
    (folder / "p-open.jsonl").write_text(json.dumps(intent) + '\n{"done": "r1"}\n{"done": "r')
    closed = {**intent, "intent": "p-closed"}
    (folder / "p-closed.jsonl").write_text(json.dumps(closed) + '\n{"commit": "p-closed"}\n')
    (folder / "bad.jsonl").write_text("not json\n")
    legacy.import_once(StateStore(tmp_path, on_damaged=lambda p, why: None))
    assert journal.pending(tmp_path) == ["p-open"]
    entry = journal.load(tmp_path, "p-open")
    assert entry is not None and entry.done == {"r1"}
    assert [m.original_name for m in entry.moves] == ["stale.md"]
    assert sorted(p.name for p in folder.iterdir()) == ["bad.jsonl"]


def test_the_old_consult_evidence_is_imported(tmp_path: Path) -> None:
    """An old served log (consults/mcp-<key>.jsonl, a torn last line) becomes the store's
    rows: the consult guard finds the memory it named; the transcripts' offsets and evidence
    (consults/transcripts.json) are imported too, an entry of another shape dropped."""
    import json

    from memoryd.commands import legacy
    from memoryd.dream import consults, transcripts
    from memoryd.dream.consult import Subject
    from memoryd.storage.state import dir_key

    forget_shared()
    folder = tmp_path / "memory"
    served = tmp_path / "consults"
    served.mkdir()
    old = served / f"mcp-{dir_key(folder)}.jsonl"
    row = '{"names": ["pay.md"], "query": "payments", "tool": "read_memory", "ts": "%s"}\n'
    old.write_text(row % "2026-11-30T10:00:00Z" + '{"names": ["to')
    scan = {"files": {"p/s.jsonl": [1, 2, 300, 250, 0], "p/bad.jsonl": ["x"]},
            "dirs": {str(folder): {"a.md": [1e9, "sess", "Read", "p/s.jsonl"]}}}  # fmt: skip
    (served / "transcripts.json").write_text(json.dumps(scan))
    legacy.import_once(StateStore(tmp_path))
    log = consults.served(tmp_path, folder)
    assert log is not None and log.evidence(Subject("pay.md", "pay"), since=0) is not None
    found = transcripts.load(tmp_path)
    assert found.files == {"p/s.jsonl": [1, 2, 300, 250, 0]}
    assert found.evidence_for(folder)["a.md"].session == "sess"
    assert not old.exists() and not (served / "transcripts.json").exists()


def test_a_save_that_changes_nothing_holds_the_callers_texts_not_a_second_copy(
    tmp_path: Path,
) -> None:
    """A restarted daemon's first pass rebuilds `seen` from its scan, equal to what the store
    read from the file: the save writes nothing, and the store then holds the pass's strings
    (which its scan holds too) instead of the file's equal copies (~3 MB at 10,000)."""
    _, folder, _ = saved_once(tmp_path, 30)
    store = fresh(tmp_path)
    state = store.load(folder)
    rebuilt = {n: ["".join(list(t)), "".join(list(d))] for n, (t, d) in state.seen.items()}
    assert rebuilt == state.seen and rebuilt["m1.md"][1] is not state.seen["m1.md"][1]
    state.seen = rebuilt
    token = store.seen_token(folder)
    before = rows_written(store)
    store.save(folder, state)
    assert rows_written(store) == before  # nothing written
    again = store.load(folder)
    assert again.seen["m1.md"][1] is rebuilt["m1.md"][1]
    assert again == fresh(tmp_path).load(folder)
    assert store.seen_token(folder) is token
    state.seen["m1.md"] = ["m1", "the caller's own change"]  # never reaches the store
    assert store.load(folder).seen["m1.md"] == ["m1", "description 1"]
