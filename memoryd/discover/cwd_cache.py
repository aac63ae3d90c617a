"""What discovery read from each session transcript (its first `cwd` matching the project
folder's slug), kept between runs by the transcript's identity: a discovery with nothing
changed opens no transcript.

The rows (table `cache_cwd`) are a cache: untrusted on read, written only when they changed
and only where memoryd's state folder exists (a read-only command never creates it).
"""

import os
import sqlite3
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.discover.slugs import slugify
from memoryd.paths import app_paths
from memoryd.storage.statedb import Schema, StateDB

CACHE_MAX_FILES = 20_000  # transcripts remembered at most (~200 bytes each)
SCHEMA = Schema(
    "cache_cwd",
    1,
    """CREATE TABLE cache_cwd (folder TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL,
                               ino, size, mtime_ns, cwd, other, PRIMARY KEY (folder, name))
                               WITHOUT ROWID""",
    ("cache_cwd",),
    disposable=True,
)
# Set by the command line for a command that promises to write nothing (`dirs`, a dry run,
# `index --check`): the cache is read, never saved.
LOOKING_ONLY: ContextVar[bool] = ContextVar("memoryd_cwd_cache_looking_only", default=False)

# What a transcript's first rows say: the first cwd matching the slug, the least other before it.
Head = tuple[str | None, str | None]


def usable_cwd(value: object) -> bool:
    """A cwd a transcript may give: an absolute path (a relative one would be taken from
    memoryd's own working folder) without a NUL."""
    return isinstance(value, str) and os.path.isabs(value) and "\x00" not in value


@dataclass(slots=True)
class CwdCache:
    """One discovery's view of the cache: what it loaded, and what this run looked at."""

    state_dir: Path | None  # None: no cache (every transcript is read, nothing is kept)
    _held: dict[str, dict[str, Any]] | None = None  # as loaded: folder -> entry
    _seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # this run's folders

    @classmethod
    def off(cls) -> "CwdCache":
        return cls(None)

    read_only: bool = False  # use what is kept, write nothing (a command that only looks)

    @classmethod
    def default(cls) -> "CwdCache":
        """The cache in memoryd's state dir (resolved now, as the CLI resolves it); read-only
        while `looking_only` is set (a command promising to write nothing)."""
        return cls(app_paths().state_dir, read_only=LOOKING_ONLY.get())

    def _loaded(self) -> dict[str, dict[str, Any]]:
        if self._held is None:
            self._held = self._load()
        return self._held

    def _load(self) -> dict[str, dict[str, Any]]:
        conn = StateDB.in_state_dir(self.state_dir).reader(SCHEMA) if self.state_dir else None
        if conn is None:
            return {}  # none was saved
        sql = "SELECT folder, slug, name, ino, size, mtime_ns, cwd, other FROM cache_cwd"
        rows = conn.execute(sql).fetchall()
        held: dict[str, dict[str, Any]] = {}
        for folder, slug, name, *value in rows:
            if isinstance(slug, str) and _valid(value, slug):
                entry = held.setdefault(folder, {"slug": slug, "files": {}})
                if entry["slug"] == slug:
                    entry["files"][name] = value
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
        self.keep(folder, slug, name, st, (cwd, other))
        return cwd, other

    def keep(self, folder: Path, slug: str, name: str, st: os.stat_result, head: Head) -> None:
        """Note what a transcript said, for the next run (when there is a cache)."""
        if self.state_dir is None:
            return
        entry = self._seen.setdefault(str(folder), {"slug": slug, "files": {}})
        entry["files"][name] = [st.st_ino, st.st_size, st.st_mtime_ns, head[0], head[1]]

    def save(self) -> None:
        """Write what changed, best effort: the folders this run looked at replace their old
        entries (a transcript gone is forgotten), the others are kept while there is room."""
        if self.state_dir is None or not self._seen or self.read_only:
            return
        held = self._loaded()
        changed = {f: e for f, e in self._seen.items() if held.get(f) != e}
        count = sum(len(e["files"]) for e in self._seen.values())
        dropped = []
        for folder, entry in sorted(held.items()):
            if folder not in self._seen:
                if count + len(entry["files"]) <= CACHE_MAX_FILES:
                    count += len(entry["files"])
                else:
                    dropped.append(folder)
        if not changed and not dropped:
            return  # nothing changed: a run that finds everything as it was writes nothing
        if not os.path.isdir(self.state_dir):
            return  # never creates memoryd's state folder (a dry run on a new machine)
        try:
            _write(StateDB.in_state_dir(self.state_dir), changed, dropped)
        except sqlite3.OperationalError:
            return  # a read-only state dir: do without
        self._held = {f: e for f, e in {**held, **changed}.items() if f not in dropped}


def _write(db: StateDB, changed: dict[str, dict[str, Any]], dropped: list[str]) -> None:
    db.ensure(SCHEMA)
    with db.transaction() as conn:
        for folder in [*changed, *dropped]:
            conn.execute("DELETE FROM cache_cwd WHERE folder = ?", (folder,))
        conn.executemany(
            "INSERT INTO cache_cwd VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (folder, entry["slug"], name, *value)
                for folder, entry in changed.items()
                for name, value in entry["files"].items()
            ],
        )


def _valid(value: object, slug: str) -> bool:
    """A transcript's entry as `keep` writes it: [inode, size, mtime_ns, the cwd matching the
    slug or null, a cwd not matching it or null]."""
    if not (isinstance(value, list) and len(value) == 5):
        return False
    if any(type(v) is not int for v in value[:3]):
        return False
    cwd, other = value[3], value[4]
    if cwd is not None and not (usable_cwd(cwd) and slugify(cwd) == slug):
        return False
    return other is None or (usable_cwd(other) and slugify(other) != slug)
