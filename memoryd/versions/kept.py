"""Undo for what others do (DESIGN Amendments, §2.2 widened): every version of a memory file,
and of MEMORY.md / MEMORY-ARCHIVE.md, that memoryd reads is kept by content in `state.sqlite`
(the tables of memoryd.versions.records), never in a memory dir.

The store is passed down (`Runtime.versions`, set by `keeping`) as the `versions` parameter of
what reads and writes: a scan keeps the changed files it reads anyway (one session a scan,
recorded in one transaction at its end), `indexing.read.read_index_file` the index files
(`index_read`), and `fsops.replace_file` tells memoryd's own index writes (`own_content`,
stored at the next flush), their sha256 noted before the swap (`own_intent`), so that no
memoryd write is ever taken for an outside change by any memoryd process. Deletions are names
a scan no longer finds; nothing is re-read for the store's sake. SQLite's transactions are
the store's only lock: a prune cannot drop an object between a scan's "is it stored" and the
row naming it. What memoryd cannot see it cannot keep: a version written and replaced while
no memoryd process ran is not in the store.
"""

import contextlib
import errno
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.logsetup import get_logger
from memoryd.storage import fsops
from memoryd.storage.statedb import StateDB
from memoryd.versions import importer, scanned, witness
from memoryd.versions.records import (
    ALARMS_KEEP,
    MEMORYD,
    OBJECT_MAX,
    OTHER,
    SCHEMA,
    Record,
    alarms_in,
    deleted_id,
    extra_json,
    to_record,
)
from memoryd.versions.scanned import INDEX_FILES, Session

if TYPE_CHECKING:  # `memoryd status` reads the alarms without the scan machinery
    from memoryd.model.scanned import Scanned
    from memoryd.runtime import Runtime

OWN_KEEP = 200  # index writes a dir's ledger keeps: far more than another process has left
PRUNE_EVERY = 86400.0  # the daemon prunes at start, then at the first heartbeat a day after
AuditWrite = Callable[..., None]
# A row to add: t, f, h, n, e, by and the extra fields (`alarm` among them counts).
Row = tuple[float, str, str, int, str, str, Mapping[str, Any] | None]
Told = tuple[str, str, str, str, int, bool]  # kind, name, sha, previous sha, size, counts


@dataclass(slots=True)
class _Dir:
    """What the store knows of one dir: its row id and each name's latest row."""

    id: int
    seen: dict[str, str]  # names whose latest row is `seen` -> sha256
    other: dict[str, tuple[str, str]]  # the others -> (sha256, event)
    alarmed_until: float = 0.0
    # The connection it was read on and that connection's PRAGMA data_version then: while
    # both hold, no other connection committed since, and this one's rows were applied.
    read_at: tuple[int, int] | None = None


def _share_seen(seen: dict[str, str], files: Mapping[str, "Scanned"]) -> None:
    """Hold the scan's sha256 text where it equals the one read from the file: a restarted
    daemon otherwise keeps each of its 10,000 digests twice (~1 MB)."""
    for name, sha in seen.items():
        info = files.get(name)
        if info is not None and info.sha256 == sha:
            seen[name] = info.sha256


@dataclass(slots=True)
class _Pending:
    """A version of an index file memoryd wrote, held until the next flush."""

    path: Path
    name: str
    data: bytes | tuple[bytes, ...]
    sha: str = ""
    ident: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) as written


