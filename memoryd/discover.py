"""Find memory dirs and the code tree (repo root) each one talks about.

Reads only, but for `report_refused`, which writes an audit row and memoryd's own record of
what it said (in the state dir, never in a memory dir).
"""

import contextlib
import glob
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd import fsops, safejson
from memoryd.claude_env import (
    COWORK_OVERRIDE,
    REMOTE_MEMORY_DIR,
    Settings,
    Switch,
    auto_memory_switch,
    project_settings,
    setting_dir,
    user_settings,
)
from memoryd.config import Config
from memoryd.cwd_cache import CwdCache, Head, usable_cwd
from memoryd.errors import UsageError
from memoryd.model.index import INDEX_NAME
from memoryd.paths import BoundedLines, expand, open_regular, read_bounded

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


SLUG_MAX = 200  # a longer slug is cut there and gets the path's hash


def _dashes(match: re.Match[str]) -> str:
    return "--" if ord(match.group()) > 0xFFFF else "-"  # two UTF-16 units: two dashes


def _string_hash(text: str) -> int:
    """JavaScript's `h = (h << 5) - h + unit` over the UTF-16 code units, kept to int32."""
    h = 0
    for char in text:
        code = ord(char)
        if code > 0xFFFF:  # a surrogate pair
            code -= 0x10000
            h = (h * 31 + 0xD800 + (code >> 10)) & 0xFFFFFFFF
            code = 0xDC00 + (code & 0x3FF)
        h = (h * 31 + code) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, rest = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
        if number == 0:
            return digits


def slugify(path: str) -> str:
    """Claude Code's project slug (lossy): every UTF-16 code unit outside [A-Za-z0-9] becomes
    `-` (an emoji two, a flag four); a slug over 200 characters is its first 200, `-` and the
    base-36 of the absolute 32-bit string hash of the path. The path is taken as it is: no
    Unicode normalisation (an NFD `e\u0301` gives `e-`, as the client does on Linux)."""
    slug = _NOT_SLUG.sub(_dashes, path)
    if len(slug) <= SLUG_MAX:
        return slug
    return f"{slug[:SLUG_MAX]}-{_base36(abs(_string_hash(path)))}"


@dataclass(frozen=True, slots=True)
class MemoryDir:
    path: Path  # where it was found (may pass through a symlink)
    real_path: Path  # the resolved folder all I/O goes to
    kind: str  # project | agent | repo | repo-agent | repo-agent-local | extra | explicit | nested
    label: str  # the agent name, project slug or folder name
    repo_root: Path | None
    repo_reason: str  # how the repo root was found, or why there is none
    via_symlink: bool = False
    # Why Claude Code loads none of it into a session (auto memory off, or kept elsewhere);
    # empty when it does, or when memoryd cannot tell. memoryd maintains it all the same.
    not_loaded: str = ""

    @property
    def heading(self) -> str:
        """The `# <name> Memory` title of a new MEMORY.md, on one line (a folder's name may
        hold a line break, which would put lines of its own into the index)."""
        if self.kind in ("agent", "repo-agent", "repo-agent-local"):
            name = self.label
        elif self.repo_root is not None:
            name = self.repo_root.name
        else:
            name = self.label
        return " ".join(name.splitlines()) if "\n" in name or "\r" in name else name


@dataclass(frozen=True, slots=True)
class RefusedDir:
    """A memory dir whose link leads out of the repo or Claude home it was found in: left alone."""

    path: Path  # where it was found (the link, or a folder under one)
    target: Path  # where it leads, fully resolved
    kind: str
    label: str
    within: Path  # the repo or Claude home (resolved) it had to stay in
    source: str = ""  # the checked-in setting that names it, when no link does

    @property
    def scope(self) -> str:
        return "repo" if self.kind.startswith("repo") or self.source else "Claude home"

    @property
    def reason(self) -> str:
        if self.source:
            return (
                f"{self.source} names {self.target}, outside the repo {self.within} and the "
                "Claude home (a checked-in setting is followed only inside them)"
            )
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
    auto_memory_off: str = ""  # what turned Claude Code's auto memory off everywhere, if anything
    warnings: list[str] = field(default_factory=list)  # settings files that could not be used


