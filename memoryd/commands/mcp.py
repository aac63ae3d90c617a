"""`memoryd mcp [DIR …]`: the Model Context Protocol server on stdin/stdout (memoryd.mcp_server)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import LOOK_IN, dirs_arg

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        description="A Model Context Protocol server on stdin/stdout with read-only tools: "
        "search_memories, recall_for_paths, read_memory, recent_memories. Register it with "
        "`memoryd claude install`.",
    )
    dirs_arg(p, LOOK_IN)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.mcp_server import serve

    return serve(rt, args.dirs)
