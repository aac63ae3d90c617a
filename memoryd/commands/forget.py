"""`memoryd forget QUERY|FILE… [DIR …]`: its arguments; the work is `forgetting`'s, imported
when the command runs (so `memoryd --help` does not pay for it)."""

import argparse
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "forget",
        description="List the memories matching QUERY (every word in its name, description "
        "or body) or the FILEs named, ask for confirmation on a terminal, then move each to "
        "the trash with reason `forgotten` and remove its pointer lines from MEMORY.md and "
        "MEMORY-ARCHIVE.md. An argument that is a folder is a DIR to look in (default: every "
        "discovered dir); one that is a file, or ends in .md, is a FILE. A query matching more "
        "than a quarter of a dir is refused: name the files.",
    )
    p.add_argument("terms", nargs="+", metavar="QUERY|FILE|DIR", help="query words, files, dirs")
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be forgotten; change nothing"
    )
    p.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    p.add_argument(
        "--purge",
        action="store_true",
        help="also remove every copy memoryd keeps: each one's kept versions (`history` can "
        "no longer restore them), its search index entry and the dream facts cache; the "
        "trash copy stays (it is yours: `memoryd trash list` shows where)",
    )


def run(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.commands import forgetting

    return forgetting.run(args, rt, out)
