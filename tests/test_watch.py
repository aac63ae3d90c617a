"""The watch layer: the debounce contract on a fake clock, the pure event filter, the overflow
hook driving a rescan, and watch-limit fallback (the daemon runs in-process here)."""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
)

from memoryd.config import build_config
from memoryd.daemon.events import Control, Overflow
from memoryd.daemon.loop import Daemon
from memoryd.daemon.watch import Debouncer, Kind, Signal, Watcher, WatchError, classify
from tests.conftest import Env, write_memory
from tests.helpers import FakeClock, scripted_daemon, wait_for


def test_debounce_waits_for_quiet() -> None:
    """A key is due only after `quiet` seconds without a touch."""
    clock = FakeClock()
    d = Debouncer(2.0, 30.0, clock)
    d.touch("a")
    clock.now += 1.5
    d.touch("a")
    clock.now += 1.9
    assert d.pop_due() == []
    clock.now += 0.2
    assert d.pop_due() == ["a"]
    assert d.pop_due() == [] and d.next_deadline() is None


def test_debounce_max_wait_under_continuous_churn() -> None:
    """Under churn that never goes quiet, the key is due `max_wait` after its first touch."""
    clock = FakeClock()
    d = Debouncer(2.0, 30.0, clock)
    for _ in range(40):
        d.touch("a")
        clock.now += 1.0
        if d.pop_due():
            break
    assert clock.now - 1000.0 == 30.0


def test_debounce_schedule_and_flush() -> None:
    """`schedule` asks for a look at a time; `pop_all` hands over everything pending."""
    clock = FakeClock()
    d = Debouncer(2.0, 30.0, clock)
    d.schedule("b", clock.now + 10)
    d.schedule("b", clock.now + 5)
    assert d.next_deadline() == clock.now + 5
    d.touch("c")
    assert sorted(d.pop_all()) == ["b", "c"] and d.pending() == set()


DIR = Path("/m")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (FileClosedEvent("/m/a.md"), [Signal(Kind.DIRTY, DIR, "a.md")]),
        (
            FileMovedEvent("/m/a.md.tmp.1.ab", "/m/a.md"),
            [Signal(Kind.DIRTY, DIR, "a.md.tmp.1.ab"), Signal(Kind.DIRTY, DIR, "a.md")],
        ),
        (FileDeletedEvent("/m/a.md"), [Signal(Kind.DIRTY, DIR, "a.md")]),
        (FileClosedEvent("/m/.MEMORY.md.memoryd-1-ab.tmp"), []),
        (FileClosedEvent("/m/.MEMORY.md.prev"), []),
        (FileClosedEvent("/m/sub/a.md"), []),
        (DirDeletedEvent("/m"), [Signal(Kind.LOST, DIR)]),  # its watch went with it
        (FileCreatedEvent("/m/a.md"), [Signal(Kind.DIRTY, DIR, "a.md")]),  # moved in from elsewhere
    ],
)
def test_event_filter_table(event, expected) -> None:
    """What each kind of event means: dirty, lost, or nothing (our own writes)."""
    assert classify(event, DIR, parent=False) == expected


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (DirCreatedEvent("/m/slug"), [Signal(Kind.STRUCTURE, DIR)]),
        (FileCreatedEvent("/m/slug"), [Signal(Kind.STRUCTURE, DIR)]),  # a symlink to a memory dir
        (DirDeletedEvent("/m"), [Signal(Kind.LOST, DIR, "parent")]),
        (FileClosedEvent("/m/notes.txt"), []),
    ],
)
def test_parent_event_table(event, expected) -> None:
    """Where memory dirs appear: a folder or a link made or gone means look again; the
    watched folder itself gone means its watch is gone too."""
    assert classify(event, DIR, parent=True) == expected


@pytest.fixture
def embedded(env: Env) -> Iterator[Daemon]:
    """The real daemon loop on a thread of this process (signals are left to the test)."""
    watch: dict[str, object] = {"debounce": "100ms", "max_wait": "1s", "reconcile_every": "1h"}
    cfg = build_config(
        {
            "paths": {"claude_home": str(env.claude)},
            "index": {"new_file_grace": "0s"},
            "watch": watch,
        },
        "test",
    )
    daemon = Daemon(None, env.runtime(cfg).paths, env.runtime(cfg))
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    wait_for(daemon.paths.status_file.exists, what="the first heartbeat")
    yield daemon
    daemon.request_stop()
    thread.join(timeout=20)
    assert not thread.is_alive()


