"""`memoryd explain FILE|NAME`: every check and rule applied to one memory (memoryd.dream.explain),
or a JSONL record store's lines validated."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import EXIT_OK, given_repo_root, repo_root_arg, write_json
from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explain",
        description="For one memory: its references and their scope, its "
        "classification, each guard and whether it holds, consult evidence, "
        "duplicate and contradiction candidates with overlap scores, and the "
        "decision the dream pass would take.",
    )
    p.add_argument(
        "file",
        type=Path,
        metavar="FILE|NAME",
        help="a memory file, its file name or name (as `show` finds it), or a JSONL record store",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    repo_root_arg(p)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.discipline import findings
    from memoryd.dream.explain import explain, render
    from memoryd.dream.repocache import RepoCache

    if findings.is_store_file(args.file):
        return _explain_store(args, rt, out)
    from memoryd.commands.resolve import is_path, resolve

    if not is_path(str(args.file)):  # a name, as memoryd.commands.resolve finds it
        args.file = resolve(rt, str(args.file)).path
    data = explain(rt, args.file, RepoCache.of(rt), given_repo_root(args))
    if args.json:
        write_json(out, data)
    else:
        out.write(render(data))
    return EXIT_OK


def _explain_store(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`explain STORE`: every line of a JSONL record store validated, and its findings."""
    from memoryd.commands.dirs import render_stores, store_reports

    path = args.file.expanduser().absolute()
    if not path.exists():
        raise MemorydError(f"{path}: no such file (name a JSONL record store or a memory file)")
    (row,) = store_reports(rt, [], [path])
    if args.json:
        write_json(out, row)
    else:
        render_stores([row], out)
    if "problem" in row:
        raise MemorydError(
            f"{path}: {row['problem']}; memoryd reads a store only as a regular file"
        )
    return EXIT_OK
