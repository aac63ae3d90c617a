"""Render dream results and `explain` for a person (text) or a program (JSON)."""

from collections.abc import Sequence, Set
from pathlib import Path
from typing import Any

from memoryd.discover.dirlabel import label as dir_label
from memoryd.dream.plan import Flag, Move
from memoryd.dream.result import DreamResult
from memoryd.model.conflicts import HINT as CONFLICT_HINT
from memoryd.model.conflicts import MARK, conflict_message_short
from memoryd.model.display import shown
from memoryd.model.secrets import summary as secret_summary
from memoryd.trash.store import stored_label

COUNT_LABELS = [
    ("dirs", "dirs"),
    ("files", "memory files"),
    ("stale_pruned", "stale pruned"),
    ("duplicates_merged", "duplicates merged"),
    ("contradictions_resolved", "contradictions resolved"),
    ("partially_stale_kept", "partially stale kept"),
    ("kept_by_guard", "stale kept by a guard"),
    ("evergreen", "evergreen"),
    ("fresh", "fresh"),
    ("surviving", "surviving"),
    ("flagged", "flagged for review"),
    ("indexes_updated", "indexes updated"),
    ("promotion_candidates", "promotion candidates"),
]


def totals(results: Sequence[DreamResult], promotion_candidates: int = 0) -> dict[str, int]:
    """The report's counts over every dir (DESIGN §4.11); a dry run's say what it would do."""
    out: dict[str, int] = {"dirs": len(results)}
    for result in results:
        for key, value in result.counts().items():
            out[key] = out.get(key, 0) + value
    # An index pass edits lines (it never regenerates a file); the old key stays for programs.
    out["indexes_updated"] = sum(1 for r in results if r.index and r.index.status == "updated")
    out["indexes_rebuilt"] = out["indexes_updated"]
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
                "trash": stored_label(result.dir.real_path, r.day, r.stored_name),
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
        # Listed for review; those a person acknowledged (memoryd ack) as they are now apart.
        "flagged": [_flag_json(f) for f in result.flags_listed],
        "acknowledged": [_flag_json(f) for f in result.flags_acknowledged],
        "unparseable": result.unparseable,
        "dangling_links": [d.to_json() for d in result.dangling],
        "secrets": [
            {"file": name, **f.to_json()}
            for name, found in sorted(result.secrets.items())
            for f in found
        ],
        "conflict_copies": result.conflicts,
        "index": result.index.status if result.index else None,
        "duration_ms": result.duration_ms,
    }


def _flag_json(flag: Flag) -> dict[str, Any]:
    return {
        "file": flag.filename,
        "classification": flag.classification.value,
        "missing": list(flag.missing),
        "guard": flag.guard or None,
    }


# A pass's status as a person reads it (the status words are for programs: --json).
STATUS_WORDS = {
    "completed": "done",
    "refused": "refused by the circuit breaker",
    "skipped": "skipped",
    "unmanaged": "not managed by memoryd, report only",
    "failed": "failed",
}


def status_text(result: DreamResult) -> str:
    """The status of a dir's pass in words, with what it moved."""
    if result.status == "completed":
        moved = len(result.moved)
        return f"done, {moved} moved to the trash" if moved else "done, nothing to move"
    if result.status == "dry_run":
        planned = len(result.plan.moves) if result.plan else 0
        return f"would move {planned} to the trash" if planned else "nothing to move"
    return STATUS_WORDS.get(result.status, result.status.replace("_", " "))


def ref_text(ref: str, kind: str) -> str:
    """A reference as the memory means it: a symbol as a backticked name, a path as is."""
    return f"`{ref}`" if kind == "symbol" else ref


def missing_text(result: DreamResult, filename: str, missing: Sequence[str]) -> str:
    """The missing references of a memory, symbols as symbols (the plan knows which is which)."""
    item = result.plan.items.get(filename) if result.plan else None
    kinds = {c.ref: c.kind for c in item.checks} if item is not None else {}
    return ", ".join(shown(ref_text(ref, kinds.get(ref, "path"))) for ref in missing) or "-"


def move_detail(result: DreamResult, filename: str, reason: str, detail: str) -> str:
    """Why a file moves: for a stale one, the paths that are gone and the symbols not found,
    each as what it is."""
    item = result.plan.items.get(filename) if result.plan else None
    if reason != "stale" or item is None:
        return detail
    gone = [c.ref for c in item.checks if c.kind == "path" and c.ref in item.missing]
    symbols = [c.ref for c in item.checks if c.kind == "symbol" and c.ref in item.missing]
    text = "every path it names is gone: " + ", ".join(shown(p) for p in gone)
    if symbols:
        text += "; no longer in the code: " + ", ".join(shown(f"`{s}`") for s in symbols)
    return text


def _nothing_to_say(result: DreamResult) -> bool:
    """A managed dir's pass that moved nothing, would move nothing, and has nothing to show."""
    plan = result.plan
    return (
        result.status in ("completed", "dry_run")
        and not result.moved
        and not (plan and (plan.moves or plan.flagged))
        and not (result.message or result.repo_note or result.skipped_moves or result.secrets)
        and not (result.acknowledged or result.unparseable or result.conflicts)
        and not result.dangling
    )


