"""Find memory dirs and the code tree (repo root) each one talks about.

Reads only, but for `report_refused`, which writes an audit row and memoryd's own record of
what it said (in the state dir, never in a memory dir).
"""

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd import fsops
from memoryd.config import Config
from memoryd.errors import UsageError
from memoryd.index import INDEX_NAME
from memoryd.paths import expand, read_bounded

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

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


@dataclass(frozen=True, slots=True)
class RefusedDir:
    """A memory dir whose link leads out of the repo or Claude home it was found in: left alone."""

    path: Path  # where it was found (the link, or a folder under one)
    target: Path  # where it leads, fully resolved
    kind: str
    label: str
    within: Path  # the repo or Claude home (resolved) it had to stay in

    @property
    def scope(self) -> str:
        return "repo" if self.kind.startswith("repo") else "Claude home"

    @property
    def reason(self) -> str:
        return f"its link leads to {self.target}, outside the {self.scope} {self.within}"

    @property
    def hint(self) -> str:
        return (
            f"to let memoryd maintain it, name {self.target} in paths.extra_memory_dirs "
            "(or name it on the command line)"
        )


Found = MemoryDir | RefusedDir


@dataclass(frozen=True, slots=True)
class Discovery:
    dirs: list[MemoryDir]
    refused: list[RefusedDir]


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
            # Never blocks on a FIFO swapped in since the listing, nor follows a link.
            chunk = read_bounded(transcript, TRANSCRIPT_BYTES, follow=False, prefix=True)
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


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: nothing resolves inside it
        return path.absolute()


def _opted_in(real: Path, config: Config) -> bool:
    """Is this folder named in paths.extra_memory_dirs (by itself or by a link to it)?"""
    return any(_resolved(extra) == real for extra in config.paths.extra_memory_dirs)


def _make(
    path: Path,
    kind: str,
    label: str,
    root: Path | None,
    reason: str,
    config: Config,
    within: Path | None = None,
) -> Found:
    """`within`: the resolved repo or Claude home a dir found there must stay in (a link out of
    it, to a notes vault say, is refused); None for a dir named in the config or by hand."""
    real = _resolved(path)
    if within is not None and not real.is_relative_to(within) and not _opted_in(real, config):
        return RefusedDir(path, real, kind, label, within)
    override = config.override_for(path)
    if override.repo_root is not None:
        root, reason = override.repo_root, "set in the config"
    return MemoryDir(path, real, kind, label, root, reason, via_symlink=real != path.absolute())


def _named(path: Path, kind: str, label: str, root: Path | None, reason: str, config: Config
           ) -> MemoryDir:
    made = _make(path, kind, label, root, reason, config)
    assert isinstance(made, MemoryDir)  # no boundary: never refused
    return made


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
                # Under a resolved folder and no symlink itself: never leaves its parent.
                yield _named(sub, "nested", sub.name, parent.repo_root, parent.repo_reason, config)
            stack.append((sub, depth + 1))


def repo_dirs(repo: Path, config: Config) -> Iterator[Found]:
    """A repo's `.claude/` memory dirs; one that leads out of the repo comes as a RefusedDir."""
    claude = repo / ".claude"
    within = _resolved(repo)
    memory = claude / "memory"
    if _is_dir(memory):
        yield _make(memory, "repo", repo.name, repo, "repo-scope memory", config, within)
    kinds = (("agent-memory", "repo-agent"), ("agent-memory-local", "repo-agent-local"))
    for folder, kind in kinds:
        if (claude / folder / INDEX_NAME).is_file():
            # Some repos keep one memory dir right at agent-memory/ (often a symlink to it).
            yield _make(
                claude / folder, kind, repo.name, repo, "repo-scope memory", config, within
            )
            continue
        for agent in _subdirs(claude / folder):
            yield _make(agent, kind, agent.name, repo, "repo-scope memory", config, within)


