"""Keep one memory dir's MEMORY.md in step with its files: the index pass's use cases.

`update` (`memoryd index`), `check`, `restore_pointers`, `update_changed` (the daemon),
`update_after_moves` and `ownership_for_dream` (the dream pass) each fill in a `Request` and run
one pass: read (indexing.read) -> plan (indexing.plan) -> write and report (indexing.write).
"""

import contextlib
import re
import time
from collections.abc import Mapping, Set
from dataclasses import replace

from memoryd.discover import gitwork
from memoryd.discover.found import MemoryDir
from memoryd.errors import WriteConflict
from memoryd.indexing.outcome import BUSY_RETRY, CONFLICT_RETRIES, IndexOutcome, IndexStatus
from memoryd.indexing.plan import as_planned, plan_diff, plan_full, plan_held
from memoryd.indexing.read import (
    SETTLE_WAIT,
    Basis,
    BeingWritten,
    Held,
    Request,
    as_left,
    being_written,
    local_of,
    read_full,
    read_held,
    read_settled,
    read_settled_dir,
)
from memoryd.indexing.scan import DirScan
from memoryd.indexing.write import (
    count_changed,
    late_write,
    left_files,
    remove_stray_temps,
    report_conflict,
    report_problems,
    settling_outcome,
    write_and_report,
)
from memoryd.model.index import (
    INDEX_NAME,
    Place,
    local_links,
    release_parsed,
)
from memoryd.runtime import Runtime
from memoryd.storage.state import DirState


# --- the use cases ------------------------------------------------------------------------------
def update(
    rt: Runtime, md: MemoryDir, *, grace: float = 0.0, forget: Set[str] = frozenset()
) -> IndexOutcome:
    """`memoryd index` (and the index update after recovery, with the files it moved back as
    `forget`): bring MEMORY.md in step with the dir's files. While the index files are as
    memoryd's last verified pass left them, only the lines of files that changed since are
    looked at (see read.read_settled_dir)."""
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
            snapshot = read_full(rt, md, state, Request(check=True))
            # A dream pass acts on what it finds: a blank MEMORY.md that is being
            # written is not "missing or blank, so managed". It waits a little for it.
            busy = being_written(md, snapshot.texts, state, rt.clock(), blank_only=True)
            if busy is None:
                break
            pause = max(busy.due - rt.clock(), 0.05)
            if waited + pause > SETTLE_WAIT:
                return settling_outcome(md, busy, False)
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


# --- one pass: read -> plan -> write -> report -------------------------------------------------
def run_pass(rt: Runtime, md: MemoryDir, req: Request) -> IndexOutcome:
    """One index pass of one dir under its locks; retries from the other writer's version.

    The held view (a pass over just the changed files) is tried first when the caller has one,
    or the settled view for a one-shot update; where neither applies (read.read_held,
    read.read_settled_dir) or another writer got in, the full view runs.
    """
    writes = not req.check and rt.effect.writes
    with contextlib.ExitStack() as stack:
        if writes and not stack.enter_context(rt.store.lock(md.real_path, wait=req.wait_lock)):
            return IndexOutcome(
                md,
                IndexStatus.BUSY,
                message="another memoryd process is working on this dir; looking again shortly",
                retry_after=time.time() + BUSY_RETRY,
            )
        fast, req = _held_first(rt, md, req) if writes else (None, req)
        if fast is not None:
            return fast
        try:
            return _full_with_retries(rt, md, req)
        finally:
            release_parsed()


def _held_first(rt: Runtime, md: MemoryDir, req: Request) -> tuple[IndexOutcome | None, Request]:
    """The held or settled view's pass, if one applies; else None and the request for the full
    pass (given the settled view's scan, or told to scan in full after a conflict)."""
    # A restore, and a dir git tracks, take the full view: the held views know only that
    # the dir was managed, not whether a tracked one is memoryd's to write (see read_full).
    if req.preferred or req.placements:
        return None, req
    if gitwork.hands_off_reason(md.real_path, rt.named, rt.config.paths.manage_repos):
        return None, req
    if req.held is not None and req.only is not None:
        try:
            return _index_changed(rt, md, req.held, req), req
        except WriteConflict as conflict:
            report_conflict(rt, md, 1, conflict)
            return None, replace(req, previous=None)  # they may have changed anything
    if req.settled and req.held is None and not req.hold:
        try:
            fast, scanned = _index_settled(rt, md, req)
        except WriteConflict as conflict:
            report_conflict(rt, md, 1, conflict)
            return None, req  # the other writer may have changed anything: scan in full
        return fast, replace(req, scanned=scanned)
    return None, req


def _full_with_retries(rt: Runtime, md: MemoryDir, req: Request) -> IndexOutcome:
    """The full view's pass, again from the other writer's version after a conflict, and
    after a wait for an index file another program is writing."""
    waited = 0.0
    attempt = 0
    while attempt < CONFLICT_RETRIES:
        attempt += 1
        # After a conflict the other writer may have changed anything: scan in full.
        if attempt > 1:
            req = replace(req, previous=None, scanned=None, only=None, known=(None, None))
        try:
            return _index_once(rt, md, req)
        except WriteConflict as conflict:
            report_conflict(rt, md, attempt, conflict)
        except BeingWritten as busy:
            # Like a memory file still changing: the daemon looks again once it is due; a
            # command waits a little for it, then says so and leaves it.
            pause = max(busy.due - rt.clock(), 0.05)
            if req.daemon or waited + pause > SETTLE_WAIT:
                return settling_outcome(md, busy, req.daemon)
            rt.sleep(pause)
            waited += pause
            attempt -= 1  # not a conflict: the wait does not use up a retry
    return IndexOutcome(
        md,
        IndexStatus.CONFLICT,
        message=(
            f"{md.path / INDEX_NAME}: another writer kept changing it; nothing was lost, "
            "memoryd will try again on the next change"
        ),
    )


