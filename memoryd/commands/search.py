"""`memoryd search QUERY [DIR …]`: ranked memories across both tiers of every dir (memoryd.recall),
and the records of the JSONL stores that match."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import EXIT_FINDINGS, EXIT_OK, LOOK_IN, dirs_arg, scope_arg, write_json
from memoryd.errors import UsageError

if TYPE_CHECKING:
    from memoryd.recall.engine import Result
    from memoryd.runtime import Runtime

TYPES = ("user", "feedback", "project", "reference")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "search",
        description="Ranked memories for a query across every discovered dir (or the dirs "
        "named) and both tiers: MEMORY.md's pointers (tier index), MEMORY-ARCHIVE.md's "
        "(archive) and files with no pointer (unindexed). Typos and word forms still match; "
        "an exact name ranks first; memories not confirmed within recall.stale_after are "
        "marked and ranked after the rest. Exit 0 with results, 1 without.",
    )
    p.add_argument("query", metavar="QUERY", help="words to look for, or a memory's name")
    dirs_arg(p, LOOK_IN)
    p.add_argument("--type", choices=TYPES, help="only memories of this type")
    frame = p.add_mutually_exclusive_group()
    frame.add_argument("--since", metavar="AGE", help="only memories dated within, e.g. 30d")
    frame.add_argument(
        "--timeframe",
        metavar="FRAME",
        help="recent (30 days), last_quarter (90 days) or a month as YYYY-MM",
    )
    p.add_argument("--limit", type=int, default=10, metavar="N", help="at most N results")
    scope_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.recall.lookup import engine_for, find_dirs
    from memoryd.recall.query import parse_frame

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    try:
        frame = parse_frame(args.timeframe, args.since, rt.clock())
    except ValueError as error:
        raise UsageError(str(error)) from None
    dirs = find_dirs(rt, args.dirs)
    with engine_for(rt, dirs) as engine:
        engine.refresh()
        hits = engine.results(
            engine.search(args.query, type_=args.type, frame=frame, limit=args.limit)
        )
        excluded = engine.excluded()
    if args.type is None:  # a record has no memory type
        from memoryd.recall import stored

        found = stored.results(
            rt, dirs, args.dirs, query=args.query, scope=args.scope, within=frame[:2]
        )
        hits += found[: max(0, args.limit - len(hits))]
    data = {"query": args.query, "dirs": [str(d.path) for d in dirs], "excluded": excluded}
    empty = f"No memory matches {args.query!r}."
    return answer(args, out, hits, data, empty)


def answer(
    args: argparse.Namespace, out: TextIO, hits: list[Result], data: dict[str, Any], empty: str
) -> int:
    """Print the results (else `empty`), as JSON or for a person (memoryd.views.results);
    exit 0 with results, 1 without."""
    if args.json:
        write_json(out, {**data, "results": hits})
    else:
        from memoryd.model.humanize import use_color
        from memoryd.views.results import render_results

        colored = use_color(getattr(args, "color", "auto"), out, os.environ)
        out.write(render_results(hits, data.get("excluded", []), empty, colored))
    return EXIT_OK if hits else EXIT_FINDINGS
