"""`memoryd run`: the composition root. Observer, debouncer, one-worker scheduler, signals.

Threads: the watchdog observer only classifies events and enqueues; the main thread waits for
deadlines and hands work to the scheduler; the scheduler's single worker does every bit of file
work, so work is serialised. Signal handlers only set flags.
"""

import contextlib
import errno
import fcntl
import json
import math
import os
import signal
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from memoryd import __version__, fsops, housekeeping, notify
from memoryd.config import Config, load_config
from memoryd.discover import MemoryDir, discover_all, lock_is_fresh, report_refused
from memoryd.errors import ConfigError, MemorydError
from memoryd.indexing.outcome import IndexStatus
from memoryd.indexing.passes import update_changed
from memoryd.indexing.read import Held
from memoryd.indexing.scan import DirScan
from memoryd.instance import lock_holder as lock_holder  # moved; still importable here
from memoryd.logsetup import configure, get_logger
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import AppPaths, NotRegularFile, ensure_private_dir, regular_fd
from memoryd.recovery import recover
from memoryd.runtime import Runtime, tune_gc
from memoryd.watch import Debouncer, Kind, Signal, Watcher, install_overflow_hook

if TYPE_CHECKING:
    from memoryd.versions import VersionStore

HEARTBEAT_EVERY = 15.0
STALE_AFTER = 300.0  # a worker silent this long is stuck: stop telling systemd we are alive
SETTLE = 5.0  # an unparseable file younger than this may be half-written: look again later
OWN_READ_SLACK = 1.5
# A read seen this close to a memoryd command holding the dir's readers file open is the
# command's (events of two watches may reach the handler a little out of order).
READERS_SLACK = 0.5
READERS_KEEP = 120.0  # how long a closed window is kept (reads are taken in well before)
READERS_LONGEST = 900.0  # a command reading a dir longer than this is no command (a lost close)
QUIET_READS_FROM = 500  # changed names in one pass from which the dir's read events are paused
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class AlreadyRunning(MemorydError):
    pass


def acquire_lock(paths: AppPaths) -> int:
    """One instance per user: an exclusive flock on a file in the state dir, holding our pid."""
    ensure_private_dir(paths.state_dir)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        regular_fd(fd, paths.lock_file)  # a FIFO opened O_RDWR never blocks, but is no lock file
    except NotRegularFile as error:
        raise MemorydError(
            f"{paths.lock_file} is {error.what}, not memoryd's lock file: remove it and start again"
        ) from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            f"memoryd is already running (pid {holder}, lock {paths.lock_file}); stop it first "
            "(`systemctl --user stop memoryd`, or kill that pid)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@dataclass(slots=True)
class DirSession:
    """One memory dir as the daemon keeps it, from its discovery until it is lost: what the
    events reported since its last pass (filled by the observer thread under the daemon's
    lock, taken by the worker) and what that pass left for the next (the worker's only).
    A dir that goes takes all of it with it; one found again starts a session afresh."""

    md: MemoryDir
    identity: tuple[int, int]
    watch: str = "ok"  # ok | polling (no watch could be added) | lost
    last_index_write: float = 0.0
    last_status: str = ""
    reading: tuple[float, float] = (0.0, 0.0)  # when memoryd itself last read the dir
    scan: DirScan | None = None  # the last full picture of the dir, for incremental passes
    held: Held | None = None  # what the last pass left for one over just the changed files
    managed: bool = False  # whether memoryd managed its index at the last pass
    # From the observer thread (under the daemon's lock):
    changed: set[str] | None = None  # the names events reported since the last pass
    reads: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, name)
    # Look at every file next time, not just those events named (a watch made anew).
    rescan: bool = False
    # The identity (inode, size, mtime_ns) each index file memoryd wrote has: its events
    # are memoryd's own, not news.
    own_writes: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def take_changes(self) -> tuple[set[str] | None, bool]:
        """The names reported since the last pass, and whether to look at every file (under
        the daemon's lock)."""
        names, self.changed = self.changed, None
        rescan, self.rescan = self.rescan, False
        return names, rescan

    def forget_view(self) -> None:
        """The files may have changed unseen (a dream pass's moves, a lost watch): the next
        pass looks at the whole dir."""
        self.scan, self.held = None, None

    def is_own_write(self, name: str) -> bool:
        """Whether `name` holds the content memoryd itself just wrote (same file, size and
        mtime): its events are dropped."""
        expected = self.own_writes.get(name)
        if expected is None:
            return False
        try:
            st = os.lstat(self.md.real_path / name)
        except OSError:
            return False
        return (st.st_ino, st.st_size, st.st_mtime_ns) == expected


