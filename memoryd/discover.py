"""Find memory dirs and the code tree (repo root) each one talks about.

Reads only, but for `report_refused`, which writes an audit row and memoryd's own record of
what it said (in the state dir, never in a memory dir).
"""

import glob
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
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


GIT_FILE_BYTES = 4096  # a worktree's `.git` file and its `commondir`: one line each
_BOM = b"\xef\xbb\xbf"

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
class EmptyRepo:
    """A repo named on the command line that has no memory dir at all (yet)."""

    path: Path
    looked_in: list[str]

    @property
    def message(self) -> str:
        return (
            f"{self.path}: a repo with no memory dirs yet (looked for "
            f"{', '.join(self.looked_in)}); nothing to do"
        )


@dataclass(frozen=True, slots=True)
class Discovery:
    dirs: list[MemoryDir]
    refused: list[RefusedDir]
    empty_repos: list[EmptyRepo] = field(default_factory=list)


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


def _layout_dir(path: Path, config: Config) -> MemoryDir | None:
    """A folder at one of the standard memory-dir layouts, recognised by its folder names
    (empty or not: a dir the agent has not written to yet is still a memory dir)."""
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
    if parent.name == ".claude" and path.name in ("memory", "agent-memory", "agent-memory-local"):
        repo = parent.parent
        kinds = {"memory": "repo", "agent-memory": "repo-agent"}
        kind = kinds.get(path.name, "repo-agent-local")
        return _named(path, kind, repo.name, repo, "repo-scope memory", config)
    return None


def memory_dir_at(path: Path, config: Config) -> MemoryDir:
    """A folder taken as a memory dir itself: one memoryd already knows as one (its state,
    journal or trash says so), or named directly. The standard layouts by their folder names."""
    if not _is_dir(path):
        raise UsageError(f"{path}: no such folder; name a memory dir, a repo or a Claude home")
    found = _layout_dir(path, config)
    if found is not None:
        return found
    root, reason = _repo_of(path)
    return _named(path, "explicit", path.name, root, reason, config)



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


def is_repo(path: Path) -> bool:
    """A folder with `.git` (a folder, or the file a git worktree has) or `.claude/`."""
    return os.path.lexists(path / ".git") or _is_dir(path / ".claude")


def _git_common_root(repo: Path) -> Path | None:
    """For a git worktree (a `.git` file, `gitdir: <main>/.git/worktrees/<name>`): the main
    work tree, whose path keys Claude Code's auto memory; None for anything else."""
    try:
        head = read_bounded(repo / ".git", GIT_FILE_BYTES, follow=False)
    except OSError:
        return None  # a folder (an ordinary repo), or nothing readable
    line = head.decode("utf-8", "replace").strip()
    if not line.startswith("gitdir:"):
        return None
    gitdir = Path(line.removeprefix("gitdir:").strip())
    gitdir = gitdir if gitdir.is_absolute() else repo / gitdir
    try:
        common = read_bounded(gitdir / "commondir", GIT_FILE_BYTES, follow=False)
    except OSError:
        return None
    common_dir = Path(common.decode("utf-8", "replace").strip())
    common_dir = _resolved(common_dir if common_dir.is_absolute() else gitdir / common_dir)
    if common_dir.name != ".git" or not _is_dir(common_dir.parent):
        return None  # a bare repo: no main work tree
    return common_dir.parent


def auto_memory_dirs(repo: Path, config: Config) -> Iterator[Found]:
    """The user's auto-memory dir for a repo, `<claude_home>/projects/<slug>/memory/` (slug of
    the repo's absolute path; for a worktree, also of its main work tree), where one exists."""
    home = config.paths.claude_home
    roots = [repo]
    main = _git_common_root(repo)
    if main is not None and main != repo:
        roots.append(main)
    for root in roots:
        slug = slugify(str(root))
        memory = home / "projects" / slug / "memory"
        if not _is_dir(memory):
            continue
        within = _resolved(home)
        made = _make(memory, "project", slug, None, "", config, within)
        if isinstance(made, RefusedDir):
            yield made
            continue
        found, reason = project_repo_root(memory.parent, slug)
        if found is None:
            found, reason = root, f"the repo its slug names ({reason})"
        yield _make(memory, "project", slug, found, reason, config, within)


def looked_in(repo: Path, config: Config) -> list[str]:
    """Where the memory dirs of a repo would be (for saying that it has none)."""
    claude = repo / ".claude"
    home = config.paths.claude_home / "projects" / slugify(str(repo)) / "memory"
    return [
        f"{claude / 'memory'}/",
        f"{claude / 'agent-memory'}/<agent>/",
        f"{claude / 'agent-memory-local'}/<agent>/",
        f"{home}/",
    ]


_SEARCH_SKIP = frozenset({"node_modules", "vendor", "target", "dist", "build", "__pycache__"})


