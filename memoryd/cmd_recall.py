"""`memoryd search`, `recall`, `show` and `mcp`: argparse and rendering. The engine is in
memoryd/recall/; each handler imports what it uses, so `memoryd --help` pays for none of it."""

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from memoryd.discover.found import MemoryDir
    from memoryd.recall.engine import Engine, Result
    from memoryd.runtime import Runtime

EXIT_OK, EXIT_NONE, EXIT_USAGE = 0, 1, 2
TYPES = ("user", "feedback", "project", "reference")
MCP_MISSING = (
    "memoryd mcp needs the Model Context Protocol SDK 2.x, which is not installed (or an "
    "older one is). Install memoryd with its extra from a clone (`uv tool install --reinstall "
    "'.[mcp]'`, or `pipx install --force '.[mcp]'`; in a venv: `pip install '.[mcp]'`), then "
    "register the server with `memoryd claude install`."
)


def _dirs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs",
        nargs="*",
        default=[],  # never "required" in a usage error (argparse: `*` with no default)
        type=Path,
        metavar="DIR",
        help="memory dirs, repos or Claude homes to look in (default: every discovered dir)",
    )


def _scope_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scope",
        nargs="+",
        action="extend",
        metavar="TERM",
        help="the task's scope for JSONL record stores: only records whose scope holds one of "
        "these entries (exactly)",
    )


def add_parser(sub: Any) -> None:
    """Add search, recall, show and mcp to `memoryd`'s subcommands."""
    p = sub.add_parser(
        "search",
        help="search memories across both tiers (MEMORY.md and the archive)",
        description="Ranked memories for a query across every discovered dir (or the dirs "
        "named) and both tiers: MEMORY.md's pointers (tier index), MEMORY-ARCHIVE.md's "
        "(archive) and files with no pointer (unindexed). Typos and word forms still match; "
        "an exact name ranks first; memories not confirmed within recall.stale_after are "
        "marked and ranked after the rest. Exit 0 with results, 1 without.",
    )
    p.add_argument("query", metavar="QUERY", help="words to look for, or a memory's name")
    _dirs_arg(p)
    p.add_argument("--type", choices=TYPES, help="only memories of this type")
    frame = p.add_mutually_exclusive_group()
    frame.add_argument("--since", metavar="AGE", help="only memories dated within, e.g. 30d")
    frame.add_argument(
        "--timeframe",
        metavar="FRAME",
        help="recent (30 days), last_quarter (90 days) or a month as YYYY-MM",
    )
    p.add_argument("--limit", type=int, default=10, metavar="N", help="at most N results")
    _scope_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_search)

    p = sub.add_parser(
        "recall",
        help="memories to read before editing these files or symbols",
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
    _dirs_arg(p)
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N results")
    _scope_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_recall)

    p = sub.add_parser(
        "show",
        help="one memory: frontmatter and body, and where it is indexed",
        description="Print one memory (by its file's path or its name) as written, with its "
        "dir, date, flags and where it is indexed (MEMORY.md, the archive, or not at all).",
    )
    p.add_argument("target", metavar="FILE|NAME", help="a memory file's path, or its name")
    _dirs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser(
        "mcp",
        help="serve memory search to an agent over MCP (stdio)",
        description="A Model Context Protocol server on stdin/stdout with read-only tools: "
        "search_memories, recall_for_paths, read_memory, recent_memories. Register it with "
        "`memoryd claude install`. Needs the optional extra `mcp` ('.[mcp]').",
    )
    _dirs_arg(p)
    p.set_defaults(handler=cmd_mcp)


# --- shared -------------------------------------------------------------------------------------
def _warn(message: str) -> None:
    """A warning on stderr, as memoryd's other commands give them (structlog)."""
    from memoryd.logsetup import get_logger

    get_logger().warning(message)


def find_dirs(rt: "Runtime", dirs: Sequence[Path]) -> list["MemoryDir"]:
    """The dirs to look in: those named, else every discovered one. Reads only (a refused
    link is said on stderr, not logged: these commands write nothing but their indexes)."""
    from memoryd.discover.finder import discover_all

    found = discover_all(rt.config, [d.expanduser() for d in dirs])
    for refused in found.refused:
        if dirs:
            _warn(f"{refused.path}: not followed: {refused.reason}; {refused.hint}")
    for empty in found.empty_repos:
        _warn(empty.message)
    return found.dirs


