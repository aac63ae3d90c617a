"""The collaborators every command needs, built once and passed down (no globals)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command pays only for what it runs
    from memoryd.config import Config
    from memoryd.dream.facts import FactsCache
    from memoryd.dream.refs import RefChecker
    from memoryd.dream.repo import SourceTokens
    from memoryd.model.secrets import Finding
    from memoryd.paths import AppPaths
    from memoryd.storage.audit import AuditLog
    from memoryd.storage.fsops import OwnWrite
    from memoryd.storage.state import StateStore
    from memoryd.versions.kept import VersionStore


def boot_clock() -> tuple[str, float] | None:
    """This boot's id and the seconds since it began, sleep included (Linux); None elsewhere.

    Unlike the wall clock, it cannot be set: within one boot it measures how much time really
    passed, which is what trash retention needs when the wall clock is wrong."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot_id = handle.read().strip()
        return boot_id, time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, AttributeError, ValueError):
        return None


class Effect(StrEnum):
    """What a command may change: decided once, where it starts (cli.effect_of), and passed
    down as Runtime.effect; every "does this write? does it keep versions?" asks it."""

    LOOKS = "looks"  # a read-only command: writes nothing, runs on defaults if the config is bad
    DRY = "dry"  # a dry run, a check, `explain`: what a command would do; writes nothing at all
    WRITES = "writes"  # writes memoryd's own files (state, settings), keeps no versions
    KEEPS = "keeps"  # may write in memory dirs (and the daemon): keeps versions of what it reads

    @property
    def writes(self) -> bool:
        return self in (Effect.WRITES, Effect.KEEPS)

    @property
    def keeps_versions(self) -> bool:
        return self is Effect.KEEPS


# What dream passes keep for later passes in the same process: repo snapshots and facts. One
# lives in each Runtime (no module global: two Runtimes never see each other's); its types are
# the dream's, named for the type checker only (the facts module pulls in numpy).
@dataclass(eq=False)
class DreamMemo:
    # Repo snapshots with the reference checks made against them, per repo root, the least
    # recently used first; and the sources last read from or written to the state dir.
    snapshots: dict[Path, RefChecker] = field(default_factory=dict)
    on_disk: dict[Path, SourceTokens] = field(default_factory=dict)
    repo_lock: threading.Lock = field(default_factory=threading.Lock)
    # Each memory's derived facts by content hash (made by the first pass that needs them);
    # per dir, the contents whose facts the state dir holds as this process last read or
    # wrote them, so a pass over the same contents does not write them again.
    facts: FactsCache | None = None
    saved_facts: dict[Path, frozenset[str]] = field(default_factory=dict)
    facts_lock: threading.Lock = field(default_factory=threading.Lock)
    # Per dir, the secrets of each content hash the last pass read (a scan costs a read).
    secrets: dict[Path, dict[str, tuple[Finding, ...]]] = field(default_factory=dict)
    # The kept versions (sha256) found to hold no secret: versions.purge reads each once.
    secretless: set[str] = field(default_factory=set)

    def release_facts(self) -> None:
        """Forget the facts kept for later passes (~2.3 KB a memory): the daemon dreams now and
        then and should not hold 23 MB at 10,000 memories in between."""
        with self.facts_lock:
            if self.facts is not None:
                self.facts.clear()
            self.secrets.clear()


@dataclass(frozen=True)
class Runtime:
    config: Config
    paths: AppPaths
    audit: AuditLog
    store: StateStore
    clock: Callable[[], float] = field(default=time.time)
    today: Callable[[], date] = field(default=date.today)
    boot: Callable[[], tuple[str, float] | None] = field(default=boot_clock)
    sleep: Callable[[float], None] = field(default=time.sleep)  # a one-shot command's waits
    effect: Effect = Effect.KEEPS
    # What dream passes keep for later ones made with this Runtime (see DreamMemo).
    dream: DreamMemo = field(default_factory=DreamMemo, repr=False, compare=False)
    # Told of each index write just before its swap (see fsops.OwnWrite): the daemon's.
    on_own_write: OwnWrite | None = field(default=None, repr=False, compare=False)
    # The version store, for a command that keeps versions (commands.versions.keeping) and the
    # daemon: passed to every scan, index read and index write made with this Runtime.
    versions: VersionStore | None = field(default=None, repr=False, compare=False)
    # The paths named on the command line of a command that writes (`index DIR`, `dream
    # DIR`): an explicit request, so a memory dir git tracks under one of them is written.
    named: tuple[Path, ...] = ()

    @property
    def dry_run(self) -> bool:
        """Whether this command writes nothing at all (no state, no audit row): its effect."""
        return not self.effect.writes

    @classmethod
    def create(
        cls, config: Config, paths: AppPaths | None = None, effect: Effect = Effect.KEEPS
    ) -> Runtime:
        from memoryd.paths import app_paths
        from memoryd.storage.audit import AuditLog
        from memoryd.storage.state import StateStore

        paths = paths or app_paths()
        audit = AuditLog(
            paths.audit_log,
            max_bytes=config.log.max_bytes,
            backups=config.log.backups,
            level=config.log.level,
        )
        return cls(
            config=config,
            paths=paths,
            audit=audit,
            store=StateStore(paths.state_dir),
            effect=effect,
        )


# A pass over 10,000 files allocates ~100,000 short-lived objects; the default thresholds then
# run dozens of collections per pass (measured: ~35 ms of a 150 ms pass, ~7 ms of a cold scan).
# memoryd's objects die young or live as long as the process, so it may collect less often.
GC_THRESHOLDS = (50_000, 50, 100)


def tune_gc() -> None:
    """Collect less often (process-wide: for memoryd's own processes, from `cli.main`)."""
    gc.set_threshold(*GC_THRESHOLDS)
