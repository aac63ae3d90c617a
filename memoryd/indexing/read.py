"""Read: what an index pass reads of a dir, and the one rule for "as memoryd's last pass left it".

A pass reads the dir once (`read_full`: the scan, both index files, ownership). Where the index
files are still the very files memoryd's last verified pass left (`as_left`, by their stat
identity, `stat_key`), what that pass knew is taken instead of reading the rest again: the
daemon's `Held` view, the one-shot command's settled view (`settled_view`) and the dream pass's
`Basis` are that one check over what a caller keeps. `Request` is what a caller asks of a pass.
"""

import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Protocol

from memoryd.config import IndexConfig
from memoryd.discover import gitwork
from memoryd.discover.found import MemoryDir
from memoryd.indexing.scan import DirScan, scan_dir
from memoryd.model import index_held
from memoryd.model.agentview import ViewKind, view_kind_of
from memoryd.model.conflicts import MARK as CONFLICT_MARK
from memoryd.model.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    MANAGE_MARK,
    OFF_MARK,
    PREV_NAME,
    Budget,
    Entry,
    LastPass,
    LinkKind,
    Ownership,
    Place,
    decide_ownership,
    local_links,
    split_lines,
)
from memoryd.model.scanned import Scanned
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.storage.fsops import FileIdentity
from memoryd.storage.state import DirState

MAX_INDEX_BYTES = 8 * 1024 * 1024


# The archive is never loaded whole by the agent and grows ~200 bytes per memory: 8 MiB would
# be reached near 43,000 memories, and the dir would then stop being managed.
MAX_ARCHIVE_BYTES = 128 * 1024 * 1024


LINKED_BYTES = 512 * 1024


@dataclass(slots=True)
class IndexText:
    """An index file as read: its text (None when missing) and the identity to re-check."""

    text: str | None
    identity: FileIdentity | None
    bom: bool = False
    error: str = ""
    read_only: bool = False  # no write permission for its owner: the person's "do not touch"


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


def index_file_again(
    dir_fd: int, name: str, known: IndexText | None, versions: IndexKeeper | None = None
) -> IndexText:
    """An index file this pass read already (`known`), while it is still that file; else it
    is read now (read_index_file): each file is read once a pass."""
    taken = known is not None and (known.identity is not None or not known.error)
    if known is not None and taken and still(dir_fd, name, known.identity):
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


def local_of(rt: Runtime, md: MemoryDir) -> Local:
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


def encode(text: str, bom: bool) -> bytes:
    return (("\ufeff" if bom else "") + text).encode("utf-8")


def with_bom(data: fsops.Content, bom: bool) -> fsops.Content:
    if not bom:
        return data
    return BOM + data if isinstance(data, bytes) else [BOM, *data]


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


def being_written(
    md: MemoryDir,
    texts: Sequence[tuple[str, IndexText]],
    state: DirState,
    now: float,
    *,
    blank_only: bool = False,
) -> BeingWritten | None:
    """The index file (of `texts`, MEMORY.md's then the archive's) that another program is
    still writing, if any; a file memoryd's own last pass left (left_as) never is."""
    for position, (name, found) in enumerate(texts):
        identity = found.identity
        if identity is None:
            continue
        if left_as(state, position, stat_key(identity)):
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
    # Try the held view of a settled index first (see read.read_settled_dir).
    settled: bool = False
    # MEMORY.md and the archive as the caller read them (the dream pass's probe): taken
    # instead of read again while each is still that file (index_file_again).
    known: tuple[IndexText | None, IndexText | None] = (None, None)


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


