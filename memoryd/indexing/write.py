"""Write and report: swap the plan in with the check-and-swap writer (fsops.replace_file, told
the runtime's own-write callback), verify what was written, then audit rows, said-once
bookkeeping and the dir's state, all after the write.
"""

import contextlib
import os
import time
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from memoryd.discover import gitwork
from memoryd.discover.found import MemoryDir
from memoryd.errors import MemorydError, WriteConflict
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.plan import Plan
from memoryd.indexing.read import (
    BeingWritten,
    Held,
    IndexKeeper,
    Request,
    encode,
    local_of,
    read_index_file,
    settled_mark,
    stat_key,
    view_kind,
    with_bom,
)
from memoryd.indexing.scan import DirScan
from memoryd.model import index_held
from memoryd.model.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    PREV_NAME,
    verify,
)
from memoryd.model.index_edit import IndexEdit, note_own
from memoryd.model.scanned import Scanned
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.storage.fsops import FileIdentity
from memoryd.storage.state import DirState


def report_problems(
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


def count_changed(state: DirState, scan: DirScan, memories: Set[str], now: float) -> None:
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


def report_conflict(rt: Runtime, md: MemoryDir, attempt: int, conflict: WriteConflict) -> None:
    rt.audit.write(
        "index.conflict", dir=md.path, file=INDEX_NAME, attempt=attempt, detail=str(conflict)
    )


def settling_outcome(md: MemoryDir, busy: BeingWritten, daemon: bool) -> IndexOutcome:
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


def write_and_report(
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
    left = left_files(state, scan, req.forget, plan.scope)
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
        [] if outcome.problems else settled_mark(main_id, archive_id, cfg, local_of(rt, md).heading)
    )
    state.note_gone(left, now)
    _remember(rt, md, req, state, plan)
    held_ok = outcome.status in (IndexStatus.UPDATED, IndexStatus.UNCHANGED)
    if (req.hold or plan.scope is not None) and held_ok and edit.main is not None:
        outcome.held = _leave_held(rt, md, plan, main_id, archive_id)
    return outcome


def _remember(rt: Runtime, md: MemoryDir, req: Request, state: DirState, plan: Plan) -> None:
    """Save what this pass over a managed index leaves in the dir's state (and its cache)."""
    separator = rt.config.index.separator
    state.known = True
    state.managed = True
    state.reported.pop("unmanaged", None)
    if plan.scope is None:
        _remember_all(state, plan, separator, req.preferred.keys())
        with rt.store.transaction():  # the pass's saves commit as one
            rt.store.save(md.real_path, state)
            if req.persist_cache:
                rt.store.save_cache(md.real_path, plan.scan.files)
    else:
        own_changed = _remember_changed(state, plan, separator)
        rt.store.save(md.real_path, state, seen_changed=plan.scope, own_changed=own_changed)


def _leave_held(
    rt: Runtime,
    md: MemoryDir,
    plan: Plan,
    main_id: FileIdentity | None,
    archive_id: FileIdentity | None,
) -> Held:
    """The held view this pass leaves for the next one of a caller that keeps it."""
    edit = plan.edit
    index = plan.index
    if index is None:
        index = index_held.hold(edit.main, edit.archive, set(edit.dead_links))
    return Held(
        plan.scan,
        index,
        plan.memories,
        main_id,
        archive_id,
        plan.main.bom,
        plan.archive.bom,
        frozenset(edit.waiting),
        rt.config.index,
        # Only a pass that began from its own `seen` leaves one that names `memories`
        # (after another process's save, the next full pass makes them agree again).
        rt.store.seen_token(md.real_path) if plan.vouches_for_seen else None,
    )


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


# Where a writer's late bytes go when MEMORY.md is no longer memoryd's (see late_write).
LATE_NAME = INDEX_NAME + ".late"


def late_write(rt: Runtime, md: MemoryDir, state: DirState) -> None:
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


def left_files(
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
                data = with_bom(plan.archive_data, archive.bom)
            else:
                assert edit.archive is not None
                data = encode(edit.archive, archive.bom)
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
            data = out.data[INDEX_NAME] = encode(edit.main, main.bom)
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
                out.prev = [stat_key(main.identity), stat_key(out.main)]
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
    before = len(encode(main.text or "", main.bom))
    after = len(encode(edit.main or "", main.bom))
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


def remove_stray_temps(rt: Runtime, md: MemoryDir, scan: DirScan) -> None:
    if scan.own_temps:
        stray = fsops.remove_stray_temps(md.real_path, scan.own_temps, time.time())
        if stray:
            rt.audit.write("index.temp_removed", dir=md.path, files=stray)


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
