"""The version store (memoryd/versions/): what scans read is kept by content, once, in the
state store; deletions and rewrites by others are recorded, a burst raises the alarm; retention
and the cap with a fake clock; a kill -9 while storing leaves no half version."""

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memoryd.indexing.scan import scan_dir
from memoryd.model.scanned import dump_cache, load_cache
from memoryd.storage.statedb import forget_shared
from memoryd.trash import store as trash
from memoryd.versions import importer, kept, listing, prune, scanned
from memoryd.versions.kept import VersionStore
from tests.conftest import Env, lock_held_elsewhere, tree_digest
from tests.conftest import write_lesson as _mem
from tests.helpers import home_folder, memoryd_child

DAY = 86400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Events = list[tuple[str, dict[str, Any]]]


def _store(env: Env, clock: Clock, events: Events, **kw: Any) -> VersionStore:
    def audit(event: str, **fields: Any) -> None:
        events.append((event, fields))

    # The boot clock advances with the fake wall clock: the time memoryd watches pass.
    boot = kw.pop("boot", lambda: ("test-boot", clock.now))
    return VersionStore(env.state, clock=clock, audit=audit, boot=boot, **kw)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _objects(store: VersionStore) -> dict[str, bytes]:
    rows = store.conn().execute("SELECT sha, data FROM versions_objects")
    return {sha: bytes(data) for sha, data in rows}