def engine_for(rt: "Runtime", dirs: Sequence["MemoryDir"]) -> "Engine":
    from memoryd.recall.engine import Engine
    from memoryd.recall.store import IndexOptions, worker_count

    options = IndexOptions(
        warn=_warn,
        max_file_bytes=rt.config.parse.max_file_bytes,
        max_frontmatter_bytes=rt.config.parse.max_frontmatter_bytes,
        workers=worker_count(),  # memoryd's own entry points: their __main__ is guarded
    )
    return Engine(
        dirs,
        rt.paths.state_dir,
        clock=rt.clock,
        stale_after=rt.config.recall.stale_after,
        options=options,
        window=(rt.config.index.max_lines, rt.config.index.max_chars),
    )


def _dump(data: object, out: TextIO) -> None:
    json.dump(data, out, indent=2, ensure_ascii=False)
    out.write("\n")


def _marked(snippet: str, color: bool) -> str:
    """The snippet's matches (`**so**`) in the match colour, their marks dropped, when
    `color`; else as they are."""
    if not color:
        return snippet
    from memoryd.humanize import Painter
    from memoryd.lazyre import lazy

    paint = Painter(True)
    return lazy(r"\*\*(.+?)\*\*").sub(lambda m: paint(m[1], "match"), snippet)


def render_result(number: int, result: "Result", color: bool = False) -> str:
    """One result for a person: title, file, facts, snippet (each value `shown`: names,
    paths and text come from files anyone may have written; the snippet's matches in colour
    when `color`, else marked `**so**`)."""
    from memoryd.display import shown

    description = shown(result["description"])
    title = shown(result["name"]) + (f" — {description}" if description else "")
    facts = [result["dir"], result["type"] or "no type", result["tier"]]
    facts.append(f"{result['date']} ({result['age_days']} d)")
    facts += result["flags"]
    lines = [
        f"{number}. {title}",
        f"   {shown(result['file'])}",
        "   " + " · ".join(map(shown, facts)),
    ]
    if result["snippet"] and result["snippet"] != result["description"]:
        lines.append(f"   {_marked(shown(result['snippet']), color)}")
    if result.get("why"):
        lines.append("   why: " + "; ".join(map(shown, result["why"])))
    return "\n".join(lines) + "\n"


def _rendered(
    out: TextIO,
    hits: "list[Result]",
    data: dict[str, Any],
    as_json: bool,
    empty: str,
    color: str = "never",
) -> int:
    """Print the results, then each file that was not searched with why (notes without
    frontmatter are only listed in --json: they are not memories)."""
    from memoryd.display import shown

    if as_json:
        _dump({**data, "results": hits}, out)
        return EXIT_OK if hits else EXIT_NONE
    from memoryd.humanize import use_color

    colored = use_color(color, out, os.environ)
    for number, result in enumerate(hits, 1):
        out.write(render_result(number, result, colored))
    if not hits:
        out.write(empty + "\n")
    for ex in data.get("excluded", []):
        if ex["kind"] == "problem":
            out.write(f"not searched: {shown(ex['file'])}: {shown(ex['why'])}\n")
    return EXIT_OK if hits else EXIT_NONE


