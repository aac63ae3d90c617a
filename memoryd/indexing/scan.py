"""Read one memory dir safely: list and classify every entry, parse what changed since last time."""

import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Protocol, TypeVar

from memoryd.model.scanned import Scanned
from memoryd.storage import fsops

# memoryd.model.memfile's limits, spelled out: the parser is imported by the first read, so a scan
# that reads nothing (an `index` with nothing changed) loads none of it (~3 ms of start-up).
# tests/test_wholeproc_steps.py checks they are memfile's.
MAX_FILE_BYTES = 1024 * 1024
MAX_FRONTMATTER_BYTES = 16 * 1024

TRASH_DIR = ".trash"


class ScanSeen(Protocol):
    """One scan's part in the version store (memoryd.versions): told of every memory or note
    the scan reads, with the bytes already read, and of what the scan found."""

    def read(self, name: str, data: bytes, sha: str, kind: str) -> None: ...

    def end(
        self,
        dir_fd: int,
        files: Mapping[str, "Scanned"],
        present: Set[str],
        before: Mapping[str, "Scanned"],
        only: Set[str] | None,
    ) -> None: ...

    def abort(self) -> None:
        """The scan raised: nothing it read is recorded, and what it holds is let go."""


class ScanKeeper(Protocol):
    """The version store as `scan_dir` sees it (its `versions`): None keeps nothing."""

    def begin_scan(self, path: Path, dir_fd: int) -> ScanSeen: ...


def is_index_name(name: str) -> bool:
    return name.startswith("MEMORY") and name.endswith(".md")


def skip_reason(name: str) -> str | None:
    """Why a directory entry is never a memory candidate, or None when it might be one.

    Editor and sync leftovers (DESIGN §4.1) are never memories, never indexed: the conflict
    copies `*.sync-conflict-*`, `*(conflicted copy*`, `*conflicted copy*` and the temp files
    `*.tmp.*`, `*~`, `4913`, `*.swp`, `*.swx`. Each of those globs is a plain substring, suffix
    or equality test, written as one: this runs for every entry of every scan.
    """
    if name.startswith("."):
        return "dotfile"
    if is_index_name(name):
        return "index"
    if ".sync-conflict-" in name or "conflicted copy" in name:
        return "conflict copy"
    if ".tmp." in name or name.endswith(("~", ".swp", ".swx")) or name == "4913":
        return "temp file"
    if not name.endswith(".md"):
        return "not markdown"
    return None


_T = TypeVar("_T")


class Names(Set[str]):
    """The names in a dir as a full listing saw them plus the few that came or went since:
    the daemon's pass over one new file among 10,000 then copies no 10,000 names. Immutable;
    `changed` gives a new one, a plain frozenset again once the difference grows."""

    __slots__ = ("_base", "_came", "_gone")
    COMPACT_AT = 256

    def __init__(self, base: frozenset[str], came: frozenset[str], gone: frozenset[str]) -> None:
        self._base = base
        self._came = came  # none of them in base
        self._gone = gone  # all of them in base

    def __contains__(self, name: object) -> bool:
        return name in self._came or (name in self._base and name not in self._gone)

    def __iter__(self) -> Iterator[str]:
        gone = self._gone
        yield from (n for n in self._base if n not in gone)
        yield from self._came

    def __len__(self) -> int:
        return len(self._base) - len(self._gone) + len(self._came)

    @classmethod
    def _from_iterable(cls, items: Iterable[_T]) -> frozenset[_T]:
        # What Set's operators (-, &, |, ^) build their result with: a plain frozenset.
        return frozenset(items)

    @staticmethod
    def changed(names: Set[str], came: Set[str], gone: Set[str]) -> Set[str]:
        """`names` with `came` (not in it) added and `gone` (all in it) removed."""
        if isinstance(names, Names):
            base, had_came, had_gone = names._base, names._came, names._gone
        else:
            base, had_came, had_gone = frozenset(names), frozenset(), frozenset()
        new_came = (had_came - gone) | {n for n in came if n not in base}
        new_gone = (had_gone - came) | {n for n in gone if n in base}
        if len(new_came) + len(new_gone) > Names.COMPACT_AT:
            return frozenset(Names(base, new_came, new_gone))
        return Names(base, new_came, new_gone)


