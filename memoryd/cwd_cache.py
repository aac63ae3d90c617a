"""What discovery read from each session transcript, kept between runs: a transcript's first
`cwd` matching its project folder's slug, by the transcript's identity (inode, size,
mtime_ns), so that a discovery with nothing changed opens no transcript at all.

The file (`transcript-cwds.json` in the state dir, 0600) is a cache: untrusted on read (read
bounded, never through a link; an entry that does not check out is read again from its
transcript, a damaged file is done without), and written only when what it holds changed and
only where memoryd's state folder already exists (a read-only command never creates it, and
one that cannot write it does without).
"""

import contextlib
import json
import os
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import fsops, safejson
from memoryd.paths import app_paths, read_bounded

CACHE_FILE = "transcript-cwds.json"
CACHE_MAX_BYTES = 8 * 1024 * 1024
CACHE_MAX_FILES = 20_000  # transcripts remembered at most (~200 bytes each)
VERSION = 1
# Set by the command line for a command that promises to write nothing (`dirs`, a dry run,
# `index --check`): the cache is read, never saved.
LOOKING_ONLY: ContextVar[bool] = ContextVar("memoryd_cwd_cache_looking_only", default=False)

# What one transcript's first rows say, for the folder's slug: the first cwd matching it (None
# when none does) and the least of the other cwds seen before it (None when there were none).
Head = tuple[str | None, str | None]


def cache_path(state_dir: Path) -> Path:
    return state_dir / CACHE_FILE


def usable_cwd(value: object) -> bool:
    """A cwd a transcript may give: an absolute path (a relative one would be taken from
    memoryd's own working folder) without a NUL."""
    return isinstance(value, str) and os.path.isabs(value) and "\x00" not in value


@dataclass(slots=True)
class CwdCache:
    """One discovery's view of the cache: what it loaded, and what this run looked at."""

    path: Path | None  # None: no cache (every transcript is read, nothing is kept)
    _held: dict[str, dict[str, Any]] | None = None  # as loaded: folder -> entry
    _seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # this run's folders
    hits: int = 0
    reads: int = 0

    @classmethod
    def off(cls) -> "CwdCache":
        return cls(None)

    read_only: bool = False  # use what is kept, write nothing (a command that only looks)

    @classmethod
    def default(cls) -> "CwdCache":
        """The cache in memoryd's state dir (resolved now, as the CLI resolves it); read-only
        while `looking_only` is set (a command promising to write nothing)."""
        return cls(cache_path(app_paths().state_dir), read_only=LOOKING_ONLY.get())

    def _loaded(self) -> dict[str, dict[str, Any]]:
        if self._held is None:
            self._held = self._load() if self.path is not None else {}
        return self._held

    def _load(self) -> dict[str, dict[str, Any]]:
        assert self.path is not None
        try:
            data = safejson.loads(read_bounded(self.path, CACHE_MAX_BYTES, follow=False))
        except (OSError, ValueError, RecursionError):
            return {}  # missing, a link, a FIFO, too big, not JSON: read the transcripts
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return {}
        folders = data.get("folders")
        if not isinstance(folders, dict):
            return {}
        held: dict[str, dict[str, Any]] = {}
        for folder, entry in folders.items():
            if not isinstance(entry, dict):
                continue
            slug, files = entry.get("slug"), entry.get("files")
            if isinstance(slug, str) and isinstance(files, dict):
                good = {n: v for n, v in files.items() if _valid(v, slug)}
                held[folder] = {"slug": slug, "files": good}
        return held

    def head(self, folder: Path, slug: str, name: str, st: os.stat_result) -> Head | None:
        """What the transcript `folder/name` (of this lstat) said last time, if it is the
        same file and the entry checks out; else None (read it)."""
        entry = self._loaded().get(str(folder))
        if entry is None or entry.get("slug") != slug:
            return None
        value = entry["files"].get(name)
        if value is None or value[:3] != [st.st_ino, st.st_size, st.st_mtime_ns]:
            return None
        cwd, other = value[3], value[4]
        self.hits += 1
        self.keep(folder, slug, name, st, (cwd, other))
        return cwd, other

    def keep(self, folder: Path, slug: str, name: str, st: os.stat_result, head: Head) -> None:
        """Note what a transcript said, for the next run (when there is a cache)."""
        if self.path is None:
            return
        entry = self._seen.setdefault(str(folder), {"slug": slug, "files": {}})
        entry["files"][name] = [st.st_ino, st.st_size, st.st_mtime_ns, head[0], head[1]]

    def save(self) -> None:
        """Write what changed, best effort: the folders this run looked at replace their old
        entries (a transcript gone is forgotten), the others are kept while there is room."""
        if self.path is None or not self._seen or self.read_only:
            return
        held = self._loaded()
        merged = dict(self._seen)
        count = sum(_files(e) for e in merged.values())
        for folder, entry in held.items():
            if folder not in merged and count + _files(entry) <= CACHE_MAX_FILES:
                merged[folder] = entry
                count += _files(entry)
        if merged == held:
            return  # nothing changed: a run that finds everything as it was writes nothing
        data = json.dumps({"version": VERSION, "folders": merged}, sort_keys=True).encode()
        if len(data) > CACHE_MAX_BYTES or not os.path.isdir(self.path.parent):
            return  # never creates memoryd's state folder (a dry run on a new machine)
        with contextlib.suppress(OSError):  # a read-only state dir: do without
            fsops.write_private(self.path, data, durable=False)
        self._held = merged


def _files(entry: dict[str, Any]) -> int:
    files = entry.get("files")
    return len(files) if isinstance(files, dict) else 0


def _valid(value: object, slug: str) -> bool:
    """A transcript's entry as `keep` writes it: [inode, size, mtime_ns, the cwd matching the
    slug or null, a cwd not matching it or null]."""
    if not (isinstance(value, list) and len(value) == 5):
        return False
    if any(type(v) is not int for v in value[:3]):
        return False
    cwd, other = value[3], value[4]
    if cwd is not None and not (usable_cwd(cwd) and _slug(cwd) == slug):
        return False
    return other is None or (usable_cwd(other) and _slug(other) != slug)


def _slug(path: str) -> str:
    from memoryd.discover.slugs import slugify  # discover imports this module

    return slugify(path)
