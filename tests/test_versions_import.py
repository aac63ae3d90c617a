"""An older memoryd's version store (files under `<state>/versions/`: loose objects, packs,
per-dir logs, ledgers of own writes, alarms, retention records, the trash's clock file) is
taken into `state.sqlite` once, nothing lost, and its files removed; an import killed at any
step finishes at the next start. Lines memoryd never wrote in an old log are never used."""

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memoryd.storage.statedb import PAGE_SIZE, StateDamaged, forget_shared
from memoryd.versions import importer, kept, listing, prune, witness
from memoryd.versions.records import deleted_id
from tests import oldstore
from tests.conftest import Env
from tests.conftest import write_lesson as _mem
from tests.helpers import memoryd_child

V1 = b"---\nname: a\ndescription: a lesson\ntype: feedback\n---\nfirst version\n"
V2 = b"---\nname: a\ndescription: a lesson\ntype: feedback\n---\nsecond version\n"
B = b"---\nname: b\ndescription: b lesson\ntype: feedback\n---\ndeleted by an agent\n"


def _old_layout(env: Env) -> tuple[Path, str]:
    """A dir whose a.md had two versions (one loose, one packed) and whose b.md an agent
    deleted (its bytes in the pack), as the old store kept them; the deletion's id."""
    folder = env.home / "mem"
    folder.mkdir()
    folder = folder.resolve()
    (folder / "a.md").write_bytes(V2)
    state = env.state
    oldstore.loose(state, V1)
    oldstore.pack(state, [V2, B])
    rows = [
        oldstore.row(10.0, "a.md", V1, "seen"),
        oldstore.row(10.0, "b.md", B, "seen"),
        oldstore.row(20.0, "a.md", V2, "seen", alarm=1),
        oldstore.row(30.0, "b.md", B, "gone", alarm=1),
    ]
    oldstore.log(state, folder, rows)
    alarm = {"dir": str(folder), "t": 30.0, "deleted": 1, "rewritten": 1}
    oldstore.extras(state, folder, [(oldstore.sha(V2), "MEMORY.md")], [alarm])
    return folder, deleted_id(folder, "b.md", 30.0)


def _imported(env: Env, folder: Path, restore_id: str) -> None:
    """Every version of the old layout is in the store and restorable; its files are gone."""
    store = kept.VersionStore(env.state)
    found = listing.versions_of(store, folder, "a.md")
    assert [(v.sha256, v.stored) for v in found] == [
        (oldstore.sha(V1), True),
        (oldstore.sha(V2), True),
    ]
    assert store.read_object(oldstore.sha(V1)) == V1
    assert store.read_object(oldstore.sha(V2)) == V2
    assert [(d.id, d.name) for d in listing.deleted(store, folder)] == [(restore_id, "b.md")]
    assert store._own_wrote(folder, "MEMORY.md", oldstore.sha(V2))
    assert kept.alarms(store)[0]["dir"] == str(folder)
    assert witness.read_record(env.state)["witnessed"] == 42.0
    assert oldstore.present(env.state) == []


def test_an_older_store_is_imported_once_and_every_version_restores(env: Env, cli: Any) -> None:
    folder, restore_id = _old_layout(env)
    listed = cli("trash", "list", folder, "--json")
    assert listed.code == 0, listed.err
    assert [d["id"] for d in json.loads(listed.out)["deleted_outside"]] == [restore_id]
    _imported(env, folder, restore_id)
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err
    assert (folder / "b.md").read_bytes() == B
    restored = cli("history", folder / "a.md", "--restore", "1")
    assert restored.code == 0, restored.err
    assert (folder / "a.md").read_bytes() == V1