def render_text(
    results: Sequence[DreamResult],
    housekeeping: Sequence[str],
    dry_run: bool,
    promotion_candidates: int = 0,
    said_before: Set[Path] = frozenset(),
) -> str:
    """The report: each dir's pass, housekeeping, then the counts, last, so that they stay on
    screen. `said_before`: dirs (real paths) whose reason for being unmanaged an earlier run
    said; their header says where to read it again instead."""
    lines: list[str] = []
    title = (
        "Dream report (dry run: nothing was written; counts are what a pass would do)"
        if dry_run
        else "Dream report"
    )
    lines += [title, "=" * len(title), ""]
    # Dirs with nothing to say are counted in one line below (thirty "nothing to move" lines
    # hide the few that matter); a lone one is shown as it is.
    collapsed = {id(r) for r in results if _nothing_to_say(r)}
    if len(collapsed) < 2:
        collapsed = set()
    for result in results:
        if id(result) not in collapsed:
            lines += _dir_lines(result, dry_run, said_before)
            lines.append("")
    if collapsed:
        lines += [f"Nothing to move in {len(collapsed)} more dirs (--json lists every dir).", ""]
    if housekeeping:
        lines += ["Housekeeping:"]
        lines += [f"  {h}" for h in housekeeping]
        lines.append("")
    # The counts last, so that they stay on screen.
    t = totals(results, promotion_candidates)
    lines += ["Would do:" if dry_run else "Totals:"]
    lines += [f"  {label:<26}{t.get(key, 0):>7}" for key, label in COUNT_LABELS]
    return "\n".join(lines) + "\n"


def _dir_lines(result: DreamResult, dry_run: bool, said_before: Set[Path]) -> list[str]:
    """One dir's part of the report: its header, its plan or what it did, what it flagged."""
    header = f"{dir_label(result.dir)} ({shown(result.dir.path)}): {status_text(result)}"
    if (
        result.status == "unmanaged"
        and result.dir.real_path in said_before
        and MARK not in result.message  # a merge to finish is said every time
    ):
        header += f" (why: memoryd dirs {shown(result.dir.path)})"
    elif result.message:
        header += f" — {result.message}"
    lines = [header]
    if result.repo_note:
        lines.append(f"  note: {result.repo_note}")
    return lines + _plan_lines(result, dry_run) + _moved_lines(result) + _flag_lines(result)


def _plan_lines(result: DreamResult, dry_run: bool) -> list[str]:
    """The moves a pass planned and did not make (a dry run, a refused or unmanaged dir)."""
    plan = result.plan
    if plan is None:
        return []
    lines: list[str] = []

    def listed(move: Move) -> str:
        detail = move_detail(result, move.filename, move.reason, move.detail)
        return f"    {shown(move.filename)}: {move.reason} — {detail}"

    if dry_run and plan.moves and result.status == "dry_run":
        for move in plan.moves:
            target = move.duplicate_of or move.superseded_by
            extra = f" (kept: {target})" if target else ""
            detail = move_detail(result, move.filename, move.reason, move.detail)
            lines.append(
                f"  [DRY RUN] Would move: {shown(move.filename)} -> the trash — "
                f"{move.reason}: {detail}{extra}"
            )
    if result.status == "refused":
        if dry_run:
            lines.append("  Plan (not applied; a pass without --dry-run keeps it to apply):")
        else:
            lines.append(
                "  Plan (not applied; after review, apply it with "
                f"`memoryd dream {shown(result.dir.path)} --apply {result.pass_id}`):"
            )
        lines += [listed(move) for move in plan.moves]
    if result.status == "unmanaged" and plan.moves:
        lines.append("  Would move, if memoryd managed this index (nothing is moved):")
        lines += [listed(move) for move in plan.moves]
    return lines


def _moved_lines(result: DreamResult) -> list[str]:
    """The moves a pass made, and those it could not."""
    lines: list[str] = []
    if result.moved:
        lines.append("  Changes made:")
        for r in result.moved:
            detail = move_detail(
                result, r.original_name, r.reason, str(r.details.get("detail", ""))
            )
            lines.append(
                f"    {shown(r.original_name)}: moved to "
                f"{shown(stored_label(result.dir.real_path, r.day, r.stored_name))} — "
                f"{r.reason}: {detail} "
                f"(restore: memoryd trash restore {r.id})"
            )
    for name, why in result.skipped_moves:
        kept = result.kept_as.get(name)
        where = f"; kept as {shown(kept)} (a new {shown(name)} took its name)" if kept else ""
        lines.append(f"    {shown(name)}: not moved — {why}{where}")
    return lines


def _flag_lines(result: DreamResult) -> list[str]:
    """What a pass flagged for review, and what it kept out of consideration."""
    lines: list[str] = []
    if result.flags_listed:
        lines.append("  Flagged for review (memoryd ack FILE once seen):")
        for flag in result.flags_listed:
            guard = f"; kept by guard {flag.guard}" if flag.guard else ""
            lines.append(
                f"    {shown(flag.filename)}: {flag.classification.value.replace('_', ' ')}"
                f", missing: {missing_text(result, flag.filename, flag.missing)}{guard}"
            )
    if result.acknowledged:
        n = len(result.acknowledged)
        lines.append(
            f"  {n} flagged {'memory' if n == 1 else 'memories'} acknowledged already, not "
            "listed (memoryd explain FILE shows them)"
        )
    if result.dangling:
        lines.append("  Dangling links (a [[name]] no memory of the dir answers to):")
        for link in result.dangling:
            lines.append(f"    {shown(link.file)}: [[{shown(link.link)}]] — {link.why}")
    if result.secrets:
        lines.append("  Secrets (flagged, never moved: take them out of the memory by hand):")
        for name, found in sorted(result.secrets.items()):
            lines.append(f"    {shown(name)}: {secret_summary(found)}")
    for name in result.unparseable:
        if name in result.merge_conflicts:
            lines.append(f"  {shown(name)} {conflict_message_short()}: {CONFLICT_HINT}")
        else:
            lines.append(f"  unparseable (kept, not considered): {shown(name)}")
    for name in result.conflicts:
        lines.append(f"  sync conflict copy (reported, never consolidated): {shown(name)}")
    return lines