def test_overflow_warning_forces_a_rescan_that_catches_lost_changes(env: Env) -> None:
    """Events are lost (b.md is written and no event says so); the overflow the event thread
    tells of triggers a rescan that finds it."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    cfg = build_config(
        {
            "paths": {"claude_home": str(env.claude)},
            "index": {"new_file_grace": "0s"},
            "watch": {"reconcile_every": "1h"},
        },
        "test",
    )

    def lose_an_event() -> list[object]:
        assert "a.md" in (folder / "MEMORY.md").read_text()  # found at start-up
        write_memory(folder, "b.md")
        return []

    def overflow() -> list[object]:
        assert "b.md" not in (folder / "MEMORY.md").read_text()  # no event, no look
        daemon.on_overflow("inotify queue overflowed")  # as the event thread tells it
        return []

    clock = FakeClock()
    daemon = scripted_daemon(env.runtime(cfg), clock, [(1001.0, lose_an_event), (1010.0, overflow)])
    assert daemon.run() == 0
    assert "b.md" in (folder / "MEMORY.md").read_text()
    events = [r["event"] for r in env.audit_rows()]
    assert "watch.overflow" in events and "watch.rescanned" in events


def test_watch_limit_is_reported_once_and_falls_back_to_polling(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC from inotify: `watch.limit` with the sysctl hint, once; the dir is polled."""

    def refuse(self: Watcher, path: Path, *, parent: bool) -> WatchError | None:
        return None if parent else WatchError(path, "No space left on device", True)

    monkeypatch.setattr(Watcher, "add", refuse)
    cfg = build_config({"paths": {"claude_home": str(env.claude)}}, "test")
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    rt = env.runtime(cfg)
    daemon = Daemon(None, rt.paths, rt)
    daemon.watcher.observer = type("NoObserver", (), {"schedule": None})()
    daemon.rediscover()
    daemon.rediscover()
    rows = [r for r in env.audit_rows() if r["event"] == "watch.limit"]
    assert len(rows) == 1 and "max_user_watches" in str(rows[0]["hint"])
    assert all(e.watch == "polling" for e in daemon.dirs.values())
    assert (folder / "MEMORY.md").exists()  # the dir is still looked after


