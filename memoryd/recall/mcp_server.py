"""`memoryd mcp`: memory recall for an agent over the Model Context Protocol (stdio).

Four read-only tools over both tiers of every discovered dir (or the dirs named):
`search_memories`, `recall_for_paths`, `read_memory`, `recent_memories`. Results carry the
fields of the CLI's `--json`. Each answer is the agent consulting memory: it is recorded as
consult evidence in the state dir (memoryd.dream.consults), which the dream pass's consult
guard reads. Needs the optional extra `memoryd[mcp]` (the official `mcp` SDK).
"""

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from memoryd import __version__
from memoryd.recall.query import DEFAULT_LIMIT, Frame, parse_frame
from memoryd.storage.fsops import libc_function

if TYPE_CHECKING:  # imported by the first tool call: `initialize` is answered without them
    from memoryd.discover.found import MemoryDir
    from memoryd.recall.engine import Engine, Hit
    from memoryd.runtime import Runtime

# The server answers from the index as it is, brought up to date by stat at most this often
# (seconds): a query then costs the query, not a stat of every memory file.
REFRESH_EVERY = 2.0
REDISCOVER_EVERY = 60.0  # new projects' memory dirs are found this often
MAX_LIMIT = 50
# A writer (the daemon) holding an index: the server waits this long, then answers from
# what the index holds.
BUSY_WAIT = 0.5

# The tools' parameters as JSON Schema tells the client: a value the CLI refuses (a type that
# is none, a time frame that is none, a limit under 1) is refused before the tool runs.
MemoryType = Literal["user", "feedback", "project", "reference"]  # the CLI's --type choices
Timeframe = (
    Literal["recent", "last_quarter"]
    | Annotated[str, Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])$", description="YYYY-MM")]
)
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"at most this many (1-{MAX_LIMIT})")]
PROJECT_DIR = "CLAUDE_PROJECT_DIR"  # Claude Code's project folder, in its MCP servers' env

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

INSTRUCTIONS = (
    "memoryd keeps this user's coding-agent memories (MEMORY.md and MEMORY-ARCHIVE.md with "
    "their memory files). MEMORY.md is already loaded; these tools search both tiers on demand. "
    "Before editing code, call recall_for_paths with the files you will touch. Results marked "
    "'unconfirmed N d' have not been confirmed for a long time: verify them before relying on "
    "them."
)


class _Libc:
    """glibc's allocator knobs, where there is glibc (elsewhere: nothing). The tools run in
    the SDK's worker threads: each thread's allocations went to an arena of its own, and
    what a query's SQLite and FTS5 buffers freed stayed in the process (at 100,000 memories
    the server's RSS grew by 30 MB over 20 queries). One arena, trimmed after each call,
    gives it back."""

    M_ARENA_MAX = -8

    def __init__(self) -> None:
        self.mallopt: Any = libc_function("mallopt")
        self.malloc_trim: Any = libc_function("malloc_trim")

    def one_arena(self) -> None:
        if self.mallopt is not None and self.malloc_trim is not None:
            self.mallopt(self.M_ARENA_MAX, 1)

    def trim(self) -> None:
        if self.mallopt is not None and self.malloc_trim is not None:
            self.malloc_trim(0)


LIBC = _Libc()


def project_dir(environ: Mapping[str, str]) -> Path | None:
    """The client's project, which relative paths in calls are relative to: the folder
    Claude Code names in CLAUDE_PROJECT_DIR (None: the server's working folder)."""
    value = environ.get(PROJECT_DIR, "")
    return Path(value) if os.path.isabs(value) and os.path.isdir(value) else None


