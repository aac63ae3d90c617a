"""Undo for what others do (DESIGN Amendments, §2.2 widened): every version of a memory file,
and of MEMORY.md / MEMORY-ARCHIVE.md, that memoryd reads is kept by content in the state dir.

Layout, all 0700/0600, never in a memory dir:
- `<state>/versions/objects/<sha256>`: a version's bytes, stored once whatever dirs and names
  hold them; written as a temp file, fsynced, renamed (a kill -9 leaves a whole object or a
  temp file, never half an object under its name), then the folder fsynced.
- `<state>/versions/packs/<id>.pack`: the objects of one big batch (a first start over a dir
  of thousands of files), one after the other in one file, then an index of them sorted by
  sha256 and a trailer (see `_PackWriter`). Written as one temp file, fsynced, renamed, the
  folder fsynced, before the log names any of them: one file and one fsync where thousands
  of objects would cost thousands of files (and a syncfs that flushes the whole filesystem).
- `<state>/versions/logs/<dir key>.jsonl`: per memory dir, one JSON line per event, appended:
  `{"t": when, "f": name, "h": sha256, "n": size, "e": event, "by": "memoryd"|"other"}` with
  `e` one of `seen` (a version first read), `gone` (the file left the dir), `moved` (memoryd
  moved it into the trash), `restoring` (memoryd is about to write these bytes back);
  `"to"` marks a rename's `gone`, `"alarm": 1` an outside change that counts toward the
  mass-change alarm (every memoryd process counts them from the log's end). The first line
  names the dir. A torn last line (a crash mid-append) is skipped.

Where versions come from: the store is passed down (`Runtime.versions`) as the `versions`
parameter of what reads and writes. A scan reads a changed file's bytes anyway
(`scan.scan_dir`, one session per scan: `begin_scan`); an index file's bytes are read by
`indexing.read.read_index_file` (`index_read`); memoryd's own index writes are told by
`fsops.replace_file` (`own_content`) and stored at the next flush (the heartbeat, the end
of a command, or before anyone else's version of that file is recorded). Their sha256 is
noted before the swap in the dir's ledger of own writes (`<state>/versions/own/<dir
key>.own`, `own_intent`), which every memoryd process reads before it calls a version of an
index file another process's: no memoryd write is ever an outside change. Deletions are
names a scan no longer finds. Nothing is ever re-read for the store's sake. A scan, read or
write given no store keeps nothing.

What memoryd cannot see it cannot keep: a version written and replaced while no memoryd
process ran is not in the store; the last version memoryd saw is what it can give back.
"""

import array
import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import fsops, gitwork, retention, safejson, witness
from memoryd.logsetup import get_logger
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import (
    BoundedLines,
    FileTooLarge,
    NotRegularFile,
    ensure_private_dir,
    open_regular,
    read_bounded,
    regular_fd,
)
from memoryd.sealed import seal, unseal
from memoryd.state import StateStore, dir_key

if TYPE_CHECKING:  # `memoryd status` reads the alarms without the scan machinery
    from memoryd.indexing import scan

MEMORYD, OTHER = "memoryd", "other"
INDEX_FILES = (INDEX_NAME, ARCHIVE_NAME)
BATCH_SYNC_FROM = 16  # objects in one scan from which one syncfs replaces an fsync each
# The store-wide lock (`<state>/versions/.lock`): every writer holds it shared from deciding
# that an object is stored (or storing it) until the log names it; prune holds it exclusive.
# Without it a prune in another process (the daemon's daily one) could list an object, find no
# log line naming it yet, and delete it between a scan's pack commit and its log append.
LOCK_NAME = ".lock"
PACK_FROM = 256  # new objects in one scan from which they go into one pack file
PACK_BUFFER = 1 << 20  # bytes a scan holds while it does not know yet whether it packs
PACK_WRITE = 256 << 10  # a pack is written in pieces of about this many bytes
# Every this many bytes of a pack, the kernel is asked to start writing them to disk without
# waiting (see _start_writeback): the scan's parsing then overlaps the disk's work, and the
# commit's fsync waits for the last few MB only. At a first start of 10,000 files (20 MB),
# that fsync was ~10 ms of the pass; with the writeback started early, 2-4 ms.
PACK_WRITEBACK = 4 << 20
_PACK_HEAD = b"memoryd pack 1\n"
_PACK_ENTRY = struct.Struct(">32sQQ")  # sha256, offset, size
_PACK_TRAILER = struct.Struct(">8sQQ")  # magic, entries, where the index starts
_PACK_MAGIC = b"mdpackix"
LOG_LINE_MAX = 1 << 16
TABLE_MIN_BYTES = 256 << 10  # a log this long has its table kept (see VersionStore._from_table)
_TABLE_HEADER = ("memoryd version table", 1)
_STAMP_HEADER = ("memoryd version stamp", 1)
STAMP_TAIL = 4096  # the bytes at the end of a log its stamp holds the digest of
STAMP_MAX = 1 << 20  # a stamp is a digest, a log mark and two index versions' sha256s
TABLE_MAX = 256 << 20  # a table of a dir of 1,000,000 names is ~150 MB
OBJECT_MAX = 64 << 20  # the archive's read limit is below this
DAY = 86400.0
PRUNE_EVERY = DAY  # the daemon prunes at start, then at the first heartbeat a day after

AuditWrite = Callable[..., None]
# A log line to append: t, f, h, n, e, by (see the module docstring) and any other fields.
_Row = tuple[float, str, str, int, str, str, Mapping[str, Any] | None]
_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_quote = json.encoder.encode_basestring_ascii
LOG_ROWS = 400  # a log append is written in pieces of this many lines (about 64 KB)


def _lines(rows: Sequence[_Row]) -> bytes:
    """The rows' lines (`_line`'s), made in one go when they are plain (no extra fields) and
    share one time, as a scan's do: the time written once, no call a line (10,000 lines
    cost ~12 ms one by one, ~5 ms so)."""
    t = rows[0][0] if rows else 0.0
    if any(r[6] or r[0] is not t for r in rows):
        return b"".join(map(_line, rows))
    head = f'{{"t":{t!r},"f":'
    return "".join(
        [
            f'{head}{_quote(f)},"h":{_quote(h)},"n":{n!r},"e":{_quote(e)},"by":{_quote(by)}}}\n'
            for _, f, h, n, e, by, _ in rows
        ]
    ).encode()


def _line(row: _Row) -> bytes:
    """One log line, as `_encode` writes the row's dict (without building it: 10,000 lines
    paid 30 ms for json.dumps, and the dicts a few MB)."""
    t, f, h, n, e, by, extra = row
    if extra:
        fields = {"t": t, "f": f, "h": h, "n": n, "e": e, "by": by, **extra}
        return _encode(fields).encode() + b"\n"
    text = f'{{"t":{t!r},"f":{_quote(f)},"h":{_quote(h)},"n":{n!r},"e":{_quote(e)},"by":'
    return f"{text}{_quote(by)}}}\n".encode()


ALARMS = "alarms.json"
ALARMS_KEEP = 50
OWN_MAX = 64 << 10  # a dir's ledger of own writes past this is cut to its last OWN_KEEP bytes
OWN_KEEP = 16 << 10  # (~200 index writes: far more than another process has left to read)


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """libc's syncfs (None where there is none), looked up at its first use."""
    func: Callable[[int], int] | None = fsops.libc_function("syncfs")
    return func


@dataclass(frozen=True, slots=True)
class Record:
    t: float
    f: str
    h: str
    n: int
    e: str
    by: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def _record(row: object, skip_reason: Callable[[str], str | None]) -> Record | None:
    """A log row as a Record, None if it is not one; `skip_reason` is scan's (imported by the
    caller once: an import a line cost ~0.2 s at 10,000 lines, and `memoryd status` imports
    this module without the scan machinery)."""
    if not isinstance(row, dict):
        return None
    t, f, h, n, e, by = (row.get(k) for k in ("t", "f", "h", "n", "e", "by"))
    if not (
        isinstance(t, int | float)
        and not isinstance(t, bool)
        and math.isfinite(t)  # json reads NaN and Infinity (and 1e400): no time a version had
        and isinstance(f, str)
        and isinstance(h, str)
        and _SHA256.fullmatch(h) is not None  # it names an object file: never a path
        and isinstance(n, int)
        and not isinstance(n, bool)
        and n >= 0
        and e in ("seen", "gone", "moved", "restoring")
        and by in (MEMORYD, OTHER)
    ):
        return None
    if skip_reason(f) not in (None, "index") or "/" in f or not _entry_name(f):
        return None  # a name no scan could have recorded: never used
    extra = {k: v for k, v in row.items() if k not in ("t", "f", "h", "n", "e", "by")}
    return Record(float(t), f, h, n, str(e), str(by), extra)


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _entry_name(name: str) -> bool:
    """Whether a name read from a log could be a directory entry's, as os.listdir gives it
    (UTF-8, undecodable bytes as surrogateescape, no NUL): json reads a lone surrogate
    (`"\\ud800"`) or a NUL from a line no scan wrote, and such a name fails every use (its
    id, its path, the audit row) with a ValueError no caller expects."""
    if "\0" in name:
        return False
    if name.isascii():
        return True
    try:
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(slots=True)
class _Dir:
    """What the store knows of one dir's log: each name's latest record (read lazily, then
    kept in step by reading only what was appended since)."""

    path: Path
    log: Path
    offset: int = 0
    # Names whose latest record is `seen` -> sha256 (10,000 of them in a big dir: the strings
    # are the scan's own once a full scan has run, see end_scan), and the few others.
    seen: dict[str, str] = field(default_factory=dict)
    other: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> sha256, event
    shared: bool = False
    loaded: bool = False
    changes: list[tuple[float, str, str]] = field(default_factory=list)  # outside: t, kind, name
    alarmed_until: float = 0.0
    # The stamp (see VersionStore._stamp): None until looked at, False when none holds.
    stamp: "tuple[bytes, dict[str, str]] | bool | None" = None
    # The digest of the names a full scan found the table in step with (every memory and
    # note seen, nothing seen gone), as of `offset`; None once anything changed that.
    settled: bytes | None = None
    saved: object = None  # the stamp this process last wrote
    stamp_size: int = -1  # the log's size when the stamp was found to hold
    ino: int = 0  # the log's inode as last read (a compaction puts another in its place)
    # The outside changes that count (marked _COUNTS) the log holds within the alarm's
    # window, from any process, and how far the log was looked at for them (inode, offset):
    # each _alarm reads only what was appended since (VersionStore._logged_changes).
    recent: list[tuple[float, str, str]] = field(default_factory=list)
    recent_to: tuple[int, int] | None = None


@dataclass(slots=True)
class _Pending:
    """A version of an index file memoryd wrote, held until the next flush."""

    path: Path
    name: str
    data: bytes | tuple[bytes, ...]
    sha: str = ""
    ident: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) as written


