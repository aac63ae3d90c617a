"""`memoryd trash list` for a person: one line per trashed file, when it moved ("3 min ago"),
and its path last, as `trash restore` takes it."""

from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.model.display import shown
from memoryd.model.humanize import Painter, ago, layout, parse_ts

HEADER = ("ID", "MOVED", "REASON", "FILE")


def moved_cell(row: Mapping[str, Any], now: float) -> str:
    """When memoryd moved it, relative to now; else the day folder's name."""
    when = parse_ts(row.get("time"))
    return ago(when, now) if when is not None else str(row.get("day", "?"))


def render(rows: Sequence[Mapping[str, Any]], now: float, paint: Painter | None = None) -> str:
    """Aligned id, moved and reason columns, then the path (never cut) and what superseded it."""
    paint = paint or Painter(False)
    if not rows:
        return "The trash is empty.\n"
    cells = [[str(r["id"]), moved_cell(r, now), str(r["reason"]), ""] for r in rows]
    head, body = layout(HEADER, cells, 1 << 30)
    lines = ["  ".join(paint(c, "bold") for c in head)]
    for row, (rid, moved, reason, _) in zip(rows, body, strict=True):
        because = row.get("duplicate_of") or row.get("superseded_by")
        extra = paint(f" (kept: {shown(because)})", "dim") if because else ""
        where = shown(f"{row['dir']}/{row['file']}")
        lines.append(f"{paint(rid, 'name')}  {paint(moved, 'dim')}  {reason}  {where}{extra}")
    return "\n".join(lines) + "\n"