class _Look:
    """What one discovery learnt of the file system, so that it looks once at each thing:
    the folders with no symlink on their way (their real path is themselves), each folder's
    `.git`, each worktree's main work tree. A run is short; a change during it is a race the
    uncached code has as well."""

    def __init__(self) -> None:
        self.plain: dict[str, bool] = {"/": True}
        self.resolved: dict[str, Path] = {}
        self.dot_git: dict[str, int | None] = {}  # folder -> st_mode of its .git, or None
        self.common: dict[str, Path | None] = {}
        self.is_dir: dict[str, bool] = {}
        self.subdirs: dict[str, list[str]] = {}
        self.no_claude: dict[str, bool] = {}

    def is_plain(self, path: str) -> bool:
        """No component of the absolute, normal `path` is a symlink (a missing one is none)."""
        unknown = []
        while path not in self.plain:
            unknown.append(path)
            path = os.path.dirname(path)
        known = self.plain[path]
        for folder in reversed(unknown):  # from the top down, one lstat each
            known = known and not os.path.islink(folder)
            self.plain[folder] = known
        return known


_LOOK: ContextVar[_Look | None] = ContextVar("memoryd_discover_look", default=None)


@contextlib.contextmanager
def _one_look() -> Iterator[None]:
    """Within it, the file system is looked at once per thing (the discovery of one run)."""
    if _LOOK.get() is not None:
        yield
        return
    token = _LOOK.set(_Look())
    try:
        yield
    finally:
        _LOOK.reset(token)


def _is_dir(path: Path) -> bool:
    look = _LOOK.get()
    if look is None:
        return _look_is_dir(path)
    key = str(path)
    known = look.is_dir.get(key)
    if known is None:
        known = look.is_dir[key] = _look_is_dir(path)
    return known


def _look_is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _subdirs(path: Path) -> list[Path]:
    """The folders (or links to folders) in `path` but hidden ones, by name."""
    look = _LOOK.get()
    key = str(path)
    names = look.subdirs.get(key) if look is not None else None
    if names is None:
        names = _subdir_names(path)
        if look is not None:
            look.subdirs[key] = names
    return [path / name for name in names]


def _subdir_names(path: Path) -> list[str]:
    names = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir():  # follows a link, as Path.is_dir does
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return []
    return sorted(names)


def _no_claude(folder: Path) -> bool:
    """No `.claude/` folder here, so none of its settings files exist (a `.claude/` that
    cannot be looked at is no answer: its files are read, and fail, as they would)."""
    look = _LOOK.get()
    key = str(folder)
    if look is not None and key in look.no_claude:
        return look.no_claude[key]
    try:
        none = not stat.S_ISDIR(os.stat(folder / ".claude").st_mode)
    except (FileNotFoundError, NotADirectoryError):
        none = True
    except OSError:
        none = False
    if look is not None:
        look.no_claude[key] = none
    return none


def _transcripts(project_dir: Path) -> list[tuple[str, os.stat_result]]:
    """The project's newest session transcripts (regular files, never links), newest first,
    each with its lstat; ties in the listing's order. One lstat a file."""
    found: list[tuple[str, os.stat_result]] = []
    try:
        with os.scandir(project_dir) as entries:
            for entry in entries:
                if not entry.name.endswith(".jsonl"):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                if stat.S_ISREG(st.st_mode):
                    found.append((entry.name, st))
    except OSError:
        return []
    found.sort(key=lambda item: item[1].st_mtime, reverse=True)
    return found[:TRANSCRIPT_FILES]


