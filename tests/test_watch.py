"""The watch layer: the debounce contract on a fake clock, the pure event filter, the overflow
hook driving a rescan, and watch-limit fallback (the daemon runs in-process here)."""

import logging
import threading
from collections.abc import Callable, Iterator
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
    wait_for(daemon.paths.status_file.exists, what="the daemon's first heartbeat")
    yield daemon
    daemon.request_stop()
    thread.join(timeout=20)
    assert not thread.is_alive()


def test_overflow_warning_forces_a_rescan_that_catches_lost_changes(
    env: Env, embedded: Daemon
) -> None:
    """Events are lost; the overflow warning (through watchdog's logger) triggers a rescan."""
    folder = env.claude / "agent-memory" / "helper"
    write_memory(folder, "a.md")
    wait_for(lambda: (folder / "MEMORY.md").exists())
    # From here on every event is "lost": an unscheduled watch's queued events are dropped.
    embedded.watcher.observer.unschedule_all()
    wait_for(lambda: not embedded.debouncer.pending(), what="the set-up's changes taken")
    idle = threading.Event()
    embedded.submit(idle.set)  # one worker: once this job runs, every pass before it is done
    assert idle.wait(10)
    write_memory(folder, "b.md")  # nothing can now look at the dir but the rescan
    assert "b.md" not in (folder / "MEMORY.md").read_text()
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )
    wait_for(lambda: "b.md" in (folder / "MEMORY.md").read_text())
    wait_for(lambda: "watch.rescanned" in [r["event"] for r in env.audit_rows()])
    assert "watch.overflow" in [r["event"] for r in env.audit_rows()]


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
    embedded.on_signal(Signal(Kind.LOST, folder.resolve()))
    # (Watches of one path compare equal: it is the object that must be new.)
    wait_for(lambda: embedded.watcher._watches.get(key, old_watch) is not old_watch)
    write_memory(folder, "b.md")
    wait_for(lambda: "b.md" in (folder / "MEMORY.md").read_text())


def test_the_daemon_takes_its_event_source_and_clock_as_given(env: Env, tmp_path: Path) -> None:
    """A scripted event source and a fake clock stand in for watchdog and time: two changes
    in one dir make one batch, due once one of them has been quiet for the debounce (a
    file's own quiet decides), never before."""
    made: list[Callable[[Signal], None]] = []

    class Scripted(Watcher):
        def start(self) -> None:  # no observer thread: the test is the event source
            pass

    def make_watcher(sink: Callable[[Signal], None]) -> Watcher:
        made.append(sink)
        return Scripted(sink)

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
