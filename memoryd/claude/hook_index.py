"""The post-tool-use hook: a file the agent wrote in a memory dir has that dir's index brought
up to date at once, without the daemon's grace (memoryd.claude.hooks).

The hook only checks the path and starts `memoryd hook index-written`, which runs `memoryd
index DIR` (as the command does: versions, audit rows, the dir's lock) and then updates the
dir's search index. A pointer line the agent then writes itself is kept over memoryd's
(DirState.own). Only Claude Code's standard memory dir places count.
"""

import io
import os
from pathlib import Path
from typing import Any

from memoryd.claude.hookio import log_failure, tool_path

AGENT_GROUPS = ("agent-memory", "agent-memory-local")


def is_memory_layout(folder: str) -> bool:
    """Whether a folder is at one of Claude Code's memory dir places."""
    path = Path(folder)
    if path.name == "memory" and path.parent.parent.name == "projects":
        return True
    if path.parent.name in AGENT_GROUPS:
        return True
    if path.name == "memory" and path.parent.name == ".claude":
        return True
    override = os.environ.get("CLAUDE_COWORK_MEMORY_PATH_OVERRIDE")
    return override is not None and os.path.normpath(os.path.expanduser(override)) == folder


def written_memory_dir(data: dict[str, Any]) -> tuple[str, str] | None:
    """The memory dir and file a tool call wrote, (folder, file); None for any other file."""
    file = tool_path(data)
    if file is None or not file.endswith(".md"):
        return None
    folder = os.path.dirname(file)
    if not is_memory_layout(folder) or not os.path.isdir(folder):
        return None
    return folder, file


def index_after_write(data: dict[str, Any]) -> None:
    """Index the memory dir the tool wrote in, if any; raises on a failed pass."""
    found = written_memory_dir(data)
    if found is None:
        return
    folder, file = found
    from memoryd.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["index", "--not-named", folder], out=out, err=err)
    if code != 0:
        said = (err.getvalue() or out.getvalue()).strip()
        raise RuntimeError(f"memoryd index {folder} exited {code}: {said}")
    _update_search(Path(folder), os.path.basename(file))


def _update_search(folder: Path, name: str) -> None:
    """The dir's search index in step for the written file (and the index files)."""
    from memoryd.config import load_config
    from memoryd.paths import app_paths
    from memoryd.recall.store import update_dir

    paths = app_paths()
    parse = load_config(None, paths).parse
    update_dir(
        paths.state_dir,
        folder.resolve(),
        {name},
        max_file_bytes=parse.max_file_bytes,
        max_frontmatter_bytes=parse.max_frontmatter_bytes,
        warn=lambda message: log_failure("post-tool-use", RuntimeError(message)),
    )
