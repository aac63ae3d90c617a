"""`memoryd explain FILE`: every fact and rule the dream pass would apply to one memory."""

from pathlib import Path
from typing import Any

from memoryd.discover import MemoryDir, memory_dir_of
from memoryd.display import shown
from memoryd.dream.plan import Item, guards_for, opposing, pair_kind, plan_pass
from memoryd.dream.refs import RefCheck, Scope, Status
from memoryd.dream.repo import RepoIndex
from memoryd.dream.run import (
    Listing,
    RepoCache,
    consult_map,
    consult_sources,
    inventory,
    probe_ownership,
    restored_pins,
    thresholds,
)
from memoryd.dream.similar import overlap
from memoryd.errors import MemorydError
from memoryd.indexing.scan import DirScan, skip_reason
from memoryd.indexing.window import agent_sees
from memoryd.runtime import Runtime


def explain(
    rt: Runtime, file: Path, repos: RepoCache, repo_root: Path | None = None
) -> dict[str, Any]:
    file = file.expanduser().absolute()
    if file.is_symlink():
        raise MemorydError(
            f"{file}: a symlink, which memoryd never follows (name the file it points to)"
        )
    if not file.exists():
        raise MemorydError(f"{file}: no such file (name a *.md file in a memory dir)")
    if not file.is_file():
        raise MemorydError(
            f"{file}: not a regular file (a folder, a FIFO or a device): memoryd never opens it"
        )
    md: MemoryDir = memory_dir_of(file, rt.config)
    if repo_root is not None:
        from dataclasses import replace

        md = replace(md, repo_root=repo_root, repo_reason="given with --repo-root")
    ownership, scan = probe_ownership(rt, md)
    managed = bool(ownership and ownership.managed)
    with rt.store.reading(md.real_path):
        listing = Listing.of(scan) if scan is not None else None
        checker = repos.checker(md.repo_root)
        inv = inventory(md, rt, checker, listing=listing)
    by_name = {i.filename: i for i in inv.items}
    item = by_name.get(file.name)
    if item is None:
        raise MemorydError(f"{file}: {_why_not_a_memory(file.name, scan)}")
    now = rt.clock()
    t = thresholds(rt)
    since = now - rt.config.dream.consult_window
    consults = consult_map(inv.items, consult_sources(md, rt, save=False), since)
    pins = restored_pins(rt, md, inv)
    pin = pins.get(item.filename)
    plan = plan_pass(inv.items, now, t, consults, pins)
    move = next((m for m in plan.moves if m.filename == item.filename), None)
    similar = []
    for other in inv.items:
        if other.filename == item.filename or other.agent_type != item.agent_type:
            continue
        score = overlap(item.words, other.words)
        if score >= t.contradiction:
            similar.append(
                {
                    "file": other.filename,
                    "overlap": round(score, 3),
                    "kind": pair_kind(item, other, score, t),
                    "opposing_directives": sorted(opposing(item, other)),
                    "newer": other.filename
                    if (other.age_ts, other.filename) > (item.age_ts, item.filename)
                    else item.filename,
                }
            )
    similar.sort(key=lambda s: (-float(str(s["overlap"])), str(s["file"])))
    if move is not None and not managed:
        decision = (
            f"keep — it would move ({move.reason}: {move.detail}), but memoryd does not manage "
            "this dir's index, so the pass moves nothing"
        )
    elif move is not None and plan.refused:
        decision = "would move, but the circuit breaker refused the pass"
    elif move is not None:
        decision = f"move to trash — {move.reason}: {move.detail}"
    else:
        flag = next((f for f in plan.flagged if f.filename == item.filename), None)
        if pin is not None:
            decision = f"keep — {pin}"
        elif flag and flag.guard:
            decision = f"keep — fully stale, but guard {flag.guard} holds"
        elif flag:
            decision = "keep — partially stale: flagged for review"
        else:
            decision = "keep"
    return {
        "file": str(file),
        "dir": str(md.path),
        "repo_root": str(md.repo_root) if md.repo_root else None,
        "repo_reason": md.repo_reason,
        # The type as the agent reads it (pairing goes by it); the guards' reading beside it.
        "type": item.agent_type or None,
        "guard_type": item.type or None,
        "refs": [
            {
                "ref": c.ref,
                "kind": c.kind,
                "scope": c.scope.value,
                "status": c.status.value,
                **({"moved_to": c.moved_to} if c.moved_to else {}),
                **_where(c, checker.repo),
            }
            for c in item.checks
        ],
        "classification": item.classification.value,
        "guards": [
            {"guard": g.name, "holds": g.holds, "detail": g.detail}
            for g in guards_for(item, now, t, consults.get(item.filename), pin)
        ],
        "restored": pin,
        "acknowledged": _acknowledged(rt, md, item),
        "consult": consults.get(item.filename),
        "similar": similar,
        "decision": decision,
        "breaker": plan.refused or None,
        "index": "managed" if managed else f"not managed: {ownership.reason if ownership else '?'}",
        "agent_sees": agent_sees(rt, md, item.filename),
        "secrets": [f.to_json() for f in inv.secrets.get(item.filename, [])],
        "history": _history(md, item.filename),
    }


