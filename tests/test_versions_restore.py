"""Restores from the version store that fail or are cut short: `trash restore ID` of a file
deleted outside memoryd and `history FILE --restore N` leave what was restorable restorable,
say which file and what to do, and leave the log and the pins as the dir really is."""

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.indexing.scan import scan_dir
from memoryd.storage import fsops
from memoryd.storage.statedb import forget_shared
from memoryd.trash import restored
from memoryd.versions import kept, listing, prune, records
from tests.conftest import Env, InjectedCrash, crash_at, lock_held_elsewhere
from tests.conftest import write_lesson as _mem
from tests.helpers import home_folder, wait_for

LIMIT = 100_000  # RLIMIT_FSIZE of the restoring process: the memory is bigger, all else smaller


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _full_disk(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`memoryd ARGS` in a process that cannot write a file past LIMIT bytes (EFBIG, as a
    full disk's ENOSPC: Python ignores SIGXFSZ)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "memoryd", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=limit,
    )


def _deleted_ids(cli: Any, folder: Path) -> list[str]:
    doc = json.loads(cli("trash", "list", folder, "--json").out)
    return [d["id"] for d in doc["deleted_outside"]]


def _deleted_big(env: Env, cli: Any) -> tuple[Path, bytes, str]:
    folder = home_folder(env)
    _mem(folder, "a.md", "a small lesson")
    big = _mem(folder, "big.md", "x" * (2 * LIMIT))
    assert cli("index", folder).code == 0
    (folder / "big.md").unlink()
    assert cli("index", folder).code == 0
    (restore_id,) = _deleted_ids(cli, folder)
    return folder, big, restore_id


def test_a_trash_restore_that_cannot_write_leaves_the_deletion_listed(env: Env, cli: Any) -> None:
    """`trash restore ID` of a file deleted outside memoryd, on a disk that takes no more:
    exit 1, no traceback, the error names the file and the rerun; nothing is left in the
    dir, the deletion is still listed under its id and comes back byte-identical once the
    disk has room (the restoring line was written first, and used to hide it for good)."""
    folder, big, restore_id = _deleted_big(env, cli)
    before = sorted(os.listdir(folder))
    failed = _full_disk("trash", "restore", restore_id, folder)
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    assert f"{folder}/big.md" in failed.stderr and f"trash restore {restore_id}" in failed.stderr
    assert sorted(os.listdir(folder)) == before
    assert _deleted_ids(cli, folder) == [restore_id]
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err
    assert (folder / "big.md").read_bytes() == big
    assert cli("index", folder).code == 0
    assert _deleted_ids(cli, folder) == []
    assert "big.md" in (folder / "MEMORY.md").read_text()
    outside = [r for r in env.audit_rows() if r["event"].endswith("_outside")]
    assert [r["file"] for r in outside] == ["big.md"]  # the deletion; the restore is memoryd's


def test_a_restore_killed_before_its_write_leaves_the_deletion_listed(
    env: Env, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `trash restore ID` killed after its restoring line, before the file is in place: the
    deletion is still listed and restorable under its id."""
    folder, big, restore_id = _deleted_big(env, cli)
    with monkeypatch.context() as patched, pytest.raises(InjectedCrash):
        patched.setattr(fsops, "crash_point", crash_at("index.before_swap"))
        cli("trash", "restore", restore_id, folder)
    assert not (folder / "big.md").exists()
    assert _deleted_ids(cli, folder) == [restore_id]
    assert cli("trash", "restore", restore_id, folder).code == 0
    assert (folder / "big.md").read_bytes() == big
    assert _deleted_ids(cli, folder) == []


def test_a_deletion_a_restore_announced_is_unlisted_while_its_bytes_are_in_place(env: Env) -> None:
    """Between the restoring line and any scan reading the file back, the deletion is listed
    exactly while the restored name does not hold its bytes: before the write, not after
    it, and again when the restored file goes before any scan saw it."""
    folder = home_folder(env)
    data = _mem(folder, "a.md", "a lesson")
    store = kept.VersionStore(env.state)
    scan_dir(folder, versions=store)
    (folder / "a.md").unlink()
    scan_dir(folder, versions=store)
    (listed,) = listing.deleted(store, folder)
    store.intend_restore(folder, "a.md", data)
    assert listing.deleted(store, folder) == [listed]
    (folder / "a.md").write_bytes(data)  # the swap, read by no scan yet
    assert listing.deleted(store, folder) == []
    (folder / "a.md").write_bytes(data + b"changed")
    assert listing.deleted(store, folder) == [listed]
    (folder / "a.md").unlink()
    assert listing.deleted(store, folder) == [listed]
    (folder / "a.md").write_bytes(data)
    scan_dir(folder, versions=store)  # read back: memoryd's, and no longer a deletion
    (folder / "a.md").unlink()
    assert [d.name for d in listing.deleted(store, folder)] == []


def test_a_failed_history_restore_keeps_the_pins_and_the_files_deletion_seen(
    env: Env, cli: Any
) -> None:
    """`history FILE --restore N` that cannot write: exit 1 naming the file, the file and its
    pin as they were; the store's latest record of the file is again its current version, so
    that a deletion of it afterwards is still seen and listed."""
    folder = home_folder(env)
    _mem(folder, "a.md", "x" * (2 * LIMIT))
    assert cli("index", folder).code == 0
    current = _mem(folder, "a.md", "the agent's shorter rewrite")
    assert cli("index", folder).code == 0
    pin = restored.Pin("a.md", _sha(current), "2026-12-01T00:00:00+00:00", "0123456789")
    restored.record(env.runtime().store, folder, pin)
    failed = _full_disk("history", folder / "a.md", "--restore", "1")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    # What could not be written is named: the state store (it holds the version's bytes, so
    # a disk this full stops it before the memory file).
    assert "state.sqlite" in failed.stderr and "rerun" in failed.stderr
    assert (folder / "a.md").read_bytes() == current
    assert restored.load(env.runtime().store, folder) == [pin]
    store = kept.VersionStore(env.state)
    assert store.latest_of(folder).get("a.md") == (_sha(current), "seen")
    previous = scan_dir(folder)
    (folder / "a.md").unlink()
    scan_dir(folder, previous=previous, only={"a.md"}, versions=store)  # the daemon's, of a.md
    assert [d.sha256 for d in listing.deleted(store, folder)] == [_sha(current)]


def _waiting_on(lock: Path) -> int:
    """How many processes wait for the flock on `lock` (/proc/locks' `->` lines)."""
    ino = lock.stat().st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[6].endswith(f":{ino}"))


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs /proc/locks")
def test_two_restores_of_one_deletion_waiting_for_the_lock_restore_it_once(
    env: Env, cli: Any
) -> None:
    """Two `trash restore ID` run while the dir's lock is held elsewhere: each found the
    deletion before it waited; the second to get the lock looks again, says it was restored
    meanwhile (exit 1) and writes nothing (it used to restore it a second time, as
    big.restored-1.md)."""
    from memoryd.storage.state import dir_key

    folder, big, restore_id = _deleted_big(env, cli)
    rt = env.runtime()
    lock = rt.store.root / f"{dir_key(folder)}.lock"
    with lock_held_elsewhere(rt.paths.state_dir, folder):
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "memoryd", "trash", "restore", restore_id, str(folder)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        wait_for(lambda: _waiting_on(lock) == 2, what="both restores waiting for the lock")
    results = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], results
    err = next(err for p, (_, err) in zip(procs, results, strict=True) if p.returncode)
    assert "restored by another memoryd command" in err and "Traceback" not in err
    assert sorted(n for n in os.listdir(folder) if n.endswith(".md")) == [
        "MEMORY.md", "a.md", "big.md"
    ]  # fmt: skip
    assert (folder / "big.md").read_bytes() == big


def test_a_trash_manifest_line_nested_past_jsons_depth_breaks_nothing(env: Env, cli: Any) -> None:
    """A line of 100,000 `[` appended to a trash manifest (in the memory dir, where any
    process may write): `trash list`, `trash restore` and `dream` died with RecursionError;
    the line is now one memoryd did not write, and the entry before it restores."""
    folder = home_folder(env)
    data = _mem(folder, "a.md", "a lesson")
    _mem(folder, "b.md", "another lesson")
    assert cli("index", folder).code == 0
    assert cli("forget", folder / "a.md", folder, "--yes").code == 0
    (manifest,) = folder.glob(".trash/*/manifest.jsonl")
    with manifest.open("a") as out:
        out.write("[" * 100_000 + "\n")
    listed = cli("trash", "list", folder)
    assert "a.md" in listed.out and "Traceback" not in listed.err, listed.err
    assert cli("dream", folder).code in (0, 1)
    back = cli("trash", "restore", "a.md", folder)
    assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == data


def test_an_old_pins_file_nested_past_jsons_depth_is_not_a_crash(env: Env, cli: Any) -> None:
    """An older memoryd's restore pins file of a dir, damaged into 100,000 `[`: `dream` and
    `trash restore` died with RecursionError; they now run, the file is named and left for a
    person (not imported), and the restore pins anew in the state store."""
    from memoryd.storage.state import dir_key

    folder = home_folder(env)
    data = _mem(folder, "a.md", "a lesson")
    _mem(folder, "b.md", "another lesson")
    assert cli("index", folder).code == 0
    assert cli("forget", folder / "a.md", folder, "--yes").code == 0
    old = env.state / "dirs" / f"{dir_key(folder)}.restored"
    old.write_bytes(b"[" * 100_000)
    dreamt = cli("dream", folder)
    assert dreamt.code in (0, 1) and str(old) in dreamt.err, dreamt.err
    back = cli("trash", "restore", "a.md", folder)
    assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == data
    assert [p.file for p in restored.load(env.runtime().store, folder)] == ["a.md"]
    assert old.read_bytes() == b"[" * 100_000


def test_a_restore_the_version_store_refuses_leaves_the_pins_as_they_were(
    env: Env, cli: Any
) -> None:
    """The state store is a folder (a damaged state dir): `trash restore ID` fails naming
    it, and neither it nor `history --restore` of a deleted file leaves a pin behind for
    what it did not write; both work once the state dir is fixed."""
    folder, big, restore_id = _deleted_big(env, cli)
    pins_before = restored.load(env.runtime().store, folder)
    db = env.state / "state.sqlite"
    forget_shared()
    db.rename(db.with_name("aside"))
    db.mkdir()
    failed = cli("trash", "restore", restore_id, folder)
    assert failed.code != 0 and str(db) in failed.err, failed.err
    again = cli("history", folder / "big.md", "--restore", "1")
    assert again.code != 0 and str(db) in again.err, again.err
    db.rmdir()
    db.with_name("aside").rename(db)
    forget_shared()
    assert restored.load(env.runtime().store, folder) == pins_before == []
    assert _deleted_ids(cli, folder) == [restore_id]
    assert cli("trash", "restore", restore_id, folder).code == 0
    assert (folder / "big.md").read_bytes() == big
    assert [p.file for p in restored.load(env.runtime().store, folder)] == ["big.md"]


def test_a_name_near_the_limit_whose_name_is_taken_restores_under_a_cut_name(
    env: Env, cli: Any
) -> None:
    """A 251-byte memory name deleted outside memoryd, then one trashed by `forget`, each
    time with a new file under that name since: `<name>.restored-1.md` was over 255 bytes,
    and so was the temp name of any write of such a name: both restores and `history
    --restore` failed whenever they were tried. Each comes back byte-identical under a
    `.restored-<n>.md` name cut to fit, the new file untouched."""
    folder = home_folder(env)
    name = "l" * 248 + ".md"
    _mem(folder, "s.md", "a short one")
    first = _mem(folder, name, "the first long lesson")
    assert cli("index", folder).code == 0
    (folder / name).unlink()
    assert cli("index", folder).code == 0
    second = _mem(folder, name, "the second long lesson")
    assert cli("index", folder).code == 0
    (restore_id,) = _deleted_ids(cli, folder)
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err
    assert cli("forget", folder / name, folder, "--yes").code == 0
    third = _mem(folder, name, "the third long lesson")
    again = cli("trash", "restore", name, folder)
    assert again.code == 0, again.err
    found = {p.name: p.read_bytes() for p in folder.glob("*.md") if p.name != "MEMORY.md"}
    assert sorted(found.values()) == sorted([first, second, third, _mem_bytes("s.md")])
    assert found[name] == third
    assert all(len(os.fsencode(n)) <= 255 and ".restored-" in n for n in found if n[0] == "l"
               and n != name)  # fmt: skip
    assert len([n for n in found if ".restored-" in n]) == 2
    written = cli("history", folder / name, "--restore", "1")  # its temp's name fits too
    assert written.code == 0, written.err
    assert (folder / name).read_bytes() == first


def _mem_bytes(name: str) -> bytes:
    return f"---\nname: {name}\ndescription: d {name}\ntype: project\n---\n\na short one\n".encode()


def test_a_memory_dir_deleted_whole_is_listed_and_its_files_come_back(env: Env, cli: Any) -> None:
    """`rm -rf` of a memory dir: no scan can record its files gone, and `trash list` said
    "The trash is empty." though every version was kept. Each file is listed as deleted
    outside memoryd (also while a file has the folder's name: then the restore says so);
    restoring one makes the folder again (0700), and the others keep the ids the listing
    gave them, each restoring byte-identical with its pointer."""
    import shutil
    import stat

    folder = home_folder(env)
    files = {n: _mem(folder, n, f"the lesson of {n}") for n in ("a.md", "b.md", "c.md")}
    assert cli("index", folder).code == 0
    shutil.rmtree(folder)
    folder.write_text("a file where the folder was")
    listed = json.loads(cli("trash", "list", "--json").out)["deleted_outside"]
    assert sorted(d["file"] for d in listed) == sorted(files)
    text = cli("trash", "list").out
    assert text.count("its folder deleted outside memoryd, last seen") == 3, text
    blocked = cli("trash", "restore", listed[0]["id"])
    assert blocked.code == 1 and "something else has its name" in blocked.err, blocked.err
    folder.unlink()

    def ids(*where: Path) -> list[tuple[str, str]]:
        found = json.loads(cli("trash", "list", *where, "--json").out)["deleted_outside"]
        return [(d["id"], d["file"]) for d in found]

    assert ids() == [(d["id"], d["file"]) for d in listed]
    assert ids(folder) == ids()  # the gone folder named: no "no such folder"
    for i, item in enumerate(listed):
        back = cli("trash", "restore", item["id"], *([folder] if i == 0 else []))
        assert back.code == 0, back.err
        assert (folder / item["file"]).read_bytes() == files[item["file"]]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert json.loads(cli("trash", "list", "--json").out)["deleted_outside"] == []
    assert cli("index", folder).code == 0
    index = (folder / "MEMORY.md").read_text()
    assert all(f"({n})" in index for n in files), index
    said = [r for r in env.audit_rows() if r["event"].startswith("memory.")]
    assert said == []  # no scan saw the rm -rf; the restores say nothing of "now" either


def test_history_restore_over_what_it_must_not_replace_names_the_file(env: Env, cli: Any) -> None:
    """`history FILE --restore N` where FILE is now a FIFO, a symbolic link or a file over
    the store's limit, or its folder is gone: an error naming the whole path and what to do
    (the FIFO and the link said only `a.md: ...; Free disk space`, the big file died with a
    ValueError traceback), and nothing written."""
    import shutil

    folder = home_folder(env)
    _mem(folder, "a.md", "the first lesson")
    assert cli("index", folder).code == 0
    target = env.home / "elsewhere.md"
    target.write_bytes(b"not a memory of this dir")
    for make in (
        lambda p: os.mkfifo(p),
        lambda p: p.symlink_to(target),
        lambda p: p.write_bytes(b"x" * (records.OBJECT_MAX + 1)),
    ):
        (folder / "a.md").unlink()
        make(folder / "a.md")
        failed = cli("history", folder / "a.md", "--restore", "1")
        assert failed.code == 1, failed.err
        assert f"{folder}/a.md: " in failed.err and "Move it aside" in failed.err, failed.err
    assert target.read_bytes() == b"not a memory of this dir"
    assert (folder / "a.md").stat().st_size == records.OBJECT_MAX + 1
    shutil.rmtree(folder)
    gone = cli("history", folder / "a.md", "--restore", "1")
    assert gone.code == 1 and f"{folder}: no such folder" in gone.err, gone.err
    assert "trash restore" in gone.err and not folder.exists()


def test_two_memories_written_back_to_the_same_bytes_both_stay_pinned(env: Env, cli: Any) -> None:
    """a.md and b.md held the same bytes at their version 1 (an agent's copy under another
    name), both were rewritten, and a person writes each back with `history FILE --restore
    1`: both are pinned (b.md's pin had the id of a.md's, `v1:<sha256>`, and replaced it), so
    a dream pass moves neither, also as the older duplicate of a third copy."""
    from tests.conftest import write_memory

    folder = home_folder(env)
    body = "Fork the repo with `git clone --depth 1` then rebase the branch on upstream main.\n"
    for name in ("a.md", "b.md"):
        write_memory(folder, name, name="fork", body=body, age_days=60)
    same = (folder / "a.md").read_bytes()
    assert (folder / "b.md").read_bytes() == same
    assert cli("index", folder).code == 0
    for name in ("a.md", "b.md"):
        write_memory(folder, name, name="fork", body=f"Rewritten {name}.\n", age_days=50)
    assert cli("index", folder).code == 0
    for name in ("a.md", "b.md"):
        back = cli("history", folder / name, "--restore", "1")
        assert back.code == 0, back.err
        os.utime(folder / name, (1e9, 1e9))  # written back, the content as old as it was
    pins = restored.load(env.runtime().store, folder)
    assert sorted(p.file for p in pins) == ["a.md", "b.md"]
    write_memory(folder, "c.md", name="fork", body=body, age_days=1)  # a newer third copy
    assert cli("index", folder).code == 0
    cli("dream", folder)
    assert (folder / "a.md").read_bytes() == same and (folder / "b.md").read_bytes() == same


def test_a_trash_restore_under_a_new_name_keeps_the_pin_of_the_file_with_the_old_one(
    env: Env, cli: Any
) -> None:
    """a.md forgotten twice (two versions in the trash); the newer is restored (a.md,
    pinned), then the older (a.restored-1.md): the first pin stays. It was replaced by the
    second restore's pin for `a.md`, written before the name was known to be taken."""
    folder = home_folder(env)
    _mem(folder, "b.md", "another lesson")
    _mem(folder, "a.md", "the first lesson")
    assert cli("index", folder).code == 0
    assert cli("forget", folder / "a.md", folder, "--yes").code == 0
    second = _mem(folder, "a.md", "the second lesson")
    assert cli("index", folder).code == 0
    assert cli("forget", folder / "a.md", folder, "--yes").code == 0
    ids = [e["id"] for e in json.loads(cli("trash", "list", folder, "--json").out)["trash"]]
    assert len(ids) == 2
    for trash_id in reversed(ids):  # the newer first
        back = cli("trash", "restore", trash_id, folder)
        assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == second
    pins = {p.file: p.sha256 for p in restored.load(env.runtime().store, folder)}
    first = (folder / "a.restored-1.md").read_bytes()
    assert pins == {"a.md": _sha(second), "a.restored-1.md": _sha(first)}


def test_a_memory_written_back_then_deleted_before_any_scan_is_listed(env: Env, cli: Any) -> None:
    """`history a.md --restore 1`, then another process deletes a.md before any scan read
    it back: the next scan records the deletion and `trash list` lists it (the log's last
    word on a.md was the restoring line, so no scan took a.md for a file that was there)."""
    folder = home_folder(env)
    _mem(folder, "b.md", "another lesson")
    first = _mem(folder, "a.md", "the first lesson")
    assert cli("index", folder).code == 0
    _mem(folder, "a.md", "the agent's rewrite")
    assert cli("index", folder).code == 0
    assert cli("history", folder / "a.md", "--restore", "1").code == 0
    (folder / "a.md").unlink()
    assert cli("index", folder).code == 0
    listed = json.loads(cli("trash", "list", folder, "--json").out)["deleted_outside"]
    assert [(d["file"], d["sha256"]) for d in listed] == [("a.md", _sha(first))]
    assert cli("trash", "restore", listed[0]["id"], folder).code == 0
    assert (folder / "a.md").read_bytes() == first


def test_the_files_of_a_folder_deleted_long_after_they_were_seen_outlive_a_prune(
    env: Env, cli: Any
) -> None:
    """Files last seen 40 days before their folder was deleted whole: restoring the first
    records the others gone now, not when they were last seen, so a prune (keep_days 30)
    right after keeps their bytes and each still restores."""
    import shutil

    folder = home_folder(env)
    files = {n: _mem(folder, n, f"the lesson of {n}") for n in ("a.md", "b.md", "c.md")}
    assert cli("index", folder).code == 0
    store = kept.VersionStore(env.state)
    store.conn().execute("UPDATE versions_log SET t = t - ?", (40 * 86400.0,))
    shutil.rmtree(folder)
    listed = json.loads(cli("trash", "list", "--json").out)["deleted_outside"]
    assert len(listed) == 3
    assert cli("trash", "restore", listed[0]["id"]).code == 0
    prune.prune(kept.VersionStore(env.state))
    for item in listed[1:]:
        back = cli("trash", "restore", item["id"])
        assert back.code == 0, back.err
    assert {n: (folder / n).read_bytes() for n in files} == files


def test_nothing_is_restored_through_a_memory_dir_made_a_link_since(env: Env, cli: Any) -> None:
    """The memory dir the store kept versions of is replaced by a symbolic link to a folder
    elsewhere (discovery refuses one out of the Claude home): `trash restore ID` wrote the
    deleted file and a MEMORY.md into the link's target, and `history NAME --restore N`
    would write there too. Both now refuse, naming the link, and write nothing."""
    folder = home_folder(env)
    _mem(folder, "a.md", "a lesson")
    _mem(folder, "b.md", "the first b")
    assert cli("index", folder).code == 0
    (folder / "a.md").unlink()
    _mem(folder, "b.md", "the second b")
    assert cli("index", folder).code == 0
    (restore_id,) = _deleted_ids(cli, folder)
    elsewhere = env.home.parent / "elsewhere"
    elsewhere.mkdir()
    folder.rename(folder.with_name("mem.moved"))
    folder.symlink_to(elsewhere)
    back = cli("trash", "restore", restore_id)
    assert back.code == 1 and f"{folder}: now a symbolic link" in back.err, back.err
    again = cli("history", "b.md", "--restore", "1")
    assert again.code == 1 and f"{folder}: now a symbolic link" in again.err, again.err
    assert list(elsewhere.iterdir()) == []


def test_a_memory_dir_deleted_whole_is_not_made_again_under_a_folder_made_a_link(
    env: Env, cli: Any
) -> None:
    """The project holding a memory dir is deleted whole, and a symbolic link to a folder
    elsewhere takes the project's name: `trash restore ID` made the memory dir again inside
    the link's target and wrote the memory and a MEMORY.md there (the check looked only at a
    dir still there). It now refuses, naming the link, and writes nothing."""
    project = env.home / "proj"
    folder = project / "mem"
    folder.mkdir(parents=True)
    folder = folder.resolve()
    _mem(folder, "a.md", "a lesson")
    assert cli("index", folder).code == 0
    shutil.rmtree(project)
    elsewhere = env.home.parent / "elsewhere"
    elsewhere.mkdir()
    project.symlink_to(elsewhere)
    doc = json.loads(cli("trash", "list", "--json").out)
    (restore_id,) = [d["id"] for d in doc["deleted_outside"]]
    back = cli("trash", "restore", restore_id)
    assert back.code == 1 and f"{folder}: now under a symbolic link" in back.err, back.err
    assert list(elsewhere.iterdir()) == []