class Session:
    """One scan's reads, recorded when the scan ends (see VersionStore.begin_scan)."""

    def __init__(self, store: "VersionStore", path: Path) -> None:
        self.store = store
        self.path = path
        # What each read found: name, sha256, size, kind (0 memory, 1 note), in four columns.
        # A tuple (and a size int) per read, made between the scan's own long-lived objects
        # and freed at its end, left the daemon's heap a few arenas bigger after a first
        # start; the names and sha256 strings are the scan's own.
        self.names: list[str] = []
        self.shas: list[str] = []
        self.sizes = array.array("q")
        self.kinds = bytearray()
        self.temps: list[tuple[str, str]] = []  # (temp name, sha) written, not yet renamed
        self._pending: set[str] = set()
        self.known: dict[str, str] | None = None
        # New objects held until the scan ends or PACK_FROM of them make a pack (their bytes
        # then go straight into it); past PACK_BUFFER bytes they are written as loose temps.
        # Their bytes are copied into one buffer (`spool`): each read's own bytes are freed
        # when the scan is done with them, as without the store.
        self.held: list[tuple[str, int, int]] = []  # sha, start in the spool, size
        self.spool = bytearray()
        self.pack: _PackWriter | None = None
        self.looked: tuple[bool, list[str]] | None = None  # any loose object; the packs
        self.lock_fd: int | None = None  # the store-wide lock, shared, from the first read

    def hold(self) -> None:
        """Take the store-wide lock shared (once a session): from the first "is it stored"
        to the log line naming it, no prune may drop what this scan relies on."""
        if self.lock_fd is None:
            self.lock_fd = self.store.lock_shared()

    def release(self) -> None:
        if self.lock_fd is not None:
            fd, self.lock_fd = self.lock_fd, None
            os.close(fd)

    def read(self, name: str, data: bytes, sha: str, kind: str) -> None:
        """scan.ScanSeen's: a scan read `name` and found it a memory or a note (`kind`) with
        these bytes. A problem is said once (the store's _guard, inline: 10,000 calls at a
        first start), and the scan goes on."""
        try:
            self._read(name, data, sha, kind)
        except OSError as error:
            self.store._say(self.store._problem(error))

    def end(
        self,
        dir_fd: int,
        files: Mapping[str, "scan.Scanned"],
        present: Set[str],
        before: Mapping[str, "scan.Scanned"],
        only: Set[str] | None,
    ) -> None:
        """scan.ScanSeen's: the scan is done; what it read and found is recorded."""
        store = self.store
        if getattr(store._scans, "session", None) is self:
            store._scans.session = None
        try:
            store._guard(store.end_scan, self, dir_fd, files, present, before, only)
        finally:  # a pack end_scan did not put in place (it failed) goes; the lock too
            self.abort()

    def _read(self, name: str, data: bytes, sha: str, kind: str) -> None:
        if self.known is None:
            self.hold()
            self.known = self.store.table(self.path).seen
        if self.known.get(name) == sha:
            return  # the version the store has (a restart without a parse cache)
        self.names.append(name)
        self.shas.append(sha)
        self.sizes.append(len(data))
        self.kinds.append(kind != "memory")
        if sha in self._pending:
            return
        self._pending.add(sha)
        if self.looked is None:  # once a scan: 10,000 listings of the packs cost 60 ms
            self.looked = (self.store.has_loose(), self.store.pack_names())
        # Nothing stored yet (a first start): no lookup can find it, so none is made.
        stored_any = self.looked[0] or self.looked[1] or self.store._temps
        if stored_any and self.store.has_object(sha, looked=self.looked):
            return
        pack = self.pack
        if pack is not None:
            pack.add(sha, data)
            return
        self.held.append((sha, len(self.spool), len(data)))
        self.spool += data
        if len(self.held) + len(self.temps) >= PACK_FROM:
            self.pack = _PackWriter(self.store)
            held, spool = self._take_held()
            with memoryview(spool) as view:
                for sha, start, size in held:
                    self.pack.add(sha, view[start : start + size])
        elif len(self.spool) > PACK_BUFFER:
            self.spill()

    def _take_held(self) -> tuple[list[tuple[str, int, int]], bytearray]:
        held, spool = self.held, self.spool
        self.held, self.spool = [], bytearray()
        return held, spool

    def spill(self) -> None:
        """Write the held objects as loose temps (put in place by VersionStore.commit_temps)."""
        held, spool = self._take_held()
        for sha, start, size in held:
            tmp = self.store.write_object_temp(sha, bytes(spool[start : start + size]), sync=False)
            if tmp is not None:
                self.temps.append((tmp, sha))

    def abort(self) -> None:
        """A scan that did not end (it raised): its pack's temp and its loose temps go,
        nothing was logged. Also the end of every session: the store-wide lock is let go."""
        self._take_held()
        if self.pack is not None:
            self.pack.abort()
            self.pack = None
        temps, self.temps = self.temps, []  # none left after an end: the store took them
        if temps:
            with contextlib.suppress(OSError):
                fd = self.store._objects_fd()
                try:
                    for tmp, _ in temps:
                        with contextlib.suppress(OSError):
                            os.unlink(tmp, dir_fd=fd)
                finally:
                    os.close(fd)
        self.release()


