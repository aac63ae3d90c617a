"""`memoryd run`: the daemon's loop. Batches of events in; indexes, passes and status out.

`for batch in source.batches(...)`: the loop takes what arrived (file signals, SIGTERM,
SIGHUP, lost events) as one batch, notes what it asks for (`Todo`, the dirs' sessions, the
debouncer), then does the work that is due on this one thread: the passes the debounce
released, the jobs its timers hold. Events that arrive meanwhile wait in the source. The event
thread only classifies and enqueues; a signal handler only enqueues (and sets `stopping`, so
a dream pass under way stops before its moves).
"""

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import __version__
from memoryd.config import Config, load_config
from memoryd.daemon import housekeeping, notify
from memoryd.daemon.events import Batch, Control, Event, EventSource, Overflow, Queued
from memoryd.daemon.process import (
    FolderUnusable,
    acquire_lock,
    check_own_folders,
    return_freed_memory,
    tune_malloc,
    unusable,
)
from memoryd.daemon.session import DirSession, identity_of
from memoryd.daemon.watch import (
    Debouncer,
    Kind,
    Signal,
    Watcher,
)
from memoryd.discover.finder import discover_all, report_refused
from memoryd.discover.found import MemoryDir
from memoryd.discover.locks import lock_is_fresh
from memoryd.errors import ConfigError, MemorydError
from memoryd.indexing.outcome import IndexStatus
from memoryd.indexing.passes import update_changed
from memoryd.logsetup import configure, get_logger
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime, tune_gc
from memoryd.storage import fsops
from memoryd.storage.statedb import StateDB
from memoryd.trash.recovery import recover

if TYPE_CHECKING:
    from memoryd.versions.kept import VersionStore

HEARTBEAT_EVERY = 15.0
# Seconds after a pass before the memory it used goes back (the heartbeat's at the latest):
# not at once, or a change that follows within the debounce pays the page faults again.
RELEASE_AFTER = 5.0
SETTLE = 5.0  # an unparseable file younger than this may be half-written: look again later
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass
class Todo:
    """What the events of a batch asked for besides the dirs they named; taken each turn."""

    reload: bool = False  # SIGHUP
    rediscover: bool = False  # a folder appeared or went where memory dirs live
    rescan: str = ""  # why events were lost (an overflow): look at every dir

    def __bool__(self) -> bool:
        return self.reload or self.rediscover or bool(self.rescan)


@dataclass
class Timer:
    """A periodic job: due at `due` (the loop's clock), then every `period` seconds."""

    period: float
    job: Callable[[], None]
    due: float

    @classmethod
    def every(cls, period: float, job: Callable[[], None], clock: Callable[[], float]) -> "Timer":
        return cls(period, job, clock() + period)


