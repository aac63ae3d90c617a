"""The state store's opener: damage is named, schemas are versioned, transactions nest."""

import ctypes
import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.storage.statedb import PAGE_SIZE, Schema, StateDamaged, StateDB

NOTES = Schema("notes", 1, "CREATE TABLE notes (k TEXT PRIMARY KEY, v TEXT)", ("notes",))


def test_a_fifo_in_the_state_files_place_is_named_damage_and_never_opened(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    os.mkfifo(path)
    with pytest.raises(StateDamaged, match="not a regular file") as caught:
        StateDB(path).connection()
    assert str(path) in str(caught.value)


def test_a_file_that_is_not_sqlite_is_named_damage_and_left_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"not a database, but someone's bytes" * 200)
    before = path.read_bytes()
    with pytest.raises(StateDamaged, match="move the file aside"):
        StateDB(path).ensure(NOTES)
    assert path.read_bytes() == before


def test_an_inner_transaction_joins_the_outer_one_and_a_failure_rolls_back_both(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    with pytest.raises(RuntimeError), db.transaction() as outer:
        outer.execute("INSERT INTO notes VALUES ('a', '1')")
        with db.transaction() as inner:
            inner.execute("INSERT INTO notes VALUES ('b', '2')")
        raise RuntimeError("the pass failed after both writes")
    assert db.connection().execute("SELECT count(*) FROM notes").fetchone()[0] == 0
    with db.transaction() as tx:
        tx.execute("INSERT INTO notes VALUES ('a', '1')")
    assert db.connection().execute("SELECT v FROM notes").fetchall() == [("1",)]


def test_a_cache_of_another_version_is_made_again_and_kept_state_is_never_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    db = StateDB(path)
    db.ensure(NOTES)
    cache = Schema("cache", 1, "CREATE TABLE cache (k TEXT)", ("cache",), disposable=True)
    db.ensure(cache)
    with db.transaction() as tx:
        tx.execute("INSERT INTO notes VALUES ('kept', 'x')")
        tx.execute("INSERT INTO cache VALUES ('old')")
    later = StateDB(path)
    later.ensure(Schema("cache", 2, "CREATE TABLE cache (k TEXT, v TEXT)", ("cache",), True))
    assert later.connection().execute("SELECT count(*) FROM cache").fetchone()[0] == 0
    with pytest.raises(StateDamaged, match="notes tables of version 1"):
        later.ensure(Schema("notes", 2, "CREATE TABLE notes2 (k TEXT)", ("notes",)))
    assert later.connection().execute("SELECT v FROM notes").fetchall() == [("x",)]


def test_each_thread_has_its_own_connection_and_sees_the_others_commits(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    seen: list[object] = []

    def write() -> None:
        with db.transaction() as tx:
            tx.execute("INSERT INTO notes VALUES ('t', 'from a thread')")
        seen.append(db.connection())

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert seen[0] is not db.connection()
    assert db.connection().execute("SELECT v FROM notes").fetchall() == [("from a thread",)]
    assert isinstance(seen[0], sqlite3.Connection)


def test_a_snapshot_sees_one_commit_and_takes_no_write_lock(tmp_path: Path) -> None:
    """Reads in a snapshot see the file as one commit left it, while another connection
    writes meanwhile (it would wait for a write lock the snapshot took)."""
    path = tmp_path / "state.sqlite"
    db = StateDB(path)
    db.ensure(NOTES)
    with db.transaction() as tx:
        tx.execute("INSERT INTO notes VALUES ('a', '1')")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with db.snapshot() as conn:
        assert conn.execute("SELECT v FROM notes").fetchall() == [("1",)]
        other.execute("UPDATE notes SET v = '2'")  # no lock held: no wait, no error
        assert conn.execute("SELECT v FROM notes").fetchall() == [("1",)]
    assert db.connection().execute("SELECT v FROM notes").fetchall() == [("2",)]
    other.close()


def test_a_reader_makes_neither_the_file_nor_the_tables_and_waits_on_no_writer(
    tmp_path: Path,
) -> None:
    """`reader` of a concern whose tables are not made is None, and nothing is written (a
    dry run's reads); once they are, it reads while another connection holds the write lock."""
    path = tmp_path / "state.sqlite"
    assert StateDB(path).reader(NOTES) is None and not path.exists()
    StateDB(path).ensure(Schema("other", 1, "CREATE TABLE other (k)", ("other",)))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.endswith("-shm")}
    assert StateDB(path).reader(NOTES) is None
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.endswith("-shm")}
    assert after == before
    StateDB(path).ensure(NOTES)
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO notes VALUES ('a', '1')")
    conn = StateDB(path).reader(NOTES)
    assert conn is not None and conn.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    writer.execute("COMMIT")
    writer.close()


