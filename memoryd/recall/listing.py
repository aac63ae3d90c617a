"""What a search index compares with its memory dir: the dir's listing, and its index files.

`Listing` streams the dir's entries into an attached table and hashes them as it goes;
`write_pointers` records which index file points at which memory, and which pointers the
agent does not see in what it loads (its window).
"""

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, pointer_lines
from memoryd.storage import fsops

INDEX_MAX_BYTES = 64 * 1024 * 1024  # MEMORY.md / the archive, read to find pointers
# How the agent loads the dir's MEMORY.md: (agentview.ViewKind's value, max lines, max UTF-16
# units), memoryd's index.max_lines / index.max_chars.
Window = tuple[str, int, int]

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
    """One pass over the dir's `*.md` entries (lstat), streamed into the connection's temp
    table `listing` and hashed as it goes: a digest of them all (names, inode, size, mtime,
    type, in the dir's order), and the index files' stats. Nothing is kept per file in
    Python: at 100,000 files a listing held in Python was 30 MB. When the digest is the one
    the index last matched, the table is not looked at (see store.DirIndex._in_step). The
    same entries listed in another order only cost a compare: one running hash costs half
    what a sum of a hash per entry did."""

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
                if not name.endswith(".md") or name[0] == "." or not nameable(name):
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


def write_pointers(
    conn: sqlite3.Connection, dir_fd: int, listing: dict[str, os.stat_result], window: Window
) -> dict[str, str]:
    """Which index file points at which memory: MEMORY.md (`index`), else the archive; and
    which of MEMORY.md's the agent does not see in what it loads (`window`)."""
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