def read_full(rt: Runtime, md: MemoryDir, state: DirState, req: Request) -> Snapshot:
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
            last = LastPass(known, as_left(state, main.identity))
            ownership = decide_ownership(main.text, archive.text, {}, memories, override, last)
            tracked = _tracked(rt, md, main.text, ownership, override)
            if tracked:
                ownership = Ownership(False, tracked)
            elif not ownership.managed and main.text and override == "auto":
                # Only now read the files MEMORY.md points to (a tree index's category
                # files): it costs a read of each, which most dirs never need.
                linked = _linked_texts(dir_fd, main.text, scan)
                ownership = decide_ownership(
                    main.text, archive.text, linked, memories, override, LastPass(known)
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


# Stands for the entries of the memories a held edit does not look at (see read_settled).
NOT_READ = Entry("", "", "", "", 0.0)


def read_settled(
    rt: Runtime, md: MemoryDir, basis: Basis, moved: Set[str]
) -> tuple[Held, set[str]] | None:
    """The index as it is, held, and the files an update must read and whose lines it must
    look at; None unless the archive is the one memoryd's last verified pass left.

    The held edit reads the files it is given (`only`) and looks up the entries of no other
    memory: MEMORY.md's own targets are among those given, so every other memory stands in
    the held entries by name alone.
    """
    return settled_view(rt, md, basis, moved, rt.store.load(md.real_path))


def settled_view(
    rt: Runtime, md: MemoryDir, basis: Basis, moved: Set[str], state: DirState
) -> tuple[Held, set[str]] | None:
    """read_settled, given the dir's state as loaded."""
    if not (state.known and state.managed and state.settled) or not rt.effect.writes:
        return None
    with fsops.open_dir(md.real_path) as dir_fd:
        main = index_file_again(dir_fd, INDEX_NAME, basis.main, rt.versions)
        found = _archive_data(dir_fd, basis)
    if main.error or found is None or main.text is None:
        return None
    data, archive = found
    # MEMORY.md may have changed since (the agent writes its own pointers): the held edit
    # reads all of it, with every file it names (below). The archive it takes as it is.
    if not (
        left_as(state, 1, stat_key(archive.identity))
        and settled_under(state, rt.config.index, local_of(rt, md).heading)
    ):
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
    changed = set(basis.unseen | in_main.keys())  # and the moved files (the pass adds them)
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
        dict.fromkeys(basis.memories, NOT_READ),
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
    if (
        basis is not None
        and known is not None
        and (known.identity is not None or not known.error)
        and still(dir_fd, ARCHIVE_NAME, known.identity)
    ):
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


# --- the one rule: "as memoryd's last pass left it" ---------------------------------------------
# A file's stat identity, spelled one way: [inode, size, mtime_ns] (any rewrite changes one of
# them; the swap checks the bytes). DirState.settled and DirState.prev keep it as JSON lists.
Key = list[int]


def stat_key(identity: FileIdentity | None) -> Key | None:
    return None if identity is None else [identity.ino, identity.size, identity.mtime_ns]


def key_now(dir_fd: int, name: str) -> Key | None:
    """An index file's stat key as it is now; None: missing. One that is not a regular file,
    or that its owner may not write (a person's "do not touch"; a chmod keeps the mtime),
    gives [], which no key equals: memoryd leaves only writable regular files."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IWUSR:
        return []
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def still(dir_fd: int, name: str, identity: FileIdentity | None) -> bool:
    """Whether an index file is still the one a pass read or wrote as `identity` (None: still
    missing): what it holds of that file may be taken instead of reading it again."""
    return key_now(dir_fd, name) == stat_key(identity)


def left_as(state: DirState, position: int, key: Key | None) -> bool:
    """THE rule: whether the index file at `position` (0: MEMORY.md, 1: the archive) whose
    stat key is `key` is the very file memoryd's last verified pass over the managed index
    left (DirState.settled, None: left missing). Every view that takes what an earlier pass
    knew instead of reading the dir again asks it: the daemon's held view, the settled view
    of `memoryd index` and of the dream pass's update, ownership's "as left", the settle
    wait (a file memoryd wrote is never "being written")."""
    settled = state.settled
    return bool(state.known and state.managed and settled) and settled[position] == key


def settings_key(index: IndexConfig, heading: str) -> str:
    """The settings a pass ran under, as DirState.settled records them: a reload that changes
    them, or another title, means a pass over the whole index."""
    return hashlib.sha256(repr((index, heading)).encode("utf-8")).hexdigest()[:16]


def settled_mark(
    main: FileIdentity | None, archive: FileIdentity | None, index: IndexConfig, heading: str
) -> list[Any]:
    """What DirState.settled records for the index files a verified pass left: their stat
    keys and the settings it ran under (see left_as)."""
    return [stat_key(main), stat_key(archive), settings_key(index, heading)]


def settled_under(state: DirState, index: IndexConfig, heading: str) -> bool:
    """Whether the settled record was made under these settings."""
    return len(state.settled) > 2 and state.settled[2] == settings_key(index, heading)


def as_left(state: DirState, main: FileIdentity | None) -> bool:
    """Whether MEMORY.md is the file memoryd's last verified pass over a managed index left:
    its pointer lines are memoryd's own, whatever share of the files they cover (a pass in
    the middle of a burst gives pointers only to the files past their grace), so they are no
    sign of an index a person organised."""
    return main is not None and left_as(state, 0, stat_key(main))


def held_as_left(
    dir_fd: int, state: DirState, held: Held, local: "Local", index: IndexConfig
) -> bool:
    """Whether the daemon's held view still stands: both index files are as memoryd's last
    pass left them (left_as), that pass is the one that made the view, and under the settings
    of now (a reload means a full pass)."""
    main, archive = key_now(dir_fd, INDEX_NAME), key_now(dir_fd, ARCHIVE_NAME)
    return (
        left_as(state, 0, main)
        and left_as(state, 1, archive)
        and main == stat_key(held.main)
        and archive == stat_key(held.archive)
        and settled_under(state, index, local.heading)
    )


def budget_of(index: IndexConfig) -> Budget:
    return Budget(
        index.max_lines, index.max_chars, index.target_bytes, index.budget, index.keep_recent
    )


def view_kind(md: MemoryDir) -> ViewKind:
    """How Claude Code loads this dir's MEMORY.md (agentview.view_kind_of)."""
    return view_kind_of(md.path, md.kind)


