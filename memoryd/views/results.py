"""Recall's results for a person: search and recall results, and one memory as `show` prints
it; every value `shown` (anyone may have written the files)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.recall.engine import Result


def _marked(snippet: str, color: bool) -> str:
    """With `color`, the snippet's `**matches**` in the match colour instead of their marks."""
    if not color:
        return snippet
    from memoryd.model.humanize import Painter
    from memoryd.model.lazyre import lazy

    paint = Painter(True)
    return lazy(r"\*\*(.+?)\*\*").sub(lambda m: paint(m[1], "match"), snippet)


def render_result(number: int, result: Result, color: bool = False) -> str:
    """One result: title, file, facts, snippet."""
    description = shown(result["description"])
    title = shown(result["name"]) + (f" — {description}" if description else "")
    facts = [result["dir"], result["type"] or "no type", result["tier"]]
    facts.append(f"{result['date']} ({result['age_days']} d)")
    facts += result["flags"]
    lines = [
        f"{number}. {title}",
        f"   {shown(result['file'])}",
        "   " + " · ".join(map(shown, facts)),
    ]
    if result["snippet"] and result["snippet"] != result["description"]:
        lines.append(f"   {_marked(shown(result['snippet']), color)}")
    if result.get("why"):
        lines.append("   why: " + "; ".join(map(shown, result["why"])))
    return "\n".join(lines) + "\n"


def render_results(
    hits: list[Result], excluded: list[dict[str, Any]], empty: str, color: bool
) -> str:
    """The results, else `empty`; then each file not searched, with why (notes without
    frontmatter only in --json)."""
    text = "".join(render_result(number, result, color) for number, result in enumerate(hits, 1))
    if not hits:
        text += empty + "\n"
    for ex in excluded:
        if ex["kind"] == "problem":
            text += f"not searched: {shown(ex['file'])}: {shown(ex['why'])}\n"
    return text


def render_shown(found: dict[str, Any]) -> str:
    """One memory: where it is, its facts, then its text (which keeps its lines)."""
    memory = found.get("memory")
    if not memory:
        return f"{shown(found['problem'], lines=True)}\n"
    age = f"{memory['date']} ({memory['age_days']} d)"
    facts = [memory["dir"], memory["type"] or "no type", age]
    facts += memory["flags"]
    lines = [shown(memory["file"]), "   " + " · ".join(map(shown, facts))]
    lines.append(f"   {shown(found['indexed'])}")
    lines += [f"   also: {shown(other)}" for other in found.get("others", [])]
    text = shown(found["text"], lines=True)
    return "\n".join(lines) + "\n\n" + text + ("" if text.endswith("\n") else "\n")
