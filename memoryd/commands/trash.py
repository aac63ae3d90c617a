"""`memoryd trash list|restore|purge`: the trash's day folders, as a person sees them; files deleted
outside memoryd (the version store's) are listed and restored beside them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.commands.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    color_arg,
    dirs_arg,
    painter,
    recover,
    write_json,
)
from memoryd.errors import MemorydError, UsageError
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.discover.found import MemoryDir
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trash",
        description="memoryd moves memories into <memory dir>/.trash/YYYY-MM-DD/ (for a "
        "dir in a git work tree, the state dir's trash/<dir key>/YYYY-MM-DD/) with a "
        "manifest; nothing is deleted until the day folder is purged.",
    )
    trash_sub = p.add_subparsers(dest="trash_command", metavar="ACTION", required=True)
    q = trash_sub.add_parser("list", help="list trashed files (id, when, reason, file)")
    dirs_arg(q)
    q.add_argument("--json", action="store_true", help="print one JSON document")
    color_arg(q)
    q = trash_sub.add_parser("restore", help="move a trashed file back and restore its pointer")
    q.add_argument(
        "key",
        metavar="ID|PATH|NAME",
        help="as `trash list` prints it: an id, the file's path or the trashed file's path "
        "(relative or absolute, with or without .trash/), or its name; a path or a name means "
        "its newest entry still in the trash",
    )
    dirs_arg(q, "where to look (default: every discovered dir)")
    q = trash_sub.add_parser("purge", help="remove day folders past their retention")
    dirs_arg(q)
    q.add_argument(
        "--older-than",
        metavar="AGE",
        default=None,
        help="retention as a duration, e.g. 30d (default: trash.keep_days)",
    )
    q.add_argument("--dry-run", action="store_true", help="say what would be purged")


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    if args.trash_command == "list":
        return _list(args, rt, out)
    if not (args.trash_command == "purge" and args.dry_run):  # a dry run writes nothing at all
        recover(rt)
    if args.trash_command == "restore":
        return _restore(args, rt, out)
    return _purge(args, rt, out)


def _named_dirs(args: argparse.Namespace, rt: Runtime) -> list[MemoryDir]:
    """The dirs named that still exist, else every discovered one; a DIR deleted whole is left
    to the version store (its files are listed and restored from there)."""
    from memoryd.commands.versions import split_gone
    from memoryd.discover.finder import discover

    named, gone = split_gone(rt, args.dirs)
    return discover(rt.config, named) if named or not gone else []


def _list(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import time

    from memoryd.commands.versions import deleted_rows, render_deleted
    from memoryd.daemon import housekeeping
    from memoryd.trash import store as trash
    from memoryd.views.trash import render

    listing = housekeeping.list_trash(_named_dirs(args, rt))
    rows = [
        {
            "id": x.entry.record.id,
            "dir": str(x.dir.path),
            "day": x.entry.record.day,
            "file": x.entry.record.original_name,
            "reason": x.entry.record.reason,
            "duplicate_of": x.entry.record.duplicate_of,
            "superseded_by": x.entry.record.superseded_by,
            "path": str(x.entry.stored_path),
            "time": x.entry.record.time,
        }
        for x in listing.listed
    ]
    invalid = [
        {
            "dir": str(md.path),
            "manifest": str(bad.folder / trash.MANIFEST),
            "line": bad.line,
            "problem": bad.problem,
            "message": bad.message,
        }
        for md, bad in listing.invalid
    ]
    elsewhere = deleted_rows(rt, args.dirs)  # files deleted outside memoryd, restorable too
    if args.json:
        outside = [
            {
                "id": d.id,
                "dir": str(d.dir),
                "file": d.name,
                "sha256": d.sha256,
                "size": d.size,
                "time": d.when,
            }
            for d in elsewhere
        ]
        document = {"trash": rows, "deleted_outside": outside, "invalid": invalid}
        write_json(out, document)
        return EXIT_FINDINGS if invalid else EXIT_OK
    if rows or not elsewhere:  # not "The trash is empty." above what is restorable
        out.write(render(rows, time.time(), painter(args, out)))
    for bad in invalid:
        out.write(f"INVALID  {shown(bad['message'])}\n")
    out.write(render_deleted(elsewhere))
    return EXIT_FINDINGS if invalid else EXIT_OK


def _restore(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.daemon import housekeeping

    dirs = _named_dirs(args, rt)
    if not args.dirs:  # also every dir memoryd has worked on, wherever it was
        dirs += housekeeping.known_dirs(rt)
    key, holder = _trashed_key(rt, args.key, args.dirs)
    if holder is not None:  # a name: the one dir the resolver found it in
        dirs = [holder]
    try:
        found = housekeeping.find_entry(rt, dirs, key)
    except MemorydError:  # versions: or a file deleted outside memoryd
        from memoryd.commands.versions import restore_deleted

        if restore_deleted(rt, key, args.dirs, out):
            return EXIT_OK
        raise
    name = housekeeping.restore(rt, found)
    out.write(
        f"restored {shown(found.entry.record.original_name)} as {shown(found.dir.path / name)}\n"
    )
    record = found.entry.record
    winner = record.duplicate_of or record.superseded_by
    if winner:  # a restored loser says what it had lost to
        out.write(
            f"  it had lost to {shown(winner)} on {record.day} ({record.reason}, pass "
            f"{record.pass_id}); see `memoryd history {shown(name)}`\n"
        )
    return EXIT_OK


def _purge(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.config import parse_duration
    from memoryd.daemon import housekeeping
    from memoryd.discover.finder import discover

    keep = None
    if args.older_than:
        try:
            keep = max(0, int(parse_duration(args.older_than) // 86400))
        except ValueError as error:
            raise UsageError(f"--older-than: {error}") from error
    results = housekeeping.rotate(
        rt, discover(rt.config, args.dirs), keep_days=keep, dry_run=args.dry_run
    )
    for rot in results:
        where = shown(rot.dir.path)
        if rot.refused:
            out.write(f"{where}: purged nothing — {shown(rot.refused)}\n")
        elif args.dry_run and rot.would_purge:
            out.write(f"{where}: [DRY RUN] would purge {', '.join(rot.would_purge)}\n")
        elif rot.purged:
            out.write(f"{where}: purged {', '.join(rot.purged)}\n")
        for day, why in rot.kept:
            out.write(f"{where}: kept {day} — {shown(why)}\n")
        for problem in rot.problems:
            out.write(f"{shown(problem)}\n")
    if args.dry_run and not any(rot.would_purge or rot.refused for rot in results):
        days = keep if keep is not None else rt.config.trash.keep_days
        out.write(
            f"[DRY RUN] nothing would be purged: no trash day folder is past the retention "
            f"({days} days) in the {len(results)} dir(s) looked at\n"
        )
    return EXIT_FINDINGS if any(rot.refused or rot.problems for rot in results) else EXIT_OK


def _trashed_key(rt: Runtime, key: str, dirs: list[Path]) -> tuple[str, MemoryDir | None]:
    """`trash restore NAME`: the name (with or without .md) as memoryd.commands.resolve finds
    it among the files to restore, nearest dirs first, as `<dir>/<file>` and its dir; an
    ambiguous name is a usage error listing the candidates. An id or a path is left as it is."""
    import re

    from memoryd.commands.resolve import is_path, resolve

    # A trash id (10 hex digits) or a deletion's (`d` and 9): never a name to look for.
    if is_path(key) or re.fullmatch(r"d?[0-9a-f]{9,10}", key):
        return key, None
    try:
        target = resolve(rt, key, dirs, trashed=True)
    except UsageError:
        raise
    except MemorydError:  # an id, or nothing: find_entry says which
        return key, None
    return str(target.path), target.md
