"""What a search index compares with its memory dir: the dir's listing, and its index files.

`Listing` hashes the dir's entries, and puts them in an attached table for a compare;
`write_pointers` records which index file points at which memory, and which pointers the
agent does not see in what it loads (its window).
"""

import contextlib
import os
import re
import sqlite3
import stat
from array import array
from collections.abc import Iterator
from operator import methodcaller
from pathlib import Path

from memoryd.model.agentview import ARCHIVE_NAME, INDEX_NAME
from memoryd.storage import fsops

INDEX_MAX_BYTES = 64 * 1024 * 1024  # MEMORY.md / the archive, read to find pointers
# How the agent loads the dir's MEMORY.md: (agentview.ViewKind's value, max lines, max UTF-16
# units), memoryd's index.max_lines / index.max_chars.
Window = tuple[str, int, int]

# A dir of up to HELD_MAX entries is listed into Python (its names in one buffer, their stats
# in an array: ~70 bytes an entry, no object per file) and hashed: found in step, as most
# refreshes find it, it costs no table at all (at 10,000 files, filling the table was 10 ms of
# a 45 ms refresh). The table is filled only for the compare, or as the dir is read when it
# holds more entries: then memory stays flat whatever the dir's size.
HELD_MAX = 16_384
_NAMES = re.compile(rb"([^/]*)/")  # the names held, each ended by "/"
_NAME = methodcaller("group", 1)
# The listing's table is kept in a database of its own, attached for one update and detached
# after it: its memory is then freed (a temp table's stayed with the connection: 6 MB at
# 100,000 files in the MCP server). That database is a temporary file (SQLite's, removed as
# it is made; 0600) behind a page cache of LISTING_CACHE_KIB: in memory, 100,000 entries were
# 2 MB more of the server's peak at each refresh that lists them. No key: appended in the
# dir's order, 10,000 rows cost 9 ms, kept sorted by name 14 ms. The compare looks each
# entry up in `files` instead.
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
CHANGED = (
    "SELECT l.name, f.id FROM listing.listing l LEFT JOIN files f INDEXED BY files_stat "
    "ON f.file = l.name "
    "WHERE l.name NOT IN (?, ?) AND (l.mode & 61440) != 16384 "
    "AND (f.id IS NULL OR f.ino != l.ino OR f.size != l.size OR f.mtime_ns != l.mtime)"
)
GONE = (
    "SELECT file, id FROM files WHERE file NOT IN "
    "(SELECT name FROM listing.listing WHERE (mode & 61440) != 16384)"
)
assert (stat.S_IFMT(0o777777), stat.S_IFDIR) == (61440, 16384)


def nameable(name: str) -> bool:
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


