"""Claude Code's session transcripts: which folder (cwd) each project slug was started in."""

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memoryd.discover.cwd_cache import CwdCache, Head, usable_cwd
from memoryd.discover.look import canonical_root, git_root, is_dir, one_look, subdirs
from memoryd.discover.slugs import slugify
from memoryd.model import safejson
from memoryd.paths import BoundedLines, open_regular

TRANSCRIPT_FILES = 20  # newest session transcripts read per project
TRANSCRIPT_BYTES = 256 * 1024  # read at most this much of each


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
    """The first recorded `cwd` whose slug is `slug` (read up to it only), the least other
    cwd before it, and whether the read went through (a failed one is not remembered)."""
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


def _own_cwd(project_dir: Path, slug: str, cache: CwdCache) -> tuple[str | None, str]:
    """The cwd the project's newest transcript recording one gives (matching its slug), and
    where, or why there is none. `cache`: what earlier runs read of each transcript."""
    transcripts = _transcripts(project_dir)
    if not transcripts:
        return None, "no session transcripts (*.jsonl) to read a cwd from"
    least: str | None = None  # of the cwds that do not match the slug
    for name, st in transcripts:
        head = cache.head(project_dir, slug, name, st)
        if head is None:
            head, whole = _first_cwd(project_dir / name, slug)
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
    """The cwds a Claude home's session transcripts record, read once per discovery and
    only as far as asked: one project folder's, or every folder's (`sessions`)."""

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
            for folder in subdirs(self.projects):
                if folder.is_symlink():
                    continue
                cwd, transcript = self.own(folder, folder.name)
                if cwd is None:
                    continue
                path = Path(cwd)
                top = git_root(path) if is_dir(path) else None
                root = canonical_root(path, top) if top is not None else path
                self._sessions.append(Session(folder.name, transcript, path, top or path, root))
        return self._sessions

    def repo_root(self, slug: str, own: Path | None = None) -> tuple[Path | None, str]:
        """The repo root of the auto-memory dir `slug`: the cwd its project folder (`own`)
        records, else the git root of another folder's cwd that maps to it."""
        cwd, said = self.own(own if own is not None else self.projects / slug, slug)
        if cwd is not None and is_dir(Path(cwd)):
            return Path(cwd), f"cwd in {said}"
        for session in self.sessions():
            if session.folder == slug or slugify(str(session.root)) != slug:
                continue
            if is_dir(session.root):
                return session.root, f"git root of the cwd {session.cwd} in {session.where}"
        if cwd is not None:
            return None, f"the project folder {cwd} no longer exists"
        return None, said


def project_repo_root(project_dir: Path, slug: str) -> tuple[Path | None, str]:
    """The repo root of `<claude_home>/projects/<slug>/memory` (`Transcripts.repo_root`)."""
    transcripts = Transcripts(project_dir.parent)
    with one_look():
        found = transcripts.repo_root(slug, project_dir)
    transcripts.cache.save()
    return found


def repo_of(path: Path) -> tuple[Path | None, str]:
    """For a folder named on the command line: the repo holding its `.claude/`, or a git root."""
    parts = path.parts
    if ".claude" in parts:
        root = Path(*parts[: parts.index(".claude")])
        return root, "the folder holding .claude/"
    for parent in (path, *path.parents):
        if (parent / ".git").exists():
            return parent, "git work tree"
    return None, "not inside a repo (no .claude/ or .git above it)"
