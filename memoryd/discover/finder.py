"""Find memory dirs: every one memoryd maintains (`discover_all`), or those a path names.
Reads only, but for `report_refused`, which writes an audit row and memoryd's own record of
what it said (in the state store, never in a memory dir).
"""

import glob
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.config import Config
from memoryd.discover.cwd_cache import CwdCache
from memoryd.errors import UsageError
from memoryd.model.agentview import INDEX_NAME
from memoryd.paths import expand, read_bounded
from memoryd.storage.statedb import Schema, StateDB

if TYPE_CHECKING:
    from memoryd.runtime import Runtime
from memoryd.discover.claude_view import ClaudeView, auto_memory_dirs
from memoryd.discover.dirs import NESTED_DEPTH, home_dirs, named_dir, nested_dirs, repo_dirs
from memoryd.discover.found import Discovery, EmptyRepo, Found, MemoryDir, RefusedDir
from memoryd.discover.look import is_dir, is_repo, one_look, resolved, subdirs
from memoryd.discover.slugs import looked_in
from memoryd.discover.transcripts import Transcripts, project_repo_root, repo_of

_BOM = b"\xef\xbb\xbf"


def _layout_dir(path: Path, config: Config) -> MemoryDir | None:
    """A folder at one of the standard memory-dir layouts, recognised by its folder names
    (empty or not: a dir the agent has not written to yet is still a memory dir)."""
    parent = path.parent
    if parent.name in ("agent-memory", "agent-memory-local"):
        # The Claude home's own agent-memory is the user's, not a repo's.
        home = parent.name == "agent-memory" and resolved(parent.parent) == resolved(
            config.paths.claude_home
        )
        if parent.parent.name != ".claude" or home:
            return named_dir(path, "agent", path.name, None, "user-scope agent memory", config)
        kind = "repo-agent" if parent.name == "agent-memory" else "repo-agent-local"
        return named_dir(path, kind, path.name, parent.parent.parent, "repo-scope memory", config)
    if path.name == "memory" and parent.parent.name == "projects":
        root, reason = project_repo_root(parent, parent.name)
        return named_dir(path, "project", parent.name, root, reason, config)
    if parent.name == ".claude" and path.name in ("memory", "agent-memory", "agent-memory-local"):
        repo = parent.parent
        kinds = {"memory": "repo", "agent-memory": "repo-agent"}
        kind = kinds.get(path.name, "repo-agent-local")
        return named_dir(path, kind, repo.name, repo, "repo-scope memory", config)
    return None


def memory_dir_at(path: Path, config: Config) -> MemoryDir:
    """A folder taken as a memory dir itself: one memoryd already knows as one (its state,
    journal or trash says so), or named directly. The standard layouts by their folder names."""
    if not is_dir(path):
        raise UsageError(f"{path}: no such folder; name a memory dir, a repo or a Claude home")
    found = _layout_dir(path, config)
    if found is not None:
        return found
    view = ClaudeView(config)
    shared = view.everywhere()
    if shared is not None and resolved(shared[0]) == resolved(path):
        # An auto-memory dir by where Claude Code keeps it: loaded (and stripped) as one.
        return view.shared_dir(path, shared[1])
    root, reason = repo_of(path)
    return named_dir(path, "explicit", path.name, root, reason, config)


def memory_dir_of(file: Path, config: Config) -> MemoryDir:
    """The memory dir holding a file named on the command line (`explain FILE`); a repo
    root is none, whatever markdown it holds."""
    folder = file.parent
    if _layout_dir(folder, config) is None and is_repo(folder):
        raise UsageError(
            f"{file}: in the repo root {folder}, which is no memory dir (its markdown is the "
            "repo's own); name a file in one of its memory dirs (see `memoryd dirs "
            f"{folder}`)"
        )
    return memory_dir_at(folder, config)


_SEARCH_SKIP = frozenset({"node_modules", "vendor", "target", "dist", "build", "__pycache__"})