class _PackWriter:
    """One batch of objects in one file, `<state>/versions/packs/<id>.pack`:

        b"memoryd pack 1\n", each object's bytes one after the other, then one entry per
        object sorted by sha256 (_PACK_ENTRY: sha256, offset, size), then _PACK_TRAILER
        (magic, the count of entries, where they start).

    Written under a temp name; `commit` fsyncs it, renames it to the blake2b of its index and
    fsyncs the folder. A kill -9 leaves a whole pack under its name or a temp, never half a
    pack; the temp of a dead process is removed at the next start (no log line names what
    it held, and the files it copied were still in their dir: the next scan stores them)."""

    def __init__(self, store: "VersionStore") -> None:
        ensure_private_dir(store.packs)
        self.dir_fd = os.open(store.packs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.tmp = fsops.temp_name("pack")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd = os.open(self.tmp, flags, 0o600, dir_fd=self.dir_fd)
        except BaseException:
            os.close(self.dir_fd)
            raise
        self.offset = 0
        # Each object's sha256, offset and size, made into the pack's sorted index at commit
        # in one go (an entry packed and appended per object was ~1 µs of each read).
        self.shas: list[str] = []
        self.offsets = array.array("Q")
        self.sizes = array.array("Q")
        # Copied into one buffer, written when it is full: 10,000 writes one at a time cost
        # ~30 ms, and holding each object's own bytes until a batch was written kept them
        # (and the heap they were read into) alive after the scan was done with them.
        self.buf = bytearray(PACK_WRITE)
        self.fill = 0
        self.written_back = 0  # the bytes whose writeback _start_writeback has started
        # Whether a crash-loop test counts steps here: looked up once, not once an object
        # (the variable is set before the process starts, or not at all).
        self.crash_points = "MEMORYD_CRASH_AT" in os.environ
        self._write(_PACK_HEAD)

    def _write(self, data: bytes | memoryview) -> None:
        size = len(data)
        if self.fill + size > PACK_WRITE:
            self._drain()
        if size > PACK_WRITE:
            _write_view(self.fd, memoryview(data))
            self._writeback()
        else:
            self.buf[self.fill : self.fill + size] = data
            self.fill += size
        self.offset += size

    def _drain(self) -> None:
        if self.fill:
            with memoryview(self.buf) as view:
                _write_view(self.fd, view[: self.fill])
            self.fill = 0
            self._writeback()

    def _writeback(self) -> None:
        """Past PACK_WRITEBACK bytes written since the last time, start their writeback."""
        written = os.lseek(self.fd, 0, os.SEEK_CUR)
        if written - self.written_back >= PACK_WRITEBACK:
            _start_writeback(self.fd, self.written_back, written - self.written_back)
            self.written_back = written

    def add(self, sha: str, data: bytes | memoryview) -> None:
        size = len(data)
        self.shas.append(sha)
        self.offsets.append(self.offset)
        self.sizes.append(size)
        fill = self.fill
        if fill + size <= PACK_WRITE:  # _write's common case, inline (once per object)
            self.buf[fill : fill + size] = data
            self.fill = fill + size
            self.offset += size
        else:
            self._write(data)
        if self.crash_points:
            fsops.crash_point("versions.writing")

    def _index(self) -> bytes:
        """The entries (_PACK_ENTRY) sorted by sha256, built column by column: the sha256s
        as one fromhex, the offsets and sizes as big-endian arrays, each laid into its place
        of every entry with one strided copy a byte (48 in all, whatever the count), where
        one entry packed at a time cost ~0.5 µs each."""
        shas, count = self.shas, len(self.shas)
        order = sorted(range(count), key=shas.__getitem__)  # hex sorts as its bytes do
        keys = bytes.fromhex("".join([shas[i] for i in order]))
        offsets = array.array("Q", [self.offsets[i] for i in order])
        sizes = array.array("Q", [self.sizes[i] for i in order])
        if sys.byteorder == "little":
            offsets.byteswap()
            sizes.byteswap()
        out = bytearray(count * _PACK_ENTRY.size)
        step = _PACK_ENTRY.size
        for j in range(32):
            out[j::step] = keys[j::32]
        for column, at in ((offsets.tobytes(), 32), (sizes.tobytes(), 40)):
            for j in range(8):
                out[at + j :: step] = column[j::8]
        return bytes(out)

    def commit(self) -> str:
        """Put the pack in place durably; returns its name."""
        index = self._index()
        count = len(self.shas)
        try:
            self._write(index + _PACK_TRAILER.pack(_PACK_MAGIC, count, self.offset))
            self._drain()
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            name = hashlib.blake2b(index, digest_size=16).hexdigest() + ".pack"
            fsops.crash_point("versions.before_rename")
            os.rename(self.tmp, name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            fsops.fsync_dir(self.dir_fd)
        except BaseException:
            self.abort()
            raise
        os.close(self.dir_fd)
        self.dir_fd = -1
        return name

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.dir_fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dir_fd)
            os.close(self.dir_fd)
            self.dir_fd = -1


def _start_writeback(fd: int, start: int, length: int) -> None:
    """Ask the kernel to start writing this range of the file to disk, without waiting for it
    (Linux: POSIX_FADV_DONTNEED writes dirty pages back asynchronously, then drops the clean
    ones from the page cache). Only a head start: durability is still the fsync's, which
    then finds less to wait for. Where there is no such call, or it fails, nothing."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, start, length, os.POSIX_FADV_DONTNEED)


def _write_view(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _pack_trailer(fd: int) -> tuple[int, int]:
    """A pack's entry count and where its index starts; ValueError if it is not a pack."""
    size = os.fstat(fd).st_size
    trailer = os.pread(fd, _PACK_TRAILER.size, size - _PACK_TRAILER.size)
    if size < len(_PACK_HEAD) + _PACK_TRAILER.size or len(trailer) != _PACK_TRAILER.size:
        raise ValueError("not a pack")
    magic, count, start = _PACK_TRAILER.unpack(trailer)
    if magic != _PACK_MAGIC or start + count * _PACK_ENTRY.size + _PACK_TRAILER.size != size:
        raise ValueError("not a pack")
    return count, start


def _pack_find(fd: int, key: bytes) -> tuple[int, int] | None:
    """The offset and size of the object `key` (a sha256's 32 bytes) in a pack: a binary
    search of its index with one pread a step (no index held in memory)."""
    count, start = _pack_trailer(fd)
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        sha, offset, size = _PACK_ENTRY.unpack(
            os.pread(fd, _PACK_ENTRY.size, start + mid * _PACK_ENTRY.size)
        )
        if sha == key:
            return (offset, size) if offset + size <= start else None
        if sha < key:
            lo = mid + 1
        else:
            hi = mid
    return None


def _pack_entries(fd: int) -> list[tuple[str, int, int]]:
    """Every object of a pack: sha256 (hex), offset, size. An entry whose bytes would lie
    outside the pack's objects (a damaged or forged size or offset) is left out: its object
    cannot be read back whole anyway, and trusting its size would make the store look
    bigger than it is (a prune would then drop versions still within retention)."""
    count, start = _pack_trailer(fd)
    index = os.pread(fd, count * _PACK_ENTRY.size, start)
    return [
        (sha.hex(), offset, size)
        for sha, offset, size in _PACK_ENTRY.iter_unpack(index)
        if len(_PACK_HEAD) <= offset and offset + size <= start and size <= OBJECT_MAX
    ]


class VersionStore:
    """The version store of one state dir (see the module docstring)."""

    def __init__(
        self,
        state_dir: Path,
        *,
        keep_days: int = 30,
        max_bytes: int = 512 << 20,
        alarm_files: int = 5,
        alarm_window: float = 120.0,
        clock: Callable[[], float] = time.time,
        audit: AuditWrite | None = None,
        boot: "Callable[[], witness.Boot] | None" = None,
        state: StateStore | None = None,
    ) -> None:
        self.state_dir = state_dir
        # The boot clock and the state store behind the clock check retention rests on
        # (`witness`): the Runtime's, else this machine's boot clock and a store of its own.
        self.boot = boot
        self.state = state
        self.root = state_dir / "versions"
        self.objects = self.root / "objects"
        self.packs = self.root / "packs"
        self.logs = self.root / "logs"
        self.keep_days = keep_days
        self.max_bytes = max_bytes
        self.alarm_files = alarm_files
        self.alarm_window = alarm_window
        self.clock = clock
        self.audit = audit
        self._dirs: dict[Path, _Dir] = {}
        self._by_id: dict[tuple[int, int], Path] = {}  # a dir's (device, inode) -> its path
        self._pending: dict[tuple[Path, str], _Pending] = {}
        self._index_sha: dict[tuple[Path, str], str] = {}  # the index version last recorded
        self._lock = threading.RLock()
        self._said: set[str] = set()
        # The daemon's: a pass's few new objects are renamed into place (fsync, rename, fsync
        # of the folder: ~0.5 ms, ms under load) at the next flush, off the pass's path to the
        # index; at once when the same scan finds a file gone.
        self.defer = False
        self._temps: list[tuple[str, str]] = []
        self.pruned_at = -float("inf")  # when the daemon's store last pruned (see flush)
        self._scans = threading.local()  # the session of the scan running on each thread

    def observe_clock(self, wall: float) -> "witness.Clock":
        """A reading of the clocks retention rests on (shared with the trash's)."""
        if self.boot is None:
            from memoryd.runtime import boot_clock

            self.boot = boot_clock
        if self.state is None:
            self.state = StateStore(self.state_dir)
        return witness.observe(self.state, self.state_dir, wall, self.boot())

    # --- the store-wide lock (LOCK_NAME) -------------------------------------------------------
    def _lock_file(self) -> int:
        ensure_private_dir(self.root)
        return os.open(
            self.root / LOCK_NAME,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
        )

    def lock_shared(self) -> int:
        """The store-wide lock taken shared (waits while a prune runs); close the fd to let go."""
        fd = self._lock_file()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A writer's hold of the store-wide lock, around "stored?" → store → log line."""
        fd = self.lock_shared()
        try:
            yield
        finally:
            os.close(fd)

    def lock_exclusive(self) -> int | None:
        """The store-wide lock taken exclusive, or None at once while any writer (a scan in
        this process or another) holds it: a prune then waits for its next turn."""
        fd = self._lock_file()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    # --- objects -------------------------------------------------------------------------------
    def _objects_fd(self) -> int:
        ensure_private_dir(self.objects)
        return os.open(self.objects, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def has_loose(self) -> bool:
        """Whether the objects folder holds any object (a temp is none). An empty one (the
        daemon's prune at its start makes it) is no reason for a first start to stat a
        missing object for each of its 10,000 reads (~40 ms)."""
        with contextlib.suppress(OSError), os.scandir(self.objects) as entries:
            return any(not entry.name.startswith(".") for entry in entries)
        return False

    def has_object(self, sha: str, *, looked: tuple[bool, list[str]] | None = None) -> bool:
        """Whether `sha` is stored; `looked`: whether the objects folder holds any object
        and the packs, as a scan found them when it began (it asks for each file it reads)."""
        loose, packs = looked if looked is not None else (True, None)
        return (
            (loose and self._loose(sha) is not None)
            or any(t[1] == sha for t in self._temps)
            or self._packed(sha, packs) is not None
        )

    def _loose(self, sha: str) -> int | None:
        """The size of `sha`'s loose object; None when there is none, or only something
        else under its name (a FIFO, a link, a folder: never taken for its bytes, so the
        next read of them stores them again)."""
        try:
            st = os.lstat(self.objects / sha)
        except (OSError, ValueError):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def _stored_size(self, sha: str) -> int:
        """The size of a stored version (0 when the store holds none)."""
        size = self._loose(sha)
        if size is None:
            packed = self._packed(sha)
            size = packed[2] if packed is not None else 0
        return size

    def pack_names(self) -> list[str]:
        try:
            names = os.listdir(self.packs)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(".pack") and not n.startswith("."))

    def _packed(self, sha: str, names: list[str] | None = None) -> tuple[str, int, int] | None:
        """The pack holding `sha`, and where in it: (pack name, offset, size)."""
        names = self.pack_names() if names is None else names
        if not names:
            return None
        try:
            key = bytes.fromhex(sha)
        except ValueError:
            return None
        for name in names:
            with contextlib.suppress(OSError, ValueError):
                fd = self._open_pack(name)
                try:
                    found = _pack_find(fd, key)
                except ValueError:
                    self._bad_pack(name)
                    raise
                finally:
                    os.close(fd)
                if found is not None:
                    return name, *found
        return None

    def _bad_pack(self, name: str, why: str = "not a whole pack (truncated or damaged)") -> None:
        self._say(
            f"{self.packs / name}: {why}; the versions only it held cannot be restored (the "
            "daemon stores current ones again from their files); move it aside"
        )

    def _open_pack(self, name: str) -> int:
        """A pack opened to read; a link, a FIFO or a folder in its place is said, and raised."""
        try:
            return open_regular(self.packs / name, follow=False)[0]
        except NotRegularFile as error:
            self._bad_pack(name, f"{error.what}, not a regular file")
            raise

    def object_sizes(self) -> dict[str, int]:
        """Every stored object (loose or packed): sha256 -> size."""
        sizes: dict[str, int] = {}
        with contextlib.suppress(OSError), os.scandir(self.objects) as entries:
            for entry in entries:
                if not entry.name.startswith("."):
                    with contextlib.suppress(OSError):
                        if entry.is_file(follow_symlinks=False):  # else it holds no bytes
                            sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
        for name in self.pack_names():
            with contextlib.suppress(OSError, ValueError):
                fd = self._open_pack(name)
                try:
                    for sha, _, size in _pack_entries(fd):
                        sizes[sha] = size
                except ValueError:
                    self._bad_pack(name)
                    raise
                finally:
                    os.close(fd)
        return sizes

    def write_object_temp(
        self, sha: str, data: bytes | Sequence[bytes], *, sync: bool, again: bool = False
    ) -> str | None:
        """Write an object's bytes under a temp name (None when it is stored already, unless
        `again`: what is stored under its name is damaged)."""
        if not again and self.has_object(sha):
            return None
        fd = self._objects_fd()
        try:
            return _write_temp(fd, sha, data, sync=sync)
        finally:
            os.close(fd)

    def commit_temps(self, temps: Sequence[tuple[str, str]], synced: bool) -> None:
        """Rename written temps to their objects' names, durably: one syncfs for a batch
        (written unsynced), else an fsync each, then the folder."""
        if not temps:
            return
        fd = self._objects_fd()
        try:
            if not synced:
                syncfs = _syncfs() if len(temps) >= BATCH_SYNC_FROM else None
                if syncfs is not None:
                    syncfs(fd)
                else:
                    for tmp, _ in temps:
                        with contextlib.suppress(OSError):
                            _fsync_at(fd, tmp)
            fsops.crash_point("versions.before_rename")
            for tmp, sha in temps:
                try:
                    os.rename(tmp, sha, src_dir_fd=fd, dst_dir_fd=fd)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
            fsops.fsync_dir(fd)
        finally:
            os.close(fd)

    def store_object(self, data: bytes | Sequence[bytes], sha: str, *, again: bool = False) -> None:
        tmp = self.write_object_temp(sha, data, sync=True, again=again)
        if tmp is not None:
            self.commit_temps([(tmp, sha)], synced=True)

    def drop_objects(self, doomed: Set[str]) -> set[str]:
        """Remove these objects' bytes: their loose files unlinked, the packs holding any
        written anew without them (the caller holds the store's lock); the shas whose bytes
        went. A problem is said once and leaves the rest as they were (`_guard`)."""
        dropped: set[str] = set()
        if not doomed:
            return dropped
        with contextlib.suppress(OSError):
            fd = self._objects_fd()
            try:
                for sha in doomed:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(sha, dir_fd=fd)
                        dropped.add(sha)
                fsops.fsync_dir(fd)
            finally:
                os.close(fd)
        return dropped | self._guarded_repack(doomed)

    def _guarded_repack(self, doomed: Set[str]) -> set[str]:
        out: set[str] = set()
        self._guard(lambda: out.update(self.repack(doomed)))
        return out

    def repack(self, doomed: Set[str]) -> set[str]:
        """Drop `doomed` objects from the packs: a pack holding any is written anew without
        them (a new pack put in place durably, then the old one unlinked: a kill -9 in
        between leaves both, each whole); one holding only doomed objects is unlinked.
        Returns the shas dropped."""
        dropped: set[str] = set()
        for name in self.pack_names():
            try:
                fd = self._open_pack(name)
            except OSError:
                continue
            try:
                try:
                    entries = _pack_entries(fd)
                except ValueError:
                    continue  # not a pack of ours: left alone
                if not any(sha in doomed for sha, _, _ in entries):
                    continue
                kept = [e for e in entries if e[0] not in doomed]
                if kept:
                    writer = _PackWriter(self)
                    try:
                        for sha, offset, size in sorted(kept, key=lambda e: e[1]):
                            writer.add(sha, os.pread(fd, size, offset))
                    except BaseException:
                        writer.abort()
                        raise
                    writer.commit()
            finally:
                os.close(fd)
            dir_fd = os.open(self.packs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.unlink(name, dir_fd=dir_fd)
                fsops.fsync_dir(dir_fd)
            finally:
                os.close(dir_fd)
            dropped.update(sha for sha, _, _ in entries if sha in doomed)
        return dropped

    def read_object(self, sha: str) -> bytes | None:
        """A stored version's bytes, checked against their sha256; None if missing or damaged."""
        try:
            fd, st = open_regular(self.objects / sha, follow=False)
        except OSError:
            packed = self._read_packed(sha)  # b"" is an empty file's version, not a miss
            return packed if packed is not None else self.read_temp(sha)
        try:
            if st.st_size > OBJECT_MAX:
                return None
            data = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() == sha:
            return data
        self._say(
            f"{self.objects / sha}: its bytes are not the version its name is the sha256 of "
            "(damaged): never given back; move it aside"
        )
        return self._read_packed(sha)

    def _object_temps(self) -> list[tuple[str, str]]:
        """Each temp in the objects folder (written, not put in place yet), with the sha256
        its name carries: `.<sha256>.memoryd-<pid>-<hex>.tmp` (fsops.temp_name)."""
        try:
            names = os.listdir(self.objects)
        except OSError:
            return []
        return [(n, n[1:].partition(fsops.TEMP_MARK)[0]) for n in names if fsops.is_own_temp(n)]

    def temp_shas(self) -> set[str]:
        """The sha256s of the objects written under a temp name and not put in place yet (by
        name alone: read_temp checks the bytes)."""
        return {sha for _, sha in self._object_temps()}

    def read_temp(self, sha: str) -> bytes | None:
        """`sha`'s bytes from a whole temp not put in place yet: the daemon renames a pass's
        new objects into place at its next heartbeat, and until then a command's `history
        --restore` or `trash restore` found no bytes (and `history` said them pruned)."""
        names = [name for name, carried in self._object_temps() if carried == sha]
        if not names:
            return None
        fd = self._objects_fd()
        try:
            for name in names:
                data = _bytes_if(fd, name, sha)
                if data is not None:
                    return data
        finally:
            os.close(fd)
        return None

    def _read_packed(self, sha: str) -> bytes | None:
        where = self._packed(sha)
        if where is None or where[2] > OBJECT_MAX:
            return None
        name, offset, size = where
        try:
            fd = self._open_pack(name)
        except OSError:
            return None
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() == sha:
            return data
        self._say(
            f"{self.packs / name}: the bytes its index gives for {sha} are not that version "
            "(damaged): never given back; move it aside"
        )
        return None

    def recover_temps(self) -> list[str]:
        """Temps a killed memoryd left in the objects folder: each one whose bytes are whole
        (their sha256 is the one its name carries) is put in place, the rest removed. A
        killed daemon's last few versions were written but not yet renamed (see `defer`).
        Returns the shas put in place."""
        put: list[str] = []
        _remove_dead_temps(self.packs)  # a pack's temp: no log line names what it holds
        _remove_dead_temps(self.logs)  # a compaction's: the old log is still in place
        temps = self._object_temps()
        if not temps:
            return put
        fd = self._objects_fd()
        try:
            for name, sha in temps:
                pid = fsops.temp_owner(name)
                if pid is None or pid == os.getpid() or fsops._alive(pid):
                    continue
                data = _bytes_if(fd, name, sha)
                with contextlib.suppress(OSError):
                    if data is not None:
                        _fsync_at(fd, name)
                        os.rename(name, sha, src_dir_fd=fd, dst_dir_fd=fd)
                        put.append(sha)
                    else:
                        os.unlink(name, dir_fd=fd)
            fsops.fsync_dir(fd)
        finally:
            os.close(fd)
        return put

    # --- logs ----------------------------------------------------------------------------------
    def log_path(self, path: Path) -> Path:
        return self.logs / f"{dir_key(path)}.jsonl"

    def _log_replaced(self, path: Path) -> None:
        """This process put a compacted log in place of the dir's: what it had read of the
        old one is void. Where it had read to is an inode and an offset, and an inode number
        comes back for a later log (two compactions between two looks landed on the first
        one's), so reading on from that offset in another file would miss lines. The next
        look reads the new log from its start; this process's own alarm count is kept."""
        with self._lock:
            d = self._dirs.get(path)
            if d is not None:
                d.offset, d.ino, d.seen, d.other = 0, 0, {}, {}
                d.shared = d.loaded = False
                d.stamp = d.settled = d.recent_to = None

    def _dir(self, path: Path) -> _Dir:
        d = self._dirs.get(path)
        if d is None:
            d = self._dirs[path] = _Dir(path, self.log_path(path))
        return d

    def table(self, path: Path) -> _Dir:
        """The dir's table, in step with its log."""
        with self._lock:
            d = self._dir(path)
            self._catch_up(d)
            return d

    def _catch_up(self, d: _Dir) -> None:
        """Read what was appended to the dir's log since (by any process)."""
        try:
            fd, st = open_regular(d.log, follow=False)
        except FileNotFoundError:
            d.loaded = True
            return
        except OSError as error:
            self._say(self._problem(error, d.log))
            d.loaded = True
            return
        try:
            if st.st_size < d.offset or (d.ino and st.st_ino != d.ino):
                d.offset, d.seen, d.other = 0, {}, {}  # compacted by a prune: from the start
                d.shared = False  # the new table's strings are shared again at the next scan
            d.ino = st.st_ino
            if st.st_size == d.offset:
                d.loaded = True
                return
            whole = d.offset == 0  # this process's first read (or one after a prune)
            if whole and st.st_size >= TABLE_MIN_BYTES:
                self._from_table(d, fd, st.st_size)
            start = d.offset
            os.lseek(fd, d.offset, os.SEEK_SET)
            reader = BoundedLines(fd, max_line=LOG_LINE_MAX)
            lines = [raw for _, raw in reader if raw is not None]
            # Up to the last whole line, an over-long one too (skipped, never parsed): were it
            # not counted, the next read would start inside the log's lines, and this
            # process's offset never again be the log's end (no stamp, every read again).
            consumed = start + reader.whole
            try:  # one parse of the whole tail: 10,000 lines one by one cost 5x more
                rows = safejson.loads(b"[" + b",".join(lines) + b"]")
            except (ValueError, RecursionError):  # a line nested past json's depth
                rows = []
                for raw in lines:
                    with contextlib.suppress(ValueError, RecursionError):
                        rows.append(safejson.loads(raw))
            for row in rows:
                if _plain(row):  # the first line (the dir) and anything else: skipped
                    _set(d, row["f"], row["h"], row["e"])
            if not (whole and st.st_size == d.stamp_size):
                d.settled = None  # lines another process wrote: the dir may be otherwise
            d.offset = consumed
            d.loaded = True
            if whole and consumed == st.st_size and consumed - start >= TABLE_MIN_BYTES:
                self._save_table(d, fd)
        finally:
            os.close(fd)

    # A dir's table as of a prefix of its log, kept under the digest of that prefix's bytes:
    # a one-shot command (`memoryd index`) would otherwise parse the whole log (~20 ms at
    # 10,000 files) to learn each name's latest record. Any other log (compacted, rewritten,
    # torn) has another digest, and is read from the start as before.
    def _table_path(self, d: _Dir) -> Path:
        return self.root / "tables" / f"{dir_key(d.path)}.table"

    def _read_cache(self, path: Path, limit: int) -> bytes | None:
        """A table's or stamp's bytes; None when it is missing or will not be read: a FIFO
        (a plain read waited on it for ever: a daemon start or a command hung), a link, a
        device, or past `limit` bytes. Said, but for its absence: a cache's save puts a
        regular file in its place."""
        try:
            return read_bounded(path, limit, follow=False)
        except (NotRegularFile, FileTooLarge) as error:
            self._say(f"{error}: not read (a cache of the version log; memoryd writes it anew)")
        except OSError:
            pass  # missing, or its folder unusable (said where the store writes)
        return None

    def _from_table(self, d: _Dir, fd: int, size: int) -> None:
        data = self._read_cache(self._table_path(d), TABLE_MAX)
        if data is None:
            return
        payload = unseal(_TABLE_HEADER, data)
        if not (isinstance(payload, tuple) and len(payload) == 4):
            return
        offset, digest, seen, other = payload
        if not (isinstance(offset, int) and 0 < offset <= size and isinstance(seen, dict)
                and isinstance(other, dict)):  # fmt: skip
            return
        # Every name and sha256 a string, every other record a (sha256, event) pair: a table
        # written otherwise (by hand, by another program: its seal is a CRC) would have the
        # scans log non-strings, or raise (~1 ms at 10,000 names).
        if not (
            all(type(k) is str and type(v) is str for k, v in seen.items())
            and all(
                type(k) is str and type(v) is tuple and len(v) == 2 and type(v[0]) is str
                and v[1] in _EVENTS
                for k, v in other.items()
            )
        ):  # fmt: skip
            self._say(f"{self._table_path(d)}: not a table memoryd wrote; read the log instead")
            return
        prefix = os.pread(fd, offset, 0)
        if len(prefix) == offset and hashlib.blake2b(prefix, digest_size=16).digest() == digest:
            d.offset, d.seen, d.other = offset, seen, other

    def _save_table(self, d: _Dir, fd: int) -> None:
        from memoryd.cwd_cache import LOOKING_ONLY

        if LOOKING_ONLY.get():  # a command that promised to write nothing
            return
        prefix = os.pread(fd, d.offset, 0)
        if len(prefix) != d.offset:
            return
        digest = hashlib.blake2b(prefix, digest_size=16).digest()
        data = seal(_TABLE_HEADER, (d.offset, digest, d.seen, d.other))
        with contextlib.suppress(OSError):  # a cache: the log is the record
            ensure_private_dir(self._table_path(d).parent)
            fsops.write_private(self._table_path(d), data, durable=False)

    # A dir's stamp: that a full scan found the log in step with the dir (every memory seen,
    # nothing seen gone) when the log was as it is now (inode, size, digest of its tail), and
    # the index versions it names. While it holds, a scan that read nothing and found the same
    # names has nothing to record, and a one-shot command never loads the table (~15 ms).
    def _stamp_path(self, d: _Dir) -> Path:
        return self.root / "tables" / f"{dir_key(d.path)}.stamp"

    @staticmethod
    def _log_mark(log: Path) -> tuple[int, int, bytes] | None:
        try:
            fd, st = open_regular(log, follow=False)
        except OSError:
            return None
        try:
            tail = os.pread(fd, STAMP_TAIL, max(0, st.st_size - STAMP_TAIL))
        finally:
            os.close(fd)
        return st.st_ino, st.st_size, hashlib.blake2b(tail, digest_size=16).digest()

    def _stamp(self, d: _Dir) -> tuple[bytes, dict[str, str]] | None:
        """The dir's stamp while it holds (nothing appended to the log since, by anyone)."""
        if d.stamp is None:
            d.stamp = False
            with contextlib.suppress(OSError):
                data = self._read_cache(self._stamp_path(d), STAMP_MAX)
                payload = unseal(_STAMP_HEADER, data) if data is not None else None
                if isinstance(payload, tuple) and len(payload) == 3:
                    mark, names, index = payload
                    if (isinstance(names, bytes) and isinstance(index, dict)
                            and mark == self._log_mark(d.log)):  # fmt: skip
                        d.stamp = (names, index)
                        d.stamp_size = mark[1]
        return d.stamp if isinstance(d.stamp, tuple) else None

    def _save_stamp(self, d: _Dir) -> None:
        from memoryd.cwd_cache import LOOKING_ONLY

        if d.settled is None or not d.loaded or LOOKING_ONLY.get():
            return
        mark = self._log_mark(d.log)
        if mark is None or mark[1] != d.offset:  # another process appended since: not ours
            return
        index = {n: d.seen[n] for n in INDEX_FILES if n in d.seen}
        payload = (mark, d.settled, index)
        if payload != d.saved:
            with contextlib.suppress(OSError):  # a shortcut: without it the table is read
                ensure_private_dir(self._stamp_path(d).parent)
                fsops.write_private(self._stamp_path(d), seal(_STAMP_HEADER, payload),
                                    durable=False)  # fmt: skip
                d.saved = payload

    @staticmethod
    def latest(d: _Dir, name: str) -> tuple[str, str] | None:
        """The sha256 and event of `name`'s latest record."""
        sha = d.seen.get(name)
        return (sha, "seen") if sha is not None else d.other.get(name)

    def _append(self, d: _Dir, records: Sequence[_Row]) -> None:
        if not records:
            return
        ensure_private_dir(self.logs)
        fd = _open_log(d.log)
        try:
            st = os.fstat(fd)
            head = b""
            if st.st_size == 0:
                head = json.dumps({"dir": str(d.path)}, ensure_ascii=True).encode() + b"\n"
            elif os.pread(fd, 1, st.st_size - 1) != b"\n":
                head = b"\n"  # after a torn line: ours starts a line of its own
            # Through to the kernel (a killed process loses nothing), not fsynced: the
            # objects it names are, and a power cut then loses at most these lines. Written
            # a piece of whole lines at a time: 10,000 lines held at once (and their join)
            # left the daemon's heap megabytes bigger after its first start.
            written = 0
            for start in range(0, len(records), LOG_ROWS):
                piece = _lines(records[start : start + LOG_ROWS])
                if start == 0 and head:
                    piece = head + piece
                fsops._write_all(fd, piece)
                written += len(piece)
            # Lines the alarm need not read back: this process's own, whose changes that count
            # are in d.changes, appended right where it had looked up to (or to a new log),
            # with no other process's lines between.
            looked = d.recent_to == (st.st_ino, st.st_size) or st.st_size == 0
            if looked and os.fstat(fd).st_size == st.st_size + written:
                d.recent_to = (st.st_ino, st.st_size + written)
        finally:
            os.close(fd)
        same = st.st_ino == d.ino or st.st_size == 0  # the log we read (or a new one)
        if st.st_size == d.offset and d.loaded and same:
            d.ino = st.st_ino
            seen, other = d.seen, d.other
            for r in records:  # applied as they are: their strings stay the caller's
                if r[4] == "seen":  # _set's, inline
                    seen[r[1]] = r[2]
                    if other:
                        other.pop(r[1], None)
                else:
                    _set(d, r[1], r[2], r[4])
            d.offset += written
        else:
            self._catch_up(d)  # another process appended since: read it all in order

    def record(
        self, path: Path, name: str, sha: str, size: int, event: str, by: str, **extra: Any
    ) -> None:
        """Append one event for `name` in the dir at `path` (see the module docstring)."""
        with self._lock:
            d = self._dir(path)
            if not d.loaded:
                self._catch_up(d)
            self._append(d, [(self.clock(), name, sha, size, event, by, extra or None)])
            d.settled = None

    def records(self, path: Path) -> list[Record]:
        """Every valid record of a dir's log, oldest first."""
        try:
            fd, _ = open_regular(self.log_path(path), follow=False)
        except FileNotFoundError:
            return []
        except OSError as error:
            self._say(self._problem(error, self.log_path(path)))
            return []
        from memoryd.indexing.scan import skip_reason

        out = []
        try:
            for _, raw in BoundedLines(fd, max_line=LOG_LINE_MAX):
                if raw is None:
                    continue
                with contextlib.suppress(ValueError, RecursionError):
                    rec = _record(safejson.loads(raw), skip_reason)
                    if rec is not None:
                        out.append(rec)
        finally:
            os.close(fd)
        return out

    def known_dirs(self) -> list[Path]:
        """The memory dirs the store holds versions of (from each log's first line). A first
        line naming a dir whose log that file is not (a relative path, a NUL, a lone
        surrogate no path has, any other dir) names none: each use of it would read another
        log, or fail (a lone surrogate made `trash list` and the daemon's prune die)."""
        out = []
        with contextlib.suppress(OSError):
            for log in sorted(self.logs.glob("*.jsonl")):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError, RecursionError):
                    fd, _ = open_regular(log, follow=False)
                    try:
                        first = os.read(fd, 8192).split(b"\n", 1)[0]
                    finally:
                        os.close(fd)
                    named = safejson.loads(first)["dir"]
                    if (
                        isinstance(named, str)
                        and named.startswith("/")
                        and _entry_name(named)
                        and log.name == f"{dir_key(Path(named))}.jsonl"
                    ):
                        out.append(Path(named))
        return out

    # --- what memoryd does itself ----------------------------------------------------------------
    def intend_restore(self, path: Path, name: str, data: bytes) -> str:
        """Store `data` and say that memoryd is about to write it as `name` (so that reading
        it back is memoryd's doing, not another process's). Returns its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        with self.writing():
            self.store_object(data, sha)
            self.record(path, name, sha, len(data), "restoring", MEMORYD)
        return sha

    def restore_done(self, path: Path, name: str, sha: str, size: int) -> None:
        """The restore `intend_restore` announced is written: those bytes are the name's
        version now, as a scan reading them back would record. Until one did, the name's
        last record was the restoring line, and a scan finding the file deleted meanwhile
        recorded nothing (only a name the log holds as there can be gone)."""
        self._guard(self.record, path, name, sha, size, "seen", MEMORYD)

    def restore_failed(
        self, path: Path, name: str, sha: str, size: int, current: tuple[str, int] | None
    ) -> None:
        """The restore `intend_restore` announced wrote nothing: the name's latest record is
        made what the dir holds again, the version now there (`current`: sha256, size) or
        none. Left at `restoring`, the name would be missing from the table's seen files,
        and a partial scan would never notice that file's deletion."""
        if current is not None:
            self.record(path, name, current[0], current[1], "seen", MEMORYD)
        else:
            self.record(path, name, sha, size, "gone", MEMORYD)

    def vanished(self, path: Path, items: Sequence["Deleted"]) -> None:
        """The dir at `path` is gone and a restore is about to make it again: its files the
        log still holds as there (`deleted`'s `vanished` items) are recorded gone first,
        under the ids `trash list` gave them (a scan of the new dir would record them gone
        under new ids)."""
        now = self.clock()
        # Gone now (retention runs from here, as for any deletion memoryd finds), under the
        # id made from when each was last seen (`id_t`).
        rows: list[_Row] = [
            (now, i.name, i.sha256, i.size, "gone", OTHER, {"dir_gone": True, "id_t": i.when})
            for i in items
        ]
        with self._lock:
            d = self._dir(path)
            self._catch_up(d)
            # The index files went with it (they are never listed): said so here, not by the
            # first scan of the new dir as a deletion of now.
            for name in INDEX_FILES:
                if name in d.seen:
                    rows.append((now, name, d.seen[name], 0, "gone", OTHER, {"dir_gone": True}))
            self._append(d, rows)
            d.settled = None

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
        in the dir's ledger of own writes (`own/<dir key>.own`, one `<sha256> <name>` line
        appended) before the swap, so that any memoryd process reading them takes them for
        memoryd's (`_own_wrote`), whenever this one stores them. The ledger is no log line:
        the log's stamp still holds. A failed append is said once; the write is still
        recorded as memoryd's at this process's flush."""
        if name in INDEX_FILES:
            self._guard(self._own_append, dir_path, f"{sha} {name}\n".encode())

    def _own_path(self, path: Path) -> Path:
        return self.root / "own" / f"{dir_key(path)}.own"

    def _own_append(self, path: Path, line: bytes) -> None:
        ledger = self._own_path(path)
        ensure_private_dir(ledger.parent)
        fd = _open_log(ledger)  # locked; reopened if a cut put another file in its place
        try:
            size = os.fstat(fd).st_size
            if size + len(line) <= OWN_MAX:
                fsops._write_all(fd, line)
                return
            kept = os.pread(fd, OWN_KEEP, size - OWN_KEEP)
            kept = kept[kept.find(b"\n") + 1 :]  # whole lines only
            fsops.write_private(ledger, kept + line, durable=False)
        finally:
            os.close(fd)

    def _own_wrote(self, path: Path, name: str, sha: str) -> bool:
        """Whether a memoryd process wrote these bytes as `name` in the dir at `path` (a
        line of its ledger of own writes names them)."""
        try:
            data = read_bounded(self._own_path(path), 2 * OWN_MAX, follow=False)
        except FileNotFoundError:
            return False
        except OSError as error:  # a FIFO, a link, a folder in its place: said once
            self._say(self._problem(error, self._own_path(path)))
            return False
        return (b"\n" + f"{sha} {name}\n".encode()) in b"\n" + data

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

    def commit_pending(self) -> None:
        temps, self._temps = self._temps, []
        self.commit_temps(temps, synced=False)

    def flush(self) -> None:
        """Store the index versions memoryd wrote since the last flush, and put the objects
        scans wrote since in place; the daemon's store also prunes (and compacts the logs)
        when PRUNE_EVERY has passed since it last did, by its clock."""
        with self._lock:
            self._guard(self.commit_pending)
            pending, self._pending = self._pending, {}
            for item in pending.values():
                self._guard(self._flush_one, item, True)
            if self.defer and self.clock() - self.pruned_at >= PRUNE_EVERY:
                done: list[PruneResult] = []
                self._guard(lambda: done.append(prune(self)))
                if not (done and done[0].busy):  # a writer held the store: the next flush
                    self.pruned_at = self.clock()
            for d in self._dirs.values():
                self._save_stamp(d)

    def _flush_one(self, item: _Pending, current_only: bool = False) -> None:
        """Record memoryd's own write. `current_only` (a flush, not a read of the file): only
        while the file is still the one written. One replaced since (by another memoryd
        process, or a person) is not recorded after what replaced it: the log would say
        memoryd's older version is the file's latest, out of time order, and the next
        read of the file would be taken for a rewrite."""
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
        files: Mapping[str, "scan.Scanned"],
        present: Set[str],
        before: Mapping[str, "scan.Scanned"],
        only: Set[str] | None,
    ) -> None:
        """Record what one scan found: new versions, and files gone since. The session holds
        the store-wide lock from here (or its first read) until its `abort`, which
        Session.end calls after this in every case."""
        with self._lock:
            d = self._dir(session.path)
            if not session.names and not d.loaded and self._unchanged(d, present, only):
                stamp = self._stamp(d)
                if only is None and stamp is not None:
                    d.settled = stamp[0]
                return  # the stamp holds: nothing new, nothing gone (the table not read)
            session.hold()
            self._catch_up(d)
            if only is None and before:  # with no cache (a first start), every file was read
                self._backfill(session, dir_fd, files, d)
            session.spill()
            if session.pack is not None:  # in place before the log names any of its objects
                session.pack.commit()
                session.pack = None
            handed, session.temps = session.temps, []  # the store's now (never the abort's)
            self._temps.extend(handed)  # put in place by commit_pending
            if not self.defer or len(self._temps) >= BATCH_SYNC_FROM:
                self.commit_pending()
            now = self.clock()
            rows: list[_Row] = []
            told: list[tuple[str, str, str, str, int, bool]] = []  # said once the log has them
            seen, other = d.seen, d.other
            # The latest record of each name read (VersionStore.latest, inline: 10,000 reads
            # at a first start): seen with these bytes (nothing to add), seen with others (a
            # rewrite), or none or another event (restoring these bytes: memoryd's own).
            for name, sha, size, note in zip(
                session.names, session.shas, session.sizes, session.kinds, strict=True
            ):
                had = seen.get(name)
                if had == sha:
                    continue
                by = OTHER
                if had is None:
                    d.settled = None  # a name the table now holds as seen
                    latest = other.get(name)
                    if latest is not None and latest == (sha, "restoring"):
                        by = MEMORYD
                extra = None
                if had is not None:
                    prev = before.get(name)
                    counts = not note or (prev is not None and prev.kind == "memory")
                    told.append(("rewritten", name, sha, had, size, counts))
                    extra = _COUNTS if counts else None
                rows.append((now, name, sha, size, "seen", by, extra))
            if only is None:
                gone = [n for n in d.seen if n not in present]
            else:
                gone = [n for n in only if n in d.seen and n not in present]
            self._share(d, files)  # a partial scan's `files` are the whole dir's too
            arrived: dict[str, str] = {}  # sha -> a name it came under (a rename's other half)
            if gone:
                self.commit_pending()  # a deletion's last version is on disk before it is said
                for r in rows:
                    arrived.setdefault(r[2], r[1])
            for name in sorted(gone):
                sha = d.seen[name]
                prev = before.get(name)
                # An index file is in no scan's files: its size is its stored version's.
                size = prev.size if prev is not None else self._stored_size(sha)
                extra = None
                if sha in arrived:
                    extra = {"to": arrived[sha]}  # renamed: nothing was lost
                else:
                    # Memories count toward the alarm, never the index files memoryd rebuilds.
                    counts = name not in INDEX_FILES and (prev is None or prev.kind == "memory")
                    told.append(("deleted", name, sha, "", size, counts))
                    extra = _COUNTS if counts else None
                rows.append((now, name, sha, size, "gone", OTHER, extra))
            made, at = self._git_made(d, told)
            if made:  # not marked to count toward an alarm, nor listed as deleted (`git`)
                rows = [
                    (t, f, h, n, e, by, {"git": at}) if f in made else (t, f, h, n, e, by, x)
                    for t, f, h, n, e, by, x in rows
                ]
            self._append(d, rows)
            if gone:
                d.settled = None
            if only is None and all(
                n in d.seen for n, info in files.items() if info.kind in ("memory", "note")
            ):
                d.settled = _names_digest(present)
            told = self._git_said(d, told, made, at)
            for kind, name, sha, prev_sha, size, counts in told:
                self._outside(d, now, kind, name, sha, prev_sha, size, counts)
            if any(t[5] for t in told):
                self._alarm(d, now)

    def _git_made(
        self, d: _Dir, told: list[tuple[str, str, str, str, int, bool]]
    ) -> tuple[set[str], str]:
        """The names of the outside changes a git operation made (a checkout, merge, stash
        or pull: their bytes are a recent commit's), and the branch or commit checked out."""
        if not told or gitwork.work_tree(d.path) is None:
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
        return gitwork.git_made(d.path, changes)

    def _git_said(
        self, d: _Dir, told: list[tuple[str, str, str, str, int, bool]], made: Set[str], at: str
    ) -> list[tuple[str, str, str, str, int, bool]]:
        """The changes git made are one `memory.checkout` row (no alarm, no restore advice;
        their versions are kept as for any change); the rest, the outside changes."""
        if not made:
            return told
        if self.audit is not None:
            kinds = [t[0] for t in told if t[1] in made]
            self.audit(
                "memory.checkout", dir=d.path, deleted=kinds.count("deleted"),
                rewritten=kinds.count("rewritten"), at=at, files=sorted(made)[:50],
            )  # fmt: skip
        return [t for t in told if t[1] not in made]

    def _unchanged(self, d: _Dir, present: Set[str], only: Set[str] | None) -> bool:
        """Whether a scan that read nothing new has nothing to record, by the stamp alone:
        a partial scan whose names are all still there, a full one that found the names the
        stamp's scan found."""
        stamp = self._stamp(d)
        if stamp is None:
            return False
        if only is not None:
            return all(n in present for n in only)
        return _names_digest(present) == stamp[0]

    @staticmethod
    def _share(d: _Dir, files: Mapping[str, "scan.Scanned"]) -> None:
        """Once per dir: hold the scan's own name and sha256 strings, not copies read from
        the log (10,000 of each would be ~2 MB for nothing)."""
        if d.shared:
            return
        d.shared = True
        shared: dict[str, str] = {}
        for name, sha in d.seen.items():
            info = files.get(name)
            if info is not None and info.sha256 == sha:
                shared[info.filename] = info.sha256
            else:
                shared[name] = sha
        d.seen = shared

    def _backfill(
        self, session: Session, dir_fd: int, files: Mapping[str, "scan.Scanned"], d: _Dir
    ) -> None:
        """Files a full scan took from its cache that the store never recorded (a cache older
        than the store, a log pruned or lost): read once, so that each has its version."""
        read = set(session.names)
        for name, info in files.items():
            if info.kind not in ("memory", "note") or name in d.seen or name in read:
                continue
            try:
                data, _ = fsops.read_regular(dir_fd, name, OBJECT_MAX)
            except (OSError, ValueError):
                continue
            sha = hashlib.sha256(data).hexdigest()
            if sha == info.sha256:  # else it changed since: the next scan reads it
                session._read(name, data, sha, info.kind)

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
        self, path: Path, name: str, sha: str, size: int, data: bytes | Sequence[bytes], by: str
    ) -> None:
        d = self._dir(path)
        self._index_sha[(path, name)] = sha
        if not d.loaded:
            stamp = self._stamp(d)
            if stamp is not None and stamp[1].get(name) == sha:
                return  # the version the log's latest record names (the table not read)
        with self.writing():
            self._catch_up(d)
            latest = self.latest(d, name)
            if latest is not None and latest[0] == sha and latest[1] == "seen":
                return
            self.store_object(data, sha)
            if latest is not None and latest[1] == "restoring" and latest[0] == sha:
                by = MEMORYD
            elif by == OTHER and self._own_wrote(path, name, sha):
                by = MEMORYD  # another memoryd process's write, not stored by it yet
            now = self.clock()
            self._append(d, [(now, name, sha, size, "seen", by, None)])
        if by == OTHER and latest is not None and latest[1] == "seen":
            told = [("rewritten", name, sha, latest[0], size, False)]
            for change in self._git_said(d, told, *self._git_made(d, told)):
                self._outside(d, now, *change)

    # --- outside changes and the alarm -----------------------------------------------------------
    def _outside(
        self,
        d: _Dir,
        now: float,
        kind: str,
        name: str,
        sha: str,
        prev: str,
        size: int,
        counts: bool,
    ) -> None:
        restore = (
            f"memoryd trash restore {deleted_id(d.path, name, now)}"
            if kind == "deleted"
            else f"memoryd history {d.path / name} --restore PREVIOUS"
        )
        if self.audit is not None:
            if kind == "deleted":
                self.audit(
                    "memory.deleted_outside", dir=d.path, file=name, sha256=sha, size=size,
                    restore=restore,
                )  # fmt: skip
            else:
                self.audit(
                    "memory.rewritten_outside", dir=d.path, file=name, sha256=sha, previous=prev,
                    size=size, restore=restore,
                )  # fmt: skip
        if counts:
            d.changes.append((now, kind, name))

    def _alarm(self, d: _Dir, now: float) -> None:
        """Raise memory.mass_change once a burst: the outside changes that count are this
        process's and those the dir's log holds from any other memoryd process (a one-shot
        `memoryd index` may see part of an agent's burst and the daemon the rest, or the
        daemon restarts in its midst); one alarm a window, whichever process raised it."""
        since = now - self.alarm_window
        d.changes = [c for c in d.changes if c[0] >= since]
        changes = sorted({*d.changes, *self._logged_changes(d, since)})
        # Files, not changes: one memory an agent edits four times is no mass change.
        if len({name for _, _, name in changes}) <= self.alarm_files or now < d.alarmed_until:
            return
        last = max(
            (a["t"] for a in alarms(self) if a.get("dir") == str(d.path)
             and isinstance(a.get("t"), int | float)),
            default=-float("inf"),
        )  # fmt: skip
        if since < last <= now:
            d.alarmed_until = last + self.alarm_window
            return
        d.alarmed_until = now + self.alarm_window  # one alarm a burst
        deleted = sorted({n for _, k, n in changes if k == "deleted"})
        rewritten = sorted({n for _, k, n in changes if k == "rewritten"})
        self._guard(self._keep_alarm, d.path, now, len(deleted), len(rewritten))
        if self.audit is not None:
            self.audit(
                "memory.mass_change",
                dir=d.path,
                deleted=len(deleted),
                rewritten=len(rewritten),
                files=(deleted + rewritten)[:50],
                window_s=int(self.alarm_window),
                restore=f"memoryd trash list {d.path}; memoryd history {d.path}/FILE --restore N",
            )

    def _logged_changes(self, d: _Dir, since: float) -> list[tuple[float, str, str]]:
        """The outside changes that count (marked `_COUNTS`) the dir's log holds from `since`
        on. The first time in a process (or in a log compacted since), its lines are read
        back from the end to the first one older (at most RECENT_MAX bytes); after that, only
        the lines appended since it last looked (the daemon's pass after a first start must
        not read back 10,000 lines each time: 9 ms of a 10 ms pass). Only marked lines are
        parsed."""
        try:
            fd, st = open_regular(d.log, follow=False)
        except OSError:
            return []
        try:
            at = d.recent_to
            if at is not None and at[0] == st.st_ino and 0 <= st.st_size - at[1] <= RECENT_MAX:
                found, upto = _marked_after(fd, at[1], st.st_size)
                d.recent.extend(found)
            else:
                d.recent, upto = _marked_before(fd, st.st_size, since)
            d.recent_to = (st.st_ino, upto)
        finally:
            os.close(fd)
        d.recent = [c for c in d.recent if c[0] >= since]
        return d.recent

    def _keep_alarm(
        self, path: Path, now: float, deleted: int, rewritten: int, dir_gone: bool = False
    ) -> None:
        """The last alarms, for `memoryd status` (which reads no audit log)."""
        kept = [a for a in alarms(self) if a.get("dir") != str(path)][-(ALARMS_KEEP - 1) :]
        alarm = {"dir": str(path), "t": now, "deleted": deleted, "rewritten": rewritten}
        kept.append({**alarm, "dir_gone": True} if dir_gone else alarm)
        fsops.write_private(self.root / ALARMS, json.dumps(kept, ensure_ascii=True).encode())

    # --- safety ----------------------------------------------------------------------------------
    def _say(self, problem: str) -> None:
        if problem not in self._said:
            self._said.add(problem)
            get_logger().warning("version store problem", problem=problem)

    def _problem(self, error: OSError, path: Path | None = None) -> str:
        """What to say of an OSError: the file it is about (`path` when the error does not
        name one), and, when that is no regular file, what to do."""
        if isinstance(error, NotRegularFile):
            return (
                f"{error}: memoryd records no version through it; move it aside (memoryd then "
                "makes a new one)"
            )
        where = error.filename if error.filename is not None else path or self.root
        if error.errno == errno.ENOTDIR:  # a file where one of the store's folders belongs
            return (
                f"{where}: a file is in place of one of the folders of this path (not a "
                "directory): memoryd keeps no version through it; move it aside (memoryd then "
                "makes the folder anew)"
            )
        if error.errno == errno.EISDIR:  # a folder where one of the store's files belongs
            return (
                f"{where}: a folder is in place of this file of memoryd's: memoryd keeps no "
                "version through it; move it aside (memoryd then makes the file anew)"
            )
        return f"{where}: {error.strerror or error}"

    def _guard(self, func: Callable[..., object], *args: Any) -> None:
        """The store never fails what memoryd does: a problem is said once, and work goes on."""
        try:
            func(*args)
        except OSError as error:
            self._say(self._problem(error))


