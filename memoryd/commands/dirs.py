"""`memoryd dirs [DIR …]`: every memory dir as a table, or one dir's detail, and the JSONL record
stores memoryd knows, validated."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import (
    EXIT_OK,
    auto_memory_off_line,
    color_arg,
    dirs_arg,
    discovery_json,
    painter,
    render_discovery,
    write_json,
)
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.discover.found import Discovery, MemoryDir
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dirs",
        description="List every memory dir memoryd finds as a table (name, kind, mode, "
        "memories, index lines and window use, flagged, last pass); with DIR, the detail: "
        "repo root (or why none), why the index is managed or not, unparseable files, "
        "index lines and budget use.",
    )
    dirs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    color_arg(p)
    p.add_argument(
        "--secrets",
        action="store_true",
        help="list each secret a memory holds (file, line, kind; never the value)",
    )


def _dir_summary(rt: Runtime, md: MemoryDir) -> dict[str, Any]:
    from memoryd.discipline import findings
    from memoryd.indexing import passes
    from memoryd.indexing.read import read_index_file, view_kind
    from memoryd.indexing.window import budget_use
    from memoryd.model.index import INDEX_NAME
    from memoryd.storage import fsops

    outcome = passes.check(rt, md)
    scan = outcome.scan
    with fsops.open_dir(md.real_path) as fd:
        main_text = read_index_file(fd, INDEX_NAME, rt.versions).text
    return {
        "path": str(md.path),
        "real_path": str(md.real_path),
        "via_symlink": md.via_symlink,
        "kind": md.kind,
        "label": md.label,
        "repo_root": str(md.repo_root) if md.repo_root else None,
        "repo_reason": md.repo_reason,
        "not_loaded": md.not_loaded,
        "mode": "managed" if outcome.ownership and outcome.ownership.managed else "unmanaged",
        "mode_reason": outcome.ownership.reason if outcome.ownership else "",
        "memory_files": len(scan.memories) if scan else 0,
        "unparseable": sorted(scan.problems) if scan else [],
        "problems": [
            {
                "file": name,
                "kind": found.problem_kind,
                "problem": found.problem_message,
                "hint": found.problem_hint,
            }
            for name, found in sorted(scan.problems.items())
        ]
        if scan
        else [],
        "notes": sorted(n for n, s in scan.files.items() if s.kind == "note") if scan else [],
        "conflict_copies": scan.conflicts if scan else [],
        "secrets": [
            {"file": name, **f.to_json()}
            for name, found in sorted(
                findings.dir_secrets(rt, md, findings.secret_names(scan)).items()
            )
            for f in found
        ],
        "dangling_links": [d.to_json() for d in findings.dir_dangling_links(rt, md, scan)]
        if scan
        else [],
        "index": budget_use(main_text, rt, view_kind(md)) if main_text is not None else None,
        "in_sync": outcome.status in ("unchanged", "unmanaged"),
        "drift": _git_drift(rt, md, outcome),
        **_dir_history(rt, md),
        **_claude_lock_json(md, rt),
    }


def _git_drift(rt: Runtime, md: MemoryDir, outcome: Any) -> dict[str, int] | None:
    """For a dir left alone because git tracks it, what `memoryd index DIR` would change."""
    from memoryd.discover import gitwork
    from memoryd.indexing import passes

    reason = outcome.ownership.reason if outcome.ownership else ""
    if outcome.status != "unmanaged" or not reason.startswith(gitwork.TRACKED):
        return None
    named = passes.check(replace(rt, named=(md.real_path,)), md)
    edit = named.edit
    if named.status != "would_change" or edit is None:
        return {"added": 0, "removed": 0, "demoted": 0}
    return {"added": len(edit.added), "removed": len(edit.removed), "demoted": len(edit.demoted)}


def _drift_text(drift: dict[str, int], path: str) -> str:
    if not any(drift.values()):
        return "drift: none (MEMORY.md is in step with the files)"
    parts = [
        f"{drift[key]} {word}"
        for key, word in (("added", "to add"), ("removed", "to remove"), ("demoted", "to archive"))
        if drift[key]
    ]
    return f"drift: pointers {', '.join(parts)} (`memoryd index {shown(path)}` writes them)"


def _iso(ts: float) -> str | None:
    from datetime import UTC, datetime

    if not ts:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _dir_history(rt: Runtime, md: MemoryDir) -> dict[str, Any]:
    """Its label, and memoryd's last passes as the dir's state says (UTC)."""
    from memoryd.discover.dirlabel import label

    state = rt.store.load(md.real_path)
    return {
        "name": label(md),
        "flagged": state.last_dream_flagged if state.last_dream_flagged >= 0 else None,
        "last_pass": _iso(state.last_dream_ts),
        "last_pass_result": state.last_dream_result or None,
        "last_index_write": _iso(state.last_index_ts),
    }


def _claude_lock_json(md: MemoryDir, rt: Runtime) -> dict[str, Any]:
    """When Claude Code last consolidated the dir (its `.consolidate-lock`'s mtime), and
    whether it holds the lock now."""
    from datetime import datetime

    from memoryd.discover.locks import claude_lock

    lock = claude_lock(md, rt.clock())
    when = datetime.fromtimestamp(lock.mtime).astimezone() if lock else None
    return {
        "claude_consolidated": when.isoformat(timespec="seconds") if when else None,
        "claude_lock_held": bool(lock and lock.held),
    }


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.discipline import findings
    from memoryd.discover.finder import discover_all
    from memoryd.discover.found import Discovery

    named = [p for p in args.dirs if not findings.is_store_file(p)]
    found = discover_all(rt.config, named) if named or not args.dirs else Discovery([], [])
    rows = [_dir_summary(rt, md) for md in found.dirs]
    stores = store_reports(rt, found.dirs, args.dirs)
    if args.json:
        _dump_json(rt, found, rows, stores, out)
        return EXIT_OK
    out.write("".join(f"warning: {shown(w)}\n" for w in found.warnings))
    if found.auto_memory_off:
        out.write(auto_memory_off_line(found.auto_memory_off))
    out.write(render_discovery(found))
    render_stores(stores, out)
    if not rows and (found.empty_repos or stores):
        return EXIT_OK
    if not rows:
        home = rt.config.paths.claude_home
        note = "" if home.exists() else " (it does not exist yet)"
        out.write(f"No memory dirs found under {home}{note}.\n")
        return EXIT_OK
    if not args.dirs:
        out.write(_table(args, rows, out))
        return EXIT_OK
    for row in rows:
        out.write(_detail(row, args.secrets))
    return EXIT_OK


def _dump_json(
    rt: Runtime,
    found: Discovery,
    rows: list[dict[str, Any]],
    stores: list[dict[str, Any]],
    out: TextIO,
) -> None:
    doc = {
        "claude_home": str(rt.config.paths.claude_home),
        "auto_memory_off": found.auto_memory_off,
        "warnings": found.warnings,
        "dirs": rows,
        **discovery_json(found),
        "record_stores": stores,
    }
    write_json(out, doc)


def _table(args: argparse.Namespace, rows: list[dict[str, Any]], out: TextIO) -> str:
    """Every dir, one row each (memoryd.views.dirs), and their secrets with --secrets."""
    import os
    import time

    from memoryd.model.humanize import terminal_width
    from memoryd.views.dirs import render

    text = render(rows, time.time(), terminal_width(out, os.environ), painter(args, out))
    return text + (_render_secrets(rows) if args.secrets else "")


def _detail(row: dict[str, Any], secrets: bool) -> str:
    """One named dir's detail: where it is, its index's mode and drift, what it holds."""
    link = f" (via symlink {row['path']})" if row["via_symlink"] else ""
    lines = [f"{shown(row['real_path'])}{shown(link)}\n"]
    lines.append(f"  kind: {row['kind']}  index: {row['mode']} — {row['mode_reason']}\n")
    if row["drift"] is not None:
        lines.append(f"  {_drift_text(row['drift'], row['real_path'])}\n")
    root = row["repo_root"] or "none"
    lines.append(f"  repo root: {shown(root)} ({shown(row['repo_reason'])})\n")
    if row["not_loaded"]:
        lines.append(f"  not loaded by the agent: {shown(row['not_loaded'])}\n")
    lines.append(_counts(row))
    if secrets:
        lines.append(_render_secrets([row], indent="    ", where=False))
    for problem in row["problems"]:
        lines.append(f"    {shown(problem['file'])}: {problem['problem']} — {problem['hint']}\n")
    for link in row["dangling_links"]:
        linked = f"{shown(link['file'])}: [[{shown(link['link'])}]]"
        lines.append(f"  dangling link: {linked} — {link['why']}\n")
    if row["claude_consolidated"]:
        now = " (it holds its lock now)" if row["claude_lock_held"] else ""
        lines.append(f"  Claude Code's last consolidation: {row['claude_consolidated']}{now}\n")
    return "".join(lines) + _index_lines(row)


def _counts(row: dict[str, Any]) -> str:
    text = f"  memory files: {row['memory_files']}"
    if row["unparseable"]:
        text += f"  unparseable: {len(row['unparseable'])}"
    if row["notes"]:
        text += f"  other markdown: {len(row['notes'])}"
    if row["secrets"]:
        files = len({s["file"] for s in row["secrets"]})
        text += f"  secrets: {len(row['secrets'])} in {files} file(s)"
    return text + "\n"


def _index_lines(row: dict[str, Any]) -> str:
    idx = row["index"]
    if idx is None:
        return "  MEMORY.md: missing\n"
    text = (
        f"  MEMORY.md: {idx['lines']}/{idx['max_lines']} lines, "
        f"{idx['chars']}/{idx['max_chars']} chars, {idx['bytes']}/"
        f"{idx['target_bytes']} bytes target"
        f"{'' if row['in_sync'] else ' — out of step (run memoryd index)'}\n"
    )
    if idx["hidden_pointers"]:
        why = ", ".join(f"{n} {reason}" for reason, n in idx["hidden_pointers"].items())
        text += f"  pointers the agent does not see: {why}\n"
    return text


def store_reports(rt: Runtime, dirs: list[MemoryDir], named: list[Path]) -> list[dict[str, Any]]:
    """Every known JSONL record store, validated (memoryd.discipline.records), as JSON rows."""
    from memoryd.discipline import findings

    files = findings.store_files(rt.config, dirs, named)
    if not files:
        return []
    from memoryd.discipline import records

    out = []
    for file in files:
        read = findings.read_store(file)
        row: dict[str, Any] = {"path": str(file.path), "origin": file.origin}
        if read.data is None:
            row["problem"] = read.problem
        else:
            store = records.parse(read.data, cut=read.cut)
            report = records.report(store, rt.clock(), rt.config.dream.duplicate_threshold)
            row.update(report.to_json())
            row["lines"] = records.render(report)
        out.append(row)
    return out


def _render_secrets(rows: list[dict[str, Any]], *, indent: str = "", where: bool = True) -> str:
    """Each secret a memory holds, as `file:line: kind` (never the value)."""
    lines = []
    for row in rows:
        base = f"{row['real_path']}/" if where else ""
        lines += [
            f"{indent}{shown(base + s['file'])}:{s['line']}: {s['kind']} "
            "(flagged, never moved; take it out by hand)\n"
            for s in row["secrets"]
        ]
    if where and lines:
        lines.insert(0, "\nSecrets in memories:\n")
    return "".join(lines)


def render_stores(stores: list[dict[str, Any]], out: TextIO) -> None:
    for row in stores:
        out.write(f"{shown(row['path'])}\n  kind: record store ({shown(row['origin'])})\n")
        if "problem" in row:
            out.write(f"  not read: {row['problem']}\n")
            continue
        for line in row["lines"]:
            out.write(f"  {shown(line)}\n")
