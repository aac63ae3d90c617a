"""Keep one memory dir's MEMORY.md in step with its files.

The use cases (`update`, `check`, `restore_pointers`, `update_changed` for the daemon,
`update_after_moves` for the dream pass, `ownership_for_dream`) each fill in a `Request` and
run one pass, which reads like its name:
- read: a snapshot of the dir (`_read_full`: the scan, both index texts, ownership; or the
  view the daemon's last pass left, `Held`, checked against the files by stat);
- plan: the edit, a pure function of the snapshot, the dir's state and the policy
  (`plan_full` over the whole index, `index_held.edit_changed` over the held view), both
  giving one `Plan`;
- write: `_write_and_report` swaps the plan in with the check-and-swap writer
  (fsops.replace_file, told the runtime's own-write callback) and verifies what it wrote;
- report: audit rows, said-once bookkeeping and the dir's state, after the write.
"""

import contextlib
import hashlib
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import date
from enum import StrEnum
from typing import Any, Protocol

from memoryd import fsops, gitwork, index_held
from memoryd.agentview import Hidden, ViewKind, view_kind_of
from memoryd.config import IndexConfig
from memoryd.conflicts import MARK as CONFLICT_MARK
from memoryd.discover.found import MemoryDir
from memoryd.errors import MemorydError, WriteConflict
from memoryd.fsops import FileIdentity
from memoryd.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    MANAGE_MARK,
    OFF_MARK,
    PREV_NAME,
    Budget,
    Entry,
    IndexEdit,
    IndexInput,
    LinkKind,
    Ownership,
    Place,
    decide_ownership,
    local_links,
    measure_view,
    note_own,
    release_parsed,
    split_lines,
    update_index,
    verify,
    view_of,
)
from memoryd.runtime import Runtime
from memoryd.scan import DirScan, Scanned, scan_dir
from memoryd.state import DirState

MAX_INDEX_BYTES = 8 * 1024 * 1024
# The archive is never loaded whole by the agent and grows ~200 bytes per memory: 8 MiB would
# be reached near 43,000 memories, and the dir would then stop being managed.
MAX_ARCHIVE_BYTES = 128 * 1024 * 1024
LINKED_BYTES = 512 * 1024
CONFLICT_RETRIES = 3


@dataclass(slots=True)
class IndexText:
    """An index file as read: its text (None when missing) and the identity to re-check."""

    text: str | None
    identity: FileIdentity | None
    bom: bool = False
    error: str = ""
    read_only: bool = False  # no write permission for its owner: the person's "do not touch"


class IndexStatus(StrEnum):
    """How an index pass ended (a str: JSON output and audit rows carry the value)."""

    UNCHANGED = "unchanged"  # nothing to do, nothing written
    UPDATED = "updated"  # written and verified
    WOULD_CHANGE = "would_change"  # --check or a dry run: an update would write (see `diff`)
    UNMANAGED = "unmanaged"  # not memoryd's to edit (see `message`)
    CONFLICT = "conflict"  # another writer kept changing it: nothing was lost, nothing written
    BUSY = "busy"  # another memoryd process holds the dir (the daemon looks again)
    SETTLING = "settling"  # an index file is being written by another program
    ERROR = "error"  # the write failed, or what was written failed verification


@dataclass(slots=True)
class IndexOutcome:
    dir: MemoryDir
    status: IndexStatus
    ownership: Ownership | None = None
    edit: IndexEdit | None = None
    diff: str = ""
    message: str = ""
    problems: list[str] = field(default_factory=list)
    scan: DirScan | None = None
    retry_after: float | None = None  # when to look again (files in their grace, settling)
    held: "Held | None" = None  # for the next pass of a caller that keeps it (the daemon)
    held_edit: bool = False  # the pass took the held view (the changed files only), not the full
    # ownership_for_dream: what it read, for the dream pass to take rather than read again.
    snapshot: "Snapshot | None" = None

    @property
    def write_failed(self) -> bool:
        """Whether the index could not be written at all (a full disk, permissions), as
        opposed to written and then failing verification."""
        return self.status is IndexStatus.ERROR and not self.problems


@dataclass(slots=True)
class Held:
    """What a pass over a managed dir leaves for the next one, so that a pass after a few
    changed files costs what those files cost rather than what the dir holds (DESIGN §10:
    one change among 10,000 within 15 ms). Valid while both index files are as written."""

    scan: DirScan
    index: index_held.HeldIndex
    memories: dict[str, Entry]
    main: FileIdentity | None
    archive: FileIdentity | None
    main_bom: bool
    archive_bom: bool
    waiting: frozenset[str]
    config: IndexConfig  # the settings it was made under: a reload means a full pass
    # The state store's token for `seen` as this pass saved it (naming every file of
    # `memories`, and files that cannot be parsed for now): while the store still gives it,
    # only changed files can be unknown to it.
    seen_token: object | None = None


class IndexKeeper(Protocol):
    """The version store (memoryd.versions) as `read_index_file` sees it (its `versions`):
    told of every index file's bytes read."""

    def index_read(self, dir_fd: int, name: str, data: bytes, sha: str) -> None: ...


def read_index_file(dir_fd: int, name: str, versions: IndexKeeper | None = None) -> IndexText:
    limit = MAX_ARCHIVE_BYTES if name == ARCHIVE_NAME else MAX_INDEX_BYTES
    try:
        data, st = fsops.read_regular(dir_fd, name, limit)
    except FileNotFoundError:
        return IndexText(None, None)
    except ValueError:
        return IndexText(None, None, error=f"{name} is over {limit} bytes")
    except OSError as error:
        return IndexText(None, None, error=f"{name} cannot be read as a file ({error.strerror})")
    sha = hashlib.sha256(data).hexdigest()
    if versions is not None:
        versions.index_read(dir_fd, name, data, sha)
    identity = FileIdentity(st.st_ino, st.st_size, st.st_mtime_ns, sha)
    read_only = not st.st_mode & stat.S_IWUSR
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return IndexText(None, identity, error=f"{name} is not UTF-8 text", read_only=read_only)
    bom = text.startswith("\ufeff")
    return IndexText(text.removeprefix("\ufeff"), identity, bom, read_only=read_only)


