"""`memoryd ack FILE...`: a person saw a memory's flag for review; do not list it again until
it changes (memoryd.dream.acked). Writes memoryd's own record in the state dir, never the
file."""

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.errors import MemorydError
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

EXIT_OK, EXIT_FINDINGS = 0, 1


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "ack",
        description="Record that a person saw the flag on each memory (partially stale, or "
        "fully stale and kept by a guard): dream reports do not list it again until its "
        "bytes or its references' status change. The record is memoryd's, in its state dir; "
        "the memory file is never touched.",
    )
    p.add_argument(
        "files", nargs="+", type=Path, metavar="FILE|NAME", help="flagged memories: paths or names"
    )


def _checked(file: Path) -> Path:
    file = file.expanduser().absolute()
    if file.is_symlink():
        raise MemorydError(f"{file}: a symlink, which memoryd never follows (name its target)")
    if not file.is_file():
        raise MemorydError(f"{file}: no such memory file (name a *.md file in a memory dir)")
    return file


def run(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.commands.resolve import is_path, resolve
    from memoryd.dream.ack import acknowledge

    # A path, or a name as memoryd.commands.resolve finds it.
    files = [
        _checked(given if is_path(str(given)) else resolve(rt, str(given)).path)
        for given in args.files
    ]
    found = acknowledge(rt, files)
    for file, why in found.refused:
        out.write(f"{shown(file)}: {why}\n")
    for file in found.done:
        out.write(
            f"acknowledged {shown(file)}: not listed for review again until its bytes or its "
            "references' status change\n"
        )
    return EXIT_FINDINGS if found.refused else EXIT_OK
