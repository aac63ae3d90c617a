"""The search index of one memory dir: SQLite with FTS5, in memoryd's state dir.

It holds only what the memory dir holds (each memory's fields, body and references, and which
index file points at it), in a 0600 file in a 0700 folder, in WAL mode so that a reader (the
MCP server, a command) reads while a writer (the daemon) writes. It is brought up to date by
stat, as a scan is: only files whose (inode, size, mtime_ns) moved are read again. A missing,
damaged or foreign index is rebuilt from the files; damage is said as a warning (once per
file and process), never a failure. Nothing is ever written in the memory dir.

`update_dir` is the daemon's hook: the index pass that read some changed files calls it with
their names, and only those are looked at.
"""

import contextlib
import json
import os
import pickle
import shutil
import sqlite3
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memoryd import fsops, safejson
from memoryd.fdlimit import out_of_files
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, pointer_lines
from memoryd.paths import ensure_private_dir, file_kind

if TYPE_CHECKING:
    from memoryd.dream.refs import Refs
    from memoryd.memfile import Memory

# The parser (memoryd.memfile) and the scan's rules are imported when a file is read, not
# by a search of an index already in step; the limits' None means memfile's defaults.

# 5: texts held masked (memoryd.secrets), secrets flagged: an index of an older schema may
# hold a secret's value, and is made anew.
SCHEMA = "5"  # 2: pointers.hidden, files_racy; 3: files_stat; 4: refs once, cited in cites
INDEX_FOLDER = "recall"  # under the state dir
# A file changed this close before it was read may change again within the same mtime tick
# (file times are taken from a coarse clock): it is read again next time (mtime_ns -1).
RACY_NS = 2_000_000_000
INDEX_MAX_BYTES = 64 * 1024 * 1024  # MEMORY.md / the archive, read to find pointers
# Commands wait this long for a writer (the daemon, another command) to finish; a reader that
# must answer now (the MCP server) passes a shorter wait and searches what is there.
BUSY_WAIT = 30.0

RANK_ALL = 1000  # see DirIndex.match
VOCABULARY_PIECE = 256  # see Vocabulary
VOCABULARY_CHUNK = 2048
# Column weights for bm25: a word in the name counts most, then the file's stem, the
# description and the body.
WEIGHTS = (10.0, 4.0, 1.0, 8.0)  # name, description, body, stem

