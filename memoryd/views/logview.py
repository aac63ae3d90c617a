"""The audit log for a person, pure: one compact line per row (what each event shows is
`_DETAILS`; others show their fields), and a summary in sentences."""

import re
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memoryd.discover.dirlabel import dir_label as dir_label  # where the log view had it
from memoryd.model.display import shown
from memoryd.model.humanize import Painter, ago, clip, clock_time, parse_ts, plural, short_path

Row = Mapping[str, Any]
EVENT_WIDTH = 17  # most event names fit; longer ones push the line on by a few columns
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HIDDEN = frozenset({"ts", "v", "event", "level", "pid", "dir"})
_LEVEL_ROLE = {"warning": "warn", "error": "error", "debug": "dim"}
_LEVEL_WORD = {"warning": "WARN", "error": "ERROR", "debug": "DEBUG"}


@dataclass(frozen=True, slots=True)
class View:
    """How to show rows: the clock, the zone, the home folder (`~`), the width, every field or
    not, and colour."""

    now: float
    home: str | None = None
    utc: bool = False
    width: int = 100
    verbose: bool = False
    paint: Painter = field(default_factory=lambda: Painter(False))
    # The repo root of each per-project dir the rows name (discover.dirlabel.roots): its label.
    roots: Mapping[str, str] = field(default_factory=dict)


def _names(items: object, limit: int = 2, unit: str = "") -> str:
    """A list of file names: the names when few, else how many (of `unit`)."""
    if not isinstance(items, list):
        return str(items)
    if len(items) <= limit:
        return ", ".join(shown(i) for i in items)
    return f"{len(items)} {unit}".rstrip()


def _index_updated(row: Row, view: View) -> str:
    parts = [
        f"{word}{_names(row[key], unit='pointers' if len(word) == 1 else '')}"
        for key, word in (
            ("added", "+"),
            ("removed", "−"),
            ("rewritten", "rewrote "),
            ("collapsed", "collapsed "),
            ("demoted", "demoted "),
        )
        if row.get(key)
    ]
    text = "  ".join(parts)
    before, after = row.get("bytes_before"), row.get("bytes_after")
    if isinstance(before, int) and isinstance(after, int) and before != after:
        text += f"  ({before} → {after} bytes)"
    return text or "trailer only"


def _dream_counts(row: Row, view: View) -> str:
    counts = [
        f"{row[key]} {word}"
        for key, word in (("deleted", "moved"), ("flagged", "flagged"), ("kept", "kept"))
        if row.get(key)
    ]
    status = row.get("status")
    head = str(status) if status and status not in ("completed", "ok") else ""
    took = row.get("duration_ms")
    tail = f"{took} ms" if isinstance(took, int) else ""
    text = ", ".join(x for x in (head, ", ".join(counts) or "nothing to do") if x)
    if row.get("error"):
        text = f"{row['error']} ({text})"
    return f"{text}  {tail}".strip()


def _field(*keys: str, sep: str = "  ") -> Callable[[Row, View], str]:
    def render(row: Row, view: View) -> str:
        return sep.join(_value(row[k], view) for k in keys if _shown_value(row.get(k)))

    return render


def _trash_moved(row: Row, view: View) -> str:
    because = row.get("duplicate_of") or row.get("superseded_by")
    link = {"duplicate": "of", "contradiction": "by"}.get(str(row.get("reason")), "of")
    why = f"{row.get('reason', '')}" + (f" {link} {shown(because)}" if because else "")
    return f"{shown(row.get('file', '?'))}  {why}  id {row.get('id', '?')}".rstrip()


def _first(key: str) -> Callable[[Row, View], str]:
    def render(row: Row, view: View) -> str:
        value = row.get(key)
        if isinstance(value, list):
            more = f" (and {len(value) - 1} more)" if len(value) > 1 else ""
            return (shown(value[0]) + more) if value else ""
        return shown(value) if value is not None else ""

    return render