def _acknowledged(rt: Runtime, md: MemoryDir, item: Item) -> str | None:
    """What a person's `memoryd ack` of the memory says now (memoryd.acked), or None."""
    from memoryd import acked

    ack = next((a for a in acked.load(rt.store, md.real_path) if a.file == item.filename), None)
    if ack is None:
        return None
    if acked.holds(ack, item):
        return ack.detail
    return (
        f"acknowledged by a person on {ack.time[:10]}, but it changed since (its bytes or its "
        "references' status): listed for review again"
    )


def _history(md: MemoryDir, name: str) -> list[dict[str, Any]]:
    """What this memory superseded and what superseded it (memoryd.lineage), from the trash."""
    from memoryd import lineage, trash

    try:
        entries = trash.contents(md.real_path).entries
    except MemorydError:
        return []
    return [link.to_json() for link in lineage.history(name, entries).entries]


def _where(check: RefCheck, repo: RepoIndex | None) -> dict[str, str]:
    """Where a found symbol was seen (a repo file), and why a path inside a memory dir was not
    checked, for a person to judge the evidence."""
    if repo is None:
        return {}
    if check.kind == "symbol" and check.status is Status.FOUND:
        found_in = repo.token_file(check.ref)
        return {"found_in": found_in} if found_in else {}
    if check.kind == "path" and check.scope is Scope.UNVERIFIABLE and repo.in_memory_dir(check.ref):
        return {"note": "in a memory dir, a trash or .claude/logs: no evidence of code"}
    return {}


def _why_not_a_memory(name: str, scan: DirScan | None) -> str:
    found = scan.files.get(name) if scan else None
    if found is not None and found.kind == "problem":
        return f"memoryd cannot use it as a memory: {found.problem_message} ({found.problem_hint})"
    if found is not None and found.kind == "note":
        return (
            "it has no frontmatter (name, description, type), so it is a note, not a memory; "
            "memoryd leaves it alone"
        )
    reason = skip_reason(name)
    if reason is not None:
        return f"memoryd skips this name ({reason}): it is never a memory"
    return "memoryd cannot use this file as a memory"


def _guard_reading(data: dict[str, Any]) -> str:
    if data.get("guard_type") == data["type"]:
        return ""
    return (
        f" (as Claude Code reads it); the guards take the protective reading: "
        f"{data.get('guard_type') or 'none'}"
    )


def render(data: dict[str, Any]) -> str:
    """The explanation for a person, one fact a line; each line `shown` (names, paths and
    references come from files anyone may have written)."""
    lines = [
        f"{data['file']}",
        f"  dir: {data['dir']}",
        f"  repo root: {data['repo_root'] or 'none'} ({data['repo_reason']})",
        f"  type: {data['type'] or 'none'}" + _guard_reading(data),
        "  references:",
    ]
    if not data["refs"]:
        lines.append("    (none)")
    for ref in data["refs"]:
        moved = f" -> {ref['moved_to']}" if ref.get("moved_to") else ""
        where = f" in {ref['found_in']}" if ref.get("found_in") else ""
        where += f" ({ref['note']})" if ref.get("note") else ""
        lines.append(
            f"    {ref['kind']:<6} {ref['ref']}: {ref['scope']}, {ref['status']}{moved}{where}"
        )
    lines.append(f"  classification: {data['classification']}")
    lines.append("  guards:")
    for guard in data["guards"]:
        mark = "holds" if guard["holds"] else "no"
        lines.append(f"    {guard['guard']:<28}{mark:<7}{guard['detail']}")
    if data.get("restored"):
        lines.append(f"  restored: {data['restored']}")
    if data.get("acknowledged"):
        lines.append(f"  acknowledged: {data['acknowledged']}")
    lines.append(f"  consulted: {data['consult'] or 'no evidence in the window'}")
    lines.append("  similar memories (same type):")
    if not data["similar"]:
        lines.append("    (none at or above the contradiction threshold)")
    for s in data["similar"]:
        opp = (
            f"; opposing on {', '.join(s['opposing_directives'])}"
            if s["opposing_directives"]
            else ""
        )
        lines.append(
            f"    {s['file']}: overlap {s['overlap']:.2f}, {s['kind']}, newer: {s['newer']}{opp}"
        )
    for found in data.get("secrets", []):
        lines.append(
            f"  secret: line {found['line']}: {found['kind']} (flagged, never moved; take it "
            "out of the memory by hand)"
        )
    for link in data.get("history", []):
        verb = "lost to" if link["kind"] == "superseded_by" else "won over"
        a, b = (
            (link["loser"], link["winner"])
            if link["kind"] == "superseded_by"
            else (link["winner"], link["loser"])
        )
        back = f"; restored as {link['restored_as']}" if link["restored_as"] else ""
        lines.append(
            f"  history: {a} {verb} {b} on {link['day']} ({link['reason']}, pass "
            f"{link['pass_id']}){back}"
        )
    lines.append(f"  index: {data['index']}")
    lines.append(f"  agent's view: {data['agent_sees']}")
    lines.append(f"  decision: {data['decision']}")
    if data["breaker"]:
        lines.append(f"  circuit breaker: {data['breaker']}")
    return "".join(f"{shown(line)}\n" for line in lines)  # each a line, whatever it names
