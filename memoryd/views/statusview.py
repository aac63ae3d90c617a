"""`memoryd status`: what the daemon's heartbeat says, or, when it is stopped, what its state
files on disk say; relative times for a person, absolute ones in JSON.

`gather` reads (status.json, the instance lock, each dir's state); `render` is pure.
"""

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memoryd.daemon.instance import lock_holder
from memoryd.discover.dirlabel import dir_label
from memoryd.discover.gitwork import OPT_IN as DETAIL
from memoryd.discover.gitwork import TRACKED, work_tree
from memoryd.model import safejson
from memoryd.model.conflicts import HINT, MARK
from memoryd.model.humanize import ago, clock_time, parse_ts, short_path, table
from memoryd.paths import read_bounded
from memoryd.views.logview import View

STATUS_MAX_BYTES = 64 << 20  # status.json: a few hundred bytes a dir
HEARTBEAT_EVERY = 15.0  # the daemon's, for a status.json that does not say it
PLAIN_RESULT = "completed"  # a pass's result that the table does not repeat
STALE_BEATS = 4  # a heartbeat older than this many intervals is stale


@dataclass(frozen=True, slots=True)
class DirRow:
    path: str
    kind: str
    files: int | None  # memory files the last scan found; None when unknown (from disk)
    index: str  # the last index pass's outcome, or "" when unknown
    changed_since_dream: int
    queued: bool | None  # waiting out the debounce now; None when no daemon runs
    last_index_write: str | None  # ISO times, as JSON gives them
    last_pass: str | None
    last_pass_result: str | None
    watch: str