def test_a_watch_whose_folder_went_is_made_again(env: Env, embedded: Daemon) -> None:
    """The kernel drops a watch with its folder. A folder made again in its place may have
    the same inode number, so the identity check cannot tell: the watch is made anew anyway,
    and the dir looked at in full."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    key = (folder.resolve(), False)
    old_watch = embedded.watcher._watches[key]
    embedded.events.put(Signal(Kind.LOST, folder.resolve()))  # as the event thread would
    # (Watches of one path compare equal: it is the object that must be new.)
    wait_for(lambda: embedded.watcher._watches.get(key, old_watch) is not old_watch)
    write_memory(folder, "b.md")
    wait_for(lambda: "b.md" in (folder / "MEMORY.md").read_text())


def test_the_loop_takes_batches_from_its_event_source_on_its_clock(
    env: Env, tmp_path: Path
) -> None:
    """A scripted event source and a fake clock stand in for inotify and time: two changes
    in one dir make one pass, due once one of them has been quiet for the debounce (a file's
    own quiet decides), never before; the heartbeat comes every 15 s of that clock."""
    folder = tmp_path / "mem"
    cfg = build_config({"watch": {"debounce": "200ms", "max_wait": "2s"}}, "test")
    clock = FakeClock(100.0)
    script: list[tuple[float, object]] = [
        (100.0, [Signal(Kind.DIRTY, folder, "a.md")]),
        (100.1, [Signal(Kind.DIRTY, folder, "b.md")]),
        (131.0, []),
    ]
    daemon = scripted_daemon(env.runtime(cfg), clock, script)  # type: ignore[arg-type]
    passes: list[tuple[float, list[Path]]] = []
    beats: list[float] = []
    daemon.process = lambda paths, full=False: passes.extend([(clock.now, paths)] if paths else [])
    daemon.heartbeat = lambda: beats.append(clock.now)
    assert daemon.run() == 0
    # a.md quiet 200 ms after its change; b.md changed 100 ms later, one pass for both.
    assert [(round(at, 3), paths) for at, paths in passes] == [(100.2, [folder])]
    assert [round(at, 3) for at in beats[1:3]] == [115.0, 130.0]  # (0: at start-up)


def test_memory_a_pass_used_goes_back_once_the_loop_is_quiet(env: Env, tmp_path: Path) -> None:
    """What a pass used is let go RELEASE_AFTER after it (a change within that postpones
    it: a pass just after a release would fault its pages in again), and by each heartbeat."""
    folder = tmp_path / "mem"
    cfg = build_config({"watch": {"debounce": "200ms", "max_wait": "2s"}}, "test")
    clock = FakeClock(100.0)
    script: list[tuple[float, object]] = [
        (100.0, [Signal(Kind.DIRTY, folder, "a.md")]),
        (103.0, [Signal(Kind.DIRTY, folder, "b.md")]),
        (120.0, [Signal(Kind.DIRTY, folder, "c.md")]),
        (131.0, []),
    ]
    daemon = scripted_daemon(env.runtime(cfg), clock, script)  # type: ignore[arg-type]
    released: list[float] = []
    daemon.start_up = lambda: None
    daemon.release_memory = lambda: released.append(round(clock.now, 3))
    assert daemon.run() == 0
    # Passes at 100.2, 103.2 and 120.2; heartbeats at 115, 130 and the last at the stop.
    assert released == [108.2, 115.0, 125.2, 130.0, 131.0]


def test_an_overflow_a_reload_and_a_stop_are_events_of_a_batch(env: Env) -> None:
    """What the process is told (SIGHUP, SIGTERM, a lost-events warning) reaches the loop
    as events, taken in order with the file signals of the same batch."""
    cfg = build_config({"paths": {"claude_home": str(env.claude)}}, "test")
    clock = FakeClock()
    calls: list[str] = []
    daemon = scripted_daemon(env.runtime(cfg), clock, [
        (1001.0, [Control.RELOAD, Overflow("lost")]),
        (1002.0, [Control.STOP, Signal(Kind.DIRTY, env.claude, "late.md")]),
        (1003.0, [Control.RELOAD]),  # never taken: the loop stopped
    ])  # fmt: skip
    daemon.reload = lambda: calls.append("reload")
    daemon.rescan = lambda detail: calls.append(f"rescan {detail}")
    assert daemon.run() == 0
    assert calls == ["reload", "rescan lost"]
    assert daemon.stopping.is_set()


def test_one_inotify_descriptor_reads_every_watch(tmp_path: Path) -> None:
    """A watched folder's own listing (an event with no name) and a file read say nothing; a
    file written, moved in and deleted says what it is; the folder deleted says its watch is lost;
    an interest in one folder by two watches shares the kernel's one watch."""
    from memoryd.daemon.inotify import Inotify

    signals: list[Signal] = []
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.md").write_text("x")
    watcher = Watcher(signals.append)
    watcher.start()
    try:
        assert isinstance(watcher.observer, Inotify)
        assert watcher.add(folder, parent=False) is None
        assert len(watcher.observer._by_wd) == 1
        list(folder.iterdir())
        (folder / "a.md").read_bytes()
        (folder / "b.md").write_text("y")
        (tmp_path / "c.md").write_text("z")
        (tmp_path / "c.md").rename(folder / "c.md")
        (folder / "b.md").unlink()
        for name in ("a.md", "c.md"):
            (folder / name).unlink()
        folder.rmdir()
        wait_for(lambda: Signal(Kind.LOST, folder) in signals, what="the watch lost")
    finally:
        watcher.stop()
    assert signals[:4] == [
        Signal(Kind.DIRTY, folder, "b.md"),
        Signal(Kind.DIRTY, folder, "c.md"),
        Signal(Kind.DIRTY, folder, "b.md"),
        Signal(Kind.DIRTY, folder, "a.md"),
    ]


