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
import os
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.model.agentview import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import ensure_private_dir, file_kind
from memoryd.recall.listing import (
    CHANGED,
    GONE,
    Listing,
    Window,
    nameable,
    stat_text,
    window_of,
    window_text,
    write_pointers,
)
from memoryd.recall.reads import Excluded, Row, Searches, Vocabulary
from memoryd.recall.records import (
    RACY_NS,
    read_record,
    records_in_workers,
    worker_count,
)
from memoryd.recall.rows import RefIds, delete_doc, insert_record
from memoryd.storage import fsops
from memoryd.storage.fdlimit import out_of_files

# What other modules take from here: the index's rows and its first build's workers.
__all__ = ["RACY_NS", "Excluded", "Row", "Vocabulary", "Window", "worker_count"]

# The parser (memoryd.model.memfile) and the scan's rules are imported when a file is read, not
# by a search of an index already in step; the limits' None means memfile's defaults.

# 5: texts held masked (memoryd.model.secrets), secrets flagged: an index of an older schema
# may hold a secret's value, and is made anew.
SCHEMA = "5"  # 2: pointers.hidden, files_racy; 3: files_stat; 4: refs once, cited in cites
INDEX_FOLDER = "recall"  # under the state dir
# Commands wait this long for a writer (the daemon, another command) to finish; a reader that
# must answer now (the MCP server) passes a shorter wait and searches what is there.
BUSY_WAIT = 30.0

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
# files_stat: the listing's compare (CHANGED) finds each entry's stat there, not in its
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
# a DirIndex is given (memoryd's own commands, server and daemon give records.worker_count():
# up to PARALLEL_WORKERS, one a CPU but this one's), READ_CHUNK files a task, while this one puts
# them in: reading, parsing and reference extraction were half of a first build's CPU time
# (100,000 synthetic memories: 13.5 s of 25.5 s), SQLite the rest. None by default: a spawned
# worker imports its parent's __main__ again, and a caller's script without an
# `if __name__ == "__main__":` guard would run its whole build again in each.
PARALLEL_MIN = 20_000
# Pages of 8 KiB: a memory's text (1-3 KiB) left half of many 4 KiB pages empty (a new
# index only: an index's page size is set when it is made).
PAGE_SIZE = 8192

Warn = Callable[[str], None]


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
    from memoryd.storage.state import dir_key

    return state_dir / INDEX_FOLDER / f"{dir_key(real_path)}.sqlite"


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


# A file to be read again whatever its stat (see RACY_NS); on the partial index files_racy.
_RACY = "SELECT 1 FROM files WHERE mtime_ns = -1 LIMIT 1"


@dataclass(frozen=True, slots=True)
class IndexOptions:
    """How a DirIndex reads its dir and where it keeps itself."""

    warn: Warn = _stderr
    # The parse limits; None: memfile's defaults.
    max_file_bytes: int | None = None
    max_frontmatter_bytes: int | None = None
    clock_ns: Callable[[], int] | None = None  # for the racy-file window; None: the clock
    in_memory: bool = True  # an index the state dir cannot hold is kept in memory
    # The agent's window that says which pointers it does not see; None (the daemon's
    # hook): the one the index was last given, else the default for the dir's path.
    window: Window | None = None
    # At most this many worker processes read a first build of PARALLEL_MIN files or more
    # (0: it is read in this process; see records.worker_count).
    workers: int = 0


