"""`memoryd recall --path FILE… --symbol NAME…`: the memories to read before editing these files or
symbols (memoryd.recall), and the records of the JSONL stores in their scope."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import LOOK_IN, dirs_arg, scope_arg
from memoryd.errors import UsageError

if TYPE_CHECKING:
    from memoryd.discover.found import MemoryDir
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "recall",
        description="Memories whose references touch these files (the file, a folder above "
        "it, a file below it, the place a moved file had) or name these symbols: the same "
        "reference extraction the dream pass uses. Exit 0 with results, 1 without.",
    )
    p.add_argument(
        "--path", nargs="+", action="extend", default=[], metavar="FILE", help="files or folders"
    )
    p.add_argument(
        "--symbol", nargs="+", action="extend", default=[], metavar="NAME", help="code symbols"
    )
    dirs_arg(p, LOOK_IN)
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N results")
    scope_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _touched_dirs(rt: Runtime, paths: Sequence[str]) -> list[MemoryDir]:
    """The memory dirs of the repos holding these paths (repo-scope ones and the repo's
    auto-memory dir) and the discovered dirs whose repo root holds one: a hook before an edit
    refreshes one project's indexes, not every one; every discovered dir when none matches."""
    from memoryd.commands.resolve import repo_of
    from memoryd.discover.finder import discover_all
    from memoryd.recall.lookup import find_dirs

    everything = find_dirs(rt, [])
    wanted = [os.path.realpath(p) for p in paths]
    repos = list(dict.fromkeys(filter(None, (repo_of(Path(w)) for w in wanted))))
    near = {md.real_path: md for md in discover_all(rt.config, repos).dirs} if repos else {}
    for md in everything:
        if md.repo_root is None:
            continue
        root = os.path.realpath(md.repo_root)
        if any(w == root or w.startswith(root + os.sep) for w in wanted):
            near.setdefault(md.real_path, md)
    return sorted(near.values(), key=lambda d: str(d.real_path)) or everything


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.commands.search import answer
    from memoryd.recall import stored
    from memoryd.recall.lookup import engine_for, find_dirs

    if not args.path and not args.symbol:
        raise UsageError("recall needs --path FILE… or --symbol NAME… (or both)")
    touched = not args.dirs and args.path
    dirs = _touched_dirs(rt, args.path) if touched else find_dirs(rt, args.dirs)
    with engine_for(rt, dirs) as engine:
        engine.refresh()
        hits = engine.results(engine.recall(args.path, args.symbol, limit=args.limit))
        excluded = engine.excluded()
    # A record store's recall is by scope: the --scope given, else the paths and symbols as
    # they were named (a scope entry is a string the store's agents wrote, matched exactly).
    scope = args.scope or [*args.path, *args.symbol]
    found = stored.results(rt, dirs, args.dirs, query=None, scope=scope)
    hits += found if args.limit is None else found[: max(0, args.limit - len(hits))]
    data = {
        "paths": args.path,
        "symbols": args.symbol,
        "dirs": [str(d.path) for d in dirs],
        "excluded": excluded,
    }
    return answer(args, out, hits, data, "No memory refers to these files or symbols.")