_DETAILS: dict[str, Callable[[Row, View], str]] = {
    "daemon.started": lambda r, v: f"memoryd {r.get('version', '?')}, {r.get('dirs', '?')} dirs",
    "daemon.stopped": _field("reason"),
    "daemon.waiting": lambda r, v: f"for {short_path(str(r.get('path', '')), v.home)}",
    "dir.discovered": _field("kind", "mode"),
    "dir.lost": _field("reason"),
    "dir.refused": lambda r, v: (
        f"→ {short_path(str(r.get('target', '')), v.home)}  {shown(r.get('reason', ''))}"
    ),
    "index.updated": _index_updated,
    "index.unmanaged": _field("reason"),
    "index.over_budget": lambda r, v: (
        f"{r.get('lines', '?')} lines, {r.get('chars', '?')} chars"
        + (f"; {r['outside_window']} outside the window" if r.get("outside_window") else "")
    ),
    "index.demoted": lambda r, v: f"{r.get('count', '?')} entries to the archive",
    "index.conflict": lambda r, v: f"attempt {r.get('attempt', '?')}",
    "index.dead_link": _field("target"),
    "index.invalid_link": _field("target"),
    "index.verify_failed": _first("problems"),
    "index.write_failed": _field("error"),
    "index.temp_removed": lambda r, v: _names(r.get("files", [])),
    "file.unparseable": lambda r, v: f"{shown(r.get('file', '?'))}: {shown(r.get('problem', ''))}",
    "dream.started": _field("trigger"),
    "dream.completed": _dream_counts,
    "dream.failed": _dream_counts,
    "dream.refused": lambda r, v: (
        f"would move {r.get('would_move', '?')}, limit {r.get('limit', '?')}"
    ),
    "dream.skipped": _field("why"),
    "dream.kept": _field("file", "guard"),
    "dream.move_skipped": lambda r, v: (
        f"{shown(r.get('file', '?'))}: {shown(r.get('why', ''))}"
        + (f" (kept as {shown(r['kept_as'])})" if r.get("kept_as") else "")
    ),
    "trash.moved": _trash_moved,
    "trash.restored": lambda r, v: (
        f"{shown(r.get('file', '?'))}"
        + (f" as {shown(r['as'])}" if r.get("as") and r.get("as") != r.get("file") else "")
    ),
    "version.restored": lambda r, v: f"{shown(r.get('file', '?'))} version {r.get('version', '?')}",
    "trash.purged": lambda r, v: _names(r.get("days", []), 3) or shown(r.get("refused", "")),
    "trash.kept": _field("day", "problem"),
    "watch.overflow": _field("detail"),
    "watch.rescanned": lambda r, v: f"{r.get('dirs', '?')} dirs, {r.get('changed', '?')} changed",
    "watch.limit": _field("error"),
    "pass.recovered": _field("outcome"),
    "config.invalid": lambda r, v: f"{shown(r.get('source', ''))}: {_first('problems')(r, v)}",
    "config.reloaded": _field("source"),
}


def _shown_value(value: object) -> bool:
    """Whether a field is worth a person's column: not empty, not a content hash."""
    if value is None or value == "" or value == [] or value == {}:
        return False
    return not (isinstance(value, str) and _HEX64.match(value))


def _value(value: object, view: View) -> str:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
        return ",".join(shown(v) for v in value)
    import json

    return shown(json.dumps(value, ensure_ascii=False, default=str))


def _generic(row: Row, view: View) -> str:
    return "  ".join(
        f"{k}={_value(v, view)}"
        for k, v in row.items()
        if k not in _HIDDEN and (view.verbose or _shown_value(v))
    )


def render_row(row: Row, view: View) -> str:
    """One row as one line (no newline), at most `view.width` columns of text."""
    ts = parse_ts(row.get("ts"))
    when = clock_time(ts, view.now, utc=view.utc) if ts is not None else "?"
    level = str(row.get("level", "info"))
    event = str(row.get("event", "?"))
    pieces: list[tuple[str, str, str | None]] = [("", when, "dim")]
    if level != "info":
        pieces.append((" ", _LEVEL_WORD.get(level, level.upper()), _LEVEL_ROLE.get(level)))
    pieces.append((" ", shown(event), "name"))
    gap = " " * max(2, EVENT_WIDTH - len(event) + 1)  # the next column starts aligned
    if row.get("dir"):
        where = str(row["dir"])
        label = (
            short_path(where, view.home)
            if view.verbose
            else dir_label(where, view.home, view.roots.get(where))
        )
        pieces.append((gap, label, "bold"))
        gap = "  "
    if view.verbose:
        detail = f"{_generic(row, view)}  pid={row.get('pid', '?')}".strip()
    else:
        renderer = _DETAILS.get(event)
        try:
            detail = renderer(row, view) if renderer else _generic(row, view)
        except (KeyError, TypeError, ValueError, AttributeError):
            detail = _generic(row, view)  # a row of an older or newer schema
    if detail:
        pieces.append((gap, detail, None))
    return _layout(pieces, view)


def _layout(pieces: Sequence[tuple[str, str, str | None]], view: View) -> str:
    """Each piece after its gap, cut at the width, then coloured: escape codes never count as
    columns."""
    out: list[str] = []
    used = 0
    for gap, text, role in pieces:
        room = view.width - used - len(gap)
        if room <= 0:
            break
        piece = clip(text, room)
        used += len(gap) + len(piece)
        out.append(gap + (view.paint(piece, role) if role else piece))
    return "".join(out).rstrip()


# --- the summary ------------------------------------------------------------------------------