_EVENTS = frozenset(("seen", "gone", "moved", "restoring"))
# The mark of a log line that is an outside change counting toward the alarm (a memory's
# deletion or rewrite by others): what any memoryd process reading the log's end counts.
_COUNTS: Mapping[str, Any] = {"alarm": 1}
_COUNTS_MARK = b'"alarm":1'
RECENT_MAX = 8 << 20  # bytes of a log's end the alarm reads back at most (~50,000 lines)


def _counted(raw: bytes, when: float | None) -> tuple[float, str, str] | None:
    """A marked line's outside change (time, kind, name), None for any other line."""
    if when is None or _COUNTS_MARK not in raw or len(raw) > LOG_LINE_MAX:
        return None
    try:
        row = safejson.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not (_plain(row) and row.get("by") == OTHER):
        return None
    return when, "deleted" if row["e"] == "gone" else "rewritten", row["f"]


def _marked_after(fd: int, start: int, end: int) -> tuple[list[tuple[float, str, str]], int]:
    """The outside changes of the whole lines between `start` (a line's start) and `end`,
    and where the last whole line ends (a line still being written is read next time)."""
    data = os.pread(fd, end - start, start) if end > start else b""
    cut = data.rfind(b"\n") + 1
    out = []
    if _COUNTS_MARK in data[:cut]:
        for raw in data[:cut].split(b"\n"):
            change = _counted(raw, _line_time(raw))
            if change is not None:
                out.append(change)
    return out, start + cut


