"""Trash commands across dirs (list, restore with its pointer line, rotation) and pass hints."""

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from memoryd.discover.finder import memory_dir_at
from memoryd.discover.found import MemoryDir
from memoryd.errors import MemorydError
from memoryd.indexing.passes import restore_pointers
from memoryd.indexing.read import IndexKeeper, read_index_file
from memoryd.model.index import INDEX_NAME, Place, pointer_targets
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.trash import days as trash_days
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import restored
from memoryd.trash import store as trash
from memoryd.versions import kept, witness


@dataclass(slots=True)
class Listed:
    dir: MemoryDir
    entry: trash_manifest.Entry


@dataclass(slots=True)
class TrashListing:
    listed: list[Listed] = field(default_factory=list)
    invalid: list[tuple[MemoryDir, trash_manifest.Invalid]] = field(default_factory=list)


def list_trash(dirs: Sequence[MemoryDir], *, include_restored: bool = False) -> TrashListing:
    """The restorable files of each dir's trash, and the manifest records memoryd will not act
    on (names the mover could not have written), which are never listed as restorable."""
    out = TrashListing()
    for md in dirs:
        found = trash_manifest.contents(md.real_path)
        out.invalid.extend((md, bad) for bad in found.invalid)
        for entry in found.entries:
            if entry.restored_as and not include_restored:
                continue
            out.listed.append(Listed(md, entry))
    return out


def known_dirs(rt: Runtime) -> list[MemoryDir]:
    """Every dir memoryd has worked on before (its state remembers them) that still exists."""
    out = []
    for path in rt.store.dirs():
        folder = Path(path)
        if folder.is_dir():
            try:
                out.append(memory_dir_at(folder, rt.config))
            except MemorydError:
                continue
    return out


def find_entry(rt: Runtime, dirs: Sequence[MemoryDir], key: str) -> Listed:
    """The trashed file named by id, path or name (every form `trash list` prints; see
    trash.manifest.find). A path names its own dir (the one holding its `.trash`, or the folder
    of the path it had); a path or a name means its newest entry still in the trash, in any dir,
    else its newest restored one (which restore refuses, saying so)."""
    candidates = list(dirs)
    path = Path(key).expanduser()
    if trash.TRASH_DIR in path.parts:
        holder = Path(*path.parts[: path.parts.index(trash.TRASH_DIR)])
        candidates = [memory_dir_at(holder, rt.config), *candidates]  # gone: a usage error
    elif "/" in key:
        # `<dir>/<file>` as the text listing prints it; `<day>/<file>` from the memory dir.
        named = []
        for holder in (path.parent, Path.cwd()):
            with contextlib.suppress(MemorydError, OSError):
                named.append(memory_dir_at(holder, rt.config))
        candidates = named + candidates
    done: Listed | None = None
    seen: set[Path] = set()
    for md in candidates:
        if md.real_path in seen:
            continue
        seen.add(md.real_path)
        try:
            found = trash_manifest.find(md.real_path, key)
        except MemorydError:
            continue
        if found is not None and (not found.restored_as or found.record.id == key):
            return Listed(md, found)
        if found is not None and done is None:
            done = Listed(md, found)
    if done is not None:
        return done
    for md in candidates:
        try:
            invalid = trash_manifest.contents(md.real_path).invalid
        except MemorydError:
            continue
        for bad in invalid:
            if bad.id and bad.id == key:
                raise MemorydError(bad.message)
    raise MemorydError(
        f"{key}: no trash manifest knows this id, path or name; `memoryd trash list` shows "
        "what can be restored (a file the manifest does not know is never restored)"
    )


def restore(rt: Runtime, listed: Listed) -> str:
    """Move the file back, pin it (a restore is final: no pass moves it again until its
    bytes change; see memoryd.trash.restored), and give it its pointer line again (the old wording
    if it had one) where it sat, if that place is still there."""
    with rt.store.lock(listed.dir.real_path):
        return _restore(rt, listed)


def _restore(rt: Runtime, listed: Listed) -> str:
    record = listed.entry.record
    real = listed.dir.real_path
    when = restored.now_iso(rt.clock())
    planned = trash_manifest.restore_name(real, record.original_name)
    if not listed.entry.restored_as:
        # Pinned before it moves back: a pass (after this lock) never sees it unpinned. Under
        # the name it will have: a pin replaces the one of its name, and a taken name is
        # another file's, pinned perhaps by an earlier restore.
        restored.record(rt.store, real, restored.Pin(planned, record.sha256, when, record.id))
    name = trash_manifest.restore(real, listed.entry)
    kept.note_restored(rt.versions, real, name, record.sha256, record.size)
    if name != planned:  # taken meanwhile (by another process: this one holds the lock)
        restored.record(rt.store, real, restored.Pin(name, record.sha256, when, record.id))
    rt.audit.write(
        "trash.restored",
        dir=listed.dir.path,
        file=record.original_name,
        id=record.id,
        **{"as": name},
    )
    preferred = {}
    if record.index_line and name == record.original_name:
        preferred[name] = record.index_line
    place = Place.of(record.index_place) if record.index_line else None
    restore_pointers(rt, listed.dir, preferred, {name: place} if place else {})
    return name