def _as_read(dir_fd: int, name: str, known: IndexText) -> bool:
    """Whether an index file is still the one `known` was read from: the same inode, size and
    mtime (the identities the held view trusts too; the swap checks the bytes), and as
    writable as it was; or still missing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return known.identity is None and not known.error
    ident = known.identity
    return (
        ident is not None
        and stat.S_ISREG(st.st_mode)
        and (st.st_ino, st.st_size, st.st_mtime_ns) == (ident.ino, ident.size, ident.mtime_ns)
        and known.read_only == (not st.st_mode & stat.S_IWUSR)
    )


def index_file_again(
    dir_fd: int, name: str, known: IndexText | None, versions: IndexKeeper | None = None
) -> IndexText:
    """An index file this pass read already (`known`), while it is still that file; else it
    is read now (read_index_file): each file is read once a pass."""
    if known is not None and _as_read(dir_fd, name, known):
        return known
    return read_index_file(dir_fd, name, versions)


# --- the same bytes on every machine -----------------------------------------------------------
# In a git work tree, what memoryd writes is shared with every clone: two machines with the same
# files must write the same bytes, so nothing there depends on a local folder name, a file's
# mtime (a checkout's time) or today's date.
@dataclass(frozen=True, slots=True)
class Local:
    """What a pass writes that depends on where the dir is: the index title, the date the
    archive's headings carry (None: undated), and whether a memory's age is its frontmatter
    date alone (`shared`: in a work tree, where mtimes are a checkout's)."""

    heading: str
    today: date | None
    shared: bool

    def entry(self, scanned: Scanned) -> Entry:
        entry = scanned.entry()
        return replace(entry, age_ts=scanned.modified_ts) if self.shared else entry


def _local(rt: Runtime, md: MemoryDir) -> Local:
    tree = gitwork.work_tree(md.real_path)
    if tree is None:
        return Local(md.heading, rt.today(), False)
    if md.kind in ("agent", "repo-agent", "repo-agent-local"):
        return Local(md.heading, None, True)
    # The dir's path in the repo, never the clone's folder name.
    rel = md.real_path.relative_to(tree.top).as_posix() if md.real_path != tree.top else "."
    return Local(" ".join(rel.splitlines()), None, True)


def _read_only_reason(md: MemoryDir, texts: Sequence[IndexText]) -> str:
    """Why memoryd leaves the index alone when a person made one of its files read-only."""
    for name, found in zip((INDEX_NAME, ARCHIVE_NAME), texts, strict=True):
        if found.read_only:
            return (
                f'{name} is read-only: memoryd takes that as "do not touch" and writes '
                f"nothing; `chmod u+w {md.path / name}` lets it manage the index again"
            )
    return ""


BOM = "\ufeff".encode()


def _encode(text: str, bom: bool) -> bytes:
    return (("\ufeff" if bom else "") + text).encode("utf-8")


def _linked_texts(dir_fd: int, main: str, scan: DirScan) -> dict[str, str]:
    """Texts of local .md files MEMORY.md points to (category files of a tree index)."""
    out: dict[str, str] = {}
    for line in split_lines(main):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL or not link.target.endswith(".md"):
            continue
        if link.target in out or link.target not in scan.present:
            continue
        info = scan.files.get(link.target)
        if info is not None and info.kind == "problem":
            continue
        try:
            data, _ = fsops.read_regular(dir_fd, link.target, LINKED_BYTES)
        except (OSError, ValueError):
            continue
        out[link.target] = data.decode("utf-8", "replace")
    return out


def _ready(memories: dict[str, Scanned], now: float, grace: float) -> set[str]:
    return {n for n, s in memories.items() if now - s.mtime_ns / 1e9 >= grace}


def _report_problems(
    rt: Runtime,
    md: MemoryDir,
    problems: Mapping[str, Scanned],
    state: DirState,
    settle: float,
    scope: Set[str] | None = None,
) -> float | None:
    """Report each problem file once; a file still settling is looked at again instead.

    An agent's file that fails to parse right after it was written may be half-written:
    it is never acted on, and reported only once it has been still for `settle` seconds.
    Returns when to look again, if anything is still settling. `scope`: the only names
    looked at (the rest are as the last pass left them); None: the whole dir.
    """
    current = set()
    now = rt.clock()
    retry: float | None = None
    for name, info in sorted(problems.items()):
        key = f"unparseable:{name}"
        current.add(key)
        young = now - info.mtime_ns / 1e9 < settle
        if info.problem_kind == "unstable" or young:
            due = now + 1.0 if info.problem_kind == "unstable" else info.mtime_ns / 1e9 + settle
            retry = due if retry is None else min(retry, due)
            continue
        signature = f"{info.problem_kind}:{info.sha256 or info.mtime_ns}"
        if state.report_once(key, signature):
            rt.audit.write(
                "file.unparseable",
                dir=md.path,
                file=name,
                problem=info.problem_message,
                hint=info.problem_hint,
                kind=info.problem_kind,
            )
    if scope is None:
        state.forget_reports("unparseable:", current)
    else:
        for name in scope:
            if f"unparseable:{name}" not in current:
                state.reported.pop(f"unparseable:{name}", None)
    return retry


def _count_changed(state: DirState, scan: DirScan, memories: Set[str], now: float) -> None:
    """The daemon's pile-up count: memory files added or changed since the last dream pass."""
    fresh = set(scan.changed) & memories
    if fresh:
        state.changed_since_dream = sorted(set(state.changed_since_dream) | fresh)
        state.last_change_ts = now


def _report_links(rt: Runtime, md: MemoryDir, edit: IndexEdit, state: DirState) -> None:
    current = set()
    for event, targets in (
        ("index.dead_link", edit.dead_links),
        ("index.invalid_link", edit.invalid_links),
    ):
        for target in sorted(set(targets)):
            key = f"{event}:{target}"
            current.add(key)
            if state.report_once(key):
                rt.audit.write(event, dir=md.path, file=INDEX_NAME, target=target)
    state.forget_reports("index.dead_link:", current)
    state.forget_reports("index.invalid_link:", current)


def _diff(name: str, before: str | None, after: str | None) -> str:
    import difflib  # here: only `index --check` and a dry run show a diff

    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        (after or "").splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


BUSY_RETRY = 1.0  # seconds until a caller that would not wait for the dir's lock looks again

# An index file someone else changed this recently may be mid-write: `tool > MEMORY.md`
# truncates it, then writes, and memoryd reading in between would take the blank file for
# a managed, empty index and swap its own in over the writer's (whose bytes would land in
# the old file). So it is not acted on until it has been still this long. A blank one waits
# longer: the gap before its first write is the tool's whole run time.
INDEX_SETTLE = 0.5
BLANK_SETTLE = 5.0
SETTLE_WAIT = BLANK_SETTLE + 1.0  # the longest a one-shot command waits for one to settle
# A file dated further ahead than this is not being written now: the clock cannot tell.
FUTURE_SLACK = 2.0


def settles_at(blank: bool, mtime_ns: int, now: float) -> float | None:
    """When an index file another program last changed at `mtime_ns` may be taken as
    written; None: now. Blank or changed within the last moments, it is being written."""
    changed = mtime_ns / 1e9
    due = changed + (BLANK_SETTLE if blank else INDEX_SETTLE)
    return due if changed - FUTURE_SLACK <= now < due else None


class BeingWritten(Exception):
    """An index file is being written by another program (see settles_at)."""

    def __init__(self, path: str, due: float, age: float) -> None:
        super().__init__(path)
        self.path = path
        self.due = due
        self.age = age


def _settling(
    md: MemoryDir,
    texts: Sequence[tuple[str, IndexText]],
    settled: list[Any],
    now: float,
    *,
    blank_only: bool = False,
) -> BeingWritten | None:
    """The index file (of `texts`, MEMORY.md's then the archive's) that another program is
    still writing, if any; a file memoryd's own last pass left (`settled`) never is."""
    for position, (name, found) in enumerate(texts):
        identity = found.identity
        if identity is None:
            continue
        if len(settled) > position and settled[position] == _stat_of(identity):
            continue  # as memoryd wrote it
        blank = found.text is not None and not found.text.strip()
        if blank_only and not blank:
            continue
        due = settles_at(blank, identity.mtime_ns, now)
        if due is not None:
            return BeingWritten(str(md.path / name), due, now - identity.mtime_ns / 1e9)
    return None


@dataclass(frozen=True, slots=True)
class Request:
    """What a caller asks of one index pass (the policy; the use cases below each fill it in).

    `forget`: files memoryd itself just moved away, whose pointers go even if it never saw
    them before. `preferred`: pointer lines to use for files coming back from the trash;
    `placements`: where their pointers sat (index.Place), to put them back there. `grace`: how
    long a new file waits for the agent's own pointer; `settle`: how long a file that cannot
    be parsed must be still before it is reported. `hold`: leave what a pass over just the
    changed files needs in `outcome.held`, to be passed back as `held` with `only` (the names
    that changed) by a caller that keeps it; `previous`: that caller's last scan.
    `scanned`: a full scan of the dir this pass already made under its lock (the settled
    view's, where that view did not apply): the full view takes it as it is, so that no file
    is read twice in one pass.
    `wait_lock=False`: when another process holds the dir's writer lock, nothing is done and
    the outcome is "busy". `daemon`: the caller is the daemon (a file being written is
    looked at again later, not waited for). `persist_cache=False`: the caller keeps the scan
    (the daemon writes its cache with the heartbeat).
    """

    check: bool = False
    grace: float = 0.0
    mode: str | None = None
    forget: Set[str] = frozenset()
    preferred: Mapping[str, str] = field(default_factory=dict)
    placements: Mapping[str, Place] = field(default_factory=dict)
    settle: float = 0.0
    previous: DirScan | None = None
    scanned: DirScan | None = None
    only: Set[str] | None = None
    persist_cache: bool = True
    held: Held | None = None
    hold: bool = False
    wait_lock: bool = True
    daemon: bool = False
    # Try the held view of a settled index first (see _index_settled).
    settled: bool = False
    # MEMORY.md and the archive as the caller read them (the dream pass's probe): taken
    # instead of read again while each is still that file (index_file_again).
    known: tuple[IndexText | None, IndexText | None] = (None, None)


# --- the use cases ------------------------------------------------------------------------------
def update(
    rt: Runtime, md: MemoryDir, *, grace: float = 0.0, forget: Set[str] = frozenset()
) -> IndexOutcome:
    """`memoryd index` (and the index update after recovery, with the files it moved back as
    `forget`): bring MEMORY.md in step with the dir's files. While the index files are as
    memoryd's last verified pass left them, only the lines of files that changed since are
    looked at (see _index_settled)."""
    return run_pass(rt, md, Request(grace=grace, forget=forget, settled=True))


def check(rt: Runtime, md: MemoryDir) -> IndexOutcome:
    """`memoryd index --check` and `dirs`: what an update would do, as a diff; writes nothing."""
    return run_pass(rt, md, Request(check=True))


def restore_pointers(
    rt: Runtime, md: MemoryDir, preferred: Mapping[str, str], placements: Mapping[str, Place]
) -> IndexOutcome:
    """After a restore from the trash: the restored files' pointer lines come back as they
    were (`preferred`), where they sat (`placements`)."""
    return run_pass(rt, md, Request(preferred=preferred, placements=placements))


def update_changed(
    rt: Runtime,
    md: MemoryDir,
    *,
    grace: float,
    settle: float,
    previous: DirScan | None,
    changed: Set[str] | None,
    held: Held | None,
) -> IndexOutcome:
    """The daemon's pass after its debounce: `changed` names what the events reported (None:
    look at every file, re-reading only what changed since `previous`); with the `held` view
    its last pass left, it costs what the changed files cost. Never waits for another
    process's lock ("busy"), or for an index being written ("settling"): it looks again."""
    return run_pass(
        rt,
        md,
        Request(
            grace=grace,
            settle=settle,
            previous=previous,
            only=changed,
            persist_cache=False,  # kept in memory; written by the heartbeat
            held=held if changed else None,
            hold=True,
            wait_lock=False,
            daemon=True,
        ),
    )


def ownership_for_dream(rt: Runtime, md: MemoryDir) -> IndexOutcome:
    """For the dream pass, which may move only files whose pointer lines it may remove:
    whether memoryd manages the dir's index (`outcome.ownership`), and the scan made to find
    out (`outcome.scan`). No edit is planned and nothing is written or reported. Status
    "settling" when MEMORY.md is blank because a program is writing it (what it will hold
    decides), "unmanaged" with the reason, else "unchanged"."""
    waited = 0.0
    try:
        while True:
            state = rt.store.load(md.real_path)
            snapshot = _read_full(rt, md, state, Request(check=True))
            # A dream pass acts on what it finds: a blank MEMORY.md that is being
            # written is not "missing or blank, so managed". It waits a little for it.
            busy = _settling(md, snapshot.texts, state.settled, rt.clock(), blank_only=True)
            if busy is None:
                break
            pause = max(busy.due - rt.clock(), 0.05)
            if waited + pause > SETTLE_WAIT:
                return _settling_outcome(md, busy, False)
            rt.sleep(pause)
            waited += pause
    finally:
        release_parsed()
    outcome = IndexOutcome(
        md, IndexStatus.UNCHANGED, snapshot.ownership, scan=snapshot.scan, snapshot=snapshot
    )
    if not snapshot.ownership.managed:
        outcome.status, outcome.message = IndexStatus.UNMANAGED, snapshot.ownership.reason
    return outcome


def index_dir(
    rt: Runtime,
    md: MemoryDir,
    *,
    check: bool = False,
    grace: float = 0.0,
    mode: str | None = None,
    forget: Set[str] = frozenset(),
    preferred: Mapping[str, str] | None = None,
    placements: Mapping[str, Place] | None = None,
    settle: float = 0.0,
    previous: DirScan | None = None,
    only: Set[str] | None = None,
    persist_cache: bool = True,
    held: Held | None = None,
    hold: bool = False,
    wait_lock: bool = True,
    daemon: bool = False,
) -> IndexOutcome:
    """Any combination of a Request's fields, for the tests and benches that drive a pass
    directly; memoryd itself calls the use cases above."""
    return run_pass(
        rt,
        md,
        Request(
            check=check,
            grace=grace,
            mode=mode,
            forget=forget,
            preferred=preferred or {},
            placements=placements or {},
            settle=settle,
            previous=previous,
            only=only,
            persist_cache=persist_cache,
            held=held,
            hold=hold,
            wait_lock=wait_lock,
            daemon=daemon,
        ),
    )


# --- one pass: read -> plan -> write -> report -------------------------------------------------
def run_pass(rt: Runtime, md: MemoryDir, req: Request) -> IndexOutcome:
    """One index pass of one dir under its locks; retries from the other writer's version.

    The held view (a pass over just the changed files) is tried first when the caller has one;
    where it does not apply (see _index_changed) or another writer got in, the full view runs.
    """
    writes = not (req.check or rt.dry_run)
    with contextlib.ExitStack() as stack:
        if writes and not stack.enter_context(rt.store.lock(md.real_path, wait=req.wait_lock)):
            return IndexOutcome(
                md,
                IndexStatus.BUSY,
                message="another memoryd process is working on this dir; looking again shortly",
                retry_after=time.time() + BUSY_RETRY,
            )
        previous = req.previous
        scanned: DirScan | None = None
        # A restore, and a dir git tracks, take the full view: the held views know only that
        # the dir was managed, not whether a tracked one is memoryd's to write (see _read_full).
        restoring = bool(req.preferred or req.placements) or bool(
            gitwork.hands_off_reason(md.real_path, rt.named, rt.config.paths.manage_repos)
        )
        if req.held is not None and req.only is not None and writes and not restoring:
            try:
                fast = _index_changed(
                    rt,
                    md,
                    req.held,
                    req.only | req.forget,
                    req.grace,
                    req.settle,
                    req.forget,
                    req.mode,
                )
            except WriteConflict as conflict:
                _report_conflict(rt, md, 1, conflict)
                fast = None
                previous = None  # the other writer may have changed anything: scan in full
            if fast is not None:
                return fast
        elif req.settled and writes and not restoring and req.held is None and not req.hold:
            try:
                fast, scanned = _index_settled(rt, md, req)
            except WriteConflict as conflict:
                _report_conflict(rt, md, 1, conflict)
                fast, scanned = None, None  # the other writer may have changed anything
            if fast is not None:
                return fast
        waited = 0.0
        try:
            attempt = 0
            while attempt < CONFLICT_RETRIES:
                attempt += 1
                # After a conflict the other writer may have changed anything: scan in full.
                first = attempt == 1
                try:
                    return _index_once(
                        rt,
                        md,
                        replace(
                            req,
                            previous=previous if first else None,
                            scanned=scanned if first else None,
                            only=req.only if first else None,
                            known=req.known if first else (None, None),
                        ),
                    )
                except WriteConflict as conflict:
                    _report_conflict(rt, md, attempt, conflict)
                except BeingWritten as busy:
                    # Like a memory file still changing: the daemon looks again once it is
                    # due; a command waits a little for it, then says so and leaves it.
                    pause = max(busy.due - rt.clock(), 0.05)
                    if req.daemon or waited + pause > SETTLE_WAIT:
                        return _settling_outcome(md, busy, req.daemon)
                    rt.sleep(pause)
                    waited += pause
                    attempt -= 1  # not a conflict: the wait does not use up a retry
        finally:
            release_parsed()
        return IndexOutcome(
            md,
            IndexStatus.CONFLICT,
            message=(
                f"{md.path / INDEX_NAME}: another writer kept changing it; nothing was lost, "
                "memoryd will try again on the next change"
            ),
        )


def _report_conflict(rt: Runtime, md: MemoryDir, attempt: int, conflict: WriteConflict) -> None:
    rt.audit.write(
        "index.conflict", dir=md.path, file=INDEX_NAME, attempt=attempt, detail=str(conflict)
    )


def _settling_outcome(md: MemoryDir, busy: BeingWritten, daemon: bool) -> IndexOutcome:
    then = "memoryd looks again once it is still" if daemon else "rerun once it is written"
    return IndexOutcome(
        md,
        IndexStatus.SETTLING,
        message=(
            f"{busy.path} is being written by another program (changed {busy.age:.1f} s ago, "
            f"or blank); nothing was changed: {then}"
        ),
        retry_after=busy.due,
    )


@dataclass(slots=True)
class Snapshot:
    """The full view of a dir as one pass read it: the scan and both index texts, each once."""

    scan: DirScan
    main: IndexText
    archive: IndexText
    ownership: Ownership

    @property
    def texts(self) -> tuple[tuple[str, IndexText], tuple[str, IndexText]]:
        return ((INDEX_NAME, self.main), (ARCHIVE_NAME, self.archive))


def _read_full(rt: Runtime, md: MemoryDir, state: DirState, req: Request) -> Snapshot:
    """Read: scan the dir (a caller's own last scan is the fresher cache: the daemon writes
    its cache to disk only with the heartbeat), read both index files, decide ownership."""
    cfg = rt.config
    if req.scanned is not None:
        scan = req.scanned
    else:
        cache = req.previous.files if req.previous is not None else None
        scan = scan_dir(
            md.real_path,
            cache if cache is not None else rt.store.load_cache(md.real_path),
            max_file_bytes=cfg.parse.max_file_bytes,
            max_frontmatter_bytes=cfg.parse.max_frontmatter_bytes,
            previous=req.previous,
            only=req.only,
            versions=rt.versions,
        )
    memories = set(scan.memories)
    with fsops.open_dir(md.real_path) as dir_fd:
        main = index_file_again(dir_fd, INDEX_NAME, req.known[0], rt.versions)
        archive = index_file_again(dir_fd, ARCHIVE_NAME, req.known[1], rt.versions)
        if main.error or archive.error:
            ownership = Ownership(False, main.error or archive.error)
        else:
            override = req.mode or cfg.override_for(md.path).mode
            known = set(state.seen) if state.known and state.managed else None
            ownership = decide_ownership(
                main.text, archive.text, {}, memories, override, known,
                as_left=_as_left(state, main.identity),
            )  # fmt: skip
            tracked = _tracked(rt, md, main.text, ownership, override)
            if tracked:
                ownership = Ownership(False, tracked)
            elif not ownership.managed and main.text and override == "auto":
                # Only now read the files MEMORY.md points to (a tree index's category
                # files): it costs a read of each, which most dirs never need.
                linked = _linked_texts(dir_fd, main.text, scan)
                ownership = decide_ownership(
                    main.text, archive.text, linked, memories, override, known
                )
        read_only = _read_only_reason(md, (main, archive))
        if read_only and ownership.managed:
            ownership = Ownership(False, read_only)
    return Snapshot(scan, main, archive, ownership)


def _tracked(
    rt: Runtime, md: MemoryDir, main: str | None, ownership: Ownership, override: str
) -> str:
    """Why memoryd leaves the dir alone because git tracks its files ("" when it does not):
    the first reason, before how the index is organised, unless the index opts in (the
    config, the manage mark), says off, or holds a merge's conflict markers."""
    if override != "auto" or MANAGE_MARK in (main or ""):
        return ""
    if not ownership.managed and (CONFLICT_MARK in ownership.reason or OFF_MARK in (main or "")):
        return ""
    return gitwork.hands_off_reason(md.real_path, rt.named, rt.config.paths.manage_repos)


@dataclass(slots=True)
class Plan:
    """What a pass decided to write, made before anything is written; one shape for the full
    and the held view. `scope`: the only names the pass looked at (the held view), None: all."""

    edit: IndexEdit
    main: IndexText  # as read: its text, and the identity the writer re-checks
    archive: IndexText  # (the held view's: the identity only; the held index has the lines)
    main_changed: bool
    archive_changed: bool
    scan: DirScan
    memories: dict[str, Entry]
    scope: Set[str] | None
    problems: Mapping[str, Scanned]  # the files that cannot be parsed for now, of `scope`
    # The held view: the archive's new lines, the bytes each file should hold now (the swap
    # compares them instead of hashing), and the held index after the edit.
    archive_data: fsops.Content | None = None
    expected: tuple[bytes | None, fsops.Content | None] = (None, None)
    index: index_held.HeldIndex | None = None
    # Whether `memories` are all the dir's and the state's `seen` names them (see Held).
    vouches_for_seen: bool = True

    @property
    def changed(self) -> bool:
        return self.main_changed or self.archive_changed


def plan_full(
    snapshot: Snapshot,
    state: DirState,
    req: Request,
    cfg: IndexConfig,
    md: MemoryDir,
    now: float,
    local: Local,
) -> Plan:
    """Plan: the edit of the whole index for the snapshot and the dir's state (pure)."""
    scan, main, archive = snapshot.scan, snapshot.main, snapshot.archive
    memories = scan.memories
    entries = {n: local.entry(s) for n, s in memories.items()}
    edit = update_index(
        IndexInput(
            main=main.text,
            archive=archive.text,
            memories=entries,
            present=scan.present,
            seen={
                # Files memoryd saw leave on an earlier pass: their pointers still go.
                **{n: ("", "") for n in state.gone if n not in scan.present},
                **(state.seen_pairs() if state.known else {}),
                **{name: ("", "") for name in req.forget if name not in memories},
            },
            preferred=req.preferred,
            placements=req.placements,
            ready=_ready(memories, now, req.grace),
            own=state.own if state.known else {},
            heading=local.heading,
            separator=cfg.separator,
            budget=_budget(cfg),
            now=now,
            today=local.today,
            view=view_kind(md),
        )
    )
    return Plan(
        edit,
        main,
        archive,
        edit.main != main.text,
        edit.archive != archive.text,
        scan,
        entries,
        None,
        scan.problems,
    )


def _index_once(rt: Runtime, md: MemoryDir, req: Request) -> IndexOutcome:
    """The full view: read all of the dir, plan the whole edit, write, report."""
    writes = not (req.check or rt.dry_run)
    state = rt.store.load(md.real_path)
    if state.prev and writes:
        _late_write(rt, md, state)
    snapshot = _read_full(rt, md, state, req)
    scan, ownership = snapshot.scan, snapshot.ownership
    now = rt.clock()
    outcome = IndexOutcome(md, IndexStatus.UNCHANGED, ownership, scan=scan)
    if writes:
        outcome.retry_after = _report_problems(rt, md, scan.problems, state, req.settle)
        _remove_stray_temps(rt, md, scan)
        if state.known:
            _count_changed(state, scan, scan.memories.keys(), now)
    if not ownership.managed:
        outcome.status, outcome.message = IndexStatus.UNMANAGED, ownership.reason
        if writes:
            # Said once per kind of reason, not again each time a count in it changes.
            if state.report_once("unmanaged", re.sub(r"\d+", "N", ownership.reason)):
                rt.audit.write("index.unmanaged", dir=md.path, reason=ownership.reason)
            state.managed = False
            state.settled = []
            with rt.store.transaction():  # the pass's saves commit as one
                rt.store.save(md.real_path, state)
                rt.store.save_cache(md.real_path, scan.files)
        return outcome
    plan = plan_full(snapshot, state, req, rt.config.index, md, now, _local(rt, md))
    outcome.edit = plan.edit
    if not writes:
        if plan.changed:
            outcome.status = IndexStatus.WOULD_CHANGE
            outcome.diff = _plan_diff(snapshot, plan)
        return outcome
    if plan.changed:
        busy = _settling(md, snapshot.texts, state.settled, now)
        if busy is not None:
            # What this pass found out is kept (what it reported, the files that left); the
            # index is left to its writer.
            state.note_gone(_left(state, scan, req.forget), now)
            with contextlib.suppress(OSError):  # as after a failed write
                rt.store.save(md.real_path, state)
            raise busy
    return _write_and_report(rt, md, req, state, plan, outcome, now)


def _plan_diff(snapshot: Snapshot, plan: Plan) -> str:
    edit = plan.edit
    return (_diff(INDEX_NAME, snapshot.main.text, edit.main) if plan.main_changed else "") + (
        _diff(ARCHIVE_NAME, snapshot.archive.text, edit.archive) if plan.archive_changed else ""
    )


def _write_and_report(
    rt: Runtime,
    md: MemoryDir,
    req: Request,
    state: DirState,
    plan: Plan,
    outcome: IndexOutcome,
    now: float,
) -> IndexOutcome:
    """Write the plan with the check-and-swap writer, verify it, then report and remember:
    audit rows, said-once bookkeeping and the dir's state, all after the write."""
    cfg, edit, scan = rt.config.index, plan.edit, plan.scan
    left = _left(state, scan, req.forget, plan.scope)
    main_id, archive_id = plan.main.identity, plan.archive.identity
    if plan.changed:
        written = _write(rt, md, plan, prev_was=state.prev)
        if isinstance(written, str):
            # The files that left are remembered, so that their pointers go once a write
            # succeeds (a full disk after a dream's moves must not leave them for good).
            # (If the state cannot be saved either, `seen` still names them, or the dream
            # pass's journal does: see dream.write.apply.)
            state.note_gone(left, now)
            with contextlib.suppress(OSError):
                rt.store.save(md.real_path, state)
            return IndexOutcome(
                md,
                IndexStatus.ERROR,
                outcome.ownership,
                edit,
                message=written,
                scan=scan,
                held_edit=outcome.held_edit,
            )
        main_id, archive_id = written.main, written.archive
        if written.prev is not None:
            state.prev = written.prev
        outcome.status = IndexStatus.UPDATED
        state.last_index_ts = now
        outcome.problems = _verify(md, plan, written, rt.versions)
        _report_verify(rt, md, outcome)
    if edit.waiting:
        due = min(scan.files[n].mtime_ns / 1e9 + req.grace for n in edit.waiting)
        outcome.retry_after = due if outcome.retry_after is None else min(due, outcome.retry_after)
    _report_links(rt, md, edit, state)
    state.settled = (
        [] if outcome.problems else settled_mark(main_id, archive_id, cfg, _local(rt, md).heading)
    )
    state.known = True
    state.managed = True
    state.reported.pop("unmanaged", None)
    state.note_gone(left, now)
    if plan.scope is None:
        _remember_all(state, plan, cfg.separator, req.preferred.keys())
        with rt.store.transaction():  # the pass's saves commit as one
            rt.store.save(md.real_path, state)
            if req.persist_cache:
                rt.store.save_cache(md.real_path, scan.files)
    else:
        own_changed = _remember_changed(state, plan, cfg.separator)
        rt.store.save(md.real_path, state, seen_changed=plan.scope, own_changed=own_changed)
    if (
        (req.hold or plan.scope is not None)
        and outcome.status
        in (
            IndexStatus.UPDATED,
            IndexStatus.UNCHANGED,
        )
        and edit.main is not None
    ):
        index = plan.index
        if index is None:
            index = index_held.hold(edit.main, edit.archive, set(edit.dead_links))
        held_bom = (plan.main.bom, plan.archive.bom)
        outcome.held = Held(
            scan,
            index,
            plan.memories,
            main_id,
            archive_id,
            *held_bom,
            frozenset(edit.waiting),
            cfg,
            # Only a pass that began from its own `seen` leaves one that names `memories`
            # (after another process's save, the next full pass makes them agree again).
            rt.store.seen_token(md.real_path) if plan.vouches_for_seen else None,
        )
    return outcome


def _remember_all(state: DirState, plan: Plan, separator: str, restored: Set[str]) -> None:
    """What a full pass leaves in the dir's state of the files it saw."""
    scan, memories = plan.scan, plan.memories
    # A memory that cannot be parsed for now (mid-edit, broken frontmatter) is still one
    # memoryd saw: kept, its pointer goes if it is deleted, and a line generated from its
    # old description still follows a fixed one.
    state.forget_gone(scan.present)
    still = {n: state.seen[n] for n in plan.problems if n in state.seen}
    state.seen = {  # one dict, in name order (no second copy: 100,000 entries are MBs)
        n: [m.name, m.description] if (m := memories.get(n)) is not None else still[n]
        for n in sorted(memories.keys() | still.keys())
    }
    for name in [n for n in state.own if n not in memories and n not in still]:
        del state.own[name]  # its file is gone (a problem for now keeps it, as `seen`)
    note_own(state.own, plan.edit, memories, separator, restored=restored)


def _remember_changed(state: DirState, plan: Plan, separator: str) -> set[str]:
    """What a held pass leaves in the dir's state of the files it looked at; the names whose
    record of memoryd's own line changed."""
    scope, memories = plan.scope or frozenset(), plan.memories
    state.forget_gone(plan.scan.present, scope)
    for name in scope:
        if name in memories:
            entry = memories[name]
            state.seen[name] = [entry.name, entry.description]
        elif name not in plan.problems:  # a problem for now keeps what was seen, as above
            state.seen.pop(name, None)
            state.own.pop(name, None)
    return note_own(state.own, plan.edit, memories, separator) | set(scope)


def _verify(
    md: MemoryDir, plan: Plan, written: "Written", versions: IndexKeeper | None
) -> list[str]:
    edit = plan.edit
    if plan.index is None:
        return verify_on_disk(md, plan.scan, edit.dead_links, edit.waiting, written, edit, versions)
    scope = plan.scope or frozenset()
    touched = (scope | set(edit.added) | set(edit.demoted)) & plan.memories.keys()
    return _verify_changed(
        md, written, edit, plan.index, touched - set(edit.waiting), plan.scan.present
    )


# Where a writer's late bytes go when MEMORY.md is no longer memoryd's (see _late_write).
LATE_NAME = INDEX_NAME + ".late"


def _late_write(rt: Runtime, md: MemoryDir, state: DirState) -> None:
    """Bytes a program wrote to MEMORY.md's old file after memoryd swapped it out as
    .MEMORY.md.prev go back. `slow_tool > MEMORY.md` truncates at once and writes when it
    is done, which may be after any wait for a blank index to settle: memoryd took the blank
    file for an empty index, and the tool's output, meant for MEMORY.md, lands in the old
    inode. It becomes MEMORY.md again while MEMORY.md is as memoryd wrote it, else
    MEMORY.md.late (-1, -2, ...) for the person to merge; either is an index.conflict."""
    was, wrote = state.prev
    with fsops.open_dir(md.real_path) as dir_fd:
        found = fsops.stat_id(dir_fd, PREV_NAME)
        if found == was:
            if gitwork.work_tree(md.real_path) is not None:
                # Left by a memoryd that kept one in a work tree too: memoryd's own, unwritten.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(PREV_NAME, dir_fd=dir_fd)
                state.prev = []
                rt.store.save(md.real_path, state)
            return
        state.prev = []  # (gone, or another file: not the one memoryd left there)
        if fsops.written_since(found, was):
            put = fsops.put_back_late(dir_fd, PREV_NAME, INDEX_NAME, wrote, LATE_NAME, md.path)
            if put == INDEX_NAME:
                detail = (
                    f"{PREV_NAME} was written to after memoryd replaced {INDEX_NAME} (a slow "
                    f"`tool > {INDEX_NAME}`): it is {INDEX_NAME} again"
                )
            else:
                detail = (
                    f"{PREV_NAME} was written to after memoryd replaced {INDEX_NAME}, which "
                    f"has changed since: those bytes are kept as {put}; merge them by hand"
                )
            rt.audit.write("index.conflict", dir=md.path, file=INDEX_NAME, attempt=0, detail=detail)
    rt.store.save(md.real_path, state)


def _left(
    state: DirState, scan: DirScan, forget: Set[str], scope: Set[str] | None = None
) -> set[str]:
    """The files memoryd saw, or moved away itself, that are no longer in the dir (of
    `scope` only, when given)."""
    if scope is not None:
        return {n for n in scope if n not in scan.present and (n in state.seen or n in forget)}
    seen = state.seen if state.known else {}
    return {n for n in (*seen, *forget) if n not in scan.present}


@dataclass(slots=True)
class Written:
    main: FileIdentity | None  # the identities after the write (as before, if not written)
    archive: FileIdentity | None
    data: dict[str, fsops.Content]  # the bytes of each file written, by name
    prev: list[Any] | None = None  # for DirState.prev, when MEMORY.md's old file was kept


def _write(rt: Runtime, md: MemoryDir, plan: Plan, prev_was: list[Any] | None) -> Written | str:
    """Swap in the planned index texts and log it; what was written, or the error message.

    Raises WriteConflict when another writer got in first (the caller retries from theirs).
    The writer is told the runtime's own-write callback (the daemon's, see fsops.OwnWrite).
    `prev_was`: DirState.prev (a `.MEMORY.md.prev` written to since is never replaced).
    """
    main, archive, edit = plan.main, plan.archive, plan.edit
    out = Written(main.identity, archive.identity, {})
    # The old archive (up to megabytes of page cache to free) is removed after MEMORY.md is
    # written, not between the two writes: the agent sees its index sooner.
    leftovers: list[str] = []
    try:
        if plan.archive_changed and (edit.archive is not None or plan.archive_data is not None):
            # The archive first: a crash in between leaves a line indexed twice (collapsed
            # on the next pass), never a line indexed nowhere.
            data: fsops.Content
            if plan.archive_data is not None:
                data = _with_bom(plan.archive_data, archive.bom)
            else:
                assert edit.archive is not None
                data = _encode(edit.archive, archive.bom)
            out.data[ARCHIVE_NAME] = data
            out.archive = fsops.replace_file(
                md.real_path,
                ARCHIVE_NAME,
                data,
                archive.identity,
                expected_data=plan.expected[1],
                leftovers=leftovers,
                on_own_write=rt.on_own_write,
                versions=rt.versions,
            )
        if plan.main_changed and edit.main is not None:
            data = out.data[INDEX_NAME] = _encode(edit.main, main.bom)
            # Nothing of memoryd's in a git work tree but the index files (the version store
            # keeps the old MEMORY.md): no .MEMORY.md.prev there.
            keep = None if gitwork.work_tree(md.real_path) is not None else PREV_NAME
            out.main = fsops.replace_file(
                md.real_path,
                INDEX_NAME,
                data,
                main.identity,
                keep_prev=keep,
                prev_was=prev_was[0] if prev_was and keep else None,
                expected_data=plan.expected[0],
                on_own_write=rt.on_own_write,
                versions=rt.versions,
            )
            if main.identity is not None and keep:
                out.prev = [_stat_of(main.identity), _stat_of(out.main)]
    except MemorydError as error:
        if isinstance(error, WriteConflict):
            raise
        rt.audit.write("index.write_failed", dir=md.path, file=INDEX_NAME, error=str(error))
        return str(error)
    finally:
        fsops.remove_leftovers(md.real_path, leftovers)
    _report_written(rt, md, plan)
    return out


def _report_written(rt: Runtime, md: MemoryDir, plan: Plan) -> None:
    main, edit = plan.main, plan.edit
    before = len(_encode(main.text or "", main.bom))
    after = len(_encode(edit.main or "", main.bom))
    rt.audit.write(
        "index.updated",
        dir=md.path,
        added=edit.added,
        removed=edit.removed,
        rewritten=edit.rewritten,
        collapsed=edit.collapsed,
        demoted=edit.demoted,
        bytes_before=before,
        bytes_after=after,
    )
    if edit.demoted:
        rt.audit.write("index.demoted", dir=md.path, files=edit.demoted, count=len(edit.demoted))
    if edit.over_budget is not None:
        m = edit.over_budget
        rt.audit.write(
            "index.over_budget",
            dir=md.path,
            lines=m.lines,
            chars=m.chars,
            bytes=m.bytes,
            outside_window=edit.outside,
        )


def _report_verify(rt: Runtime, md: MemoryDir, outcome: IndexOutcome) -> None:
    if outcome.problems:
        outcome.status = IndexStatus.ERROR
        outcome.message = "the index failed verification after writing"
        rt.audit.write("index.verify_failed", dir=md.path, problems=outcome.problems, level="error")


def _same_file(dir_fd: int, name: str, identity: FileIdentity | None) -> bool:
    """Whether a file is still the one identified (stat only; the swap re-checks its bytes)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return identity is None
    if identity is None or not st.st_mode & stat.S_IWUSR:
        return False  # made read-only since (a chmod keeps the mtime): the full pass says so
    return (st.st_ino, st.st_size, st.st_mtime_ns) == (
        identity.ino,
        identity.size,
        identity.mtime_ns,
    )


def _index_changed(
    rt: Runtime,
    md: MemoryDir,
    held: Held,
    only: Set[str],
    grace: float,
    settle: float,
    forget: Set[str] = frozenset(),
    mode: str | None = None,
    state: DirState | None = None,
    whole: DirScan | None = None,
) -> IndexOutcome | None:
    """The held view: the pass after `only` changed, touching only what they touch; None:
    run a full pass.

    It gives what the full pass would (tests/test_index_held.py checks the edit against
    update_index over random indexes): it applies while the index files are exactly as the
    last pass left them, the dir is managed, and the settings are the same. `state`: the
    dir's state as the caller loaded it. `whole`: a scan of the whole dir the caller made
    (_index_settled): problems, stray temps and the pile-up count are of all of it, and its
    cache is saved.
    """
    cfg = rt.config
    if held.config != cfg.index or INDEX_NAME in only or ARCHIVE_NAME in only:
        return None
    state = rt.store.load(md.real_path) if state is None else state
    if not (state.known and state.managed):
        return None
    with fsops.open_dir(md.real_path) as dir_fd:
        if not (
            _same_file(dir_fd, INDEX_NAME, held.main)
            and _same_file(dir_fd, ARCHIVE_NAME, held.archive)
        ) or (
            state.prev
            and (
                fsops.written_since(fsops.stat_id(dir_fd, PREV_NAME), state.prev[0])
                or gitwork.work_tree(md.real_path) is not None
            )
        ):
            return None  # (the full pass brings a writer's late bytes back: see _late_write)
    # Read: the changed files only; in the caller's whole scan of this pass they are read
    # (and stat'ed) already.
    scan = (
        whole
        if whole is not None
        else scan_dir(
            md.real_path,
            max_file_bytes=cfg.parse.max_file_bytes,
            max_frontmatter_bytes=cfg.parse.max_frontmatter_bytes,
            previous=held.scan,
            only=only,
            versions=rt.versions,
        )
    )
    memories = dict(held.memories)
    local = _local(rt, md)
    changed_files = {n: scan.files[n] for n in only if n in scan.files}
    for name in only:
        info = changed_files.get(name)
        if info is not None and info.kind == "memory":
            memories[name] = local.entry(info)
        else:
            memories.pop(name, None)
    index = held.index
    override = mode or cfg.override_for(md.path).mode
    arrived = None
    if held.seen_token is not None and rt.store.seen_token(md.real_path) is held.seen_token:
        # `seen` names the held memories: only a changed file can be new to it (no look at
        # the 10,000 others, which costs more than the rest of the ownership check).
        arrived = {n for n in only if n in memories and n not in state.seen}
    ownership = decide_ownership(
        index.main,
        None,
        {},
        memories.keys(),
        override,
        state.seen.keys(),
        archive_targets=index.where.keys(),
        # The last pass gave every memory file a pointer but those still in their grace.
        only_missing=only | held.waiting,
        arrived=arrived,
        as_left=_as_left(state, held.main),
    )
    if not ownership.managed:
        return None  # the full pass says why, once

    # Plan: the edit of the lines the changed files touch.
    now = rt.clock()
    candidates = (only | held.waiting) & memories.keys()
    ready = {n for n in candidates if now - scan.files[n].mtime_ns / 1e9 >= grace}
    result = index_held.edit_changed(
        index,
        IndexInput(
            main=index.main,
            archive=None,  # not read: the held index has it
            memories=memories,
            present=scan.present,
            # As the full pass: a file memoryd moved away counts as seen (its pointer goes).
            seen=index_held.pairs(
                state.seen,
                {n for n in forget if n not in memories},
                gone=state.gone.keys(),
                present=scan.present,
            ),
            ready=ready,
            heading=local.heading,
            separator=cfg.index.separator,
            budget=_budget(cfg.index),
            now=now,
            today=local.today,
            own=state.own,
            view=view_kind(md),
        ),
        only,
        held.waiting,
    )
    if result is None:
        return None
    edit = result.edit
    main = IndexText(held.index.main, held.main, held.main_bom)
    archive = IndexText(None, held.archive, held.archive_bom)  # its text is not needed
    main_changed = edit.main != main.text
    archive_changed = result.archive_changed
    if (main_changed or archive_changed) and _settling(
        md, ((INDEX_NAME, main), (ARCHIVE_NAME, archive)), state.settled, now
    ):
        return None  # the full pass waits for the other program, or says why it cannot
    # The archive as its lines: joined, the new one and the held one would each be a 2 MB
    # copy made for one write and one comparison.
    old_lines = _archive_lines(held.index) if archive_changed else None
    plan = Plan(
        edit,
        main,
        archive,
        main_changed,
        archive_changed,
        scan,
        memories,
        only,
        {n: s for n, s in changed_files.items() if s.kind == "problem"},
        archive_data=_archive_lines(result.held) if archive_changed else None,
        expected=(
            _encode(held.index.main, held.main_bom) if held.index.main is not None else None,
            None if old_lines is None else _with_bom(old_lines, held.archive_bom),
        ),
        index=result.held,
        vouches_for_seen=arrived is not None,
    )
    # Report what the changed files are (the full view does this before it plans).
    outcome = IndexOutcome(md, IndexStatus.UNCHANGED, ownership, edit, scan=scan, held_edit=True)
    if whole is None:
        outcome.retry_after = _report_problems(rt, md, plan.problems, state, settle, scope=only)
        _count_changed(state, scan, memories.keys(), now)
    else:
        outcome.retry_after = _report_problems(rt, md, whole.problems, state, settle)
        _remove_stray_temps(rt, md, whole)
        _count_changed(state, whole, whole.memories.keys(), now)
    outcome = _write_and_report(
        rt, md, Request(grace=grace, forget=forget), state, plan, outcome, now
    )
    if whole is not None:
        if not outcome.write_failed:  # (as the full pass, which saves it with the state)
            rt.store.save_cache(md.real_path, whole.files)
        outcome.scan, outcome.held = whole, None  # (`held` names unread memories: not for reuse)
    return outcome


def _index_settled(
    rt: Runtime, md: MemoryDir, req: Request
) -> tuple[IndexOutcome | None, DirScan | None]:
    """A one-shot update that costs what the changes since the last verified pass cost: while
    MEMORY-ARCHIVE.md is the file that pass left (DirState.settled), a stat scan of the dir
    finds the files new, gone, renamed or redescribed since, and the held edit looks at
    their lines and at all of MEMORY.md (as the dream pass's update after its moves does).
    None: the full pass (a writer's late bytes in .MEMORY.md.prev, no settled index...),
    given the scan made here, if any, which it takes as it is (each file is read once a pass)."""
    state = rt.store.load(md.real_path)
    if state.prev:
        if gitwork.work_tree(md.real_path) is not None:
            return None, None  # a .MEMORY.md.prev in a work tree: _late_write removes it
        with fsops.open_dir(md.real_path) as dir_fd:
            if fsops.stat_id(dir_fd, PREV_NAME) != state.prev[0]:
                return None, None  # _late_write's to look at
    cfg = rt.config.parse
    scan = scan_dir(
        md.real_path,
        rt.store.load_cache(md.real_path),
        max_file_bytes=cfg.max_file_bytes,
        max_frontmatter_bytes=cfg.max_frontmatter_bytes,
        versions=rt.versions,
    )
    basis = Basis.of(scan, state.seen)
    made = _settled_view(rt, md, basis, req.forget, state)
    if made is None:
        return None, scan
    held, changed = made
    if not req.forget and _quiet(state, held, basis, scan):
        planned = _as_planned(rt, md, held, req.mode, scan)
        if planned is not None:
            return planned, scan
    only = changed | req.forget
    outcome = _index_changed(
        rt, md, held, only, req.grace, req.settle, req.forget, req.mode, state=state, whole=scan
    )
    return outcome, scan


def _quiet(state: DirState, held: Held, basis: "Basis", scan: DirScan) -> bool:
    """Nothing changed since memoryd's last verified pass: MEMORY.md is as it left it (and
    the archive, or there is no held view), no memory is new, changed or gone since, each
    has a pointer, no pointer names a file seen leaving, and the scan has nothing to say."""
    if not _as_left(state, held.main) or basis.unseen:
        return False
    if scan.problems or scan.changed or scan.reread or scan.own_temps or scan.vanished:
        return False
    in_main = {link.target for link in local_links(held.index.main or "")}
    where = held.index.where
    if any(n not in in_main and n not in where for n in basis.memories):
        return False  # one still in its grace at that pass
    return not any(t in state.gone for t in in_main | where.keys() if t not in basis.present)


def _as_planned(
    rt: Runtime, md: MemoryDir, held: Held, mode: str | None, scan: DirScan
) -> IndexOutcome | None:
    """A one-shot update of a `_quiet` index: the last verified pass's plan stands and is not
    made again (one that cannot get within the agent's window then costs what one within it
    costs); what it says (dead and invalid links kept, the window) is read off the index.
    None: plan (the config or a mark turned the dir off since, a file was made read-only)."""
    override = mode or rt.config.override_for(md.path).mode
    # The reason is the one a full pass gives (a manage mark or the config before "as left").
    ownership = decide_ownership(held.index.main, None, {}, frozenset(), override, as_left=True)
    if not ownership.managed:
        return None
    with fsops.open_dir(md.real_path) as dir_fd:  # (made read-only since: the pass says so)
        if not (
            _same_file(dir_fd, INDEX_NAME, held.main)
            and _same_file(dir_fd, ARCHIVE_NAME, held.archive)
        ):
            return None
    index, cfg = held.index, rt.config.index
    main = index.main or ""
    view = view_of(main, _budget(cfg), view_kind(md))
    edit = IndexEdit(main=main, archive=None)
    edit.dead_links = sorted(index.dead)
    edit.invalid_links = [
        line.link.raw
        for number, line in enumerate(split_lines(main))
        if line.link is not None
        and line.link.kind is LinkKind.INVALID
        and number not in view.construct
    ] + list(index.invalid.values())
    edit.fits_window = view.fits(cfg.max_lines, cfg.max_chars)
    return IndexOutcome(md, IndexStatus.UNCHANGED, ownership, edit, scan=scan, held_edit=True)


def _remove_stray_temps(rt: Runtime, md: MemoryDir, scan: DirScan) -> None:
    if scan.own_temps:
        stray = fsops.remove_stray_temps(md.real_path, scan.own_temps, time.time())
        if stray:
            rt.audit.write("index.temp_removed", dir=md.path, files=stray)


@dataclass(slots=True)
class Basis:
    """What a dream pass keeps of its ownership probe's scan for the index update after its
    moves: the names, and the files whose entry differs from what memoryd last saw. Not the
    scan (nor an entry per memory), which a pass over 100,000 memories could not keep beside
    its own data within its memory target. With the probe's `Snapshot`: both index files as
    it read them, and the scan's entries of the memories the held update looks at (those
    unseen, and MEMORY.md's targets), so that no file is read twice in one pass."""

    memories: frozenset[str]
    present: Set[str]
    unseen: frozenset[str]  # new, renamed or redescribed since memoryd's last pass; or gone
    main: IndexText | None = None  # taken while still that file (index_file_again)
    # The archive as read, without its text: its bytes (UTF-8, no BOM) are what the held
    # update takes, and half the size of a text with one character past Latin-1.
    archive: IndexText | None = None
    archive_data: bytes | None = None
    scanned: Mapping[str, Scanned] = field(default_factory=dict)  # looked at again by stat

    def archive_text(self) -> IndexText | None:
        """The archive as read_index_file gave it to the probe (its text decoded again)."""
        if self.archive is None or self.archive_data is None:
            return self.archive
        return replace(self.archive, text=self.archive_data.decode("utf-8"))

    @classmethod
    def of(
        cls, scan: DirScan, seen: Mapping[str, list[str]], snapshot: "Snapshot | None" = None
    ) -> "Basis":
        unseen: set[str] = set()
        memories = []
        for name, scanned in scan.files.items():
            if scanned.kind != "memory":
                continue
            memories.append(name)
            before = seen.get(name)
            if before is None or before[0] != scanned.name or before[1] != scanned.description:
                unseen.add(name)
        names = frozenset(memories)
        unseen.update(n for n in seen if n not in names)  # gone, or a problem for now
        if snapshot is None:
            return cls(names, scan.present, frozenset(unseen))
        wanted = set(unseen)
        if snapshot.main.text:
            wanted.update(link.target for link in local_links(snapshot.main.text))
        files = scan.files
        kept = {n: files[n] for n in wanted if n in files and files[n].kind == "memory"}
        archive = snapshot.archive
        data = None if archive.text is None else archive.text.encode("utf-8")
        return cls(
            names,
            scan.present,
            frozenset(unseen),
            snapshot.main,
            replace(archive, text=None),
            data,
            kept,
        )


# Stands for the entries of the memories a held edit does not look at (see _settled_index).
_NOT_READ = Entry("", "", "", "", 0.0)


def index_after_dream(
    rt: Runtime, md: MemoryDir, moved: Set[str], basis: Basis | None, *, grace: float = 0.0
) -> IndexOutcome:
    """The index update that ends a real dream pass (DESIGN §4.9): the pointer lines of the
    `moved` files go, with everything else a full pass would do. `grace`: as for Request
    (a pass the daemon starts keeps new files' grace; a command's indexes them at once).

    When the archive is still the very file memoryd's last verified pass left (the identity
    DirState.settled records), that is the daemon's edit of just the lines a change can touch:
    all of MEMORY.md (which the agent may have edited since), and the archive lines of the
    moved files and of every file the index does not yet show as it should (new, gone,
    renamed, redescribed or unindexed). A full pass would split all of a 100,000-line archive
    into objects, ~300 MB on top of the pass. Otherwise, a full pass.
    """
    # The pass moved files because its probe found the index managed: it stays managed for
    # this update (the moves may leave fewer files with pointers than half), unless MEMORY.md
    # or the config has said "off" since.
    mode = None if rt.config.override_for(md.path).mode == "off" else "manage"
    held = _settled_index(rt, md, basis, moved) if basis is not None else None
    if held is None:
        known = (basis.main, basis.archive_text()) if basis is not None else (None, None)
        _release_archive(basis)
        return run_pass(rt, md, Request(forget=moved, mode=mode, grace=grace, known=known))
    _release_archive(basis)
    made, changed = held
    outcome = run_pass(
        rt, md, Request(held=made, only=changed, forget=moved, mode=mode, grace=grace)
    )
    outcome.held = None  # made from a scan of the changed files only: for no later pass
    return outcome


update_after_moves = index_after_dream  # the use case's name beside the others


def _release_archive(basis: Basis | None) -> None:
    """The archive's bytes the basis held are taken (held, or decoded): not kept through the
    write, as a read would not be."""
    if basis is not None:
        basis.archive = basis.archive_data = None


def _settled_index(
    rt: Runtime, md: MemoryDir, basis: Basis, moved: Set[str]
) -> tuple[Held, set[str]] | None:
    """The index as it is, held, and the files an update must read and whose lines it must
    look at; None unless the archive is the one memoryd's last verified pass left.

    The held edit reads the files it is given (`only`) and looks up the entries of no other
    memory: MEMORY.md's own targets are among those given, so every other memory stands in
    the held entries by name alone.
    """
    return _settled_view(rt, md, basis, moved, rt.store.load(md.real_path))


def _settled_view(
    rt: Runtime, md: MemoryDir, basis: Basis, moved: Set[str], state: DirState
) -> tuple[Held, set[str]] | None:
    """_settled_index, given the dir's state as loaded."""
    if not (state.known and state.managed and state.settled) or rt.dry_run:
        return None
    with fsops.open_dir(md.real_path) as dir_fd:
        main = index_file_again(dir_fd, INDEX_NAME, basis.main, rt.versions)
        found = _archive_data(dir_fd, basis)
    if main.error or found is None or main.text is None:
        return None
    data, archive = found
    # MEMORY.md may have changed since (the agent writes its own pointers): the held edit
    # reads all of it, with every file it names (below). The archive it takes as it is.
    mark = settled_mark(main.identity, archive.identity, rt.config.index, _local(rt, md).heading)
    if mark[1:] != state.settled[1:]:
        return None
    # The archive's positions as the last hold of these bytes found them, if any: a one-shot
    # `memoryd index` holds the same archive again and again.
    digest = index_held.archive_digest(data or b"")
    known = index_held.load_positions(rt.store.load_held(md.real_path), digest)
    try:
        index = index_held.hold_data(main.text, data, frozenset(), known)
    except UnicodeDecodeError:
        return None  # the full pass says what is wrong with it
    del data
    if known is None:
        with contextlib.suppress(OSError):  # a cache: a pass never fails for it
            rt.store.save_held(md.real_path, index_held.dump_positions(index, digest))
    in_main: dict[str, int] = {}
    for link in local_links(main.text):
        in_main[link.target] = in_main.get(link.target, 0) + 1
    where = index.where
    changed = set(basis.unseen | in_main.keys())  # and the moved files (index_dir adds them)
    # The pass that left the index gave every memory file one pointer, but those still in
    # their grace then (the daemon's): looked at now, indexed once out of `grace`.
    changed.update(n for n in basis.memories if n not in where and n not in in_main)
    seen = state.seen
    targets = in_main.keys() | where.keys()
    dead = frozenset(
        t for t in targets if t not in basis.present and t not in seen and t not in state.gone
    )
    # A pointer to a file memoryd saw leave on an earlier pass (its index write failed, or
    # an agent put the line back) goes now: its lines are looked at too.
    changed.update(t for t in targets if t not in basis.present and t in state.gone)
    held = Held(
        # The held edit reads only `changed`, and of those, what the probe's scan holds only
        # if it changed since.
        DirScan(md.real_path, dict(basis.scanned), present=basis.present),
        replace(index, dead=dead - moved),
        dict.fromkeys(basis.memories, _NOT_READ),
        main.identity,
        archive.identity,
        main.bom,
        archive.bom,
        frozenset(),
        rt.config.index,
    )
    return held, changed


def _archive_data(dir_fd: int, basis: Basis | None = None) -> tuple[bytes | None, IndexText] | None:
    """The archive's bytes (no BOM) and what read_index_file would say of it but its text;
    None when read_index_file would give an error. `basis`: the archive as this pass read it
    already (Basis.archive_data), taken while it is still that file."""
    known = basis.archive if basis is not None else None
    if basis is not None and known is not None and _as_read(dir_fd, ARCHIVE_NAME, known):
        if known.error:
            return None
        return basis.archive_data, IndexText(None, known.identity, known.bom)
    try:
        data, st = fsops.read_regular(dir_fd, ARCHIVE_NAME, MAX_ARCHIVE_BYTES)
    except FileNotFoundError:
        return None, IndexText(None, None)
    except (OSError, ValueError):
        return None
    bom = data.startswith(BOM)
    # No sha256: the held edit compares bytes, and the settled record identities by stat.
    identity = FileIdentity(st.st_ino, st.st_size, st.st_mtime_ns, "")
    return (data[len(BOM) :] if bom else data), IndexText(None, identity, bom)


def _archive_lines(index: index_held.HeldIndex) -> list[bytes] | None:
    return index.lines if index.exists else None


def _with_bom(data: fsops.Content, bom: bool) -> fsops.Content:
    if not bom:
        return data
    return BOM + data if isinstance(data, bytes) else [BOM, *data]


def _verify_changed(
    md: MemoryDir,
    written: Written,
    edit: IndexEdit,
    index: index_held.HeldIndex,
    touched: Set[str],
    present: Set[str],
) -> list[str]:
    """Look at the written files again: each must be the very file written (its inode, size and
    mtime, taken from the temp file before the swap, whose bytes the swap checked); and the
    touched files must be indexed once each (every other file was verified by an earlier pass
    and none of its lines moved). A file another writer replaced since is theirs, as in
    verify_on_disk."""
    with fsops.open_dir(md.real_path) as dir_fd:
        for name in written.data:
            ours = written.main if name == INDEX_NAME else written.archive
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return []  # removed since our write: another writer's doing
            if ours is None or (st.st_ino, st.st_size, st.st_mtime_ns) != (
                ours.ino,
                ours.size,
                ours.mtime_ns,
            ):
                return []  # replaced since: another writer's, their events bring a pass
    return index_held.check(index, touched, present, set(edit.dead_links), view_kind(md))


def settled_mark(
    main: FileIdentity | None, archive: FileIdentity | None, index: IndexConfig, heading: str
) -> list[Any]:
    """What DirState.settled records for index files a verified pass left as they are: their
    identities (inode, size, mtime_ns, which any rewrite changes; the daemon's held index
    trusts no more than that either), and the settings the pass ran under."""
    settings = hashlib.sha256(repr((index, heading)).encode("utf-8")).hexdigest()[:16]
    return [_stat_of(main), _stat_of(archive), settings]


def _as_left(state: DirState, main: FileIdentity | None) -> bool:
    """Whether MEMORY.md is the file memoryd's last verified pass over a managed index left
    (DirState.settled): its pointer lines are memoryd's own, whatever share of the files
    they cover (a pass in the middle of a burst gives pointers only to the files past their
    grace), so they are no sign of an index a person organised."""
    return bool(
        state.known and state.managed and state.settled and main is not None
        and state.settled[0] == _stat_of(main)
    )  # fmt: skip


def _stat_of(identity: FileIdentity | None) -> list[int] | None:
    return None if identity is None else [identity.ino, identity.size, identity.mtime_ns]


def _budget(index: IndexConfig) -> Budget:
    return Budget(
        index.max_lines, index.max_chars, index.target_bytes, index.budget, index.keep_recent
    )


def verify_on_disk(
    md: MemoryDir,
    scan: DirScan,
    allowed_dead: list[str],
    waiting: list[str],
    written: Written | None = None,
    edit: IndexEdit | None = None,
    versions: IndexKeeper | None = None,
) -> list[str]:
    """Re-read the index files from disk and check DESIGN §3's promises against the scan.

    With `written` (what this pass wrote): a file another writer replaced since is theirs to
    have written, not a failed write of ours; its events bring the next pass, which reads it.
    With `edit` (the plan it wrote): each file written must hold the planned text, and an
    archive that does is checked by the links the edit knows it holds (`archive_links`)
    instead of parsing its 10,000 lines again.
    """
    expected = set(scan.memories) - set(waiting)
    with fsops.open_dir(md.real_path) as dir_fd:
        main = read_index_file(dir_fd, INDEX_NAME, versions)
        archive = read_index_file(dir_fd, ARCHIVE_NAME, versions)
    if written is not None and (
        _replaced(main.identity, written.main, INDEX_NAME in written.data)
        or _replaced(archive.identity, written.archive, ARCHIVE_NAME in written.data)
    ):
        return []
    problems: list[str] = []
    archive_links = None
    if written is not None and edit is not None:
        for name, found, planned in (
            (INDEX_NAME, main, edit.main),
            (ARCHIVE_NAME, archive, edit.archive),
        ):
            if name in written.data and found.text != planned:
                problems.append(f"{name} on disk is not the text memoryd wrote")
        if ARCHIVE_NAME in written.data and archive.text == edit.archive:
            archive_links = edit.archive_links
    return problems + verify(
        main.text,
        archive.text,
        expected,
        scan.present,
        set(allowed_dead),
        view_kind(md),
        archive_links,
    )


def _replaced(found: FileIdentity | None, ours: FileIdentity | None, wrote: bool) -> bool:
    """Whether a file this pass wrote is no longer the one it wrote (another writer's now)."""
    if not wrote or ours is None:
        return False
    return found is None or (found.ino, found.size, found.mtime_ns) != (
        ours.ino,
        ours.size,
        ours.mtime_ns,
    )


def view_kind(md: MemoryDir) -> ViewKind:
    """How Claude Code loads this dir's MEMORY.md (agentview.view_kind_of)."""
    return view_kind_of(md.path, md.kind)


def agent_sees(rt: Runtime, md: MemoryDir, filename: str) -> str:
    """Where the agent finds a memory's pointer, or why it does not (for `explain`)."""
    budget = _budget(rt.config.index)
    with fsops.open_dir(md.real_path) as dir_fd:
        main = read_index_file(dir_fd, INDEX_NAME, rt.versions)
        archive = read_index_file(dir_fd, ARCHIVE_NAME, rt.versions)
    text = main.text or ""
    view = view_of(text, budget, view_kind(md))
    seen: list[int] = []
    hidden: list[str] = []
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL or link.target != filename:
            continue
        why = view.hidden(number)
        if why is None:
            seen.append(number + 1)
        else:
            hidden.append(f"the pointer on MEMORY.md line {number + 1} is {why.value}")
    in_archive = archive.text is not None and filename in {
        link.target for link in local_links(archive.text)
    }
    if seen:
        found = f"loaded: its pointer on MEMORY.md line {seen[0]} is in what the agent loads"
    elif in_archive:
        found = "in MEMORY-ARCHIVE.md, which the agent reads when a topic is not listed"
    else:
        found = "not indexed for the agent"
    if hidden:
        found += "; " + "; ".join(hidden)
        if not seen and not in_archive:
            found += " (memoryd adds a visible pointer once it is past its grace)"
    return found


def budget_use(text: str | None, rt: Runtime, kind: ViewKind = ViewKind.AUTO) -> dict[str, Any]:
    """The index against the agent's window, measured on what the agent loads, and how many
    of its pointer lines the agent does not see, by why."""
    text = text or ""
    budget = _budget(rt.config.index)
    view = view_of(text, budget, kind)
    m = measure_view(text, view)
    hidden: dict[str, int] = {}
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL:
            continue
        why: Hidden | None = view.hidden(number)
        if why is not None:
            hidden[why.value] = hidden.get(why.value, 0) + 1
    return {
        "lines": m.lines,
        "max_lines": rt.config.index.max_lines,
        "chars": m.chars,
        "max_chars": rt.config.index.max_chars,
        "bytes": m.bytes,
        "target_bytes": rt.config.index.target_bytes,
        "loaded_whole": view.fits(budget.max_lines, budget.max_chars),
        "hidden_pointers": hidden,
    }
