"""`memoryd log`: the audit log rendered for a person, filtered, summarised or followed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import EXIT_FINDINGS, EXIT_OK, color_arg, view_for, write_json
from memoryd.errors import UsageError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime
    from memoryd.views.logfollow import Follower


FOLLOW_EVERY = 0.25  # seconds between looks at the log while following
FOLLOW_LAST = 10  # rows `log -f` shows before following, as `tail` does


def _lines_arg(text: str) -> int | None:
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give a number of rows or `all`")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "log",
        description="Render the JSONL audit log as readable lines.",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="show the last rows, then keep printing new ones (across rotation)",
    )
    p.add_argument(
        "-n",
        "--lines",
        metavar="N",
        type=_lines_arg,
        default=-1,
        help=f"show the last N rows, or `all` (default: {FOLLOW_LAST} with -f, else all)",
    )
    p.add_argument(
        "--summary",
        action="store_true",
        help="what memoryd did, per dir, in sentences and counts (default --since 1d)",
    )
    p.add_argument("--utc", action="store_true", help="times in UTC instead of local time")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every field of each row (hashes, ids, pids)"
    )
    color_arg(p)
    p.add_argument(
        "--since", metavar="WHEN", help="only rows newer than this (2h, 30m, 7d or an ISO time)"
    )
    p.add_argument("--dir", metavar="D", help="only rows about this memory dir")
    p.add_argument("--event", metavar="PATTERN", help="only these events (glob, e.g. 'dream.*')")
    p.add_argument("--json", action="store_true", help="print the raw JSON rows")


class _Filter:
    """Which rows a person asked for: newer than --since, of --event, about --dir."""

    def __init__(self, args: argparse.Namespace, rt: Runtime) -> None:
        from memoryd.storage import audit

        try:
            since = audit.parse_since(args.since, rt.clock()) if args.since else None
        except ValueError as error:
            raise UsageError(str(error)) from error
        if args.summary and since is None:
            since = rt.clock() - 86400  # the morning view: the last day unless told otherwise
        self.since, self.event = since, args.event
        self.want = Path(args.dir).expanduser().absolute() if args.dir else None
        self.want_dir = str(self.want) if self.want else None
        self.row_time = audit.row_time

    @property
    def narrowed(self) -> bool:
        return bool(self.since is not None or self.event or self.want_dir)

    def __call__(self, row: dict[str, Any]) -> bool:
        import fnmatch

        if self.since is not None and self.row_time(row) < self.since:
            return False
        if self.event and not fnmatch.fnmatchcase(str(row.get("event")), self.event):
            return False
        if not self.want_dir:
            return True
        # The dir or a folder inside it (a parent such as ~/.claude/projects takes all of its
        # memory dirs), never a sibling that merely starts with the same letters.
        found = str(row.get("dir", ""))
        return found == self.want_dir or found.startswith(self.want_dir.rstrip("/") + "/")


class _Printer:
    """Rows out as JSON or for a person, each dir by its one label (memoryd.discover.dirlabel)."""

    def __init__(self, args: argparse.Namespace, rt: Runtime, out: TextIO) -> None:
        self.known: dict[str, str] = {}  # repo roots of the project dirs named so far
        self.looked: set[str] = set()  # the dirs whose repo root was looked for
        # Piped into grep or a file, a row is never cut; on a terminal it fits the width.
        self.view = view_for(
            args, out, rt.clock(), 1 << 20, utc=args.utc, verbose=args.verbose, roots=self.known
        )
        self.args, self.rt, self.out = args, rt, out
        self.err: TextIO = getattr(args, "stderr", sys.stderr)

    def label_dirs(self, rows: list[dict[str, Any]]) -> None:
        """The repo roots of the project dirs these rows name, looked for once each."""
        from memoryd.discover.dirlabel import roots

        named = {str(r["dir"]) for r in rows if isinstance(r.get("dir"), str)} - self.looked
        if named and not self.args.json:
            self.looked.update(named)
            self.known.update(roots(named, self.rt.config))

    def emit(self, row: dict[str, Any]) -> None:
        from memoryd.views.logview import render_row

        self.label_dirs([row])
        as_json = self.args.json
        text = json.dumps(row, ensure_ascii=False) if as_json else render_row(row, self.view)
        self.out.write(text + "\n")

    def warn(self, message: str) -> None:
        self.err.write(f"memoryd: {'warning: ' if self.args.follow else ''}{message}\n")
        self.err.flush()


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.views.logfollow import Follower

    wanted = _Filter(args, rt)
    printer = _Printer(args, rt, out)
    follower = Follower(rt.paths.audit_log, warn=printer.warn, backups=rt.config.log.backups)
    try:
        code = _history(args, rt, follower, wanted, printer)
        if code is not None:
            return code
        if not args.follow:
            return EXIT_FINDINGS if follower.problem else EXIT_OK  # a file that is no log
        out.flush()
        while True:
            rows = follower.poll()
            for row in rows:
                if wanted(row):
                    printer.emit(row)
            out.flush()
            if not rows:  # while rows come, look again at once: rotations come fast then
                rt.sleep(FOLLOW_EVERY)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        follower.close()


def _history(
    args: argparse.Namespace, rt: Runtime, follower: Follower, wanted: _Filter, printer: _Printer
) -> int | None:
    """The rows the log holds now, or their summary; an exit code when that is all there is
    to say (a summary, a --dir with no rows and no such folder), else None."""
    import os

    from memoryd.views.logview import render_summary, summary_json

    path, backups, err = rt.paths.audit_log, rt.config.log.backups, printer.err
    last = args.lines if args.lines != -1 else (FOLLOW_LAST if args.follow else None)
    history = [r for r in follower.history(None if wanted.narrowed else last) if wanted(r)]
    printer.label_dirs(history)
    logged = os.path.lexists(path) or any(
        path.with_name(f"{path.name}.{n}").exists() for n in range(1, backups + 1)
    )
    if not logged:
        err.write(
            f"memoryd: no audit log yet at {path} (memoryd writes it once it does "
            f"something){'; waiting for rows' if args.follow else ''}.\n"
        )
    elif wanted.want and not history and not args.follow:
        missing = "" if wanted.want.exists() else " (no such folder)"
        err.write(f"memoryd: no rows about {wanted.want}{missing} in {path}.\n")
        if missing:
            return EXIT_FINDINGS
    if args.summary:
        if args.json:
            write_json(printer.out, summary_json(history))
        else:
            printer.out.write(render_summary(history, printer.view, since=wanted.since))
        return EXIT_OK
    for row in history[-last:] if last else [] if last == 0 else history:
        printer.emit(row)
    return None
