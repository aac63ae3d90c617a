"""Recovery at start-up: finish or roll back every pass a crash left unfinished (DESIGN §2.3)."""

from pathlib import Path

from memoryd.discover.finder import memory_dir_at
from memoryd.errors import MemorydError
from memoryd.indexing.passes import update
from memoryd.runtime import Runtime
from memoryd.trash import journal
from memoryd.trash.store import TrashRecord


def recover(rt: Runtime) -> list[journal.Recovery]:
    """Finish or roll back every pass a crash left unfinished; log each as `pass.recovered`.
    A journal whose dir's writer lock another process holds is a running pass's: left alone.
    """
    done = []
    for pass_id in journal.pending(rt.paths.state_dir):
        entry = journal.load(rt.paths.state_dir, pass_id)
        if entry is None:
            continue
        with rt.store.lock(entry.dir, wait=False) as locked:
            # Read again under the lock: the pass that wrote it may have ended meanwhile.
            entry = journal.load(rt.paths.state_dir, pass_id) if locked else None
            if entry is not None:
                recovery = _recover_one(rt, entry)
                if recovery is not None:
                    done.append(recovery)
    return done


def _note_moves(rt: Runtime, path: Path, moved: list[TrashRecord]) -> None:
    """Tell the version store the moves a killed pass made but did not log there: else the
    next scan takes the file for deleted outside memoryd (a false `memory.deleted_outside`)."""
    store = rt.versions
    if store is None or not moved:
        return
    from memoryd.versions import kept  # imported already: there is a store

    latest = store.latest_of(path)
    for record in moved:
        if latest.get(record.original_name) != (record.sha256, "moved"):
            kept.note_moved(store, path, record.original_name, record.sha256,
                            record.size, record.id)  # fmt: skip


def _recover_one(rt: Runtime, entry: journal.Journal) -> journal.Recovery | None:
    """Settle one crashed pass's moves, update its dir's index, then drop the journal (kept
    when a manifest record could not be written yet)."""
    recovery = None
    if entry.dir.is_dir():
        recovery = journal.settle(entry)
        _note_moves(rt, entry.dir, recovery.moved)
        try:
            md = memory_dir_at(entry.dir, rt.config)
        except MemorydError:
            md = None
        unwritten = False
        if md is not None:
            index = update(rt, md, forget={r.original_name for r in recovery.moved})
            unwritten = index.write_failed
            if unwritten:
                recovery.problems.append(
                    f"{md.path}: its index could not be written ({index.message}); the moved "
                    "files' pointer lines go at the next command that can write it"
                )
        rt.audit.write(
            "pass.recovered", dir=entry.dir, journal=entry.pass_id, outcome=recovery.outcome
        )
        if recovery.unrecorded or unwritten:
            # Kept: the next command writes the missing manifest records, or the index.
            return recovery
    journal.discard(entry)
    return recovery
