"""The collaborators every command needs, built once and passed down (no globals)."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

from memoryd.audit import AuditLog
from memoryd.config import Config
from memoryd.paths import AppPaths, app_paths
from memoryd.state import StateStore


@dataclass
class Runtime:
    config: Config
    paths: AppPaths
    audit: AuditLog
    store: StateStore
    clock: Callable[[], float] = field(default=time.time)
    today: Callable[[], date] = field(default=date.today)
    dry_run: bool = False

    @classmethod
    def create(cls, config: Config, paths: AppPaths | None = None) -> "Runtime":
        paths = paths or app_paths()
        audit = AuditLog(
            paths.audit_log,
            max_bytes=config.log.max_bytes,
            backups=config.log.backups,
            level=config.log.level,
        )
        return cls(config=config, paths=paths, audit=audit, store=StateStore(paths.state_dir))