class _HeadLines(BoundedLines):
    CHUNK = 8192  # the first rows of a transcript are short; a cwd is usually in the first


def _first_cwd(transcript: Path, slug: str) -> tuple[Head, bool]:
    """The first recorded `cwd` whose slug is `slug`, read line by line up to it (it sits in
    the first rows; the rest of a big transcript is never read), and the least of the other
    cwds before it; and whether the read went through (a failed one is not remembered)."""
    try:
        # Never blocks on a FIFO swapped in since the listing, nor follows a link.
        fd, _ = open_regular(transcript, follow=False)
    except OSError:
        return (None, None), False
    other: str | None = None
    try:
        # A torn last line (a session mid-write) is no line yet; an over-long row is skipped.
        for _, raw in _HeadLines(fd, max_line=TRANSCRIPT_BYTES, max_bytes=TRANSCRIPT_BYTES):
            if raw is None or b'"cwd"' not in raw:
                continue
            try:
                row = safejson.loads(raw)
            except ValueError:
                continue
            cwd = row.get("cwd") if isinstance(row, dict) else None
            if not usable_cwd(cwd):
                continue  # a relative one would be taken from memoryd's own working folder
            assert isinstance(cwd, str)
            if slugify(cwd) == slug:
                return (cwd, other), True
            other = cwd if other is None else min(other, cwd)
    except OSError:
        return (None, other), False
    finally:
        os.close(fd)
    return (None, other), True


def _own_cwd(project_dir: Path, slug: str, cache: CwdCache | None = None) -> tuple[str | None, str]:
    """The cwd the project's own transcripts record (matching its slug), and where, or why
    there is none; the newest transcript that records one decides. `cache`: what earlier
    runs read, by each transcript's identity (an unchanged transcript is not opened)."""
    transcripts = _transcripts(project_dir)
    if not transcripts:
        return None, "no session transcripts (*.jsonl) to read a cwd from"
    cache = cache if cache is not None else CwdCache.off()
    least: str | None = None  # of the cwds that do not match the slug
    for name, st in transcripts:
        head = cache.head(project_dir, slug, name, st)
        if head is None:
            head, whole = _first_cwd(project_dir / name, slug)
            cache.reads += 1
            if whole:
                cache.keep(project_dir, slug, name, st, head)
        cwd, other = head
        if other is not None:
            least = other if least is None else min(least, other)
        if cwd is not None:
            return cwd, name
    if least is not None:
        return None, f"transcripts name cwd {least}, which does not match the slug"
    return None, "no cwd found in the session transcripts"


def _dot_git(folder: Path) -> int | None:
    look = _LOOK.get()
    key = str(folder)
    if look is not None and key in look.dot_git:
        return look.dot_git[key]
    try:
        mode: int | None = os.lstat(folder / ".git").st_mode
    except OSError:
        mode = None
    if look is not None:
        look.dot_git[key] = mode
    return mode


def git_root(path: Path) -> Path | None:
    """The nearest folder at or above `path` with a `.git` (a folder, or a worktree's file),
    as the client finds it: a `.git` that is a symlink ends the search with none. Read from
    the file system (no `git` process)."""
    for folder in (path, *path.parents):
        mode = _dot_git(folder)
        if mode is None:
            continue
        if stat.S_ISLNK(mode):
            return None
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return folder
    return None


def canonical_root(cwd: Path, top: Path | None = None) -> Path:
    """What Claude Code keys a session's auto memory by: the canonical git root of its cwd (a
    subfolder maps to its repo, a worktree to the main work tree), else the cwd itself.
    `top`: the cwd's git_root, when the caller has it."""
    top = top if top is not None else git_root(cwd)
    if top is None:
        return cwd
    main = _git_common_root(top)
    return _resolved(main if main is not None else top)