_DDL = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files(
    id INTEGER PRIMARY KEY,
    file TEXT NOT NULL UNIQUE,
    ino INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    key TEXT NOT NULL DEFAULT '',
    stem TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    type TEXT NOT NULL DEFAULT '',
    date REAL NOT NULL DEFAULT 0,
    flags TEXT NOT NULL DEFAULT '[]',
    problem TEXT NOT NULL DEFAULT '',
    hint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE pointers(file TEXT PRIMARY KEY, tier TEXT NOT NULL, line INTEGER NOT NULL,
    hidden TEXT NOT NULL DEFAULT '') WITHOUT ROWID;
CREATE TABLE refs(rid INTEGER PRIMARY KEY, kind TEXT NOT NULL, ref TEXT NOT NULL,
    norm TEXT NOT NULL, base TEXT NOT NULL);
CREATE TABLE cites(id INTEGER NOT NULL, rid INTEGER NOT NULL, PRIMARY KEY(id, rid)) WITHOUT ROWID;
CREATE VIRTUAL TABLE docs USING fts5(name, description, body, stem,
    tokenize='porter unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE words USING fts5(text, content='', detail=none,
    tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE words_vocab USING fts5vocab(words, 'row');
"""
# The tables' indexes, which a first build makes after it filled the tables (see BULK_MIN).
# files_stat: the listing's compare (_CHANGED) finds each entry's stat there, not in its
# files row. A reference is a `refs` row once, however many memories cite it (`cites`): the
# memories of a dir cite the same paths again and again (100,000 synthetic memories: 1.6
# million citations of 155,000 references). Held a row per citation, they were a third of
# the index (200 MB) and their three indexes 4 s of a first build.
_INDEXES = {
    "files_key": "CREATE INDEX files_key ON files(key)",
    "files_stem": "CREATE INDEX files_stem ON files(stem)",
    "files_date": "CREATE INDEX files_date ON files(date)",
    "files_racy": "CREATE INDEX files_racy ON files(mtime_ns) WHERE mtime_ns = -1",
    "files_stat": "CREATE INDEX files_stat ON files(file, ino, size, mtime_ns)",
    "refs_ref": "CREATE UNIQUE INDEX refs_ref ON refs(kind, ref)",
    "refs_norm": "CREATE INDEX refs_norm ON refs(norm)",
    "refs_base": "CREATE INDEX refs_base ON refs(base)",
    "cites_rid": "CREATE INDEX cites_rid ON cites(rid)",
}
_DDL += ";\n".join(_INDEXES.values())
# An update that reads at least this many files into an index that holds none (a first
# build, a rebuild) drops _INDEXES while it fills the tables and makes them again from the
# rows, sorted once: inserted into row by row, in random order, 100,000 files' refs and
# files took 21 s (their pages no longer fit the page cache).
BULK_MIN = 1000
# A first build's page cache (SQLite's default is 2 MiB; the connection has it again after).
# FTS5's buffer of terms is left at its 1 MiB: at 32 MiB the build's segments were few and
# big, and the first small updates after it merged them (one took 1 s, the file grew 86 MB).
BULK_CACHE_KIB = 64 * 1024
# A first build of at least PARALLEL_MIN files reads and parses them in the worker processes
# a DirIndex is given (memoryd's own commands, server and daemon give worker_count(): up to
# PARALLEL_WORKERS, one a CPU but this one's), READ_CHUNK files a task, while this one puts
# them in: reading, parsing and reference extraction were half of a first build's CPU time
# (100,000 synthetic memories: 13.5 s of 25.5 s), SQLite the rest. None by default: a spawned
# worker imports its parent's __main__ again, and a caller's script without an
# `if __name__ == "__main__":` guard would run its whole build again in each.
PARALLEL_MIN = 20_000
PARALLEL_WORKERS = 2
READ_CHUNK = 500
# Pages of 8 KiB: a memory's text (1-3 KiB) left half of many 4 KiB pages empty (a new
# index only: an index's page size is set when it is made).
PAGE_SIZE = 8192

Warn = Callable[[str], None]
# How the agent loads the dir's MEMORY.md: (agentview.ViewKind's value, max lines, max UTF-16
# units), memoryd's index.max_lines / index.max_chars.
Window = tuple[str, int, int]


def worker_count() -> int:
    """The worker processes memoryd's own entry points give a first build: one a CPU but
    this one's, at most PARALLEL_WORKERS (0 on one CPU)."""
    return max(0, min(PARALLEL_WORKERS, (os.cpu_count() or 1) - 1))


class DirReplaced(OSError):
    """A worker found another dir at the memory dir's path than the one the build listed."""


def _stderr(message: str) -> None:
    with contextlib.suppress(Exception):  # telling must not fail the command
        sys.stderr.write(f"memoryd: warning: {message}\n")


_WARNED: set[str] = set()


def _warn_once(warn: Warn, message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warn(message)


def index_path(state_dir: Path, real_path: Path) -> Path:
    """Where the search index of the memory dir at `real_path` lives."""
    from memoryd.state import dir_key

    return state_dir / INDEX_FOLDER / f"{dir_key(real_path)}.sqlite"


class Row(NamedTuple):
    """One memory as the index returns it."""

    id: int
    file: str
    name: str
    description: str
    type: str
    date: float
    flags: tuple[str, ...]
    tier: str  # index | archive | unindexed
    line: int  # the pointer's line in its index file (1-based), 0 when unindexed
    score: float = 0.0  # bm25: lower is better
    snippet: str = ""
    why: str = ""  # for recall: what matched
    # Why the agent does not see the memory's MEMORY.md pointer in what it loads (past line
    # 200, in a comment, ...: agentview.Hidden's words); "" when it sees one, or has none.
    hidden: str = ""


class Excluded(NamedTuple):
    """A file in the memory dir that is not searched, and why."""

    file: str
    kind: str  # note | problem
    why: str


@dataclass(slots=True)
class Change:
    """What an update did."""

    read: int = 0
    removed: int = 0
    pointers: bool = False  # MEMORY.md or the archive was read again
    rebuilt: str = ""  # why the index was made anew, when it was

    @property
    def any(self) -> bool:
        return bool(self.read or self.removed or self.pointers)


@dataclass(slots=True)
class _Plan:
    """What an update is to do."""

    changed: list[str]  # files to read (again)
    gone: list[tuple[str, int]]  # (file, id) of files no longer in the dir
    old: dict[str, int]  # a changed file's id in the index, when it had one
    pointers: bool  # MEMORY.md or the archive (or the window) moved: read them again
    meta: dict[str, str]
    listing: dict[str, os.stat_result]  # the stats at hand (the index files', at least)

    @property
    def any(self) -> bool:
        return bool(self.changed or self.gone or self.pointers)


# The listing is kept in a database of its own, attached for one update and detached after
# it: its memory is then freed (a temp table's stayed with the connection: 6 MB at 100,000
# files in the MCP server). That database is a temporary file (SQLite's, removed as it is
# made; 0600) behind a page cache of LISTING_CACHE_KIB: in memory, 100,000 entries were
# 2 MB more of the server's peak at each refresh that lists them. No key: appended in the
# dir's order, 10,000 rows cost 9 ms, kept sorted by name 14 ms (most refreshes never look
# at it). The compare looks each entry up in `files` instead.
LISTING_CACHE_KIB = 256
_LISTING_TABLE = (
    "CREATE TABLE listing.listing(name TEXT NOT NULL, ino INTEGER, size INTEGER, "
    "mtime INTEGER, mode INTEGER)"
)
# The dir's entries the index does not hold as they are now (not the index files, not
# folders); and the index's files the dir no longer has (or has as a folder). 61440 is
# S_IFMT's mask, 16384 S_IFDIR. A name the dir listed twice (renamed over while it was
# listed) is one name in both. files_stat covers the first (the planner would take the
# unique index on `file`, then each files row: 9.5 ms at 10,000 files instead of 4).
_CHANGED = (
    "SELECT l.name, f.id FROM listing.listing l LEFT JOIN files f INDEXED BY files_stat "
    "ON f.file = l.name "
    "WHERE l.name NOT IN (?, ?) AND (l.mode & 61440) != 16384 "
    "AND (f.id IS NULL OR f.ino != l.ino OR f.size != l.size OR f.mtime_ns != l.mtime)"
)
_GONE = (
    "SELECT file, id FROM files WHERE file NOT IN "
    "(SELECT name FROM listing.listing WHERE (mode & 61440) != 16384)"
)
assert (stat.S_IFMT(0o777777), stat.S_IFDIR) == (61440, 16384)
# A reference (see _INDEXES) put in once, and found by what it is; one no memory cites now.
_REF = "INSERT OR IGNORE INTO refs(kind, ref, norm, base) VALUES (?, ?, ?, ?)"
_REF_WITH_ID = "INSERT INTO refs(rid, kind, ref, norm, base) VALUES (?, ?, ?, ?, ?)"
_REF_ID = "SELECT rid FROM refs WHERE kind = ? AND ref = ?"
_ORPHAN = "DELETE FROM refs WHERE rid = ? AND NOT EXISTS (SELECT 1 FROM cites WHERE rid = ?)"
# A file to be read again whatever its stat (see RACY_NS); on the partial index files_racy.
_RACY = "SELECT 1 FROM files WHERE mtime_ns = -1 LIMIT 1"


def _nameable(name: str) -> bool:
    """Whether a file name can be stored and shown: one that is not UTF-8 (read with
    surrogate escapes) cannot be put in SQLite's text, and is left out of the index (the
    index pass reports it)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Listing:
    """One pass over the dir's `*.md` entries (lstat), streamed into the connection's temp
    table `listing` and hashed as it goes: a digest of them all (names, inode, size, mtime,
    type, in the dir's order), and the index files' stats. Nothing is kept per file in
    Python: at 100,000 files a listing held in Python was 30 MB. When the digest is the one
    the index last matched, the table is not looked at (see _in_step). The same entries
    listed in another order only cost a compare: one running hash costs half what a sum of
    a hash per entry did."""

    __slots__ = ("hashed", "indexes")

    def __init__(self) -> None:
        from hashlib import blake2b

        self.hashed = blake2b(digest_size=16)
        self.indexes: dict[str, os.stat_result] = {}

    def entries(self, dir_fd: int) -> Iterator[tuple[str, int, int, int, int]]:
        update = self.hashed.update
        with os.scandir(dir_fd) as found:
            for entry in found:
                name = entry.name
                if not name.endswith(".md") or name[0] == "." or not _nameable(name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if name in (INDEX_NAME, ARCHIVE_NAME):
                    self.indexes[name] = st
                row = (name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
                # A name holds no "/" and its stats no "\n": the text says where each ends.
                text = f"{name}/{row[1]}:{row[2]}:{row[3]}:{row[4]}\n"
                update(text.encode("utf-8", "surrogateescape"))
                yield row

    @staticmethod
    def attach(conn: sqlite3.Connection) -> None:
        """The listing's table, empty, in a temporary database of its own."""
        with contextlib.suppress(sqlite3.OperationalError):  # "no such database"
            conn.execute("DETACH listing")
        # A temporary database is made in memory under temp_store=MEMORY (see _connect).
        conn.execute("PRAGMA temp_store=FILE")
        try:
            conn.execute("ATTACH '' AS listing")
        finally:
            conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute(f"PRAGMA listing.cache_size=-{LISTING_CACHE_KIB}")
        conn.execute(_LISTING_TABLE)

    @staticmethod
    def detach(conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):  # not to hide what failed before
            conn.execute("DETACH listing")

    def fill(self, conn: sqlite3.Connection, dir_fd: int) -> None:
        """List the dir into a listing table just attached, in one transaction (row by row
        in autocommit, 10,000 rows took 14-240 ms; in one, 7-8 ms)."""
        self.attach(conn)
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT INTO listing.listing VALUES (?, ?, ?, ?, ?)",
                             self.entries(dir_fd))  # fmt: skip
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    @property
    def digest(self) -> str:
        return self.hashed.hexdigest()


def _flags(memory: "Memory") -> list[str]:
    """Flags a memory's own frontmatter sets: `acknowledged`, `supersedes …`."""
    out = []
    fm = memory.frontmatter
    ack = fm.get("acknowledged")
    if ack not in (None, "", "false", "False", "no", "0", [], {}):
        out.append("acknowledged")
    sup = fm.get("supersedes")
    names = [sup] if isinstance(sup, str) else sup if isinstance(sup, list) else []
    names = [" ".join(str(n).split()) for n in names if isinstance(n, str) and n.strip()]
    if names:
        out.append("supersedes " + ", ".join(names))
    return out


RefRow = tuple[str, str, str, str]  # kind, ref (as written), norm, base


def _path_refs_of(refs: "Refs") -> list[RefRow]:
    """(kind, ref, norm, base) rows of a body's references (the dream pass's extraction)."""
    return [row for row in map(_path_row, refs.paths) if row is not None] + [
        _symbol_row(symbol) for symbol in refs.symbols
    ]


def _symbol_row(symbol: str) -> RefRow:
    return ("symbol", symbol, symbol, symbol.lower())


def _path_row(ref: str) -> RefRow | None:
    """A path reference's row; None for one no repo path can be."""
    from memoryd.dream.refs import _outside_repo
    from memoryd.dream.repo import normalize_rel

    if ref.startswith("/"):
        norm = os.path.normpath(ref)
    elif _outside_repo(ref):
        return None  # ~, $HOME, URLs, globs: nothing a repo path can be
    else:
        norm = normalize_rel(ref) or ""
        if not norm:
            return None
    norm = norm.rstrip("/")
    return ("path", ref, norm, norm.rpartition("/")[2])


class DirIndex:
    """The search index of one memory dir (see the module docstring). Not thread-safe: one
    per thread."""

    def __init__(
        self,
        path: Path,
        memory_dir: Path,
        *,
        warn: Warn = _stderr,
        max_file_bytes: int | None = None,
        max_frontmatter_bytes: int | None = None,
        clock_ns: Callable[[], int] | None = None,
        in_memory: bool = True,
        window: Window | None = None,
        workers: int = 0,
    ) -> None:
        self.path = path
        self.in_memory = in_memory  # an index the state dir cannot hold is kept in memory
        self.memory_dir = memory_dir
        self.warn = warn
        self._limits = (max_file_bytes, max_frontmatter_bytes)
        self._clock_ns = clock_ns
        self._conn: sqlite3.Connection | None = None
        self.rebuilt = ""  # why the index was made anew in this process, if it was
        self._vocab: tuple[tuple[int, int], Vocabulary] | None = None
        self._writes = 0  # own commits: they leave PRAGMA data_version as it was
        # In a first build: the refs rows' ids by kind and ref (0: no row), given here.
        self._rids: dict[str, dict[str, int]] | None = None
        self._rid = 0
        # At most this many worker processes read a first build of PARALLEL_MIN files or
        # more (0: it is read in this process; see worker_count).
        self.workers = workers
        self.spawned = 0  # processes the last first build read the files in (0: none)
        # The agent's window that says which pointers it does not see; None (the daemon's
        # hook): the one the index was last given, else the default for the dir's path.
        self.window = window

    @property
    def limits(self) -> tuple[int, int]:
        """(max file bytes, max frontmatter bytes): those given, else memfile's."""
        from memoryd.memfile import MAX_FILE_BYTES, MAX_FRONTMATTER_BYTES

        given_file, given_frontmatter = self._limits
        return (
            MAX_FILE_BYTES if given_file is None else given_file,
            MAX_FRONTMATTER_BYTES if given_frontmatter is None else given_frontmatter,
        )

    # --- opening, damage, rebuild ---------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = self._open()
            except (OSError, sqlite3.Error) as error:
                if not self.in_memory:
                    raise
                # The state dir cannot hold it (read-only, full, not a folder), or this
                # process is at its open-files limit: search from the files all the same,
                # keeping the index in memory for this process.
                fix = out_of_files(error) or "fix the state dir's permissions or free space there"
                _warn_once(
                    self.warn,
                    f"{self.path}: the search index of {self.memory_dir} cannot be kept there "
                    f"({error}); searching without keeping it ({fix})",
                )
                self._conn = sqlite3.connect(":memory:", isolation_level=None,
                                             check_same_thread=False)  # fmt: skip
                self._create(self._conn)
        return self._conn

    def close(self) -> None:
        """Close the connection; the index opens again when next used. The vocabulary goes
        with it: it is keyed by the connection's PRAGMA data_version."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
            self._vocab = None

    def __enter__(self) -> "DirIndex":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _siblings(self) -> list[Path]:
        return [self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))]

    def _remove(self) -> None:
        """Remove the index and its WAL files, whatever they are (never following a link)."""
        for path in self._siblings():
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def _damaged(self, why: str) -> None:
        """Say once that the index is damaged and is rebuilt from the files."""
        self.close()
        self.rebuilt = why
        _warn_once(
            self.warn,
            f"{self.path}: the search index of {self.memory_dir} {why}; it is rebuilt from the "
            "memory files (nothing is lost: it holds only what they hold)",
        )
        self._remove()

    def _open(self, again: bool = False) -> sqlite3.Connection:
        ensure_private_dir(self.path.parent)
        for path in self._siblings():
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                self._damaged(f"is damaged ({path.name} is {file_kind(st.st_mode)})")
                break
        fresh = not self.path.exists()
        if fresh:
            # Made 0600 before SQLite opens it; its -wal and -shm files take the same mode.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            os.close(fd)
        os.chmod(self.path, 0o600, follow_symlinks=False)
        try:
            conn = self._connect()
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if fresh or not tables:
                # New, or made by a process that has not created its tables yet (empty).
                self._create(conn)
                return conn
            found = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if found.get("schema") != SCHEMA or found.get("dir") != str(self.memory_dir):
                conn.close()
                why = "was made by another version of memoryd"
                if found.get("schema") == SCHEMA:
                    why = f"belongs to another dir ({found.get('dir')})"
                self._damaged(why)
                return self._open(again=True)
        except sqlite3.DatabaseError as error:
            if again or out_of_files(error) is not None:
                raise  # a file SQLite could not open for want of files: no damage
            self._damaged(f"is damaged ({error})")
            return self._open(again=True)
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_WAIT, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
            # A deleted row's bytes are overwritten with zeros, not left in a free page: a
            # memory forgotten or purged leaves none of its text in the file.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA temp_store=MEMORY")  # e.g. _GONE's list of names
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL: a new file's only
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _create(self, conn: sqlite3.Connection) -> None:
        """The tables, unless another process made them first (both wait on one lock)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                conn.execute("COMMIT")
                return
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [("schema", SCHEMA), ("dir", str(self.memory_dir)), ("generation", "0")],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Run a step; damage found on the way is said, the index removed (the caller retries
        once on a new one)."""
        try:
            yield
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and (
                "locked" in str(error) or out_of_files(error) is not None
            ):
                raise
            self._damaged(f"is damaged ({error})")
            raise _Retry from error

    def _retrying(self, step: Callable[[], Any], *, rebuild: bool = True) -> Any:
        """Run a step; on damage (the index was removed) run it again on a new index, which a
        reading step first fills from the files."""
        for attempt in range(2):
            try:
                with self._guarded():
                    if attempt and rebuild:
                        self._update(None, BUSY_WAIT)
                    return step()
            except _Retry:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    # --- keeping it up to date ------------------------------------------------------------------
    def update(self, names: Iterable[str] | None = None, *, wait: float = BUSY_WAIT) -> Change:
        """Bring the index in step with the dir: every file by stat, or only `names` (the
        files an index pass saw change). Returns what it did; a writer that holds the index
        past `wait` seconds leaves it as it is (the search then sees the last state)."""
        only = None if names is None else sorted(n for n in set(names) if _nameable(n))
        change: Change = self._retrying(lambda: self._update(only, wait), rebuild=False)
        if self.rebuilt:
            change.rebuilt = self.rebuilt
        return change

    def scrub(self) -> None:
        """Merge each full-text table's segments into one and fold the WAL into the file,
        truncated: a deleted memory's words leave the index's files (FTS5 keeps a deleted
        row's terms in its old segments until they merge; secure_delete zeroes the pages
        freed). For `forget --purge`: a full merge costs a rewrite of the index."""
        conn = self.conn
        conn.execute("INSERT INTO docs(docs) VALUES ('optimize')")
        conn.execute("INSERT INTO words(words) VALUES ('optimize')")
        self._writes += 1
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _listing(self, dir_fd: int, only: Sequence[str]) -> dict[str, os.stat_result]:
        """lstat of `only` and the index files."""
        out = {}
        for name in (*only, INDEX_NAME, ARCHIVE_NAME):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                out[name] = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return out

    def _plan_some(
        self, conn: sqlite3.Connection, listing: dict[str, os.stat_result], only: Sequence[str]
    ) -> _Plan:
        """What to do for the files `only` names (the daemon's few changed names)."""
        marks = ", ".join("?" for _ in only)
        rows = conn.execute(
            f"SELECT file, id, ino, size, mtime_ns FROM files WHERE file IN ({marks})",  # noqa: S608
            tuple(only),
        )
        files = {f: (i, (ino, size, mtime)) for f, i, ino, size, mtime in rows}
        changed = []
        for name in only:
            st = listing.get(name)
            if st is None or name in (INDEX_NAME, ARCHIVE_NAME) or stat.S_ISDIR(st.st_mode):
                continue
            had = files.get(name)
            if had is None or had[1] != (st.st_ino, st.st_size, st.st_mtime_ns):
                changed.append(name)
        gone = [
            (n, files[n][0])
            for n in only
            if n in files and (n not in listing or stat.S_ISDIR(listing[n].st_mode))
        ]
        old = {n: files[n][0] for n in changed if n in files}
        return self._planned(conn, changed, gone, old, listing)

    def _compare(self, conn: sqlite3.Connection, listing: "_Listing") -> _Plan:
        """What to do for the whole dir: its listing (in the connection's temp table) against
        the index's files, compared in SQLite (no file's row is held in Python)."""
        changed: dict[str, None] = {}
        old = {}
        for name, doc_id in conn.execute(_CHANGED, (INDEX_NAME, ARCHIVE_NAME)):
            changed[name] = None
            if doc_id is not None:
                old[name] = doc_id
        gone = conn.execute(_GONE).fetchall()
        return self._planned(conn, list(changed), gone, old, listing.indexes)

    def _planned(
        self,
        conn: sqlite3.Connection,
        changed: list[str],
        gone: list[tuple[str, int]],
        old: dict[str, int],
        listing: dict[str, os.stat_result],
    ) -> _Plan:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        pointers = any(
            meta.get(f"stat:{name}", "") != _stat_text(listing.get(name))
            for name in (INDEX_NAME, ARCHIVE_NAME)
        ) or (self.window is not None and meta.get("window") != _window_text(self.window))
        if changed:
            from memoryd.indexing.scan import skip_reason

            changed = [name for name in changed if skip_reason(name) is None]
        return _Plan(sorted(changed), sorted(gone), old, pointers, meta, listing)

    def _update(self, only: Sequence[str] | None, wait: float) -> Change:
        try:
            return self._updated(only, wait)
        finally:
            if only is None and self._conn is not None:
                _Listing.detach(self._conn)

    def _updated(self, only: Sequence[str] | None, wait: float) -> Change:
        conn = self.conn
        with fsops.open_dir(self.memory_dir) as dir_fd:
            listing: _Listing | None = None
            if only is None:
                # One pass of stats, into the temp table and hashed as it goes. Most
                # refreshes find the dir as the index last matched it: the digest says so,
                # and the table is not compared.
                listing = _Listing()
                listing.fill(conn, dir_fd)
                if self._in_step(conn, listing.digest):
                    return Change()

            def plan() -> _Plan:
                if listing is not None:
                    return self._compare(conn, listing)
                assert only is not None
                return self._plan_some(conn, self._listing(dir_fd, only), only)

            # Another process's commit changes data_version (this connection's own do not).
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            found = plan()
            digest = listing.digest if listing is not None else ""
            if not found.any and (not digest or found.meta.get("digest") == digest):
                return Change()
            # A first build does not wait for the disk (SQLite cannot change this inside a
            # transaction): a crash of the process loses nothing that was committed, and a
            # damaged index is rebuilt from the files. 100,000 files: its commit took 1 s
            # instead of 2.7 s. The loss of power could also lose pages without a damage
            # SQLite sees (rows missing, the listing's digest saying the index is in step),
            # so once the build is in, a full checkpoint at NORMAL puts it on the disk: the
            # window is the build itself, not until the kernel writes the pages back.
            first = self._first_build(conn, found)
            if first:
                conn.execute("PRAGMA synchronous=OFF")
            try:
                return self._write(conn, dir_fd, plan, found, version, digest, wait)
            finally:
                if first:
                    with contextlib.suppress(sqlite3.Error):  # not to hide what failed
                        conn.execute("PRAGMA synchronous=NORMAL")
                        conn.execute("PRAGMA wal_checkpoint(FULL)")

    @staticmethod
    def _first_build(conn: sqlite3.Connection, found: _Plan) -> bool:
        """Whether an update reads at least BULK_MIN files into an index that holds none."""
        if len(found.changed) < BULK_MIN:
            return False
        return not conn.execute("SELECT 1 FROM files LIMIT 1").fetchone()

    def _write(
        self,
        conn: sqlite3.Connection,
        dir_fd: int,
        plan: Callable[[], _Plan],
        found: _Plan,
        version: int,
        digest: str,
        wait: float,
    ) -> Change:
        """Carry out a plan in one write transaction (planned again when another connection
        wrote since PRAGMA data_version was `version`)."""
        # A reader that found only its digest to record does not wait for a writer.
        busy = int(wait * 1000) if found.any else 0
        conn.execute(f"PRAGMA busy_timeout={busy}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                return Change()  # a writer is at it: it brings the index up to date
            raise
        try:
            # Another process may have written it meanwhile: then look again (the
            # compare costs 6 ms at 10,000 files).
            if conn.execute("PRAGMA data_version").fetchone()[0] != version:
                found = plan()
            change = Change()
            for _, doc_id in found.gone:
                self._delete(conn, doc_id)
                change.removed += 1
            bulk = self._first_build(conn, found)
            if bulk:  # made again below, in this transaction: no reader sees them gone
                for index_name in _INDEXES:
                    conn.execute(f"DROP INDEX {index_name}")
                # No memory is in the index: none cites a reference (see _cite).
                conn.execute("DELETE FROM cites")
                conn.execute("DELETE FROM refs")
                self._rids, self._rid = {"path": {}, "symbol": {}}, 0
                conn.execute(f"PRAGMA cache_size=-{BULK_CACHE_KIB}")
            for name, values in self._records(dir_fd, found, bulk):
                if name in found.old:
                    self._delete(conn, found.old[name])
                if values is not None:
                    self._insert(conn, values)
                    change.read += 1
            if bulk:
                self._rids = None
                for statement in _INDEXES.values():
                    conn.execute(statement)
                conn.execute("PRAGMA cache_size=-2000")
            if found.pointers:
                self._pointers(conn, dir_fd, found.listing, found.meta.get("window"))
                change.pointers = True
            # What the listing was when the index last matched it (see _in_step); any
            # other write leaves none, so that no earlier listing can match again.
            racy = digest and conn.execute(_RACY).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('digest', ?)",
                ("" if racy else digest,),
            )
            conn.execute("COMMIT")
            if change.any:
                self._writes += 1
        except BaseException:
            self._rids = None
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
                conn.execute("PRAGMA cache_size=-2000")
            raise
        return change

    def _records(
        self, dir_fd: int, found: _Plan, bulk: bool
    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Each changed file's record (None: it vanished), in order; a first build of at
        least PARALLEL_MIN files reads and parses them in the given worker processes, with
        the same result: they read only the dir listed (`dir_fd`'s)."""
        now_ns, limits = self._now_ns(), self.limits  # (a property: once, not a file)
        if bulk and self.workers > 0 and len(found.changed) >= PARALLEL_MIN:
            self.spawned = self.workers
            yield from _records_in_workers(
                self.memory_dir, dir_fd, found.changed, limits, now_ns, self.workers
            )
            return
        for name in found.changed:
            yield name, _record(dir_fd, name, found.listing.get(name), limits, now_ns)

    def _in_step(self, conn: sqlite3.Connection, digest: str) -> bool:
        """Whether the dir's listing (every name and its inode, size, mtime and type) is the
        one the index last matched, and its window is the one asked for: then nothing is to
        be read, and no file's row need be loaded and compared."""
        rows = conn.execute("SELECT key, value FROM meta WHERE key IN ('digest', 'window')")
        meta = dict(rows.fetchall())
        if self.window is not None and meta.get("window") != _window_text(self.window):
            return False
        return meta.get("digest") == digest

    def _now_ns(self) -> int:
        import time

        return self._clock_ns() if self._clock_ns is not None else time.time_ns()

    @staticmethod
    def _delete(conn: sqlite3.Connection, doc_id: int) -> None:
        row = conn.execute(
            "SELECT name, description, body, stem FROM docs WHERE rowid = ?", (doc_id,)
        ).fetchone()
        if row is not None:
            # The words table keeps no text of its own: a delete hands it the text it took.
            conn.execute(
                "INSERT INTO words(words, rowid, text) VALUES ('delete', ?, ?)",
                (doc_id, "\n".join(row)),
            )
            conn.execute("DELETE FROM docs WHERE rowid = ?", (doc_id,))
        rids = conn.execute("DELETE FROM cites WHERE id = ? RETURNING rid", (doc_id,)).fetchall()
        # A reference no other memory cites goes with it.
        conn.executemany(_ORPHAN, [(rid, rid) for (rid,) in rids])
        conn.execute("DELETE FROM files WHERE id = ?", (doc_id,))

    def _insert(self, conn: sqlite3.Connection, values: dict[str, Any]) -> None:
        """Put one file's record (_record) in the index."""
        name = values["file"]
        body = values.pop("body", None)
        refs = values.pop("refs", None)
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        cursor = conn.execute(
            f"INSERT INTO files({columns}) VALUES ({marks})",  # noqa: S608 - our own column names
            tuple(values.values()),
        )
        doc_id = int(cursor.lastrowid or 0)
        if body is not None and refs is not None:
            texts = (values["name"], values["description"], body, _stem_words(name))
            conn.execute(
                "INSERT INTO docs(rowid, name, description, body, stem) VALUES (?, ?, ?, ?, ?)",
                (doc_id, *texts),
            )
            conn.execute("INSERT INTO words(rowid, text) VALUES (?, ?)", (doc_id, "\n".join(texts)))
            self._cite(conn, doc_id, refs)

    def _cite(self, conn: sqlite3.Connection, doc_id: int, refs: "Refs") -> None:
        """A memory's references (the dream pass's extraction): each a `refs` row once,
        cited by the memory in `cites`."""
        cited: dict[int, None] = {}
        if self._rids is None:
            for row in _path_refs_of(refs):
                conn.execute(_REF, row)
                cited[conn.execute(_REF_ID, row[:2]).fetchone()[0]] = None
        else:
            # A first build: the ids are given here, and each distinct reference is made a
            # row once (the table was empty).
            kinds: tuple[tuple[str, Sequence[str], Callable[[str], RefRow | None]], ...] = (
                ("path", refs.paths, _path_row),
                ("symbol", refs.symbols, _symbol_row),
            )
            for kind, refs_of_kind, row_of in kinds:
                ids = self._rids[kind]
                for ref in refs_of_kind:
                    rid = ids.get(ref)
                    if rid is None:
                        made = row_of(ref)
                        rid = ids[ref] = 0 if made is None else self._next_rid()
                        if made is not None:
                            conn.execute(_REF_WITH_ID, (rid, *made))
                    if rid:
                        cited[rid] = None
        conn.executemany("INSERT INTO cites(id, rid) VALUES (?, ?)", [(doc_id, r) for r in cited])

    def _next_rid(self) -> int:
        self._rid += 1
        return self._rid

    def _pointers(
        self,
        conn: sqlite3.Connection,
        dir_fd: int,
        listing: dict[str, os.stat_result],
        known_window: str | None,
    ) -> dict[str, str]:
        """Which index file points at which memory: MEMORY.md (`index`), else the archive;
        and which of MEMORY.md's the agent does not see in what it loads."""
        window = self.window or _window_of(known_window, self.memory_dir)
        rows: dict[str, tuple[str, int]] = {}
        hidden: dict[str, str] = {}
        for name, tier in ((ARCHIVE_NAME, "archive"), (INDEX_NAME, "index")):
            text = ""
            if name in listing and stat.S_ISREG(listing[name].st_mode):
                try:
                    data, _ = fsops.read_regular(dir_fd, name, INDEX_MAX_BYTES)
                    text = data.decode("utf-8", "replace")
                except (OSError, ValueError):
                    text = ""
            numbers = _line_numbers(text) if text else {}
            found: dict[str, tuple[str, int]] = {}
            for pointer in pointer_lines(text):
                found.setdefault(pointer.target, (tier, numbers.get(pointer.content, 0)))
            rows.update(found)  # the index's own pointers win over the archive's
            if tier == "index":
                hidden = _hidden_pointers(text, window) if text else {}
        conn.execute("DELETE FROM pointers")
        conn.executemany(
            "INSERT INTO pointers(file, tier, line, hidden) VALUES (?, ?, ?, ?)",
            [(f, t, n, hidden.get(f, "")) for f, (t, n) in sorted(rows.items())],
        )
        stats = {f"stat:{n}": _stat_text(listing.get(n)) for n in (INDEX_NAME, ARCHIVE_NAME)}
        stats["window"] = _window_text(window)
        conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", stats.items())
        return stats

    # --- reading --------------------------------------------------------------------------------
    _SELECT = (
        "SELECT f.id, f.file, f.name, f.description, f.type, f.date, f.flags, "
        "COALESCE(p.tier, 'unindexed'), COALESCE(p.line, 0), COALESCE(p.hidden, '')"
    )

    def _filters(
        self, type_: str | None, since: float | None, until: float | None
    ) -> tuple[str, list[object]]:
        sql, args = "", list[object]()
        if type_:
            sql += " AND f.type = ?"
            args.append(type_)
        if since is not None:
            sql += " AND f.date >= ?"
            args.append(since)
        if until is not None:
            sql += " AND f.date < ?"
            args.append(until)
        return sql, args

    def match(
        self,
        expression: str,
        *,
        type_: str | None = None,
        since: float | None = None,
        until: float | None = None,
        stale_before: float = 0.0,
        limit: int = 20,
    ) -> list[Row]:
        """Memories matching an FTS5 expression, confirmed ones first, then by bm25.

        bm25 costs about a microsecond per matching memory. A query matching more than
        RANK_ALL of them (words nearly every memory holds) ranks by bm25 only the matches in
        the fields that weigh most: name and file name, with the description too when those
        are still few enough; and fills up to `limit` with the most recently indexed of the other
        matches (mostly the newest files, as a changed file is indexed again: read in rowid
        order, which stops after `limit` rows instead of sorting every match)."""
        args = (type_, since, until, stale_before, limit)
        if self.matches(expression, RANK_ALL + 1) <= RANK_ALL:
            return self._match(expression, *args)
        best = ""  # the widest fields whose matches are still few enough to rank
        for fields in ("{name stem}", "{name description stem}"):
            narrowed = f"{fields} : ({expression})"
            if self.matches(narrowed, RANK_ALL + 1) > RANK_ALL:
                break
            best = narrowed
        ranked = self._match(best, *args) if best else []
        if len(ranked) >= limit:
            return ranked
        rest = self._match(expression, *args, newest=True, skip=ranked)
        # Scores after every bm25 score (those are negative), in the order found.
        rest = [row._replace(score=float(n)) for n, row in enumerate(rest, 1)]
        return ranked + rest[: limit - len(ranked)]

    def _match(
        self,
        expression: str,
        type_: str | None,
        since: float | None,
        until: float | None,
        stale_before: float,
        limit: int,
        *,
        newest: bool = False,
        skip: Sequence[Row] = (),
    ) -> list[Row]:
        where, args = self._filters(type_, since, until)
        if skip:
            where += f" AND f.id NOT IN ({', '.join(str(r.id) for r in skip)})"
        score = "0.0" if newest else f"bm25(docs, {', '.join(map(str, WEIGHTS))})"
        order = "docs.rowid DESC" if newest else "(f.date < ?), score"
        sql = (
            f"{self._SELECT}, {score} AS score, "
            "snippet(docs, -1, char(1), char(2), '…', 14) "
            "FROM docs JOIN files f ON f.id = docs.rowid "
            "LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE docs MATCH ?{where} ORDER BY {order} LIMIT ?"
        )
        values = (expression, *args, *(() if newest else (stale_before,)), limit)
        rows = self._retrying(lambda: self.conn.execute(sql, values).fetchall())
        return [_row(r, score=r[10], snippet=r[11]) for r in rows]

    def matches(self, expression: str, at_most: int | None = None) -> int:
        """How many memories match an FTS5 expression, counting no further than `at_most`
        (no ranking: cheap, and it stops there)."""
        sql = "SELECT count(*) FROM docs WHERE docs MATCH ?"
        args: tuple[object, ...] = (expression,)
        if at_most is not None:
            sql = "SELECT count(*) FROM (SELECT rowid FROM docs WHERE docs MATCH ? LIMIT ?)"
            args = (expression, at_most)
        return int(self._retrying(lambda: self.conn.execute(sql, args).fetchone()[0]))

    def has(self, expression: str) -> bool:
        """Whether any memory matches an FTS5 expression."""
        sql = "SELECT 1 FROM docs WHERE docs MATCH ? LIMIT 1"
        return bool(self._retrying(lambda: self.conn.execute(sql, (expression,)).fetchone()))

    def named(self, keys: Sequence[str], **filters: Any) -> list[Row]:
        """Memories whose name or file stem is one of `keys` (lower-cased)."""
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        where, args = self._filters(
            filters.get("type_"), filters.get("since"), filters.get("until")
        )
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE f.kind = 'memory' AND (f.key IN ({marks}) OR f.stem IN ({marks})){where} "
            "ORDER BY f.file"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (*keys, *keys, *args)).fetchall())
        return [_row(r) for r in rows]

    def recent(
        self,
        *,
        type_: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
    ) -> list[Row]:
        """Memories in a time frame, newest first."""
        where, args = self._filters(type_, since, until)
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE f.kind = 'memory'{where} ORDER BY f.date DESC, f.file LIMIT ?"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (*args, limit)).fetchall())
        return [_row(r) for r in rows]

    def by_refs(self, kind: str, column: str, values: Sequence[str]) -> list[tuple[Row, str, str]]:
        """Memories with a reference of `kind` whose `column` (norm or base) is one of
        `values`; each with the reference as written and as normalised."""
        assert column in ("norm", "base")
        if not values:
            return []
        marks = ", ".join("?" for _ in values)
        # INDEXED BY: refs_ref's kind would do as well for the planner, which has no stats.
        sql = (
            f"{self._SELECT}, r.ref, r.norm FROM refs r INDEXED BY refs_{column} "
            "JOIN cites c ON c.rid = r.rid JOIN files f ON f.id = c.id "
            "LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE r.kind = ? AND r.{column} IN ({marks}) ORDER BY f.file"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (kind, *values)).fetchall())
        return [(_row(r), r[10], r[11]) for r in rows]

    def path_refs_under(self, prefixes: Sequence[str]) -> list[tuple[Row, str]]:
        """Memories citing a path that is one of `prefixes` or lies below one."""
        out: list[tuple[Row, str]] = []
        for prefix in prefixes:
            sql = (
                f"{self._SELECT}, r.ref FROM refs r INDEXED BY refs_norm "
                "JOIN cites c ON c.rid = r.rid JOIN files f ON f.id = c.id "
                "LEFT JOIN pointers p ON p.file = f.file "
                "WHERE r.kind = 'path' AND r.norm >= ? AND r.norm < ? ORDER BY f.file"
            )
            low, high = prefix + "/", prefix + "0"  # "0" sorts right after "/"
            rows = self._retrying(lambda: self.conn.execute(sql, (low, high)).fetchall())  # noqa: B023
            out += [(_row(r), r[10]) for r in rows]
        return out

    def row(self, file: str) -> Row | None:
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            "WHERE f.file = ? AND f.kind = 'memory'"
        )
        found = self._retrying(lambda: self.conn.execute(sql, (file,)).fetchone())
        return _row(found) if found else None

    def excluded(self) -> list[Excluded]:
        sql = "SELECT file, kind, problem, hint FROM files WHERE kind != 'memory' ORDER BY file"
        rows = self._retrying(lambda: self.conn.execute(sql).fetchall())
        return [Excluded(f, k, p + (f" ({h})" if h else "")) for f, k, p, h in rows]

    def starting(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` distinct words of the dir's memories (as written, lower-cased) that
        start with `prefix`, in order."""
        sql = "SELECT term FROM words_vocab WHERE term >= ? AND term < ? LIMIT ?"
        args = (prefix, prefix + "\U0010ffff", limit)
        found: list[str] = self._retrying(lambda: [t for (t,) in self.conn.execute(sql, args)])
        return found

    def vocabulary(self) -> "Vocabulary":
        """Every distinct word of the dir's memories, as written (lower-cased), by length,
        for fuzzy matching; kept while the index does not change."""
        conn = self.conn
        generation = (int(conn.execute("PRAGMA data_version").fetchone()[0]), self._writes)
        if self._vocab is not None and self._vocab[0] == generation:
            return self._vocab[1]

        def read() -> Vocabulary:
            # In the vocabulary's order, each word joined into its length's piece as it comes:
            # no sort (SQLite's GROUP BY held every word at once: 6 MB of the MCP server's
            # peak at 110,000 words), and at most VOCABULARY_PIECE words per length pending.
            pending: dict[int, list[str]] = {}
            pieces: dict[int, list[str]] = {}
            for (term,) in conn.execute("SELECT term FROM words_vocab"):
                words = pending.setdefault(len(term), [])
                words.append(term)
                if len(words) == VOCABULARY_PIECE:
                    pieces.setdefault(len(term), []).append("\n".join(words))
                    words.clear()
            for length, words in pending.items():
                if words:
                    pieces.setdefault(length, []).append("\n".join(words))
            return Vocabulary(pieces)

        vocabulary: Vocabulary = self._retrying(read)
        self._vocab = (generation, vocabulary)
        return vocabulary


class Vocabulary:
    """Words by length, kept as strings of VOCABULARY_PIECE words each: 110,000 words held
    as str objects were 8 MB of the MCP server's memory, joined 1 MB. A typo query asks for
    a few lengths, whose words are split out a chunk of at most VOCABULARY_CHUNK at a time:
    split out whole, the most common lengths' words were 12 MB of the server's peak.
    `held_most`: the most words a chunk held, for the tests."""

    __slots__ = ("_pieces", "held_most")

    def __init__(self, pieces: dict[int, list[str]]) -> None:
        self._pieces = pieces
        self.held_most = 0

    def chunks(self, length: int) -> Iterator[list[str]]:
        """The words of this length, in order, at most VOCABULARY_CHUNK at a time."""
        pieces = self._pieces.get(length, [])
        step = max(1, VOCABULARY_CHUNK // VOCABULARY_PIECE)
        for start in range(0, len(pieces), step):
            words = "\n".join(pieces[start : start + step]).split("\n")
            self.held_most = max(self.held_most, len(words))
            yield words

    def __len__(self) -> int:
        return len(self._pieces)


class _Retry(Exception):
    """The index was damaged and removed: the step runs again on a new one."""


def _row(r: Sequence[Any], *, score: float = 0.0, snippet: str = "") -> Row:
    try:
        flags = tuple(safejson.loads(r[6]))
    except ValueError:
        flags = ()
    return Row(r[0], r[1], r[2], r[3], r[4], r[5], flags, r[7], r[8], score, snippet, hidden=r[9])


def _record(
    dir_fd: int, name: str, st: os.stat_result | None, limits: tuple[int, int], now_ns: int
) -> dict[str, Any] | None:
    """One file of the dir as the index holds it (its `files` columns, and a memory's body
    and references); None when it vanished. `st`: its lstat, when the listing has it."""
    if st is None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
    record: dict[str, Any] = {"kind": "problem"}
    fst = st
    if stat.S_ISLNK(st.st_mode):
        record["problem"] = "it is a symlink; memoryd never follows links in a memory dir"
        record["hint"] = "replace it with the file itself"
    elif not stat.S_ISREG(st.st_mode):
        record["problem"] = f"it is {file_kind(st.st_mode)}, not a regular file"
        record["hint"] = "memoryd never opens these; remove it from the memory dir"
    else:
        try:
            data, fst = fsops.read_regular(dir_fd, name, limits[0], stable=True)
        except FileNotFoundError:
            return None
        except fsops.ChangedWhileReading as moving:
            fst = moving.st
            record["problem"] = "it changed while it was being read"
            record["hint"] = "it is read again next time"
            record["mtime_ns"] = -1
        except ValueError:
            record["problem"] = f"it is over the {limits[0]}-byte limit"
            record["hint"] = "split it into smaller memories or raise parse.max_file_bytes"
        except OSError as error:
            record["problem"] = f"it cannot be read ({error.strerror or error})"
            record["hint"] = "check the file's permissions"
        else:
            record = _parsed(name, data, fst, limits)
    mtime_ns = record.pop("mtime_ns", fst.st_mtime_ns)
    if mtime_ns >= now_ns - RACY_NS:
        mtime_ns = -1  # may change again within the same tick: read it again next time
    return {
        "file": name,
        "ino": fst.st_ino,
        "size": fst.st_size,
        "mtime_ns": mtime_ns,
        "date": fst.st_mtime_ns / 1e9,
        **record,
    }


def _parsed(name: str, data: bytes, fst: os.stat_result, limits: tuple[int, int]) -> dict[str, Any]:
    from memoryd.memfile import Memory, NotMemory, parse_date, parse_memory

    parsed = parse_memory(name, data, max_file_bytes=limits[0], max_frontmatter_bytes=limits[1])
    if isinstance(parsed, NotMemory):
        return {
            "kind": "note",
            "problem": "it has no frontmatter, so it is not a memory",
            "hint": "add name/description/type frontmatter to make it one",
        }
    if not isinstance(parsed, Memory):
        return {"kind": "problem", "problem": parsed.message, "hint": parsed.hint}
    from memoryd.dream.refs import extract_refs
    from memoryd.secrets import find, mask, summary

    # The index holds every text field masked: its snippets are shown, and the file is kept
    # in the state dir. A secret is a flag of the memory's result, by line and kind.
    found = find(data.decode("utf-8", "replace"))
    kept = mask if found else str
    body = kept(parsed.body)
    flags = _flags(parsed) + ([f"holds a secret ({summary(found)})"] if found else [])
    refs = extract_refs(body)
    return {
        "kind": "memory",
        "name": kept(parsed.name),
        "key": kept(parsed.display_name).lower(),
        "stem": name.removesuffix(".md").lower(),
        "description": kept(parsed.description),
        "type": parsed.type,
        "date": max(fst.st_mtime_ns / 1e9, parse_date(parsed.modified)),
        "flags": json.dumps(flags),
        "body": body,
        "refs": refs,
    }


def _read_files(
    memory_dir: str,
    listed: tuple[int, int],
    names: Sequence[str],
    limits: tuple[int, int],
    now_ns: int,
) -> list[tuple[str, dict[str, Any] | None]]:
    """A worker process's part of a first build: these files' records, in order. It opens
    the dir by path, so it reads only when that is still the dir listed (`listed`: its
    st_dev and st_ino); else DirReplaced."""
    with fsops.open_dir(Path(memory_dir)) as dir_fd:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != listed:
            raise DirReplaced(
                f"{memory_dir}: another dir is at this path than the one listed for the first "
                "build (replaced since); the building process reads its files instead"
            )
        return [(name, _record(dir_fd, name, None, limits, now_ns)) for name in names]


def _records_in_workers(
    memory_dir: Path,
    dir_fd: int,
    names: Sequence[str],
    limits: tuple[int, int],
    now_ns: int,
    workers: int,
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The records of `names` in the dir `dir_fd` (open on `memory_dir`), in order, read
    and parsed by `workers` processes (started fresh, never forked: the daemon has threads),
    READ_CHUNK files a task and at most two tasks a worker ahead of the caller (the records
    not yet put in are what is held). A pool that breaks, or a worker that finds another dir
    at the path (DirReplaced), leaves the rest to be read here, through `dir_fd`."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    chunks = [names[i : i + READ_CHUNK] for i in range(0, len(names), READ_CHUNK)]
    st = os.fstat(dir_fd)
    listed = (st.st_dev, st.st_ino)
    done = 0  # records given
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        ahead: deque[Future[list[tuple[str, dict[str, Any] | None]]]] = deque()
        for chunk in chunks:
            ahead.append(pool.submit(_read_files, str(memory_dir), listed, chunk, limits, now_ns))
            if len(ahead) >= 2 * workers:
                for record in ahead.popleft().result():
                    yield record
                    done += 1
        while ahead:
            for record in ahead.popleft().result():
                yield record
                done += 1
    except (OSError, RuntimeError, EOFError, pickle.PickleError):  # BrokenProcessPool too
        for name in names[done:]:
            yield name, _record(dir_fd, name, None, limits, now_ns)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stem_words(filename: str) -> str:
    return filename.removesuffix(".md").replace("_", " ").replace("-", " ")


def _stat_text(st: os.stat_result | None) -> str:
    if st is None:
        return "-"
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{stat.S_IFMT(st.st_mode)}"


def _window_text(window: Window) -> str:
    return ":".join(map(str, window))


def _window_of(text: str | None, memory_dir: Path) -> Window:
    """The window an index was last given (`meta.window`), else the default one: Claude
    Code's for an auto-memory dir (`projects/<slug>/memory`), the plain window elsewhere
    (agentview.view_kind_of, by the path alone)."""
    from memoryd.agentview import MAX_LINES, MAX_UNITS, ViewKind, view_kind_of

    kind, _, sizes = (text or "").partition(":")
    lines, _, units = sizes.partition(":")
    if kind in tuple(ViewKind) and lines.isdigit() and units.isdigit():
        return (kind, int(lines), int(units))
    return view_kind_of(memory_dir).value, MAX_LINES, MAX_UNITS


def _hidden_pointers(text: str, window: Window) -> dict[str, str]:
    """The files MEMORY.md points at only on lines the agent does not see, each with why
    (the first hidden line's): what `memoryd dirs` counts as hidden pointers."""
    from memoryd.agentview import ViewKind
    from memoryd.model.index import Budget, LinkKind, split_lines, view_of

    kind, max_lines, max_units = window
    view = view_of(text, Budget(max_lines=max_lines, max_chars=max_units), ViewKind(kind))
    seen: set[str] = set()
    hidden: dict[str, str] = {}
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL:
            continue
        why = view.hidden(number)
        if why is None:
            seen.add(link.target)
        else:
            hidden.setdefault(link.target, why.value)
    return {target: why for target, why in hidden.items() if target not in seen}


def _line_numbers(text: str) -> dict[str, int]:
    """Each line's content -> its first line number (1-based)."""
    out: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), 1):
        out.setdefault(line.removesuffix("\r"), number)
    return out


def update_dir(
    state_dir: Path,
    real_path: Path,
    names: Iterable[str] | None = None,
    *,
    max_file_bytes: int | None = None,
    max_frontmatter_bytes: int | None = None,
    warn: Warn = _stderr,
    workers: int = 0,
) -> Change:
    """Bring the search index of the memory dir at `real_path` in step: only `names` (the
    files an index pass was told changed; the index files are always looked at), or every
    file by stat when None. The daemon's hook, called after its index pass over the dir with
    the same names. Never raises: a damaged index is rebuilt, and one the state dir cannot
    hold (or a memory dir gone meanwhile) is said once and left to the next command.
    `workers`: DirIndex's (the daemon gives worker_count())."""
    index = DirIndex(
        index_path(state_dir, real_path),
        real_path,
        warn=warn,
        max_file_bytes=max_file_bytes,
        max_frontmatter_bytes=max_frontmatter_bytes,
        in_memory=False,
        workers=workers,
    )
    try:
        with index:
            return index.update(names)
    except (OSError, sqlite3.Error) as error:
        _warn_once(warn, f"{index.path}: the search index of {real_path} was not updated ({error})")
        return Change()
