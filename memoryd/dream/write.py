"""The write half of a dream pass: journal the plan, move each file to the trash (a rename,
never a delete), update the index, then commit the journal. A crash anywhere leaves the
journal, which the next memoryd command recovers (memoryd.trash.recovery)."""

import hashlib
import time
from collections.abc import Callable, Mapping, Set
from datetime import datetime
from pathlib import Path

from memoryd.discover.found import MemoryDir
from memoryd.dream import refused, rows
from memoryd.dream.kinds import PassStatus
from memoryd.dream.plan import Plan
from memoryd.dream.read import probe_index
from memoryd.dream.result import DreamResult
from memoryd.errors import MemorydError
from memoryd.indexing.outcome import IndexStatus
from memoryd.indexing.passes import index_after_dream
from memoryd.indexing.read import Basis, IndexKeeper, IndexText, index_file_again
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, Place, pointer_lines, pointer_places
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.trash import journal
from memoryd.trash import store as trash
from memoryd.trash.store import TrashRecord


def _trash_records(
    plan: Plan,
    md: MemoryDir,
    pass_id: str,
    folder: Path,
    missing: Mapping[str, list[str]] | None = None,
    known: Basis | None = None,
    versions: IndexKeeper | None = None,
) -> list[TrashRecord]:
    """One manifest record per planned move, each with a free name in the day folder.
    `missing`: for a stored plan (no items). `known`: the index files as the probe read them."""
    lines, places = index_lines(md, {move.filename for move in plan.moves}, known, versions)
    records: list[TrashRecord] = []
    taken: set[str] = set()
    for move in plan.moves:
        stored = trash.free_name(folder, move.filename, taken)  # never one name for two moves
        taken.add(stored)
        line, place = lines.get(move.filename), places.get(move.filename)
        records.append(
            TrashRecord(
                id=trash.new_id(),
                original_name=move.filename,
                stored_name=stored,
                day=folder.name,
                sha256=move.sha256,
                size=0,
                reason=move.reason,
                pass_id=pass_id,
                time=datetime.now().astimezone().isoformat(timespec="seconds"),
                duplicate_of=move.duplicate_of,
                superseded_by=move.superseded_by,
                index_line=line,
                index_place=place.to_json() if place is not None and line is not None else None,
                details={
                    "detail": move.detail,
                    "missing": plan.items[move.filename].missing
                    if missing is None
                    else missing[move.filename],
                    **({"overlap": round(move.overlap, 3)} if move.overlap is not None else {}),
                },
            )
        )
    return records


def apply(
    rt: Runtime,
    result: DreamResult,
    basis: Basis | None,
    grace: float,
    before_move: Callable[[str], None] | None = None,
    missing: Mapping[str, list[str]] | None = None,
) -> None:
    """Journal the moves of `result.plan`, make each whose file is still what was planned,
    update the index, then commit the journal. `missing`: see _trash_records."""
    md, plan = result.dir, result.plan
    assert plan is not None
    # The date is taken once: a pass running over midnight keeps one day folder.
    with trash.Mover(
        md.real_path, rt.today(), before_move=before_move, versions=rt.versions
    ) as mover:
        records = _trash_records(
            plan, md, result.pass_id, mover.folder, missing, basis, rt.versions
        )
        entry = _move_all(rt, md, mover, records, result)
    # The moves are on disk (the mover synced them): the index, then the journal's end.
    moved = {r.original_name for r in result.moved}
    result.index = index_after_dream(rt, md, moved, basis, grace=grace)
    if not result.index.write_failed:
        journal.commit(entry)
    # Else the journal stays: the next command's recovery removes the moved files' pointers
    # once the index can be written (DirState.gone says so too, but it may be on a full disk).


# Index outcomes after which the pass's pointer edits are not on disk: a failed pass. (Its
# moved files' pointers go at a later pass: DirState.gone, and the journal for a failed write.)
INDEX_NOT_UPDATED = (IndexStatus.ERROR, IndexStatus.CONFLICT, IndexStatus.SETTLING)


class IndexNotWritten(MemorydError):
    """The pass's index update failed: the pass failed, whatever it moved."""


def index_failure(md: MemoryDir, result: DreamResult) -> str:
    index = result.index
    assert index is not None
    what = index.message or "the index update failed"
    if not result.moved:
        return f"{md.path / INDEX_NAME} was not updated: {what}"
    return (
        f"{len(result.moved)} file(s) were moved to the trash, but {md.path / INDEX_NAME} "
        f"could not be updated: {what}. Their pointer lines go at the next `memoryd index` "
        "or `dream` that can write it"
    )


