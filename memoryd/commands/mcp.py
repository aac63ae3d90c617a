"""`memoryd mcp [DIR …]`: the Model Context Protocol server on stdin/stdout
(memoryd.recall.mcp_server), or what to install when its SDK is missing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import EXIT_USAGE, LOOK_IN, dirs_arg

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

MCP_MISSING = (
    "memoryd mcp needs the Model Context Protocol SDK 2.x, which is not installed (or an "
    "older one is). Install memoryd with its extra from a clone (`uv tool install --reinstall "
    "'.[mcp]'`, or `pipx install --force '.[mcp]'`; in a venv: `pip install '.[mcp]'`), then "
    "register the server with `memoryd claude install`."
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        description="A Model Context Protocol server on stdin/stdout with read-only tools: "
        "search_memories, recall_for_paths, read_memory, recent_memories. Register it with "
        "`memoryd claude install`. Needs the optional extra `mcp` ('.[mcp]').",
    )
    dirs_arg(p, LOOK_IN)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    try:
        import memoryd.recall.mcp_server as mcp_server
    except ImportError as error:
        if "mcp" not in str(error.name or error):
            raise
        sys.stderr.write(f"memoryd: {MCP_MISSING}\n")
        return EXIT_USAGE
    serve: Callable[..., int] = mcp_server.serve
    return serve(rt, args.dirs)
