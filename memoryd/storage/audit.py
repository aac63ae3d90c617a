"""The JSONL audit log: one schema table of events, an appending writer that rotates, a reader."""

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from memoryd.errors import MemorydError
from memoryd.logsetup import get_logger
from memoryd.model import safejson
from memoryd.paths import (
    BoundedLines,
    NotRegularFile,
    ensure_private_dir,
    file_kind,
    open_regular,
    read_problem,
)

SCHEMA_VERSION = 1

Level = Literal["debug", "info", "warning", "error"]
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}


@dataclass(frozen=True, slots=True)
class EventSpec:
    level: Level
    summary: str
    fields: tuple[str, ...] = ()


# Every event memoryd writes, in one place; the README's table is generated from this.
EVENTS: dict[str, EventSpec] = {
    "daemon.started": EventSpec("info", "the daemon started", ("version", "dirs", "config")),
    "daemon.stopped": EventSpec("info", "the daemon stopped", ("reason",)),
    "daemon.waiting": EventSpec("info", "the Claude home does not exist yet; waiting", ("path",)),
    "dir.discovered": EventSpec("info", "a memory dir was found", ("kind", "mode", "real_path")),
    "dir.lost": EventSpec("info", "a memory dir disappeared or was replaced", ("reason",)),
    "dir.refused": EventSpec(
        "warning",
        "a memory dir's link leads out of its repo or Claude home; left alone",
        ("kind", "target", "within", "reason", "hint"),
    ),
    "index.updated": EventSpec(
        "info",
        "MEMORY.md (and the archive) were rewritten",
        ("added", "removed", "rewritten", "collapsed", "demoted", "bytes_before", "bytes_after"),
    ),
    "index.unmanaged": EventSpec("info", "the index is not memoryd's to edit", ("reason",)),
    "index.over_budget": EventSpec(
        "warning", "the index is over its budget", ("lines", "chars", "bytes", "outside_window")
    ),
    "index.demoted": EventSpec("info", "entries moved to MEMORY-ARCHIVE.md", ("files", "count")),
    "index.conflict": EventSpec(
        "warning", "someone wrote the index during our write; retried", ("file", "attempt")
    ),
    "index.dead_link": EventSpec("info", "a pointer names a file never seen", ("file", "target")),
    "index.invalid_link": EventSpec(
        "warning", "a pointer leaves the folder or is malformed; never followed", ("file", "target")
    ),
    "index.verify_failed": EventSpec(
        "error", "the index on disk failed verification", ("problems",)
    ),
    "index.write_failed": EventSpec("error", "the index could not be written", ("file", "error")),
    "index.temp_removed": EventSpec(
        "info", "temp files a killed memoryd left behind were removed", ("files",)
    ),
    "file.unparseable": EventSpec(
        "warning", "a file in a memory dir cannot be used; it is kept", ("file", "problem", "hint")
    ),
    "dream.started": EventSpec("info", "a dream pass started", ("pass_id", "trigger")),
    "dream.completed": EventSpec(
        "info", "a dream pass finished", ("saved", "deleted", "flagged", "kept", "duration_ms")
    ),
    "dream.failed": EventSpec(
        "error",
        "a dream pass failed",
        ("saved", "deleted", "flagged", "kept", "duration_ms", "error"),
    ),
    "dream.refused": EventSpec(
        "warning",
        "the circuit breaker stopped a pass",
        ("pass_id", "would_move", "limit", "plan"),
    ),
    "dream.skipped": EventSpec("info", "a dream pass did not run", ("why",)),
    "dream.kept": EventSpec("info", "a candidate was spared", ("file", "guard", "reason")),
    "dream.move_skipped": EventSpec(
        "warning", "a planned move was not made", ("file", "why", "kept_as")
    ),
    "flag.acknowledged": EventSpec(
        "info", "a person acknowledged a memory flagged for review", ("file", "sha256")
    ),
    "trash.moved": EventSpec(
        "info", "a memory file was moved into the trash", ("file", "id", "reason", "sha256")
    ),
    "trash.restored": EventSpec("info", "a file came back from the trash", ("file", "id", "as")),
    "versions.purged": EventSpec(
        "warning",
        "a kept version holding a secret no current file holds was removed",
        ("file", "version", "kind"),
    ),
    "version.restored": EventSpec(
        "info",
        "an earlier version of a file was written back (`history --restore`)",
        ("file", "version", "sha256"),
    ),
    "trash.purged": EventSpec("info", "trash day folders past retention were removed", ("days",)),
    "trash.kept": EventSpec(
        "warning", "a trash day folder nothing says the age of is kept", ("day", "problem")
    ),
    "memory.secret_found": EventSpec(
        "warning",
        "a memory holds a secret (said once per file version; never the value; never moved)",
        ("file", "line", "kind"),
    ),
    "memory.forgotten": EventSpec(
        "info",
        "a memory a person asked to forget was moved to the trash (restorable)",
        ("file", "id", "reason", "sha256"),
    ),
    "memory.deleted_outside": EventSpec(
        "info",
        "a memory file was deleted by another process; its last version is kept",
        ("file", "sha256", "size", "restore"),
    ),
    "memory.rewritten_outside": EventSpec(
        "info",
        "a memory file (or index) was rewritten by another process; the old version is kept",
        ("file", "sha256", "previous", "size", "restore"),
    ),
    "memory.checkout": EventSpec(
        "info",
        "memory files changed by a git checkout, merge, rebase, stash or pull (their bytes are "
        "a recent commit's); versions kept, nothing to restore",
        ("deleted", "rewritten", "at", "files"),
    ),
    "memory.mass_change": EventSpec(
        "warning",
        "many memory files of a dir were deleted or rewritten by others in a short time",
        ("deleted", "rewritten", "files", "window_s", "restore"),
    ),
    "watch.overflow": EventSpec("warning", "file events were lost; rescanning", ("detail",)),
    "watch.rescanned": EventSpec("info", "a full rescan finished", ("dirs", "changed")),
    "watch.limit": EventSpec("warning", "a watch could not be added", ("error", "hint")),
    "pass.recovered": EventSpec(
        "warning", "an unfinished operation was completed or rolled back", ("journal", "outcome")
    ),
    "config.invalid": EventSpec("error", "the configuration is invalid", ("source", "problems")),
    "config.reloaded": EventSpec("info", "the configuration was reloaded", ("source",)),
}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _say_on_stderr(path: Path, error: OSError | None) -> None:
    """The default `on_failure`: a structlog warning when rows stop reaching the log (`error`),
    and a note when they reach it again (None)."""
    log = get_logger()
    if error is None:
        log.info("the audit log is written again", path=str(path))
        return
    log.warning(
        "the audit log cannot be written; memoryd goes on without it",
        path=str(path),
        error=error.strerror or str(error),
        hint=f"free disk space, or make {path.parent} a folder memoryd can write; "
        "rows are lost until then",
    )


