"""`memoryd dirs` as a table of the rows `--json` prints, one per memory dir, and a summary."""

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.model.display import shown
from memoryd.model.humanize import Painter, ago, layout, parse_ts, plural

HEADER = ("NAME", "KIND", "MODE", "MEMORIES", "INDEX", "FLAGGED", "LAST PASS")
LEGEND = "INDEX: MEMORY.md's lines and the share of the agent's load window they take."
DETAIL = "The detail of a dir, and why one is unmanaged: memoryd dirs DIR"

# Last-pass results as a person says them; "" when MODE or the time says it all.
RESULT_WORDS = {
    "completed": "",
    "unmanaged": "",
    "refused": "refused",
    "failed": "failed",
    "skipped": "skipped",
}


# Kinds as the table shows them (the longest would take a tenth of a narrow terminal).
KIND_WORDS = {"repo-agent-local": "repo-local"}


def index_cell(row: Mapping[str, Any]) -> str:
    """MEMORY.md's lines and the larger share of the agent's line and character limits it
    takes (`42 21%`), `none`, or `not loaded` (auto memory off, or moved)."""
    if row.get("not_loaded"):
        return "not loaded"  # the agent reads none of it: `dirs DIR` says why
    idx = row.get("index")
    if idx is None:
        return "none"
    use = max(idx["lines"] / max(idx["max_lines"], 1), idx["chars"] / max(idx["max_chars"], 1))
    return f"{idx['lines']} {use:.0%}"


def last_pass_cell(row: Mapping[str, Any], now: float) -> str:
    when = parse_ts(row.get("last_pass"))
    if when is None:
        return "never"
    result = str(row.get("last_pass_result") or "")
    word = RESULT_WORDS.get(result, result.replace("_", " "))
    return f"{ago(when, now)}, {word}" if word else ago(when, now)


def cells(row: Mapping[str, Any], now: float) -> list[str]:
    mode = str(row["mode"])
    if mode == "managed" and not row.get("in_sync", True):
        mode = "managed*"  # out of step with its files: the summary says what to do
    return [
        shown(str(row.get("name") or row["label"])),
        KIND_WORDS.get(str(row["kind"]), str(row["kind"])),
        mode,
        str(row["memory_files"]),
        index_cell(row),
        "-" if row.get("flagged") is None else str(row["flagged"]),
        last_pass_cell(row, now),
    ]


def summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line over every dir: how many, managed or not, memories, flags, what to run."""
    managed = sum(1 for r in rows if r["mode"] == "managed")
    memories = sum(int(r["memory_files"]) for r in rows)
    flagged = sum(int(r["flagged"]) for r in rows if r.get("flagged"))
    unparseable = sum(len(r["unparseable"]) for r in rows)
    out_of_step = sum(1 for r in rows if r["mode"] == "managed" and not r.get("in_sync", True))
    parts = [
        plural(len(rows), "dir") + f" ({managed} managed, {len(rows) - managed} unmanaged)",
        plural(memories, "memory", "memories"),
    ]
    if flagged:
        parts.append(f"{flagged} flagged for review")
    if unparseable:
        parts.append(plural(unparseable, "file") + " unparseable")
    secrets = [s for r in rows for s in r.get("secrets", ())]
    if secrets:
        files = len({(r["real_path"], s["file"]) for r in rows for s in r.get("secrets", ())})
        parts.append(
            f"{plural(len(secrets), 'secret')} in {plural(files, 'memory', 'memories')}"
            " (memoryd dirs --secrets)"
        )
    not_loaded = sum(1 for r in rows if r.get("not_loaded"))
    if not_loaded:
        parts.append(f"{not_loaded} not loaded by the agent")
    if out_of_step:
        parts.append(f"{out_of_step} out of step (marked *: run memoryd index)")
    return ", ".join(parts) + "."


def render(
    rows: Sequence[Mapping[str, Any]], now: float, width: int, paint: Painter | None = None
) -> str:
    """The table, a summary line, and where the detail (and why a dir is unmanaged) is."""
    paint = paint or Painter(False)
    head, body = layout(HEADER, [cells(r, now) for r in rows], width, shrink=0)
    lines = ["  ".join(paint(c, "bold") for c in head).rstrip()]
    for row, line in zip(rows, body, strict=True):
        styled = [paint(line[0], "name"), line[1]]
        styled.append(
            paint(line[2], "warn") if row["mode"] != "managed" or "*" in line[2] else line[2]
        )
        styled += [line[3], line[4]]
        styled.append(paint(line[5], "warn") if row.get("flagged") else line[5])
        result = str(row.get("last_pass_result") or "")
        styled.append(paint(line[6], "error") if result in ("failed", "refused") else line[6])
        lines.append("  ".join(styled).rstrip())
    lines.append("")
    lines += textwrap.wrap(summary(rows), max(width, 20))
    for note in (LEGEND, DETAIL):
        lines += [paint(line, "dim") for line in textwrap.wrap(note, max(width, 20))]
    return "\n".join(lines) + "\n"