def test_a_pile_up_waits_for_five_changes_and_quiet_across_a_restart(env: Env) -> None:
    """4 changes and an hour of quiet: no pass; a restart keeps the count; the 5th change: one
    pass once the dir has been quiet for dream.quiet, and only one however long it idles. The
    wall clock (the Runtime's) moves with the loop's fake one."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "base.md")
    cfg = build_config(
        {
            "paths": {"claude_home": str(env.claude)},
            "index": {"new_file_grace": "0s"},
            "watch": {"reconcile_every": "1h"},
            "dream": {"pile_up": 5, "quiet": "10m", "min_interval": "0s"},
        },
        "test",
    )
    clock = FakeClock()
    start = time.time() - clock.now
    rt = replace(env.runtime(cfg), clock=lambda: start + clock.now)

    def passes() -> list[dict[str, object]]:
        return [r for r in env.audit_rows() if r["event"] == "dream.completed"]

    def change(i: int) -> Callable[[], list[object]]:
        def write() -> list[object]:
            write_memory(folder, f"c{i}.md", description=f"change {i}")
            return [Signal(Kind.DIRTY, folder, f"c{i}.md")]

        return write

    def none_yet() -> list[object]:
        assert passes() == []
        return []

    first = [(1000.0 + i, change(i)) for i in range(4)] + [(4600.0, none_yet)]
    assert scripted_daemon(rt, clock, first).run() == 0  # type: ignore[arg-type]
    assert env.runtime().store.load(folder).changed_since_dream == [f"c{i}.md" for i in range(4)]

    def too_soon() -> list[object]:
        assert passes() == []  # 5 changes, but the dir not quiet for 10 minutes yet
        return []

    second = [(5000.0, change(4)), (5500.0, too_soon), (9000.0, [])]
    assert scripted_daemon(rt, clock, second).run() == 0  # type: ignore[arg-type]
    assert len(passes()) == 1
    [began] = [r for r in env.audit_rows() if r["event"] == "dream.started"]
    assert began["trigger"] == "pile-up" and began["level"] == "info"
    assert env.runtime().store.load(folder).changed_since_dream == []


def test_the_kernels_overflow_is_told_and_a_dropped_watch_forgotten(tmp_path: Path) -> None:
    """IN_Q_OVERFLOW (no watch of its own) goes to the overflow callback; IN_IGNORED (the
    kernel dropped a watch with its folder) forgets it, so a folder made again there gets a
    watch of its own."""
    from memoryd.daemon import inotify

    told: list[str] = []
    backend = inotify.Inotify(told.append)
    backend.start()
    try:
        folder = tmp_path / "m"
        folder.mkdir()
        watch = backend.schedule(folder, [FileClosedEvent], lambda _event: None)
        [wd] = backend._by_wd
        backend._dispatch([(-1, inotify.IN_Q_OVERFLOW, ""), (wd, inotify.IN_IGNORED, "")])
        assert len(told) == 1 and "overflow" in told[0]
        assert backend._by_wd == {} and backend._wd_of == {}
        backend.unschedule(watch)  # already gone: nothing to do, no error
    finally:
        backend.stop()


def test_a_memory_dir_linked_after_its_project_folder_is_found_by_its_event(
    env: Env, embedded: Daemon
) -> None:
    """Claude Code makes the project folder first and its memory dir later: once the new
    folder is watched, a symlinked memory dir made in it is found by that watch's event (the
    reconcile is an hour away)."""
    (env.claude / "projects").mkdir(parents=True)
    slug = env.claude / "projects" / "-late-link"
    slug.mkdir()

    def watched() -> bool:
        try:
            return (slug, True) in embedded.watcher.watched()
        except RuntimeError:  # read while the loop changes it: ask again
            return False

    wait_for(watched, what="the project folder watched")
    real = env.claude / "real-memory"
    real.mkdir()
    write_memory(real, "c.md")
    (slug / "memory").symlink_to(real)
    wait_for(lambda: (real / "MEMORY.md").exists(), what="the linked dir indexed")
    assert "c.md" in (real / "MEMORY.md").read_text()


def test_no_inotify_instance_to_be_had_falls_back_to_one_a_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's inotify instances all taken (EMFILE at start): the watcher falls back to
    watchdog's observer, which asks for one a watch, each failure then reported (and its
    dir polled) as a watch that cannot be added; here the next one is free, so it works."""
    import errno

    from memoryd.daemon import inotify

    def refuse(self: inotify.Inotify) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(inotify.Inotify, "start", refuse)
    signals: list[Signal] = []
    watcher = Watcher(signals.append)
    watcher.start()
    try:
        assert not isinstance(watcher.observer, inotify.Inotify)
        assert watcher.add(tmp_path, parent=False) is None
        (tmp_path / "a.md").write_text("x")
        wait_for(lambda: Signal(Kind.DIRTY, tmp_path, "a.md") in signals, what="its event")
    finally:
        watcher.stop()