def _marked_before(fd: int, size: int, since: float) -> tuple[list[tuple[float, str, str]], int]:
    """The outside changes of a log's lines from `since` to its end, read back from the end
    (at most RECENT_MAX bytes); and where its last whole line ends. A piece holding no marked
    line is passed over by the time of its first line alone (10,000 lines a first start
    wrote are 25 pieces, not 10,000 lines to look at)."""
    out: list[tuple[float, str, str]] = []
    end, tail, read, over = size, b"", 0, False
    upto: int | None = None  # past the last newline, once a piece holding one is read
    while end > 0 and read < RECENT_MAX:
        piece_size = min(1 << 16, end)
        end -= piece_size
        read += piece_size
        piece = os.pread(fd, piece_size, end)
        lines = piece.split(b"\n")
        if upto is None and len(lines) > 1:
            upto = end + piece_size - len(lines[-1])
        if over:  # within a line over LOG_LINE_MAX, never held (else quadratic)
            lines[-1] = b""
            if len(lines) == 1:
                continue
            over = False
        else:
            lines[-1] += tail  # the start of the line `tail` ends
        tail = lines.pop(0) if end > 0 else b""  # maybe the end of a longer line
        if len(tail) > LOG_LINE_MAX:
            tail, over = b"", True
        if _COUNTS_MARK not in piece and not (lines and _COUNTS_MARK in lines[-1]):
            first = next((t for t in map(_line_time, lines) if t is not None), None)
            if first is not None and first < since:
                break  # the lines are in time order: none before them is read
            continue
        for raw in reversed(lines):
            when = _line_time(raw)
            if when is not None and when < since:
                return out, size if upto is None else upto
            change = _counted(raw, when)
            if change is not None:
                out.append(change)
    return out, size if upto is None else upto