@dataclass(frozen=True, slots=True)
class Session:
    """A project folder of the Claude home and the cwd its transcripts record."""

    folder: str  # the project folder's name: the cwd's own slug
    transcript: str
    cwd: Path
    top: Path  # git_root(cwd), else the cwd (a worktree's own work tree, say)
    root: Path  # canonical_root(cwd); the cwd itself when it is gone

    @property
    def where(self) -> str:
        return f"{self.folder}/{self.transcript}"


class Transcripts:
    """The cwds a Claude home's session transcripts record, read once per discovery and only
    as far as needed: a project folder's own cwd when its memory dir asks, every folder's when
    a dir's repo root is to be found through another folder (subfolders, worktrees), or the
    repos known from transcripts are wanted."""

    def __init__(self, projects: Path, cache: CwdCache | None = None) -> None:
        self.projects = projects  # <claude_home>/projects
        # What earlier runs read (memoryd's state dir unless told otherwise).
        self.cache = cache if cache is not None else CwdCache.default()
        self._own: dict[str, tuple[str | None, str]] = {}
        self._sessions: list[Session] | None = None

    def own(self, project_dir: Path, slug: str) -> tuple[str | None, str]:
        folder = project_dir.absolute()
        key = str(folder)
        if key not in self._own:
            self._own[key] = _own_cwd(folder, slug, self.cache)
        return self._own[key]

    def sessions(self) -> list[Session]:
        """One per project folder whose transcripts record its cwd (folders that are links are
        not read: their transcripts may be anywhere)."""
        if self._sessions is None:
            self._sessions = []
            for folder in _subdirs(self.projects):
                if folder.is_symlink():
                    continue
                cwd, transcript = self.own(folder, folder.name)
                if cwd is None:
                    continue
                path = Path(cwd)
                top = git_root(path) if _is_dir(path) else None
                root = canonical_root(path, top) if top is not None else path
                self._sessions.append(Session(folder.name, transcript, path, top or path, root))
        return self._sessions

    def repo_root(self, slug: str, own: Path | None = None) -> tuple[Path | None, str]:
        """The repo root of the auto-memory dir with this slug: the cwd its own project folder
        (`own`, default `projects/<slug>`) records, else the git root of a cwd another folder
        records that maps to it."""
        cwd, said = self.own(own if own is not None else self.projects / slug, slug)
        if cwd is not None and _is_dir(Path(cwd)):
            return Path(cwd), f"cwd in {said}"
        for session in self.sessions():
            if session.folder == slug or slugify(str(session.root)) != slug:
                continue
            if _is_dir(session.root):
                return session.root, f"git root of the cwd {session.cwd} in {session.where}"
        if cwd is not None:
            return None, f"the project folder {cwd} no longer exists"
        return None, said


def project_repo_root(
    project_dir: Path, slug: str, transcripts: Transcripts | None = None
) -> tuple[Path | None, str]:
    """The repo root of `<claude_home>/projects/<slug>/memory`: the `cwd` recorded in the
    project's session transcripts, checked against its slug; else the git root of a cwd that
    another project folder's transcripts record, when that root's slug is this one (a session
    in a subfolder or a worktree keeps its transcripts under its own slug)."""
    if transcripts is not None:
        return transcripts.repo_root(slug, project_dir)
    transcripts = Transcripts(project_dir.parent)
    with _one_look():
        found = transcripts.repo_root(slug, project_dir)
    transcripts.cache.save()
    return found


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
    look = _LOOK.get()
    if look is None:
        return _resolve(path)
    key = str(path)
    found = look.resolved.get(key)
    if found is None:
        absolute = os.path.abspath(key)
        # A path with no link on its way is its own real path: one lstat for its last part
        # (its parents are known), where resolve() looks at every part, every time.
        plain = absolute == key and "/.." not in key and look.is_plain(key)
        found = path if plain else _resolve(path)
        look.resolved[key] = found
    return found


def _resolve(path: Path) -> Path:
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


