"""Find memory dirs and the code tree (repo root) each one talks about. Reads only."""

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memoryd.config import Config
from memoryd.errors import UsageError
from memoryd.index import INDEX_NAME
from memoryd.paths import expand

TRANSCRIPT_FILES = 20  # newest session transcripts read per project
TRANSCRIPT_BYTES = 256 * 1024  # read at most this much of each
NESTED_DEPTH = 4
_NOT_SLUG = re.compile(r"[^A-Za-z0-9]")


CLAUDE_LOCK = ".consolidate-lock"  # Claude Code's own consolidation lock in a memory dir
CLAUDE_LOCK_FRESH = 3600.0


def slugify(path: str) -> str:
    """Claude Code's project slug: every character outside [A-Za-z0-9] becomes `-` (lossy)."""
    return _NOT_SLUG.sub("-", path)


@dataclass(frozen=True, slots=True)
class MemoryDir:
    path: Path  # where it was found (may pass through a symlink)
    real_path: Path  # the resolved folder all I/O goes to
    kind: str  # project | agent | repo | repo-agent | repo-agent-local | extra | explicit | nested
    label: str  # the agent name, project slug or folder name
    repo_root: Path | None
    repo_reason: str  # how the repo root was found, or why there is none
    via_symlink: bool = False

    @property
    def heading(self) -> str:
        """The `# <name> Memory` title of a new MEMORY.md."""
        if self.kind in ("agent", "repo-agent", "repo-agent-local"):
            return self.label
        if self.repo_root is not None:
            return self.repo_root.name
        return self.label


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if not p.name.startswith(".") and _is_dir(p))
    except OSError:
        return []