class Recall:
    """The engine behind the tools: one per server, used by one call at a time."""

    def __init__(
        self,
        rt: "Runtime",
        dirs: Sequence[Path],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rt = rt
        self.named = list(dirs)
        self.project = project_dir(os.environ)
        self.monotonic = monotonic
        self.lock = threading.Lock()
        self._engine: Engine | None = None
        self._found_at = -REDISCOVER_EVERY
        self._fresh_at = -REFRESH_EVERY

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        """One tool call at a time; what it allocated is given back after it (LIBC)."""
        with self.lock:
            try:
                yield
            finally:
                LIBC.trim()

    def engine(self) -> "Engine":
        """The engine, its dirs found again now and then and its indexes brought up to date
        by stat at most every REFRESH_EVERY seconds."""
        from memoryd.recall.lookup import engine_for, find_dirs

        now = self.monotonic()
        if self._engine is None or now - self._found_at >= REDISCOVER_EVERY:
            dirs = find_dirs(self.rt, self.named)
            if self._engine is None or [d.real_path for d in dirs] != [
                d.real_path for d in self._engine.dirs
            ]:
                if self._engine is not None:
                    self._engine.close()
                self._engine = engine_for(self.rt, dirs)
                self._fresh_at = -REFRESH_EVERY
            self._found_at = now
        if now - self._fresh_at >= REFRESH_EVERY:
            self._engine.refresh(wait=BUSY_WAIT)
            self._fresh_at = self.monotonic()
        return self._engine

    def answered(self, tool: str, hits: "Sequence[Hit]", query: str) -> None:
        """Record what the agent was shown, per dir, as consult evidence."""
        from memoryd.dream import consults

        by_dir: dict[Path, tuple[MemoryDir, list[str]]] = {}
        for hit in hits:
            by_dir.setdefault(hit.md.real_path, (hit.md, []))[1].append(hit.row.file)
        for real_path, (_, names) in sorted(by_dir.items()):
            consults.record(
                self.rt.paths.state_dir,
                real_path,
                tool=tool,
                names=names,
                query=query,
                now=self.rt.clock(),
            )

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    # --- the tools ------------------------------------------------------------------------------
    def frame(self, timeframe: str | None) -> Frame:
        """A time frame; a bad one is the agent's to correct (a tool error saying what is
        accepted), not a crash."""
        try:
            return parse_frame(timeframe or None, None, self.rt.clock())
        except ValueError as error:
            raise ToolError(str(error)) from None

    def search(
        self,
        query: str,
        timeframe: str | None = None,
        type: str | None = None,  # the tool parameter's name
        project: str | None = None,
        limit: int = DEFAULT_LIMIT,
        scope: list[str] | None = None,
    ) -> dict[str, Any]:
        from memoryd.recall import stored

        limit = max(1, min(limit, MAX_LIMIT))
        with self._calling():
            engine = self.engine()
            frame = self.frame(timeframe)
            hits = engine.search(
                query,
                type_=type or None,
                frame=frame,
                project=project or None,
                limit=limit,
            )
            self.answered("search_memories", hits, query)
            results = engine.results(hits)
            if not type and not project:  # a record has no memory type; its repo is its place
                found = stored.results(
                    self.rt, engine.dirs, self.named, query=query, scope=scope, within=frame[:2]
                )
                results += found[: max(0, limit - len(results))]
            return {"query": query, "results": results}

    def recall(
        self,
        paths: list[str],
        symbols: list[str] | None = None,
        scope: list[str] | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        from memoryd.recall import stored

        limit = max(1, min(limit, MAX_LIMIT))
        with self._calling():
            engine = self.engine()
            hits = engine.recall(paths, symbols or [], limit=limit, cwd=self.project)
            self.answered("recall_for_paths", hits, "")
            results = engine.results(hits)
            task = scope or [*paths, *(symbols or [])]
            found = stored.results(self.rt, engine.dirs, self.named, query=None, scope=task)
            results += found[: max(0, limit - len(results))]
            return {"paths": paths, "symbols": symbols or [], "results": results}

    def read(self, file: str) -> dict[str, Any]:
        with self._calling():
            engine = self.engine()
            found = engine.find(file, cwd=self.project)
            shown = engine.show(file, cwd=self.project, found=found)
            if shown.get("memory"):
                self.answered("read_memory", found[:1], "")
            return shown

    def recent(
        self, timeframe: str = "recent", project: str | None = None, limit: int = DEFAULT_LIMIT
    ) -> dict[str, Any]:
        limit = max(1, min(limit, MAX_LIMIT))
        with self._calling():
            engine = self.engine()
            hits = engine.recent(frame=self.frame(timeframe), project=project or None, limit=limit)
            self.answered("recent_memories", hits, "")
            return {"timeframe": timeframe, "results": engine.results(hits)}


def build(recall: Recall) -> MCPServer[Any]:
    """The MCP server with its four read-only tools."""
    server: MCPServer[Any] = MCPServer("memoryd", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(annotations=READ_ONLY)
    def search_memories(
        query: str,
        timeframe: Timeframe | None = None,
        type: MemoryType | None = None,  # the tool parameter's name
        project: str | None = None,
        limit: Limit = DEFAULT_LIMIT,
        scope: list[str] | None = None,
    ) -> dict[str, Any]:
        """Search the user's memories (MEMORY.md and the archive) by words or a memory's
        name; typos and word forms match. timeframe: recent (30 days), last_quarter (90
        days) or YYYY-MM. type: user, feedback, project or reference. project: a project's
        name. scope: the task's scope for JSONL record stores (records whose scope holds one
        of these entries). Each result: file, dir, name, description, type, tier (index /
        archive / unindexed / record), date, age_days, snippet, flags."""
        return recall.search(query, timeframe, type, project, limit, scope)

    @server.tool(annotations=READ_ONLY)
    def recall_for_paths(
        paths: list[str],
        symbols: list[str] | None = None,
        scope: list[str] | None = None,
        limit: Limit = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        """Memories to read before editing these files (absolute paths, or relative to your
        project folder) or code symbols: memories citing the file, its folder, its old place
        if it moved, or naming the symbols. Each result says why. Active records of JSONL
        record stores whose scope holds an entry of `scope` (default: the paths and symbols
        as given) come after them, up to `limit` results in all."""
        return recall.recall(paths, symbols, scope, limit)

    @server.tool(annotations=READ_ONLY)
    def read_memory(file: str) -> dict[str, Any]:
        """One memory as written (frontmatter and body) by its file path (absolute, or
        relative to your project folder) or its name, with where it is indexed."""
        return recall.read(file)

    @server.tool(annotations=READ_ONLY)
    def recent_memories(
        timeframe: Timeframe = "recent", project: str | None = None, limit: Limit = DEFAULT_LIMIT
    ) -> dict[str, Any]:
        """Memories dated within a time frame, newest first: recent (30 days), last_quarter
        (90 days) or YYYY-MM; at most `limit`."""
        return recall.recent(timeframe, project, limit)

    return server


def serve(rt: "Runtime", dirs: Sequence[Path]) -> int:
    """Run the server on stdin/stdout until the client closes it."""
    LIBC.one_arena()  # before the SDK starts its threads
    recall = Recall(rt, dirs)
    try:
        build(recall).run("stdio")
    finally:
        recall.close()
    return 0