def _line_time(raw: bytes) -> float | None:
    """The time of a log line as memoryd writes it (`{"t":...,`), without parsing the rest."""
    if not raw.startswith(b'{"t":'):
        return None
    try:
        return float(raw[5 : raw.index(b",", 5)])
    except ValueError:
        return None


def _plain(row: object) -> bool:
    """A log row as memoryd writes it (the fast check; anything else goes through _record)."""
    return (
        type(row) is dict
        and type(row.get("f")) is str
        and type(row.get("h")) is str
        and row.get("e") in _EVENTS
        and "/" not in row["f"]
        and not row["f"].startswith(".")
        and _entry_name(row["f"])
    )


def _bytes_if(dir_fd: int, name: str, sha: str) -> bytes | None:
    """The bytes of the regular file `name` in the folder when their sha256 is `sha`, else
    None: an object temp not whole yet (its name carries the sha256), a file that changed or
    is gone since, one that is no regular file or is over OBJECT_MAX."""
    try:
        data = fsops.read_regular(dir_fd, name, OBJECT_MAX)[0]
    except (OSError, ValueError):
        return None
    return data if hashlib.sha256(data).hexdigest() == sha else None


def _remove_dead_temps(folder: Path) -> None:
    """Remove the temps of memoryd processes that are gone from one of the store's folders."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            pid = fsops.temp_owner(name)
            if pid is not None and pid != os.getpid() and not fsops._alive(pid):
                with contextlib.suppress(OSError):
                    os.unlink(folder / name)


def _open_log(log: Path, *, create: bool = True) -> int:
    """A dir's log opened (to append, or with `create=False` to read) and locked (flock): one
    a compaction put another in place of while we waited for the lock is let go, and the new
    one opened."""
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_RDWR | os.O_APPEND | os.O_CREAT if create else os.O_RDONLY
    while True:
        try:
            fd = os.open(log, flags, 0o600)
        except OSError as error:
            if error.errno == errno.ELOOP:  # O_NOFOLLOW: a symlink is never followed
                raise NotRegularFile(log, "a symbolic link") from error
            raise
        regular_fd(fd, log)  # a FIFO opens at once (O_NONBLOCK): what is appended is lost
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a prune compacting the log waits for us, and we for it
            if os.fstat(fd).st_ino == os.stat(log, follow_symlinks=False).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _names_digest(names: Iterable[str]) -> bytes:
    """One digest of a set of names (10,000 of them: ~2 ms)."""
    joined = "\0".join(sorted(names)).encode("utf-8", "surrogateescape")
    return hashlib.blake2b(joined, digest_size=16).digest()


def _set(d: _Dir, name: str, sha: str, event: str) -> None:
    if event == "seen":
        d.seen[name] = sha
        d.other.pop(name, None)
    else:
        d.seen.pop(name, None)
        d.other[name] = (sha, event)


def _fsync_at(dir_fd: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(dir_fd: int, name: str, data: bytes | Sequence[bytes], *, sync: bool) -> str:
    """Like fsops._write_temp, with a crash point after each batch of pieces (the crash-loop
    tests'). An index version is its lines as pieces: one write (and crash point) a line
    was ~20 ms of CPU for the MEMORY.md and the archive of a first start of 10,000."""
    tmp = fsops.temp_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    pieces = [data] if isinstance(data, bytes) else data
    try:
        for start in range(0, len(pieces), fsops._IOV_MAX):
            fsops._writev_all(fd, pieces[start : start + fsops._IOV_MAX])
            fsops.crash_point("versions.writing")
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    return tmp


def alarms(store: VersionStore) -> list[dict[str, Any]]:
    """The last mass-change alarms (one per dir, the newest), oldest first."""
    try:
        data = safejson.loads(read_bounded(store.root / ALARMS, 1 << 20, follow=False, prefix=True))
    except (OSError, ValueError, RecursionError):
        return []
    return [a for a in data if isinstance(a, dict)] if isinstance(data, list) else []


def dir_deleted(store: VersionStore, path: Path) -> int:
    """The memory dir at `path` was deleted whole (`rm -rf` under a running daemon): no scan
    can record its files gone, so this raises the alarm for them (memory.mass_change, shown
    by `memoryd status`): the memory files its log holds as there, which `trash list` lists
    and `trash restore` brings back. The one place a dir's deletion is alarmed: a caller that
    knows it was no loss does not call it. Returns how many files it named (0: the dir is
    there, or held none)."""
    if os.path.isdir(path):
        return 0
    # As a scan does before it says a deletion: the last versions read, still under temp
    # names until the next heartbeat, go in place first, so that every process lists them.
    with store._lock:
        store._guard(store.commit_pending)
    gone = [d for d in deleted(store, path) if d.vanished]
    if not gone:
        return 0
    now = store.clock()
    gone = _checked_out(store, path, gone, now)
    if not gone:
        return 0
    store._guard(store._keep_alarm, path, now, len(gone), 0, True)
    if store.audit is not None:
        store.audit(
            "memory.mass_change",
            dir=path,
            deleted=len(gone),
            rewritten=0,
            files=sorted(d.name for d in gone)[:50],
            window_s=int(store.alarm_window),
            restore=f"memoryd trash list {path}; memoryd trash restore ID",
            detail="the whole memory dir was deleted",
        )
    return len(gone)


def _checked_out(
    store: VersionStore, path: Path, gone: list["Deleted"], now: float
) -> list["Deleted"]:
    """Of a dir's files gone with it, those a git operation did not remove (a checkout of a
    branch without the dir): git's are one `memory.checkout` row and recorded gone as git's
    (no alarm, not listed by `trash list`; their versions stay kept), as a scan records the
    files a checkout removes from a dir that stays."""
    changes = [gitwork.Change(d.name, store.read_object(d.sha256), None, True) for d in gone]
    made, at = gitwork.git_made(path, changes)
    if not made:
        return gone
    ours = [d for d in gone if d.name in made]
    rows: list[_Row] = [(now, d.name, d.sha256, d.size, "gone", OTHER, {"git": at}) for d in ours]
    store._guard(store._append, store._dir(path), rows)
    if store.audit is not None:
        store.audit(
            "memory.checkout", dir=path, deleted=len(ours), rewritten=0, at=at,
            files=sorted(made)[:50],
        )  # fmt: skip
    return [d for d in gone if d.name not in made]


def deleted_id(path: Path, name: str, when: float) -> str:
    """The id `trash list` shows for a file deleted outside memoryd: `d` and 9 hex digits
    (a trash id is 10 hex digits, so the two never collide)."""
    key = f"{path}\0{name}\0{when!r}".encode("utf-8", "surrogateescape")
    return "d" + hashlib.sha256(key).hexdigest()[:9]


# --- the hooks: what the store passed to a scan, an index read, a swap is told -------------
# The store is a collaborator (`Runtime.versions`), passed down to `scan.scan_dir`,
# `indexing.read.read_index_file` and `fsops.replace_file` as their `versions` parameter: no module
# global is switched while a command runs, so two stores (two Runtimes, two state dirs) in one
# process each keep what their own Runtime's work read, and a scan given none records nothing.
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
    """A store's run (a command, the daemon): what a killed memoryd left half done is put in
    place or removed first; memoryd's own index writes are stored at the end (or at each
    `flush`). The store keeps what is passed to it (`Runtime.versions`), nothing else."""
    store._guard(store.recover_temps)
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
        state=rt.store,
    )


# --- what a person asks: history, deleted files, restores --------------------------------------
@dataclass(frozen=True, slots=True)
class Version:
    """One version of a file in a dir's history (numbered from 1, oldest first)."""

    number: int
    sha256: str
    size: int
    seen: float  # when memoryd first read it
    until: float | None  # when memoryd found it replaced or gone; None: still current
    by: str  # who wrote it: memoryd or another process
    stored: bool  # its bytes are in the store (pruned versions are listed, not restorable)
    ended_by: str = ""  # "rewritten", "deleted", "moved", "renamed" (what ended it), or ""