def test_identical_bytes_are_stored_once_privately_and_nothing_in_the_memory_dir(env: Env) -> None:
    """Two dirs holding the same bytes, under two names: one object, 0600 in 0700 folders;
    the memory dirs are byte-for-byte and entry-for-entry as before the scans."""
    a, b = home_folder(env, "a"), home_folder(env, "b")
    same = _mem(a, "one.md", "shared lesson")
    (b / "other.md").write_bytes(same)
    _mem(b, "two.md", "its own")
    before = (tree_digest(a), tree_digest(b), sorted(os.listdir(a)), sorted(os.listdir(b)))
    store = _store(env, Clock(), [])
    with kept.using(store):
        scan_dir(a, versions=store)
        scan_dir(b, versions=store)
        scan_dir(b, versions=store)  # again: nothing new
    assert set(_objects(store)) == {_sha(same), _sha((b / "two.md").read_bytes())}
    assert before == (tree_digest(a), tree_digest(b), sorted(os.listdir(a)), sorted(os.listdir(b)))
    assert stat.S_IMODE(os.stat(env.state).st_mode) == 0o700
    for f in env.state.glob("state.sqlite*"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert [r.f for r in store.records(b)] == ["other.md", "two.md"]  # one line each


def test_files_memoryd_will_not_parse_are_not_kept(env: Env) -> None:
    """Over the size limit, binary, malformed, a FIFO, a symlink: none of their bytes stored."""
    folder = home_folder(env)
    good = _mem(folder, "good.md", "fine")
    (folder / "big.md").write_bytes(b"---\nname: big\n---\n" + b"x" * 4096)
    (folder / "bin.md").write_bytes(b"---\nname: b\n---\n\x00\x01\x02")
    (folder / "bad.md").write_bytes(b"---\nname: [unclosed\n---\nbody\n")
    os.mkfifo(folder / "pipe.md")
    outside = env.home / "secret.md"
    outside.write_bytes(b"---\nname: s\ndescription: s\n---\nsecret\n")
    (folder / "link.md").symlink_to(outside)
    store = _store(env, Clock(), [])
    with kept.using(store):
        scan = scan_dir(folder, max_file_bytes=2048, versions=store)
    assert set(scan.problems) >= {"big.md", "bin.md", "bad.md", "pipe.md", "link.md"}
    assert set(_objects(store)) == {_sha(good)}


def test_deletions_and_rewrites_by_others_are_rows_and_a_burst_is_one_alarm(env: Env) -> None:
    """Each outside change its own row; more than alarm_files in the window one mass_change
    (not one per change); changes spread wider than the window none."""
    folder = home_folder(env)
    for i in range(8):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    clock = Clock()
    events: Events = []
    store = _store(env, clock, events, alarm_files=3, alarm_window=600)
    with kept.using(store):
        previous = scan_dir(folder, versions=store)
        for i in range(3):  # spread out: 3 changes, 11 minutes apart, never 4 in 10 min
            clock.now += 660
            (folder / f"m{i}.md").unlink()
            previous = scan_dir(
                folder, previous.files, previous=previous, only={f"m{i}.md"}, versions=store
            )
        assert [e for e, _ in events] == ["memory.deleted_outside"] * 3
        clock.now += 660
        (folder / "m3.md").unlink()
        _mem(folder, "m4.md", "changed by the agent")
        _mem(folder, "m5.md", "changed too")
        (folder / "m6.md").unlink()
        only = {"m3.md", "m4.md", "m5.md", "m6.md"}
        previous = scan_dir(folder, previous.files, previous=previous, only=only, versions=store)
        clock.now += 60
        (folder / "m7.md").unlink()
        scan_dir(folder, previous.files, previous=previous, only={"m7.md"}, versions=store)
    names = [e for e, _ in events]
    assert names.count("memory.mass_change") == 1
    assert names.count("memory.deleted_outside") == 3 + 3
    assert names.count("memory.rewritten_outside") == 2
    alarm = next(f for e, f in events if e == "memory.mass_change")
    assert (alarm["deleted"], alarm["rewritten"]) == (2, 2)
    assert kept.alarms(store)[-1]["dir"] == str(folder)


def test_a_rename_in_the_dir_is_no_deletion(env: Env) -> None:
    """Same bytes under a new name in the same scan: recorded, not a deletion."""
    folder = home_folder(env)
    _mem(folder, "old.md", "x")
    events: Events = []
    store = _store(env, Clock(), events)
    with kept.using(store):
        previous = scan_dir(folder, versions=store)
        (folder / "old.md").rename(folder / "new.md")
        scan_dir(
            folder, previous.files, previous=previous, only={"old.md", "new.md"}, versions=store
        )
    assert events == []
    assert listing.deleted(store, folder) == []
    assert listing.versions_of(store, folder, "old.md")[-1].ended_by == "renamed"


def test_memoryds_own_trash_moves_are_recorded_as_memoryds(env: Env) -> None:
    """A move by the trash mover is no outside deletion: no row, no alarm, not listed."""
    folder = home_folder(env)
    datas = {f"m{i}.md": _mem(folder, f"m{i}.md", f"l {i}") for i in range(5)}
    events: Events = []
    store = _store(env, Clock(), events, alarm_files=1)
    with kept.using(store):
        previous = scan_dir(folder, versions=store)
        with trash.Mover(folder, date(2026, 12, 1), versions=store) as mover:
            for name, data in datas.items():
                record = trash.TrashRecord(trash.new_id(), name, name, "2026-12-01", _sha(data),
                                           len(data), "duplicate", "p1", "t")  # fmt: skip
                assert isinstance(mover.move(record), trash.TrashRecord)
        scan_dir(folder, previous.files, versions=store)
    assert events == []
    assert listing.deleted(store, folder) == []
    assert [v.ended_by for v in listing.versions_of(store, folder, "m0.md")] == ["moved"]


def test_retention_and_the_cap_with_a_fake_clock(env: Env) -> None:
    """Past keep_days a replaced version goes; over max_bytes the oldest replaced versions of
    files that still exist go first; the current versions and the last version of a deleted
    file within keep_days stay."""
    folder = home_folder(env)
    clock = Clock()
    store = _store(env, clock, [], keep_days=30, max_bytes=10**9)
    live: list[bytes] = []
    with kept.using(store):
        a1 = _mem(folder, "a.md", "a first " + "a" * 3000)
        gone = _mem(folder, "gone.md", "deleted later " + "g" * 3000)
        previous = scan_dir(folder, versions=store)
        clock.now += DAY
        a2 = _mem(folder, "a.md", "a second " + "b" * 3000)
        previous = scan_dir(
            folder, previous.files, previous=previous, only={"a.md"}, versions=store
        )
        clock.now += DAY
        a3 = _mem(folder, "a.md", "a third " + "c" * 3000)
        (folder / "gone.md").unlink()
        previous = scan_dir(
            folder, previous.files, previous=previous, only={"a.md", "gone.md"}, versions=store
        )
        live = [a3]
    assert {_sha(x) for x in (a1, a2, a3, gone)} <= set(_objects(store))
    # The cap: room for three objects; the oldest replaced version of a live file goes first.
    store.max_bytes = sum(len(x) for x in (a2, a3, gone)) + 10
    result = prune.prune(store)
    assert result.removed == [_sha(a1)]
    assert {_sha(a2), _sha(a3), _sha(gone)} <= set(_objects(store))
    # A cap below what must stay: only what may go goes; the deleted file's last version stays.
    store.max_bytes = 1
    prune.prune(store)
    assert set(_objects(store)) == {_sha(a3), _sha(gone)}
    # Retention: 31 days after it was deleted, the deleted file's version goes; a3 is current.
    clock.now += 31 * DAY
    prune.prune(store)
    assert set(_objects(store)) == {_sha(x) for x in live}
    assert not listing.versions_of(store, folder, "gone.md")[-1].stored


CRASH_SCRIPT = """
import sys
from pathlib import Path
from memoryd.versions import kept
from memoryd.indexing.scan import scan_dir
from memoryd import versions
from memoryd.indexing.scan import scan_dir
import os, signal
store = kept.VersionStore(Path(sys.argv[2]))
store.defer = len(sys.argv) > 3  # the daemon's way
with kept.using(store):
    scan_dir(Path(sys.argv[1]), versions=store)
    if store.defer:
        os.kill(os.getpid(), signal.SIGKILL)  # before any flush
"""


def _run_kill(folder: Path, state: Path, k: int, trace: Path) -> int:
    env = {**os.environ, "MEMORYD_CRASH_AT": str(k), "MEMORYD_CRASH_TRACE": str(trace),
           "PYTHONPATH": str(Path(__file__).parents[1])}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(folder), str(state)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
    return proc.returncode


def _check_no_half_object(state: Path) -> set[str]:
    """Every object the store holds is whole (its bytes are its sha256); their shas."""
    if not (state / "state.sqlite").exists():
        return set()
    forget_shared()
    store = VersionStore(state)
    for sha in store.object_sizes():
        assert store.read_object(sha) is not None, f"half object {sha}"
    return set(store.object_sizes())


def test_kill_9_while_storing_loses_nothing_and_leaves_no_half_version(tmp_path: Path) -> None:
    """A real process killed at every crash point of storing (a scan's one transaction,
    before its commit), for a few files and a batch: no object is ever partial, and the
    next run stores every version."""
    for count in (3, 20):
        folder = tmp_path / f"mem{count}"
        folder.mkdir()
        datas = [_mem(folder, f"m{i}.md", f"lesson {i} " + "z" * 5000) for i in range(count)]
        k = 0
        while True:
            k += 1
            state = tmp_path / f"state{count}-{k}"
            trace = tmp_path / f"trace{count}"
            code = _run_kill(folder, state, k, trace)
            _check_no_half_object(state)
            if code == 0:
                break
            assert _run_kill(folder, state, 0, trace) == 0  # then a run that is not killed
            stored = _check_no_half_object(state)
            assert {_sha(d) for d in datas} <= stored
        assert k > 1  # the scan's commit was a crash point
        labels = trace.read_text()
        assert "versions.end_scan" in labels


def test_a_daemon_killed_before_its_flush_loses_no_version(tmp_path: Path) -> None:
    """The daemon's scan commits its versions at its end, not at the next heartbeat:
    killed before any flush, every version read is kept."""
    folder = tmp_path / "mem"
    folder.mkdir()
    datas = [_mem(folder, f"m{i}.md", f"lesson {i}") for i in range(3)]
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("MEMORYD_CRASH_AT", None)
    run = [sys.executable, "-c", CRASH_SCRIPT, str(folder), str(state)]
    killed = subprocess.run([*run, "defer"], env=env, capture_output=True, timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _check_no_half_object(state) == {_sha(d) for d in datas}
    assert subprocess.run(run, env=env, timeout=60, check=False).returncode == 0
    assert _check_no_half_object(state) == {_sha(d) for d in datas}


def _stored(store: VersionStore) -> dict[str, bytes]:
    """Every object the store holds, read back (checked by sha256)."""
    out = {}
    for sha in store.object_sizes():
        data = store.read_object(sha)
        assert data is not None, f"{sha} listed but unreadable"
        out[sha] = data
    return out


def _created_files(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def test_a_first_start_over_many_files_stores_them_in_the_one_state_file(env: Env) -> None:
    """300 new files in one scan: kept in state.sqlite (not 300 object files and a syncfs),
    each version read back byte-identical, identical bytes once; a second dir holding the
    same bytes adds nothing; a later scan's one new version is kept beside them."""
    folder = home_folder(env)
    datas = {f"m{i:03}.md": _mem(folder, f"m{i:03}.md", f"lesson {i}") for i in range(300)}
    (folder / "twin.md").write_bytes(datas["m000.md"])
    store = _store(env, Clock(), [])
    with kept.using(store):
        previous = scan_dir(folder, versions=store)
    # One file (and SQLite's WAL and shared-memory files beside it), not one a version.
    assert sorted(p.name for p in env.state.glob("state.sqlite*")) == sorted(
        p.name for p in env.state.iterdir() if p.name.startswith("state.sqlite")
    )
    assert _created_files(env.state) <= 8
    assert _stored(store) == {_sha(d): d for d in datas.values()}
    other = home_folder(env, "other")
    for name, data in list(datas.items())[:50]:
        (other / name).write_bytes(data)
    with kept.using(store):
        scan_dir(other, versions=store)
        new = _mem(folder, "m001.md", "rewritten by the agent")
        scan_dir(folder, previous.files, previous=previous, only={"m001.md"}, versions=store)
    assert set(_objects(store)) == {_sha(d) for d in datas.values()} | {_sha(new)}
    found = listing.versions_of(store, folder, "m001.md")
    assert [store.read_object(v.sha256) for v in found] == [datas["m001.md"], new]


def test_a_scan_that_finds_nothing_changed_adds_no_row_and_a_change_still_counts(
    env: Env,
) -> None:
    """A new process's store (a one-shot `memoryd index`) scanning a dir the scan cache says is
    unchanged adds no row; a file deleted while no memoryd ran, and a row another process
    added, are each still seen by the next scan."""
    folder = home_folder(env)
    for i in range(5):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    events: Events = []
    with kept.using(_store(env, Clock(), events)) as store:
        cache = scan_dir(folder, versions=store).files
    rows = len(store.records(folder))
    quiet = _store(env, Clock(), events)
    with kept.using(quiet):
        scan_dir(folder, cache, versions=quiet)
    assert len(quiet.records(folder)) == rows
    (folder / "m0.md").unlink()  # while nothing of memoryd runs
    with kept.using(_store(env, Clock(), events)) as store:
        cache = scan_dir(folder, cache, versions=store).files
    assert [e for e, _ in events] == ["memory.deleted_outside"]
    assert [d.name for d in listing.deleted(quiet, folder)] == ["m0.md"]
    other = _store(env, Clock(), [])
    sha1 = _sha((folder / "m1.md").read_bytes())
    other.record(folder, "m1.md", sha1, 1, "gone", "memoryd")
    after = _store(env, Clock(), events)
    with kept.using(after):
        scan_dir(folder, cache, versions=after, only={"m1.md"})
    # The other's row is seen: the file is there again, so it is recorded so.
    assert [r.e for r in after.records(folder) if r.f == "m1.md"][-2:] == ["gone", "seen"]


def test_the_daemons_store_prunes_daily_and_compacts_the_log_with_a_fake_clock(
    env: Env, monkeypatch: Any
) -> None:
    """The daemon's store prunes at a flush once a day has passed (not at every heartbeat);
    a version whose bytes were pruned stays listed for keep_days, then its rows go; the
    store goes on recording after them."""
    folder = home_folder(env)
    clock = Clock()
    events: Events = []
    store = _store(env, clock, events, keep_days=30)
    store.defer = True  # the daemon's
    runs: list[float] = []
    real_prune = prune.prune

    def counting(s: VersionStore, now: float | None = None) -> prune.PruneResult:
        runs.append(clock.now)
        return real_prune(s, now)

    monkeypatch.setattr(prune, "prune", counting)
    with kept.using(store):
        store.flush()  # at start
        v1 = _mem(folder, "a.md", "first")
        previous = scan_dir(folder, versions=store)
        clock.now += 3600
        v2 = _mem(folder, "a.md", "second")
        previous = scan_dir(
            folder, previous.files, previous=previous, only={"a.md"}, versions=store
        )
        store.flush()  # an hour later: not due
        assert len(runs) == 1
        clock.now += DAY
        store.flush()  # due: it finds v1 replaced, and memoryd watches it from then
        assert len(runs) == 2
        clock.now += 30 * DAY
        store.flush()  # due: v1's bytes go; it stays listed, not restorable
        assert len(runs) == 3
        assert [(v.sha256, v.stored) for v in listing.versions_of(store, folder, "a.md")] == [
            (_sha(v1), False), (_sha(v2), True)
        ]  # fmt: skip
        size = len(store.records(folder))
        clock.now += 30 * DAY
        store.flush()  # due again: v1 ended 61 days ago, its rows go
        assert len(runs) == 4
        assert len(store.records(folder)) < size
        assert [v.sha256 for v in listing.versions_of(store, folder, "a.md")] == [_sha(v2)]
        v3 = _mem(folder, "a.md", "third")
        scan_dir(folder, previous.files, previous=previous, only={"a.md"}, versions=store)
    assert [v.sha256 for v in listing.versions_of(store, folder, "a.md")] == [_sha(v2), _sha(v3)]
    rewritten = [f for e, f in events if e == "memory.rewritten_outside"]
    assert [(f["sha256"], f["previous"]) for f in rewritten][-1] == (_sha(v3), _sha(v2))
    assert store.known_dirs() == [folder]


COMPACT_CRASH_SCRIPT = """
import sys
from pathlib import Path
from memoryd.versions import kept, prune
now = float(sys.argv[2])
store = kept.VersionStore(Path(sys.argv[1]), clock=lambda: now, boot=lambda: ("b", now))
prune.prune(store)
"""


def test_kill_9_while_compacting_leaves_the_old_rows_or_the_new_ones(tmp_path: Path) -> None:
    """A real process killed at every crash point of a prune that compacts a dir's rows: the
    rows are as they were or compacted, and a run that is not killed compacts them."""
    folder = tmp_path / "mem"
    folder.mkdir()
    state = tmp_path / "state"
    clock = Clock()
    store = VersionStore(state, clock=clock, boot=lambda: ("b", clock.now))
    with kept.using(store):
        _mem(folder, "a.md", "first")
        previous = scan_dir(folder, versions=store)
        clock.now += DAY
        _mem(folder, "a.md", "second")
        scan_dir(folder, previous.files, previous=previous, only={"a.md"}, versions=store)
    prune.prune(store)  # finds the first version replaced: memoryd watches it from here
    old = store.records(folder.resolve())
    base = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    run = [sys.executable, "-c", COMPACT_CRASH_SCRIPT, str(state), str(clock.now + 90 * DAY)]
    k = 0
    while True:
        k += 1
        crash = {**base, "MEMORYD_CRASH_AT": str(k)}
        done = subprocess.run(run, env=crash, capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, -signal.SIGKILL), done.stderr
        forget_shared()
        now = VersionStore(state).records(folder.resolve())
        if done.returncode == 0:
            break
        assert now == old  # killed before the commit: the rows as they were
    assert k >= 2  # the commit was a crash point
    assert len(now) < len(old)
    assert [r.h for r in now] == [r.h for r in old][-1:]


def test_an_indexs_history_lists_diffs_and_restores_through_the_check_and_swap_writer(
    env: Env, cli: Any, monkeypatch: Any
) -> None:
    """MEMORY.md on its own: memoryd's version is listed; `--diff 1` shows what an agent's
    rewrite (read by no scan yet) added; `--restore 1` keeps the agent's version in the
    history, then writes memoryd's bytes back, recorded as memoryd's when read again;
    `--diff 1..2` between kept versions; a writer slipping in just before the swap keeps its
    bytes and nothing is restored over them."""
    folder = home_folder(env)
    for i in range(3):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    assert cli("index", folder).code == 0
    ours = (folder / "MEMORY.md").read_bytes()

    def listed() -> list[dict[str, Any]]:
        doc = json.loads(cli("history", folder / "MEMORY.md", "--json").out)
        return doc["versions"]["versions"]  # type: ignore[no-any-return]

    assert [(v["sha256"], v["by"], v["until"]) for v in listed()] == [(_sha(ours), "memoryd", None)]
    theirs = ours + b"\nThe agent's own line.\n"
    (folder / "tmp.agent").write_bytes(theirs)
    (folder / "tmp.agent").replace(folder / "MEMORY.md")  # an atomic rewrite by another process
    now = cli("history", folder / "MEMORY.md", "--diff", "1")
    assert "+The agent's own line." in now.out and "MEMORY.md (now)" in now.out
    back = cli("history", folder / "MEMORY.md", "--restore", "1")
    assert back.code == 0, back.err
    assert (folder / "MEMORY.md").read_bytes() == ours
    assert cli("index", folder).code == 0  # reads the restored file: memoryd's own version
    after = listed()
    assert [(v["sha256"], v["by"]) for v in after] == [
        (_sha(ours), "memoryd"), (_sha(theirs), "other"), (_sha(ours), "memoryd")
    ]  # fmt: skip
    assert all(v["restorable"] for v in after)
    between = cli("history", folder / "MEMORY.md", "--diff", "1..2")
    assert "+The agent's own line." in between.out and "MEMORY.md@2" in between.out
    text = cli("history", folder / "MEMORY.md").out
    assert "by another process" in text and "by memoryd" in text
    # A writer slipping in between the check and the swap: theirs stays, nothing is written.
    late = theirs + b"Written while memoryd restored.\n"
    real = VersionStore.intend_restore

    def racing(self: VersionStore, path: Path, name: str, data: bytes) -> str:
        sha = real(self, path, name, data)
        (folder / "late.agent").write_bytes(late)
        (folder / "late.agent").replace(folder / "MEMORY.md")
        return sha

    monkeypatch.setattr(VersionStore, "intend_restore", racing)
    raced = cli("history", folder / "MEMORY.md", "--restore", "2")
    assert raced.code != 0 and "MEMORY.md" in raced.err
    assert (folder / "MEMORY.md").read_bytes() == late


def test_a_scans_reads_keep_no_bytes_and_no_object_per_read_while_it_runs(
    env: Env, monkeypatch: Any
) -> None:
    """A first start's reads (600 files): the store keeps no reference to any read's
    bytes once it was told of them (they are copied into the scan's spool), and
    the objects it allocates while the scan runs do not grow with the reads (a tuple and a
    size per read, and each read's bytes held until a batch was written, left the daemon's
    heap megabytes bigger after its first start): 290 more reads, next to no more blocks
    allocated by versions.py alive. Every version is still stored."""
    import tracemalloc

    folder = home_folder(env)
    datas = [_mem(folder, f"m{i:03}.md", f"lesson {i} " + "y" * 1500) for i in range(600)]
    store = _store(env, Clock(), [])
    held: list[str] = []
    live: list[int] = []
    calls: list[str] = []
    original = scanned.Session.read

    def read(self: scanned.Session, name: str, data: bytes, sha: str, kind: str) -> None:
        calls.append(name)
        before = sys.getrefcount(data)
        original(self, name, data, sha, kind)
        if sys.getrefcount(data) != before:
            held.append(name)
        if len(calls) in (300, 590):  # early, then late in the scan
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(True, kept.__file__)]
            )
            live.append(sum(stat.count for stat in snapshot.statistics("filename")))

    monkeypatch.setattr(scanned.Session, "read", read)
    tracemalloc.start()
    try:
        with kept.using(store):
            scan_dir(folder, versions=store)
    finally:
        tracemalloc.stop()
    assert held == []
    assert len(live) == 2 and live[1] - live[0] < 30, live  # the old code's: over 500 more
    assert _stored(store) == {_sha(d): d for d in datas}


def test_reading_a_log_imports_the_scan_once_not_once_a_line(env: Env, monkeypatch: Any) -> None:
    """`records` (history, trash list, prune) over a 3,000-line log: scan's skip_reason is
    imported once per read of the log, not once per line (~0.2 s per 10,000 lines)."""
    import builtins

    folder = home_folder(env)
    for i in range(3000):
        _mem(folder, f"m{i:04}.md", f"lesson {i}")
    store = _store(env, Clock(), [])
    with kept.using(store):
        scan_dir(folder, versions=store)
    imports = []
    real_import = builtins.__import__

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "memoryd.indexing.scan":
            imports.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counting)
    recs = store.records(folder)
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert len(recs) == 3000
    assert len(imports) <= 1, len(imports)  # the old code's: 3,000