@dataclass(eq=False)
class VersionStore:
    """The version store of one state dir (see the module docstring)."""

    state_dir: Path
    keep_days: int = 30
    max_bytes: int = 512 << 20
    alarm_files: int = 5
    alarm_window: float = 120.0
    clock: Callable[[], float] = time.time
    audit: AuditWrite | None = None
    # The boot clock retention rests on (`witness`): the Runtime's, else this machine's.
    boot: "Callable[[], witness.Boot] | None" = None
    defer: bool = False  # the daemon's store: it prunes at a flush PRUNE_EVERY apart
    pruned_at: float = -float("inf")  # when the daemon's store last pruned (see flush)
    _dirs: dict[Path, _Dir] = field(default_factory=dict, repr=False)
    _by_id: dict[tuple[int, int], Path] = field(default_factory=dict, repr=False)
    _pending: dict[tuple[Path, str], _Pending] = field(default_factory=dict, repr=False)
    _index_sha: dict[tuple[Path, str], str] = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.RLock, repr=False)
    _said: set[str] = field(default_factory=set, repr=False)
    _scans: Any = field(default_factory=threading.local, repr=False)

    @property
    def db(self) -> StateDB:
        return StateDB.in_state_dir(self.state_dir)

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, the tables made and an older layout taken in."""
        conn = self.db.ensure(SCHEMA)
        importer.ensure_imported(self.db, self.state_dir)
        return conn

    def reading(self) -> sqlite3.Connection | None:
        """This thread's connection for a read, None while the store keeps nothing: a read
        makes neither `state.sqlite` nor the tables (a read-only command's, `history` or
        `trash list`, writes no state). An older layout left is taken in first (as every
        command takes in the state files of older versions): it is what the store keeps."""
        if importer.pending(self.state_dir):
            return self.conn()
        return self.db.reader(SCHEMA)

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[Any]:
        """A read's rows; none while the store keeps nothing (`reading`)."""
        conn = self.reading()
        return conn.execute(sql, args).fetchall() if conn is not None else []

    def observe_clock(self, wall: float) -> witness.Clock:
        """A reading of the clocks retention rests on (shared with the trash's)."""
        if self.boot is None:
            from memoryd.runtime import boot_clock

            self.boot = boot_clock
        return witness.observe(self.state_dir, wall, self.boot())

    # --- objects -------------------------------------------------------------------------------
    def has_object(self, sha: str) -> bool:
        return bool(self._read("SELECT 1 FROM versions_objects WHERE sha = ?", (sha,)))

    def stored_size(self, sha: str) -> int:
        """The size of a stored version (0 when the store holds none)."""
        rows = self._read("SELECT size FROM versions_objects WHERE sha = ?", (sha,))
        return int(rows[0][0]) if rows else 0

    def object_sizes(self) -> dict[str, int]:
        """Every stored object: sha256 -> size (of the bytes held: a damaged one's may not
        be its version's)."""
        return dict(self._read("SELECT sha, length(data) FROM versions_objects"))

    def store_object(self, data: fsops.Content, sha: str, *, again: bool = False) -> None:
        """Keep `data` under its sha256 (`again`: replace what is stored, found damaged).
        Pieces are written into the blob in place, never joined into one copy."""
        verb = "INSERT OR REPLACE" if again else "INSERT OR IGNORE"
        with self.writing() as tx:
            self.conn()
            if isinstance(data, bytes | bytearray | memoryview):
                tx.execute(
                    f"{verb} INTO versions_objects (sha, size, data) VALUES (?, ?, ?)",
                    (sha, len(data), data),
                )
                return
            size = sum(map(len, data))
            cur = tx.execute(
                f"{verb} INTO versions_objects (sha, size, data) VALUES (?, ?, zeroblob(?))",
                (sha, size, size),
            )
            if cur.rowcount and size:
                row = tx.execute("SELECT rowid FROM versions_objects WHERE sha = ?", (sha,))
                with tx.blobopen("versions_objects", "data", row.fetchone()[0]) as blob:
                    for piece in data:
                        blob.write(piece)

    def drop_objects(self, doomed: Set[str]) -> set[str]:
        """Remove these objects' bytes (zeroed in the file: secure_delete); the shas whose
        bytes went."""
        dropped: set[str] = set()
        with self.writing() as tx:
            self.conn()
            for sha in doomed:
                if tx.execute("DELETE FROM versions_objects WHERE sha = ?", (sha,)).rowcount:
                    dropped.add(sha)
        return dropped

    def checkpoint(self) -> None:
        """Write the WAL back into state.sqlite and empty it: after a purge, no old frame
        holds what was deleted (secure_delete zeroes the pages themselves)."""
        with contextlib.suppress(sqlite3.OperationalError):
            self.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def read_object(self, sha: str) -> bytes | None:
        """A stored version's bytes, checked against their sha256; None if missing or damaged."""
        rows = self._read("SELECT size, data FROM versions_objects WHERE sha = ?", (sha,))
        if not rows or rows[0][0] > OBJECT_MAX:  # (a damaged page: StateDamaged)
            return None
        data = bytes(rows[0][1])
        if hashlib.sha256(data).hexdigest() == sha:
            return data
        self._say(
            f"{self.db.path}: the bytes kept for {sha} are not that version (damaged): never "
            "given back"
        )
        return None

    # --- rows ----------------------------------------------------------------------------------
    def _dir_id(self, tx: sqlite3.Connection, path: Path) -> int:
        found = tx.execute("SELECT id FROM versions_dirs WHERE path = ?", (str(path),)).fetchone()
        if found is not None:
            return int(found[0])
        cur = tx.execute("INSERT INTO versions_dirs (path) VALUES (?)", (str(path),))
        return int(cur.lastrowid or 0)

    def _load(self, tx: sqlite3.Connection, path: Path) -> _Dir:
        """The dir's latest rows, as the file holds them now (another process may have
        added rows since this one last looked)."""
        d = self._dirs.get(path)
        at = (id(tx), tx.execute("PRAGMA data_version").fetchone()[0])
        if d is not None and d.read_at == at:
            return d  # a daemon's pass over a big dir reads no row it has
        dir_id = d.id if d is not None else self._dir_id(tx, path)
        seen: dict[str, str] = {}
        other: dict[str, tuple[str, str]] = {}
        rows = tx.execute("SELECT f, h, e FROM versions_latest WHERE dir = ?", (dir_id,))
        for f, h, e in rows:
            if e == "seen":
                seen[f] = h
            else:
                other[f] = (h, e)
        if d is None:
            d = self._dirs[path] = _Dir(dir_id, seen, other)
        else:
            d.seen, d.other = seen, other
        d.read_at = at
        return d

    def stale(self, path: Path | None = None) -> None:
        """What this process holds of a dir's latest rows (of every dir: None) is read
        again at the next look: rows it applied were rolled back, or others deleted."""
        for key, d in self._dirs.items():
            if path is None or key == path:
                d.read_at = None

    def latest_of(self, path: Path) -> dict[str, tuple[str, str]]:
        """Each name of the dir: the sha256 and event of its latest row."""
        rows = self._read(
            "SELECT l.f, l.h, l.e FROM versions_latest l JOIN versions_dirs d ON d.id = l.dir "
            "WHERE d.path = ?",
            (str(path),),
        )
        return {f: (h, e) for f, h, e in rows}

    def seen_of(self, path: Path) -> dict[str, str]:
        """The names of the dir whose latest row is `seen`, with their sha256."""
        with self._lock:
            return dict(self._load(self.conn(), path).seen)

    def _append(self, tx: sqlite3.Connection, d: _Dir, rows: Sequence[Row]) -> None:
        def plain(extra: Mapping[str, Any]) -> str | None:
            return extra_json({k: v for k, v in extra.items() if k != "alarm"})

        # Most rows (a first scan's every one) have no extra fields: no call for them.
        tx.executemany(
            "INSERT INTO versions_log (dir, t, f, h, n, e, by, alarm, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(d.id, t, f, h, n, e, by, 0, None) if not x else
             (d.id, t, f, h, n, e, by, int(bool(x.get("alarm"))), plain(x))
             for t, f, h, n, e, by, x in rows],
        )  # fmt: skip
        tx.executemany(
            "INSERT OR REPLACE INTO versions_latest (dir, f, h, e) VALUES (?, ?, ?, ?)",
            [(d.id, f, h, e) for _, f, h, _, e, _, _ in rows],
        )
        for _, f, h, _, e, _, _ in rows:
            if e == "seen":
                d.seen[f] = h
                d.other.pop(f, None)
            else:
                d.seen.pop(f, None)
                d.other[f] = (h, e)

    def add_rows(self, path: Path, rows: Sequence[Row]) -> None:
        """Add rows to the dir's history, in one transaction."""
        with self._lock, self.writing() as tx:
            self.conn()
            self._append(tx, self._load(tx, path), rows)

    def record(
        self, path: Path, name: str, sha: str, size: int, event: str, by: str, **extra: Any
    ) -> None:
        """Add one event for `name` in the dir at `path` (see memoryd.versions.records)."""
        self.add_rows(path, [(self.clock(), name, sha, size, event, by, extra or None)])

    def records(self, path: Path) -> list[Record]:
        """Every row of a dir's history, oldest first."""
        rows = self._read(
            "SELECT t, f, h, n, e, by, extra FROM versions_log WHERE dir = "
            "(SELECT id FROM versions_dirs WHERE path = ?) ORDER BY seq",
            (str(path),),
        )
        return [to_record(row) for row in rows]

    def known_dirs(self) -> list[Path]:
        """The memory dirs the store holds versions of."""
        rows = self._read(
            "SELECT path FROM versions_dirs d WHERE EXISTS "
            "(SELECT 1 FROM versions_log WHERE dir = d.id) ORDER BY path"
        )
        return [Path(path) for (path,) in rows]

    # --- what memoryd does itself ----------------------------------------------------------------
    def intend_restore(self, path: Path, name: str, data: bytes) -> str:
        """Store `data` and say that memoryd is about to write it as `name` (so that reading
        it back is memoryd's doing, not another process's). Returns its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        with self.writing():
            self.store_object(data, sha)
            self.record(path, name, sha, len(data), "restoring", MEMORYD)
        return sha

    @contextlib.contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """A transaction whose failure to write (a full disk) is an OSError naming the
        store's file, as any other file memoryd could not write."""
        try:
            with self.db.transaction() as tx:
                yield tx
        except BaseException as error:
            self.stale()  # what it applied to the latest rows was rolled back
            if isinstance(error, sqlite3.OperationalError):
                raise OSError(errno.EIO, f"cannot write ({error})", str(self.db.path)) from error
            raise

    def restore_done(self, path: Path, name: str, sha: str, size: int) -> None:
        """The restore `intend_restore` announced is written: those bytes are the name's
        version now, as a scan reading them back would record."""
        self._guard(self.record, path, name, sha, size, "seen", MEMORYD)

    def restore_failed(
        self, path: Path, name: str, sha: str, size: int, current: tuple[str, int] | None
    ) -> None:
        """The restore `intend_restore` announced wrote nothing: the name's latest row is
        made what the dir holds again, the version now there (`current`: sha256, size) or
        none (left at `restoring`, a partial scan would never notice its deletion)."""
        if current is not None:
            self.record(path, name, current[0], current[1], "seen", MEMORYD)
        else:
            self.record(path, name, sha, size, "gone", MEMORYD)

    def vanished(self, path: Path, items: Sequence[Any]) -> None:
        """The dir at `path` is gone and a restore is about to make it again: its files the
        store still holds as there (`listing.deleted`'s `vanished` items) are recorded gone
        first, under the ids `trash list` gave them (made from when each was last seen)."""
        now = self.clock()
        rows: list[Row] = [
            (now, i.name, i.sha256, i.size, "gone", OTHER, {"dir_gone": True, "id_t": i.when})
            for i in items
        ]
        with self._lock, self.writing() as tx:
            self.conn()
            d = self._load(tx, path)
            # The index files went with it (they are never listed): said so here, not by the
            # first scan of the new dir as a deletion of now.
            for name in INDEX_FILES:
                if name in d.seen:
                    rows.append((now, name, d.seen[name], 0, "gone", OTHER, {"dir_gone": True}))
            self._append(tx, d, rows)

    def keep_current(self, path: Path, name: str, data: bytes, sha: str) -> None:
        """The file a `history --restore` is about to replace, as it read it: kept as a
        version first (one no scan read yet, an agent's rewrite say, would be lost else)."""
        with self._lock:
            self._note_index(path, name, sha, len(data), data, OTHER)

    def moved(self, path: Path, name: str, sha: str, size: int, trash_id: str) -> None:
        """memoryd moved `name` into the trash (the mover, after the move)."""
        self.record(path, name, sha, size, "moved", MEMORYD, id=trash_id)

    def own_intent(self, dir_path: Path, name: str, sha: str) -> None:
        """memoryd is about to put the bytes of this sha256 in place as an index file: said
        in the ledger of own writes before the swap, so that any memoryd process reading
        them takes them for memoryd's (`_own_wrote`), whenever this one stores them."""
        if name in INDEX_FILES:
            self._guard(self._own_add, dir_path, name, sha)

    def _own_add(self, path: Path, name: str, sha: str) -> None:
        with self.writing() as tx:
            self.conn()
            cur = tx.execute(
                "INSERT INTO versions_own (dir, f, h) VALUES (?, ?, ?)", (str(path), name, sha)
            )
            tx.execute(
                "DELETE FROM versions_own WHERE dir = ? AND seq <= ?",
                (str(path), (cur.lastrowid or 0) - OWN_KEEP),
            )

    def _own_wrote(self, path: Path, name: str, sha: str) -> bool:
        """Whether a memoryd process wrote these bytes as `name` in the dir at `path`."""
        sql = "SELECT 1 FROM versions_own WHERE dir = ? AND f = ? AND h = ?"
        return bool(self._read(sql, (str(path), name, sha)))

    def own_content(
        self,
        dir_path: Path,
        name: str,
        data: fsops.Content,
        sha: str = "",
        ident: tuple[int, int, int] | None = None,
    ) -> None:
        """memoryd wrote an index file: hold its bytes (and their sha256 if the writer took
        it) until the next flush (hashing and storing a 2 MB archive costs more than the
        daemon's whole pass). `ident`: the file's (inode, size, mtime_ns) as written."""
        if name not in INDEX_FILES:
            return
        held = data if isinstance(data, bytes) else tuple(data)
        with self._lock:
            self._pending[(dir_path, name)] = _Pending(dir_path, name, held, sha, ident)

    def flush(self) -> None:
        """Store the index versions memoryd wrote since the last flush (a transaction each:
        MEMORY.md, the archive); the daemon's store also prunes when PRUNE_EVERY has passed
        since it last did."""
        with self._lock:
            pending, self._pending = self._pending, {}
            for item in pending.values():
                self._guard(self._flush_one, item, True)
            if self.defer and self.clock() - self.pruned_at >= PRUNE_EVERY:
                from memoryd.versions import prune  # the daemon's, once a day

                done: list[prune.PruneResult] = []
                self._guard(lambda: done.append(prune.prune(self)))
                if done:  # else the store stayed busy (or failed): the next flush tries
                    self.pruned_at = self.clock()

    def _flush_one(self, item: _Pending, current_only: bool = False) -> None:
        """Record memoryd's own write. `current_only` (a flush, not a read of the file): only
        while the file is still the one written: one replaced since is not recorded after
        what replaced it (out of time order, the next read would be taken for a rewrite)."""
        if current_only and item.ident is not None:
            try:
                st = os.stat(item.path / item.name, follow_symlinks=False)
            except FileNotFoundError:
                return
            if (st.st_ino, st.st_size, st.st_mtime_ns) != item.ident:
                return
        data = item.data
        if not item.sha:
            item.sha = fsops._digest(data)
        size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        self._note_index(item.path, item.name, item.sha, size, data, MEMORYD)

    # --- what a scan saw -----------------------------------------------------------------------
    def begin_scan(self, path: Path, dir_fd: int) -> Session:
        """A scan of the dir at `path` begins (scan.scan_dir's `versions`): its session."""
        left: Session | None = getattr(self._scans, "session", None)
        if left is not None:  # a scan on this thread that raised before its end
            left.abort()
        session = self._scans.session = Session(self, path)
        with contextlib.suppress(OSError):
            st = os.fstat(dir_fd)
            self._by_id[(st.st_dev, st.st_ino)] = path
        return session

    def index_read(self, dir_fd: int, name: str, data: bytes, sha: str) -> None:
        """An index file memoryd read (indexing.read.read_index_file's `versions`)."""
        self._guard(self.observe_index, dir_fd, name, data, sha)

    def end_scan(
        self,
        session: Session,
        dir_fd: int,
        files: Mapping[str, "Scanned"],
        present: Set[str],
        before: Mapping[str, "Scanned"],
        only: Set[str] | None,
    ) -> None:
        """Record what one scan found, new versions and files gone since, in one transaction."""
        with self._lock, self.writing() as tx:
            self.conn()
            d = self._load(tx, session.path)
            if only is None and before:  # with no cache (a first start), every file was read
                scanned.backfill(session, dir_fd, files, d.seen)
                _share_seen(d.seen, files)
            with memoryview(session.spool) as view:
                tx.executemany(
                    "INSERT OR IGNORE INTO versions_objects (sha, size, data) VALUES (?, ?, ?)",
                    session.objects(view),
                )
            now = self.clock()
            rows, told = scanned.rows_of(self, d, session, (present, before, only), now)
            made, at = self._git_made(session.path, told)
            if made:  # not marked to count toward an alarm, nor listed as deleted (`git`)
                rows = [(t, f, h, n, e, by, {"git": at}) if f in made else (t, f, h, n, e, by, x)
                        for t, f, h, n, e, by, x in rows]  # fmt: skip
            self._append(tx, d, rows)
            fsops.crash_point("versions.end_scan")  # all of the scan is kept, or none of it
        # Said once committed: a reader told of a change finds it in the store.
        said = self._git_said(session.path, told, made, at)
        for change in said:
            self._outside(session.path, now, *change)
        if any(t[5] for t in said):
            with self._lock:
                self._alarm(self.conn(), session.path, d, now)

    def _git_made(self, path: Path, told: Sequence[Told]) -> tuple[set[str], str]:
        """The names of the outside changes a git operation made (a checkout, merge, stash
        or pull: their bytes are a recent commit's), and the branch or commit checked out."""
        from memoryd.discover import gitwork  # only where others changed files

        if not told or gitwork.work_tree(path) is None:
            return set(), ""
        changes = [
            gitwork.Change(
                name,
                self.read_object(prev if kind == "rewritten" else sha),
                self.read_object(sha) if kind == "rewritten" else None,
                kind == "deleted",
            )
            for kind, name, sha, prev, _, _ in told
        ]
        return gitwork.git_made(path, changes)

    def _git_said(
        self, path: Path, told: Sequence[Told], made: Set[str], at: str
    ) -> Sequence[Told]:
        """The changes git made are one `memory.checkout` row (no alarm, no restore advice;
        their versions are kept as for any change); the rest, the outside changes."""
        if not made:
            return told
        if self.audit is not None:
            kinds = [t[0] for t in told if t[1] in made]
            self.audit(
                "memory.checkout", dir=path, deleted=kinds.count("deleted"),
                rewritten=kinds.count("rewritten"), at=at, files=sorted(made)[:50],
            )  # fmt: skip
        return [t for t in told if t[1] not in made]

    def observe_index(self, dir_fd: int, name: str, data: bytes, sha: str) -> None:
        """An index file memoryd read (its bytes and their sha256)."""
        try:
            st = os.fstat(dir_fd)
        except OSError:
            return
        path = self._by_id.get((st.st_dev, st.st_ino))
        if path is None:
            return  # a dir no scan of this process looked at: not one memoryd works on
        with self._lock:
            if self._index_sha.get((path, name)) == sha:
                return
            pending = self._pending.pop((path, name), None)
            if pending is not None:
                # memoryd's own write is stored as memoryd's now it is read: held any longer,
                # a kill -9 or another memoryd process reading the file would take it for
                # another process's rewrite (a false alarm, and memoryd's version lost).
                self._flush_one(pending)
                if pending.sha == sha:
                    return
            self._note_index(path, name, sha, len(data), data, OTHER)

    def _note_index(
        self, path: Path, name: str, sha: str, size: int, data: fsops.Content, by: str
    ) -> None:
        self._index_sha[(path, name)] = sha
        with self.writing() as tx:
            self.conn()
            d = self._load(tx, path)
            latest = d.other.get(name) if name not in d.seen else (d.seen[name], "seen")
            if latest is not None and latest == (sha, "seen"):
                return
            self.store_object(data, sha)
            if latest is not None and latest == (sha, "restoring"):
                by = MEMORYD
            elif by == OTHER and self._own_wrote(path, name, sha):
                by = MEMORYD  # another memoryd process's write, not stored by it yet
            now = self.clock()
            self._append(tx, d, [(now, name, sha, size, "seen", by, None)])
        if by == OTHER and latest is not None and latest[1] == "seen":
            told: Sequence[Told] = [("rewritten", name, sha, latest[0], size, False)]
            for change in self._git_said(path, told, *self._git_made(path, told)):
                self._outside(path, now, *change)

    # --- outside changes and the alarm -----------------------------------------------------------
    def _outside(self, path: Path, now: float, *change: Any) -> None:
        kind, name, sha, prev, size, _ = change
        if self.audit is None:
            return
        if kind == "deleted":
            restore = f"memoryd trash restore {deleted_id(path, name, now)}"
            self.audit(
                "memory.deleted_outside", dir=path, file=name, sha256=sha, size=size,
                restore=restore,
            )  # fmt: skip
        else:
            restore = f"memoryd history {path / name} --restore PREVIOUS"
            self.audit(
                "memory.rewritten_outside", dir=path, file=name, sha256=sha, previous=prev,
                size=size, restore=restore,
            )  # fmt: skip

    def _alarm(self, tx: sqlite3.Connection, path: Path, d: _Dir, now: float) -> None:
        """Raise memory.mass_change once a burst: the outside changes that count, as the
        rows of every memoryd process hold them (a one-shot `memoryd index` may see part of
        an agent's burst and the daemon the rest); one alarm a window, whoever raised it."""
        since = now - self.alarm_window
        changes = tx.execute(
            "SELECT DISTINCT e, f FROM versions_log WHERE dir = ? AND alarm = 1 AND t >= ?",
            (d.id, since),
        ).fetchall()
        # Files, not changes: one memory an agent edits four times is no mass change.
        if len({name for _, name in changes}) <= self.alarm_files or now < d.alarmed_until:
            return
        last = tx.execute("SELECT t FROM versions_alarms WHERE dir = ?", (str(path),)).fetchone()
        if last is not None and since < last[0] <= now:
            d.alarmed_until = last[0] + self.alarm_window
            return
        d.alarmed_until = now + self.alarm_window  # one alarm a burst
        deleted = sorted({n for e, n in changes if e == "gone"})
        rewritten = sorted({n for e, n in changes if e == "seen"})
        self._keep_alarm(path, now, len(deleted), len(rewritten))
        if self.audit is not None:
            self.audit(
                "memory.mass_change", dir=path, deleted=len(deleted), rewritten=len(rewritten),
                files=(deleted + rewritten)[:50], window_s=int(self.alarm_window),
                restore=f"memoryd trash list {path}; memoryd history {path}/FILE --restore N",
            )  # fmt: skip

    def _keep_alarm(
        self, path: Path, now: float, deleted: int, rewritten: int, dir_gone: bool = False
    ) -> None:
        """The last alarms, for `memoryd status` (which reads no audit log)."""
        with self.writing() as tx:
            self.conn()
            tx.execute("DELETE FROM versions_alarms WHERE dir = ?", (str(path),))
            tx.execute(
                "INSERT INTO versions_alarms (dir, t, deleted, rewritten, dir_gone, seq) VALUES "
                "(?, ?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM versions_alarms))",
                (str(path), now, deleted, rewritten, int(dir_gone)),
            )
            tx.execute(
                "DELETE FROM versions_alarms WHERE seq <= "
                "(SELECT max(seq) FROM versions_alarms) - ?",
                (ALARMS_KEEP,),
            )

    # --- safety ----------------------------------------------------------------------------------
    def _say(self, problem: str) -> None:
        if problem not in self._said:
            self._said.add(problem)
            get_logger().warning("version store problem", problem=problem)

    def _guard(self, func: Callable[..., object], *args: Any) -> None:
        """The store never fails what memoryd does: a problem is said once, and work goes
        on. A damaged state store (StateDamaged) is no such problem: it is raised."""
        try:
            func(*args)
        except OSError as error:
            where = error.filename if error.filename is not None else self.state_dir
            self._say(f"{where}: {error.strerror or error}")
        except sqlite3.OperationalError as error:  # busy past the wait
            self._say(f"{self.db.path}: {error}")