@dataclass
class Status:
    running: bool
    pid: int | None
    fresh: bool
    heartbeat_age_s: float | None
    status: dict[str, Any] | None  # status.json as the daemon wrote it
    dirs: list[DirRow] = field(default_factory=list)
    from_disk: bool = False  # the rows come from state files, not a live heartbeat
    audit_log: str = ""
    config: str = ""
    lock_file: str = ""
    # What a person must do in a dir memoryd leaves alone for it (a merge to finish), and the
    # dirs git tracks memoryd only reads: (dir, what) each.
    notes: list[tuple[str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "pid": self.pid,
            "heartbeat_age_s": self.heartbeat_age_s,
            "fresh": self.fresh,
            "status": self.status,
            "dirs": [asdict(d) for d in self.dirs],
            "dirs_from_disk": self.from_disk,
            "audit_log": self.audit_log,
            "config": self.config,
            "notes": [{"dir": d, "note": n} for d, n in self.notes],
        }


def _row(d: Mapping[str, Any], live: bool) -> DirRow:
    return DirRow(
        path=str(d.get("real_path") or d.get("path") or ""),
        kind=str(d.get("kind", "")),
        files=d.get("files") if isinstance(d.get("files"), int) else None,
        index=str(d.get("index") or ""),
        changed_since_dream=int(d.get("pending_changes") or 0),
        queued=bool(d.get("queued")) if live else None,
        last_index_write=d.get("last_index_write"),
        last_pass=d.get("last_pass"),
        last_pass_result=d.get("last_pass_result"),
        watch=str(d.get("watch", "")) if live else "",
    )


def _iso(ts: float) -> str | None:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def _cached(rt: Any, folder: str) -> int | None:
    """Memory files in the dir's parse cache (what the last scan found), None without one (or
    with one scanned.load_cache would not take). Only the "kind" column is counted: no entry
    per file, and no scanner (YAML, the parsers: a sixth of the command) imported."""
    from memoryd.model.scanned import CACHE_HEADER
    from memoryd.model.sealed import unseal

    data = rt.store.cache_data(Path(folder))
    columns = unseal(CACHE_HEADER, data) if data else None
    fields = CACHE_HEADER[2]
    if not (isinstance(columns, tuple) and len(columns) == len(fields)
            and all(isinstance(c, tuple) for c in columns)
            and len({len(c) for c in columns}) == 1 and columns[0]):  # fmt: skip
        return None
    kinds: tuple[object, ...] = columns[fields.index("kind")]
    return kinds.count("memory")


ALARM_SHOWN = 86400.0  # `status` shows a mass change for a day


def alarm_lines(rt: Any, now: float) -> str:
    """`memoryd status`: the mass changes of the last day, and how to undo them."""
    from memoryd.model.display import shown
    from memoryd.versions.records import alarms  # not the version store, nor the indexing

    out = []
    for a in alarms(rt.paths.state_dir):
        when = a.get("t")
        if not isinstance(when, int | float) or not math.isfinite(when) or now - when > ALARM_SHOWN:
            continue  # (json reads NaN and Infinity: no time to show)
        what = (
            f"the whole dir deleted ({a.get('deleted')} memory files) by another process"
            if a.get("dir_gone") is True
            else f"{a.get('deleted')} memory files deleted and {a.get('rewritten')} rewritten "
            "by another process"
        )
        out.append(
            f"  ALARM {shown(str(a.get('dir')))}: {what}, {ago(when, now)}; "
            "`memoryd trash list` and `memoryd history FILE` bring them back\n"
        )
    return "".join(out)


def _from_disk(rt: Any, last: dict[str, Any] | None) -> list[DirRow]:
    """Each dir memoryd keeps state for, as its state says now, with the file counts of the
    daemon's last heartbeat where it gave them."""
    beat = {str(d.get("real_path")): d for d in (last or {}).get("dirs", []) if isinstance(d, dict)}
    rows = []
    for folder in rt.store.dirs():
        state = rt.store.load(Path(folder))
        seen = beat.get(folder, {})
        rows.append(_row({
            "real_path": folder,
            "kind": seen.get("kind", ""),
            "files": seen["files"] if isinstance(seen.get("files"), int) else _cached(rt, folder),
            "index": seen.get("index") or ("managed" if state.managed else ""),
            "pending_changes": len(state.changed_since_dream),
            "last_index_write": _iso(state.last_index_ts),
            "last_pass": _iso(state.last_dream_ts),
            "last_pass_result": state.last_dream_result or None,
        }, live=False))  # fmt: skip
    return rows


def gather(rt: Any, now: float) -> Status:
    """The daemon's state: its lock, its heartbeat, and each dir's (live, or from disk)."""
    pid = lock_holder(rt.paths)
    try:
        # Bounded, and never a FIFO planted in its place (it would hang `memoryd status`).
        status = safejson.loads(read_bounded(rt.paths.status_file, STATUS_MAX_BYTES, follow=False))
        if not isinstance(status, dict):
            status = None
    except (OSError, ValueError):
        status = None
    beat = parse_ts(status.get("heartbeat")) if status else None
    age = now - beat if beat is not None else None
    every = float(status.get("heartbeat_every", HEARTBEAT_EVERY)) if status else HEARTBEAT_EVERY
    running = pid is not None
    fresh = bool(running and status and age is not None and age <= STALE_BEATS * every
                 and status.get("pid") == pid)  # fmt: skip
    result = Status(running, pid, fresh, age, status, audit_log=str(rt.paths.audit_log),
                    config=rt.config.source, lock_file=str(rt.paths.lock_file))  # fmt: skip
    if fresh and status:
        result.dirs = [_row(d, True) for d in status.get("dirs", []) if isinstance(d, dict)]
    else:
        result.dirs, result.from_disk = _from_disk(rt, status), True
    result.notes = _notes(rt, result.dirs)
    return result


def _notes(rt: Any, rows: Sequence[DirRow]) -> list[tuple[str, str]]:
    """From each dir's state: its files holding git conflict markers, and why memoryd leaves
    it alone when a merge or git is the reason (as the last pass reported them)."""
    out = []
    tracked: dict[str, int] = {}  # by repo: one line for a repo's dozen agent dirs
    for row in rows:
        try:
            reported = rt.store.load(Path(row.path)).reported
        except (OSError, ValueError):
            continue
        why = str(reported.get("unmanaged") or "")  # (its numbers made N: said once)
        if MARK in why:
            out.append((row.path, f"{why.split(' ', 1)[0]} {MARK}: {HINT}"))
        elif why.startswith(TRACKED):
            tree = work_tree(Path(row.path))
            top = str(tree.top) if tree is not None else row.path
            tracked[top] = tracked.get(top, 0) + 1
        conflicted = sorted(
            k.removeprefix("unparseable:")
            for k, v in reported.items()
            if k.startswith("unparseable:") and str(v).startswith("conflict:")
        )
        if conflicted:
            out.append((row.path, f"{', '.join(conflicted)} {MARK}: {HINT}"))
    for top, count in sorted(tracked.items()):
        dirs = "its memory dir" if count == 1 else f"{count} memory dirs"
        out.append((top, f"{dirs} tracked by git: read and reported, never written ({DETAIL})"))
    return out


def _when(iso: str | None, view: View) -> str:
    ts = parse_ts(iso)
    return ago(ts, view.now) if ts is not None else "never"


def dir_table(rows: Sequence[DirRow], view: View, *, live: bool) -> list[str]:
    header = ["DIR", "KIND", "FILES", "INDEX", "CHANGED", "WRITTEN", "LAST PASS"]
    watch = live and any(d.watch != "ok" for d in rows)  # said only when one is not
    if live:
        header += ["QUEUED", *(["WATCH"] if watch else [])]
    body = []
    for d in rows:
        last_pass = _when(d.last_pass, view)
        if d.last_pass and d.last_pass_result not in (None, "", PLAIN_RESULT):
            last_pass += f" ({d.last_pass_result})"  # a pass that did not end as planned
        cells = [
            dir_label(d.path, view.home, view.roots.get(d.path)),
            d.kind or "?",
            "?" if d.files is None else str(d.files),
            d.index or "?",
            str(d.changed_since_dream),
            _when(d.last_index_write, view),
            last_pass,
        ]
        if live:
            cells += ["yes" if d.queued else "no", *([d.watch or "?"] if watch else [])]
        body.append(cells)
    # Too wide for the terminal: the kind goes first (the dir's name mostly says it).
    natural = sum(max(len(r[i]) for r in [header, *body]) + 2 for i in range(len(header)))
    if natural > view.width - 2:
        header = header[:1] + header[2:]
        body = [r[:1] + r[2:] for r in body]
    lines = ["  " + line for line in table(header, body, view.width - 2, shrink=0)]
    key = "CHANGED: files changed since the last dream; WRITTEN: the last index write"
    note = f"({key}{'; QUEUED: waiting out the debounce' if live else ''})"
    return [*lines, *textwrap.wrap(note, view.width, initial_indent="  ", subsequent_indent="  ")]


def render(s: Status, view: View) -> str:
    """The status for a person: one sentence on the daemon, then its dirs as a table."""
    out = []
    status = s.status or {}
    where = (f"Audit log: {short_path(s.audit_log, view.home)}   config: "
             f"{short_path(s.config, view.home)}")  # fmt: skip
    if not s.running:
        out.append(f"memoryd is not running (nothing holds {short_path(s.lock_file, view.home)}).")
        if status.get("heartbeat"):
            out.append(f"Its last heartbeat was {_when(status['heartbeat'], view)} "
                       f"(pid {status.get('pid')}).")  # fmt: skip
        out.append("Start it with `memoryd run`, or `memoryd service install` to run it as a "
                   "user service.")  # fmt: skip
    elif not s.fresh:
        when = (
            ago(view.now - s.heartbeat_age_s, view.now)
            if s.heartbeat_age_s is not None
            else "never"
        )
        out.append(f"memoryd is running (pid {s.pid}) but its heartbeat is stale (last {when}); "
                   "it may be stuck: see its log (journalctl --user -u memoryd).")  # fmt: skip
    else:
        started = parse_ts(status.get("started"))
        since = (f" since {clock_time(started, view.now, utc=view.utc)} "
                 f"({ago(started, view.now)})") if started is not None else ""  # fmt: skip
        beat = ago(view.now - (s.heartbeat_age_s or 0), view.now)
        out.append(f"memoryd {status.get('version')} is running (pid {s.pid}){since}; "
                   f"heartbeat {beat}.")  # fmt: skip
        if status.get("waiting_for_claude_home"):
            out.append(f"Waiting for {short_path(status['claude_home'], view.home)} to exist.")
        queued = sum(1 for d in s.dirs if d.queued)
        if queued:
            out.append(f"{queued} dir{'s' if queued != 1 else ''} with changes waiting out the "
                       "debounce.")  # fmt: skip
    out.append(where)
    if s.dirs:
        out.append("Dirs, as their state on disk says (the daemon is not watching):"
                   if s.from_disk else "Dirs:")  # fmt: skip
        out.extend(dir_table(s.dirs, view, live=not s.from_disk))
    elif s.fresh:
        out.append("No memory dirs yet.")
    for folder, note in s.notes:
        out.append(f"  {short_path(folder, view.home)}: {note}")
    return "\n".join(out) + "\n"
