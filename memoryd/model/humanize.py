"""Text for people: relative and local times, short paths, colour on a terminal, plain tables.
Pure: the clock, the environment and the stream are passed in."""

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from memoryd.model.display import shown

# ANSI SGR codes by the role a piece of text plays, not by hue: views ask for a role.
_STYLES = {
    "dim": "2",
    "bold": "1",
    "ok": "32",
    "warn": "33",
    "error": "31;1",
    "name": "36",
    "match": "1;31",  # a search hit (git grep's colour for a match)
}


def use_color(mode: str, stream: TextIO, env: Mapping[str, str]) -> bool:
    """`always`, `never`, or (`auto`) a terminal without a non-empty `NO_COLOR` or TERM=dumb."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def terminal_width(stream: TextIO, env: Mapping[str, str], default: int = 100) -> int:
    """Columns of the terminal `stream` writes to; `COLUMNS` wins; `default` for a pipe."""
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return default


@dataclass(frozen=True, slots=True)
class Painter:
    """Wraps text in a role's colour when colour is on."""

    enabled: bool

    def __call__(self, text: str, role: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\x1b[{_STYLES[role]}m{text}\x1b[0m"


def ago(then: float, now: float) -> str:
    """`then` relative to `now`: "just now", "42 s ago", "3 min ago", "5 h ago", "in 3 min"."""
    delta = now - then
    ahead = delta < 0
    seconds = abs(delta)
    if seconds < 5:
        return "just now"
    if seconds < 60:
        amount = f"{int(seconds)} s"
    elif seconds < 3600:
        amount = f"{int(seconds // 60)} min"
    elif seconds < 86400 * 2:
        amount = f"{int(seconds // 3600)} h"
    else:
        amount = f"{int(seconds // 86400)} d"
    return f"in {amount}" if ahead else f"{amount} ago"


def parse_ts(value: object) -> float | None:
    """An ISO 8601 time or epoch seconds as epoch seconds; None for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def clock_time(when: float, now: float, *, utc: bool = False) -> str:
    """A moment as a short wall-clock time: `14:03:07` today, `Nov 28 14:03` this year,
    `2025-11-28 14:03` before; local time unless `utc` (then suffixed `Z`)."""
    if utc:
        at, today = time.gmtime(when), time.gmtime(now)
    else:
        at, today = time.localtime(when), time.localtime(now)
    zone = "Z" if utc else ""
    if (at.tm_year, at.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M:%S", at) + zone
    if at.tm_year == today.tm_year:
        return time.strftime("%b %d %H:%M", at) + zone
    return time.strftime("%Y-%m-%d %H:%M", at) + zone


def short_path(path: str | Path, home: str | Path | None) -> str:
    """A path with the home folder written `~` (and escaped for a terminal)."""
    text = str(path)
    if home:
        base = str(home).rstrip("/")
        if text == base:
            text = "~"
        elif base and text.startswith(base + "/"):
            text = "~" + text[len(base) :]
    return shown(text)


def plural(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun for it: "1 dir", "3 dirs", "2 memories" (`many` when not `one` + s)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, the cut marked with `…`."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def _columns(
    header: Sequence[str], rows: Sequence[Sequence[str]], width: int, shrink: int
) -> tuple[list[list[str]], list[int]]:
    """The header and rows as lists, and each column's width: the widest cell's, but column
    `shrink` gives up what the table is over `width` (keeping at least 8)."""
    all_rows = [list(header), *[list(r) for r in rows]]
    count = len(header)
    widths = [max(len(r[i]) for r in all_rows) for i in range(count)]
    over = sum(widths) + 2 * (count - 1) - width
    if over > 0:
        widths[shrink] = max(8, widths[shrink] - over)
    return all_rows, widths


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    shrink: int = 0,
) -> list[str]:
    """Rows as aligned columns two spaces apart, each line at most `width` characters; column
    `shrink` (names or paths) gives up room first. Colour goes on after layout."""
    all_rows, widths = _columns(header, rows, width, shrink)
    count = len(header)
    lines = []
    for row in all_rows:
        cells = [clip(row[i], widths[i]) for i in range(count)]
        padded = [c.ljust(widths[i]) for i, c in enumerate(cells[:-1])] + [cells[-1]]
        lines.append(clip("  ".join(padded).rstrip(), width))
    return lines


def layout(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    shrink: int = 0,
) -> tuple[list[str], list[list[str]]]:
    """`table`'s layout as cells (the header's, then each row's), clipped and padded, for a
    caller that colours cells before joining them with two spaces."""
    all_rows, widths = _columns(header, rows, width, shrink)
    count = len(header)
    # The last column takes what is left, so that no line is wider than `width`.
    widths[-1] = max(0, min(widths[-1], width - sum(widths[:-1]) - 2 * (count - 1)))
    cells = [
        [clip(r[i], widths[i]).ljust(widths[i] if i < count - 1 else 0) for i in range(count)]
        for r in all_rows
    ]
    return cells[0], cells[1:]
