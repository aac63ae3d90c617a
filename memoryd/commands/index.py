"""`memoryd index [DIR …]`: bring each managed dir's MEMORY.md in step with its files (or, with
`--check`, say what would change), and say per dir what changed or why nothing did."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    dirs_arg,
    discover_named,
    discovery_json,
    recover,
    render_discovery,
    write_json,
)
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.indexing.outcome import IndexOutcome
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "index",
        description="Update each managed dir's MEMORY.md incrementally: add "
        "pointers for new memories, remove pointers of gone ones, keep every "
        "hand-written line, keep the index within the agent's load window.",
    )
    dirs_arg(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; print what would change as a unified diff and exit 1 "
        "if anything would",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every dir, those in sync too, and why each unmanaged one is",
    )
    # The post-write hook's pass: the dir is where the agent wrote, not a person's request to
    # write an index git tracks (gitwork.hands_off_reason), so it is not counted as named.
    p.add_argument("--not-named", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.discover.finder import discover_all
    from memoryd.indexing import passes

    if not args.check:
        recover(rt)
    # A dir git tracks is written when named (gitwork.hands_off_reason); --check says what
    # `index DIR` would do, changing nothing, not even the audit log.
    rt = replace(rt, named=() if args.not_named else tuple(args.dirs))
    found = discover_all(rt.config, args.dirs) if args.check else discover_named(rt, args.dirs)
    dirs = found.dirs
    # Why a dir is unmanaged is said once (as its `index.unmanaged` row is), not at every run:
    # the run that records it in the dir's state says it; `-v` and `dirs DIR` say it again.
    said = {md.real_path: rt.store.load(md.real_path).reported.get("unmanaged") for md in dirs}
    use_case = passes.check if args.check else passes.update
    outcomes = [use_case(rt, md) for md in dirs]
    # A dir left to the program writing its index is not in step either: a failed action.
    failed = any(o.status in ("error", "conflict", "settling") for o in outcomes)
    would = any(o.status == "would_change" for o in outcomes)
    if args.json:
        doc = {
            "dirs": [_outcome_json(o) for o in outcomes],
            **discovery_json(found),
        }
        write_json(out, doc)
    else:
        if not dirs and not found.empty_repos:
            out.write(f"No memory dirs found under {rt.config.paths.claude_home}.\n")
        quiet = {"in sync": 0, "unmanaged": 0}
        for o in outcomes:
            if not args.verbose and o.status == "unchanged" and _nothing_to_note(o):
                quiet["in sync"] += 1
                continue
            if not args.verbose and o.status == "unmanaged" and not args.check:
                now_said = rt.store.load(o.dir.real_path).reported.get("unmanaged")
                if now_said == said.get(o.dir.real_path):
                    quiet["unmanaged"] += 1
                    continue
            out.write(_render_outcome(o))
        out.write(render_discovery(found))
        out.write(_quiet_line(quiet))
    if failed or (args.check and would):
        return EXIT_FINDINGS
    return EXIT_OK


def _outcome_json(o: IndexOutcome) -> dict[str, Any]:
    edit = o.edit
    return {
        "dir": str(o.dir.path),
        "status": o.status,
        "managed": bool(o.ownership and o.ownership.managed),
        "reason": o.ownership.reason if o.ownership else "",
        "message": o.message,
        "added": edit.added if edit else [],
        "removed": edit.removed if edit else [],
        "rewritten": edit.rewritten if edit else [],
        "collapsed": edit.collapsed if edit else [],
        "demoted": edit.demoted if edit else [],
        "waiting": edit.waiting if edit else [],
        "dead_links": edit.dead_links if edit else [],
        "invalid_links": edit.invalid_links if edit else [],
        "problems": o.problems,
        "diff": o.diff,
    }


def _nothing_to_note(o: IndexOutcome) -> bool:
    """An in-sync dir with nothing to say (no dead link, no file in its grace, in the window)."""
    edit = o.edit
    return edit is None or not (
        edit.waiting or edit.dead_links or edit.invalid_links or not edit.fits_window
    )


def _quiet_line(quiet: dict[str, int]) -> str:
    """What `index` left unsaid, in one line: the dirs in sync, and the unmanaged ones whose
    reason was said before."""
    parts = []
    if quiet["in sync"]:
        parts.append(f"{quiet['in sync']} dir{'s' if quiet['in sync'] != 1 else ''} in sync")
    if quiet["unmanaged"]:
        parts.append(f"{quiet['unmanaged']} unmanaged, nothing changed")
    if not parts:
        return ""
    why = ", and says why a dir is unmanaged" if quiet["unmanaged"] else ""
    return f"{'; '.join(parts)} (-v lists them{why}).\n"


def _some(items: list[str], limit: int = 5) -> str:
    unique = sorted(set(items))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(map(shown, unique[:limit])) + more


def _render_outcome(o: IndexOutcome) -> str:
    """One dir's outcome for a person: its one label and path, messages, names and diff `shown`."""
    from memoryd.discover.dirlabel import label

    where, message = f"{label(o.dir)} ({shown(o.dir.path)})", shown(o.message)
    if o.status == "unmanaged":
        return f"{where}: unmanaged — {message} (nothing changed)\n"
    if o.status == "settling":
        return f"{where}: not updated — {message}\n"
    if o.status in ("error", "conflict"):
        details = "".join(f"    {shown(p)}\n" for p in o.problems)
        return f"{where}: FAILED — {message}\n{details}"
    edit = o.edit
    assert edit is not None
    parts = [
        f"{label} {len(items)}"
        for label, items in (
            ("added", edit.added),
            ("removed", edit.removed),
            ("rewritten", edit.rewritten),
            ("collapsed", edit.collapsed),
            ("demoted", edit.demoted),
        )
        if items
    ]
    notes = []
    if edit.waiting:
        notes.append(f"{len(edit.waiting)} new file(s) within their grace")
    if edit.dead_links:
        notes.append(f"dead links kept (no such file yet): {_some(edit.dead_links)}")
    if edit.invalid_links:
        notes.append(f"invalid links kept (never followed): {_some(edit.invalid_links)}")
    if not edit.fits_window:
        notes.append(
            "still over the agent's load window (hand-written content or recent "
            "entries cannot move)"
        )
    note = "".join(f"    {n}\n" for n in notes)
    if o.status == "would_change":
        diff = shown(o.diff, lines=True)
        return f"{where}: would change ({', '.join(parts) or 'trailer'})\n{note}{diff}"
    if o.status == "updated":
        return f"{where}: updated ({', '.join(parts) or 'trailer'})\n{note}"
    return f"{where}: in sync\n{note}"
