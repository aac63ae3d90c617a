"""The dirs a recall command or the MCP server looks in, and the engine over them, as memoryd's
own entry points open it (their settings from the configuration, warnings on stderr)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memoryd.discover.found import MemoryDir
    from memoryd.recall.engine import Engine
    from memoryd.runtime import Runtime


def warn(message: str) -> None:
    """A warning on stderr, as memoryd's other commands give them (structlog)."""
    from memoryd.logsetup import get_logger

    get_logger().warning(message)


def find_dirs(rt: Runtime, dirs: Sequence[Path]) -> list[MemoryDir]:
    """The dirs to look in: those named, else every discovered one. Reads only (a refused
    link is said on stderr, not logged: these commands write nothing but their indexes)."""
    from memoryd.discover.finder import discover_all

    found = discover_all(rt.config, [d.expanduser() for d in dirs])
    for refused in found.refused:
        if dirs:
            warn(f"{refused.path}: not followed: {refused.reason}; {refused.hint}")
    for empty in found.empty_repos:
        warn(empty.message)
    return found.dirs


def engine_for(rt: Runtime, dirs: Sequence[MemoryDir]) -> Engine:
    from memoryd.recall.engine import Engine
    from memoryd.recall.store import IndexOptions, worker_count

    options = IndexOptions(
        warn=warn,
        max_file_bytes=rt.config.parse.max_file_bytes,
        max_frontmatter_bytes=rt.config.parse.max_frontmatter_bytes,
        workers=worker_count(),  # memoryd's own entry points: their __main__ is guarded
    )
    return Engine(
        dirs,
        rt.paths.state_dir,
        clock=rt.clock,
        stale_after=rt.config.recall.stale_after,
        options=options,
        window=(rt.config.index.max_lines, rt.config.index.max_chars),
    )