# --- the held read: the changed files only, over what an earlier pass left ----------------------
def late_bytes_pending(dir_fd: int, md: MemoryDir, state: DirState) -> bool:
    """Whether .MEMORY.md.prev is not as memoryd left it (a writer's late bytes, or one left in
    a work tree): the full pass looks at it first (see write.late_write)."""
    if not state.prev:
        return False
    if gitwork.work_tree(md.real_path) is not None:
        return True
    return bool(fsops.stat_id(dir_fd, PREV_NAME) != state.prev[0])


@dataclass(slots=True)
class HeldRead:
    """The held view as one pass read it: the held index, the files named in `only` read
    again (the scan of them, or of the whole dir), the memories with their entries as of now,
    ownership, and the dir's state as loaded."""

    held: Held
    only: Set[str]
    scan: DirScan
    memories: dict[str, Entry]
    changed_files: dict[str, Scanned]
    ownership: Ownership
    state: DirState
    vouches_for_seen: bool  # `seen` named every held memory (see Held.seen_token)


def read_held(
    rt: Runtime,
    md: MemoryDir,
    held: Held,
    only: Set[str],
    state: DirState | None = None,
    whole: DirScan | None = None,
    mode: str | None = None,
) -> HeldRead | None:
    """Read for a pass over `held` after `only` changed; None: the full read is needed.

    It applies while the index files are as the view has them: the daemon's as memoryd's last
    pass left them (held_as_left), the settled view's as it just read them (`whole`: the scan
    of the whole dir that view made, which holds the changed files already); while the dir is
    managed and no late bytes wait in .MEMORY.md.prev."""
    if INDEX_NAME in only or ARCHIVE_NAME in only:
        return None
    state = rt.store.load(md.real_path) if state is None else state
    local = local_of(rt, md)
    with fsops.open_dir(md.real_path) as dir_fd:
        if whole is None:
            valid = held_as_left(dir_fd, state, held, local, rt.config.index)
        else:
            valid = still(dir_fd, INDEX_NAME, held.main) and still(
                dir_fd, ARCHIVE_NAME, held.archive
            )
        if not valid or late_bytes_pending(dir_fd, md, state):
            return None
    parse = rt.config.parse
    scan = whole or scan_dir(
        md.real_path,
        max_file_bytes=parse.max_file_bytes,
        max_frontmatter_bytes=parse.max_frontmatter_bytes,
        previous=held.scan,
        only=only,
        versions=rt.versions,
    )
    memories = dict(held.memories)
    changed_files = {n: scan.files[n] for n in only if n in scan.files}
    for name in only:
        info = changed_files.get(name)
        if info is not None and info.kind == "memory":
            memories[name] = local.entry(info)
        else:
            memories.pop(name, None)
    arrived = None
    if held.seen_token is not None and rt.store.seen_token(md.real_path) is held.seen_token:
        # `seen` names the held memories: only a changed file can be new to it (no look at
        # the 10,000 others, which costs more than the rest of the ownership check).
        arrived = {n for n in only if n in memories and n not in state.seen}
    ownership = decide_ownership(
        held.index.main,
        None,
        {},
        memories.keys(),
        mode or rt.config.override_for(md.path).mode,
        LastPass(
            state.seen.keys(),
            as_left(state, held.main),
            archive_targets=held.index.where.keys(),
            # The last pass gave every memory file a pointer but those still in their grace.
            only_missing=only | held.waiting,
            arrived=arrived,
        ),
    )
    if not ownership.managed:
        return None  # the full pass says why, once
    return HeldRead(
        held, only, scan, memories, changed_files, ownership, state, arrived is not None
    )


@dataclass(slots=True)
class SettledRead:
    """A one-shot pass's read of a settled dir: the stat scan of the whole dir, what it holds
    against memoryd's `seen` (Basis), and the held view of the index as it is with the names
    whose lines a pass must look at (None: the index is not as memoryd's last pass left it)."""

    scan: DirScan
    basis: Basis
    view: tuple[Held, set[str]] | None


def read_settled_dir(
    rt: Runtime, md: MemoryDir, state: DirState, forget: Set[str]
) -> SettledRead | None:
    """Read for `memoryd index` while the archive is as memoryd's last verified pass left it:
    a stat scan of the dir finds the files new, gone, renamed or redescribed since, and the
    held view takes the archive as it is. None: the full read (late bytes wait)."""
    with fsops.open_dir(md.real_path) as dir_fd:
        if late_bytes_pending(dir_fd, md, state):
            return None
    parse = rt.config.parse
    scan = scan_dir(
        md.real_path,
        rt.store.load_cache(md.real_path),
        max_file_bytes=parse.max_file_bytes,
        max_frontmatter_bytes=parse.max_frontmatter_bytes,
        versions=rt.versions,
    )
    basis = Basis.of(scan, state.seen)
    return SettledRead(scan, basis, settled_view(rt, md, basis, forget, state))