def _prune_in_another_process(state: Path, now: float) -> dict[str, Any]:
    """`prune.prune` of the same state dir run by another process (the daemon's daily one),
    with its own clock: what it removed and whether it found the store busy."""
    probe = (
        "import json, sys\nfrom pathlib import Path\nfrom memoryd.versions import kept, prune\n"
        f"store = kept.VersionStore(Path({str(state)!r}), clock=lambda: {now!r})\n"
        "r = prune.prune(store)\n"
        "print(json.dumps({'removed': len(r.removed), 'busy': getattr(r, 'busy', False)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _memories(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"m{i:03}.md").write_bytes(
            f"---\nname: m{i}\ndescription: d{i}\ntype: project\n---\n\nlesson {i}\n".encode()
        )


def test_a_prune_by_another_process_waits_while_a_scan_stores_its_versions(
    env: Env, monkeypatch: Any
) -> None:
    """A prune by another process (the daemon's daily one against a command's first `index`)
    started while a scan's transaction holds objects no row names yet: it waits for the
    commit, then finds every object named, and drops none."""
    folder = env.home / "mem"
    _memories(folder, 300)
    clock = Clock()
    started: list[subprocess.Popen[str]] = []
    rows_of = scanned.rows_of
    probe = (
        "import json, sys\nfrom pathlib import Path\nfrom memoryd.versions import kept, prune\n"
        f"store = kept.VersionStore(Path({str(env.state)!r}), clock=lambda: {clock.now!r})\n"
        "print(json.dumps({'removed': len(prune.prune(store).removed)}))"
    )

    def rows_then_prune(*args: Any) -> Any:
        started.append(subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE,
                                        text=True))  # fmt: skip
        return rows_of(*args)

    monkeypatch.setattr(scanned, "rows_of", rows_then_prune)
    with kept.using(_store(env, clock, [])) as store:
        scan_dir(folder, versions=store)
    (proc,) = started
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out) == {"removed": 0}
    fresh = _store(env, clock, [])
    for path in folder.iterdir():
        data = path.read_bytes()
        assert fresh.read_object(hashlib.sha256(data).hexdigest()) == data, path.name