def versions_of(store: VersionStore, path: Path, name: str) -> list[Version]:
    """The versions of `name` in the dir at `path`, oldest first."""
    return _versions(store, [rec for rec in store.records(path) if rec.f == name])


def _versions(
    store: VersionStore, recs: Sequence[Record], stored: Set[str] | None = None
) -> list[Version]:
    """The versions one file's records (oldest first) give; `stored`: the objects the store
    holds, for a caller that looked once (else each version is looked up)."""
    out: list[Version] = []
    open_: dict[str, Any] | None = None
    for rec in recs:
        if rec.e in ("gone", "moved"):
            if open_ is not None:
                open_["until"] = rec.t
                open_["ended_by"] = (
                    "renamed" if "to" in rec.extra else ("moved" if rec.e == "moved" else "deleted")
                )
                out.append(Version(**open_))
                open_ = None
            continue
        if rec.e != "seen" or (open_ is not None and open_["sha256"] == rec.h):
            continue
        if open_ is not None:
            open_["until"] = rec.t
            open_["ended_by"] = "rewritten"
            out.append(Version(**open_))
        open_ = {
            "number": 0, "sha256": rec.h, "size": rec.n, "seen": rec.t, "until": None,
            "by": rec.by, "stored": True,
        }  # fmt: skip
    if open_ is not None:
        out.append(Version(**open_))

    temps: set[str] | None = None

    def has(sha: str) -> bool:
        nonlocal temps
        if stored is not None:
            return sha in stored
        if store.has_object(sha):
            return True
        # A version the daemon read moments ago is restorable before its heartbeat too (the
        # temps listed once, whatever the count of versions).
        if temps is None:
            temps = store.temp_shas()
        return sha in temps

    return [
        Version(i + 1, v.sha256, v.size, v.seen, v.until, v.by, has(v.sha256), v.ended_by)
        for i, v in enumerate(out)
    ]


@dataclass(frozen=True, slots=True)
class Deleted:
    """A memory file another process deleted (or moved out of its dir), restorable."""

    id: str
    dir: Path
    name: str
    sha256: str
    size: int
    when: float
    # Its whole dir is gone (`rm -rf` of the folder): no scan could record the file gone, so
    # `when` is the time it was last seen (see VersionStore.vanished).
    vanished: bool = False


def deleted(store: VersionStore, path: Path) -> list[Deleted]:
    """Files of the dir deleted outside memoryd, whose last version is kept, oldest first.

    A deletion stays listed until its bytes are back in the dir (read again under any name,
    or restored: in place under the name memoryd wrote them as), also when a new file has
    taken its name since: an agent that deletes a memory and writes another under the same
    name must not make the first unrestorable (the `memory.deleted_outside` row's restore
    command names it). When the dir itself is gone, so is every file the log holds as there
    (`vanished`)."""
    found: dict[tuple[str, str], Record] = {}  # (name, sha256) -> the deletion, newest
    names_of: dict[str, set[str]] = {}  # sha256 -> the names `found` holds it under
    # Deletions a `restoring` line took out, by sha256, with the name it was restored as: the
    # line is written before the file (so that reading the file back is memoryd's doing), so
    # it proves nothing by itself. A restore that failed or was killed before its swap must
    # leave the deletion listed: held until its bytes are read again, else looked up below.
    held: dict[str, list[tuple[str, Record]]] = {}
    there: dict[str, Record] = {}  # each name whose latest record is `seen`: that record
    for rec in store.records(path):
        if rec.e == "seen":
            there[rec.f] = rec
        else:
            there.pop(rec.f, None)
        if rec.e == "gone" and rec.by == OTHER and "to" not in rec.extra and "git" not in rec.extra:
            found.pop((rec.f, rec.h), None)
            found[(rec.f, rec.h)] = rec
            names_of.setdefault(rec.h, set()).add(rec.f)
        elif rec.e == "seen":
            for name in names_of.pop(rec.h, ()):  # by sha256: a log of 10,000s of lines
                del found[(name, rec.h)]
            held.pop(rec.h, None)
        elif rec.e == "restoring":
            for name in names_of.pop(rec.h, ()):
                held.setdefault(rec.h, []).append((rec.f, found.pop((name, rec.h))))
        elif "restored_as" in rec.extra and found.pop((rec.f, rec.h), None) is not None:
            names_of[rec.h].discard(rec.f)  # an older memoryd's mark of a restore
    if held:
        _unheld(path, held, found)
    vanished: set[tuple[str, str]] = set()
    if there and not os.path.isdir(path):  # gone, or something else in its place
        for rec in there.values():
            if (rec.f, rec.h) not in found:
                found[(rec.f, rec.h)] = rec
                vanished.add((rec.f, rec.h))
    rows = [r for r in sorted(found.values(), key=lambda r: (r.t, r.f)) if r.f not in INDEX_FILES]
    has = _stored_lookup(store, len(rows))
    return [
        Deleted(
            deleted_id(path, rec.f, _id_time(rec)),
            path,
            rec.f,
            rec.h,
            rec.n,
            rec.t,
            (rec.f, rec.h) in vanished,
        )
        for rec in rows
        if has(rec.h)
    ]


def _stored_lookup(store: VersionStore, count: int) -> Callable[[str], bool]:
    """Whether an object is stored, for `count` lookups: one at a time for a few, else the
    objects listed once (a dir deleted whole lists every file it held, and each lookup on
    its own stats the object and opens every pack: 10,000 files took ~0.5 s a listing)."""
    if count <= 32:
        return store.has_object
    stored = set(store.object_sizes()) | {sha for _, sha in store._temps}
    return stored.__contains__