def test_a_new_file_has_big_pages_and_kept_versions_stored_in_pieces_are_whole(
    tmp_path: Path,
) -> None:
    """A few-KB version shares a page with others; a version given in pieces (the archive
    memoryd wrote) is written into its blob in place and read back whole."""
    from memoryd.versions.kept import VersionStore

    store = VersionStore(tmp_path / "state")
    pieces = (b"# archive\n", b"x" * 5000, b"\nend\n")
    data = b"".join(pieces)
    sha = hashlib.sha256(data).hexdigest()
    store.store_object(pieces, sha)
    assert store.read_object(sha) == data
    assert store.conn().execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE > 4096


def _damage_root_page(db: StateDB, table: str) -> None:
    """Scribble over the first bytes of `table`'s root page in the file (written back first)."""
    conn = db.connection()
    sql = "SELECT rootpage FROM sqlite_schema WHERE name = ?"
    root = conn.execute(sql, (table,)).fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with open(db.path, "r+b") as f:
        f.seek((root - 1) * PAGE_SIZE)
        f.write(b"\xff" * 16)


@pytest.mark.parametrize("sqlite", [sqlite3.sqlite_version_info, (3, 32, 0)])
def test_damage_in_a_checked_table_is_named_at_the_first_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite: tuple[int, int, int]
) -> None:
    """(An SQLite before 3.33, with no per-table check, checks the whole file.)"""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", sqlite)
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    with db.transaction() as tx:
        tx.executemany("INSERT INTO notes VALUES (?, ?)", [(str(i), "x" * 100) for i in range(9)])
    _damage_root_page(db, "notes")
    with pytest.raises(StateDamaged, match="move the file aside") as caught:
        StateDB(db.path).connection()  # no statement but the check reads the table
    assert str(db.path) in str(caught.value)


@pytest.mark.parametrize("read", ["read_object", "has_object", "stored_size", "object_sizes"])
def test_damage_among_kept_versions_bytes_is_named_when_met(tmp_path: Path, read: str) -> None:
    """The first open leaves the kept versions' bytes unchecked (each is checked against its
    sha256 when read); a damaged page there is StateDamaged naming the file once met, by
    any read of them (the objects' table and its index), not only `read_object`."""
    from memoryd.storage.statedb import forget_shared
    from memoryd.versions.kept import VersionStore

    data = b"a version\n" * 300
    sha = hashlib.sha256(data).hexdigest()
    VersionStore(tmp_path).store_object(data, sha)
    for table in ("versions_objects", "sqlite_autoindex_versions_objects_1"):
        _damage_root_page(StateDB.in_state_dir(tmp_path), table)
    forget_shared()
    store = VersionStore(tmp_path)
    store.conn()  # opens: the objects are not part of the first open's check
    with pytest.raises(StateDamaged, match="is damaged") as caught:
        getattr(store, read)(*(() if read == "object_sizes" else (sha,)))
    assert str(tmp_path / "state.sqlite") in str(caught.value)
    with pytest.raises(StateDamaged, match="is damaged"):
        store.store_object(b"another", hashlib.sha256(b"another").hexdigest())
    forget_shared()


def test_a_reader_of_another_version_is_named_damage_or_an_empty_cache(tmp_path: Path) -> None:
    """A downgrade or an upgrade met by a read: kept state of another version is the same
    named error `ensure` raises, never a raw "no such column"; a cache of one reads as none."""
    path = tmp_path / "state.sqlite"
    cache = Schema("cache", 1, "CREATE TABLE cache (k TEXT)", ("cache",), disposable=True)
    first = StateDB(path)
    first.ensure(NOTES)
    first.ensure(cache)
    later = StateDB(path)
    with pytest.raises(StateDamaged, match="notes tables of version 1"):
        later.reader(Schema("notes", 2, "CREATE TABLE notes (k TEXT, w TEXT)", ("notes",)))
    assert later.reader(Schema("cache", 2, "CREATE TABLE cache (k, v)", ("cache",), True)) is None
    assert later.reader(NOTES) is not None


def test_a_durable_transaction_inside_another_is_refused_by_name(tmp_path: Path) -> None:
    """SQLite cannot sync one commit in full inside another transaction: said, not half done."""
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    with db.transaction(), pytest.raises(RuntimeError, match="outermost"), db.durable():
        pass


