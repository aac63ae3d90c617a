"""A memory's history (`memoryd history FILE|NAME [DIR …]`, memoryd.cmd_history): its
supersession history, from the trash manifests (memoryd.lineage), also for a file that is in
the trash now. Reads only."""

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from memoryd import lineage, trash
from memoryd.discover import MemoryDir, memory_dir_at
from memoryd.display import shown
from memoryd.errors import MemorydError
from memoryd.resolve import Target, is_path, resolve
from memoryd.runtime import Runtime

EXIT_OK, EXIT_FAILED = 0, 1


def _entries(md: MemoryDir) -> list[trash.Entry]:
    try:
        return trash.contents(md.real_path).entries
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
    trash record), anything else is memoryd.resolve's, deleted memories' names included."""
    path = Path(key).expanduser()
    if is_path(key) and trash.TRASH_DIR in path.absolute().parts:
        path = path.absolute()
        at = path.parts.index(trash.TRASH_DIR)
        md = memory_dir_at(Path(*path.parts[:at]), rt.config)
        for entry in _entries(md):
            if trash.matches(md.real_path, entry, str(path)):
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
    from memoryd.discover import discover
    from memoryd.paths import app_paths

    folder = app_paths().state_dir / trash.REPO_TRASH
    if not path.is_relative_to(folder):
        return None
    for md in [*discover(rt.config, dirs), *known_dirs(rt)]:
        if not path.is_relative_to(trash.trash_root(md.real_path)):
            continue
        for entry in _entries(md):
            if trash.matches(md.real_path, entry, str(path)):
                return Target(md.real_path, entry.record.original_name, md)
    raise MemorydError(f"{path}: no trash record names this file")


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`memoryd history` as the command line gives it (parsed by memoryd.cmd_history)."""
    target: Target = args.target
    found = [(target.md, target.name)] if target.md is not None else []
    if not found:
        raise MemorydError(
            f"{args.key}: no memory of that name and no trash record naming it in the dirs "
            "looked in (name its path, or the dir to look in)"
        )
    docs = [history_of(md, name) for md, name in found]
    if args.json:
        for doc in docs:
            del doc["_history"]
        json.dump({"histories": docs}, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return EXIT_OK
    for doc in docs:
        where = f"{doc['dir']}/{doc['file']}" + ("" if doc["exists"] else " (not in the dir now)")
        for line in lineage.render(doc["_history"], where):
            out.write(f"{shown(line)}\n")
    return EXIT_OK