# What each event adds to a dir's tally: a count by this key, once a row; (key, field): the
# distinct `file:field` values seen; None: part of another row's story. The four events whose
# rows carry their own counts are counted in DirTally.add.
_COUNTS: dict[str, str | tuple[str, str] | None] = {
    "trash.restored": "restored",
    "version.restored": "versions_restored",
    "dream.completed": "dream_passes",
    "dream.refused": "refused",
    "dream.failed": "failed",
    "dream.kept": "kept",
    "dream.move_skipped": "skipped_moves",
    "memory.deleted_outside": "deleted_outside",
    "memory.rewritten_outside": "rewritten_outside",
    "memory.mass_change": "mass_changes",
    "memory.forgotten": "forgotten",
    "memory.secret_found": ("secrets", "line"),
    "flag.acknowledged": "acknowledged",
    "file.unparseable": ("unparseable", "file"),
    "index.dead_link": ("dead_links", "target"),
    "index.invalid_link": ("invalid_links", "target"),
    "index.over_budget": "over_budget",
    "index.write_failed": "index_write_errors",
    "index.verify_failed": "index_write_errors",
    "memory.checkout": None,
    "dream.started": None,
    "dream.skipped": None,
    "index.unmanaged": None,
    "dir.discovered": None,
    "index.conflict": None,  # retried; a failure shows as index.write_failed
}
# What memoryd did, most telling first, after the moves: (key, one, many).
_ACTIONS = (
    ("restored", "restored from the trash", "restored from the trash"),
    ("versions_restored", "earlier version written back", "earlier versions written back"),
    ("pointers_added", "pointer added", "pointers added"),
    ("pointers_removed", "pointer removed", "pointers removed"),
    ("pointers_rewritten", "pointer rewritten", "pointers rewritten"),
    ("pointers_collapsed", "pointer collapsed", "pointers collapsed"),
    ("demotions", "index demoted", "indexes demoted"),
    ("dream_passes", "dream pass", "dream passes"),
    ("kept", "candidate kept by a guard", "candidates kept by a guard"),
    ("purged_days", "trash day purged", "trash days purged"),
    ("forgotten", "memory forgotten on request", "memories forgotten on request"),
    ("acknowledged", "flag acknowledged", "flags acknowledged"),
)
# What needs a person: (key, one, many).
_PROBLEMS = (
    ("mass_changes", "mass change by other processes", "mass changes by other processes"),
    ("deleted_outside", "memory deleted outside memoryd", "memories deleted outside memoryd"),
    ("rewritten_outside", "file rewritten outside memoryd", "files rewritten outside memoryd"),
    ("secrets", "secret found", "secrets found"),
    ("unparseable", "file unparseable", "files unparseable"),
    ("refused", "pass refused by the circuit breaker", "passes refused by the circuit breaker"),
    ("failed", "pass failed", "passes failed"),
    ("skipped_moves", "planned move skipped", "planned moves skipped"),
    ("dead_links", "dead link", "dead links"),
    ("invalid_links", "invalid link", "invalid links"),
    ("over_budget", "index write over the budget", "index writes over the budget"),
    ("index_write_errors", "index write failed", "index writes failed"),
)
# The counts `log --summary --json` gives per dir, between `moved` and `other`.
_JSON_COUNTS = (
    "restored", "versions_restored", "pointers_added", "pointers_removed", "pointers_rewritten",
    "pointers_collapsed", "demotions", "demoted_entries", "index_writes", "dream_passes",
    "refused", "failed", "kept", "skipped_moves", "purged_days", "unparseable", "dead_links",
    "invalid_links", "over_budget", "index_write_errors",
)  # fmt: skip
_REASON_PLURAL = {"duplicate": "duplicates", "contradiction": "contradictions", "stale": "stale"}


def _length(value: object) -> int:
    return len(value) if isinstance(value, list) else 0