class Listing:
    """One pass over the dir's `*.md` entries (lstat), hashed: a digest of them all (names,
    inode, size, mtime, type, in the dir's order) and the index files' stats. When the digest
    is the one the index last matched, nothing more is done (see store.DirIndex._in_step);
    else `table` puts the entries in the connection's listing table, compared in SQLite. Up
    to HELD_MAX entries are held here meanwhile; a larger dir's go to the table as they are
    read. No Python object is kept per file: at 100,000 files a listing held as objects was
    30 MB."""

    __slots__ = ("_hashed", "_names", "_stats", "_tabled", "indexes")

    def __init__(self) -> None:
        from hashlib import blake2b

        # The names, each ended by "/" (no name holds one), and the stats, fixed-size: each
        # stream says where each entry ends, however the entries were held on the way.
        self._hashed = (blake2b(digest_size=16), blake2b(digest_size=16))
        self.indexes: dict[str, os.stat_result] = {}
        self._names = bytearray()  # each held entry's name and a "/"
        self._stats = array("q")  # each held entry's inode, size, mtime and mode
        self._tabled = False  # the listing table is attached and holds what is not held

    def fill(self, conn: sqlite3.Connection, dir_fd: int) -> None:
        """List the dir (a dir of more than HELD_MAX entries into the listing table, in one
        transaction: row by row in autocommit, 10,000 rows took 14-240 ms; in one, 7-8 ms)."""
        names, stats = self._names, self._stats
        add = stats.extend
        try:
            with os.scandir(dir_fd) as found:
                for entry in found:
                    name = entry.name
                    if not name.endswith(".md") or name[0] == ".":
                        continue
                    try:
                        encoded = name.encode()  # strict: a name `nameable` refuses is left out
                        st = entry.stat(follow_symlinks=False)
                    except (UnicodeEncodeError, FileNotFoundError):
                        continue
                    if name in (INDEX_NAME, ARCHIVE_NAME):
                        self.indexes[name] = st
                    names += encoded
                    names += b"/"
                    add((st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode))
                    if len(stats) == 4 * HELD_MAX:
                        self._hash()
                        self._to_table(conn)
        except BaseException:
            self._rollback(conn)
            raise
        self._hash()
        if self._tabled:
            self._commit(conn)

    def table(self, conn: sqlite3.Connection) -> None:
        """The whole listing in the listing table, for the compare (CHANGED, GONE)."""
        if not self._tabled:
            self._commit(conn)

    def _commit(self, conn: sqlite3.Connection) -> None:
        """The entries still held into the table, and the listing's transaction committed."""
        try:
            self._to_table(conn)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise

    def _hash(self) -> None:
        self._hashed[0].update(self._names)
        self._hashed[1].update(self._stats)

    def _to_table(self, conn: sqlite3.Connection) -> None:
        """Put the entries held in the listing table (attached first, in a transaction)."""
        if not self._tabled:
            self.attach(conn)
            conn.execute("BEGIN")
            self._tabled = True
        conn.executemany("INSERT INTO listing.listing VALUES (?, ?, ?, ?, ?)", self._rows())
        del self._names[:], self._stats[:]

    def _rows(self) -> Iterator[tuple[str, int, int, int, int]]:
        """The entries held, one at a time (no list of them), in C: 10,000 rows in ~3 ms."""
        names = map(bytes.decode, map(_NAME, _NAMES.finditer(self._names)))
        stats = iter(self._stats)  # four a row
        return zip(names, stats, stats, stats, stats, strict=True)

    def _rollback(self, conn: sqlite3.Connection) -> None:
        if self._tabled:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

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

    @property
    def digest(self) -> str:
        return "".join(h.hexdigest() for h in self._hashed)


def write_pointers(
    conn: sqlite3.Connection, dir_fd: int, listing: dict[str, os.stat_result], window: Window
) -> dict[str, str]:
    """Which index file points at which memory: MEMORY.md (`index`), else the archive; and
    which of MEMORY.md's the agent does not see in what it loads (`window`)."""
    from memoryd.model.index import pointer_lines

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
    stats = {f"stat:{n}": stat_text(listing.get(n)) for n in (INDEX_NAME, ARCHIVE_NAME)}
    stats["window"] = window_text(window)
    conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", stats.items())
    return stats


def stat_text(st: os.stat_result | None) -> str:
    if st is None:
        return "-"
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{stat.S_IFMT(st.st_mode)}"


def window_text(window: Window) -> str:
    return ":".join(map(str, window))


def window_of(text: str | None, memory_dir: Path) -> Window:
    """The window an index was last given (`meta.window`), else the default one: Claude
    Code's for an auto-memory dir (`projects/<slug>/memory`), the plain window elsewhere
    (agentview.view_kind_of, by the path alone)."""
    from memoryd.model.agentview import MAX_LINES, MAX_UNITS, ViewKind, view_kind_of

    kind, _, sizes = (text or "").partition(":")
    lines, _, units = sizes.partition(":")
    if kind in tuple(ViewKind) and lines.isdigit() and units.isdigit():
        return (kind, int(lines), int(units))
    return view_kind_of(memory_dir).value, MAX_LINES, MAX_UNITS


def _hidden_pointers(text: str, window: Window) -> dict[str, str]:
    """The files MEMORY.md points at only on lines the agent does not see, each with why
    (the first hidden line's): what `memoryd dirs` counts as hidden pointers."""
    from memoryd.model.agentview import ViewKind
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
