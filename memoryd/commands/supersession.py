"""A memory's history (`memoryd history FILE|NAME [DIR …]`, memoryd.commands.history): its
supersession history, from the trash manifests (memoryd.trash.lineage), also for a file that
is in the trash now. Reads only."""

from pathlib import Path
from typing import Any

from memoryd.commands.resolve import Target, is_path, resolve
from memoryd.discover.finder import memory_dir_at
from memoryd.discover.found import MemoryDir
from memoryd.errors import MemorydError
from memoryd.runtime import Runtime
from memoryd.trash import lineage
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash


def _entries(md: MemoryDir) -> list[trash_manifest.Entry]:
    try:
        return trash_manifest.contents(md.real_path).entries
    except MemorydError:  # `.trash` is a symlink or a file: nothing memoryd reads there
        return []


def history_of(md: MemoryDir, name: str) -> dict[str, Any]:
    """One memory's history in its dir, as JSON: the subject, whether it exists, its own
    trash records and every supersession entry (each with a `kind`)."""
    found = lineage.history(name, _entries(md))
    return {
        "dir": str(md.path),
        "file": name,
        "exists": (md.real_path / name).is_file(),
        "in_trash": [
            {
                "id": e.record.id,
                "day": e.record.day,
                "reason": e.record.reason,
                "pass_id": e.record.pass_id,
                "stored": trash.stored_label(md.real_path, e.record.day, e.record.stored_name),
                "restored_as": e.restored_as,
                "restored_at": e.restored_at,
            }
            for e in found.in_trash
        ],
        "entries": [link.to_json() for link in found.entries],
        "_history": found,
    }


def target_of(rt: Runtime, key: str, dirs: list[Path]) -> Target:
    """The memory `history` is about: a trashed file's path means the file it was (by its
    trash record), anything else is memoryd.commands.resolve's, deleted memories' names included."""
    path = Path(key).expanduser()
    if is_path(key) and trash.TRASH_DIR in path.absolute().parts:
        path = path.absolute()
        at = path.parts.index(trash.TRASH_DIR)
        md = memory_dir_at(Path(*path.parts[:at]), rt.config)
        for entry in _entries(md):
            if trash_manifest.matches(md.real_path, entry, str(path)):
                return Target(md.real_path, entry.record.original_name, md)
        raise MemorydError(f"{path}: no trash record names this file")
    if is_path(key):
        kept = _in_state_trash(rt, path.absolute(), dirs)
        if kept is not None:
            return kept
    return resolve(rt, key, dirs, gone=True)


def _in_state_trash(rt: Runtime, path: Path, dirs: list[Path]) -> Target | None:
    """A path into the state dir's trash (a repo dir's, as `trash list` prints it) means the
    file it was; None for any other path. The dir is the one whose trash holds it."""
    from memoryd.daemon.housekeeping import known_dirs
    from memoryd.discover.finder import discover
    from memoryd.paths import app_paths

    folder = app_paths().state_dir / trash.REPO_TRASH
    if not path.is_relative_to(folder):
        return None
    for md in [*discover(rt.config, dirs), *known_dirs(rt)]:
        if not path.is_relative_to(trash.trash_root(md.real_path)):
            continue
        for entry in _entries(md):
            if trash_manifest.matches(md.real_path, entry, str(path)):
                return Target(md.real_path, entry.record.original_name, md)
    raise MemorydError(f"{path}: no trash record names this file")
