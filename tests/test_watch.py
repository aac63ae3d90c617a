"""The watch layer: the debounce contract on a fake clock, the pure event filter, the overflow
hook driving a rescan, and watch-limit fallback (the daemon runs in-process here)."""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
)

from memoryd.config import build_config
from memoryd.daemon import Daemon
from memoryd.watch import Debouncer, Kind, Signal, Watcher, WatchError, classify
from tests.conftest import Env, write_memory
from tests.helpers import wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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
        (FileClosedNoWriteEvent("/m/a.md"), [Signal(Kind.READ, DIR, "a.md")]),
        (FileClosedNoWriteEvent("/m/MEMORY.md"), []),
        (DirDeletedEvent("/m"), [Signal(Kind.LOST, DIR)]),  # its watch went with it
        (FileCreatedEvent("/m/a.md"), [Signal(Kind.DIRTY, DIR, "a.md")]),  # moved in from elsewhere
    ],
)
def test_event_filter_table(event, expected) -> None:
    """What each kind of event means: dirty, read, structure, or nothing (our own writes)."""
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
def embedded(env: Env, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """The real daemon loop on a thread of this process (signals are left to the test).
    `@pytest.mark.parametrize("embedded", [signal], indirect=True)` sets watch.consult_signal."""
    watch: dict[str, object] = {"debounce": "100ms", "max_wait": "1s", "reconcile_every": "1h"}
    if getattr(request, "param", None):
        watch["consult_signal"] = request.param
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
    deadline = time.monotonic() + 10
    while not daemon.paths.status_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield daemon
    daemon.request_stop()
    thread.join(timeout=20)
    assert not thread.is_alive()


@pytest.mark.parametrize("embedded", ["transcripts+reads"], indirect=True)
def test_overflow_warning_forces_a_rescan_that_catches_lost_changes(
    env: Env, embedded: Daemon
) -> None:
    """Events are lost; the overflow warning (through watchdog's logger) triggers a rescan."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    time.sleep(1.0)  # let every event of the set-up drain
    embedded.watcher.observer.unschedule_all()  # from here on, every event is "lost"
    time.sleep(0.3)
    write_memory(folder, "b.md")
    time.sleep(0.6)
    assert "b.md" not in (folder / "MEMORY.md").read_text()
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )
    wait_for(lambda: "b.md" in (folder / "MEMORY.md").read_text())
    wait_for(lambda: "watch.rescanned" in [r["event"] for r in env.audit_rows()])
    assert "watch.overflow" in [r["event"] for r in env.audit_rows()]
    assert embedded.consult_signal is False


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


@pytest.mark.parametrize("embedded", ["transcripts+reads"], indirect=True)
def test_reads_by_the_agent_are_recorded_and_our_own_are_not(env: Env, embedded: Daemon) -> None:
    """Opted in (watch.consult_signal = "transcripts+reads"): reading a memory file (close
    without write) is recorded; memoryd's own reads are not."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    write_memory(folder, "b.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    time.sleep(2.0)  # past the window of memoryd's own reads of the dir
    (folder / "a.md").read_bytes()  # the agent consults a memory
    time.sleep(0.3)
    write_memory(folder, "c.md")  # any change makes the worker absorb pending reads
    store = embedded.rt.store

    wait_for(lambda: "a.md" in store.load(folder).reads)
    assert "b.md" not in store.load(folder).reads


def test_by_default_a_grep_of_the_memory_dir_is_no_consult(env: Env, embedded: Daemon) -> None:
    """With the default watch.consult_signal ("transcripts"), a `grep -r` over the memory dir
    (any process reading its files) records nothing: only the agent's tool calls count."""
    import subprocess

    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    write_memory(folder, "b.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    time.sleep(2.0)  # past the window of memoryd's own reads of the dir
    subprocess.run(["grep", "-r", "a memory", str(folder)], capture_output=True, check=False)
    time.sleep(0.3)
    write_memory(folder, "c.md")  # any change makes the worker absorb pending reads
    wait_for(lambda: "c.md" in (folder / "MEMORY.md").read_text())
    embedded.absorb_reads()  # what the worker does after a pass (the old code recorded it)
    assert embedded.rt.store.load(folder.resolve()).reads == {}
    assert embedded.consult_signal is False


def test_a_watch_whose_folder_went_is_made_again(env: Env, embedded: Daemon) -> None:
    """The kernel drops a watch with its folder. A folder made again in its place may have
    the same inode number, so the identity check cannot tell: the watch is made anew anyway,
    and the dir looked at in full."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    key = (folder.resolve(), False)
    old_watch = embedded.watcher._watches[key]
    embedded.on_signal(Signal(Kind.LOST, folder.resolve()))
    # (Watches of one path compare equal: it is the object that must be new.)
    wait_for(lambda: embedded.watcher._watches.get(key, old_watch) is not old_watch)
    write_memory(folder, "b.md")
    wait_for(lambda: "b.md" in (folder / "MEMORY.md").read_text())


def test_merged_reader_events_never_leave_a_command_window_open(env: Env) -> None:
    """Repeated identical events are merged (inotify, the observer's queue): two commands that
    open or close at once may show as one event. Whatever arrives, a close leaves no window
    open; one left open would take every agent read for a command's for 15 minutes."""
    cfg = build_config({"paths": {"claude_home": str(env.claude)}}, "test")
    rt = env.runtime(cfg)
    daemon = Daemon(None, rt.paths, rt)
    folder = env.claude / "agent-memory" / "helper"
    opened, closed = (Signal(kind, folder, "k.readers")
                      for kind in (Kind.READER_OPENED, Kind.READER_CLOSED))  # fmt: skip
    for stream in ([opened, opened, closed], [opened, closed, opened, opened, closed],
                   [opened, closed, closed], [opened, opened, closed, closed]):  # fmt: skip
        daemon._reader_windows.clear()
        for sig in stream:
            daemon.on_signal(sig)
        windows = daemon._reader_windows["k.readers"]
        assert windows and all(end != float("inf") for _, end in windows), stream
    daemon.on_signal(opened)  # and a command reading now is one
    assert any(end == float("inf") for _, end in daemon._reader_windows["k.readers"])


def test_the_daemon_takes_its_event_source_and_clock_as_given(env: Env, tmp_path: Path) -> None:
    """A scripted event source and a fake clock stand in for watchdog and time: two changes
    in one dir make one batch, due once one of them has been quiet for the debounce (a
    file's own quiet decides), never before."""
    made: list[Callable[[Signal], None]] = []

    class Scripted(Watcher):
        def start(self) -> None:  # no observer thread: the test is the event source
            pass

    def make_watcher(sink: Callable[[Signal], None], reads: bool) -> Watcher:
        made.append(sink)
        return Scripted(sink, reads=reads)

    now = [100.0]
    cfg = build_config({"watch": {"debounce": "200ms", "max_wait": "2s"}}, "test")
    rt = env.runtime(cfg)
    daemon = Daemon(None, rt.paths, rt, mono=lambda: now[0], make_watcher=make_watcher)
    assert isinstance(daemon.watcher, Scripted) and made == [daemon.on_signal]
    folder = tmp_path / "mem"
    made[0](Signal(Kind.DIRTY, folder, "a.md"))
    now[0] += 0.1
    made[0](Signal(Kind.DIRTY, folder, "b.md"))
    assert daemon.wake.is_set()
    now[0] += 0.05
    assert daemon.debouncer.pop_due() == []  # a.md 150 ms after its change: not quiet yet
    now[0] += 0.1
    assert daemon.debouncer.pop_due() == [folder]  # a.md quiet, b.md changed 150 ms ago