def _move_all(
    rt: Runtime, md: MemoryDir, mover: trash.Mover, records: list[TrashRecord], result: DreamResult
) -> journal.Journal:
    """Journal the records, then move each file that is still what was planned."""
    entry = journal.begin(rt.paths.state_dir, result.pass_id, md.real_path, records)
    for record in records:
        outcome = mover.move(record)
        if isinstance(outcome, trash.Unmoved):
            result.skipped_moves.append((record.original_name, outcome.why))
            kept = {"kept_as": outcome.kept_as} if outcome.kept_as else {}
            if outcome.kept_as:
                result.kept_as[record.original_name] = outcome.kept_as
            rt.audit.write(
                "dream.move_skipped", dir=md.path, file=record.original_name, why=outcome.why,
                **kept,
            )  # fmt: skip
            continue
        journal.mark_done(entry, record.id)
        result.moved.append(outcome)
        rt.audit.write(
            "trash.moved",
            dir=md.path,
            file=record.original_name,
            id=record.id,
            reason=record.reason,
            sha256=record.sha256,
            duplicate_of=record.duplicate_of,
            superseded_by=record.superseded_by,
            stored=trash.stored_label(md.real_path, record.day, record.stored_name),
        )
    return entry


class PlanChanged(MemorydError):
    """A refused plan's files are not what it was made from: it is not applied."""


def apply_refused(
    rt: Runtime,
    md: MemoryDir,
    pass_id: str,
    *,
    before_move: Callable[[str], None] | None = None,
) -> DreamResult:
    """Apply exactly the plan a refused pass kept (memoryd.dream.refused), with a pass's
    journalled, checked moves and index update, under the dir's writer lock; only while the
    index is memoryd's and every file the plan rests on holds the bytes it was planned from
    (PlanChanged names those that do not). The plan is removed once applied."""
    started = time.monotonic()
    with rt.store.lock(md.real_path):
        stored = refused.load(rt.paths.state_dir, md.real_path, pass_id)
        probe = probe_index(rt, md)
        ownership, scan = probe.ownership, probe.scan
        if not (ownership and ownership.managed) or scan is None:
            why = ownership.reason if ownership else "its index cannot be read"
            raise MemorydError(
                f"{md.path}: memoryd does not manage this dir's index now ({why}); the plan "
                f"{pass_id} is not applied and nothing moved"
            )
        changed = _changed_since(rt, md, stored.files)
        if changed:
            raise PlanChanged(
                f"{md.path}: the plan {pass_id} is not applied, nothing moved: "
                + "; ".join(f"{name} {why}" for name, why in changed)
                + ". Run `memoryd dream` for a plan of the files as they are now"
            )
        result = DreamResult(md, pass_id, PassStatus.COMPLETED, Plan({}, stored.as_moves()))
        result.files = len(scan.memories)
        basis = Basis.of(scan, rt.store.load(md.real_path).seen, probe.snapshot)
        del scan, probe
        rt.audit.write("dream.started", dir=md.path, pass_id=pass_id, trigger="apply")
        apply(rt, result, basis, 0.0, before_move, stored.missing())
        refused.remove(rt.paths.state_dir, md.real_path, pass_id)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if result.index is not None and result.index.status in INDEX_NOT_UPDATED:
            result.status, result.message = PassStatus.FAILED, index_failure(md, result)
            rows.failed(rt, result, rt.clock(), counted=False)
            return result
        rt.audit.write(
            "dream.completed",
            dir=md.path,
            pass_id=pass_id,
            status=result.status,
            applied="refused plan",
            **rows.summary(result),
        )
        state = rt.store.load(md.real_path)
        state.last_dream_ts, state.last_dream_result = rt.clock(), result.status
        rt.store.save(md.real_path, state)
    return result


def _changed_since(rt: Runtime, md: MemoryDir, files: Mapping[str, str]) -> list[tuple[str, str]]:
    """The files of a stored plan that no longer hold the bytes it was made from."""
    out = []
    with fsops.open_dir(md.real_path) as fd:
        for name, sha256 in sorted(files.items()):
            try:
                data, _ = fsops.read_regular(fd, name, rt.config.parse.max_file_bytes)
            except FileNotFoundError:
                out.append((name, "is gone"))
                continue
            except (OSError, ValueError):
                out.append((name, "cannot be read"))
                continue
            if hashlib.sha256(data).hexdigest() != sha256:
                out.append((name, "changed since the plan"))
    return out


def index_lines(
    md: MemoryDir,
    wanted: Set[str],
    known: Basis | None = None,
    versions: IndexKeeper | None = None,
) -> tuple[dict[str, str], dict[str, Place]]:
    """The pointer line of each of `wanted` in MEMORY.md or the archive, and its place in
    MEMORY.md (for a restore). `known`: the index files as the probe read them, taken while
    they are still those files. The archive gets one regex scan for pointer lines (its 100,000
    lines as objects cost ~100 MB); MEMORY.md is read line by line for the headings."""
    out: dict[str, str] = {}
    places: dict[str, Place] = {}
    texts: dict[str, IndexText | None] = {
        INDEX_NAME: known.main if known is not None else None,
        ARCHIVE_NAME: known.archive_text() if known is not None else None,
    }
    with fsops.open_dir(md.real_path) as fd:
        for name in (INDEX_NAME, ARCHIVE_NAME):
            text = index_file_again(fd, name, texts[name], versions).text or ""
            for found in pointer_lines(text):
                if found.target in wanted:
                    out.setdefault(found.target, found.content)
            if name == INDEX_NAME and text:
                places = pointer_places(text, wanted)
    return out, places
