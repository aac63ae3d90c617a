"""The state store: memoryd's own state in one SQLite file, `state.sqlite` in the state dir.

Every concern that keeps state (kept versions, per-dir state, caches, acknowledgements, restore
pins, trash days, refused plans and links, consult evidence, the pass journal, alarms,
transcript offsets) owns its tables and declares them as a `Schema`; `StateDB.ensure` creates
them once per file. WAL lets the daemon, commands, hooks and the MCP server read while one of
them writes; a write is one `transaction()` (BEGIN IMMEDIATE), and nested `transaction()`s join
the outer one, so a pass that touches several concerns commits once.

Damage is never handled in silence: a path that is not a regular file, a file SQLite cannot
read, a damaged page met by any statement or row fetched on the store's connections (a read
outside a transaction too), or `PRAGMA quick_check` failing at a process's first open (of every
table but the kept versions' bytes, `UNCHECKED`, each checked against its sha256 when read) is
`StateDamaged`, naming the file and what to do. A `disposable` schema (a cache) is dropped and
made again when its version changes; any other of another version is `StateDamaged` too, so
kept versions are never dropped by an upgrade.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from memoryd.errors import MemorydError
from memoryd.paths import ensure_private_dir

FILE_NAME = "state.sqlite"
# Writers wait this long for another process's transaction (a pass commits in well under it).
BUSY_WAIT = 30.0
PAGE_SIZE = 16384
UNCHECKED = frozenset({"versions_objects"})  # ~90% of the file at 10,000 memories


def is_damage(error: BaseException) -> bool:
    """Whether SQLite's error is damage: a damaged page (say in an UNCHECKED table), or a file
    SQLite does not take for a database."""
    name = getattr(error, "sqlite_errorname", "")
    return name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB"


def raise_damaged(path: Path, error: BaseException) -> None:
    """Raise StateDamaged naming the file for damage (`is_damage`); returns for any other
    error."""
    if not is_damage(error):
        return
    if getattr(error, "sqlite_errorname", "") == "SQLITE_NOTADB":
        raise StateDamaged(path, f"is not a readable SQLite file ({error})") from error
    raise StateDamaged(path, f"is damaged ({error})") from error


def raise_named(path: Path, error: BaseException) -> None:
    """Raise what a failed statement means, naming the file: a write SQLite could not make (a
    full disk, a file size limit, an I/O error) as its OSError, said as for any other file;
    damage as StateDamaged (`raise_damaged`). Returns for any other error."""
    raise_damaged(path, error)
    name = getattr(error, "sqlite_errorname", "")
    if name == "SQLITE_FULL":
        code = errno.ENOSPC
    elif name.startswith("SQLITE_IOERR"):
        # SQLite says "I/O error" for a write past the file size limit (EFBIG) too.
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        code = errno.EIO if limit == resource.RLIM_INFINITY else errno.EFBIG
    else:
        return
    raise OSError(code, f"{os.strerror(code)} ({error})", str(path)) from error


class StateDamaged(MemorydError):
    """The state store cannot be used as it is; the message names the file and what to do."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path}: memoryd's state store {why}. Stop memoryd, move the file aside "
            f"(it may hold kept versions: keep it) and start again; memoryd makes a new one "
            f"and rebuilds its caches from the memory dirs"
        )