def _search(top: Path, config: Config, view: ClaudeView) -> Iterator[Found]:
    """The memory dirs a few levels below a folder: each repo's (`.claude/` dirs, its
    auto-memory dirs) and, outside repos, folders holding a MEMORY.md (a repo's other
    markdown is its own, never memories)."""
    stack = [(top, 0, False)]
    while stack:
        folder, depth, in_repo = stack.pop()
        if is_dir(folder / ".claude"):
            yield from repo_dirs(folder, config)
        if not in_repo and is_repo(folder):
            yield from auto_memory_dirs(folder, config, view)
            in_repo = True
        elif not in_repo and folder != top and (folder / INDEX_NAME).is_file():
            yield memory_dir_at(folder, config)
            continue  # its own subfolders are found as nested dirs
        if depth < NESTED_DEPTH:
            stack.extend(
                (sub, depth + 1, in_repo)
                for sub in reversed(subdirs(folder))
                if sub.name not in _SEARCH_SKIP and not sub.is_symlink()
            )


def _has_memories(path: Path) -> bool:
    """A MEMORY.md, or a `*.md` with frontmatter (a memory) right in the folder; a README or
    notes without frontmatter do not make a folder a memory dir."""
    if os.path.lexists(path / INDEX_NAME):
        return True
    try:
        entries = [p for p in path.iterdir() if p.suffix == ".md" and not p.name.startswith(".")]
    except OSError:
        return False
    for entry in sorted(entries):
        try:
            head = read_bounded(entry, len(_BOM) + 5, follow=False, prefix=True)
        except OSError:
            continue  # a link, a FIFO, unreadable: never read here
        if head.removeprefix(_BOM).startswith((b"---\n", b"---\r\n")):
            return True
    return False


def _is_claude_home(path: Path, config: Config) -> bool:
    """A folder with `projects/` or `agent-memory/` that is not a repo's own."""
    if not (is_dir(path / "projects") or is_dir(path / "agent-memory")):
        return False
    # A repo may have a projects/ folder; a Claude home in git (dotfiles) is still one.
    return (
        not is_repo(path)
        or path.name == ".claude"
        or resolved(path) == resolved(config.paths.claude_home)
    )


def _explicit(path: Path, config: Config, view: ClaudeView) -> tuple[list[Found], bool]:
    """A folder named on the command line: a memory dir, a repo, a Claude home, or a folder
    holding any of those. Also whether it is a repo (which may have no memory dirs yet)."""
    if not is_dir(path):
        raise UsageError(f"{path}: no such folder; name a memory dir, a repo or a Claude home")
    path = path.absolute()
    layout = _layout_dir(path, config)
    if layout is not None:
        return [layout], False
    if _is_claude_home(path, config):
        return list(home_dirs(path, config, Transcripts(path / "projects", view.cache))), False
    if is_repo(path):
        # Never a memory dir itself, whatever markdown it holds (its README, its DESIGN.md).
        return list(_search(path, config, view)), True
    if _has_memories(path):
        return [memory_dir_at(path, config)], False  # named itself: followed wherever it leads
    found = list(_search(path, config, view))
    if found:
        return found, False
    raise UsageError(
        f"{path}: no memory files here; name a memory dir (a folder of *.md memories), "
        "a repo with .claude/, or a Claude home"
    )


def discover_all(
    config: Config, explicit: Iterable[Path] = (), *, cache: CwdCache | None = None
) -> Discovery:
    """Every memory dir, once each (by real path), nested ones included, in path order; and
    those refused because their link leads out of their repo or Claude home. `cache`: the
    transcripts' (default: in the state dir; `CwdCache.off()` reads every transcript)."""
    view = ClaudeView(config, cache=cache)
    with one_look():
        found = _discover_all(config, list(explicit), view)
    view.cache.save()
    return found


