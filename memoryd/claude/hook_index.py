"""The post-tool-use hook: a file the agent wrote in a memory dir has that dir's index brought
up to date at once (memoryd.claude.hooks).

The hook only looks at the path and starts `memoryd hook index-written`, not waited for; that
process runs `memoryd index DIR` (versions kept, audit rows written, as the command does),
then the dir's search index takes in the written file, so the next pre-tool-use hook finds
it. Two such passes for two writes in a row run one after the other (the dir's lock), and
the later one sees both files. Without the daemon's 10 s grace, a new memory has its pointer
within a moment, before the agent's next step; when the agent then writes its own pointer
line in MEMORY.md, this hook runs again and the index pass keeps the agent's line over
memoryd's (DirState.own), as the daemon does.

Only the standard places are taken for memory dirs (a file elsewhere is no memory, whatever
its name): `<claude home>/projects/<slug>/memory/`, `agent-memory[-local]/<agent>/` (a repo's
or the Claude home's), a repo's `.claude/memory/`, and `$CLAUDE_COWORK_MEMORY_PATH_OVERRIDE`.
"""

import io
import os
from pathlib import Path
from typing import Any

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
    from memoryd.claude.hookio import tool_path

    file = tool_path(data)
    if file is None or not file.endswith(".md"):
        return None
    folder = os.path.dirname(file)
    if not is_memory_layout(folder) or not os.path.isdir(folder):
        return None
    return folder, file


def index_after_write(data: dict[str, Any]) -> None:
    """Index the memory dir the tool wrote in; nothing for any other file. Raises on a
    failed pass (memoryd.claude.hooks logs it)."""
    found = written_memory_dir(data)
    if found is None:
        return
    folder, file = found
    from memoryd.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["index", "--not-named", folder], out=out, err=err)
    if code not in (0,):
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
        warn=_logged,
    )


def _logged(message: str) -> None:
    from memoryd.claude.hookio import log_failure

    log_failure("post-tool-use", RuntimeError(message))
