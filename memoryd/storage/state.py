"""memoryd's memory of each dir, kept in the state store (never in the memory dir).

Per dir: the memory files it has seen with their name/description (so a gone file's pointer can
be removed and a generated line recognised), the pointer lines it wrote itself (so a duplicate of
one is told from the agent's), what it has already reported (so each problem is
said once), pile-up counts for the daemon, and the caches for a fast restart (the parse cache,
dream facts, held archive positions, repo tokens).

All of it is in `state.sqlite` (memoryd.storage.statedb): damage to that file is StateDamaged,
never done without in silence. Only the dir's writer lock is a file, under `<state_dir>/dirs/`.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.logsetup import get_logger
from memoryd.model import safejson
from memoryd.paths import ensure_private_dir
from memoryd.storage.statedb import Schema, StateDB

if TYPE_CHECKING:  # the parse cache's module (and its YAML parser) loads with the first cache
    from memoryd.model.scanned import Scanned

# Names of files that left a dir kept in its state (see DirState.gone): ~40 bytes each, and
# more than the circuit breaker lets one pass move from a 10,000-memory dir many times over.
GONE_KEEP = 10_000


def dir_key(real_path: Path) -> str:
    return hashlib.sha256(str(real_path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


@dataclass(slots=True)
class DirState:
    path: str = ""
    known: bool = False  # False until memoryd has finished one index pass over the dir
    managed: bool = False  # whether memoryd managed the index at its last pass
    seen: dict[str, list[str]] = field(default_factory=dict)  # file -> [name, description]
    # file -> index.line_digest of the pointer line memoryd wrote for it (added, or rewritten
    # under DESIGN §2.5), while that line is in the index: the line that loses when the file
    # has two (IndexInput.own). Saved per name, as `seen` is.
    own: dict[str, str] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)  # what was said once -> signature
    changed_since_dream: list[str] = field(default_factory=list)
    last_dream_ts: float = 0.0
    last_dream_result: str = ""
    # Memories the last pass flagged for review and no person has acknowledged
    # (memoryd.dream.acked); -1 before any pass counted them.
    last_dream_flagged: int = -1
    last_index_ts: float = 0.0
    last_change_ts: float = 0.0
    # MEMORY.md's and the archive's [inode, size, mtime_ns] (null when missing) as memoryd's
    # last index pass left them, and the settings it ran under; [] when that pass did not end
    # verified. While the archive is still that file, each of its lines is as an index pass
    # wants it (see indexing.passes.index_after_dream).
    settled: list[Any] = field(default_factory=list)
    # Files memoryd saw leave the dir (deleted, moved to the trash) -> when: their pointers
    # stay removable after the pass that saw them go (an index write that failed, an agent's
    # stale read-modify-write putting a pointer back). Oldest first, at most GONE_KEEP; a name
    # is forgotten once a file of that name exists again.
    gone: dict[str, float] = field(default_factory=dict)
    # [the [inode, size, mtime_ns] of the file memoryd's last write of MEMORY.md put under
    # .MEMORY.md.prev, and MEMORY.md's as that write left it]; [] when none is kept. If the
    # old file is written to later (a slow `tool > MEMORY.md` that truncated it before the
    # swap), those bytes were meant for MEMORY.md (see indexing.write.late_write).
    prev: list[Any] = field(default_factory=list)

    def note_gone(self, names: Iterable[str], when: float) -> None:
        """Remember that these files left the dir (the oldest record goes past GONE_KEEP)."""
        for name in sorted(names):
            self.gone.pop(name, None)
            self.gone[name] = when
        if len(self.gone) > GONE_KEEP:
            self.gone = dict(list(self.gone.items())[-GONE_KEEP:])

    def forget_gone(self, present: Set[str], names: Iterable[str] | None = None) -> None:
        """Forget the files that exist again (of `names` only, when given)."""
        for name in [n for n in (self.gone if names is None else names) if n in present]:
            self.gone.pop(name, None)

    def seen_pairs(self) -> dict[str, tuple[str, str]]:
        return {k: (v[0], v[1]) for k, v in self.seen.items()}

    def report_once(self, key: str, signature: str = "1") -> bool:
        """True the first time (key, signature) is reported; remember it."""
        if self.reported.get(key) == signature:
            return False
        self.reported[key] = signature
        return True

    def forget_reports(self, prefix: str, keep: set[str]) -> None:
        """Forget reports under a prefix that no longer apply, so a recurrence is said again."""
        for key in [k for k in self.reported if k.startswith(prefix) and k not in keep]:
            del self.reported[key]


_FIELDS = frozenset(f.name for f in fields(DirState))
# The fields kept a row per name (name -> value) rather than in the dir's one row: a pass over a
# few files of a 10,000-file dir writes those few rows, not the whole map.
_KEYED = ("seen", "own")


def _copy(state: DirState) -> DirState:
    """A copy deep enough for callers that mutate (they replace or update these containers)."""
    return replace(
        state,
        seen=dict(state.seen),
        own=dict(state.own),
        reported=dict(state.reported),
        changed_since_dream=list(state.changed_since_dream),
        gone=dict(state.gone),
    )


def _apply(state: DirState, data: Mapping[str, Any]) -> None:
    for key, value in data.items():
        if key in _FIELDS and key not in _KEYED:
            setattr(state, key, value)


def _keyed_delta(
    before: Mapping[str, Any], after: Mapping[str, Any], changed: Set[str] | None
) -> dict[str, Any] | None:
    """The per-name change of one keyed field (name -> new value, None: gone), or None when it
    cannot be said without comparing every name. `changed`: the caller's word that no other
    name changed (the daemon's pass over a few files), so that 10,000 entries are neither
    compared nor copied on every save; a name added or removed elsewhere still shows in the
    count and makes it None."""
    out: dict[str, Any] = {}
    if changed is None:
        return out if before == after else None
    size = len(before)
    for name in changed:
        value = after.get(name)
        if before.get(name) != value:
            out[name] = value
            size += (value is not None) - (name in before)
    return out if size == len(after) else None  # else a name came or went elsewhere too


def _delta(
    before: DirState, after: DirState, seen_changed: Set[str] | None, own_changed: Set[str] | None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The per-name changes of `seen` and `own` (own_changed None: seen_changed's names), or
    None when the caller did not say where they are (both are then written whole)."""
    seen = _keyed_delta(before.seen, after.seen, seen_changed)
    own = _keyed_delta(before.own, after.own, seen_changed if own_changed is None else own_changed)
    return None if seen is None or own is None else (seen, own)


def _rest_of(state: DirState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in sorted(_FIELDS) if name not in _KEYED}


def _rest(state: DirState) -> str:
    """The dir's fields but `seen` and `own`, as its row holds them."""
    return json.dumps(_rest_of(state), ensure_ascii=True, sort_keys=True, separators=(",", ":"))


def _shallow(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


SCHEMA = Schema(
    "dirstate",
    1,
    """
    CREATE TABLE dirstate (dir TEXT PRIMARY KEY, path TEXT NOT NULL, stamp INTEGER NOT NULL,
                           fields TEXT NOT NULL);
    CREATE TABLE dirstate_seen (dir TEXT NOT NULL, name TEXT NOT NULL, title TEXT NOT NULL,
                                description TEXT NOT NULL, PRIMARY KEY (dir, name))
                                WITHOUT ROWID;
    CREATE TABLE dirstate_own (dir TEXT NOT NULL, name TEXT NOT NULL, digest TEXT NOT NULL,
                               PRIMARY KEY (dir, name)) WITHOUT ROWID
    """,
    ("dirstate", "dirstate_seen", "dirstate_own"),
)
# Caches anything can rebuild from the memory dirs and repos: a dir's parse cache (`scan`), its
# dream facts (`facts`), its held archive positions (`held`), a repo's tokens (`tokens`).
CACHE = Schema(
    "cache",
    1,
    """CREATE TABLE cache_blob (kind TEXT NOT NULL, key TEXT NOT NULL, stamp INTEGER NOT NULL,
                                data BLOB NOT NULL, PRIMARY KEY (kind, key)) WITHOUT ROWID""",
    ("cache_blob",),
    disposable=True,
)


def _stamp() -> int:
    """A new value for a row's `stamp`: a copy held in memory is trusted while the row still
    has the stamp it was read or written with (one look at an indexed row, not its data)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def _say_on_stderr(path: Path, problem: str) -> None:
    """The default `on_damaged`: a structlog warning."""
    get_logger().warning(
        "a state file cannot be used; memoryd does without it and rebuilds it",
        path=str(path),
        problem=problem,
        hint="nothing to do unless this recurs; then remove the file",
    )


class StateStore:
    """Loads and saves DirState and the caches in the state store (`state.sqlite`); the dir's
    writer lock stays under `<state_dir>/dirs/`.

    A long-running process keeps what it last read or wrote in memory, and trusts it while the
    row's stamp is unchanged: a pass over a 10,000-file dir then neither re-reads nor re-writes
    state that did not change.
    """

    def __init__(
        self, state_dir: Path, *, on_damaged: Callable[[Path, str], None] = _say_on_stderr
    ) -> None:
        self.state_dir = state_dir
        self.root = state_dir / "dirs"
        self.on_damaged = on_damaged
        self._states: dict[Path, tuple[int, DirState]] = {}  # stamp, state
        self._caches: dict[Path, tuple[int, dict[str, Scanned]]] = {}
        # A new token each time a dir's `seen` may have changed (read from the store, or saved
        # with a change to it): a caller that kept the token knows `seen` is what it last saved.
        self._seen_tokens: dict[Path, object] = {}
        self._locks = threading.local()  # per thread: real path -> (lock fd, depth)
        self._ready = False

    def db(self) -> StateDB:
        """The state store, with this module's tables."""
        db = StateDB.in_state_dir(self.state_dir)
        if not self._ready:
            db.ensure(SCHEMA)
            db.ensure(CACHE)
            self._ready = True
        return db

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One transaction for several saves (a pass's state and caches commit as one)."""
        return self.db().transaction()

    @contextlib.contextmanager
    def lock(self, real_path: Path, *, wait: bool = True) -> Iterator[bool]:
        """Hold the dir's writer lock (an advisory flock in the state dir) for a whole pass:
        one memoryd process at a time edits a dir's index, moves its files or recovers its
        pass (a daemon and a command run by hand would otherwise undo each other's `seen`).

        Reentrant in a thread (a dream pass runs index passes). Yields False, holding nothing,
        when another process has it and `wait` is False; else waits for it.
        """
        held: dict[Path, list[int]] = self._locks.__dict__.setdefault("held", {})
        mine = held.get(real_path)
        if mine is not None:
            mine[1] += 1
            try:
                yield True
            finally:
                mine[1] -= 1
            return
        ensure_private_dir(self.root)
        fd = os.open(
            self.root / f"{dir_key(real_path)}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    yield False
                    return
                fcntl.flock(fd, fcntl.LOCK_EX)
            held[real_path] = [fd, 1]
            try:
                yield True
            finally:
                del held[real_path]
        finally:
            os.close(fd)  # and with it the lock

    def _reading(self, schema: Schema = SCHEMA) -> sqlite3.Connection | None:
        """This thread's connection for a read of `schema`'s tables, None while the state
        store or they are not made: a read makes neither (a dry run and a read-only command
        write nothing in the state dir)."""
        db = StateDB.in_state_dir(self.state_dir)
        return db.connection() if self._ready else db.reader(schema)

    def dirs(self) -> list[str]:
        """The path of every dir the store keeps state for, sorted."""
        conn = self._reading()
        if conn is None:
            return []
        rows = conn.execute("SELECT path FROM dirstate ORDER BY path")
        return [path for (path,) in rows]

    def _stamp_of(self, real_path: Path) -> int | None:
        conn = self._reading()
        if conn is None:
            return None
        sql = "SELECT stamp FROM dirstate WHERE dir = ?"
        found = conn.execute(sql, (dir_key(real_path),)).fetchone()
        return None if found is None else int(found[0])

    def load(self, real_path: Path) -> DirState:
        held = self._states.get(real_path)
        if held is not None and self._stamp_of(real_path) == held[0]:
            return _copy(held[1])
        key = dir_key(real_path)
        state = DirState(path=str(real_path))
        conn = self._reading()
        if conn is None:
            return state
        with StateDB.in_state_dir(self.state_dir).snapshot():  # as one commit left the three
            row = conn.execute("SELECT stamp, fields FROM dirstate WHERE dir = ?", (key,))
            found = row.fetchone()
            if found is None:
                self._states.pop(real_path, None)
                return state
            _apply(state, safejson.loads(found[1]))
            seen = conn.execute(
                "SELECT name, title, description FROM dirstate_seen WHERE dir = ?", (key,)
            )
            state.seen = {name: [title, text] for name, title, text in seen}
            own = conn.execute("SELECT name, digest FROM dirstate_own WHERE dir = ?", (key,))
            state.own = dict(own.fetchall())
        state.path = str(real_path)
        self._states[real_path] = (int(found[0]), _copy(state))
        self._seen_tokens[real_path] = object()
        return state

    def seen_token(self, real_path: Path) -> object | None:
        """An opaque value that stays the same object while the dir's `seen` is the one this
        store last read or saved and nothing else wrote the state since; None if unknown."""
        held = self._states.get(real_path)
        if held is None or self._stamp_of(real_path) != held[0]:
            return None
        return self._seen_tokens.get(real_path)

    def save(
        self,
        real_path: Path,
        state: DirState,
        seen_changed: Set[str] | None = None,
        own_changed: Set[str] | None = None,
    ) -> None:
        """Write what changed since the last load or save; `seen_changed`: the only names
        whose `seen` entry may differ (a pass over a few files), else all are compared;
        `own_changed`: the same for `own` (None: `seen_changed`)."""
        key = dir_key(real_path)
        held = self._states.get(real_path)
        rest = _rest(state)
        with self.db().transaction() as conn:
            row = conn.execute("SELECT stamp FROM dirstate WHERE dir = ?", (key,)).fetchone()
            delta = None
            if held is not None and row is not None and row[0] == held[0]:
                delta = _delta(held[1], state, seen_changed, own_changed)
                if delta == ({}, {}) and rest == _rest(held[1]):
                    if seen_changed is None and own_changed is None:
                        # Equal, every name compared: hold the caller's values, not the
                        # equal copies read from the file (a restarted daemon's pass
                        # rebuilds `seen` from its scan: shared, its 20,000 texts are
                        # not held twice, ~3 MB at 10,000 memories).
                        self._states[real_path] = (held[0], _copy(state))
                    return  # nothing changed since we read or wrote it
            if delta is None:
                stamp = put_whole(conn, key, replace(state, path=str(real_path)))
            else:
                stamp = _put_row(conn, key, str(real_path), rest)
                _write_keyed(conn, key, *delta)
        if delta is None or held is None:
            self._seen_tokens[real_path] = object()
            self._states[real_path] = (stamp, _copy(state))
            return
        if delta[0]:
            self._seen_tokens[real_path] = object()
        # The caller goes on mutating its state's containers: the held copy takes the changed
        # names and copies of the other fields that changed (`seen` values are replaced, never
        # mutated, by callers).
        mine = held[1]
        for name, value in delta[0].items():
            _put(mine.seen, name, value)
        for name, value in delta[1].items():
            _put(mine.own, name, value)
        changed = {k: _shallow(v) for k, v in _rest_of(state).items() if v != getattr(mine, k)}
        _apply(mine, changed)
        self._states[real_path] = (stamp, mine)

    def release_cache(self, real_path: Path) -> None:
        """Stop holding the dir's parse cache in memory (the next load reads the store): for a
        pass that is done with the scan and needs the memory (100,000 entries are ~90 MB)."""
        self._caches.pop(real_path, None)

    def _blob(self, kind: str, key: str) -> tuple[int, bytes] | None:
        conn = self._reading(CACHE)
        if conn is None:
            return None
        sql = "SELECT stamp, data FROM cache_blob WHERE kind = ? AND key = ?"
        found = conn.execute(sql, (kind, key)).fetchone()
        return None if found is None else (int(found[0]), bytes(found[1]))

    def _put_blob(self, kind: str, key: str, data: bytes) -> int:
        """Save one cache entry (not made durable: a cache lost to a power cut is rebuilt)."""
        stamp = _stamp()
        with self.db().transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO cache_blob(kind, key, stamp, data) VALUES (?, ?, ?, ?)",
                (kind, key, stamp, data),
            )
        return stamp

    def load_cache(self, real_path: Path) -> "dict[str, Scanned]":
        from memoryd.model.scanned import load_cache

        held = self._caches.get(real_path)
        key = dir_key(real_path)
        conn = self._reading(CACHE) if held is not None else None
        if held is not None and conn is not None:
            sql = "SELECT stamp FROM cache_blob WHERE kind = 'scan' AND key = ?"
            if conn.execute(sql, (key,)).fetchone() == (held[0],):
                return held[1]  # read-only for callers: scan_dir only looks entries up
        found = self._blob("scan", key)
        if found is None:
            return {}
        files = load_cache(found[1])
        self._caches[real_path] = (found[0], files)
        return files

    def cache_data(self, real_path: Path) -> bytes | None:
        """The dir's parse cache as saved (the held copy is not consulted), or None."""
        found = self._blob("scan", dir_key(real_path))
        return None if found is None else found[1]

    def save_cache(self, real_path: Path, files: "dict[str, Scanned]") -> None:
        from memoryd.model.scanned import dump_cache

        held = self._caches.get(real_path)
        if held is not None and (held[1] is files or held[1] == files):
            return
        # Kept as given, not copied (10,000 entries are half a MB of a 60 MB daemon): a
        # scan's `files` is never changed once the scan is made (the next scan copies).
        self._caches[real_path] = (
            self._put_blob("scan", dir_key(real_path), dump_cache(files)),
            files,
        )

    def load_facts(self, real_path: Path) -> bytes | None:
        """The dream facts a pass saved for the dir (``FactsCache.dump``), or None."""
        found = self._blob("facts", dir_key(real_path))
        return None if found is None else found[1]

    def save_facts(self, real_path: Path, data: Iterable[bytes]) -> None:
        self._put_blob("facts", dir_key(real_path), b"".join(data))

    def drop_facts(self, real_path: Path) -> None:
        """Remove the dir's saved dream facts (`forget --purge`): the next pass derives them.
        Their bytes go from the file's pages (secure_delete) and from its WAL (truncated)."""
        with self.db().transaction() as conn:
            conn.execute(
                "DELETE FROM cache_blob WHERE kind = 'facts' AND key = ?", (dir_key(real_path),)
            )
        self.db().connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def load_held(self, real_path: Path) -> bytes | None:
        """What the last held view found in the dir's archive (index_held.dump_positions)."""
        found = self._blob("held", dir_key(real_path))
        return None if found is None else found[1]

    def save_held(self, real_path: Path, data: bytes) -> None:
        self._put_blob("held", dir_key(real_path), data)

    def load_repo_tokens(self, root: Path) -> bytes | None:
        """The saved token cache of a repo root (``repo.dump_sources``), or None."""
        found = self._blob("tokens", dir_key(root))
        return None if found is None else found[1]

    def save_repo_tokens(self, root: Path, data: bytes) -> None:
        self._put_blob("tokens", dir_key(root), data)


def _put_row(conn: sqlite3.Connection, key: str, path: str, rest: str) -> int:
    stamp = _stamp()
    conn.execute(
        "INSERT OR REPLACE INTO dirstate(dir, path, stamp, fields) VALUES (?, ?, ?, ?)",
        (key, path, stamp, rest),
    )
    return stamp


def put_whole(conn: sqlite3.Connection, key: str, state: DirState) -> int:
    """Write a dir's state whole in the caller's transaction; its new stamp."""
    conn.execute("DELETE FROM dirstate_seen WHERE dir = ?", (key,))
    conn.execute("DELETE FROM dirstate_own WHERE dir = ?", (key,))
    _write_keyed(conn, key, state.seen, state.own)
    return _put_row(conn, key, state.path, _rest(state))


def _put(held: dict[str, Any], name: str, value: Any) -> None:
    if value is None:
        held.pop(name, None)
    else:
        held[name] = value


def _write_keyed(
    conn: sqlite3.Connection, key: str, seen: Mapping[str, Any], own: Mapping[str, Any]
) -> None:
    """Write per-name changes (name -> value, None: gone) of `seen` and `own`."""
    conn.executemany(
        "DELETE FROM dirstate_seen WHERE dir = ? AND name = ?",
        [(key, n) for n, v in seen.items() if v is None],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO dirstate_seen(dir, name, title, description) VALUES (?,?,?,?)",
        [(key, n, v[0], v[1]) for n, v in seen.items() if v is not None],
    )
    conn.executemany(
        "DELETE FROM dirstate_own WHERE dir = ? AND name = ?",
        [(key, n) for n, v in own.items() if v is None],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO dirstate_own(dir, name, digest) VALUES (?, ?, ?)",
        [(key, n, v) for n, v in own.items() if v is not None],
    )