class DirIndex(Searches):
    """The search index of one memory dir (see the module docstring). Not thread-safe: one
    per thread."""

    def __init__(
        self, path: Path, memory_dir: Path, options: IndexOptions = IndexOptions()
    ) -> None:
        self.path = path
        self.in_memory = options.in_memory
        self.memory_dir = memory_dir
        self.warn = options.warn
        self._limits = (options.max_file_bytes, options.max_frontmatter_bytes)
        self._clock_ns = options.clock_ns
        self._conn: sqlite3.Connection | None = None
        self.rebuilt = ""  # why the index was made anew in this process, if it was
        self._vocab: tuple[tuple[int, int], Vocabulary] | None = None
        self._writes = 0  # own commits: they leave PRAGMA data_version as it was
        # In a first build: the refs rows' ids by kind and ref (0: no row), given here.
        self._rids: RefIds | None = None
        self.workers = options.workers
        self.spawned = 0  # processes the last first build read the files in (0: none)
        self.window = options.window

    @property
    def limits(self) -> tuple[int, int]:
        """(max file bytes, max frontmatter bytes): those given, else memfile's."""
        from memoryd.model.memfile import MAX_FILE_BYTES, MAX_FRONTMATTER_BYTES

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
                import shutil

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
            conn.execute("PRAGMA temp_store=MEMORY")  # e.g. GONE's list of names
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
        only = None if names is None else sorted(n for n in set(names) if nameable(n))
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

    def _compare(self, conn: sqlite3.Connection, listing: "Listing") -> _Plan:
        """What to do for the whole dir: its listing (in the attached listing table) against
        the index's files, compared in SQLite (no file's row is held in Python)."""
        changed: dict[str, None] = {}
        old = {}
        for name, doc_id in conn.execute(CHANGED, (INDEX_NAME, ARCHIVE_NAME)):
            changed[name] = None
            if doc_id is not None:
                old[name] = doc_id
        gone = conn.execute(GONE).fetchall()
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
            meta.get(f"stat:{name}", "") != stat_text(listing.get(name))
            for name in (INDEX_NAME, ARCHIVE_NAME)
        ) or (self.window is not None and meta.get("window") != window_text(self.window))
        if changed:
            from memoryd.indexing.scan import skip_reason

            changed = [name for name in changed if skip_reason(name) is None]
        return _Plan(sorted(changed), sorted(gone), old, pointers, meta, listing)

    def _update(self, only: Sequence[str] | None, wait: float) -> Change:
        try:
            return self._updated(only, wait)
        finally:
            if only is None and self._conn is not None:
                Listing.detach(self._conn)

    def _updated(self, only: Sequence[str] | None, wait: float) -> Change:
        conn = self.conn
        with fsops.open_dir(self.memory_dir) as dir_fd:
            listing: Listing | None = None
            if only is None:
                # One pass of stats, hashed. Most refreshes find the dir as the index last
                # matched it: the digest says so, and no table is filled or compared.
                listing = Listing()
                listing.fill(conn, dir_fd)
                if self._in_step(conn, listing.digest):
                    return Change()
                listing.table(conn)

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
                delete_doc(conn, doc_id)
                change.removed += 1
            bulk = self._first_build(conn, found)
            if bulk:  # made again below, in this transaction: no reader sees them gone
                for index_name in _INDEXES:
                    conn.execute(f"DROP INDEX {index_name}")
                # No memory is in the index: none cites a reference (see rows.cite).
                conn.execute("DELETE FROM cites")
                conn.execute("DELETE FROM refs")
                self._rids = RefIds()
                conn.execute(f"PRAGMA cache_size=-{BULK_CACHE_KIB}")
            for name, values in self._records(dir_fd, found, bulk):
                if name in found.old:
                    delete_doc(conn, found.old[name])
                if values is not None:
                    insert_record(conn, values, self._rids)
                    change.read += 1
            if bulk:
                self._rids = None
                for statement in _INDEXES.values():
                    conn.execute(statement)
                conn.execute("PRAGMA cache_size=-2000")
            if found.pointers:
                window = self.window or window_of(found.meta.get("window"), self.memory_dir)
                write_pointers(conn, dir_fd, found.listing, window)
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
            yield from records_in_workers(
                self.memory_dir, dir_fd, found.changed, limits, now_ns, self.workers
            )
            return
        for name in found.changed:
            yield name, read_record(dir_fd, name, found.listing.get(name), limits, now_ns)

    def _in_step(self, conn: sqlite3.Connection, digest: str) -> bool:
        """Whether the dir's listing (every name and its inode, size, mtime and type) is the
        one the index last matched, and its window is the one asked for: then nothing is to
        be read, and no file's row need be loaded and compared."""
        rows = conn.execute("SELECT key, value FROM meta WHERE key IN ('digest', 'window')")
        meta = dict(rows.fetchall())
        if self.window is not None and meta.get("window") != window_text(self.window):
            return False
        return meta.get("digest") == digest

    def _now_ns(self) -> int:
        import time

        return self._clock_ns() if self._clock_ns is not None else time.time_ns()


class _Retry(Exception):
    """The index was damaged and removed: the step runs again on a new one."""


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
    options = IndexOptions(
        warn=warn,
        max_file_bytes=max_file_bytes,
        max_frontmatter_bytes=max_frontmatter_bytes,
        in_memory=False,
        workers=workers,
    )
    index = DirIndex(index_path(state_dir, real_path), real_path, options)
    try:
        with index:
            return index.update(names)
    except (OSError, sqlite3.Error) as error:
        _warn_once(warn, f"{index.path}: the search index of {real_path} was not updated ({error})")
        return Change()