@dataclass
class Daemon:
    config_path: Path | None
    paths: AppPaths
    rt: Runtime
    mono: Callable[[], float] = time.monotonic
    # The collaborators, passed in (tests give a scripted event source and a fake clock):
    # the source of batches (by default a queue the watcher and signal handlers feed), and
    # the watcher, made with the daemon's event sink.
    source: EventSource | None = None
    make_watcher: Callable[[Callable[[Signal], None]], Watcher] = Watcher
    dirs: dict[Path, DirSession] = field(default_factory=dict)  # by real path
    stopping: threading.Event = field(default_factory=threading.Event)
    todo: Todo = field(default_factory=Todo)
    timers: dict[str, Timer] = field(default_factory=dict)
    release_at: float | None = None  # when to let go of what the last pass used
    lost_watches: set[tuple[Path, bool]] = field(default_factory=set)  # their folder went
    said: set[str] = field(default_factory=set)  # said-once warnings ("waiting", "limit")
    started: str = ""
    log: Any = field(default_factory=get_logger)
    debouncer: Debouncer = field(init=False)
    watcher: Watcher = field(init=False)
    events: EventSource = field(init=False)

    def __post_init__(self) -> None:
        w = self.rt.config.watch
        self.debouncer = Debouncer(w.debounce, w.max_wait, self.mono)
        self.events = self.source if self.source is not None else Queued(self.mono)
        self.watcher = self.make_watcher(self.events.put)
        self.watcher.on_overflow = self.on_overflow

    # --- any thread: enqueue only --------------------------------------------------------------
    def on_overflow(self, detail: str) -> None:
        self.events.put(Overflow(detail))

    def request_stop(self) -> None:
        self.stopping.set()  # at once: a dream pass under way stops before its moves
        self.events.put(Control.STOP)

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        self.start()
        self.job(self.start_up)
        for batch in self.events.batches(self.until_due):
            self.take(batch)
            if self.stopping.is_set():
                break
            self.work()
        return self.shut_down()

    def start(self) -> None:
        """Watch, take signals, arm the timers and tell systemd; the first look is the
        loop's first job."""
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        # Told of each index write (fsops.OwnWrite), to drop the events it raises: a Runtime
        # made for the run, passed down from here.
        self.rt = replace(self.rt, on_own_write=self._record_own_write)
        self.watcher.start()
        self._install_signals()
        jobs: dict[str, tuple[float, Callable[[], None]]] = {
            "reconcile": (self.rt.config.watch.reconcile_every, self.reconcile),
            "heartbeat": (HEARTBEAT_EVERY, self.heartbeat),
            "trash-rotation": (86400.0, self.rotate_trash),
            "audit-rotation": (3600.0, self.rotate_audit),
        }
        interval = notify.watchdog_interval()
        if interval is not None:  # systemd's keep-alive: a loop stuck in a job sends none
            jobs["watchdog"] = (interval, self.ping)
        self.timers = {name: Timer.every(p, job, self.mono) for name, (p, job) in jobs.items()}
        notify.notify("READY=1")

    def ping(self) -> None:
        notify.notify("WATCHDOG=1")

    def until_due(self) -> float | None:
        """Seconds until the loop has work (0: now); None: nothing until an event."""
        if self.todo:
            return 0.0
        times = [timer.due for timer in self.timers.values()]
        deadline = self.debouncer.next_deadline()
        if deadline is not None:
            times.append(deadline)
        if self.release_at is not None:
            times.append(self.release_at)
        return max(0.0, min(times) - self.mono()) if times else None

    def take(self, batch: Batch) -> None:
        for when, event in batch:
            self.apply(event, when)

    def apply(self, event: Event, when: float) -> None:
        if isinstance(event, Signal):
            self.on_signal(event, when)
        elif isinstance(event, Overflow):
            self.todo.rescan = event.detail
        elif event is Control.RELOAD:
            self.todo.reload = True
        elif event is Control.STOP:
            self.stopping.set()

    def work(self) -> None:
        """What is due after a batch: what it asked for, the released dirs, the timers."""
        todo, self.todo = self.todo, Todo()
        if todo.reload:
            self.job(self.reload)
        if todo.rescan:
            self.job(self.rescan, todo.rescan)
        if todo.rediscover:
            self.job(self.rediscover)
        due = self.debouncer.pop_due()
        if due:
            self.job(self.process, due)
        for timer in self.timers.values():
            if timer.due <= self.mono():
                timer.due = self.mono() + timer.period
                self.job(timer.job)
        if self.release_at is not None and self.release_at <= self.mono():
            self.release_at = None
            self.job(self.release_memory)

    def job(self, func: Callable[..., None], *args: Any) -> None:
        """Every job runs through here: one failure is logged and the loop carries on."""
        try:
            func(*args)
        except Exception as error:
            self.log.error("job failed", job=func.__name__, error=str(error), exc_info=True)

    def on_signal(self, sig: Signal, when: float | None = None) -> None:
        """A file signal, as it arrived at `when`: into the dir's session and the debouncer."""
        when = self.mono() if when is None else when
        if sig.kind is Kind.STRUCTURE:
            self.todo.rediscover = True
        elif sig.kind is Kind.LOST:
            self.lost_watches.add((sig.dir, sig.name == "parent"))
            self.todo.rediscover = True
        else:
            session = self.dirs.get(sig.dir)
            if session is not None:
                if session.is_own_write(sig.name):
                    return
                if session.changed is None:
                    session.changed = set()
                session.changed.add(sig.name)
            self.debouncer.touch(sig.dir, sig.name, at=when)  # each file's own quiet decides

    def _record_own_write(self, folder: Path, name: str, identity: tuple[int, int, int]) -> None:
        """The own-write callback (Runtime.on_own_write). A dir with no session has no watch
        yet (the recovery at start-up): no event will come."""
        session = self.dirs.get(folder)
        if session is not None:
            session.own_writes[name] = identity

    def _install_signals(self) -> None:
        def stop(signum: int, _frame: object) -> None:
            self.request_stop()

        def reload(signum: int, _frame: object) -> None:
            self.events.put(Control.RELOAD)

        if threading.current_thread() is not threading.main_thread():
            return  # embedded (tests): the owner stops us through request_stop
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def shut_down(self) -> int:
        notify.notify("STOPPING=1")
        # Flush: events may still be on their way, so look at every dir once more rather
        # than only at what the debounce holds.
        self.watcher.stop()
        self.debouncer.pop_all()
        self.job(self.process, sorted(self.dirs), True)
        self.job(self.heartbeat)
        self.rt.audit.write("daemon.stopped", reason="signal")
        self.log.info("memoryd stopped")
        return EXIT_OK

    # --- the jobs ------------------------------------------------------------------------------
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
        lost, self.lost_watches = self.lost_watches, set()
        for path, parent in lost:
            # The kernel dropped the watch with the folder; a folder made in its place, even
            # one with the same inode number (the identity check cannot tell), needs a new
            # one, and a look in full: what happened in between raised no event.
            self.watcher.remove(path, parent=parent)
            session = None if parent else self.dirs.get(path)
            if session is not None:
                session.forget_view()
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
            if "waiting" not in self.said:
                self.said.add("waiting")
                self.rt.audit.write("daemon.waiting", path=str(home))
                self.log.info("waiting for the Claude home to exist", path=str(home))
        else:
            self.said.discard("waiting")
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
        if limits and "limit" not in self.said:
            self.said.add("limit")
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
            from memoryd.versions.listing import dir_deleted

            dir_deleted(self.rt.versions, session.md.real_path)

    def process(self, paths: list[Path], full: bool = False) -> None:
        """Re-stat each dir and bring its index in step; nothing to do writes nothing."""
        for path in paths:
            session = self.dirs.get(path)
            if session is None:
                continue
            if identity_of(path) != session.identity:
                # Deleted, or replaced: never write to a stale path.
                self._lose(session, "it was deleted or replaced")
                self.todo.rediscover = True
                continue
            self._index_pass(session, full)
        self.check_pile_up()
        self.release_at = self.mono() + RELEASE_AFTER

    def release_memory(self) -> None:
        """Once the loop is quiet after a pass: its garbage (and the search index's) leaves
        free pages in the heap that glibc would keep, and SQLite keeps its page cache and the
        statements the pass prepared, with the values last bound to them; an idle daemon holds
        what its dirs need, not what its last pass used."""
        StateDB.in_state_dir(self.rt.store.state_dir).release()  # (makes no state file)
        return_freed_memory()

    def _index_pass(self, session: DirSession, full: bool) -> None:
        """One dir's change: what its session holds -> indexer.update_changed -> the outcome
        back into the session, the search index, the log and the debouncer."""
        path = session.md.real_path
        names, rescan = session.take_changes()
        # Someone else wrote the index (a `memoryd trash restore`, a person, the agent):
        # they may have changed files whose events were not ours to see (a move in from
        # the trash raises none on some systems), so every file is looked at (by stat).
        foreign_index = names is not None and not names.isdisjoint((INDEX_NAME, ARCHIVE_NAME))
        incremental = (
            bool(names) and not (full or rescan or foreign_index) and session.scan is not None
        )
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

    def check_pile_up(self) -> None:
        """Dream where enough changed, the dir is quiet and the last pass is old enough."""
        cfg = self.rt.config.dream
        now = self.rt.clock()  # the clock the indexer dated the changes by
        for path, session in sorted(self.dirs.items()):
            state = self.rt.store.load(path)
            count = len(state.changed_since_dream)
            if count < cfg.pile_up:
                continue
            if now - state.last_change_ts < cfg.quiet:
                self.debouncer.schedule(
                    path, self.mono() + cfg.quiet - (now - state.last_change_ts)
                )
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
            from memoryd.dream.budget import PassBudget
            from memoryd.dream.repocache import RepoCache
            from memoryd.dream.run import dream_dir

            started = self.mono()
            # DESIGN §5: at the start of a later pass (a dir a command holds: next time).
            housekeeping.rotate(self.rt, [session.md], wait_lock=False)
            result = dream_dir(
                self.rt,
                session.md,
                repos=RepoCache.of(self.rt),
                trigger="pile-up",  # skipped when another process has the dir
                # SIGTERM stops a pass before its moves.
                budget=PassBudget.of(self.rt, stop=self.stopping.is_set),
            )
            self.rt.dream.release_facts()  # a pass an hour or more apart gains little from them
            return_freed_memory()
            session.reading = (started, self.mono())
            session.forget_view()  # the pass moved files: the next look is a full one
            if result.index is not None and result.index.retry_after is not None:
                # New files its index update left in their grace: indexed once out of it.
                self.debouncer.schedule(
                    path, self.mono() + max(0.0, result.index.retry_after - time.time())
                )
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
        before = {p: e.last_index_write for p, e in self.dirs.items()}
        self.reconcile()
        changed = sum(1 for p, e in self.dirs.items() if e.last_index_write != before.get(p))
        self.rt.audit.write("watch.rescanned", dirs=len(self.dirs), changed=changed)

    def rotate_trash(self) -> None:
        housekeeping.rotate(self.rt, [e.md for e in self.dirs.values()], wait_lock=False)

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
        # A new Runtime from here on (one made before keeps what it was made with).
        self.rt = replace(self.rt, config=config, audit=Runtime.create(config, self.paths).audit)
        configure(config.log.level)
        self.debouncer.quiet = config.watch.debounce
        self.debouncer.max_wait = config.watch.max_wait
        self.timers["reconcile"] = Timer.every(
            config.watch.reconcile_every, self.reconcile, self.mono
        )
        self.rt.audit.write("config.reloaded", source=config.source)
        self.log.info("configuration reloaded", source=config.source)
        self.rediscover()

    def heartbeat(self) -> None:
        if self.rt.versions is not None:  # the index versions memoryd wrote since
            self.rt.versions.flush()
        for path, session in self.dirs.items():
            if session.scan is not None:  # the parse cache, for a fast restart
                self.rt.store.save_cache(path, session.scan.files)
        # After the saves (serialising 10,000 entries leaves MBs free), and at least this
        # often while changes keep the loop from being quiet for RELEASE_AFTER.
        self.release_at = None
        self.release_memory()
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
            "started": self.started,
            "heartbeat": datetime.now(UTC).isoformat(timespec="seconds"),
            "heartbeat_every": HEARTBEAT_EVERY,
            "config": self.rt.config.source,
            "claude_home": str(self.rt.config.paths.claude_home),
            "waiting_for_claude_home": not self.rt.config.paths.claude_home.is_dir(),
            "pending": sorted(str(p) for p in self.debouncer.pending()),
            "dirs": dirs,
        }
        fsops.write_private(
            self.paths.status_file, json.dumps(status, indent=1, ensure_ascii=False).encode()
        )


def _iso(ts: float) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def run(
    config_path: Path | None,
    paths: AppPaths,
    config: Config,
    versions: "VersionStore | None" = None,
) -> int:
    """The daemon's run; `versions`: the version store it keeps versions in (the command's,
    cmd_versions.keeping), passed down with its Runtime."""
    tune_malloc()  # before any thread starts
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
        rt = replace(Runtime.create(config, paths), versions=versions)
        daemon = Daemon(config_path, paths, rt)
        return daemon.run()
    finally:
        os.close(lock_fd)