def test_an_import_killed_at_each_step_loses_nothing_and_finishes_at_the_next_start(
    env: Env,
) -> None:
    """kill -9 at every step of the import (before its commit, after it, between the
    removals): the next start finds every version, and the old files end up removed."""
    folder, restore_id = _old_layout(env)
    for k in range(1, 40):
        child = memoryd_child(env, "trash", "list", folder, crash_at=f"{k}:versions.import")
        if child.returncode == 0:
            break
        assert child.returncode == -9, child.stderr
        left = oldstore.present(env.state)
        assert "versions/logs" in left or k > 1  # killed before the commit: nothing removed
    else:
        pytest.fail("the import never finished")
    assert k > 3  # the commit and the removals are steps of their own
    forget_shared()
    _imported(env, folder, restore_id)


def test_a_log_line_nested_past_jsons_depth_is_skipped_not_a_crash(env: Env, cli: Any) -> None:
    """An old log's line of `[` (and one of `{"a":` pairs) just under the line limit: json
    raises RecursionError, not ValueError. The line is skipped like any invalid one: the
    deletion before it is still listed and restored."""
    folder, restore_id = _old_layout(env)
    deep = '{"a":' * ((65536 - 10) // 5)
    rows = [oldstore.row(10.0, "b.md", B, "seen"), oldstore.row(30.0, "b.md", B, "gone")]
    oldstore.log(env.state, folder, rows, "[" * (65536 - 10) + "\n" + deep + "\n")
    _mem(folder, "c.md", "a new lesson")
    indexed = cli("index", folder)
    assert indexed.code == 0, indexed.err
    assert cli("history", folder / "a.md").code == 0
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err
    assert (folder / "b.md").read_bytes() == B


def test_old_log_lines_no_memoryd_wrote_are_never_used(env: Env, cli: Any) -> None:
    """Lines planted in an old log: a name with a lone surrogate, one with a NUL, a sha256
    that is a path, a NaN time, a negative size, a nested extra field. None is imported;
    the real deletion is listed and restores."""
    folder, restore_id = _old_layout(env)
    sha = oldstore.sha(b"planted")
    oldstore.loose(env.state, b"planted")
    planted = [
        {"t": 1.0, "f": "\ud800x.md", "h": sha, "n": 7, "e": "seen", "by": "other"},
        {"t": 1.0, "f": "nul\u0000.md", "h": sha, "n": 7, "e": "seen", "by": "other"},
        {"t": 2.0, "f": "nul\u0000.md", "h": sha, "n": 7, "e": "gone", "by": "other"},
        {"t": 2.0, "f": "path.md", "h": "/etc/hostname", "n": 7, "e": "gone", "by": "other"},
        {"t": float("nan"), "f": "nan.md", "h": sha, "n": 7, "e": "gone", "by": "other"},
        {"t": 2.0, "f": "neg.md", "h": sha, "n": -7, "e": "gone", "by": "other"},
    ]
    rows = [oldstore.row(10.0, "b.md", B, "seen"), oldstore.row(30.0, "b.md", B, "gone")]
    rows.append({**oldstore.row(31.0, "x.md", B, "gone"), "to": {"deep": [1]}})
    oldstore.log(env.state, folder, rows, "".join(json.dumps(r) + "\n" for r in planted))
    text = cli("trash", "list", folder, "--json")
    assert text.code == 0 and "Traceback" not in text.err, text.err
    ids = [d["id"] for d in json.loads(text.out)["deleted_outside"]]
    assert ids == [restore_id, deleted_id(folder, "x.md", 31.0)]  # no nested field kept
    assert "has kept no version of it" in cli("history", folder / "path.md").out
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err


def test_a_planted_logs_first_line_names_no_dir(env: Env, cli: Any) -> None:
    """Old logs whose first line names a dir with a lone surrogate, a relative dir, or a dir
    that is not the one the log's name is the key of: none is imported as a known dir; the
    real deletion lists and restores, and a prune runs."""
    folder, restore_id = _old_layout(env)
    logs = oldstore.root(env.state) / "logs"
    for i, named in enumerate(["/tmp/\ud800", "relative/dir", str(env.home)]):
        (logs / f"planted{i}.jsonl").write_text(json.dumps({"dir": named}) + "\n")
    store = kept.VersionStore(env.state)
    assert store.known_dirs() == [folder]
    assert cli("trash", "list").code == 0
    prune.prune(store)
    back = cli("trash", "restore", restore_id)
    assert back.code == 0, back.err
    assert (folder / "b.md").read_bytes() == B


def test_a_truncated_pack_imports_what_is_whole_and_the_file_is_stored_again(
    env: Env, cli: Any
) -> None:
    """An old pack cut short: its index is gone, so nothing of it is taken for a version;
    the current version it held is stored again from the file by the next prune."""
    _old_layout(env)
    (pack,) = (oldstore.root(env.state) / "packs").glob("*.pack")
    os.truncate(pack, pack.stat().st_size - 10)
    store = kept.VersionStore(env.state)
    assert not store.has_object(oldstore.sha(V2))
    assert prune.prune(store).repaired == 1
    assert store.read_object(oldstore.sha(V2)) == V2


@pytest.mark.parametrize("damage", ["fifo", "garbage"])
def test_a_damaged_state_store_is_state_damaged_and_the_command_says_so(
    env: Env, damage: str
) -> None:
    """`state.sqlite` a FIFO, or bytes that are no SQLite file: no command hangs or drops
    kept versions in silence (nor makes a new store over them); each says the store is
    damaged, naming the file and what to do."""
    folder = env.home / "mem"
    folder.mkdir()
    _mem(folder, "a.md", "a lesson")
    env.state.mkdir(parents=True, exist_ok=True)
    db = env.state / "state.sqlite"
    if damage == "fifo":
        os.mkfifo(db)
        why = "not a regular file"
    else:
        db.write_bytes(b"kept versions, damaged " * 1000)
        why = "not a readable SQLite file"
    forget_shared()
    with pytest.raises(StateDamaged, match=why):
        kept.VersionStore(env.state).conn()
    for args in (("history", folder / "a.md"), ("trash", "list", folder)):
        child = memoryd_child(env, *args, timeout=30)
        assert child.returncode != 0 and "Traceback" not in child.stderr, child.stderr
        assert "state.sqlite" in child.stderr and why in child.stderr, child.stderr
        assert "move the file aside" in child.stderr
    if damage == "garbage":
        assert db.read_bytes() == b"kept versions, damaged " * 1000


def test_a_damaged_page_among_the_kept_bytes_is_named_by_history_and_trash_list(
    env: Env, cli: Any
) -> None:
    """Damage the first open's check leaves to be met (the kept versions' bytes: their
    index here), met by a read-only command's lookup of whether a version's bytes are kept
    (`has_object`): the named error, naming the file and what to do, exit code 1, no
    traceback; the state file and the memory dir are left as they were."""
    folder = env.home / "mem"
    folder.mkdir()
    _mem(folder, "a.md", "a lesson")
    _mem(folder, "b.md", "an agent deletes it")
    assert cli("index", folder).code == 0
    (folder / "b.md").unlink()
    assert cli("index", folder).code == 0  # b.md recorded as deleted outside memoryd
    forget_shared()
    db = env.state / "state.sqlite"
    with sqlite3.connect(db) as conn:
        sql = "SELECT rootpage FROM sqlite_schema WHERE name = ?"
        root = conn.execute(sql, ("sqlite_autoindex_versions_objects_1",)).fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * PAGE_SIZE)
        f.write(b"\xff" * 16)
    before, files = db.read_bytes(), sorted(os.listdir(folder))
    for args in (("history", folder / "a.md"), ("trash", "list", folder)):
        child = memoryd_child(env, *args, timeout=30)
        assert child.returncode == 1 and "Traceback" not in child.stderr, child.stderr
        assert f"memoryd: {db}: memoryd's state store is damaged" in child.stderr, child.stderr
        assert "move the file aside" in child.stderr
    assert db.read_bytes() == before and sorted(os.listdir(folder)) == files


def test_the_importer_has_nothing_to_do_without_an_old_layout(env: Env) -> None:
    env.state.mkdir(parents=True, exist_ok=True)
    store = kept.VersionStore(env.state)
    store.conn()
    assert store.known_dirs() == []
    assert env.state not in importer._done or oldstore.present(env.state) == []
