"""The report half of a dream pass: the audit rows it writes (each said once where a rerun
would repeat it, DESIGN §2.6) and the dir state it leaves for the next pass and `status`.
The rows carry names and counts, never the words of a memory (DESIGN §2.8)."""

import contextlib
import re
from typing import Any

from memoryd.discover.found import MemoryDir
from memoryd.dream import refused
from memoryd.dream.inventory import Inventory
from memoryd.dream.kinds import MoveReason, PassStatus
from memoryd.dream.plan import Move, Plan
from memoryd.dream.read import Reading
from memoryd.dream.result import DreamResult
from memoryd.runtime import Runtime
from memoryd.storage.state import DirState


def started(rt: Runtime, md: MemoryDir, pass_id: str, trigger: str) -> None:
    # A command's pass is at debug level: a rerun that finds nothing to do leaves no row
    # above debug (DESIGN §2.6); a pass the daemon starts on its own is news.
    rt.audit.write(
        "dream.started",
        dir=md.path,
        pass_id=pass_id,
        trigger=trigger,
        level="debug" if trigger == "command" else "info",
    )


def said_of_plan(rt: Runtime, result: DreamResult, reading: Reading, said: DirState) -> None:
    """The rows of what the plan decided: the memories a guard kept, the secrets found, why
    nothing moves (`result.status`: unmanaged, refused; a refused plan is kept for `dream
    --apply`). What was already said is in `said`, the dir's state the caller saves."""
    md, plan = result.dir, reading.plan
    for flag in plan.flagged:
        signature = f"{plan.items[flag.filename].sha256}:{flag.guard}"
        if flag.guard and said.report_once(f"dream:kept:{flag.filename}", signature):
            rt.audit.write(
                "dream.kept",
                dir=md.path,
                file=flag.filename,
                guard=flag.guard,
                reason="fully stale, kept by a guard",
                # A count, not the paths: they are memory text (DESIGN §2.8).
                missing=len(flag.missing),
            )
    report_secrets(rt, md, said, reading.inv)
    if result.status is PassStatus.UNMANAGED:
        # As an index pass says it (DESIGN §3: once, with the reason).
        reason = reading.why_unmanaged
        if said.report_once("unmanaged", re.sub(r"\d+", "N", reason)):
            rt.audit.write("index.unmanaged", dir=md.path, reason=reason)
    elif result.status is PassStatus.REFUSED:
        refused.save(rt.paths.state_dir, md.real_path, result.pass_id, plan)
        _said_refused(rt, result.pass_id, md, plan, said)


def _said_refused(rt: Runtime, pass_id: str, md: MemoryDir, plan: Plan, said: DirState) -> None:
    signature = ",".join(f"{m.filename}:{m.sha256[:12]}" for m in plan.moves)
    if not said.report_once("dream:refused", signature):
        return
    rt.audit.write(
        "dream.refused",
        dir=md.path,
        pass_id=pass_id,
        would_move=len(plan.moves),
        limit=plan.limit,
        plan=[
            {"file": m.filename, "reason": m.reason, "detail": _logged_detail(m, plan)}
            for m in plan.moves
        ],
    )
    for move in plan.moves:
        rt.audit.write("dream.move_skipped", dir=md.path, file=move.filename, why="circuit breaker")


def completed(rt: Runtime, result: DreamResult, trigger: str, now: float) -> None:
    """`dream.completed`, and the dir state's record of the pass."""
    md = result.dir
    # A pass the daemon started, or one that moved, is news; a quiet rerun is not (DESIGN §2.6).
    acted = bool(result.moved or result.skipped_moves) or trigger != "command"
    rt.audit.write(
        "dream.completed",
        dir=md.path,
        level="info" if acted else "debug",
        pass_id=result.pass_id,
        status=result.status,
        **summary(result),
    )
    state = rt.store.load(md.real_path)
    state.last_dream_ts = now
    state.last_dream_result = result.status
    state.last_dream_flagged = result.counts()["flagged"]
    state.changed_since_dream = []
    rt.store.save(md.real_path, state)


def failed(rt: Runtime, result: DreamResult, now: float, *, counted: bool) -> None:
    """`dream.failed`; `counted` (stopped by a time budget) also records the pass, so that the
    daemon waits `dream.min_interval` before spending the budget again."""
    md = result.dir
    rt.audit.write("dream.failed", dir=md.path, error=result.message, **summary(result))
    if counted:
        state = rt.store.load(md.real_path)
        state.last_dream_ts, state.last_dream_result = now, result.status
        rt.store.save(md.real_path, state)


def report_secrets(rt: Runtime, md: MemoryDir, said: DirState, inv: Inventory) -> None:
    """`memory.secret_found` for each secret (file, line, kind: never the value), once per
    file version."""
    sha = {i.filename: i.sha256 for i in inv.items} | inv.other_shas
    current = set()
    for name, found in sorted(inv.secrets.items()):
        key = f"secret:{name}"
        current.add(key)
        if said.report_once(key, sha.get(name, "?")):
            for finding in found:
                rt.audit.write(
                    "memory.secret_found", dir=md.path, file=name, line=finding.line,
                    kind=finding.kind,
                )  # fmt: skip
    said.forget_reports("secret:", current)
    # Only the files the pass found one in, or could not read as memories, may hold one now.
    _purge_cleaned(rt, md, {*inv.secrets, *inv.unparseable, *inv.conflicts})


def _purge_cleaned(rt: Runtime, md: MemoryDir, holding: set[str]) -> None:
    """Remove the kept versions holding a secret no current file holds (taken out by hand),
    each with a `versions.purged` row (memoryd.versions.purge; versions with none are noted in
    the dream memo). `holding`: the only files that may hold one now (read for fingerprints)."""
    from memoryd.versions import kept, purge

    store = rt.versions or kept.for_runtime(rt)
    with contextlib.suppress(OSError):
        purge.purge_gone_secrets(
            store, md.real_path, rt.audit.write, clean=rt.dream.secretless, holding=holding
        )


def _logged_detail(move: Move, plan: Plan) -> str:
    """A move's detail for the audit log: names and counts, never the body's words (§2.8)."""
    if move.reason is MoveReason.STALE:
        return f"all {len(plan.items[move.filename].missing)} paths it names are gone"
    if move.superseded_by:
        return f"the newer {move.superseded_by} says the opposite"
    return move.detail  # a duplicate: an overlap and the newer file's name


def summary(result: DreamResult) -> dict[str, Any]:
    c = result.counts()
    return {
        "saved": c["surviving"],
        "deleted": len(result.moved),
        "flagged": c["flagged"],
        "kept": c["kept_by_guard"],
        "duration_ms": result.duration_ms,
    }