def project_repo_root(project_dir: Path, slug: str) -> tuple[Path | None, str]:
    """The `cwd` recorded in the project's session transcripts, checked against its slug."""
    try:
        transcripts = sorted(
            (p for p in project_dir.glob("*.jsonl") if p.is_file() and not p.is_symlink()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )[:TRANSCRIPT_FILES]
    except OSError:
        transcripts = []
    if not transcripts:
        return None, "no session transcripts (*.jsonl) to read a cwd from"
    mismatched: set[str] = set()
    for transcript in transcripts:
        try:
            with transcript.open("rb") as handle:
                chunk = handle.read(TRANSCRIPT_BYTES)
        except OSError:
            continue
        for raw in chunk.split(b"\n"):
            if b'"cwd"' not in raw:
                continue
            try:
                row = json.loads(raw)  # a torn last line simply fails to parse
            except ValueError:
                continue
            cwd = row.get("cwd") if isinstance(row, dict) else None
            if not isinstance(cwd, str) or not cwd:
                continue
            if slugify(cwd) != slug:
                mismatched.add(cwd)
                continue
            if not _is_dir(Path(cwd)):
                return None, f"the project folder {cwd} no longer exists"
            return Path(cwd), f"cwd in {transcript.name}"
    if mismatched:
        return None, f"transcripts name cwd {sorted(mismatched)[0]}, which does not match the slug"
    return None, "no cwd found in the session transcripts"


def _repo_of(path: Path) -> tuple[Path | None, str]:
    """For a folder named on the command line: the repo holding its `.claude/`, or a git root."""
    parts = path.parts
    if ".claude" in parts:
        root = Path(*parts[: parts.index(".claude")])
        return root, "the folder holding .claude/"
    for parent in (path, *path.parents):
        if (parent / ".git").exists():
            return parent, "git work tree"
    return None, "not inside a repo (no .claude/ or .git above it)"


def _make(
    path: Path, kind: str, label: str, root: Path | None, reason: str, config: Config
) -> MemoryDir:
    real = path.resolve()
    override = config.override_for(path)
    if override.repo_root is not None:
        root, reason = override.repo_root, "set in the config"
    return MemoryDir(path, real, kind, label, root, reason, via_symlink=real != path.absolute())


def nested_dirs(parent: MemoryDir, config: Config) -> Iterator[MemoryDir]:
    """Subfolders holding their own MEMORY.md are memory dirs of their own."""
    stack = [(parent.real_path, 0)]
    while stack:
        folder, depth = stack.pop()
        if depth >= NESTED_DEPTH:
            continue
        for sub in _subdirs(folder):
            if sub.is_symlink():
                continue
            if (sub / INDEX_NAME).is_file():
                yield _make(sub, "nested", sub.name, parent.repo_root, parent.repo_reason, config)
            stack.append((sub, depth + 1))


def repo_dirs(repo: Path, config: Config) -> Iterator[MemoryDir]:
    claude = repo / ".claude"
    memory = claude / "memory"
    if _is_dir(memory):
        yield _make(memory, "repo", repo.name, repo, "repo-scope memory", config)
    kinds = (("agent-memory", "repo-agent"), ("agent-memory-local", "repo-agent-local"))
    for folder, kind in kinds:
        if (claude / folder / INDEX_NAME).is_file():
            # Some repos keep one memory dir right at agent-memory/ (often a symlink to it).
            yield _make(claude / folder, kind, repo.name, repo, "repo-scope memory", config)
            continue
        for agent in _subdirs(claude / folder):
            yield _make(agent, kind, agent.name, repo, "repo-scope memory", config)


def home_dirs(claude_home: Path, config: Config) -> Iterator[MemoryDir]:
    for project in _subdirs(claude_home / "projects"):
        memory = project / "memory"
        if _is_dir(memory):
            root, reason = project_repo_root(project, project.name)
            yield _make(memory, "project", project.name, root, reason, config)
    for agent in _subdirs(claude_home / "agent-memory"):
        yield _make(agent, "agent", agent.name, None, "user-scope agent memory", config)


def _named_dir(path: Path, config: Config) -> MemoryDir:
    """A memory dir named directly: recognise the standard layouts by their folder names."""
    parent = path.parent
    if parent.name in ("agent-memory", "agent-memory-local"):
        kind = (
            "agent"
            if parent.parent.name != ".claude"
            else ("repo-agent" if parent.name == "agent-memory" else "repo-agent-local")
        )
        if kind == "agent":
            return _make(path, kind, path.name, None, "user-scope agent memory", config)
        return _make(path, kind, path.name, parent.parent.parent, "repo-scope memory", config)
    if path.name == "memory" and parent.parent.name == "projects":
        root, reason = project_repo_root(parent, parent.name)
        return _make(path, "project", parent.name, root, reason, config)
    root, reason = _repo_of(path)
    return _make(path, "explicit", path.name, root, reason, config)


_SEARCH_SKIP = frozenset({"node_modules", "vendor", "target", "dist", "build", "__pycache__"})


def _search(top: Path, config: Config) -> Iterator[MemoryDir]:
    """Repos (a `.claude/` folder) and MEMORY.md folders below a folder, a few levels deep."""
    stack = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        if _is_dir(folder / ".claude"):
            yield from repo_dirs(folder, config)
        if folder != top and (folder / INDEX_NAME).is_file():
            yield _named_dir(folder, config)
            continue  # its own subfolders are found as nested dirs
        if depth < NESTED_DEPTH:
            stack.extend(
                (sub, depth + 1)
                for sub in reversed(_subdirs(folder))
                if sub.name not in _SEARCH_SKIP and not sub.is_symlink()
            )


def explicit_dirs(path: Path, config: Config) -> list[MemoryDir]:
    """A folder named on the command line: a memory dir, a repo, or a Claude home."""
    if not _is_dir(path):
        raise UsageError(f"{path}: no such folder; name a memory dir, a repo or a Claude home")
    path = path.absolute()
    if (path / "projects").is_dir() or (path / "agent-memory").is_dir():
        return list(home_dirs(path, config))
    has_md = (path / INDEX_NAME).exists() or any(
        p.suffix == ".md" for p in path.iterdir() if not p.name.startswith(".")
    )
    if has_md:
        return [_named_dir(path, config)]
    found = list(_search(path, config))
    if found:
        return found
    raise UsageError(
        f"{path}: no memory files here; name a memory dir (a folder of *.md memories), "
        "a repo with .claude/, or a Claude home"
    )


def discover(config: Config, explicit: Iterable[Path] = ()) -> list[MemoryDir]:
    """Every memory dir, once each (by real path), nested ones included, in path order."""
    explicit = list(explicit)
    found: list[MemoryDir] = []
    if explicit:
        for path in explicit:
            found.extend(explicit_dirs(path, config))
    else:
        found.extend(home_dirs(config.paths.claude_home, config))
        for pattern in config.paths.repos:
            for match in sorted(glob.glob(os.path.expanduser(pattern))):
                if _is_dir(Path(match)):
                    found.extend(repo_dirs(Path(match), config))
        for extra in config.paths.extra_memory_dirs:
            if _is_dir(extra):
                root, reason = _repo_of(extra.absolute())
                found.append(_make(expand(str(extra)), "extra", extra.name, root, reason, config))
    result: dict[Path, MemoryDir] = {}
    for md in found:
        for candidate in (md, *nested_dirs(md, config)):
            result.setdefault(candidate.real_path, candidate)
    return sorted(result.values(), key=lambda d: str(d.real_path))


def lock_is_fresh(md: MemoryDir, now: float) -> bool:
    """Is Claude Code consolidating this dir itself (its lock younger than an hour)?"""
    try:
        st = os.lstat(md.real_path / CLAUDE_LOCK)
    except OSError:
        return False
    return now - st.st_mtime < CLAUDE_LOCK_FRESH