# --- search -------------------------------------------------------------------------------------
def cmd_search(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.errors import UsageError
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
    return _rendered(out, hits, data, args.json, empty, getattr(args, "color", "auto"))


# --- recall -------------------------------------------------------------------------------------
def _repos_of(paths: Sequence[str]) -> list[Path]:
    """The repos (a folder with `.git` or `.claude/`) holding these paths, innermost each."""
    import os

    from memoryd.discover.look import is_repo

    found: list[Path] = []
    for given in paths:
        here = Path(os.path.realpath(given))
        for folder in (here, *here.parents):
            if folder.is_dir() and is_repo(folder):
                if folder not in found:
                    found.append(folder)
                break
    return found


def _touched_dirs(rt: "Runtime", paths: Sequence[str]) -> list["MemoryDir"]:
    """The memory dirs of the repos holding these paths (repo-scope ones and the repo's
    auto-memory dir) and the discovered dirs whose repo root holds one: a hook before an edit
    refreshes one project's indexes, not every one; every discovered dir when none matches."""
    import os

    from memoryd.discover.finder import discover_all

    everything = find_dirs(rt, [])
    repos = _repos_of(paths)
    near = {md.real_path: md for md in discover_all(rt.config, repos).dirs} if repos else {}
    wanted = [os.path.realpath(p) for p in paths]
    for md in everything:
        if md.repo_root is None:
            continue
        root = os.path.realpath(md.repo_root)
        if any(w == root or w.startswith(root + os.sep) for w in wanted):
            near.setdefault(md.real_path, md)
    return sorted(near.values(), key=lambda d: str(d.real_path)) or everything


def cmd_recall(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.errors import UsageError

    if not args.path and not args.symbol:
        raise UsageError("recall needs --path FILE… or --symbol NAME… (or both)")
    touched = not args.dirs and args.path
    dirs = _touched_dirs(rt, args.path) if touched else find_dirs(rt, args.dirs)
    with engine_for(rt, dirs) as engine:
        engine.refresh()
        hits = engine.results(engine.recall(args.path, args.symbol, limit=args.limit))
        excluded = engine.excluded()
    from memoryd.recall import stored

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
    empty = "No memory refers to these files or symbols."
    return _rendered(out, hits, data, args.json, empty, getattr(args, "color", "auto"))


# --- show ---------------------------------------------------------------------------------------
def cmd_show(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.discover.finder import memory_dir_of
    from memoryd.errors import MemorydError, UsageError
    from memoryd.resolve import is_path, resolve

    path = Path(args.target).expanduser()
    dirs, target = None, args.target
    if is_path(args.target):
        if not args.dirs and path.suffix == ".md" and path.is_file():
            try:
                dirs = [memory_dir_of(path.absolute(), rt.config)]
            except UsageError:
                dirs = None
    else:  # the one resolver (an ambiguous name is a usage error listing the candidates)
        try:
            found = resolve(rt, args.target, args.dirs)
        except UsageError:
            raise
        except MemorydError:  # none: the engine says why (a file it does not show, say)
            found = None
        if found is not None and found.md is not None:
            dirs, target = [found.md], str(found.path)
    if dirs is None:
        dirs = find_dirs(rt, args.dirs)
    with engine_for(rt, dirs) as engine:
        engine.refresh()
        shown = engine.show(target)
        shown["target"] = args.target
    if args.json:
        _dump(shown, out)
    else:
        out.write(render_shown(shown))
    return EXIT_OK if shown.get("memory") else EXIT_NONE


def render_shown(found: dict[str, Any]) -> str:
    """One memory for a person: where it is, its facts, then its text, every part `shown`
    (the text keeps its lines)."""
    from memoryd.display import shown

    memory = found.get("memory")
    if not memory:
        return f"{shown(found['problem'], lines=True)}\n"
    age = f"{memory['date']} ({memory['age_days']} d)"
    facts = [memory["dir"], memory["type"] or "no type", age]
    facts += memory["flags"]
    lines = [shown(memory["file"]), "   " + " · ".join(map(shown, facts))]
    lines.append(f"   {shown(found['indexed'])}")
    lines += [f"   also: {shown(other)}" for other in found.get("others", [])]
    text = shown(found["text"], lines=True)
    return "\n".join(lines) + "\n\n" + text + ("" if text.endswith("\n") else "\n")


# --- mcp ----------------------------------------------------------------------------------------
def cmd_mcp(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    try:
        import memoryd.mcp_server as mcp_server
    except ImportError as error:
        if "mcp" not in str(error.name or error):
            raise
        sys.stderr.write(f"memoryd: {MCP_MISSING}\n")
        return EXIT_USAGE
    serve: Callable[..., int] = mcp_server.serve
    return serve(rt, args.dirs)
