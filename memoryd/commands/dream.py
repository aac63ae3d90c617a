"""`memoryd dream [DIR …]`: the consolidation pass over each dir, and its report; with
`--apply PASS_ID`, the plan of a pass the circuit breaker refused, applied after review."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    dirs_arg,
    discover_named,
    discovery_json,
    given_repo_root,
    recover,
    render_discovery,
    repo_root_arg,
    write_json,
)
from memoryd.errors import MemorydError, UsageError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dream",
        description="Prune fully stale memories, merge duplicates and resolve "
        "contradictions by checks anyone can repeat; move (never delete) into "
        "the trash; update the index; print the report.",
    )
    dirs_arg(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing at all; print [DRY RUN] Would move: lines",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.add_argument(
        "--apply",
        metavar="PASS_ID",
        help="apply the plan of this pass the circuit breaker refused, after review: exactly "
        "its moves, and only if every file it names still holds the bytes it was planned from "
        "(else exit 1, naming those that changed, and nothing moves)",
    )
    repo_root_arg(p)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:

    from memoryd.daemon import housekeeping
    from memoryd.discover.finder import discover
    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir
    from memoryd.views.report import render_text, result_json, totals

    if args.apply:
        return _dream_apply(args, rt, out)
    # A dry run writes nothing at all: no state, no audit row (rt.effect, cli.effect_of).
    rt = replace(rt, named=tuple(args.dirs))  # as in commands.index
    if not args.dry_run:
        recover(rt)
    found = discover_named(rt, args.dirs)  # a dry run says nothing (rt.dry_run)
    dirs = found.dirs
    root = given_repo_root(args)
    if root is not None:
        dirs = [replace(d, repo_root=root, repo_reason="given with --repo-root") for d in dirs]
    if not args.dry_run:
        housekeeping.rotate(rt, dirs)
    repos = RepoCache.of(rt)
    # Why a dir is unmanaged is said by the pass that records it (as in commands.index).
    said = {md.real_path: rt.store.load(md.real_path).reported.get("unmanaged") for md in dirs}
    results = [dream_dir(rt, md, repos=repos, dry_run=args.dry_run) for md in dirs]
    said_before = {
        r.dir.real_path
        for r in results
        if r.status == "unmanaged"
        and said[r.dir.real_path] is not None
        and rt.store.load(r.dir.real_path).reported.get("unmanaged") == said[r.dir.real_path]
    }
    declined: dict[Path, set[str]] = {
        r.dir.real_path: {i.filename for i in r.plan.items.values() if i.promotion_declined}
        for r in results
        if r.plan
    }
    # Other projects' indexes count even when this run names one dir (their memory dirs are
    # only read, never passed over).
    known = discover(rt.config) if args.dirs else dirs
    texts = {r.dir.real_path: r.index_text for r in results if r.index_text is not None}
    promo_line, promos = housekeeping.promotion_candidates(
        dirs, declined, known, texts, rt.versions
    )
    hk = [housekeeping.orphan_hints(dirs), promo_line]
    hk += [f"  {d}: {f} (topic in {n} other projects)" for d, f, n in promos]
    if args.json:
        doc = {
            "dry_run": args.dry_run,
            "totals": totals(results, len(promos)),
            "dirs": [result_json(r) for r in results],
            "housekeeping": hk,
            "promotion_candidates": [
                {"dir": d, "file": f, "other_projects": n} for d, f, n in promos
            ],
            **discovery_json(found),
        }
        write_json(out, doc)
    else:
        out.write(render_text(results, hk, args.dry_run, len(promos), said_before))
        out.write(render_discovery(found))
    failed = any(r.status in ("failed", "refused") for r in results)
    return EXIT_FINDINGS if failed else EXIT_OK


def _dream_apply(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`dream DIR --apply PASS_ID`: the plan a refused pass kept, applied after review."""
    from memoryd.dream import refused
    from memoryd.dream.write import apply_refused
    from memoryd.views.report import render_text, result_json

    if args.dry_run or args.repo_root is not None:
        raise UsageError("--apply takes no --dry-run or --repo-root: it applies a stored plan")
    if not args.dirs:
        raise UsageError("--apply PASS_ID needs the DIR whose pass was refused")
    recover(rt)
    rt = replace(rt, named=tuple(args.dirs))  # as in commands.index
    dirs = discover_named(rt, args.dirs).dirs
    held = [md for md in dirs if refused.exists(rt.paths.state_dir, md.real_path, args.apply)]
    md = held[0] if held else dirs[0] if len(dirs) == 1 else None
    if md is None:
        raise MemorydError(
            f"no refused plan {args.apply} for {', '.join(str(d) for d in args.dirs)}; name "
            "the memory dir its report named"
        )
    result = apply_refused(rt, md, args.apply)
    if args.json:
        write_json(out, {"applied": args.apply, "dirs": [result_json(result)]})
    else:
        out.write(render_text([result], [], False))
    return EXIT_OK if result.status == "completed" and not result.skipped_moves else EXIT_FINDINGS
