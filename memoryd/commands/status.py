"""`memoryd status`: the daemon's heartbeat and its dirs (memoryd.views.statusview)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    auto_memory_off,
    auto_memory_off_line,
    color_arg,
    view_for,
    write_json,
)

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        description="Read the daemon's heartbeat (status.json). Exit 0 when it "
        "runs with a fresh heartbeat, 1 otherwise.",
    )
    p.add_argument("--json", action="store_true", help="print the status document")
    color_arg(p)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import time

    from memoryd.discover.dirlabel import roots
    from memoryd.views.statusview import alarm_lines, gather, render

    now = rt.clock()
    found = gather(rt, now)
    off = auto_memory_off(rt)
    if args.json:
        write_json(out, {**found.as_json(), "auto_memory_off": off})
    else:
        view = view_for(args, out, now, 100, roots=roots([d.path for d in found.dirs], rt.config))
        out.write(render(found, view))
        if off:
            out.write(auto_memory_off_line(off))
        out.write(alarm_lines(rt, time.time()))  # mass changes by other processes, last day
    return EXIT_OK if found.fresh else EXIT_FINDINGS
