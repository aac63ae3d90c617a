"""memoryd's memory of each dir, kept in the state dir (never in the memory dir).

Per dir: the memory files it has seen with their name/description (so a gone file's pointer can
be removed and a generated line recognised), the pointer lines it wrote itself (so a duplicate of
one is told from the agent's), what it has already reported (so each problem is
said once), pile-up counts for the daemon, and a parse cache for a fast restart.

Every state file is read as a regular file of bounded size, never through a symlink and never
blocking on a FIFO: anything else in its place is damaged state, done without (a fresh state,
no cache: both are rebuilt, the next save replaces the file) and said once.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import fsops, safejson
from memoryd.logsetup import get_logger
from memoryd.paths import ensure_private_dir, open_regular, read_bounded, read_problem

if TYPE_CHECKING:  # the parse cache's module (and its YAML parser) loads with the first cache
    from memoryd.indexing.scan import Scanned

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
    # Memories the last pass flagged for review and no person has acknowledged (memoryd.acked);
    # -1 before any pass counted them.
    last_dream_flagged: int = -1
    last_index_ts: float = 0.0
    last_change_ts: float = 0.0
    reads: dict[str, float] = field(default_factory=dict)  # file -> last read by the agent
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


FileId = tuple[int, int, int]  # inode, size, mtime_ns: changes whenever anyone rewrites it


def _file_id(path: Path) -> FileId | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


_FIELDS = frozenset(f.name for f in fields(DirState))


def _copy(state: DirState) -> DirState:
    """A copy deep enough for callers that mutate (they replace or update these containers)."""
    return replace(
        state,
        seen=dict(state.seen),
        own=dict(state.own),
        reported=dict(state.reported),
        changed_since_dream=list(state.changed_since_dream),
        reads=dict(state.reads),
        gone=dict(state.gone),
    )


def _shallow(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def _apply(state: DirState, data: Mapping[str, Any]) -> None:
    for key, value in data.items():
        if key in _FIELDS:
            setattr(state, key, value)


# The fields a log line changes per name (name -> new value, None: gone) rather than whole.
_KEYED = ("seen", "own")


def _apply_change(state: DirState, change: Mapping[str, Any]) -> None:
    for key in _KEYED:
        delta = change.get(key)
        if isinstance(delta, dict):
            held: dict[str, Any] = getattr(state, key)
            for name, value in delta.items():
                if value is None:
                    held.pop(name, None)
                else:
                    held[name] = value
    rest = change.get("set")
    if isinstance(rest, dict):
        _apply(state, rest)


def _delta(
    before: DirState,
    after: DirState,
    seen_changed: Set[str] | None,
    own_changed: Set[str] | None = None,
) -> dict[str, Any] | None:
    """What takes `before` to `after`, as a log line holds it; None when `seen` (or `own`)
    changed and the caller did not say where. `seen_changed`: the caller's word that no other
    name's `seen` entry changed (the daemon's pass over a few files), so that 10,000 entries
    are neither compared nor copied on every save; a name added or removed elsewhere still
    shows in the count and makes it None. `own_changed`: the same for `own` (None: as
    `seen_changed`)."""
    seen = _keyed_delta(before.seen, after.seen, seen_changed)
    own = _keyed_delta(before.own, after.own, seen_changed if own_changed is None else own_changed)
    if seen is None or own is None:
        return None  # write it whole
    rest = {
        name: getattr(after, name)
        for name in _FIELDS
        if name not in _KEYED and getattr(after, name) != getattr(before, name)
    }
    return {"seen": seen, "own": own, "set": rest}


def _keyed_delta(
    before: Mapping[str, Any], after: Mapping[str, Any], changed: Set[str] | None
) -> dict[str, Any] | None:
    """The per-name change of one keyed field (see _delta), or None if it cannot be said."""
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


# A state's changes since its last full write are appended to a log beside it, one JSON line a
# save, so a save after one changed file writes ~200 bytes instead of the whole `seen` map
# (1 MB at 10,000 files). The log is named after a generation the base file records: a crash
# between writing a new base and removing the old log can never replay old changes over newer
# ones. It is folded into a new base once it outgrows this, or the base.
LOG_FOLD_BYTES = 256 * 1024
StateId = tuple[FileId | None, FileId | None]  # the base file and its log
# The most of one state file memoryd reads (none it writes comes near: a 100,000-file dir's
# cache is tens of MB): a bound, so that nothing in the state dir is read without end.
STATE_MAX_BYTES = 1 << 30


def _say_on_stderr(path: Path, problem: str) -> None:
    """The default `on_damaged`: a structlog warning."""
    get_logger().warning(
        "a state file cannot be used; memoryd does without it and rebuilds it",
        path=str(path),
        problem=problem,
        hint="nothing to do unless this recurs; then remove the file",
    )


class StateStore:
    """Loads and saves DirState and parse caches under `<state_dir>/dirs/`.

    A long-running process keeps what it last read or wrote in memory, and trusts it while the
    files on disk are unchanged (same inode, size, mtime): a pass over a 10,000-file dir then
    neither re-parses nor re-writes state that did not change.
    """

    def __init__(
        self, state_dir: Path, *, on_damaged: Callable[[Path, str], None] = _say_on_stderr
    ) -> None:
        self.root = state_dir / "dirs"
        self.on_damaged = on_damaged
        self._damaged: set[tuple[Path, str]] = set()  # said once each
        self._states: dict[Path, tuple[StateId, int, DirState]] = {}  # id, generation, state
        self._caches: dict[Path, tuple[FileId, dict[str, Scanned]]] = {}
        # A new token each time a dir's `seen` may have changed (read from disk, or saved with
        # a change to it): a caller that kept the token knows `seen` is what it last saved.
        self._seen_tokens: dict[Path, object] = {}
        self._locks = threading.local()  # per thread: real path -> (lock fd, depth)
        self._readers: dict[Path, tuple[int, int]] = {}  # real path -> (readers fd, depth)
        self._readers_lock = threading.Lock()

    def readers_path(self, real_path: Path) -> Path:
        return self.root / f"{dir_key(real_path)}.readers"

    def read_file(self, path: Path) -> bytes | None:
        """One of memoryd's own state files, whole; None when it is missing or damaged (not a
        regular file, a symlink, over STATE_MAX_BYTES, unreadable), which is said once."""
        try:
            return read_bounded(path, STATE_MAX_BYTES, follow=False)
        except FileNotFoundError:
            return None
        except OSError as error:
            self._damage(path, read_problem(error))
            return None

    def read_json(self, path: Path) -> Any:
        """One of memoryd's own JSON state files, parsed (bounded: `safejson`); None when it is
        missing or damaged, a file that does not parse (cut short, nested past any file
        memoryd writes) too: said once, done without, and replaced by the next save."""
        raw = self.read_file(path)
        if raw is None:
            return None
        try:
            return safejson.loads(raw, max_bytes=STATE_MAX_BYTES)
        except ValueError as error:
            self._damage(path, f"not memoryd's JSON ({error})")
            return None

    def _damage(self, path: Path, problem: str) -> None:
        if (path, problem) in self._damaged:
            return
        self._damaged.add((path, problem))
        with contextlib.suppress(Exception):  # telling must not fail the command
            self.on_damaged(path, problem)

    @contextlib.contextmanager
    def reading(self, real_path: Path) -> Iterator[None]:
        """Tell a running daemon that this process reads the dir's memory files, so that it
        does not take those reads for an agent consulting them (DESIGN §4.5): the readers file
        the daemon made for the dir is held open meanwhile, and the daemon sees it opened and
        closed (inotify) in the same stream as the reads. Writes nothing: without that file
        no daemon watches the dir, and there is no one to tell. Reentrant: a process opens it
        once however its passes nest (a pass inside a pass), one open and one close for the
        daemon to pair."""
        with self._readers_lock:
            held = self._readers.get(real_path)
            if held is not None:
                self._readers[real_path] = (held[0], held[1] + 1)
            else:
                path = self.readers_path(real_path)
                try:
                    fd, _ = open_regular(path, follow=False)  # a FIFO there: refused at once
                except FileNotFoundError:
                    fd = -1
                except OSError as error:
                    self._damage(path, read_problem(error))
                    fd = -1
                self._readers[real_path] = (fd, 1)
        try:
            yield
        finally:
            with self._readers_lock:
                fd, depth = self._readers[real_path]
                if depth > 1:
                    self._readers[real_path] = (fd, depth - 1)
                else:
                    del self._readers[real_path]
                    if fd >= 0:
                        os.close(fd)

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

    def _paths(self, real_path: Path) -> tuple[Path, Path]:
        key = dir_key(real_path)
        return self.root / f"{key}.json", self.root / f"{key}.cache"

    def _log_path(self, real_path: Path, generation: int) -> Path:
        return self.root / f"{dir_key(real_path)}.{generation}.log"

    def _state_id(self, real_path: Path, generation: int) -> StateId:
        path, _ = self._paths(real_path)
        return (_file_id(path), _file_id(self._log_path(real_path, generation)))

    def load(self, real_path: Path) -> DirState:
        path, _ = self._paths(real_path)
        held = self._states.get(real_path)
        if held is not None and self._state_id(real_path, held[1]) == held[0]:
            return _copy(held[2])
        base_id = _file_id(path)
        data = self.read_json(path)
        if not isinstance(data, dict):
            return DirState(path=str(real_path))
        generation = data.pop("_log", 0)
        generation = generation if isinstance(generation, int) else 0
        state = DirState(path=str(real_path))
        _apply(state, data)
        log_path = self._log_path(real_path, generation)
        log_id = _file_id(log_path)
        log = self.read_file(log_path) if log_id is not None else b""
        for line in (log or b"").splitlines():
            try:
                change = safejson.loads(line)
            except ValueError:
                continue  # a torn last line: that save never finished
            if isinstance(change, dict):
                _apply_change(state, change)
        if base_id is not None and log is not None:  # (a damaged log: the next save is whole)
            self._states[real_path] = ((base_id, log_id), generation, _copy(state))
        self._seen_tokens[real_path] = object()
        return state

    def seen_token(self, real_path: Path) -> object | None:
        """An opaque value that stays the same object while the dir's `seen` is the one this
        store last read or saved and nothing else wrote the state since; None if unknown."""
        held = self._states.get(real_path)
        if held is None or self._state_id(real_path, held[1]) != held[0]:
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
        path, _ = self._paths(real_path)
        held = self._states.get(real_path)
        if held is not None and held[0][0] is not None:
            state_id = self._state_id(real_path, held[1])
            if state_id == held[0]:
                delta = _delta(held[2], state, seen_changed, own_changed)
                if delta is not None and not any(delta.values()):
                    return  # nothing changed since we read or wrote it
                log_size = state_id[1][1] if state_id[1] is not None else 0
                base_size = state_id[0][1] if state_id[0] is not None else 0
                if delta is not None and log_size < max(LOG_FOLD_BYTES, base_size):
                    self._append(real_path, held[1], held[2], delta, state_id)
                    return
        generation = held[1] + 1 if held is not None else 0
        record = {f.name: getattr(state, f.name) for f in fields(state)}
        data = json.dumps(
            {**record, "_log": generation},
            ensure_ascii=True,
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        fsops.write_private(path, data)
        for stale in self.root.glob(f"{dir_key(real_path)}.*.log"):
            with contextlib.suppress(OSError):
                stale.unlink()
        written = _file_id(path)
        self._seen_tokens[real_path] = object()
        if written is not None:
            self._states[real_path] = ((written, None), generation, _copy(state))

    def _append(
        self,
        real_path: Path,
        generation: int,
        held: DirState,
        delta: dict[str, Any],
        state_id: StateId,
    ) -> None:
        """Log `delta`, and apply it to `held` (this store's own copy: no copy of `seen`).
        `state_id`: the files as they were checked to be `held`'s just before."""
        line = json.dumps(delta, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
        log_path = self._log_path(real_path, generation)
        # O_NONBLOCK: a FIFO put there since the load fails the save (ENXIO), never hangs it.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(log_path, flags | os.O_CLOEXEC, 0o600)
        try:
            # Written through to the kernel (a killed process loses nothing) but not fsynced:
            # the index write this follows has just paid for its own durability, and losing the
            # last lines to a power cut costs only this: a file deleted just before the cut
            # keeps its pointer, reported as a dead link, and a problem may be said twice.
            written = os.write(fd, line)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if delta["seen"]:
            self._seen_tokens[real_path] = object()
        log_before = state_id[1][1] if state_id[1] is not None else 0
        if written != len(line) or st.st_size != log_before + len(line):
            # Another process appended too (or the write fell short): what the file says now
            # is not `held` plus our line, so nothing is trusted until it is read again.
            del self._states[real_path]
            self._seen_tokens.pop(real_path, None)
            return
        # The caller goes on mutating its state's containers: `held` gets copies of those that
        # changed (as _copy makes; `seen` values are replaced, never mutated, by callers).
        rest = {k: _shallow(v) for k, v in delta["set"].items()}
        _apply_change(held, {"seen": delta["seen"], "own": delta["own"], "set": rest})
        log_id = (st.st_ino, st.st_size, st.st_mtime_ns)
        self._states[real_path] = ((state_id[0], log_id), generation, held)

    def release_cache(self, real_path: Path) -> None:
        """Stop holding the dir's parse cache in memory (the next load reads the file): for a
        pass that is done with the scan and needs the memory (100,000 entries are ~90 MB)."""
        self._caches.pop(real_path, None)

    def load_cache(self, real_path: Path) -> "dict[str, Scanned]":
        from memoryd.indexing.scan import load_cache

        _, path = self._paths(real_path)
        current = _file_id(path)
        held = self._caches.get(real_path)
        if held is not None and current is not None and held[0] == current:
            return held[1]  # read-only for callers: scan_dir only looks entries up
        data = self.read_file(path)
        if data is None:
            return {}
        files = load_cache(data)
        if current is not None:
            self._caches[real_path] = (current, files)
        return files

    def cache_data(self, real_path: Path) -> bytes | None:
        """The dir's parse cache file as saved (the held copy is not consulted), or None."""
        return self.read_file(self._paths(real_path)[1])

    def load_facts(self, real_path: Path) -> bytes | None:
        """The dream facts a pass saved for the dir (``FactsCache.dump``), or None."""
        return self.read_file(self._facts_path(real_path))

    def save_facts(self, real_path: Path, data: Iterable[bytes]) -> None:
        # Not fsynced: facts lost to a power cut are derived again by the next pass.
        fsops.write_private(self._facts_path(real_path), data, durable=False)

    def load_held(self, real_path: Path) -> bytes | None:
        """What the last held view found in the dir's archive (index_held.dump_positions)."""
        return self.read_file(self.root / f"{dir_key(real_path)}.held")

    def save_held(self, real_path: Path, data: bytes) -> None:
        # Not fsynced: it is kept under its archive's digest, and a lost one is parsed again.
        fsops.write_private(self.root / f"{dir_key(real_path)}.held", data, durable=False)

    def load_pins(self, real_path: Path) -> bytes | None:
        """The dir's restore pins (``restored.record``), or None."""
        try:
            return self._pins_path(real_path).read_bytes()
        except OSError:
            return None

    def save_pins(self, real_path: Path, data: bytes) -> None:
        # Durable: a pin is a person's decision, and it is written before the file moves back.
        fsops.write_private(self._pins_path(real_path), data)

    def _pins_path(self, real_path: Path) -> Path:
        return self.root / f"{dir_key(real_path)}.restored"

    def drop_facts(self, real_path: Path) -> None:
        """Remove the dir's saved dream facts (`forget --purge`): the next pass derives them."""
        self._facts_path(real_path).unlink()

    def _facts_path(self, real_path: Path) -> Path:
        return self.root / f"{dir_key(real_path)}.facts"

    def _repo_path(self, root: Path) -> Path:
        return self.root.parent / "repos" / f"{dir_key(root)}.tokens"

    def load_repo_tokens(self, root: Path) -> bytes | None:
        """The saved token cache of a repo root (``repo.dump_sources``), or None."""
        return self.read_file(self._repo_path(root))

    def save_repo_tokens(self, root: Path, data: bytes) -> None:
        # Not fsynced: a cache lost to a power cut costs one rebuild.
        fsops.write_private(self._repo_path(root), data, durable=False)

    def save_cache(self, real_path: Path, files: "dict[str, Scanned]") -> None:
        from memoryd.indexing.scan import dump_cache

        _, path = self._paths(real_path)
        held = self._caches.get(real_path)
        same = held is not None and (held[1] is files or held[1] == files)
        if same and held is not None and held[0] == _file_id(path):
            return
        data = dump_cache(files)
        if held is None and self.read_file(path) == data:
            return
        # Not fsynced (the fsyncs of a 2 MB file were most of a one-change `memoryd index`):
        # after a power cut the file is the previous cache, still true entry by entry (each is
        # checked against its file's stat), or damaged and read as none (sealed's CRC).
        fsops.write_private(path, data, durable=False)
        written = _file_id(path)
        if written is not None:
            # Kept as given, not copied (10,000 entries are half a MB of a 60 MB daemon): a
            # scan's `files` is never changed once the scan is made (the next scan copies).
            self._caches[real_path] = (written, files)
