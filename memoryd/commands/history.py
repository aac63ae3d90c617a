"""`memoryd history FILE|NAME [DIR …]`: the one command that joins a memory's two histories: what
superseded it (`supersession`, from the trash manifests) and the versions of its bytes
memoryd kept (memoryd.commands.versions), each asked for its values and rendered here."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import EXIT_FINDINGS, EXIT_OK, dirs_arg, write_json
from memoryd.errors import MemorydError
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.commands.resolve import Target
    from memoryd.runtime import Runtime
    from memoryd.versions.records import Version


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "history",
        description="Two histories of one memory file (or of MEMORY.md / MEMORY-ARCHIVE.md). "
        "Supersession, from the trash manifests both ways: what superseded this memory (and "
        "what superseded that), and what it superseded, with dates, reasons and pass ids. "
        "Versions: every version of its bytes memoryd read, kept in its state dir for "
        "versions.keep_days (when seen, size, sha256, whether memoryd or another process "
        "wrote it); --diff shows what changed, --restore writes an earlier one back as a new "
        "version. FILE may be a memory file, a trashed file (.trash/<day>/<file>) or a name.",
    )
    p.add_argument("key", metavar="FILE|NAME", help="a memory's path or its file name")
    dirs_arg(p, "where to look")
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


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import time

    from memoryd.commands import supersession
    from memoryd.commands.versions import diff_or_restore
    from memoryd.storage.statedb import StateDamaged
    from memoryd.versions import listing
    from memoryd.versions.kept import for_runtime

    args.target = supersession.target_of(rt, args.key, args.dirs)  # both sides': the one resolver
    if args.diff is not None or args.restore is not None:
        return diff_or_restore(args, rt, out)
    target, problems = args.target, list[MemorydError]()
    chain: dict[str, Any] | None = None
    if target.md is not None:
        chain = supersession.history_of(target.md, target.name)
    else:  # no trash record: the versions may still know it
        problems.append(
            MemorydError(
                f"{args.key}: no memory of that name and no trash record naming it in the dirs "
                "looked in (name its path, or the dir to look in)"
            )
        )
    found: list[Version] | None = None
    try:
        found = listing.versions_of(rt.versions or for_runtime(rt), target.folder, target.name)
    except StateDamaged:
        raise  # never a history without its versions in silence: the store needs a person
    except MemorydError as error:
        problems.append(error)
    if len(problems) == 2:
        raise problems[0]
    if args.json:
        _dump(chain, found, target, out)
        return EXIT_OK
    text = _chain_text(chain) if chain is not None else ""
    out.write(text)
    if found is not None:
        versions_text = listing.render_versions(target.folder, target.name, found, time.time())
        out.write(("\n" if text else "") + "Versions:\n" + versions_text)
    return EXIT_OK if chain is not None or found else EXIT_FINDINGS


def _chain_text(doc: dict[str, Any]) -> str:
    """What superseded the memory and what it superseded (memoryd.trash.lineage), for a
    person."""
    from memoryd.trash import lineage

    where = f"{doc['dir']}/{doc['file']}" + ("" if doc["exists"] else " (not in the dir now)")
    return "".join(f"{shown(line)}\n" for line in lineage.render(doc["_history"], where))


def _dump(
    chain: dict[str, Any] | None, found: list[Version] | None, target: Target, out: TextIO
) -> None:
    from memoryd.commands.versions import versions_json

    histories = [{k: v for k, v in chain.items() if k != "_history"}] if chain else []
    doc = {
        "histories": histories,
        "versions": versions_json(target.folder, target.name, found) if found is not None else None,
    }
    write_json(out, doc)