@dataclass(slots=True)
class DirScan:
    path: Path
    files: dict[str, Scanned] = field(default_factory=dict)  # never changed once made
    present: Set[str] = frozenset()  # every name in the dir, exact case (see Names)
    conflicts: list[str] = field(default_factory=list)
    subdirs: list[str] = field(default_factory=list)
    reread: int = 0  # how many files had to be read (the rest came from the cache)
    own_temps: list[str] = field(default_factory=list)  # memoryd's temp names seen (full scans)
    changed: list[str] = field(default_factory=list)  # names that are new or changed since
    vanished: list[str] = field(default_factory=list)  # listed, then gone before they were read

    @property
    def memories(self) -> dict[str, Scanned]:
        return {n: s for n, s in self.files.items() if s.kind == "memory"}

    @property
    def problems(self) -> dict[str, Scanned]:
        return {n: s for n, s in self.files.items() if s.kind == "problem"}


def _problem(name: str, st: os.stat_result, kind: str, message: str, hint: str) -> Scanned:
    return Scanned(
        name,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        "problem",
        problem_kind=kind,
        problem_message=message,
        problem_hint=hint,
    )


def _classify_link(dir_path: Path, name: str, st: os.stat_result) -> Scanned:
    try:
        target = os.readlink(dir_path / name)
    except OSError:
        target = ""
    resolved = os.path.realpath(dir_path / target) if target else ""
    inside = resolved.startswith(os.path.realpath(dir_path) + os.sep)
    if inside:
        return _problem(
            name,
            st,
            "symlink",
            f"is a symlink to {target}",
            "memoryd does not follow links; replace it with the file itself",
        )
    return _problem(
        name,
        st,
        "symlink_out",
        f"is a symlink out of the memory dir (to {target})",
        "memoryd never follows links out of a memory dir; move the file in instead",
    )


_GONE = os.stat_result((0,) * 10)