def test_a_prune_by_another_process_cannot_drop_an_object_a_scan_found_stored(
    env: Env, monkeypatch
) -> None:
    """A scan that finds a version's bytes already stored (a file deleted past retention,
    written again with the same bytes): a prune by another process before the scan's
    transaction may drop them; the scan stores them again, and the new file's only version
    is kept."""
    folder = env.home / "mem"
    folder.mkdir()
    data = b"---\nname: x\ndescription: d\ntype: project\n---\n\nsame lesson\n"
    clock = Clock()
    (folder / "x.md").write_bytes(data)
    with kept.using(_store(env, clock, [])) as store:
        scan_dir(folder, versions=store)
    (folder / "x.md").unlink()
    with kept.using(_store(env, clock, [])) as store:
        scan_dir(folder, versions=store)
    clock.now += 40 * DAY  # x.md's last version is past keep_days (30)
    (folder / "y.md").write_bytes(data)
    seen: list[dict[str, Any]] = []
    end_scan = VersionStore.end_scan

    def prune_first(self: VersionStore, *args: Any, **kw: Any) -> None:
        seen.append(_prune_in_another_process(env.state, clock.now))
        end_scan(self, *args, **kw)

    monkeypatch.setattr(VersionStore, "end_scan", prune_first)
    with kept.using(_store(env, clock, [])) as store:
        scan_dir(folder, versions=store)
    assert len(seen) == 1  # it ran first, and may have dropped x.md's bytes
    found = listing.versions_of(_store(env, clock, []), folder.resolve(), "y.md")
    assert [v.stored for v in found] == [True]
    assert _store(env, clock, []).read_object(hashlib.sha256(data).hexdigest()) == data