def _discover_all(config: Config, explicit: list[Path], view: "ClaudeView") -> Discovery:
    found: list[Found] = []
    empty: list[EmptyRepo] = []
    if explicit:
        for path in explicit:
            named, repo = _explicit(path, config, view)
            found.extend(named)
            if repo and not named:
                empty.append(EmptyRepo(path.absolute(), looked_in(path.absolute(), config)))
    else:
        found.extend(home_dirs(config.paths.claude_home, config, view.transcripts))
        found.extend(view.relocated())
        # Repo-scope memory of every repo a session ran in, without paths.repos.
        for known in view.known_repos():
            found.extend(repo_dirs(known, config))
        for pattern in config.paths.repos:
            for match in sorted(glob.glob(os.path.expanduser(pattern))):
                if is_dir(Path(match)):
                    found.extend(repo_dirs(Path(match), config))
        for extra in config.paths.extra_memory_dirs:
            if is_dir(extra):
                root, reason = repo_of(extra.absolute())
                found.append(
                    named_dir(expand(str(extra)), "extra", extra.name, root, reason, config)
                )
    result: dict[Path, MemoryDir] = {}
    refused: dict[Path, RefusedDir] = {}
    for md in found:
        if isinstance(md, RefusedDir):
            refused.setdefault(md.path.absolute(), md)
            continue
        for candidate in (md, *nested_dirs(md, config)):
            result.setdefault(candidate.real_path, candidate)
    for real, md in result.items():
        why = view.not_loaded(md)
        if why:
            result[real] = replace(md, not_loaded=why)
    switch = view.switch()
    # A target named on the command line as well is used there, not refused.
    return Discovery(
        auto_memory_off="" if switch.on else switch.source,
        warnings=view.warnings,
        dirs=sorted(result.values(), key=lambda d: str(d.real_path)),
        refused=sorted(
            (r for r in refused.values() if r.target not in result), key=lambda r: str(r.path)
        ),
        empty_repos=empty,
    )


def discover(config: Config, explicit: Iterable[Path] = ()) -> list[MemoryDir]:
    """Every memory dir, once each (by real path), nested ones included, in path order."""
    return discover_all(config, explicit).dirs


# Which refused links were said, and the target each led to then (`refused_link`): a link is
# said again when its target changes, and all of them once the record is past its bound.
REFUSED = Schema(
    "refused_links",
    1,
    "CREATE TABLE refused_link (link TEXT PRIMARY KEY, target TEXT NOT NULL) WITHOUT ROWID",
    ("refused_link",),
)
REFUSED_RECORD_MAX = 1024 * 1024  # characters of paths: past it the record starts over


def report_refused(rt: "Runtime", refused: Sequence[RefusedDir]) -> None:
    """Say once (an audit row `dir.refused`) that a link is left alone; again when its target
    changes. A dry run says nothing and writes nothing."""
    if rt.dry_run or not refused:
        return
    db = StateDB.in_state_dir(rt.paths.state_dir)
    conn = db.reader(REFUSED)
    record = dict(conn.execute("SELECT link, target FROM refused_link")) if conn else {}
    full = sum(len(k) + len(v) for k, v in record.items()) > REFUSED_RECORD_MAX
    said = {str(r.path.absolute()): r for r in refused}
    said = {k: r for k, r in said.items() if full or record.get(k) != str(r.target)}
    for r in said.values():
        rt.audit.write(
            "dir.refused",
            dir=r.path,
            kind=r.kind,
            target=str(r.target),
            within=str(r.within),
            reason=r.reason,
            hint=r.hint,
        )
    if said:
        db.ensure(REFUSED)
        with db.transaction() as tx:
            tx.execute("DELETE FROM refused_link WHERE ?", (full,))
            rows = [(k, str(r.target)) for k, r in said.items()]
            tx.executemany("INSERT OR REPLACE INTO refused_link VALUES (?, ?)", rows)
