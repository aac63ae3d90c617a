"""Render dream results and `explain` for a person (text) or a program (JSON)."""

from collections.abc import Sequence
from typing import Any

from memoryd.display import shown
from memoryd.dream.run import DreamResult
from memoryd.secrets import summary as secret_summary

COUNT_LABELS = [
    ("files", "memory files"),
    ("stale_pruned", "stale pruned"),
    ("duplicates_merged", "duplicates merged"),
    ("contradictions_resolved", "contradictions resolved"),
    ("partially_stale_kept", "partially stale kept"),
    ("kept_by_guard", "stale kept by a guard"),
    ("evergreen", "evergreen"),
    ("fresh", "fresh"),
    ("surviving", "surviving"),
]


def totals(results: Sequence[DreamResult], promotion_candidates: int = 0) -> dict[str, int]:
    """The report's counts over every dir (DESIGN §4.11); a dry run's say what it would do."""
    out: dict[str, int] = {"dirs": len(results)}
    for result in results:
        for key, value in result.counts().items():
            out[key] = out.get(key, 0) + value
    out["indexes_rebuilt"] = sum(1 for r in results if r.index and r.index.status == "updated")
    out["promotion_candidates"] = promotion_candidates
    return out


def result_json(result: DreamResult) -> dict[str, Any]:
    plan = result.plan
    return {
        "dir": str(result.dir.path),
        "pass_id": result.pass_id,
        "status": result.status,
        "message": result.message,
        "repo_root": str(result.dir.repo_root) if result.dir.repo_root else None,
        "repo_note": result.repo_note,
        "counts": result.counts(),
        "changes": [
            {
                "file": r.original_name,
                "action": "moved to trash",
                "reason": r.reason,
                "detail": r.details.get("detail", ""),
                "duplicate_of": r.duplicate_of,
                "superseded_by": r.superseded_by,
                "id": r.id,
                "trash": f".trash/{r.day}/{r.stored_name}",
            }
            for r in result.moved
        ],
        "planned": [
            {
                "file": m.filename,
                "reason": m.reason,
                "detail": m.detail,
                "duplicate_of": m.duplicate_of,
                "superseded_by": m.superseded_by,
            }
            for m in (plan.moves if plan else [])
        ],
        "skipped_moves": [
            {"file": f, "why": w, **({"kept_as": result.kept_as[f]} if f in result.kept_as else {})}
            for f, w in result.skipped_moves
        ],
        "flagged": [
            {
                "file": f.filename,
                "classification": f.classification.value,
                "missing": list(f.missing),
                "guard": f.guard or None,
            }
            for f in (plan.flagged if plan else [])
        ],
        "unparseable": result.unparseable,
        "secrets": [
            {"file": name, **f.to_json()}
            for name, found in sorted(result.secrets.items())
            for f in found
        ],
        "conflict_copies": result.conflicts,
        "index": result.index.status if result.index else None,
        "duration_ms": result.duration_ms,
    }


def render_text(
    results: Sequence[DreamResult],
    housekeeping: Sequence[str],
    dry_run: bool,
    promotion_candidates: int = 0,
) -> str:
    lines: list[str] = []
    t = totals(results, promotion_candidates)
    title = (
        "Dream report (dry run: nothing was written; counts are what a pass would do)"
        if dry_run
        else "Dream report"
    )
    lines += [title, "=" * len(title), ""]
    lines.append(f"  {'dirs':<26}{t['dirs']:>7}")
    for key, label in COUNT_LABELS:
        lines.append(f"  {label:<26}{t.get(key, 0):>7}")
    lines.append(f"  {'indexes rebuilt':<26}{t['indexes_rebuilt']:>7}")
    lines.append(f"  {'promotion candidates':<26}{t['promotion_candidates']:>7}")
    lines.append("")
    for result in results:
        header = f"{shown(result.dir.path)}: {result.status}"
        if result.message:
            header += f" — {result.message}"
        lines.append(header)
        if result.repo_note:
            lines.append(f"  note: {result.repo_note}")
        plan = result.plan
        if dry_run and plan and plan.moves and result.status == "dry_run":
            for move in plan.moves:
                target = move.duplicate_of or move.superseded_by
                extra = f" (kept: {target})" if target else ""
                lines.append(
                    f"  [DRY RUN] Would move: {shown(move.filename)} -> .trash/ — "
                    f"{move.reason}: {move.detail}{extra}"
                )
        if result.status == "refused" and plan:
            lines.append("  Plan (not applied; apply by hand after review):")
            for move in plan.moves:
                lines.append(f"    {shown(move.filename)}: {move.reason} — {move.detail}")
        if result.status == "unmanaged" and plan and plan.moves:
            lines.append("  Would move, if memoryd managed this index (nothing is moved):")
            for move in plan.moves:
                lines.append(f"    {shown(move.filename)}: {move.reason} — {move.detail}")
        if result.moved:
            lines.append("  Changes made:")
            for r in result.moved:
                lines.append(
                    f"    {shown(r.original_name)}: moved to "
                    f".trash/{r.day}/{shown(r.stored_name)} — "
                    f"{r.reason}: {r.details.get('detail', '')} "
                    f"(restore: memoryd trash restore {r.id})"
                )
        for name, why in result.skipped_moves:
            kept = result.kept_as.get(name)
            where = f"; kept as {shown(kept)} (a new {shown(name)} took its name)" if kept else ""
            lines.append(f"    {shown(name)}: not moved — {why}{where}")
        if plan and plan.flagged:
            lines.append("  Flagged for review:")
            for flag in plan.flagged:
                missing = ", ".join(flag.missing) or "-"
                guard = f"; kept by guard {flag.guard}" if flag.guard else ""
                lines.append(
                    f"    {shown(flag.filename)}: {flag.classification.value}, missing: "
                    f"{shown(missing)}{guard}"
                )
        if result.secrets:
            lines.append("  Secrets (flagged, never moved: take them out of the memory by hand):")
            for name, found in sorted(result.secrets.items()):
                lines.append(f"    {shown(name)}: {secret_summary(found)}")
        for name in result.unparseable:
            lines.append(f"  unparseable (kept, not considered): {shown(name)}")
        for name in result.conflicts:
            lines.append(f"  sync conflict copy (reported, never consolidated): {shown(name)}")
    if housekeeping:
        lines += ["", "Housekeeping:"]
        lines += [f"  {h}" for h in housekeeping]
    return "\n".join(lines) + "\n"