def alarms(store: VersionStore) -> list[dict[str, Any]]:
    """The last mass-change alarms (one per dir, the newest), oldest first."""
    conn = store.reading()
    return alarms_in(conn) if conn is not None else []


# --- the hooks: what the store passed to a scan, an index read, a swap is told -------------
# A collaborator, no module global: two stores (two Runtimes) in one process each keep what
# their own Runtime's work read, and a scan given none records nothing.
def note_moved(
    store: VersionStore | None, path: Path, name: str, sha: str, size: int, trash_id: str
) -> None:
    """The trash mover moved `name` (memoryd's move: never a deletion by others)."""
    if store is not None:
        store._guard(store.moved, path, name, sha, size, trash_id)


def note_restored(store: VersionStore | None, path: Path, name: str, sha: str, size: int) -> None:
    """memoryd put `name` back (a trash restore): reading it is not another process's doing."""
    if store is not None:
        store._guard(store.record, path, name, sha, size, "restoring", MEMORYD)


@contextlib.contextmanager
def using(store: VersionStore) -> Iterator[VersionStore]:
    """A store's run (a command, the daemon): an older layout is taken in first (a state
    folder that cannot be written is said once, and the command's own check names it);
    memoryd's own index writes are stored at the end (or at each `flush`)."""
    store._guard(store.conn)
    try:
        yield store
    finally:
        store.flush()


def for_runtime(rt: Any) -> VersionStore:
    """The store of a Runtime's state dir, with its config, clock and audit log."""
    cfg = rt.config.versions
    return VersionStore(
        rt.paths.state_dir,
        keep_days=cfg.keep_days,
        max_bytes=cfg.max_bytes,
        alarm_files=cfg.alarm_files,
        alarm_window=cfg.alarm_window,
        clock=rt.clock,
        audit=lambda event, **fields: rt.audit.write(event, **fields),
        boot=rt.boot,
    )


@contextlib.contextmanager
def keeping(rt: "Runtime", *, daemon: bool = False) -> Iterator["Runtime"]:
    """`rt` with its state dir's store (`Runtime.versions`), for a run that may write; the
    daemon's puts objects in place at each heartbeat and prunes now, then daily (`flush`)."""
    with using(for_runtime(rt)) as store:
        if daemon:
            store.defer = True
            store.flush()
        yield replace(rt, versions=store)
