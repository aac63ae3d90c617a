"""`memoryd explain FILE`: every fact and rule the dream pass would apply to one memory."""

from dataclasses import replace
from pathlib import Path
from typing import Any

from memoryd.config import DreamConfig
from memoryd.discover.finder import memory_dir_of
from memoryd.discover.found import MemoryDir
from memoryd.dream.inventory import scan_of
from memoryd.dream.kinds import FlagKind
from memoryd.dream.plan import Item, guards_for, newer, opposing, pair_kind
from memoryd.dream.read import Reading, read_and_plan
from memoryd.dream.refs import RefCheck, Scope, Status
from memoryd.dream.repo import RepoIndex
from memoryd.dream.repocache import RepoCache
from memoryd.errors import MemorydError
from memoryd.indexing.scan import skip_reason
from memoryd.indexing.window import agent_sees
from memoryd.model.display import shown
from memoryd.runtime import Runtime


def explain(
    rt: Runtime, file: Path, repos: RepoCache, repo_root: Path | None = None
) -> dict[str, Any]:
    file = _checked(file)
    md: MemoryDir = memory_dir_of(file, rt.config)
    if repo_root is not None:
        md = replace(md, repo_root=repo_root, repo_reason="given with --repo-root")
    reading = read_and_plan(rt, md, repos)
    item = reading.plan.items.get(file.name)
    if item is None:
        raise MemorydError(f"{file}: {_why_not_a_memory(rt, md, file.name)}")
    t, consult = rt.config.dream, reading.consults.get(item.filename)
    ownership = reading.ownership
    return {
        "file": str(file),
        "dir": str(md.path),
        "repo_root": str(md.repo_root) if md.repo_root else None,
        "repo_reason": md.repo_reason,
        # The type as the agent reads it (pairing goes by it); the guards' reading beside it.
        "type": item.agent_type or None,
        "guard_type": item.type or None,
        "refs": [_ref(c, reading.checker.repo) for c in item.checks],
        "classification": item.classification.value,
        "guards": [
            {"guard": g.name, "holds": g.holds, "detail": g.detail}
            for g in guards_for(item, reading.now, t, consult, reading.pins.get(item.filename))
        ],
        "restored": reading.pins.get(item.filename),
        "acknowledged": _acknowledged(rt, md, item),
        "consult": consult,
        "similar": _similar(item, reading, t),
        "decision": _decision(item, reading),
        "breaker": reading.plan.refused or None,
        "index": "managed"
        if reading.managed
        else f"not managed: {ownership.reason if ownership else '?'}",
        "agent_sees": agent_sees(rt, md, item.filename),
        "secrets": [f.to_json() for f in reading.inv.secrets.get(item.filename, [])],
        "history": _history(md, item.filename),
    }


def _checked(file: Path) -> Path:
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
    return file


def _ref(c: RefCheck, repo: RepoIndex | None) -> dict[str, Any]:
    return {
        "ref": c.ref,
        "kind": c.kind,
        "scope": c.scope.value,
        "status": c.status.value,
        **({"moved_to": c.moved_to} if c.moved_to else {}),
        **_where(c, repo),
    }


def _similar(item: Item, reading: Reading, t: DreamConfig) -> list[dict[str, Any]]:
    """The memories the pass paired with it (same type, at least the contradiction threshold)."""
    similar = []
    for a, b, score in reading.plan.similar:
        if item.filename in (a, b):
            other = reading.plan.items[b if a == item.filename else a]
            similar.append(
                {
                    "file": other.filename,
                    "overlap": round(score, 3),
                    "kind": pair_kind(item, other, score, t),
                    "opposing_directives": sorted(opposing(item, other)),
                    "newer": other.filename if newer(other, item) else item.filename,
                }
            )
    similar.sort(key=lambda s: (-float(str(s["overlap"])), str(s["file"])))
    return similar


def _decision(item: Item, reading: Reading) -> str:
    plan = reading.plan
    move = next((m for m in plan.moves if m.filename == item.filename), None)
    if move is not None and not reading.managed:
        return (
            f"keep — it would move ({move.reason}: {move.detail}), but memoryd does not manage "
            "this dir's index, so the pass moves nothing"
        )
    if move is not None and plan.refused:
        return "would move, but the circuit breaker refused the pass"
    if move is not None:
        return f"move to trash — {move.reason}: {move.detail}"
    flag = next((f for f in plan.flagged if f.filename == item.filename), None)
    pin = reading.pins.get(item.filename)
    if pin is not None:
        return f"keep — {pin}"
    if flag is None:
        return "keep"
    if flag.kind is FlagKind.KEPT_BY_GUARD:
        return f"keep — fully stale, but guard {flag.guard} holds"
    return "keep — partially stale: flagged for review"


def _acknowledged(rt: Runtime, md: MemoryDir, item: Item) -> str | None:
    """What a person's `memoryd ack` of the memory says now (memoryd.dream.acked), or None."""
    from memoryd.dream import acked

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
    """What this memory superseded and what superseded it (memoryd.trash.lineage), from the
    trash."""
    from memoryd.trash import lineage
    from memoryd.trash import manifest as trash

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


def _why_not_a_memory(rt: Runtime, md: MemoryDir, name: str) -> str:
    # The pass keeps only names of its scan: the file's own reading is taken again (from
    # the scan cache, by its stat) to say why it is no memory.
    found = scan_of(rt, md).files.get(name)
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


def render(data: dict[str, Any]) -> str:
    """The explanation for a person, one fact a line; each line `shown` (names, paths and
    references come from files anyone may have written)."""
    type_line = f"  type: {data['type'] or 'none'}"
    if (guard_type := data.get("guard_type")) != data["type"]:
        type_line += " (as Claude Code reads it); the guards take the protective reading: "
        type_line += guard_type or "none"
    lines = [
        f"{data['file']}",
        f"  dir: {data['dir']}",
        f"  repo root: {data['repo_root'] or 'none'} ({data['repo_reason']})",
        type_line,
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
        opp = f"; opposing on {', '.join(o)}" if (o := s["opposing_directives"]) else ""
        lines.append(
            f"    {s['file']}: overlap {s['overlap']:.2f}, {s['kind']}, newer: {s['newer']}{opp}"
        )
    for found in data.get("secrets", []):
        lines.append(
            f"  secret: line {found['line']}: {found['kind']} (flagged, never moved; take it "
            "out of the memory by hand)"
        )
    for link in data.get("history", []):
        lost = link["kind"] == "superseded_by"
        a, b = (link["loser"], link["winner"]) if lost else (link["winner"], link["loser"])
        verb = "lost to" if lost else "won over"
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
