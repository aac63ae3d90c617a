"""`memoryd history FILE|NAME [DIR …]`: its arguments, and the one command that joins a memory's
two histories: what superseded it (memoryd.history, from the trash manifests) and the versions
of its bytes memoryd kept (memoryd.cmd_versions). Both are imported when the command runs, so
`memoryd --help` pays for neither."""

import argparse
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

EXIT_OK, EXIT_FINDINGS = 0, 1


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "history",
        help="a memory's history: what superseded it, and the versions memoryd kept",
        description="Two histories of one memory file (or of MEMORY.md / MEMORY-ARCHIVE.md). "
        "Supersession, from the trash manifests both ways: what superseded this memory (and "
        "what superseded that), and what it superseded, with dates, reasons and pass ids. "
        "Versions: every version of its bytes memoryd read, kept in its state dir for "
        "versions.keep_days (when seen, size, sha256, whether memoryd or another process "
        "wrote it); --diff shows what changed, --restore writes an earlier one back as a new "
        "version. FILE may be a memory file, a trashed file (.trash/<day>/<file>) or a name.",
    )
    p.add_argument("key", metavar="FILE|NAME", help="a memory's path or its file name")
    p.add_argument("dirs", nargs="*", default=[], type=Path, metavar="DIR", help="where to look")
    p.add_argument(
        "--diff",
        nargs="?",
        const="",
        metavar="A[..B]",
        help="show what changed: from the previous version to the newest (no value), from "
        "version A to the file now, or from A to B",
    )
    p.add_argument("--restore", type=int, metavar="VERSION", help="write VERSION back")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def cmd_history(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd import cmd_versions, history

    args.file = args.key  # the versions side's name for it
    args.target = history.target_of(rt, args.key, args.dirs)  # both sides': memoryd.resolve
    if args.diff is not None or args.restore is not None:
        return cmd_versions.cmd_history(args, rt, out)
    chain, versions = io.StringIO(), io.StringIO()
    problems: list[MemorydError] = []
    try:
        history.run(args, rt, chain)
    except MemorydError as error:  # no trash record: the versions may still know it
        problems.append(error)
    try:
        found_versions = cmd_versions.cmd_history(args, rt, versions) == EXIT_OK
    except MemorydError as error:
        problems.append(error)
        found_versions = False
    if len(problems) == 2:
        raise problems[0]
    if args.json:
        from memoryd import safejson

        doc: dict[str, Any] = safejson.loads(chain.getvalue()) if chain.getvalue() else {}
        doc.setdefault("histories", [])
        doc["versions"] = safejson.loads(versions.getvalue()) if versions.getvalue() else None
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        if chain.getvalue():
            out.write(chain.getvalue())
        if versions.getvalue():
            out.write(("\n" if chain.getvalue() else "") + "Versions:\n" + versions.getvalue())
    return EXIT_OK if chain.getvalue() or found_versions else EXIT_FINDINGS