def test_a_busy_store_is_pruned_at_the_next_flush(env: Env, monkeypatch: Any) -> None:
    """The daemon's daily prune that finds a writer holding the store past SQLite's wait
    tries again at the next heartbeat's flush instead of waiting a day."""
    import sqlite3

    from memoryd.storage import statedb

    monkeypatch.setattr(statedb, "BUSY_WAIT", 0.1)
    forget_shared()
    clock = Clock()
    daemon = _store(env, clock, [])
    daemon.defer = True
    daemon.conn()
    other = sqlite3.connect(env.state / "state.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's scan
    try:
        daemon.flush()
        assert daemon.pruned_at == -float("inf")
    finally:
        other.execute("ROLLBACK")
        other.close()
    daemon.flush()
    assert daemon.pruned_at == clock.now


def test_a_prune_stores_again_a_current_version_whose_bytes_went_missing(env: Env) -> None:
    """Objects gone from the store (damaged, restored from an older backup, removed by
    hand) left current versions recorded without their bytes; no scan stored them again
    (their version is already logged), so deleting such a file later lost it. The prune (at
    the daemon's start and daily) reads each one back from its file while the file still
    holds those bytes; a file changed since is left to the next scan."""
    folder = env.home / "mem"
    _memories(folder, 5)
    clock = Clock()
    with kept.using(_store(env, clock, [])) as store:
        scan_dir(folder, versions=store)
    store = _store(env, clock, [])
    shas = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    store.drop_objects(set(shas.values()))
    (folder / "m004.md").write_bytes(b"---\nname: m4\n---\n\nchanged since\n")
    result = prune.prune(store, clock.now)
    for name, sha in shas.items():
        data = store.read_object(sha)
        if name == "m004.md":
            assert data is None
        else:
            assert data == (folder / name).read_bytes(), name
    assert result.repaired == 4
    assert prune.prune(store, clock.now).repaired == 0


def _own_runtime(root: Path) -> Any:
    """A Runtime with a state dir of its own under `root`."""
    from memoryd.config import Config, PathsConfig
    from memoryd.paths import AppPaths
    from memoryd.runtime import Runtime

    paths = AppPaths(root / "memoryd.toml", root / "state", root / "log")
    return Runtime.create(Config(paths=PathsConfig(claude_home=root / "claude")), paths)


def _update(rt: Any, folder: Path) -> None:

    from memoryd.discover.finder import memory_dir_at
    from memoryd.indexing.passes import update

    update(rt, memory_dir_at(folder, rt.config))


def _kept(rt: Any) -> tuple[list[Path], set[str]]:
    """The dirs a Runtime's store holds logs of, and its objects."""
    store = kept.for_runtime(rt)
    return store.known_dirs(), set(store.object_sizes())


def _versions_in(folder: Path, *memories: bytes) -> set[str]:
    """The objects a store keeping `folder` holds: its memories and its index as it is."""
    index = [p.read_bytes() for p in (folder / "MEMORY.md",) if p.exists()]
    return {_sha(data) for data in (*memories, *index)}


def test_two_runtimes_each_keep_only_the_versions_of_their_own_work(env: Env) -> None:
    """Two commands' stores open at once in one process (two Runtimes, two state dirs): what
    each Runtime's pass reads goes into its own store only. (With one process-wide store,
    the last one opened took the other's versions.)"""
    a, b = home_folder(env, "a"), home_folder(env, "b")
    in_a, in_b = _mem(a, "one.md", "lesson of a"), _mem(b, "two.md", "lesson of b")
    rt_a, rt_b = _own_runtime(env.home / "rt-a"), _own_runtime(env.home / "rt-b")
    with kept.keeping(rt_a) as kept_a, kept.keeping(rt_b) as kept_b:
        _update(kept_a, a)
        _update(kept_b, b)
    assert _kept(rt_a) == ([a], _versions_in(a, in_a))
    assert _kept(rt_b) == ([b], _versions_in(b, in_b))


def test_a_pass_given_no_store_keeps_nothing_while_another_thread_keeps_versions(
    env: Env,
) -> None:
    """A command keeping versions on one thread; a pass of a Runtime with no store on another
    (as a read-only command would make) records nothing in it, nor anywhere. (A store switched
    on for the whole process took the versions of every scan in it.)"""
    import threading

    a, c = home_folder(env, "a"), home_folder(env, "c")
    in_a = _mem(a, "one.md", "lesson of a")
    _mem(c, "three.md", "read by a pass that keeps nothing")
    keeper, plain = _own_runtime(env.home / "rt-a"), _own_runtime(env.home / "rt-c")
    opened, done = threading.Event(), threading.Event()

    def keeping() -> None:
        with kept.keeping(keeper) as keeping_rt:
            _update(keeping_rt, a)
            opened.set()
            assert done.wait(60)

    thread = threading.Thread(target=keeping)
    thread.start()
    try:
        assert opened.wait(60)
        _update(plain, c)  # on this thread, while the other's store is open
        (c / "three.md").unlink()
        _update(plain, c)  # a deletion: nothing to say either
    finally:
        done.set()
        thread.join(60)
    assert _kept(keeper) == ([a], _versions_in(a, in_a))
    assert not (env.home / "rt-c" / "state" / "versions").exists()


def test_a_first_start_hashes_each_index_file_it_writes_once_and_steps_no_crash_point(
    env: Env, monkeypatch: Any
) -> None:
    """A command's first `index` of 300 memories with the store: the MEMORY.md it writes is
    hashed once (the writer's sha256 goes with it to the store, which hashed it again), and
    storing steps no crash point per object (the scan's one transaction has one). Every
    version is still kept."""

    from memoryd.storage import fsops

    folder = env.home / "mem"
    _memories(folder, 300)
    rt = _own_runtime(env.home / "rt")
    hashed: list[str] = []
    real_digest = fsops._digest

    def digest(data: fsops.Content) -> str:
        hashed.append(real_digest(data))
        return hashed[-1]

    steps: list[str] = []
    real_crash_point = fsops.crash_point
    monkeypatch.setattr(fsops, "_digest", digest)
    monkeypatch.setattr(fsops, "crash_point", lambda label: steps.append(label))
    with kept.keeping(rt) as keeping_rt:
        _update(keeping_rt, folder.resolve())
    monkeypatch.setattr(fsops, "crash_point", real_crash_point)
    assert hashed.count(_sha((folder / "MEMORY.md").read_bytes())) == 1
    assert steps.count("versions.end_scan") <= 2, steps
    store = kept.for_runtime(rt)
    held = set(_stored(store))
    assert {_sha(p.read_bytes()) for p in folder.iterdir() if p.is_file()} <= held


def _write_index(folder: Path, store: VersionStore, data: bytes) -> None:
    """memoryd's swap writer puts `data` in as MEMORY.md, and the pass reads it back."""
    from memoryd.indexing.read import read_index_file
    from memoryd.storage import fsops

    with fsops.open_dir(folder) as fd:
        current = read_index_file(fd, "MEMORY.md").identity
    fsops.replace_file(folder, "MEMORY.md", data, current, versions=store)
    with fsops.open_dir(folder) as fd:
        read_index_file(fd, "MEMORY.md", store)


def test_memoryds_own_index_write_read_back_is_its_own_before_any_flush(env: Env) -> None:
    """A pass that wrote MEMORY.md and read it back has stored that version as memoryd's: a
    kill -9 before the flush, or another memoryd process reading the file, must not take it
    for another process's rewrite (a false alarm, and memoryd's version lost)."""
    from memoryd.indexing.read import read_index_file
    from memoryd.storage import fsops

    folder = home_folder(env)
    _mem(folder, "a.md", "body")
    (folder / "MEMORY.md").write_bytes(b"- [a](a.md) - v0\n")
    mine = b"- [a](a.md) - v1\n"
    first = _store(env, Clock(), [])
    with kept.using(first):
        scan_dir(folder, versions=first)
        with fsops.open_dir(folder) as fd:
            read_index_file(fd, "MEMORY.md", first)
        _write_index(folder, first, mine)
        later: Events = []  # another process (or the next start after a kill -9), meanwhile
        other = _store(env, Clock(), later)
        with kept.using(other):
            scan_dir(folder, versions=other)
            with fsops.open_dir(folder) as fd:
                read_index_file(fd, "MEMORY.md", other)
        assert [e for e, f in later if e == "memory.rewritten_outside"] == []
        assert other.has_object(_sha(mine))


def test_two_index_writes_before_a_flush_keep_both_versions(env: Env) -> None:
    """Two passes that write MEMORY.md, each reading it back, before the store's next flush:
    each version is held (the first is stored when it is read back)."""
    folder = home_folder(env)
    _mem(folder, "a.md", "body")
    (folder / "MEMORY.md").write_bytes(b"- [a](a.md) - v0\n")
    one, two = b"- [a](a.md) - v1\n", b"- [a](a.md) - v2\n"
    store = _store(env, Clock(), [])
    with kept.using(store):
        scan_dir(folder, versions=store)
        _write_index(folder, store, one)
        _write_index(folder, store, two)
    assert store.has_object(_sha(one)) and store.has_object(_sha(two))
    held = [v.sha256 for v in listing.versions_of(store, folder, "MEMORY.md")]
    assert _sha(one) in held and _sha(two) in held


def _scan_failing_at(folder: Path, store: VersionStore, monkeypatch: Any, read: int) -> None:
    """Scan `folder` with the store, the `read`-th file read raising an unexpected error."""
    import memoryd.indexing.scan as scan_module

    real = scan_module.read_one
    count = [0]

    def failing(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] == read:
            raise RuntimeError("a fault")
        return real(*args, **kwargs)

    monkeypatch.setattr(scan_module, "read_one", failing)
    with pytest.raises(RuntimeError):
        scan_dir(folder, versions=store)
    monkeypatch.setattr(scan_module, "read_one", real)


def test_a_scan_that_raises_holds_no_transaction_and_keeps_nothing_half(
    env: Env, monkeypatch: Any
) -> None:
    """A scan that raises part way (an unexpected error after some reads) gives up its session
    then, not at the next scan: no transaction is left open (another process writes at
    once), nothing of its reads is kept, and the next scan stores them all."""
    import sqlite3

    folder = home_folder(env)
    for i in range(30):
        _mem(folder, f"m{i:02}.md", f"l {i}")
    store = _store(env, Clock(), [])
    _scan_failing_at(folder, store, monkeypatch, 20)
    assert not store.db.in_transaction()
    other = sqlite3.connect(env.state / "state.sqlite", isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    assert _objects(store) == {}
    assert listing.versions_of(store, folder, "m00.md") == []
    scan_dir(folder, versions=store)
    assert len(listing.versions_of(store, folder, "m00.md")) == 1


def test_history_prints_one_line_a_version_and_escapes_only_the_name(env: Env, cli: Any) -> None:
    """`memoryd history FILE` as text: its header and each version on a line of their own (the
    whole text went through the name escaper, so a terminal got `\\n` between them); a
    control character in the file's name is still written as an escape."""
    folder = home_folder(env)
    for name in ("plain.md", "new\nline.md"):
        for body in ("first", "second"):
            (folder / name).write_text(f"---\nname: n\ndescription: d\n---\n\n{body}\n")
            assert cli("index", folder).code == 0
        text = cli("history", folder / name).out
        lines = text.splitlines()
        assert "\\n    " not in text and len(lines) >= 3, text
        header = [line for line in lines if "2 versions kept" in line]
        assert header == [f"{folder}/{name.replace(chr(10), chr(92) + 'n')}: 2 versions kept"]
        assert [line.split()[0] for line in lines if " seen " in line] == ["2", "1"]


def test_a_deletion_stays_restorable_after_a_new_file_takes_its_name(env: Env, cli: Any) -> None:
    """An agent deletes b.md and writes a new b.md: the deleted version stays listed by
    `trash list` under the id its `memory.deleted_outside` row gave, and that id brings it
    back as b.restored-1.md, byte-identical, the new b.md untouched and still current in
    its history. A deletion whose bytes come back under the same name is listed no more."""
    folder = home_folder(env)
    for name in ("a.md", "b.md", "c.md"):
        _mem(folder, name, f"lesson of {name}")
    assert cli("index", folder).code == 0
    old = (folder / "b.md").read_bytes()
    (folder / "b.md").unlink()
    assert cli("index", folder).code == 0
    (row,) = [r for r in env.audit_rows() if r["event"] == "memory.deleted_outside"]
    restore_id = row["restore"].split()[-1]
    new = _mem(folder, "b.md", "a new lesson under the old name")
    same = (folder / "c.md").read_bytes()
    (folder / "c.md").unlink()
    assert cli("index", folder).code == 0
    (folder / "c.md").write_bytes(same)  # deleted, then written again byte for byte
    assert cli("index", folder).code == 0
    listed = cli("trash", "list", folder).out
    assert restore_id in listed and "c.md" not in listed, listed
    back = cli("trash", "restore", restore_id, folder)
    assert back.code == 0, back.err
    assert (folder / "b.restored-1.md").read_bytes() == old
    assert (folder / "b.md").read_bytes() == new
    assert cli("index", folder).code == 0
    assert restore_id not in cli("trash", "list", folder).out
    doc = json.loads(cli("history", folder / "b.md", "--json").out)["versions"]["versions"]
    assert (doc[-1]["sha256"], doc[-1]["until"]) == (_sha(new), None)
    said = [r["file"] for r in env.audit_rows() if r["event"] == "memory.deleted_outside"]
    assert said == ["b.md", "c.md"]  # the restore is memoryd's: no row of its own


def test_listing_deletions_is_linear_in_a_long_log(env: Env) -> None:
    """`trash list` over a history of 20,000 deletions and 40,000 later reads of other bytes
    matches each read to the deletions of its sha256 directly: well under the 3 s budget (a
    scan of every open deletion for each read took ~13 s)."""
    import time

    folder = home_folder(env)
    store = _store(env, Clock(), [])
    rows: list[kept.Row] = [
        (1.0, f"m{i}.md", _sha(b"d%d" % i), 10, "gone", "other", None) for i in range(20_000)
    ]
    rows += [(1.0, f"n{i}.md", _sha(b"s%d" % i), 10, "seen", "other", None) for i in range(40_000)]
    store.add_rows(folder, rows)
    store.store_object(b"d7", _sha(b"d7"))  # the one deletion whose bytes are kept
    started = time.perf_counter()
    listed = listing.deleted(store, folder)
    took = time.perf_counter() - started
    assert [d.name for d in listed] == ["m7.md"]
    assert took < 3.0, f"{took:.2f} s"


def test_an_empty_memory_kept_with_a_first_starts_others_reads_back(env: Env) -> None:
    """An empty file's version stored with a first start's others reads back as b"" (an
    empty version, restorable), not as a missing one."""
    folder = home_folder(env)
    for i in range(20):
        _mem(folder, f"m{i:03}.md", f"l {i}")
    (folder / "empty.md").write_bytes(b"")
    store = _store(env, Clock(), [])
    scan_dir(folder, versions=store)
    assert store.read_object(_sha(b"")) == b""
    assert store.has_object(_sha(b""))


def test_a_deletion_a_new_file_took_the_name_of_is_never_pruned_within_keep_days(env: Env) -> None:
    """a.md deleted outside, then a new a.md written (an agent's delete-and-rewrite): the
    deleted version stays listed and restorable, so the size cap never takes it within
    keep_days (it went first, as an old version of a file that exists)."""
    folder = home_folder(env)
    clock = Clock()
    store = _store(env, clock, [], max_bytes=10_000)
    old = _mem(folder, "a.md", "X" * 4000)
    _mem(folder, "b.md", "B" * 4000)
    scan_dir(folder, versions=store)
    (folder / "a.md").unlink()
    clock.now += 10
    scan_dir(folder, versions=store)
    _mem(folder, "a.md", "Y" * 4000)
    clock.now += 10
    scan_dir(folder, versions=store)
    assert [d.sha256 for d in listing.deleted(store, folder)] == [_sha(old)]
    clock.now += 100
    prune.prune(store)
    assert [d.sha256 for d in listing.deleted(store, folder)] == [_sha(old)]
    assert store.read_object(_sha(old)) == old
    clock.now += 31 * DAY  # past keep_days it may go
    prune.prune(store)
    assert listing.deleted(store, folder) == []


def test_trash_list_shows_a_deletion_outside_without_calling_the_trash_empty(
    env: Env, cli: Any
) -> None:
    """With nothing in the trash and one memory deleted outside memoryd, `trash list` lists
    that deletion without first saying "The trash is empty.", and `--json` holds it under
    `deleted_outside` with the id `trash restore` takes."""
    folder = home_folder(env)
    for name in ("a.md", "b.md"):
        _mem(folder, name, f"lesson of {name}")
    assert cli("index", folder).code == 0
    data = (folder / "b.md").read_bytes()
    (folder / "b.md").unlink()
    assert cli("index", folder).code == 0
    listed = cli("trash", "list", folder).out
    assert "The trash is empty" not in listed and "deleted outside memoryd" in listed, listed
    doc = json.loads(cli("trash", "list", folder, "--json").out)
    assert doc["trash"] == []
    (item,) = doc["deleted_outside"]
    assert (item["file"], item["sha256"], item["size"]) == ("b.md", _sha(data), len(data))
    assert item["id"] in listed
    assert cli("trash", "restore", item["id"], folder).code == 0
    assert (folder / "b.md").read_bytes() == data


def test_history_restore_pins_the_memory_and_says_already_held_before_looking_for_bytes(
    env: Env, cli: Any
) -> None:
    """`history FILE --restore N` of a memory is a person's choice, as a trash restore is: the
    file is pinned to those bytes (no dream pass moves it again until they change). Asked for
    the version the file already holds, it says so, even when those bytes are no longer kept."""
    from memoryd.trash import restored

    folder = home_folder(env)
    first = _mem(folder, "a.md", "the first lesson")
    assert cli("index", folder).code == 0
    _mem(folder, "a.md", "the agent's rewrite")
    assert cli("index", folder).code == 0
    back = cli("history", folder / "a.md", "--restore", "1")
    assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == first
    pins = restored.load(env.runtime().store, folder)
    assert [(p.file, p.sha256) for p in pins] == [("a.md", _sha(first))]
    store = kept.for_runtime(env.runtime())
    store.drop_objects({_sha(first)})  # its bytes gone (pruned, say)
    again = cli("history", folder / "a.md", "--restore", "1")
    assert again.code == 0, again.err
    assert "already holds version 1" in again.out


def test_files_a_scan_took_from_a_cache_older_than_the_store_each_get_their_version(
    env: Env,
) -> None:
    """A scan cache filled while no store held versions (or a log lost since): the first scan
    with the store takes those files from the cache unread, and reads each once more so that
    its version is kept."""
    folder = home_folder(env)
    held = {f"m{i}.md": _mem(folder, f"m{i}.md", f"lesson {i}") for i in range(3)}
    cache = scan_dir(folder).files  # no store
    with kept.using(_store(env, Clock(), [])) as store:
        again = scan_dir(folder, cache, versions=store)
    assert all(again.files[n] is cache[n] for n in held)  # taken from the cache, not parsed
    assert {n: _sha(d) for n, d in held.items()} == dict(store.seen_of(folder))
    assert all(store.read_object(_sha(d)) == d for d in held.values())


def test_a_forget_killed_between_a_move_and_its_log_line_is_no_outside_deletion(
    env: Env, cli: Any
) -> None:
    """`memoryd forget` of five memories killed (-9) right after its third move, before the
    version log names it: the next command's recovery rolls the move forward and tells the
    store, so its scan writes no memory.deleted_outside and `trash list` lists the file once,
    as forgotten. The old recovery told the trash only: m2.md was listed twice, the second
    time as deleted outside memoryd."""
    folder = home_folder(env)
    for i in range(6):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    assert cli("index", folder).code == 0
    named = [folder / f"m{i}.md" for i in range(5)]
    killed = memoryd_child(env, "forget", *named, "--yes", crash_at="3:trash.after_move")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (folder / "m2.md").exists() and (folder / "m3.md").exists()
    again = memoryd_child(env, "index", folder)
    assert again.returncode == 0, again.stderr
    assert "rolled forward 3 move(s)" in again.stderr
    assert [r for r in env.audit_rows() if r["event"] == "memory.deleted_outside"] == []
    listed = cli("trash", "list", folder).out
    assert listed.count("m2.md") == 1 and "deleted outside memoryd" not in listed, listed
    recs = [(r.f, r.e, r.by) for r in VersionStore(env.state).records(folder)]
    assert recs.count(("m2.md", "moved", "memoryd")) == 1
    assert recs.count(("m0.md", "moved", "memoryd")) == 1  # logged by the forget: not again


def test_a_damaged_object_of_a_current_version_is_stored_again_from_its_file(
    env: Env, cli: Any
) -> None:
    """Current versions' bytes damaged in the store (other bytes, cut short): never given
    back as those versions; the prune (the daemon's, at its start and daily) says the one
    whose size is wrong, stores both again from their files, and each deletion restores
    byte-identical."""
    folder = home_folder(env)
    datas = {f"m{i}.md": _mem(folder, f"m{i}.md", f"lesson {i}") for i in range(4)}
    assert cli("index", folder).code == 0
    store = VersionStore(env.state)
    overwritten, cut = (_sha(datas[f"m{i}.md"]) for i in range(2))
    conn = store.conn()
    conn.execute("UPDATE versions_objects SET data = ? WHERE sha = ?", (b"x" * 10, overwritten))
    conn.execute("UPDATE versions_objects SET data = ?, size = 3 WHERE sha = ?", (b"abc", cut))
    assert store.read_object(overwritten) is None and store.read_object(cut) is None
    assert any(overwritten in said and "damaged" in said for said in store._said), store._said
    assert prune.prune(store).repaired == 2
    assert any(cut in said and "damaged" in said for said in store._said), store._said
    assert store.read_object(overwritten) == datas["m0.md"]
    assert store.read_object(cut) == datas["m1.md"]
    assert prune.prune(store).repaired == 0
    for i in range(2):
        (folder / f"m{i}.md").unlink()
    assert cli("index", folder).code == 0
    for row in [r for r in env.audit_rows() if r["event"] == "memory.deleted_outside"]:
        done = cli("trash", "restore", row["restore"].split()[-1], folder)
        assert done.code == 0, done.err
    for i in range(2):
        assert (folder / f"m{i}.md").read_bytes() == datas[f"m{i}.md"]


def _watched_by_processes(
    env: Env, memories: int
) -> tuple[Path, Clock, Events, Callable[[], None]]:
    """A dir of `memories` memories, a clock, the audit rows, and `look`: a full scan of the
    dir by a store of its own (another memoryd process each time), alarming past 3 files
    changed within 10 minutes. The first look has been taken."""
    folder = home_folder(env)
    for i in range(memories):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    clock = Clock()
    events: Events = []

    def look() -> None:
        store = _store(env, clock, events, alarm_files=3, alarm_window=600)
        with kept.using(store):
            scan_dir(folder, versions=store)

    look()
    return folder, clock, events, look


def test_a_burst_split_between_memoryd_processes_is_one_alarm_in_whichever_sees_its_end(
    env: Env,
) -> None:
    """An agent deletes and rewrites memories while two memoryd processes look in turn (a
    one-shot `memoryd index` and the daemon, or a daemon restarted mid-burst): each process
    is a store of its own over one state dir. 2 changes seen by the first and 2 by the next,
    within the window, are one mass_change (counted from the log, whoever wrote it); a fifth
    change in that window seen by a third process raises none again; changes of both that
    lie wider apart than the window raise none. The old count lived in each process: none
    of them ever saw more than 2."""
    folder, clock, events, look = _watched_by_processes(env, 12)
    (folder / "m0.md").unlink()
    _mem(folder, "m1.md", "rewritten by the agent")
    look()
    clock.now += 120
    (folder / "m2.md").unlink()
    (folder / "m3.md").unlink()
    look()
    alarms_raised = [f for e, f in events if e == "memory.mass_change"]
    assert len(alarms_raised) == 1
    assert (alarms_raised[0]["deleted"], alarms_raised[0]["rewritten"]) == (3, 1)
    clock.now += 60
    (folder / "m4.md").unlink()
    look()
    assert [e for e, _ in events].count("memory.mass_change") == 1  # one alarm a burst
    clock.now += 1200  # the burst's window over: 2 + 2 changes 11 minutes apart
    for i in (5, 6):
        (folder / f"m{i}.md").unlink()
    look()
    clock.now += 660
    for i in (7, 8):
        (folder / f"m{i}.md").unlink()
    look()
    assert [e for e, _ in events].count("memory.mass_change") == 1
    assert [e for e, _ in events].count("memory.deleted_outside") == 8


def test_a_version_whose_kept_bytes_are_not_its_own_is_refused_and_the_file_named(
    env: Env, cli: Any
) -> None:
    """A rewritten memory's earlier version kept with other bytes of the same size (no size
    check can see it): `history --restore 1` writes nothing, the memory keeps its bytes, and
    the damage is said, naming the store and the version (an older store refused in silence
    as if the bytes had been pruned)."""
    folder = home_folder(env)
    first = _mem(folder, "a.md", "the first lesson")
    assert cli("index", folder).code == 0
    now = _mem(folder, "a.md", "the second lesson")
    assert cli("index", folder).code == 0
    sql = "UPDATE versions_objects SET data = ? WHERE sha = ?"
    VersionStore(env.state).conn().execute(sql, (bytes(len(first)), _sha(first)))
    back = cli("history", folder / "a.md", "--restore", "1")
    assert back.code != 0
    assert (folder / "a.md").read_bytes() == now
    said = f"state.sqlite: the bytes kept for {_sha(first)} are not that version (damaged)"
    assert said in back.err, back.err


def test_forgets_selection_records_no_deletion_while_another_pass_is_mid_move(
    env: Env, cli: Any
) -> None:
    """Another memoryd process holds the dir's writer lock and has moved m0.md into the trash,
    its version log line not yet written (a pass between a move and its record). `memoryd
    forget m1.md` (no terminal, no --yes: it only lists) scans the dir to select what to
    forget without that lock: the old code kept versions in that scan and recorded m0.md as
    deleted by others (a false memory.deleted_outside, and `trash list` listing it). Its
    selection keeps none now; the pass's record then makes the move memoryd's."""
    folder = home_folder(env)
    for i in range(3):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    assert cli("index", folder).code == 0
    data = (folder / "m0.md").read_bytes()
    day = trash.day_folder(folder, date.today())
    with lock_held_elsewhere(env.state, folder):
        day.mkdir(parents=True, exist_ok=True)
        (folder / "m0.md").rename(day / "m0.md")  # the other pass's move
        listed = memoryd_child(env, "forget", folder / "m1.md")
        assert "To forget (1)" in listed.stdout, listed.stdout + listed.stderr
        VersionStore(env.state).moved(folder, "m0.md", _sha(data), len(data), "0123456789")
    assert cli("index", folder).code == 0
    assert [r for r in env.audit_rows() if r["event"] == "memory.deleted_outside"] == []
    assert (folder / "m1.md").exists()


def test_status_skips_an_alarm_whose_time_is_no_number(env: Env, cli: Any) -> None:
    """An older store's alarms.json holding alarms timed NaN and Infinity (damaged or
    hand-made) beside a real one: imported, `memoryd status` shows the real one only (the
    old code raised in `ago`)."""
    folder = home_folder(env)
    _mem(folder, "a.md", "x")
    assert cli("index", folder).code == 0
    import time

    alarms = [
        {"dir": str(folder / "nan"), "t": float("nan"), "deleted": 4, "rewritten": 0},
        {"dir": str(folder / "inf"), "t": float("inf"), "deleted": 5, "rewritten": 0},
        {"dir": str(folder), "t": time.time() - 60, "deleted": 6, "rewritten": 1},
    ]
    forget_shared()
    importer._done.discard(env.state)
    (env.state / "state.sqlite").unlink()  # a state dir an older memoryd kept
    (env.state / "versions").mkdir(mode=0o700, exist_ok=True)
    (env.state / "versions" / "alarms.json").write_text(json.dumps(alarms))
    shown = cli("status")
    assert "6 memory files deleted and 1 rewritten" in shown.out, shown.out + shown.err
    assert "nan" not in shown.out and "inf:" not in shown.out


@pytest.mark.parametrize("where", ["objects", "packs", "memory dir"])
def test_a_temp_name_with_a_pid_no_process_can_have_stops_no_command(
    env: Env, cli: Any, where: str
) -> None:
    """A file named like memoryd's temp but carrying a 20-digit (or 0) pid, an hour old, in
    an older store's objects or packs folder or in a memory dir (which agents write):
    `memoryd index` runs; the memory dir's is left alone, the older store's goes with its
    import. The old code passed the number to os.kill, which raised OverflowError: every
    versioned command, and the daemon at each start, died on it."""
    folder = home_folder(env)
    _mem(folder, "a.md", "first")
    assert cli("index", folder).code == 0
    place = folder if where == "memory dir" else env.state / "versions" / where
    place.mkdir(mode=0o700, parents=True, exist_ok=True)
    importer._done.discard(env.state)  # the older store appears after this process looked
    planted = [place / f".a.md.memoryd-{pid}-abcd.tmp" for pid in ("9" * 20, "0")]
    for path in planted:
        path.write_text("not memoryd's")
        os.utime(path, (1_000_000_000, 1_000_000_000))
    new = _mem(folder, "b.md", "second")
    done = cli("index", folder)
    assert done.code == 0, done.err
    if where == "memory dir":
        assert all(path.read_text() == "not memoryd's" for path in planted)
    else:
        assert not (env.state / "versions").exists()
    assert VersionStore(env.state).read_object(_sha(new)) == new


def test_one_process_counts_the_changes_another_logs_after_it_looked(env: Env) -> None:
    """A long-lived store (the daemon's) looks at the log's recent changes once, then reads
    only what is appended since: changes another process logs between its scans still count
    toward its alarm, as do its own, and none counts twice."""
    folder = home_folder(env)
    for i in range(8):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    clock = Clock()
    events: Events = []
    daemon = _store(env, clock, events, alarm_files=3, alarm_window=600)
    with kept.using(daemon):
        cache = scan_dir(folder, versions=daemon).files
        (folder / "m0.md").unlink()
        cache = scan_dir(folder, cache, versions=daemon).files  # 1, looked at the log
        clock.now += 10
        one_shot = _store(env, clock, events, alarm_files=3, alarm_window=600)
        (folder / "m1.md").unlink()
        _mem(folder, "m2.md", "rewritten by the agent")
        with kept.using(one_shot):
            scan_dir(folder, versions=one_shot)  # 2 more, in another process's lines
        assert "memory.mass_change" not in [e for e, _ in events]
        clock.now += 10
        (folder / "m3.md").unlink()
        scan_dir(folder, cache, versions=daemon)  # 4 in the window: over 3
    alarms_raised = [f for e, f in events if e == "memory.mass_change"]
    assert len(alarms_raised) == 1
    assert (alarms_raised[0]["deleted"], alarms_raised[0]["rewritten"]) == (3, 1)


def test_one_memory_rewritten_four_times_is_no_mass_change(env: Env) -> None:
    """The alarm counts files: one memory an agent edits four times within the window is four
    rewrites (each its own row) of one file, not more than `alarm_files` files."""
    folder = home_folder(env)
    for i in range(5):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    clock = Clock()
    events: Events = []
    store = _store(env, clock, events, alarm_files=3, alarm_window=600)
    with kept.using(store):
        cache = scan_dir(folder, versions=store).files
        for k in range(4):
            clock.now += 5
            _mem(folder, "m0.md", f"edit {k}")
            cache = scan_dir(folder, cache, versions=store).files
    assert [e for e, _ in events].count("memory.rewritten_outside") == 4
    assert "memory.mass_change" not in [e for e, _ in events]


def test_listing_a_memory_dir_deleted_whole_asks_the_store_once(env: Env, monkeypatch: Any) -> None:
    """Every file of a dir deleted whole is listed (its last versions are kept): the store is
    asked once for what it holds, not once a file (the older store opened every pack for
    each: ~0.5 s for 10,000 files, paid three times by a `trash restore`)."""
    folder = home_folder(env)
    datas = {f"m{i:03}.md": _mem(folder, f"m{i:03}.md", f"lesson {i}") for i in range(300)}
    store = _store(env, Clock(), [])
    with kept.using(store):
        scan_dir(folder, versions=store)
    shutil.rmtree(folder)
    asked: list[str] = []
    real_sizes, real_has = VersionStore.object_sizes, VersionStore.has_object

    def sizes(self: VersionStore) -> dict[str, int]:
        asked.append("all")
        return real_sizes(self)

    def has(self: VersionStore, sha: str) -> bool:
        asked.append(sha)
        return real_has(self, sha)

    monkeypatch.setattr(VersionStore, "object_sizes", sizes)
    monkeypatch.setattr(VersionStore, "has_object", has)
    listed = listing.deleted(_store(env, Clock(), []), folder)
    assert sorted(d.name for d in listed) == sorted(datas)
    assert all(d.vanished for d in listed)
    assert asked == ["all"]


def _index_read_by(folder: Path, store: VersionStore) -> Any:
    """MEMORY.md read as an index pass reads it, the store told its bytes."""
    from memoryd.indexing.read import read_index_file
    from memoryd.storage import fsops

    with fsops.open_dir(folder) as dir_fd:
        return read_index_file(dir_fd, "MEMORY.md", store)


def _replace_index(folder: Path, store: VersionStore, text: str, *, daemon: bool) -> bytes:
    """MEMORY.md replaced as an index pass writes it (the daemon hands over the old bytes
    it holds, and hashes nothing itself)."""
    from memoryd.storage import fsops

    found = _index_read_by(folder, store)
    old = found.text.encode() if daemon and found.text is not None else None
    fsops.replace_file(folder, "MEMORY.md", text.encode(), found.identity, expected_data=old,
                       versions=store)  # fmt: skip
    return text.encode()


def test_no_memoryd_process_takes_anothers_index_write_for_an_outside_one(env: Env) -> None:
    """The daemon writes MEMORY.md and stores it only at its next heartbeat; a one-shot
    command reads it meanwhile, then writes its own: neither is "another process's", no
    outside row, no alarm; the daemon's late flush does not log its older version after the
    newer one, and the history is memoryd's versions in time order. A person's rewrite
    after that is still one, and a person's `rm MEMORY.md` is said with the kept size."""
    folder = home_folder(env)
    for i in range(3):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    (folder / "MEMORY.md").write_text("# Notes\n- [m0](m0.md) — d m0\n")
    clock = Clock()
    events: Events = []
    daemon = _store(env, clock, events)
    daemon.defer = True
    cache = scan_dir(folder, versions=daemon).files
    _index_read_by(folder, daemon)
    daemon.flush()
    clock.now += 5
    by_daemon = _replace_index(
        folder, daemon, "# Notes\n- [m0](m0.md)\n- [m1](m1.md)\n", daemon=True
    )
    clock.now += 5
    one_shot = _store(env, clock, events)  # another process
    with kept.using(one_shot):
        scan_dir(folder, versions=one_shot)
        _index_read_by(folder, one_shot)
        clock.now += 5
        by_command = _replace_index(folder, one_shot, "# Notes\n- [m0](m0.md)\n- [m1](m1.md)\n"
                                  "- [m2](m2.md)\n", daemon=False)  # fmt: skip
        _index_read_by(folder, one_shot)  # its verification
    clock.now += 5
    daemon.flush()  # the heartbeat: the daemon's write was replaced since
    _index_read_by(folder, daemon)
    scan_dir(folder, cache, versions=daemon)
    assert [e for e, _ in events] == []
    history = listing.versions_of(daemon, folder, "MEMORY.md")
    assert [v.sha256 for v in history][1:] == [_sha(by_daemon), _sha(by_command)]
    assert [v.by for v in history][1:] == ["memoryd", "memoryd"]
    assert [v.seen for v in history] == sorted(v.seen for v in history)
    assert daemon.read_object(_sha(by_command)) == by_command

    clock.now += 5
    (folder / "MEMORY.md").write_text("# Notes, by hand\n")
    _index_read_by(folder, daemon)
    assert [e for e, _ in events] == ["memory.rewritten_outside"]
    clock.now += 5
    (folder / "MEMORY.md").unlink()
    scan_dir(folder, cache, versions=daemon)
    assert [e for e, _ in events][1:] == ["memory.deleted_outside"]
    assert events[1][1]["size"] == len("# Notes, by hand\n")


def test_a_persons_few_edits_in_ten_minutes_raise_no_alarm_an_agents_sweep_does(
    env: Env,
) -> None:
    """With the default thresholds: a person rewrites three memories and removes one within
    ten minutes (each its own row): no memory.mass_change. An agent's clean-up deleting
    and rewriting eight within a minute: one."""
    from memoryd.config import VersionsConfig

    cfg = VersionsConfig()
    folder = home_folder(env)
    for i in range(12):
        _mem(folder, f"m{i:02}.md", f"lesson {i}")
    clock = Clock()
    events: Events = []
    store = _store(env, clock, events, alarm_files=cfg.alarm_files, alarm_window=cfg.alarm_window)
    with kept.using(store):
        cache = scan_dir(folder, versions=store).files
        for i in range(3):
            clock.now += 150
            _mem(folder, f"m{i:02}.md", f"lesson {i}, reworded")
            cache = scan_dir(folder, cache, versions=store).files
        clock.now += 60
        (folder / "m03.md").unlink()
        cache = scan_dir(folder, cache, versions=store).files
        names = [e for e, _ in events]
        assert names.count("memory.rewritten_outside") == 3
        assert names.count("memory.deleted_outside") == 1
        assert "memory.mass_change" not in names
        clock.now += 3600
        for i in range(4, 12):
            clock.now += 5
            if i % 2:
                (folder / f"m{i:02}.md").unlink()
            else:
                _mem(folder, f"m{i:02}.md", "merged away")
            cache = scan_dir(folder, cache, versions=store).files
    assert [e for e, _ in events].count("memory.mass_change") == 1


def test_a_restarts_store_holds_the_scans_digest_of_each_unchanged_file(env: Env) -> None:
    """A new process's store (a restarted daemon) scanning a dir from its cache reads each
    name's latest digest from the file; where the scan's digest is equal, it holds the scan's
    string (each of 10,000 digests held twice was ~1 MB)."""
    folder = home_folder(env)
    for i in range(5):
        _mem(folder, f"m{i}.md", f"lesson {i}")
    with kept.using(_store(env, Clock(), [])) as store:
        cache = scan_dir(folder, versions=store).files
    restarted = _store(env, Clock(), [])
    with kept.using(restarted):
        scan = scan_dir(folder, load_cache(dump_cache(cache)), versions=restarted)
    held = restarted._dirs[folder.resolve()].seen
    assert set(held) == {f"m{i}.md" for i in range(5)}
    assert all(held[n] is scan.files[n].sha256 for n in held)