# --- rotation ----------------------------------------------------------------------------------
# Retention rests on time memoryd itself has watched pass since it last saw a day folder
# change, never on the folder's name alone (a pass under a clock set in the past files its
# moves under an old date) nor on the wall clock alone (a clock a year ahead makes the whole
# trash "old"): the clock check of `witness`, which the version store shares. The clock
# record also keeps the last run's date; `trash.days.watched`, each dir's day folders as seen.
Clock = witness.Clock


def _clock_record(rt: Runtime) -> dict[str, Any]:
    return witness.read_record(rt.paths.state_dir)


def _last_run(rt: Runtime) -> date | None:
    try:
        return date.fromisoformat(_clock_record(rt)["last_run"])
    except (KeyError, TypeError, ValueError):
        return None


def _save_last_run(rt: Runtime, today: date) -> None:
    with witness.transaction(rt.paths.state_dir):
        record = _clock_record(rt)
        previous = _last_run(rt)
        if previous is None or today > previous:
            witness.write_record(rt.paths.state_dir, {**record, "last_run": today.isoformat()})


def observe_clock(rt: Runtime, *, save: bool = True) -> Clock:
    """Take a reading of the clocks; `save=False` (a dry run) records nothing."""
    return witness.observe(rt.paths.state_dir, rt.clock(), rt.boot(), save=save)


@dataclass(slots=True)
class Rotation:
    dir: MemoryDir
    purged: list[str] = field(default_factory=list)
    would_purge: list[str] = field(default_factory=list)
    refused: str = ""
    leftovers: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # past retention by name, kept
    problems: list[str] = field(default_factory=list)  # day folders nothing can vouch for


def rotate(
    rt: Runtime,
    dirs: Sequence[MemoryDir],
    *,
    keep_days: int | None = None,
    dry_run: bool = False,
    wait_lock: bool = True,
) -> list[Rotation]:
    """Purge day folders past retention in each dir, unless the clock looks wrong. Each dir
    under its writer lock; `wait_lock=False` (the daemon) leaves a busy dir for the next time.

    `keep_days` (a person's `--older-than`) changes the retention, not how age is measured:
    a folder still goes only once memoryd has watched it that long, and no clock memoryd has
    seen puts one of its records within that many days."""
    today = rt.today()
    last = _last_run(rt)
    keep = rt.config.trash.keep_days if keep_days is None else keep_days
    clock = observe_clock(rt, save=not dry_run)
    results = []
    for md in dirs:
        result = Rotation(md)
        with contextlib.ExitStack() as held:
            if not dry_run and not held.enter_context(rt.store.lock(md.real_path, wait=wait_lock)):
                result.refused = "another memoryd process is working on this dir"
                results.append(result)
                continue
            _rotate_one(rt, md, result, _When(today, last, clock), keep, dry_run)
        results.append(result)
    if not dry_run and not any(r.refused for r in results):
        _save_last_run(rt, today)
    return results


@dataclass(frozen=True, slots=True)
class _When:
    today: date
    last_run: date | None
    clock: Clock


def _held_because(
    day: str, facts: trash_days.DayFacts, since: float, when: _When, keep: int
) -> str | None:
    """Why a day folder past retention by its name is kept all the same, or None."""
    if facts.problem:
        return facts.problem
    if day >= when.today.isoformat():  # (a folder of a clock gone back is watched below)
        return "it is today's folder"
    span = keep * 86400.0
    clock = when.clock
    if witness.seen_within(clock, facts.times, span):
        return f"one of its records was written within {keep} days by a clock memoryd has seen"
    if not witness.may_go(clock, since, facts.times, span):
        watched = witness.watched(clock, since)
        return f"memoryd has watched it for {max(0.0, watched) / 86400:.1f} of {keep} days"
    return None


def _rotate_one(
    rt: Runtime,
    md: MemoryDir,
    result: Rotation,
    when: _When,
    keep: int,
    dry_run: bool,
) -> None:
    try:
        names = trash_days.day_names(md.real_path)
        if not dry_run:
            result.leftovers = trash_days.finish_leftovers(md.real_path)
    except MemorydError as error:  # `.trash` is a symlink or a file: nothing is touched
        result.refused = str(error)
        if not dry_run:
            rt.audit.write(
                "trash.purged", dir=md.path, days=[], refused=result.refused, level="warning"
            )
        return
    plan = trash_days.plan_purge(names, when.today, keep, when.last_run)
    result.refused = plan.refused
    known = trash_days.watched(rt.store, md.real_path)
    days: dict[str, trash_days.Watched] = {}
    purge: list[str] = []
    for day in names:
        facts = trash_days.day_facts(md.real_path, day)
        identity, since, said = known.get(day, ("", 0.0, ""))
        since = since if facts.identity == identity != "" else when.clock.witnessed
        days[day] = (facts.identity, since, "")
        if day not in plan.purge:
            continue
        if facts.problem:  # said once a folder is past retention by its name, not before
            message = (
                f"{md.real_path / trash.TRASH_DIR / day}: kept, {facts.problem}; look inside "
                "and remove it by hand if it holds nothing you want"
            )
            result.problems.append(message)
            days[day] = (facts.identity, since, facts.problem)
            if not dry_run and said != facts.problem:
                rt.audit.write("trash.kept", dir=md.path, day=day, problem=facts.problem)
        why = _held_because(day, facts, since, when, keep)
        if why is None:
            purge.append(day)
        else:
            result.kept.append((day, why))
    if dry_run:
        result.would_purge = purge
        return
    if purge:
        result.purged = trash_days.purge_days(md.real_path, purge)
        rt.audit.write("trash.purged", dir=md.path, days=result.purged, keep_days=keep)
    for day in result.purged:
        days.pop(day, None)
    if days != known:
        trash_days.save_watched(rt.store, md.real_path, days)
    if plan.refused and names:
        rt.audit.write("trash.purged", dir=md.path, days=[], refused=plan.refused, level="warning")


