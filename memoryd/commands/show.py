"""`memoryd show FILE|NAME [DIR …]`: one memory as written, with its dir, date, flags and where
it is indexed (memoryd.recall's engine; a name as memoryd.commands.resolve finds it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import EXIT_FINDINGS, EXIT_OK, LOOK_IN, dirs_arg, write_json
from memoryd.errors import MemorydError, UsageError

if TYPE_CHECKING:
    from memoryd.discover.found import MemoryDir
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "show",
        description="Print one memory (by its file's path or its name) as written, with its "
        "dir, date, flags and where it is indexed (MEMORY.md, the archive, or not at all).",
    )
    p.add_argument("target", metavar="FILE|NAME", help="a memory file's path, or its name")
    dirs_arg(p, LOOK_IN)
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _where(rt: Runtime, args: argparse.Namespace) -> tuple[list[MemoryDir] | None, str]:
    """The dirs to look in (None: as `find_dirs` says) and the target to show there."""
    from memoryd.commands.resolve import is_path, resolve
    from memoryd.discover.finder import memory_dir_of

    path = Path(args.target).expanduser()
    if is_path(args.target):
        if not args.dirs and path.suffix == ".md" and path.is_file():
            try:
                return [memory_dir_of(path.absolute(), rt.config)], args.target
            except UsageError:
                pass
        return None, args.target
    try:  # the one resolver (an ambiguous name is a usage error listing the candidates)
        found = resolve(rt, args.target, args.dirs)
    except UsageError:
        raise
    except MemorydError:  # none: the engine says why (a file it does not show, say)
        return None, args.target
    if found.md is not None:
        return [found.md], str(found.path)
    return None, args.target


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.recall.lookup import engine_for, find_dirs
    from memoryd.views.results import render_shown

    dirs, target = _where(rt, args)
    if dirs is None:
        dirs = find_dirs(rt, args.dirs)
    with engine_for(rt, dirs) as engine:
        engine.refresh()
        found = engine.show(target)
        found["target"] = args.target
    if args.json:
        write_json(out, found)
    else:
        out.write(render_shown(found))
    return EXIT_OK if found.get("memory") else EXIT_FINDINGS