def home_dirs(claude_home: Path, config: Config) -> Iterator[Found]:
    """A Claude home's project and agent memory dirs; one leading out of it is refused."""
    within = _resolved(claude_home)
    for project in _subdirs(claude_home / "projects"):
        memory = project / "memory"
        if _is_dir(memory):
            made = _make(memory, "project", project.name, None, "", config, within)
            if isinstance(made, RefusedDir):
                yield made  # its transcripts are not read: they may be as far out as it is
                continue
            root, reason = project_repo_root(project, project.name)
            yield _make(memory, "project", project.name, root, reason, config, within)
    for agent in _subdirs(claude_home / "agent-memory"):
        yield _make(agent, "agent", agent.name, None, "user-scope agent memory", config, within)


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
            return _named(path, kind, path.name, None, "user-scope agent memory", config)
        return _named(path, kind, path.name, parent.parent.parent, "repo-scope memory", config)
    if path.name == "memory" and parent.parent.name == "projects":
        root, reason = project_repo_root(parent, parent.name)
        return _named(path, "project", parent.name, root, reason, config)
    root, reason = _repo_of(path)
    return _named(path, "explicit", path.name, root, reason, config)


_SEARCH_SKIP = frozenset({"node_modules", "vendor", "target", "dist", "build", "__pycache__"})


def _search(top: Path, config: Config) -> Iterator[Found]:
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


def _explicit(path: Path, config: Config) -> list[Found]:
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
        return [_named_dir(path, config)]  # named itself: followed wherever it leads
    found = list(_search(path, config))
    if found:
        return found
    raise UsageError(
        f"{path}: no memory files here; name a memory dir (a folder of *.md memories), "
        "a repo with .claude/, or a Claude home"
    )


def explicit_dirs(path: Path, config: Config) -> list[MemoryDir]:
    """The memory dirs of a folder named on the command line (refused links left out)."""
    found = _explicit(path, config)
    dirs = [f for f in found if isinstance(f, MemoryDir)]
    if not dirs and found:
        refused = found[0]
        assert isinstance(refused, RefusedDir)
        raise UsageError(f"{refused.path}: not followed: {refused.reason}; {refused.hint}")
    return dirs


def discover_all(config: Config, explicit: Iterable[Path] = ()) -> Discovery:
    """Every memory dir, once each (by real path), nested ones included, in path order; and
    the ones refused because their link leads out of their repo or Claude home."""
    explicit = list(explicit)
    found: list[Found] = []
    if explicit:
        for path in explicit:
            found.extend(_explicit(path, config))
    else:
        found.extend(home_dirs(config.paths.claude_home, config))
        for pattern in config.paths.repos:
            for match in sorted(glob.glob(os.path.expanduser(pattern))):
                if _is_dir(Path(match)):
                    found.extend(repo_dirs(Path(match), config))
        for extra in config.paths.extra_memory_dirs:
            if _is_dir(extra):
                root, reason = _repo_of(extra.absolute())
                found.append(_named(expand(str(extra)), "extra", extra.name, root, reason, config))
    result: dict[Path, MemoryDir] = {}
    refused: dict[Path, RefusedDir] = {}
    for md in found:
        if isinstance(md, RefusedDir):
            refused.setdefault(md.path.absolute(), md)
            continue
        for candidate in (md, *nested_dirs(md, config)):
            result.setdefault(candidate.real_path, candidate)
    # A target named on the command line as well is used there, not refused.
    return Discovery(
        dirs=sorted(result.values(), key=lambda d: str(d.real_path)),
        refused=sorted(
            (r for r in refused.values() if r.target not in result), key=lambda r: str(r.path)
        ),
    )


def discover(config: Config, explicit: Iterable[Path] = ()) -> list[MemoryDir]:
    """Every memory dir, once each (by real path), nested ones included, in path order."""
    return discover_all(config, explicit).dirs


REFUSED_RECORD = "refused-links.json"  # in the state dir: which refusals were said, and where
REFUSED_RECORD_MAX = 1024 * 1024


def report_refused(rt: "Runtime", refused: Sequence[RefusedDir]) -> None:
    """Say once (an audit row `dir.refused`) that a link is left alone; again when its target
    changes. A dry run says nothing."""
    if rt.dry_run or not refused:
        return
    record_path = rt.paths.state_dir / REFUSED_RECORD
    try:
        record = json.loads(read_bounded(record_path, REFUSED_RECORD_MAX, follow=False))
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    said = False
    for r in refused:
        key = str(r.path.absolute())
        if record.get(key) == str(r.target):
            continue
        record[key] = str(r.target)
        said = True
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
        fsops.write_private(record_path, json.dumps(record, indent=1, sort_keys=True).encode())


def lock_is_fresh(md: MemoryDir, now: float) -> bool:
    """Is Claude Code consolidating this dir itself (its lock younger than an hour)?"""
    try:
        st = os.lstat(md.real_path / CLAUDE_LOCK)
    except OSError:
        return False
    return now - st.st_mtime < CLAUDE_LOCK_FRESH