class AuditLog:
    """Appends JSON lines with O_APPEND; rotates by size so `tail -F` follows the new file.

    A row that cannot be written (a full disk, EIO, a read-only or missing log folder) never
    fails what it reports: `write` carries on, and `on_failure` is told once when rows stop
    reaching the log and once when they reach it again.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 10_000_000,
        backups: int = 5,
        level: str = "info",
        on_failure: Callable[[Path, OSError | None], None] = _say_on_stderr,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.threshold = LEVELS[level]
        self.on_failure = on_failure
        self.failing = False  # the last row could not be written

    def write(
        self, event: str, *, dir: Path | None = None, level: str | None = None, **fields: Any
    ) -> dict[str, Any] | None:
        """Append one row; the row, or None when it is below the level or was not written."""
        spec = EVENTS.get(event)
        if spec is None:
            raise KeyError(
                f"undeclared audit event {event!r}: add it to memoryd.storage.audit.EVENTS"
            )
        chosen = level or spec.level
        if LEVELS[chosen] < self.threshold:
            return None
        row: dict[str, Any] = {
            "ts": _now_iso(),
            "v": SCHEMA_VERSION,
            "event": event,
            "level": chosen,
            "pid": os.getpid(),
        }
        if dir is not None:
            row["dir"] = str(dir)
        row.update(fields)
        line = json.dumps(row, ensure_ascii=True, default=str, separators=(",", ":")) + "\n"
        try:
            self._append(line.encode("ascii"))
        except OSError as error:
            self._tell(error)
            return None
        if self.failing:
            self._tell(None)
        return row

    def _tell(self, error: OSError | None) -> None:
        if self.failing == (error is not None):
            return  # said already
        self.failing = error is not None
        # Telling must not fail the action either (a closed or broken stderr).
        with contextlib.suppress(Exception):
            self.on_failure(self.path, error)

    def _append(self, data: bytes) -> None:
        if not self.path.parent.is_dir():
            ensure_private_dir(self.path.parent)
        with contextlib.suppress(OSError):
            if self.path.stat().st_size + len(data) > self.max_bytes:
                self._rotate()
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO would swallow rows, then block the writer
                raise NotRegularFile(self.path, file_kind(st.st_mode))
            # A torn last line (a writer killed mid-row, a full disk) must stay alone on its
            # line: a row appended to it would be unreadable too.
            size = st.st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            if os.write(fd, data) != len(data):  # a short write: the disk filled up
                raise OSError(errno.ENOSPC, "the row could not be written whole", str(self.path))
        finally:
            os.close(fd)

    def rotate_if_needed(self) -> None:
        """Rotate when the file is over its size (another writer may have filled it)."""
        with contextlib.suppress(OSError):
            if self.path.stat().st_size > self.max_bytes:
                self._rotate()

    def _rotate(self) -> None:
        # Rename, never copy-truncate: `tail -F` notices the new inode and reopens by name.
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if self.path.stat().st_size <= self.max_bytes // 2:
                    return  # another process rotated while we waited for the lock
            except FileNotFoundError:
                return
            for n in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{n}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{n + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        finally:
            os.close(fd)


# --- reading ----------------------------------------------------------------------------------

_SINCE = re.compile(r"^(\d+)\s*([smhd])$")


def parse_since(text: str, now: float | None = None) -> float:
    """`2h`, `30m`, `7d` -> a UNIX time that far back; an ISO date/time is taken as is."""
    now = time.time() if now is None else now
    match = _SINCE.match(text.strip())
    if match:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return now - int(match.group(1)) * unit
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as error:
        raise ValueError(f"--since {text!r}: write e.g. 2h, 30m, 7d or 2026-11-30T08:00") from error
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()
    return parsed.timestamp()


def row_time(row: Mapping[str, Any]) -> float:
    try:
        return datetime.fromisoformat(str(row["ts"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return 0.0


# A row is a few hundred bytes; a line over this is none memoryd wrote (or two torn together).
MAX_LINE_BYTES = 1 << 20


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of one log file in order; a torn, over-long or foreign line is skipped, never
    fatal. Raises MemorydError when the file is not a regular file (a FIFO there is never
    waited on, a link to a device never read)."""
    try:
        fd, _ = open_regular(path)  # a link is followed, as the writer follows it
    except FileNotFoundError:
        return
    except NotRegularFile as error:
        raise MemorydError(
            f"{path}: {read_problem(error)}; memoryd reads its audit log only from a regular "
            "file. Move it aside: the next row starts a new log"
        ) from error
    try:
        # A last line without its newline is torn (a writer mid-append, or crashed): not read.
        for _, raw in BoundedLines(fd, max_line=MAX_LINE_BYTES):
            if raw is None:
                continue  # over-long: torn lines run together, or none memoryd wrote
            try:
                row = safejson.loads(raw)
            except ValueError:
                continue
            if isinstance(row, dict) and "event" in row:
                yield row
    finally:
        os.close(fd)


def read_rows(path: Path, backups: int = 5) -> Iterator[dict[str, Any]]:
    """All rows, oldest rotated file first."""
    for n in range(backups, 0, -1):
        yield from iter_lines(path.with_name(f"{path.name}.{n}"))
    yield from iter_lines(path)
