"""Plan: the edit a pass makes of what it read, one `Plan` for the full and the held view."""

from collections.abc import Mapping, Set
from dataclasses import dataclass

from memoryd.config import IndexConfig
from memoryd.discover.found import MemoryDir
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.read import (
    Held,
    HeldRead,
    IndexText,
    Local,
    Request,
    Snapshot,
    budget_of,
    encode,
    local_of,
    still,
    view_kind,
    with_bom,
)
from memoryd.indexing.scan import DirScan
from memoryd.model import index_held
from memoryd.model.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    Entry,
    LastPass,
    LinkKind,
    decide_ownership,
    split_lines,
    view_of,
)
from memoryd.model.index_edit import IndexEdit, IndexInput, update_index
from memoryd.model.scanned import Scanned
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.storage.state import DirState


def _ready(memories: dict[str, Scanned], now: float, grace: float) -> set[str]:
    return {n for n, s in memories.items() if now - s.mtime_ns / 1e9 >= grace}


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

    @property
    def texts(self) -> tuple[tuple[str, IndexText], tuple[str, IndexText]]:
        return ((INDEX_NAME, self.main), (ARCHIVE_NAME, self.archive))


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
            budget=budget_of(cfg),
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


def plan_diff(snapshot: Snapshot, plan: Plan) -> str:
    edit = plan.edit
    return (_diff(INDEX_NAME, snapshot.main.text, edit.main) if plan.main_changed else "") + (
        _diff(ARCHIVE_NAME, snapshot.archive.text, edit.archive) if plan.archive_changed else ""
    )


def as_planned(
    rt: Runtime, md: MemoryDir, held: Held, mode: str | None, scan: DirScan
) -> IndexOutcome | None:
    """A one-shot update of a `_quiet` index: the last verified pass's plan stands and is not
    made again (one that cannot get within the agent's window then costs what one within it
    costs); what it says (dead and invalid links kept, the window) is read off the index.
    None: plan (the config or a mark turned the dir off since, a file was made read-only)."""
    override = mode or rt.config.override_for(md.path).mode
    # The reason is the one a full pass gives (a manage mark or the config before "as left").
    ownership = decide_ownership(
        held.index.main, None, {}, frozenset(), override, LastPass(as_left=True)
    )
    if not ownership.managed:
        return None
    with fsops.open_dir(md.real_path) as dir_fd:  # (made read-only since: the pass says so)
        if not (still(dir_fd, INDEX_NAME, held.main) and still(dir_fd, ARCHIVE_NAME, held.archive)):
            return None
    index, cfg = held.index, rt.config.index
    main = index.main or ""
    view = view_of(main, budget_of(cfg), view_kind(md))
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


def archive_lines(index: index_held.HeldIndex) -> list[bytes] | None:
    return index.lines if index.exists else None


def plan_held(
    rt: Runtime, md: MemoryDir, read: HeldRead, grace: float, forget: Set[str]
) -> Plan | None:
    """Plan over the held view: the edit of the lines the changed files touch. It gives what
    plan_full would (tests/test_index_held.py checks the edit against update_index over
    random indexes). None: index_held cannot make it (the full pass plans instead)."""
    held, scan, memories, state = read.held, read.scan, read.memories, read.state
    only, index, cfg, local = read.only, read.held.index, rt.config.index, local_of(rt, md)
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
            separator=cfg.separator,
            budget=budget_of(cfg),
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
    edit, archive_changed = result.edit, result.archive_changed
    main = IndexText(index.main, held.main, held.main_bom)
    # The archive as its lines: joined, the new one and the held one would each be a 2 MB
    # copy made for one write and one comparison.
    old_lines = archive_lines(index) if archive_changed else None
    return Plan(
        edit,
        main,
        IndexText(None, held.archive, held.archive_bom),  # its text is not needed
        edit.main != main.text,
        archive_changed,
        scan,
        memories,
        only,
        {n: s for n, s in read.changed_files.items() if s.kind == "problem"},
        archive_data=archive_lines(result.held) if archive_changed else None,
        expected=(
            encode(index.main, held.main_bom) if index.main is not None else None,
            None if old_lines is None else with_bom(old_lines, held.archive_bom),
        ),
        index=result.held,
        vouches_for_seen=read.vouches_for_seen,
    )