def _lstat_now(dir_fd: int, name: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return _GONE


_memfile: tuple[Any, ...] = ()


def _load_memfile() -> tuple[Any, ...]:
    """memfile's parser, imported at the first file read (see MAX_FILE_BYTES) and kept: an
    import statement in read_one cost half a microsecond a file."""
    global _memfile
    from memoryd.model.memfile import NotMemory, Summary, parse_date, parse_summary

    _memfile = (NotMemory, Summary, parse_date, parse_summary)
    return _memfile


def read_one(
    dir_fd: int,
    name: str,
    st: os.stat_result | None,
    max_file: int,
    max_fm: int,
    seen: ScanSeen | None = None,
) -> Scanned:
    """Read and parse one regular file. `st` is the listing's lstat of it, or None when the
    listing took none (a file not in the cache: what it opens is fstat'ed anyway); a file that
    cannot be read is then reported with a fresh lstat, or zeros if it is gone."""
    try:
        data, fst = fsops.read_regular(dir_fd, name, max_file, stable=True)
    except fsops.ChangedWhileReading as changed:
        # A writer is mid-write: never act on it, and never cache it (mtime_ns -1 never matches).
        fst = changed.st
        return Scanned(
            name,
            fst.st_ino,
            fst.st_size,
            -1,
            "problem",
            problem_kind="unstable",
            problem_message="changed while it was being read",
            problem_hint="memoryd looks again shortly",
        )
    except ValueError:
        return _problem(
            name,
            st or _lstat_now(dir_fd, name),
            "too_large",
            f"file is over the {max_file}-byte limit",
            "split it into smaller memories or raise parse.max_file_bytes",
        )
    except FileNotFoundError:
        # Removed between the listing and the read: not a problem of the file's, just gone.
        return Scanned(name, 0, 0, -1, "problem", problem_kind=GONE)
    except OSError as error:
        return _problem(
            name,
            st or _lstat_now(dir_fd, name),
            "unreadable",
            f"cannot be read ({error.strerror})",
            "check the file's permissions",
        )
    return _parsed(name, data, fst, max_file, max_fm, seen)


def _parsed(
    name: str, data: bytes, fst: os.stat_result, max_file: int, max_fm: int, seen: ScanSeen | None
) -> Scanned:
    """What one file's bytes are: a memory, a note, or a problem."""
    from memoryd.model.index import linkable

    NotMemory, Summary, parse_date, parse_summary = _memfile or _load_memfile()
    parsed = parse_summary(name, data, max_file_bytes=max_file, max_frontmatter_bytes=max_fm)
    if seen is not None and isinstance(parsed, Summary | NotMemory):  # versions
        kind = "memory" if isinstance(parsed, Summary) else "note"
        seen.read(name, data, parsed.sha256, kind)
    if isinstance(parsed, Summary) and not linkable(name):
        # Its pointer would read back as another name or as a trick (a look-alike of `.`, `/`
        # or `\`, an undecodable byte): indexing it would add a line on every pass.
        return _problem(
            name,
            fst,
            "unlinkable",
            "its name cannot be written as a link in MEMORY.md that reads back as this file",
            "rename it with plain letters, digits, dots, dashes and underscores",
        )
    if isinstance(parsed, Summary):
        digest, title, description, type_, modified = parsed[:5]
        return Scanned(
            name,
            fst.st_ino,
            fst.st_size,
            fst.st_mtime_ns,
            "memory",
            digest,
            title,
            description,
            sys.intern(type_),  # a few kinds among 10,000 files held: one string each
            parse_date(modified),
        )
    if isinstance(parsed, NotMemory):
        return Scanned(name, fst.st_ino, fst.st_size, fst.st_mtime_ns, "note", parsed.sha256)
    return Scanned(
        name,
        fst.st_ino,
        fst.st_size,
        fst.st_mtime_ns,
        "problem",
        parsed.sha256,
        problem_kind=parsed.kind,
        problem_message=parsed.message,
        problem_hint=parsed.hint,
    )


def _take(
    result: DirScan,
    dir_fd: int,
    name: str,
    st: os.stat_result,
    cache: Mapping[str, Scanned],
    limits: tuple[int, int],
    seen: ScanSeen | None = None,
) -> None:
    """Classify one directory entry into the scan (reading it only if it changed)."""
    if stat.S_ISDIR(st.st_mode):
        if name != TRASH_DIR and not name.startswith("."):
            result.subdirs.append(name)
        return
    # Only names that passed skip_reason are ever cached, so a hit needs no name checks.
    cached = cache.get(name)
    if (
        cached is not None
        and cached.ino == st.st_ino
        and cached.size == st.st_size
        and cached.mtime_ns == st.st_mtime_ns
    ):
        result.files[name] = cached
        return
    reason = skip_reason(name)
    if reason == "conflict copy":
        result.conflicts.append(name)
    if reason is not None:
        return
    if stat.S_ISLNK(st.st_mode):
        result.files[name] = _classify_link(result.path, name, st)
    elif not stat.S_ISREG(st.st_mode):
        result.files[name] = _problem(
            name,
            st,
            "not_regular",
            "is not a regular file (a FIFO, socket or device)",
            "memoryd never opens these; remove it from the memory dir",
        )
    else:
        _read_changed(result, dir_fd, name, st, limits, seen)


GONE = "gone"  # a read_one result for a file removed since it was listed (never kept)


def _read_changed(
    result: DirScan,
    dir_fd: int,
    name: str,
    st: os.stat_result | None,
    limits: tuple[int, int],
    seen: ScanSeen | None = None,
) -> None:
    result.reread += 1
    scanned = read_one(dir_fd, name, st, *limits, seen)
    if scanned.problem_kind == GONE:
        result.vanished.append(name)
        return
    result.changed.append(name)
    result.files[name] = scanned


def scan_dir(
    path: Path,
    cache: Mapping[str, Scanned] | None = None,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
    previous: "DirScan | None" = None,
    only: Set[str] | None = None,
    versions: ScanKeeper | None = None,
) -> DirScan:
    """List and classify a memory dir; re-read only files whose (inode, size, mtime_ns) moved.

    With `previous` (a full scan of this dir) and `only` (the names file events reported),
    only those names are looked at and everything else is taken from `previous`: the daemon's
    path for one changed file among thousands. The periodic reconcile scans in full.
    `versions`: the version store, told what the scan reads and finds (None: nothing kept).
    """
    cache = cache or {}
    with fsops.open_dir(path) as dir_fd:
        seen = versions.begin_scan(path, dir_fd) if versions is not None else None
        try:
            return _scan(path, dir_fd, cache, (max_file_bytes, max_frontmatter_bytes),
                         previous, only, seen)  # fmt: skip
        except BaseException:
            if seen is not None:  # its session (the store-wide lock among it) goes now
                seen.abort()
            raise


def _scan(
    path: Path,
    dir_fd: int,
    cache: Mapping[str, Scanned],
    limits: tuple[int, int],
    previous: "DirScan | None",
    only: Set[str] | None,
    seen: ScanSeen | None,
) -> DirScan:
    """scan_dir's work, through the open `dir_fd`, telling `seen` (if any) what it reads."""
    result = DirScan(path)
    if previous is not None and only is not None:
        result.files = dict(previous.files)  # a C-level copy: 10,000 entries in ~0.1 ms
        for name in only:
            result.files.pop(name, None)
        result.conflicts = [n for n in previous.conflicts if n not in only]
        result.subdirs = [n for n in previous.subdirs if n not in only]
        found: set[str] = set()
        for name in sorted(only):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            _take(result, dir_fd, name, st, previous.files, limits, seen)
            if name not in result.vanished:
                found.add(name)
        had = previous.present
        came = {n for n in found if n not in had}
        gone = {n for n in only if n not in found and n in had}
        result.present = Names.changed(had, came, gone) if came or gone else had
        if seen is not None:  # versions
            seen.end(dir_fd, result.files, result.present, previous.files, only)
        return result
    with os.scandir(dir_fd) as entries:
        listing = {e.name: e for e in entries}
    result.own_temps = [n for n in listing if n.startswith(".") and fsops.is_own_temp(n)]
    files, cached_file, is_dir, lstat = result.files, cache.get, stat.S_ISDIR, os.stat
    removed: list[str] = []  # gone between the listing and their stat
    for name in sorted(listing):
        cached = cached_file(name)
        if (
            cached is None
            and listing[name].is_file(follow_symlinks=False)
            and skip_reason(name) is None
        ):
            # A regular file not seen before (the type comes with the listing): the read
            # fstats what it opens, so an lstat here would only be thrown away.
            _read_changed(result, dir_fd, name, None, limits, seen)
            continue
        try:
            # The same fstatat as entry.stat's, without the DirEntry's own copy of the
            # result (~5 ms of a scan of 10,000 files).
            st = lstat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            removed.append(name)  # an editor's or sed's temp file, say
            continue
        # `_take`'s cache hit, inline: at 10,000 files the call alone is a fifth of a reconcile.
        if (
            cached is not None
            and cached.mtime_ns == st.st_mtime_ns
            and cached.ino == st.st_ino
            and cached.size == st.st_size
            and not is_dir(st.st_mode)
        ):
            files[cached.filename] = cached  # its name, not the listing's equal copy
        else:
            _take(result, dir_fd, name, st, cache, limits, seen)
    # The names `files` holds first: a restart's 10,000 cached names are then held once,
    # not beside the listing's equal ones (~0.6 MB).
    result.present = frozenset(chain(files, listing)).difference(removed, result.vanished)
    if seen is not None:  # versions
        seen.end(dir_fd, result.files, result.present, cache, None)
    return result