def _naming_damage(method: Callable[..., Any]) -> Callable[..., Any]:
    """A method of sqlite3.Cursor whose damage met is StateDamaged naming the file."""

    @functools.wraps(method)
    def named(self: _Cursor, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as error:
            raise_damaged(self._path(), error)
            raise

    return named


class _Cursor(sqlite3.Cursor):
    """A cursor on the state file: a damaged page met by a statement or by a row fetched is
    StateDamaged naming the file (`raise_damaged`), whoever reads, inside a transaction or
    not; any other error is raised as it is."""

    execute = _naming_damage(sqlite3.Cursor.execute)
    executemany = _naming_damage(sqlite3.Cursor.executemany)
    executescript = _naming_damage(sqlite3.Cursor.executescript)
    fetchone = _naming_damage(sqlite3.Cursor.fetchone)
    fetchmany = _naming_damage(sqlite3.Cursor.fetchmany)
    fetchall = _naming_damage(sqlite3.Cursor.fetchall)
    __next__ = _naming_damage(sqlite3.Cursor.__next__)

    def _path(self) -> Path:
        return cast(_Connection, self.connection).state_path

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """The rows, each stepped to in C (a `__next__` of its own costs a call a row)."""
        step = super().__next__
        try:
            while True:
                yield step()
        except StopIteration:
            return
        except sqlite3.DatabaseError as error:
            raise_damaged(self._path(), error)
            raise


class _Connection(sqlite3.Connection):
    """A connection to the state file whose statements run on `_Cursor`s."""

    state_path: Path

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        return cast(_Cursor, self.cursor().execute(sql, parameters))

    def executemany(self, sql: str, parameters: Any, /) -> _Cursor:
        return cast(_Cursor, self.cursor().executemany(sql, parameters))

    def executescript(self, sql_script: str, /) -> _Cursor:
        return cast(_Cursor, self.cursor().executescript(sql_script))


@dataclass(frozen=True, slots=True)
class Schema:
    """One concern's tables: `ddl` is run once, in one transaction, when the file lacks them.

    `version` is compared with what the file holds; a `disposable` schema (a cache anything
    can rebuild) is dropped (`tables`) and made again on a mismatch, any other is damage.
    `reader` looks for the first of `tables`.
    """

    name: str
    version: int
    ddl: str
    tables: tuple[str, ...] = ()
    disposable: bool = False


class StateDB:
    """One state file, one connection per thread (SQLite connections are not shared)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._ensured: set[str] = set()
        self._checked = False

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> StateDB:
        return shared(state_dir / FILE_NAME)

    # -- connections ---------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the file checked) on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            self._local.depth = 0
            self._local.changes = conn.total_changes  # what it wrote since (see release)
        return conn

    def _open(self) -> sqlite3.Connection:
        ensure_private_dir(self.path.parent)
        self._refuse_special()
        if not self.path.exists():
            # Made 0600 before SQLite opens it; its -wal and -shm files take the same mode.
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            os.close(os.open(self.path, flags, 0o600))
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_WAIT,
                isolation_level=None,
                check_same_thread=False,
                factory=_Connection,
            )
        except sqlite3.Error as error:
            raise StateDamaged(self.path, f"cannot be opened ({error})") from error
        conn.state_path = self.path
        try:
            # Before WAL (a new file's only; an older file keeps its own): a kept version of
            # a few KB fits in a page with others, never one page each nor an overflow page.
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            conn.execute("PRAGMA synchronous=NORMAL")
            # A deleted row's bytes are zeroed: a purged secret leaves nothing in free pages.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA foreign_keys=ON")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            self._check_once(conn)
        except sqlite3.DatabaseError as error:
            conn.close()
            raise_named(self.path, error)
            raise StateDamaged(self.path, f"is not a readable SQLite file ({error})") from error
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_once(self, conn: sqlite3.Connection) -> None:
        """`PRAGMA quick_check` of each table but the UNCHECKED at the process's first open."""
        with self._lock:
            if self._checked:
                return
            if sqlite3.sqlite_version_info < (3, 33):  # no quick_check(TABLE): the whole file
                tables = [""]
            else:
                rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                tables = [f'("{name}")' for (name,) in rows if name not in UNCHECKED]
            for table in tables:
                result = conn.execute(f"PRAGMA quick_check{table}").fetchone()[0]
                if result != "ok":
                    raise StateDamaged(self.path, f"fails its check ({result})")
            self._checked = True

    def _refuse_special(self) -> None:
        try:
            info = self.path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode):
            raise StateDamaged(self.path, "is not a regular file")

    def release(self) -> None:
        """Let go of what this thread's connection holds, outside a transaction: a process
        that idles between passes holds no pages the next pass reads again from the OS's
        cache, nor the values its pass wrote. SQLite keeps its own copy of the values last
        bound to a prepared statement until the statement is finalized, and the sqlite3
        module keeps each statement prepared: a pass's scan cache and index versions (~5 MB
        at 10,000 memories) stayed in an idle daemon. So a connection that wrote since it
        was opened is closed (which finalizes them; the next use opens it again, the file's
        check not repeated); one that only read (a quiet heartbeat's) lets go of its page
        cache (`PRAGMA shrink_memory`) and stays open."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.depth:
            return
        if conn.total_changes == self._local.changes:
            conn.execute("PRAGMA shrink_memory")
        else:
            self.close()

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's objects go)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- schemas and transactions --------------------------------------------------------

    def ensure(self, schema: Schema) -> sqlite3.Connection:
        """This thread's connection, with `schema`'s tables in the file."""
        conn = self.connection()
        if schema.name in self._ensured:
            return conn
        with self.transaction() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schemas (name TEXT PRIMARY KEY, version INTEGER)"
            )
            row = tx.execute("SELECT version FROM schemas WHERE name = ?", (schema.name,))
            found = row.fetchone()
            if found is not None and found[0] != schema.version:
                if not schema.disposable:
                    raise StateDamaged(
                        self.path,
                        f"holds {schema.name} tables of version {found[0]}, and this memoryd "
                        f"reads version {schema.version}",
                    )
                for table in schema.tables:
                    tx.execute(f'DROP TABLE IF EXISTS "{table}"')
                found = None
            if found is None:
                for statement in schema.ddl.split(";"):
                    if statement.strip():
                        tx.execute(statement)
                tx.execute(
                    "INSERT OR REPLACE INTO schemas(name, version) VALUES (?, ?)",
                    (schema.name, schema.version),
                )
        with self._lock:
            self._ensured.add(schema.name)
        return conn

    def reader(self, schema: Schema) -> sqlite3.Connection | None:
        """This thread's connection when the file holds `schema`'s tables, else None: a read
        makes neither the file nor the tables, and takes no write lock (a dry run writes
        nothing; a reader never waits on a writer)."""
        if schema.name in self._ensured:
            return self.connection()
        if not self.path.exists():
            return None
        conn = self.connection()
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (schema.tables[0],))
        if not found.fetchone():
            return None
        row = conn.execute("SELECT version FROM schemas WHERE name = ?", (schema.name,))
        version = row.fetchone()
        if version is not None and version[0] != schema.version:
            if schema.disposable:
                return None  # a cache of another version: the next write rebuilds it
            raise StateDamaged(
                self.path,
                f"holds {schema.name} tables of version {version[0]}, and this memoryd "
                f"reads version {schema.version}",
            )
        if version is not None and not schema.disposable:
            with self._lock:  # made, and never dropped: the next read looks no more
                self._ensured.add(schema.name)
        return conn

    def in_transaction(self) -> bool:
        """Whether this thread is inside a `transaction()` (what it writes is not committed)."""
        return bool(getattr(self._local, "depth", 0))

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """Reads that see one commit (BEGIN DEFERRED … COMMIT: no write lock is taken);
        inside a `transaction()` it joins that one."""
        conn = self.connection()
        if self._local.depth:
            yield conn
            return
        conn.execute("BEGIN")
        self._local.depth = 1
        try:
            yield conn
        except BaseException:
            self._local.depth = 0
            with contextlib.suppress(sqlite3.Error, StateDamaged):  # not to hide what failed
                conn.execute("ROLLBACK")
            raise
        self._local.depth = 0
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def durable(self) -> Iterator[sqlite3.Connection]:
        """An outermost `transaction()` whose commit is synced in full, the store's others only
        as WAL's NORMAL does: for what must survive a power cut (a pass's intent, a person's
        pin)."""
        if self.in_transaction():  # SQLite changes no safety level inside a transaction
            raise RuntimeError("durable() must be the outermost transaction")
        conn = self.connection()
        conn.execute("PRAGMA synchronous=FULL")
        try:
            with self.transaction() as tx:
                yield tx
        finally:
            conn.execute("PRAGMA synchronous=NORMAL")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK on any exception); an inner one joins the outer."""
        conn = self.connection()
        depth: int = self._local.depth
        if depth:
            self._local.depth = depth + 1
            try:
                yield conn
            finally:
                self._local.depth = depth
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as error:
            raise_named(self.path, error)
            if isinstance(error, sqlite3.OperationalError):
                raise
            raise StateDamaged(self.path, f"cannot be written ({error})") from error
        self._local.depth = 1
        try:
            yield conn
        except BaseException as error:
            self._local.depth = 0
            with contextlib.suppress(sqlite3.Error, StateDamaged):  # a failed write may have
                conn.execute("ROLLBACK")  # ended it
            raise_named(self.path, error)
            raise
        self._local.depth = 0
        try:
            conn.execute("COMMIT")
        except (sqlite3.Error, StateDamaged) as error:
            with contextlib.suppress(sqlite3.Error, StateDamaged):
                conn.execute("ROLLBACK")
            raise_named(self.path, error)
            raise


_SHARED: dict[Path, StateDB] = {}
_SHARED_LOCK = threading.Lock()


def shared(path: Path) -> StateDB:
    """The process's one `StateDB` for `path`, so every concern shares its connections."""
    key = Path(os.path.abspath(path))
    with _SHARED_LOCK:
        db = _SHARED.get(key)
        if db is None:
            db = _SHARED[key] = StateDB(key)
        return db


def forget_shared() -> None:
    """Close and drop the process's stores (tests that make many state dirs; a fork's child)."""
    with _SHARED_LOCK:
        for db in _SHARED.values():
            db.close()
        _SHARED.clear()