def test_a_damaged_page_met_by_any_read_is_named_in_or_out_of_a_transaction(
    tmp_path: Path,
) -> None:
    """Damage met after the first open's check (another process's write, a disk going bad):
    a read on a `reader`'s or a `snapshot`'s connection, by a statement or a row fetched one
    at a time, in a loop or all at once, is StateDamaged naming the file, as a write's is;
    the file is left as it was (it may hold kept versions)."""
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    with db.transaction() as tx:
        tx.executemany("INSERT INTO notes VALUES (?, ?)", [(str(i), "x" * 999) for i in range(99)])
    conn = db.reader(NOTES)  # opened and checked while whole
    assert conn is not None
    _damage_root_page(db, "notes")
    before = db.path.read_bytes()
    conn = db.reader(NOTES)
    assert conn is not None
    # (`v`: the table's own pages; `k` alone is read from its primary key's index)
    reads: dict[str, Callable[[], object]] = {
        "fetchone": lambda: conn.execute("SELECT v FROM notes WHERE k = ?", ("7",)).fetchone(),
        "fetchall": lambda: conn.execute("SELECT k, v FROM notes").fetchall(),
        "fetchmany": lambda: conn.execute("SELECT v FROM notes").fetchmany(5),
        "loop": lambda: [v for (v,) in conn.execute("SELECT v FROM notes")],
        "dict": lambda: dict(conn.execute("SELECT k, v FROM notes")),
        "next": lambda: next(conn.execute("SELECT v FROM notes")),
        "cursor": lambda: conn.cursor().execute("SELECT max(v) FROM notes").fetchone(),
    }
    for what, read in reads.items():
        with pytest.raises(StateDamaged, match="is damaged") as caught:
            read()
        assert str(db.path) in str(caught.value), what
    with pytest.raises(StateDamaged, match="is damaged"), db.snapshot() as snap:
        snap.execute("SELECT max(v) FROM notes").fetchone()
    with pytest.raises(StateDamaged, match="is damaged"), db.transaction() as tx:
        tx.execute("SELECT v FROM notes").fetchall()
    assert not db.in_transaction()  # each ended: the next statement is no nested BEGIN
    db.close()
    assert db.path.read_bytes() == before


def test_a_damaged_page_met_midway_through_the_rows_is_named(tmp_path: Path) -> None:
    """The statement ran and the first rows came back whole: a damaged page further on is
    StateDamaged when the loop (or fetchall) reaches it, not a raw sqlite3 error."""
    db = StateDB(tmp_path / "state.sqlite")
    conn = db.ensure(NOTES)
    with db.transaction() as tx:
        tx.executemany("INSERT INTO notes VALUES (?, ?)", [(str(i), "x" * 999) for i in range(99)])
    try:
        sql = "SELECT max(pageno) FROM dbstat WHERE name = 'notes' AND pagetype = 'leaf'"
        last_leaf = conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # an SQLite built without the dbstat table
        pytest.skip("no dbstat in this SQLite")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with open(db.path, "r+b") as f:
        f.seek((last_leaf - 1) * PAGE_SIZE)
        f.write(b"\xff" * 16)
    conn = db.connection()
    rows = conn.execute("SELECT v FROM notes")  # the first leaf is whole
    read = []
    with pytest.raises(StateDamaged, match="is damaged") as caught:
        for (v,) in rows:
            read.append(v)
    assert read and str(db.path) in str(caught.value)
    with pytest.raises(StateDamaged, match="is damaged"):
        conn.execute("SELECT v FROM notes").fetchall()


def _sqlite_memory_used() -> Callable[[], int] | None:
    """SQLite's own count of the bytes it holds (sqlite3_memory_used), from the library the
    sqlite3 module uses; None where it cannot be found (not Linux, or linked in statically)."""
    try:
        with open("/proc/self/maps") as maps:
            found = next((line.split()[-1] for line in maps if "libsqlite3" in line), None)
    except OSError:
        return None
    if found is None:
        return None
    used = ctypes.CDLL(found).sqlite3_memory_used
    used.restype = ctypes.c_int64
    return lambda: int(used())


def test_release_lets_go_of_the_values_a_prepared_statement_was_last_given(
    tmp_path: Path,
) -> None:
    """An idle daemon held its last pass's scan cache and index versions a second time:
    SQLite keeps its own copy of the values bound to a prepared statement, and the sqlite3
    module keeps the statement prepared. `release` lets go of them (outside a transaction)
    by closing a connection that wrote; what was written stays, and the next use opens the
    connection again. One that only read keeps its connection."""
    memory_used = _sqlite_memory_used()
    db = StateDB(tmp_path / "state.sqlite")
    db.ensure(NOTES)
    blob = os.urandom(4 << 20)
    with db.transaction() as tx:
        tx.execute("INSERT INTO notes VALUES (?, ?)", ("big", blob))
    first = db.connection()
    with db.transaction():
        db.release()  # inside a transaction: nothing is let go
        assert db.connection() is first and db.in_transaction()
    held = memory_used() if memory_used else 0
    db.release()
    if memory_used is not None:
        assert held - memory_used() >= len(blob), (held, memory_used())
    second = db.connection()
    assert second is not first
    assert second.execute("SELECT v FROM notes").fetchone() == (blob,)
    db.release()  # it only read since it was opened: it stays open (a quiet heartbeat's)
    assert db.connection() is second