@dataclass
class DirTally:
    """What memoryd did in one dir (or, with no dir, to itself), counted from its rows."""

    n: Counter[str] = field(default_factory=Counter)  # by the keys of _COUNTS
    moved: Counter[str] = field(default_factory=Counter)  # by reason
    seen: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    other: Counter[str] = field(default_factory=Counter)  # events without a sentence

    def add(self, row: Row) -> None:
        event = str(row.get("event"))
        if event == "trash.moved":
            self.moved.update([str(row.get("reason", "other"))])
        elif event == "index.updated":
            self.n["index_writes"] += 1
            for key in ("added", "removed", "rewritten", "collapsed"):
                self.n[f"pointers_{key}"] += _length(row.get(key))
        elif event == "index.demoted":
            count = row.get("count")
            self.n["demotions"] += 1
            self.n["demoted_entries"] += (
                count if isinstance(count, int) else _length(row.get("files") or [])
            )
        elif event == "trash.purged":
            self.n["purged_days"] += _length(row.get("days"))
        elif event not in _COUNTS:
            self.other[event] += 1
        elif isinstance(how := _COUNTS[event], tuple):
            key, detail = how
            self.seen[key].add(f"{row.get('file', '')}:{row.get(detail, '')}")
            self.n[key] = len(self.seen[key])
        elif how is not None:
            self.n[how] += 1

    def sentence(self) -> str:
        """Actions, then (after `;`) what needs a person; "" when nothing was counted."""
        done, problems = (
            self._actions(),
            [plural(self.n[key], one, many) for key, one, many in _PROBLEMS if self.n[key]],
        )
        others = [f"{n} {event}" for event, n in sorted(self.other.items())]
        text = ", ".join(done)
        if problems:
            text = f"{text}; {', '.join(problems)}" if text else ", ".join(problems)
        if others:
            text = f"{text}; also {', '.join(others)}" if text else ", ".join(others)
        return text

    def _actions(self) -> list[str]:
        done = []
        if self.moved:
            total = sum(self.moved.values())
            why = ", ".join(
                plural(n, r, _REASON_PLURAL.get(r))
                for r, n in sorted(self.moved.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            done.append(f"{plural(total, 'memory', 'memories')} moved to the trash ({why})")
        for key, one, many in _ACTIONS:
            if self.n[key]:
                done.append(plural(self.n[key], one, many))
                if key == "demotions":
                    done[-1] += f" {plural(self.n['demoted_entries'], 'entry', 'entries')}"
        return done


def tally(rows: Iterable[Row]) -> dict[str, DirTally]:
    """Rows counted per dir ("" for memoryd's own rows), in order of first appearance."""
    out: dict[str, DirTally] = defaultdict(DirTally)
    for row in rows:
        out[str(row.get("dir") or "")].add(row)
    return dict(out)


def _own_sentence(t: DirTally) -> str:
    """memoryd's rows about itself, said in words where there are some."""
    words = {
        "daemon.started": ("start", "starts"),
        "daemon.stopped": ("stop", "stops"),
        "config.reloaded": ("configuration reload", "configuration reloads"),
        "config.invalid": ("invalid configuration", "invalid configurations"),
        "watch.overflow": ("lost batch of file events", "lost batches of file events"),
        "pass.recovered": ("unfinished pass recovered", "unfinished passes recovered"),
    }
    said = []
    for event, n in sorted(t.other.items()):
        if event in words:
            said.append(f"{n} {words[event][0] if n == 1 else words[event][1]}")
        else:
            said.append(f"{n} {event}")
    rest = replace(t, other=Counter()).sentence()
    return ", ".join(x for x in (", ".join(said), rest) if x)


def render_summary(rows: Iterable[Row], view: View, *, since: float | None) -> str:
    """What memoryd did, a sentence per dir with counts, dirs with news first."""
    rows = list(rows)
    tallies = tally(rows)
    start = (
        f"since {clock_time(since, view.now, utc=view.utc)} ({ago(since, view.now)})"
        if since
        else "in the whole log"
    )
    if not rows:
        return f"Nothing logged {start}.\n"
    lines = [
        f"memoryd {start}: {plural(len(rows), 'row')}, "
        f"{plural(len([d for d in tallies if d]), 'dir')}."
    ]
    quiet = []
    for where, t in sorted(tallies.items(), key=lambda kv: (kv[0] == "", kv[0])):
        if not where:
            continue
        text = t.sentence()
        if not text:
            quiet.append(dir_label(where, view.home, view.roots.get(where)))
            continue
        label = dir_label(where, view.home, view.roots.get(where))
        full = short_path(where, view.home)
        path_note = clip(f" ({full})", view.width - len(label)) if full != label else ""
        lines.append(view.paint(label, "bold") + path_note)
        lines.extend(
            textwrap.wrap(
                f"{text}.",
                max(40, view.width),
                initial_indent="  ",
                subsequent_indent="  ",
                break_on_hyphens=False,
            )
        )
    if quiet:  # rows about them, none worth a sentence (a pass that found nothing to do)
        lines.append(f"Nothing to report in {plural(len(quiet), 'other dir')}.")
    if "" in tallies:
        own = _own_sentence(tallies[""])
        if own:
            lines.extend(
                textwrap.wrap(
                    f"memoryd itself: {own}.",
                    max(40, view.width),
                    subsequent_indent="  ",
                    break_on_hyphens=False,
                )
            )
    return "\n".join(lines) + "\n"


def summary_json(rows: Iterable[Row]) -> dict[str, Any]:
    """The summary's counts, per dir, for `--json`."""
    out = {}
    for where, t in tally(rows).items():
        counts = {key: t.n[key] for key in _JSON_COUNTS}
        out[where or "memoryd"] = {"moved": dict(t.moved), **counts, "other": dict(t.other)}
    return {"dirs": out}