def _index_once(rt: Runtime, md: MemoryDir, req: Request) -> IndexOutcome:
    """The full view: read all of the dir, plan the whole edit, write, report."""
    writes = not req.check and rt.effect.writes
    state = rt.store.load(md.real_path)
    if state.prev and writes:
        late_write(rt, md, state)
    snapshot = read_full(rt, md, state, req)
    scan, ownership = snapshot.scan, snapshot.ownership
    now = rt.clock()
    outcome = IndexOutcome(md, IndexStatus.UNCHANGED, ownership, scan=scan)
    if writes:
        outcome.retry_after = report_problems(rt, md, scan.problems, state, req.settle)
        remove_stray_temps(rt, md, scan)
        if state.known:
            count_changed(state, scan, scan.memories.keys(), now)
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
    plan = plan_full(snapshot, state, req, rt.config.index, md, now, local_of(rt, md))
    outcome.edit = plan.edit
    if not writes:
        if plan.changed:
            outcome.status = IndexStatus.WOULD_CHANGE
            outcome.diff = plan_diff(snapshot, plan)
        return outcome
    if plan.changed:
        busy = being_written(md, snapshot.texts, state, now)
        if busy is not None:
            # What this pass found out is kept (what it reported, the files that left); the
            # index is left to its writer.
            state.note_gone(left_files(state, scan, req.forget), now)
            with contextlib.suppress(OSError):  # as after a failed write
                rt.store.save(md.real_path, state)
            raise busy
    return write_and_report(rt, md, req, state, plan, outcome, now)


def _index_changed(
    rt: Runtime,
    md: MemoryDir,
    held: Held,
    req: Request,
    state: DirState | None = None,
    whole: DirScan | None = None,
) -> IndexOutcome | None:
    """The held view: the pass after `req.only` (and `req.forget`) changed, touching only
    what they touch; None: run a full pass (read.read_held says when it applies). `state`:
    the dir's state as the caller loaded it. `whole`: a scan of the whole dir the caller made
    (the settled view): problems, stray temps and the pile-up count are of all of it, and its
    cache is saved."""
    only = (req.only or frozenset()) | req.forget
    read = read_held(rt, md, held, only, state, whole, req.mode)
    if read is None:
        return None
    plan = plan_held(rt, md, read, req.grace, req.forget)
    if plan is None:
        return None
    state, now = read.state, rt.clock()
    if plan.changed and being_written(md, plan.texts, state, now):
        return None  # the full pass waits for the other program, or says why it cannot
    # Report what the changed files are (the full view does this before it plans).
    outcome = IndexOutcome(
        md, IndexStatus.UNCHANGED, read.ownership, plan.edit, scan=read.scan, held_edit=True
    )
    scan = whole or read.scan
    problems = scan.problems if whole is not None else plan.problems
    scope = None if whole is not None else only
    outcome.retry_after = report_problems(rt, md, problems, state, req.settle, scope=scope)
    if whole is not None:
        remove_stray_temps(rt, md, whole)
    count_changed(state, scan, (whole.memories if whole else read.memories).keys(), now)
    outcome = write_and_report(
        rt, md, Request(grace=req.grace, forget=req.forget), state, plan, outcome, now
    )
    if whole is not None:
        if not outcome.write_failed:  # (as the full pass, which saves it with the state)
            rt.store.save_cache(md.real_path, whole.files)
        outcome.scan, outcome.held = whole, None  # (`held` names unread memories: not for reuse)
    return outcome


def _index_settled(
    rt: Runtime, md: MemoryDir, req: Request
) -> tuple[IndexOutcome | None, DirScan | None]:
    """A one-shot update that costs what the changes since the last verified pass cost
    (read.read_settled_dir): the held edit looks at the lines of the files changed since and
    at all of MEMORY.md (as the dream pass's update after its moves does). None: the full
    pass, given the scan made here, if any, which it takes as it is (each file is read once
    a pass)."""
    state = rt.store.load(md.real_path)
    read = read_settled_dir(rt, md, state, req.forget)
    if read is None or read.view is None:
        return None, read.scan if read is not None else None
    held, changed = read.view
    if not req.forget and _quiet(state, held, read.basis, read.scan):
        planned = as_planned(rt, md, held, req.mode, read.scan)
        if planned is not None:
            return planned, read.scan
    asked = replace(req, only=frozenset(changed))
    return _index_changed(rt, md, held, asked, state=state, whole=read.scan), read.scan


def _quiet(state: DirState, held: Held, basis: "Basis", scan: DirScan) -> bool:
    """Nothing changed since memoryd's last verified pass: MEMORY.md is as it left it (and
    the archive, or there is no held view), no memory is new, changed or gone since, each
    has a pointer, no pointer names a file seen leaving, and the scan has nothing to say."""
    if not as_left(state, held.main) or basis.unseen:
        return False
    if scan.problems or scan.changed or scan.reread or scan.own_temps or scan.vanished:
        return False
    in_main = {link.target for link in local_links(held.index.main or "")}
    where = held.index.where
    if any(n not in in_main and n not in where for n in basis.memories):
        return False  # one still in its grace at that pass
    return not any(t in state.gone for t in in_main | where.keys() if t not in basis.present)


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
    held = read_settled(rt, md, basis, moved) if basis is not None else None
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