def _id_time(rec: Record) -> float:
    """The time a deletion's id is made from: when it was found gone, or for a file whose
    folder went with it, when it was last seen (the id `trash list` gave it then)."""
    t = rec.extra.get("id_t")
    if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    return rec.t


def _unheld(
    path: Path,
    held: Mapping[str, Sequence[tuple[str, Record]]],
    found: dict[tuple[str, str], Record],
) -> None:
    """Put back into `found` each held deletion whose restore did not happen: the name it
    was restored as does not hold its bytes now (nothing read them back since either)."""
    holds: dict[tuple[str, str], bool] = {}
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        dir_fd = -1  # the dir is gone: so is every restore into it
    try:
        for sha, items in held.items():
            for restored_as, rec in items:
                key = (restored_as, sha)
                if key not in holds:
                    holds[key] = dir_fd >= 0 and _bytes_if(dir_fd, restored_as, sha) is not None
                if not holds[key] and (rec.f, sha) not in found:
                    found[(rec.f, sha)] = rec
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def find_deleted(store: VersionStore, dirs: Sequence[Path], key: str) -> Deleted | None:
    """A deleted-elsewhere file by its id, or by its name or `<dir>/<name>` (the newest)."""
    found = [d for path in dirs for d in deleted(store, path)]
    for item in found:
        if item.id == key:
            return item
    fitting = [d for d in found if key in (d.name, str(d.dir / d.name))]
    return max(fitting, key=lambda d: d.when) if fitting else None


def render_versions(path: Path, name: str, found: Sequence[Version], now: float) -> str:
    """`memoryd history FILE`: one line per version, newest first (the file's path shown
    as a terminal should get it, its lines as lines)."""
    from memoryd.display import shown
    from memoryd.humanize import ago

    if not found:
        return (
            f"{shown(path / name)}: memoryd has kept no version of it (it never read it while "
            "running, or its versions are past versions.keep_days).\n"
        )
    lines = [f"{shown(path / name)}: {len(found)} version{'s' if len(found) != 1 else ''} kept"]
    for v in reversed(found):
        by = "memoryd" if v.by == MEMORYD else "another process"
        ended = f"{v.ended_by or 'replaced'} {ago(v.until, now)}" if v.until is not None else ""
        state = ended or "current"
        kept = "" if v.stored else "  (bytes pruned: not restorable)"
        lines.append(
            f"  {v.number:>3}  seen {ago(v.seen, now):<12} {v.size:>8} B  {v.sha256[:12]}  "
            f"by {by:<15}  {state}{kept}"
        )
    return "\n".join(lines) + "\n"


def diff(
    store: VersionStore,
    name: str,
    older: Version,
    newer: Version | None,
    current: bytes | None,
    *,
    gone: bool = False,
) -> str:
    """What changed from `older` to `newer` (None: the file as it is now; `gone`: it is not
    in the dir now, so every line went), as a unified diff."""
    import difflib

    a = store.read_object(older.sha256)
    if newer is None and gone:
        b: bytes | None = b""
    else:
        b = current if newer is None else store.read_object(newer.sha256)
    if a is None or (b is None and newer is not None):
        return f"{name}: the bytes of one of these versions are no longer kept\n"
    if b is None:
        return f"{name}: the file as it is now cannot be read (not a regular file, or too big)\n"
    left = f"{name}@{older.number}"
    now = "(deleted)" if gone else "(now)"
    right = f"{name}@{newer.number}" if newer is not None else f"{name} {now}"
    return "".join(
        difflib.unified_diff(
            a.decode("utf-8", "replace").splitlines(keepends=True),
            b.decode("utf-8", "replace").splitlines(keepends=True),
            left,
            right,
        )
    )


# --- the store's size: retention and cap ---------------------------------------------------------
@dataclass(slots=True)
class PruneResult:
    removed: list[str] = field(default_factory=list)  # object shas
    freed: int = 0
    kept_bytes: int = 0
    lines_dropped: int = 0  # by the logs' compaction
    busy: bool = False  # a writer held the store-wide lock: nothing was looked at
    repaired: int = 0  # current versions whose bytes were missing, stored again from the file


def prune(store: VersionStore, now: float | None = None) -> PruneResult:
    """Drop versions past `keep_days` after they were replaced or deleted, then, while the
    store is over `max_bytes`, replaced versions of files that still exist (oldest first),
    then older replaced versions of deleted files; never a current version, and never the
    last version of a deleted file within keep_days. Objects no kept version names go.
    Runs under the store-wide lock, exclusive; while any writer holds it, nothing is done
    and the result says `busy`."""
    lock = store.lock_exclusive()
    if lock is None:
        return PruneResult(busy=True)
    try:
        return _prune(store, store.clock() if now is None else now)
    finally:
        os.close(lock)


def _prune(store: VersionStore, now: float) -> PruneResult:
    keep = store.keep_days * DAY
    # How long ago a version ended is the time memoryd watched pass since it found it ended,
    # never the wall clock's reading alone (see `retention`).
    ages = retention.Ages(store.root, store.observe_clock(now))
    # Per object: whether something still needs it, else the time it became prunable and its
    # tier (0: an old version of a file that exists; 1: of a deleted file, not its last). A
    # version deleted outside memoryd is the last of a deleted file for its retention even
    # when a new file has taken the name since (`deleted` lists it; its restore names it).
    needed: set[str] = set()
    candidates: dict[str, tuple[int, float]] = {}
    sizes = store.object_sizes()  # looked up once: a lookup a version cost 1 s at 10,000
    stale: list[Path] = []  # dirs with versions ended long enough ago for compaction
    # Current versions without their bytes (True: something else is under their name: a
    # loose object of another size than the log's, truncated or overwritten).
    missing: list[tuple[Path, str, str, bool]] = []
    for path in store.known_dirs():
        by_name: dict[str, list[Record]] = {}
        for rec in store.records(path):  # the log read once, not once a name
            by_name.setdefault(rec.f, []).append(rec)
        old = False
        for recs in by_name.values():
            found = _versions(store, recs, sizes.keys())
            gone = bool(found) and found[-1].until is not None
            if found and found[-1].until is None:
                now_v = found[-1]
                if not now_v.stored or sizes[now_v.sha256] != now_v.size:
                    missing.append((path, recs[-1].f, now_v.sha256, now_v.stored))
            for i, v in enumerate(found):
                last = i == len(found) - 1
                young = v.until is not None and ages.young(path, recs[0].f, v.sha256, v.until, keep)
                if v.until is not None and not young:
                    old = not ages.young(path, recs[0].f, v.sha256, v.until, 2 * keep) or old
                deleted_here = (last and gone) or v.ended_by == "deleted"
                if v.until is None or (young and deleted_here):
                    needed.add(v.sha256)
                elif young:
                    tier = 1 if gone else 0
                    was = candidates.get(v.sha256)
                    if was is None or (tier, v.until) > was:
                        candidates[v.sha256] = (tier, v.until)
        if old:
            stale.append(path)
    ages.save()
    result = PruneResult(repaired=_store_missing(store, missing))
    doomed = [s for s in sizes if s not in needed and s not in candidates]  # past retention
    total = sum(sizes.values()) - sum(sizes[s] for s in doomed)
    for sha, _ in sorted(
        ((s, c) for s, c in candidates.items() if s not in needed and s in sizes),
        key=lambda item: item[1],
    ):
        if total <= store.max_bytes:
            break
        doomed.append(sha)
        total -= sizes[sha]
    dropped = store.drop_objects(set(doomed))
    result.removed = [sha for sha in doomed if sha in dropped]
    result.freed = sum(sizes[sha] for sha in result.removed)
    result.kept_bytes = total
    kept = sizes.keys() - set(result.removed)
    for path in stale:
        with contextlib.suppress(OSError):
            result.lines_dropped += compact(store, path, now, kept)
    return result


def _store_missing(store: VersionStore, missing: Sequence[tuple[Path, str, str, bool]]) -> int:
    """Store again the bytes of current versions the log names but the store lacks (a state
    dir damaged or restored from a backup, objects removed by hand, one truncated or
    overwritten: `damaged`): no scan would, since each such file's version is already
    logged, and its loss would go unseen until the file was deleted. Read from the file while
    it still holds those bytes; returns how many. A damaged one is said, stored again or not."""
    done = 0
    for path, name, sha, damaged in missing:
        if damaged:
            store._say(
                f"{store.objects / sha}: damaged (its size is not that of the version of "
                f"{path / name} it holds); stored again from the file if it still holds "
                "those bytes, else that version cannot be restored"
            )
        try:
            dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = _bytes_if(dir_fd, name, sha)  # None: it changed, and the next scan reads it
        finally:
            os.close(dir_fd)
        if data is not None:
            store.store_object(data, sha, again=damaged)
            done += 1
    return done


def compact(
    store: VersionStore, path: Path, now: float | None = None, stored: Set[str] | None = None
) -> int:
    """Drop from a dir's log the lines no listed version needs any more: for each name, every
    line before its oldest version still restorable, current or ended less than twice
    keep_days ago (older versions whose bytes were pruned, and the moves, deletions and
    restores that ended them), all of a name none of whose versions is, and torn or invalid
    lines. Written as a new log (temp, fsync,
    rename, fsync of the folder) under the log's lock: appenders wait, then append to the new
    one (see _open_log); a kill -9 leaves the old log or the new one whole. Returns the lines
    dropped (0: the log was left as it was)."""
    now = store.clock() if now is None else now
    log = store.log_path(path)
    try:
        fd = _open_log(log, create=False)
    except FileNotFoundError:
        return 0
    from memoryd.indexing.scan import skip_reason

    try:
        head = b""
        lines: list[tuple[bytes, Record | None]] = []
        for number, raw in BoundedLines(fd, max_line=LOG_LINE_MAX):
            if raw is None:
                lines.append((b"", None))
                continue
            if number == 1 and raw.startswith(b'{"dir"'):
                head = raw
                continue
            rec = None
            with contextlib.suppress(ValueError, RecursionError):
                rec = _record(safejson.loads(raw), skip_reason)
            lines.append((raw, rec))
        by_name: dict[str, list[int]] = {}
        for i, (_, rec) in enumerate(lines):
            if rec is not None:
                by_name.setdefault(rec.f, []).append(i)
        keep: set[int] = set()
        for positions in by_name.values():
            recs = [rec for i in positions if (rec := lines[i][1]) is not None]
            keep.update(positions[_first_needed(store, recs, now, stored) :])
        dropped = len(lines) - len(keep)
        if dropped == 0 or not head:
            return 0
        _remove_dead_temps(store.logs)  # a killed compaction's
        body = [head, *(lines[i][0] for i in sorted(keep))]
        dir_fd = os.open(store.logs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            tmp = _write_temp(dir_fd, log.name, b"".join(body), sync=True)
            try:
                fsops.crash_point("versions.compacting")
                os.rename(tmp, log.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            fsops.fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)
        store._log_replaced(path)
        return dropped
    finally:
        os.close(fd)  # the lock goes with it: waiting appenders find the new log


def _first_needed(
    store: VersionStore, recs: Sequence[Record], now: float, stored: Set[str] | None
) -> int:
    """Where one name's lines (oldest first) start to matter: the first line of its oldest
    version that is current, whose bytes are kept, or that ended less than twice keep_days
    ago (its bytes pruned, `history` still lists it as such for keep_days more); a trailing
    `restoring` stays (memoryd is about to write those bytes); len(recs) when nothing does."""
    versions: list[tuple[int, str, float | None]] = []  # (first line, sha256, ended when)
    open_sha: str | None = None
    for i, rec in enumerate(recs):
        ends = rec.e in ("gone", "moved") or (rec.e == "seen" and rec.h != open_sha)
        if ends and open_sha is not None:
            versions[-1] = (versions[-1][0], versions[-1][1], rec.t)
            open_sha = None
        if rec.e == "seen" and open_sha is None:
            versions.append((i, rec.h, None))
            open_sha = rec.h
    listed = 2 * store.keep_days * DAY
    cut = len(recs)
    for first, sha, until in versions:
        held = sha in stored if stored is not None else store.has_object(sha)
        if until is None or now - until < listed or held:
            cut = first
            break
    if recs and recs[-1].e == "restoring":
        cut = min(cut, len(recs) - 1)
    return cut
