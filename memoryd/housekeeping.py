"""Trash commands across dirs (list, restore with its pointer line, rotation) and pass hints."""

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from memoryd import fsops, trash
from memoryd.discover import MemoryDir, explicit_dirs
from memoryd.errors import MemorydError
from memoryd.index import INDEX_NAME, pointer_targets
from memoryd.indexer import index_dir, read_index_file
from memoryd.runtime import Runtime

CLOCK_FILE = "trash-clock.json"


@dataclass(slots=True)
class Listed:
    dir: MemoryDir
    entry: trash.Entry


def list_trash(dirs: Sequence[MemoryDir], *, include_restored: bool = False) -> list[Listed]:
    out = []
    for md in dirs:
        for entry in trash.entries(md.real_path):
            if entry.restored_as and not include_restored:
                continue
            out.append(Listed(md, entry))
    return out


def known_dirs(rt: Runtime) -> list[MemoryDir]:
    """Every dir memoryd has worked on before (its state remembers them) that still exists."""
    out = []
    for path in sorted(rt.store.root.glob("*.json")):
        try:
            folder = Path(json.loads(path.read_bytes())["path"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if folder.is_dir():
            try:
                out.extend(explicit_dirs(folder, rt.config)[:1])
            except MemorydError:
                continue
    return out


def find_entry(rt: Runtime, dirs: Sequence[MemoryDir], key: str) -> Listed:
    """The trashed file named by id or path; a path inside a `.trash` names its own dir."""
    candidates = list(dirs)
    path = Path(key).expanduser()
    if trash.TRASH_DIR in path.parts:
        holder = Path(*path.parts[: path.parts.index(trash.TRASH_DIR)])
        candidates = explicit_dirs(holder, rt.config) + candidates
    for md in candidates:
        found = trash.find(md.real_path, key if not path.is_absolute() else str(path))
        if found is not None:
            return Listed(md, found)
    raise MemorydError(
        f"{key}: no trash manifest knows this id or path; `memoryd trash list` shows what can "
        "be restored (a file the manifest does not know is never restored)"
    )


def restore(rt: Runtime, listed: Listed) -> str:
    """Move the file back and give it its pointer line again (the old wording if it had one)."""
    with rt.store.lock(listed.dir.real_path):
        return _restore(rt, listed)


def _restore(rt: Runtime, listed: Listed) -> str:
    name = trash.restore(listed.dir.real_path, listed.entry)
    record = listed.entry.record
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
    index_dir(rt, listed.dir, preferred=preferred)
    return name


# --- rotation ----------------------------------------------------------------------------------
def _last_run(rt: Runtime) -> date | None:
    try:
        data = json.loads((rt.paths.state_dir / CLOCK_FILE).read_bytes())
        return date.fromisoformat(data["last_run"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_last_run(rt: Runtime, today: date) -> None:
    previous = _last_run(rt)
    if previous is None or today > previous:
        fsops.write_private(
            rt.paths.state_dir / CLOCK_FILE, json.dumps({"last_run": today.isoformat()}).encode()
        )


@dataclass(slots=True)
class Rotation:
    dir: MemoryDir
    purged: list[str] = field(default_factory=list)
    would_purge: list[str] = field(default_factory=list)
    refused: str = ""
    leftovers: list[str] = field(default_factory=list)


def rotate(
    rt: Runtime,
    dirs: Sequence[MemoryDir],
    *,
    keep_days: int | None = None,
    dry_run: bool = False,
    wait_lock: bool = True,
) -> list[Rotation]:
    """Purge day folders past retention in each dir, unless the clock looks wrong. Each dir
    under its writer lock; `wait_lock=False` (the daemon) leaves a busy dir for the next time."""
    today = rt.today()
    last = _last_run(rt)
    keep = rt.config.trash.keep_days if keep_days is None else keep_days
    results = []
    for md in dirs:
        result = Rotation(md)
        with contextlib.ExitStack() as held:
            if not dry_run and not held.enter_context(rt.store.lock(md.real_path, wait=wait_lock)):
                result.refused = "another memoryd process is working on this dir"
                results.append(result)
                continue
            _rotate_one(rt, md, result, today, keep, last, dry_run)
        results.append(result)
    if not dry_run and not any(r.refused for r in results):
        _save_last_run(rt, today)
    return results


def _rotate_one(
    rt: Runtime,
    md: MemoryDir,
    result: Rotation,
    today: date,
    keep: int,
    last: date | None,
    dry_run: bool,
) -> None:
    try:
        names = trash.day_names(md.real_path)
        if not dry_run:
            result.leftovers = trash.finish_leftovers(md.real_path)
    except MemorydError as error:  # `.trash` is a symlink or a file: nothing is touched
        result.refused = str(error)
        if not dry_run:
            rt.audit.write(
                "trash.purged", dir=md.path, days=[], refused=result.refused, level="warning"
            )
        return
    plan = trash.plan_purge(names, today, keep, last)
    result.refused = plan.refused
    if dry_run:
        result.would_purge = plan.purge
    elif plan.purge:
        result.purged = trash.purge_days(md.real_path, plan.purge)
        rt.audit.write("trash.purged", dir=md.path, days=result.purged, keep_days=keep)
    if plan.refused and names and not dry_run:
        rt.audit.write("trash.purged", dir=md.path, days=[], refused=plan.refused, level="warning")


# --- pass hints (DESIGN §4.12) -----------------------------------------------------------------
_TYPE_PREFIX = re.compile(r"^(?:user|feedback|project|reference)[_-]")


def topic_key(filename: str) -> str:
    stem = _TYPE_PREFIX.sub("", filename.removesuffix(".md").lower())
    return re.sub(r"[^a-z0-9]+", "_", stem).strip("_")


def orphan_hints(dirs: Sequence[MemoryDir]) -> str:
    projects = [d for d in dirs if d.kind == "project"]
    if not projects:
        return "orphaned project dirs: skipped (no project memory dirs in this run)"
    gone = [d for d in projects if "no longer exists" in d.repo_reason]
    if not gone:
        return f"orphaned project dirs: none ({len(projects)} checked)"
    listed = "; ".join(f"{d.path} ({d.repo_reason})" for d in gone)
    return f"orphaned project dirs (hint only, nothing removed): {listed}"


def project_of(md: MemoryDir) -> Path:
    """The project a memory dir belongs to: its repo root (a repo's agent dirs and its Claude
    project dir are one project), else the dir itself."""
    return md.repo_root.absolute() if md.repo_root is not None else md.real_path


def _index_targets(md: MemoryDir) -> list[str]:
    try:
        with fsops.open_dir(md.real_path) as fd:
            text = read_index_file(fd, INDEX_NAME).text or ""
    except OSError:
        return []  # gone or unreadable since discovery: it names nothing
    return pointer_targets(text)


def promotion_candidates(
    dirs: Sequence[MemoryDir],
    declined: dict[Path, set[str]],
    known: Sequence[MemoryDir] = (),
) -> tuple[str, list[tuple[str, str, int]]]:
    """Memories of `dirs` whose topic key appears in the indexes of 2+ other projects (DESIGN
    §4.12; listed only), looked for in `dirs` and every other `known` dir."""
    every = {md.real_path: md for md in (*known, *dirs)}
    keys_by_project: dict[Path, set[str]] = {}
    for md in every.values():
        keys = keys_by_project.setdefault(project_of(md), set())
        keys.update(topic_key(t) for t in _index_targets(md))
        keys.discard("")
    if len(keys_by_project) < 3:
        return (
            "promotion candidates: skipped (needs memory dirs of 3 or more projects; "
            f"found {len(keys_by_project)})"
        ), []
    found: list[tuple[str, str, int]] = []
    for md in dirs:
        own = project_of(md)
        for target in sorted(set(_index_targets(md))):
            if target in declined.get(md.real_path, set()):
                continue
            key = topic_key(target)
            others = sum(1 for p, keys in keys_by_project.items() if p != own and key in keys)
            if others >= 2:
                found.append((str(md.path), target, others))
    if not found:
        return f"promotion candidates: none across {len(keys_by_project)} projects", []
    return f"promotion candidates: {len(found)} (listed only)", found