def _search(top: Path, config: Config) -> Iterator[Found]:
    """The memory dirs below a folder, a few levels deep: each repo's (its `.claude/` dirs and
    the user's auto-memory dir for it) and, outside repos, folders holding a MEMORY.md. Inside
    a repo only `.claude/` dirs count (a sub-project's too): its other markdown is the repo's
    own, never memories."""
    stack = [(top, 0, False)]
    while stack:
        folder, depth, in_repo = stack.pop()
        if _is_dir(folder / ".claude"):
            yield from repo_dirs(folder, config)
        if not in_repo and is_repo(folder):
            yield from auto_memory_dirs(folder, config)
            in_repo = True
        elif not in_repo and folder != top and (folder / INDEX_NAME).is_file():
            yield memory_dir_at(folder, config)
            continue  # its own subfolders are found as nested dirs
        if depth < NESTED_DEPTH:
            stack.extend(
                (sub, depth + 1, in_repo)
                for sub in reversed(_subdirs(folder))
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
    if not (_is_dir(path / "projects") or _is_dir(path / "agent-memory")):
        return False
    # A repo may have a projects/ folder of its own; a Claude home kept in git (dotfiles)
    # is still one when it is named .claude or is the configured one.
    return (
        not is_repo(path)
        or path.name == ".claude"
        or _resolved(path) == _resolved(config.paths.claude_home)
    )


def _explicit(path: Path, config: Config) -> tuple[list[Found], bool]:
    """A folder named on the command line: a memory dir, a repo, a Claude home, or a folder
    holding any of those. Also whether it is a repo (which may have no memory dirs yet)."""
    if not _is_dir(path):
        raise UsageError(f"{path}: no such folder; name a memory dir, a repo or a Claude home")
    path = path.absolute()
    layout = _layout_dir(path, config)
    if layout is not None:
        return [layout], False
    if _is_claude_home(path, config):
        return list(home_dirs(path, config)), False
    if is_repo(path):
        # Never a memory dir itself, whatever markdown it holds (its README, its DESIGN.md).
        return list(_search(path, config)), True
    if _has_memories(path):
        return [memory_dir_at(path, config)], False  # named itself: followed wherever it leads
    found = list(_search(path, config))
    if found:
        return found, False
    raise UsageError(
        f"{path}: no memory files here; name a memory dir (a folder of *.md memories), "
        "a repo with .claude/, or a Claude home"
    )


def explicit_dirs(path: Path, config: Config) -> list[MemoryDir]:
    """The memory dirs of a folder named on the command line (refused links left out)."""
    found, _ = _explicit(path, config)
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
    empty: list[EmptyRepo] = []
    if explicit:
        for path in explicit:
            named, repo = _explicit(path, config)
            found.extend(named)
            if repo and not named:
                empty.append(EmptyRepo(path.absolute(), looked_in(path.absolute(), config)))
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
        empty_repos=empty,
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


# --- Claude Code's `.consolidate-lock` ----------------------------------------------------------
# As Claude Code 2.1.332 means it (its autoDream lock): held only while the file's mtime is under
# an hour old AND the PID its body starts with (`parseInt(body.trim(), 10)`) is alive and above 1.
# When a dream of its own finishes, the file stays: its mtime is then the last consolidation
# (a failed one puts the mtime back). A body that gives no number (empty, garbage) holds
# nothing. Liveness is `kill(pid, 0)`; unlike Claude Code, which counts EPERM (a process of
# another user) as dead, memoryd counts it alive: deferring costs at most the hour.
_LOCK_PID = re.compile(rb"\s*([+-]?[0-9]+)")
_LOCK_READ = 64  # a PID, a newline and a timestamp: all Claude Code writes


def pid_alive(pid: int) -> bool:
    """Whether a process has this PID: `kill(pid, 0)` succeeds, or fails with EPERM."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):  # ESRCH; a number no PID can be
        return False
    return True


@dataclass(frozen=True, slots=True)
class ClaudeLock:
    """What a memory dir's `.consolidate-lock` says."""

    mtime: float  # Claude Code's last consolidation (or the start of the one under way)
    pid: int | None  # the PID its body names, if any
    held: bool  # fresh and its PID alive: Claude Code is consolidating the dir now

    @property
    def why(self) -> str:
        return f"Claude Code's {CLAUDE_LOCK} is held (PID {self.pid}, alive; under an hour old)"


def claude_lock(
    md: MemoryDir, now: float, alive: Callable[[int], bool] = pid_alive
) -> ClaudeLock | None:
    """The dir's `.consolidate-lock` (at its root only), or None when there is none (or it is
    no regular file: a link is not followed, a FIFO never opened)."""
    path = md.real_path / CLAUDE_LOCK
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        body = read_bounded(path, _LOCK_READ, follow=False, prefix=True)
    except OSError:
        return None
    found = _LOCK_PID.match(body)
    pid = int(found.group(1)) if found else None
    fresh = now - st.st_mtime < CLAUDE_LOCK_FRESH
    return ClaudeLock(st.st_mtime, pid, fresh and pid is not None and pid > 1 and alive(pid))


def lock_is_fresh(md: MemoryDir, now: float, alive: Callable[[int], bool] = pid_alive) -> bool:
    """Is Claude Code consolidating this dir itself (see `claude_lock`)?"""
    lock = claude_lock(md, now, alive)
    return lock is not None and lock.held