# --- pass hints (DESIGN §4.12) -----------------------------------------------------------------
_TYPE_PREFIX = re.compile(r"^(?:user|feedback|project|reference)[_-]")


def topic_key(filename: str) -> str:
    stem = _TYPE_PREFIX.sub("", filename.removesuffix(".md").lower())
    return re.sub(r"[^a-z0-9]+", "_", stem).strip("_")


def orphan_hints(dirs: Sequence[MemoryDir]) -> str:
    """Project memory dirs whose project folder is gone; a dir whose transcripts do not tell
    its folder is neither gone nor there, and is said as unknown, with why."""
    projects = [d for d in dirs if d.kind == "project"]
    if not projects:
        return "orphaned project dirs: skipped (no project memory dirs in this run)"
    gone = [d for d in projects if "no longer exists" in d.repo_reason]
    unknown = [d for d in projects if d.repo_root is None and d not in gone]
    checked = len(projects) - len(unknown)
    if gone:
        listed = "; ".join(f"{d.path} ({d.repo_reason})" for d in gone)
        line = f"orphaned project dirs (hint only, nothing removed): {listed}"
    elif unknown and not checked:
        line = "orphaned project dirs: unknown"
    else:
        line = f"orphaned project dirs: none ({checked} checked)"
    if unknown:
        why = "; ".join(f"{d.path} ({d.repo_reason})" for d in unknown)
        line += f"; unknown for {len(unknown)}, their project folder not known: {why}"
    return line


def project_of(md: MemoryDir) -> Path:
    """The project a memory dir belongs to: its repo root (a repo's agent dirs and its Claude
    project dir are one project), else the dir itself."""
    return md.repo_root.absolute() if md.repo_root is not None else md.real_path


def _index_targets(md: MemoryDir, versions: IndexKeeper | None = None) -> list[str]:
    try:
        with fsops.open_dir(md.real_path) as fd:
            text = read_index_file(fd, INDEX_NAME, versions).text or ""
    except OSError:
        return []  # gone or unreadable since discovery: it names nothing
    return pointer_targets(text)


def promotion_candidates(
    dirs: Sequence[MemoryDir],
    declined: dict[Path, set[str]],
    known: Sequence[MemoryDir] = (),
    texts: Mapping[Path, str] | None = None,
    versions: IndexKeeper | None = None,
) -> tuple[str, list[tuple[str, str, int]]]:
    """Memories of `dirs` whose topic key appears in the indexes of 2+ other projects (DESIGN
    §4.12; listed only), looked for in `dirs` and every other `known` dir.

    `texts`: MEMORY.md's text of the dirs a pass has it of, by real path (the dream pass's,
    `DreamResult.index_text`): those are not read again. Every other dir's is read once.
    `versions`: the version store, told of the indexes read."""
    texts = texts or {}
    every = {md.real_path: md for md in (*known, *dirs)}
    targets = {
        path: pointer_targets(texts[path]) if path in texts else _index_targets(md, versions)
        for path, md in every.items()
    }
    keys_by_project: dict[Path, set[str]] = {}
    for path, md in every.items():
        keys = keys_by_project.setdefault(project_of(md), set())
        keys.update(topic_key(t) for t in targets[path])
        keys.discard("")
    if len(keys_by_project) < 3:
        return (
            "promotion candidates: skipped (needs memory dirs of 3 or more projects; "
            f"found {len(keys_by_project)})"
        ), []
    found: list[tuple[str, str, int]] = []
    for md in dirs:
        own = project_of(md)
        for target in sorted(set(targets[md.real_path])):
            if target in declined.get(md.real_path, set()):
                continue
            key = topic_key(target)
            others = sum(1 for p, keys in keys_by_project.items() if p != own and key in keys)
            if others >= 2:
                found.append((str(md.path), target, others))
    if not found:
        return f"promotion candidates: none across {len(keys_by_project)} projects", []
    return f"promotion candidates: {len(found)} (listed only)", found