def _named(
    path: Path, kind: str, label: str, root: Path | None, reason: str, config: Config
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
            yield _make(claude / folder, kind, repo.name, repo, "repo-scope memory", config, within)
            continue
        for agent in _subdirs(claude / folder):
            yield _make(agent, kind, agent.name, repo, "repo-scope memory", config, within)


def _project_dirs(base: Path, config: Config, transcripts: Transcripts) -> Iterator[Found]:
    """`<base>/projects/<slug>/memory/` dirs (the Claude home's, or the base that
    CLAUDE_CODE_REMOTE_MEMORY_DIR names); one leading out of the base is refused."""
    within = _resolved(base)
    for project in _subdirs(base / "projects"):
        memory = project / "memory"
        if _is_dir(memory):
            made = _make(memory, "project", project.name, None, "", config, within)
            if isinstance(made, RefusedDir):
                yield made  # its transcripts are not read: they may be as far out as it is
                continue
            root, reason = transcripts.repo_root(project.name)
            yield _make(memory, "project", project.name, root, reason, config, within)


def home_dirs(
    claude_home: Path, config: Config, transcripts: Transcripts | None = None
) -> Iterator[Found]:
    """A Claude home's project and agent memory dirs; one leading out of it is refused."""
    if transcripts is None:
        transcripts = Transcripts(claude_home / "projects")
    yield from _project_dirs(claude_home, config, transcripts)
    within = _resolved(claude_home)
    for agent in _subdirs(claude_home / "agent-memory"):
        yield _make(agent, "agent", agent.name, None, "user-scope agent memory", config, within)


@dataclass(frozen=True, slots=True)
class Plan:
    """Where Claude Code keeps a session's auto memory, and whether it loads it."""

    dir: Path
    source: str  # the variable or setting that put it there; empty for the default place
    switch: Switch
    checked_in: bool = False  # named by a project's checked-in `.claude/settings.json`


class ClaudeView:
    """How Claude Code finds auto memory on this machine, for one discovery: the Claude home's
    transcripts, the environment (`config.claude_env`) and the settings files, each read once.

    Precedence as the client has it: CLAUDE_COWORK_MEMORY_PATH_OVERRIDE, else the first of the
    canonical git root's `settings.local.json`, the cwd's `settings.local.json` and
    `settings.json`, and the user's `settings.json` that sets `autoMemoryDirectory` (an
    unusable value, a relative one say, means the default place), else
    `<base>/projects/<slug of the cwd's canonical git root>/memory/`, the base being
    CLAUDE_CODE_REMOTE_MEMORY_DIR or the Claude home."""

    def __init__(
        self, config: Config, claude_home: Path | None = None, cache: CwdCache | None = None
    ) -> None:
        self.config = config
        self.env = config.claude_env
        self.home = claude_home if claude_home is not None else config.paths.claude_home
        self.transcripts = Transcripts(self.home / "projects", cache)
        self.warnings: list[str] = []
        self.user = user_settings(self.home, self.warnings)
        self._settings: dict[tuple[Path, Path], tuple[Settings | None, ...]] = {}
        self._plans: list[tuple[Session, Plan]] | None = None
        self._loads: dict[Path, list[tuple[Session, Plan]]] | None = None

    @property
    def base(self) -> Path:
        return self.env.remote_memory_dir or self.home

    @property
    def cache(self) -> CwdCache:
        return self.transcripts.cache

    def _project_settings(self, cwd: Path, root: Path) -> tuple[Settings | None, ...]:
        key = (_resolved(cwd), _resolved(root))
        if key not in self._settings:
            if _no_claude(cwd) and _no_claude(root):
                self._settings[key] = (None, None, None)  # no settings file to read
            else:
                self._settings[key] = project_settings(cwd, root, self.warnings)
        return self._settings[key]

    def switch(self) -> Switch:
        """Auto memory on or off where no project says otherwise."""
        return auto_memory_switch(self.env, [self.user])

    def plan(self, cwd: Path, root: Path) -> Plan:
        """The auto-memory dir of a session started in `cwd` (canonical git root `root`)."""
        root_local, local, project = (
            self._project_settings(cwd, root) if _is_dir(cwd) else (None, None, None)
        )
        switch = auto_memory_switch(self.env, [root_local, local, project, self.user])
        if self.env.cowork_override is not None:
            return Plan(
                self.env.cowork_override, f"{COWORK_OVERRIDE} in memoryd's environment", switch
            )
        layers = ((root_local, False), (local, False), (project, True), (self.user, False))
        for layer, checked_in in layers:
            if layer is None or layer.directory is None:
                continue
            where = setting_dir(layer.directory, self.env.home)
            if where is not None:
                return Plan(where, f"autoMemoryDirectory in {layer.path}", switch, checked_in)
            break  # the client takes the first value set, and falls back to the default
        return Plan(self.base / "projects" / slugify(str(root)) / "memory", "", switch)

    def plans(self) -> list[tuple[Session, Plan]]:
        """Each session the transcripts know whose folder still exists, with its plan."""
        if self._plans is None:
            self._plans = []
            for session in self.transcripts.sessions():
                if _is_dir(session.cwd):
                    self._plans.append((session, self.plan(session.cwd, session.root)))
        return self._plans

    def loads(self) -> dict[Path, list[tuple[Session, Plan]]]:
        """The sessions (with their plans) by the resolved dir each loads."""
        if self._loads is None:
            self._loads = {}
            for session, plan in self.plans():
                self._loads.setdefault(_resolved(plan.dir), []).append((session, plan))
        return self._loads

    def everywhere(self) -> tuple[Path, str] | None:
        """The one auto-memory dir the environment or the user's settings give every project."""
        if self.env.cowork_override is not None:
            return self.env.cowork_override, f"{COWORK_OVERRIDE} in memoryd's environment"
        if self.user is not None and self.user.directory is not None:
            where = setting_dir(self.user.directory, self.env.home)
            if where is not None:
                return where, f"autoMemoryDirectory in {self.user.path}"
        return None

    def relocated(self) -> Iterator[Found]:
        """The auto-memory dirs the environment and settings put somewhere else than
        `<claude_home>/projects/<slug>/memory/`, where they exist."""
        config = self.config
        if self.env.remote_memory_dir is not None:
            yield from _project_dirs(self.env.remote_memory_dir, config, self.transcripts)
        shared = self.everywhere()
        if shared is not None and _is_dir(shared[0]):
            yield _named(
                shared[0],
                "project",
                shared[0].name,
                None,
                f"one auto-memory dir for every project ({shared[1]})",
                config,
            )
        for session, plan in self.plans():
            if not plan.source or plan.source == (shared or (None, ""))[1]:
                continue
            if not _is_dir(plan.dir):
                continue
            yield self._relocated_dir(plan, session.root, session.top)

    def _relocated_dir(self, plan: Plan, root: Path, top: Path) -> Found:
        """A project's relocated auto-memory dir; one its checked-in settings name outside the
        repo (its work tree `top` or main work tree `root`) and the Claude home is refused (a
        repo's file does not get memoryd to edit folders elsewhere, as a link in it does not)."""
        reason = (
            f"the project whose {plan.source.removeprefix('autoMemoryDirectory in ')} "
            "puts its auto memory here"
        )
        within = None
        real = _resolved(plan.dir)
        if plan.checked_in and not any(
            real.is_relative_to(_resolved(inside)) for inside in (self.home, top, root)
        ):
            within = _resolved(top)
        made = _make(plan.dir, "project", plan.dir.name, root, reason, self.config, within)
        if isinstance(made, RefusedDir):
            return replace(made, source=plan.source)
        return made

    def for_repo(self, repo: Path) -> Iterator[Found]:
        """A repo's relocated auto-memory dir, for a repo named on the command line."""
        plan = self.plan(repo, canonical_root(repo))
        if plan.source and _is_dir(plan.dir):
            if plan.source == (self.everywhere() or (None, ""))[1]:
                yield _named(
                    plan.dir,
                    "project",
                    plan.dir.name,
                    None,
                    f"one auto-memory dir for every project ({plan.source})",
                    self.config,
                )
            else:
                yield self._relocated_dir(plan, canonical_root(repo), git_root(repo) or repo)

    def known_repos(self) -> list[Path]:
        """The folders the transcripts know sessions ran in, with their git roots (a worktree's
        and its main work tree), that exist; once each by real path. Not the Claude home's
        own parent (a session in the home folder: its `.claude/` is the Claude home)."""
        home_claude = _resolved(self.home)
        roots: dict[Path, Path] = {}
        for session in self.transcripts.sessions():
            if not _is_dir(session.cwd):
                continue
            for root in dict.fromkeys((session.cwd, session.top, session.root)):
                if not _is_dir(root):
                    continue
                real = _resolved(root)
                if real in roots or _resolved(root / ".claude") == home_claude:
                    continue
                roots[real] = root
        return [roots[real] for real in sorted(roots)]

    def not_loaded(self, md: MemoryDir) -> str:
        """Why Claude Code loads no session's auto memory from this dir, or "" (it does, or
        memoryd cannot tell)."""
        if md.kind != "project":
            return ""
        mine = self.loads().get(md.real_path, [])
        if any(plan.switch.on for _, plan in mine):
            return ""
        if mine:
            session, plan = mine[0]
            return f"auto memory is off for {session.cwd} ({plan.switch.source})"
        switch = self.switch()
        if not switch.on:
            return f"auto memory is off ({switch.source})"
        at_default = md.path.name == "memory" and md.path.parent.parent.name == "projects"
        if not at_default:
            return ""
        remote = self.env.remote_memory_dir
        base = f"{REMOTE_MEMORY_DIR} in memoryd's environment"
        for session, plan in self.plans():
            if slugify(str(session.root)) == md.label:
                return (
                    f"Claude Code keeps the auto memory of {session.cwd} in {plan.dir} "
                    f"instead ({plan.source or base})"
                )
            if session.folder == md.label and not plan.source:
                # A session in a subfolder or a worktree: keyed by its repo's git root.
                return (
                    f"Claude Code keeps the auto memory of {session.cwd} in {plan.dir}, "
                    f"the dir of its git root {session.root}"
                )
        shared = self.everywhere()
        if shared is not None:
            return f"Claude Code keeps auto memory in {shared[0]} instead ({shared[1]})"
        if remote is not None and not md.real_path.is_relative_to(_resolved(remote)):
            return f"Claude Code keeps auto memory under {remote}/projects/ instead ({base})"
        return ""


def _layout_dir(path: Path, config: Config) -> MemoryDir | None:
    """A folder at one of the standard memory-dir layouts, recognised by its folder names
    (empty or not: a dir the agent has not written to yet is still a memory dir)."""
    parent = path.parent
    if parent.name in ("agent-memory", "agent-memory-local"):
        # The Claude home's own agent-memory is the user's, not a repo's (its folder, say
        # ~/.claude, is no repo's `.claude/`, and $HOME no repo root).
        home = parent.name == "agent-memory" and _resolved(parent.parent) == _resolved(
            config.paths.claude_home
        )
        kind = (
            "agent"
            if parent.parent.name != ".claude" or home
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
    shared = ClaudeView(config).everywhere()
    if shared is not None and _resolved(shared[0]) == _resolved(path):
        # An auto-memory dir by where Claude Code keeps it: loaded (and stripped) as one.
        return _named(
            path,
            "project",
            path.name,
            None,
            f"one auto-memory dir for every project ({shared[1]})",
            config,
        )
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
    work tree, whose path keys Claude Code's auto memory; None for anything else. Read from
    the `.git` file and the `commondir` it leads to (no `git` process)."""
    look = _LOOK.get()
    if look is None:
        return _common_root(repo)
    key = str(repo)
    if key not in look.common:
        look.common[key] = _common_root(repo)
    return look.common[key]


def _common_root(repo: Path) -> Path | None:
    mode = _dot_git(repo)
    if mode is None or not stat.S_ISREG(mode):
        return None  # a folder (an ordinary repo) or no `.git`: known without a read
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


def auto_memory_dirs(
    repo: Path, config: Config, view: "ClaudeView | None" = None
) -> Iterator[Found]:
    """The user's auto-memory dirs for a repo, where they exist: `<base>/projects/<slug>/
    memory/` for the slug of the repo's path and of its canonical git root (a worktree's main
    work tree), the base being the Claude home and CLAUDE_CODE_REMOTE_MEMORY_DIR; and the dir
    its settings or the environment relocate its auto memory to."""
    view = view if view is not None else ClaudeView(config)
    roots = [repo]
    main = _git_common_root(repo)
    if main is not None and main != repo:
        roots.append(main)
    bases = [view.home]
    if view.env.remote_memory_dir is not None:
        bases.append(view.env.remote_memory_dir)
    for base in bases:
        within = _resolved(base)
        for root in roots:
            slug = slugify(str(root))
            memory = base / "projects" / slug / "memory"
            if not _is_dir(memory):
                continue
            made = _make(memory, "project", slug, None, "", config, within)
            if isinstance(made, RefusedDir):
                yield made
                continue
            found, reason = view.transcripts.repo_root(slug)
            if found is None:
                found, reason = root, f"the repo its slug names ({reason})"
            yield _make(memory, "project", slug, found, reason, config, within)
    yield from view.for_repo(repo)


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


def _search(top: Path, config: Config, view: ClaudeView) -> Iterator[Found]:
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
            yield from auto_memory_dirs(folder, config, view)
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


def _explicit(
    path: Path, config: Config, view: ClaudeView | None = None
) -> tuple[list[Found], bool]:
    """A folder named on the command line: a memory dir, a repo, a Claude home, or a folder
    holding any of those. Also whether it is a repo (which may have no memory dirs yet)."""
    view = view if view is not None else ClaudeView(config)
    if not _is_dir(path):
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


def explicit_dirs(path: Path, config: Config) -> list[MemoryDir]:
    """The memory dirs of a folder named on the command line (refused links left out)."""
    found, _ = _explicit(path, config)
    dirs = [f for f in found if isinstance(f, MemoryDir)]
    if not dirs and found:
        refused = found[0]
        assert isinstance(refused, RefusedDir)
        raise UsageError(f"{refused.path}: not followed: {refused.reason}; {refused.hint}")
    return dirs


def discover_all(
    config: Config, explicit: Iterable[Path] = (), *, cache: CwdCache | None = None
) -> Discovery:
    """Every memory dir, once each (by real path), nested ones included, in path order; and
    the ones refused because their link leads out of their repo or Claude home.

    `cache`: what earlier runs read of the transcripts (default: the one in memoryd's state
    dir), saved again when this run read more; `CwdCache.off()` reads every transcript."""
    view = ClaudeView(config, cache=cache)
    with _one_look():
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


REFUSED_RECORD = "refused-links.json"  # in the state dir: which refusals were said, and where
REFUSED_RECORD_MAX = 1024 * 1024


def report_refused(rt: "Runtime", refused: Sequence[RefusedDir]) -> None:
    """Say once (an audit row `dir.refused`) that a link is left alone; again when its target
    changes. A dry run says nothing."""
    if rt.dry_run or not refused:
        return
    record_path = rt.paths.state_dir / REFUSED_RECORD
    try:
        record = safejson.loads(read_bounded(record_path, REFUSED_RECORD_MAX, follow=False))
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