def make_readers_file(path: Path) -> None:
    """Make a dir's readers file (see StateStore.reading) without opening it: an open by the
    daemon would read as a memoryd command beginning to read."""
    with contextlib.suppress(OSError):
        ensure_private_dir(path.parent)
        os.mknod(path, 0o600 | stat.S_IFREG)


def default_scheduler() -> BackgroundScheduler:
    """One worker, so all file work runs on one thread; a job queued behind a long one is
    never dropped as missed (APScheduler's 1 s misfire grace)."""
    return BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone="UTC",
    )


def identity_of(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


@dataclass
class Daemon:
    config_path: Path | None
    paths: AppPaths
    rt: Runtime
    mono: Callable[[], float] = time.monotonic
    dirs: dict[Path, DirSession] = field(default_factory=dict)  # by real path
    stop_event: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    log: Any = field(default_factory=get_logger)
    # The collaborators, passed in (tests give a scripted event source or a scheduler of
    # their own): the watcher is made with the daemon's event sink and whether reads count.
    make_watcher: Callable[[Callable[[Signal], None], bool], Watcher] = field(
        default=lambda sink, reads: Watcher(sink, reads=reads)
    )
    make_scheduler: Callable[[], BackgroundScheduler] = default_scheduler
    _reload: bool = False
    _rediscover: bool = True
    _rescan_reason: str = ""
    _lost_watches: set[tuple[Path, bool]] = field(default_factory=set)  # their folder went
    # Per readers file: when memoryd commands held it open ([opened, closed] as events came).
    _reader_windows: dict[str, list[list[float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_beat: float = 0.0
    _started: str = ""
    _waiting_said: bool = False
    _limit_said: bool = False
    consult_signal: bool = False  # read events recorded as consults (watch.consult_signal)
    _reads_lost: bool = False  # ... and turned off after lost file events
    debouncer: Debouncer = field(init=False)
    watcher: Watcher = field(init=False)
    scheduler: BackgroundScheduler = field(init=False)

    def __post_init__(self) -> None:
        w = self.rt.config.watch
        self.debouncer = Debouncer(w.debounce, w.max_wait, self.mono)
        self.consult_signal = w.reads_count
        self.watcher = self.make_watcher(self.on_signal, w.reads_count)

    # --- observer thread: classify and enqueue only --------------------------------------------
    def on_signal(self, sig: Signal) -> None:
        if sig.kind is Kind.STRUCTURE:
            self._rediscover = True
        elif sig.kind is Kind.LOST:
            with self._lock:
                self._lost_watches.add((sig.dir, sig.name == "parent"))
            self._rediscover = True
        elif sig.kind in (Kind.READER_OPENED, Kind.READER_CLOSED):
            # Not a count of opens and closes: repeated identical events are merged (by
            # inotify, and by the observer's queue), so two commands opening or closing at
            # once can show as one event. An open starts a window unless one is open; a close
            # ends all. A command still reading after another closed then counts as an agent:
            # the safe way round (a window left open would hide every agent read for good).
            with self._lock:
                windows = self._reader_windows.setdefault(sig.name, [])
                if sig.kind is Kind.READER_OPENED:
                    if not any(w[1] == math.inf for w in windows):
                        windows.append([self.mono(), math.inf])
                else:
                    for w in windows:
                        if w[1] == math.inf:
                            w[1] = self.mono()
            return
        elif sig.kind is Kind.READ:
            # (A dir with no session has no watch: its last events are dropped with it.)
            session = self.dirs.get(sig.dir)
            if self.consult_signal and session is not None:
                with self._lock:
                    session.reads.append((self.mono(), sig.name))
            return
        else:
            session = self.dirs.get(sig.dir)
            if session is not None:
                if session.is_own_write(sig.name):
                    return
                with self._lock:
                    if session.changed is None:
                        session.changed = set()
                    session.changed.add(sig.name)
            self.debouncer.touch(sig.dir, sig.name)  # each file's own quiet decides
        self.wake.set()

    def _record_own_write(self, folder: Path, name: str, identity: tuple[int, int, int]) -> None:
        """The own-write callback (Runtime.on_own_write), on the worker thread. A dir with no
        session has no watch yet (the recovery at start-up): no event will come."""
        session = self.dirs.get(folder)
        if session is not None:
            session.own_writes[name] = identity

    def on_overflow(self, detail: str) -> None:
        with self._lock:
            self._reader_windows.clear()  # their close events may be among those lost
        self._rescan_reason = detail
        self.wake.set()

    # --- main thread ---------------------------------------------------------------------------
    def submit(self, func: Callable[..., None], *args: Any) -> None:
        self.scheduler.add_job(self._guarded, args=(func, *args), misfire_grace_time=None)

    def _guarded(self, func: Callable[..., None], *args: Any) -> None:
        """Every job runs through here: one failure is logged and the worker carries on."""
        self._last_beat = self.mono()
        try:
            func(*args)
        except Exception as error:
            self.log.error("job failed", job=func.__name__, error=str(error), exc_info=True)
        finally:
            self._last_beat = self.mono()

    def run(self) -> int:
        self._started = datetime.now(UTC).isoformat(timespec="seconds")
        self.scheduler = self.make_scheduler()
        install_overflow_hook(self.on_overflow)
        self.rt.on_own_write = self._record_own_write
        self.watcher.start()
        ensure_private_dir(self.rt.store.root)
        problem = self.watcher.add_readers(self.rt.store.root)
        if problem is not None:
            self.log.warning(
                "cannot watch the state dir: a memoryd command's reads may count as consults",
                path=str(problem.path),
                error=problem.error,
            )
        self._install_signals()
        self.scheduler.start()
        cfg = self.rt.config
        self.scheduler.add_job(
            self._guarded,
            "interval",
            args=(self.reconcile,),
            seconds=cfg.watch.reconcile_every,
            id="reconcile",
        )
        self.scheduler.add_job(
            self._guarded,
            "interval",
            args=(self.heartbeat,),
            seconds=HEARTBEAT_EVERY,
            id="heartbeat",
        )
        self.scheduler.add_job(
            self._guarded, "interval", args=(self.rotate_trash,), days=1, id="trash-rotation"
        )
        self.scheduler.add_job(
            self._guarded, "interval", args=(self.rotate_audit,), hours=1, id="audit-rotation"
        )
        self.submit(self.start_up)
        notify.notify("READY=1")
        interval = notify.watchdog_interval()
        next_ping = self.mono()
        while not self.stop_event.is_set():
            deadline = self.debouncer.next_deadline()
            timeout = HEARTBEAT_EVERY if deadline is None else max(0.0, deadline - self.mono())
            if interval is not None:
                timeout = min(timeout, max(0.0, next_ping - self.mono()))
            self.wake.wait(timeout)
            self.wake.clear()
            if interval is not None and self.mono() >= next_ping:
                if self.mono() - self._last_beat < STALE_AFTER:
                    notify.notify("WATCHDOG=1")
                next_ping = self.mono() + interval
            if self.stop_event.is_set():
                break
            if self._reload:
                self._reload = False
                self.submit(self.reload)
            if self._rescan_reason:
                reason, self._rescan_reason = self._rescan_reason, ""
                self.submit(self.rescan, reason)
            if self._rediscover:
                self._rediscover = False
                self.submit(self.rediscover)
            due = self.debouncer.pop_due()
            if due:
                self.submit(self.process, due)
        return self.shut_down()

    def _install_signals(self) -> None:
        def stop(signum: int, _frame: object) -> None:
            self.stop_event.set()
            self.wake.set()

        def reload(signum: int, _frame: object) -> None:
            self._reload = True
            self.wake.set()

        if threading.current_thread() is not threading.main_thread():
            return  # embedded (tests): the owner stops us through stop_event
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def shut_down(self) -> int:
        notify.notify("STOPPING=1")
        # Flush: events may still sit in watchdog's buffer (it holds them ~0.5 s to pair
        # moves), so look at every dir once more rather than only at what the debounce holds.
        self.watcher.stop()
        self.debouncer.pop_all()
        # Finish the job in hand; queued ones are dropped by APScheduler's shutdown, so the
        # flush runs here, after the worker is gone (still one thread doing file work).
        self.scheduler.shutdown(wait=True)
        self._guarded(self.process, sorted(self.dirs), True)
        self._guarded(self.heartbeat)
        self.rt.on_own_write = None
        self.rt.audit.write("daemon.stopped", reason="signal")
        self.log.info("memoryd stopped")
        return EXIT_OK

    # --- worker jobs ---------------------------------------------------------------------------
    def start_up(self) -> None:
        for recovery in recover(self.rt):
            self.log.warning(
                "recovered an unfinished pass",
                dir=str(recovery.journal.dir),
                outcome=recovery.outcome,
            )
        # Said first, with where the audit log is (tailing it is how people follow memoryd).
        self.log.info("memoryd started", config=self.rt.config.source,
                      audit_log=str(self.paths.audit_log))  # fmt: skip
        self.rediscover()
        self.rt.audit.write(
            "daemon.started", version=__version__, dirs=len(self.dirs), config=self.rt.config.source
        )
        if self.dirs or self.rt.config.paths.claude_home.is_dir():
            self.log.info(f"watching {len(self.dirs)} memory dirs",
                          claude_home=str(self.rt.config.paths.claude_home))  # fmt: skip
        self.heartbeat()
        # Then daily (the job): a daemon restarted every day, a laptop's, still purges.
        self.rotate_trash()

    def rediscover(self) -> None:
        """Find memory dirs, arm watches on them and where new ones appear; drop lost ones.

        Repeated until no new watch was armed: folders created between a listing and the
        watch on their parent (`mkdir -p` of a whole new project) produce no event, so they
        are found by listing again once the watches stand.
        """
        with self._lock:
            lost, self._lost_watches = self._lost_watches, set()
        for path, parent in lost:
            # The kernel dropped the watch with the folder; a folder made in its place, even
            # one with the same inode number (the identity check cannot tell), needs a new
            # one, and a look in full: what happened in between raised no event.
            self.watcher.remove(path, parent=parent)
            session = None if parent else self.dirs.get(path)
            if session is not None:
                session.forget_view()
                with self._lock:
                    session.rescan = True
                self.debouncer.schedule(path, self.mono())
        dirs_before = set(self.dirs)
        try:
            for _ in range(8):
                before = self.watcher.watched()
                self._discover_once()
                if self.watcher.watched() <= before:
                    return
        finally:
            if set(self.dirs) != dirs_before or lost:
                self.heartbeat()  # `memoryd status` tells of a new or lost dir at once

    def _discover_once(self) -> None:
        cfg = self.rt.config
        home = cfg.paths.claude_home
        if not home.is_dir():
            if not self._waiting_said:
                self._waiting_said = True
                self.rt.audit.write("daemon.waiting", path=str(home))
                self.log.info("waiting for the Claude home to exist", path=str(home))
        else:
            self._waiting_said = False
        discovery = discover_all(cfg)
        # A link out of its repo or Claude home (a notes vault): said once, never watched.
        report_refused(self.rt, discovery.refused)
        found = {md.real_path: md for md in discovery.dirs}
        for path in sorted(set(self.dirs) - set(found)):
            self._lose(self.dirs[path], "it is no longer found where memory dirs live")
        new = []
        for path, md in sorted(found.items()):
            ident = identity_of(path)
            session = self.dirs.get(path)
            if ident is None:
                continue
            if session is not None and session.identity != ident:
                self._lose(session, "it was replaced by another folder of the same name")
                session = None
            if session is None:
                self.dirs[path] = DirSession(md, ident)
                make_readers_file(self.rt.store.readers_path(path))
                new.append(path)
        self._sync_watches()
        if new:
            # Said after the first pass, which decides the mode (a separate look first would
            # parse every file twice).
            self.process(new)
            for path in new:
                session = self.dirs.get(path)
                if session is None:
                    continue  # lost meanwhile (dir.lost says so)
                self.rt.audit.write(
                    "dir.discovered",
                    dir=session.md.path,
                    kind=session.md.kind,
                    mode="managed" if session.managed else "unmanaged",
                    real_path=str(session.md.real_path),
                )

    def _parents(self) -> set[Path]:
        cfg = self.rt.config
        home = cfg.paths.claude_home
        out: set[Path] = set()
        probe = home
        while not probe.is_dir() and probe != probe.parent:
            probe = probe.parent
        out.add(probe)  # the Claude home, or the nearest folder where it will appear
        if home.is_dir():
            for sub in ("projects", "agent-memory"):
                if (home / sub).is_dir():
                    out.add(home / sub)
            projects = home / "projects"
            if projects.is_dir():
                with contextlib.suppress(OSError):
                    out.update(p for p in projects.iterdir() if p.is_dir() and not p.is_symlink())
        for md in (e.md for e in self.dirs.values()):
            if md.kind in ("repo", "repo-agent", "repo-agent-local") and md.repo_root:
                repo = md.repo_root.resolve()
                for sub in (".claude", ".claude/agent-memory", ".claude/agent-memory-local"):
                    # Not through a link out of the repo: nothing outside it is watched.
                    if (md.repo_root / sub).is_dir() and (
                        (md.repo_root / sub).resolve().is_relative_to(repo)
                    ):
                        out.add(md.repo_root / sub)
        return out

    def _sync_watches(self) -> None:
        wanted = {(p, False) for p in self.dirs} | {(p, True) for p in self._parents()}
        errors = self.watcher.sync(wanted)
        failed = {e.path for e in errors}
        for path, session in self.dirs.items():
            session.watch = "polling" if path in failed else "ok"
        limits = [e for e in errors if e.limit]
        if limits and not self._limit_said:
            self._limit_said = True
            hint = (
                "raise the inotify limits, e.g. `sudo sysctl fs.inotify.max_user_watches="
                "524288 fs.inotify.max_user_instances=1024`; until then these dirs are "
                f"checked every {int(self.rt.config.watch.reconcile_every)} s"
            )
            self.rt.audit.write(
                "watch.limit", error=limits[0].error, hint=hint, dirs=[str(e.path) for e in limits]
            )
            self.log.warning("cannot watch every dir", error=limits[0].error, hint=hint)

    def _lose(self, session: DirSession, reason: str) -> None:
        """Drop the dir's session (and all it held) and its watch. A dir deleted whole
        (not replaced: the new folder's first pass finds its files gone) raises the alarm
        for the memory files it held (versions.dir_deleted)."""
        self.dirs.pop(session.md.real_path, None)
        self.watcher.remove(session.md.real_path, parent=False)
        self.rt.audit.write("dir.lost", dir=session.md.path, reason=reason)
        if self.rt.versions is not None:
            from memoryd.versions import dir_deleted

            dir_deleted(self.rt.versions, session.md.real_path)

    def process(self, paths: list[Path], full: bool = False) -> None:
        """Re-stat each dir and bring its index in step; nothing to do writes nothing."""
        self.absorb_reads()  # before our own reads below move the windows they are judged by
        for path in paths:
            session = self.dirs.get(path)
            if session is None:
                continue
            if identity_of(path) != session.identity:
                # Deleted, or replaced: never write to a stale path.
                self._lose(session, "it was deleted or replaced")
                self._rediscover = True
                self.wake.set()
                continue
            self._index_pass(session, full)
        self.absorb_reads()
        self.check_pile_up()

    def _index_pass(self, session: DirSession, full: bool) -> None:
        """One dir's change: what its session holds -> indexing.passes.update_changed -> the outcome
        back into the session, the search index, the log and the debouncer."""
        path = session.md.real_path
        with self._lock:
            names, rescan = session.take_changes()
        # Someone else wrote the index (a `memoryd trash restore`, a person, the agent):
        # they may have changed files whose events were not ours to see (a move in from
        # the trash raises none on some systems), so every file is looked at (by stat).
        foreign_index = names is not None and not names.isdisjoint((INDEX_NAME, ARCHIVE_NAME))
        incremental = (
            bool(names) and not (full or rescan or foreign_index) and session.scan is not None
        )
        # Reading thousands of changed files (a checkout) raises as many read events, all
        # our own and dropped, but handling them competes with the pass for the
        # interpreter: it took 1.2-1.4 s instead of 0.4 s at 10,000. So the dir is watched
        # without reads meanwhile, then looked at in full for anything the two swaps of its
        # watch let through (a stat of each file: what changed since is read again).
        quiet = incremental and self.consult_signal and len(names or ()) >= QUIET_READS_FROM
        if quiet and self.watcher.rewatch(path, reads=False) is not None:
            session.watch = "polling"  # no watch at all now: the reconcile looks instead
        started = self.mono()
        outcome = update_changed(
            self.rt,
            session.md,
            grace=self.rt.config.index.new_file_grace,
            settle=SETTLE,
            # Events name what changed; without them (a retry, a reconcile), scan in full,
            # re-reading only what changed since the last scan.
            previous=session.scan,
            changed=names if incremental else None,
            held=session.held,
        )
        session.held = outcome.held
        if outcome.ownership is not None:
            session.managed = outcome.ownership.managed
        session.reading = (started, self.mono())
        if quiet:
            if self.watcher.rewatch(path, reads=True) is not None:
                session.watch = "polling"
            with self._lock:
                session.rescan = True
            self.debouncer.schedule(path, self.mono())
            self.wake.set()
        if outcome.scan is not None:
            session.scan = outcome.scan
        session.last_status = outcome.status
        self._update_search(session.md, names if incremental else None)
        if outcome.status is IndexStatus.UPDATED:
            session.last_index_write = time.time()  # its events are known: _record_own_write
        elif outcome.status in (IndexStatus.ERROR, IndexStatus.CONFLICT):
            self.log.warning("index not updated", dir=str(session.md.path), message=outcome.message)
        if outcome.retry_after is not None:
            self.debouncer.schedule(path, self.mono() + max(0.0, outcome.retry_after - time.time()))
            self.wake.set()

    def _update_search(self, md: MemoryDir, names: set[str] | None) -> None:
        """The dir's search index (memoryd.recall) in step in the same pass: only the names
        the events reported, or every file by stat after a full scan. It never raises; a
        damaged index is rebuilt and said at warning."""
        from memoryd.recall.store import update_dir, worker_count

        parse = self.rt.config.parse
        update_dir(
            self.rt.paths.state_dir,
            md.real_path,
            names,
            max_file_bytes=parse.max_file_bytes,
            max_frontmatter_bytes=parse.max_frontmatter_bytes,
            warn=lambda message: self.log.warning(
                "search index", dir=str(md.path), message=message
            ),
            workers=worker_count(),
        )

    def absorb_reads(self) -> None:
        """Record reads by other processes (the consult signal); drop the ones we caused."""
        with self._lock:
            reads = []
            for session in self.dirs.values():
                if session.reads:
                    reads.append((session, session.reads))
                    session.reads = []
        by_dir: dict[Path, dict[str, float]] = {}
        now = time.time()
        with self._lock:
            windows = {k: [tuple(w) for w in v] for k, v in self._reader_windows.items()}
            for kept in self._reader_windows.values():
                # Forget the long closed ones, and any open one whose close was never seen
                # (an event lost to an overflow): it would hide every read for good.
                kept[:] = [
                    w
                    for w in kept
                    if self.mono() - w[1] < READERS_KEEP and self.mono() - w[0] < READERS_LONGEST
                ]
        for session, taken in reads:
            folder = session.md.real_path
            start, end = session.reading
            commands = windows.get(self.rt.store.readers_path(folder).name, ())
            for when, name in taken:
                if start <= when <= end + OWN_READ_SLACK:  # events come a little after the read
                    continue
                if any(s - READERS_SLACK <= when <= e + READERS_SLACK for s, e in commands):
                    continue  # a memoryd command's read (`dream --dry-run`, `explain`...)
                by_dir.setdefault(folder, {})[name] = now - (self.mono() - when)
        for folder, seen in by_dir.items():
            state = self.rt.store.load(folder)
            state.reads.update(seen)
            self.rt.store.save(folder, state)

    def check_pile_up(self) -> None:
        """Dream where enough changed, the dir is quiet and the last pass is old enough."""
        cfg = self.rt.config.dream
        now = time.time()
        for path, session in sorted(self.dirs.items()):
            state = self.rt.store.load(path)
            count = len(state.changed_since_dream)
            if count < cfg.pile_up:
                continue
            if now - state.last_change_ts < cfg.quiet:
                self.debouncer.schedule(
                    path, self.mono() + cfg.quiet - (now - state.last_change_ts)
                )
                self.wake.set()
                continue
            why = ""
            if now - state.last_dream_ts < cfg.min_interval:
                why = (
                    f"{count} files changed, but the last pass was less than "
                    f"{int(cfg.min_interval)} s ago"
                )
                self.debouncer.schedule(
                    path, self.mono() + cfg.min_interval - (now - state.last_dream_ts)
                )
            elif lock_is_fresh(session.md, now):  # fresh and its PID alive (claude_lock)
                why = "Claude Code's .consolidate-lock is held: it is consolidating this dir"
                self.debouncer.schedule(path, self.mono() + 300)
            if why:
                if state.report_once("pile-up-skip", why.split(",")[0]):
                    self.rt.store.save(path, state)
                    self.rt.audit.write("dream.skipped", dir=session.md.path, why=why)
                continue
            # Imported here: the dream pass brings numpy and rapidfuzz, which an idle daemon
            # that never dreams should not carry in memory.
            from memoryd.dream.run import RepoCache, dream_dir

            started = self.mono()
            # DESIGN §5: at the start of a later pass (a dir a command holds: next time).
            housekeeping.rotate(self.rt, [session.md], wait_lock=False)
            result = dream_dir(
                self.rt,
                session.md,
                repos=RepoCache.of(self.rt),
                trigger="pile-up",
                wait_lock=False,
                stop=self.stop_event.is_set,  # SIGTERM stops a pass before its moves
            )
            self.rt.dream.release_facts()  # a pass an hour or more apart gains little from them
            _return_freed_memory()
            session.reading = (started, self.mono())
            session.forget_view()  # the pass moved files: the next look is a full one
            if result.index is not None and result.index.retry_after is not None:
                # New files its index update left in their grace: indexed once out of it.
                self.debouncer.schedule(
                    path, self.mono() + max(0.0, result.index.retry_after - time.time())
                )
                self.wake.set()
            state = self.rt.store.load(path)
            state.reported.pop("pile-up-skip", None)
            self.rt.store.save(path, state)
            self.log.info(
                "dream pass",
                dir=str(session.md.path),
                status=result.status,
                moved=len(result.moved),
            )

    def reconcile(self) -> None:
        """Never trust events alone: rediscover, then a stat-only look at every dir."""
        self.rediscover()
        self.process(sorted(self.dirs), full=True)

    def rescan(self, detail: str) -> None:
        self.rt.audit.write("watch.overflow", detail=detail)
        self.log.warning("file events were lost; rescanning", detail=detail)
        if self.consult_signal:
            self.consult_signal = False  # reads cannot be told apart reliably after a loss
            self._reads_lost = True
            self.log.warning("consult signal from read events turned off after an overflow")
        before = {p: e.last_index_write for p, e in self.dirs.items()}
        self.reconcile()
        changed = sum(1 for p, e in self.dirs.items() if e.last_index_write != before.get(p))
        self.rt.audit.write("watch.rescanned", dirs=len(self.dirs), changed=changed)

    def rotate_trash(self) -> None:
        housekeeping.rotate(self.rt, [e.md for e in self.dirs.values()], wait_lock=False)

    def request_stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def rotate_audit(self) -> None:
        self.rt.audit.rotate_if_needed()

    def reload(self) -> None:
        try:
            config = load_config(self.config_path, self.paths)
        except ConfigError as error:
            self.rt.audit.write("config.invalid", source=error.source, problems=error.problems)
            # Not log.exception: the problems list says it all, a traceback would add nothing.
            self.log.warning(
                "configuration invalid; keeping the previous one", problems=error.problems
            )
            return
        self.rt.config = config
        self.rt.audit = Runtime.create(config, self.paths).audit
        configure(config.log.level)
        self.debouncer.quiet = config.watch.debounce
        self.debouncer.max_wait = config.watch.max_wait
        if config.watch.reads_count != self.watcher.reads:
            # Watches with or without read events; what happened in between is looked at.
            self.consult_signal = self.watcher.reads = config.watch.reads_count
            self._reads_lost = False
            for path, session in self.dirs.items():
                if self.watcher.rewatch(path, reads=self.consult_signal) is not None:
                    session.watch = "polling"
                with self._lock:
                    session.rescan = True
                self.debouncer.schedule(path, self.mono())
        self.scheduler.reschedule_job(
            "reconcile", trigger="interval", seconds=config.watch.reconcile_every
        )
        self.rt.audit.write("config.reloaded", source=config.source)
        self.log.info("configuration reloaded", source=config.source)
        self.rediscover()

    def heartbeat(self) -> None:
        self._last_beat = self.mono()
        if self.rt.versions is not None:  # the index versions memoryd wrote since
            self.rt.versions.flush()
        self.absorb_reads()
        _return_freed_memory()
        for path, session in self.dirs.items():
            if session.scan is not None:  # the parse cache, for a fast restart
                self.rt.store.save_cache(path, session.scan.files)
        dirs = []
        queued = self.debouncer.pending()  # dirs whose changes wait out the debounce
        for path, session in sorted(self.dirs.items()):
            state = self.rt.store.load(path)
            dirs.append(
                {
                    "path": str(session.md.path),
                    "real_path": str(path),
                    "kind": session.md.kind,
                    # What the last scan found: `seen` stays empty in a dir memoryd does not manage.
                    "files": len(session.scan.memories) if session.scan else len(state.seen),
                    "queued": path in queued,
                    "index": session.last_status or "not yet",
                    "pending_changes": len(state.changed_since_dream),
                    "last_index_write": _iso(session.last_index_write or state.last_index_ts),
                    "last_pass": _iso(state.last_dream_ts),
                    "last_pass_result": state.last_dream_result or None,
                    "watch": session.watch,
                }
            )
        status = {
            "pid": os.getpid(),
            "version": __version__,
            "started": self._started,
            "heartbeat": datetime.now(UTC).isoformat(timespec="seconds"),
            "heartbeat_every": HEARTBEAT_EVERY,
            "config": self.rt.config.source,
            "claude_home": str(self.rt.config.paths.claude_home),
            "waiting_for_claude_home": not self.rt.config.paths.claude_home.is_dir(),
            "consult_signal": self.rt.config.watch.consult_signal,
            "read_events": "lost" if self._reads_lost else "on" if self.consult_signal else "off",
            "pending": sorted(str(p) for p in self.debouncer.pending()),
            "dirs": dirs,
        }
        fsops.write_private(
            self.paths.status_file,
            json.dumps(status, indent=1, ensure_ascii=False).encode(),
            durable=False,
        )


# glibc's (None elsewhere, macOS or musl: nothing to do), from the process's own symbols.
_malloc_trim: Callable[[int], int] | None = fsops.libc_function("malloc_trim")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_ARENA_MAX = -8


def _tune_malloc() -> None:
    """Keep glibc's heap from holding what a long-running daemon has freed.

    One arena: by default a thread that allocates gets an arena of its own (up to 8 per core);
    the worker thread's then keeps the fragments of a 10,000-file pass (~7 MB of RSS measured,
    for an idle daemon). Its few threads rarely allocate at once, so sharing one lock costs
    nothing. A fixed mmap threshold: a pass copies a few 10,000-entry containers (hundreds of
    KB each); glibc would otherwise raise the threshold after the first frees and carve them
    from the heap, where they leave holes that malloc_trim cannot return (RSS grew ~6 MB over
    30 changes). Mapped, each goes back to the system when freed.
    """
    mallopt = fsops.libc_function("mallopt")
    if mallopt is not None:  # not glibc: none of this applies
        mallopt(M_ARENA_MAX, 1)
        mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def _return_freed_memory() -> None:
    """Hand memory freed after a big pass back to the OS (glibc keeps it otherwise).

    A first pass over 10,000 files allocates tens of MB that are freed but stay in the
    process's heap; for a daemon that then idles for weeks, that is RSS for nothing.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def _iso(ts: float) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


class FolderUnusable(MemorydError):
    pass


def check_own_folders(paths: AppPaths) -> None:
    """Raise FolderUnusable naming the first of memoryd's own folders the daemon cannot write
    (called once the instance lock, a file in the state dir, is held): it would otherwise die
    on its first save, or run for weeks with no audit trail."""
    state = paths.state_dir
    for folder, what, probe in (
        (state / "dirs", "state", None),
        (state / "journal", "state", None),
        (paths.log_dir, "log", paths.audit_log.name),
    ):
        try:
            ensure_private_dir(folder)
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(folder))
            if probe is not None:  # opened as the audit writer opens it; nothing written
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                os.close(os.open(folder / probe, flags, 0o600))
        except OSError as error:
            raise unusable(folder if what == "log" else state, what, error) from error


def unusable(folder: Path, what: str, error: OSError) -> FolderUnusable:
    where = f": {error.filename}" if error.filename and str(error.filename) != str(folder) else ""
    return FolderUnusable(
        f"{folder}: memoryd cannot write its {what} folder ({error.strerror}{where}). Make it "
        "a folder this user can write (free disk space, fix its permissions, or move aside "
        "a file in its place), or point XDG_STATE_HOME elsewhere; then start memoryd again."
    )


def run(
    config_path: Path | None,
    paths: AppPaths,
    config: Config,
    versions: "VersionStore | None" = None,
) -> int:
    """The daemon's run; `versions`: the version store it keeps versions in (the command's,
    cmd_versions.keeping), passed down with its Runtime."""
    _tune_malloc()  # before any thread starts
    configure(config.log.level)
    tune_gc()  # also done by cli.main; here for callers that start the daemon directly
    try:
        lock_fd = acquire_lock(paths)
    except MemorydError as error:  # already running, or no lock file that can be used
        get_logger().error(str(error))
        return EXIT_USAGE
    except OSError as error:
        get_logger().error(str(unusable(paths.state_dir, "state", error)))
        return EXIT_USAGE
    try:
        check_own_folders(paths)
    except FolderUnusable as error:
        os.close(lock_fd)
        get_logger().error(str(error))
        return EXIT_USAGE
    try:
        rt = Runtime.create(config, paths)
        rt.versions = versions
        daemon = Daemon(config_path, paths, rt)
        return daemon.run()
    finally:
        os.close(lock_fd)
