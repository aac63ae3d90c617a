"""`memoryd history FILE|NAME [DIR …]`: its arguments; the work is memoryd.history's, imported
when the command runs (so `memoryd --help` does not pay for it)."""

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "history",
        help="what a memory superseded and what superseded it, from the trash manifests",
        description="Walk the trash manifests both ways: what superseded this memory (and "
        "what superseded that), and what it superseded, with dates, reasons and pass ids. "
        "FILE may be a memory file, a trashed file (.trash/<day>/<file>) or a file name.",
    )
    p.add_argument("key", metavar="FILE|NAME", help="a memory's path or its file name")
    p.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="where to look")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def cmd_history(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd import history

    return history.run(args, rt, out)
