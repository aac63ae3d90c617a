"""What several commands share: common arguments, discovery and its refusals, crash recovery,
`--json` and colour. Light to import (parsers need it): heavy imports go inside functions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.errors import UsageError
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.discover.found import Discovery
    from memoryd.model.humanize import Painter
    from memoryd.runtime import Runtime
    from memoryd.views.logview import View

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

# The commands that may write in a memory dir (moves included), and so keep versions of what
# they read and record their own moves (memoryd.commands.versions.keeping).
VERSIONED = frozenset({"run", "index", "dream", "trash", "history", "forget"})
JOURNALS = "journal_pass"  # journal.TABLE, spelled out here (a test checks they agree)


def dirs_arg(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument(
        "dirs",
        nargs="*",
        default=[],  # never "required" in a usage error (argparse: `*` with no default)
        type=Path,
        metavar="DIR",
        help=help
        or "memory dirs, repos or Claude homes to work on (default: every discovered dir)",
    )


def repo_root_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repo-root",
        type=Path,
        metavar="PATH",
        help="the code tree to check references against (overrides discovery)",
    )


def color_arg(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """`--color`, on the top parser (default auto) and on each human view (where it wins)."""
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=default if default is not None else argparse.SUPPRESS,
        help="colour: on a terminal only (auto, the default; NO_COLOR turns it off), always, never",
    )


def scope_arg(parser: argparse.ArgumentParser) -> None:
    """`--scope`, for the JSONL record stores `search` and `recall` read."""
    parser.add_argument(
        "--scope",
        nargs="+",
        action="extend",
        metavar="TERM",
        help="the task's scope for JSONL record stores: only records whose scope holds one of "
        "these entries (exactly)",
    )


LOOK_IN = "memory dirs, repos or Claude homes to look in (default: every discovered dir)"


def discover_named(rt: Runtime, dirs: list[Path]) -> Discovery:
    """The dirs to work on; links leading out of their repo or Claude home are said once."""
    from memoryd.discover.finder import discover_all, report_refused

    found = discover_all(rt.config, dirs)
    report_refused(rt, found.refused)
    return found


def _journals_left(state_dir: Path) -> bool:
    """Whether any pass journal is in the state store: without one, recovery's modules (~18 ms
    of start-up) are not imported at all."""
    import sqlite3

    from memoryd.storage.statedb import FILE_NAME, StateDB

    if not (state_dir / FILE_NAME).exists():
        return False
    try:
        rows = (
            StateDB.in_state_dir(state_dir)
            .connection()
            .execute(
                f"SELECT 1 FROM {JOURNALS} LIMIT 1"  # noqa: S608 (a constant of this module)
            )
        )
    except sqlite3.OperationalError:
        return False  # no such table: no pass ever wrote one
    return rows.fetchone() is not None


def recover(rt: Runtime) -> None:
    """Finish what a crash left unfinished before doing anything else (DESIGN §2.3)."""
    if not _journals_left(rt.paths.state_dir):
        return
    from memoryd.trash.recovery import recover as recover_passes

    for recovery in recover_passes(rt):
        sys.stderr.write(
            f"memoryd: recovered an unfinished pass in {recovery.journal.dir}: {recovery.outcome}\n"
        )


def discovery_json(found: Discovery) -> dict[str, Any]:
    """The links discovery refused and the repos with no memory, for `--json`."""
    refused = [
        {
            "path": str(r.path),
            "target": str(r.target),
            "kind": r.kind,
            "label": r.label,
            "within": str(r.within),
            "reason": r.reason,
            "hint": r.hint,
        }
        for r in found.refused
    ]
    empty = [{"repo": str(e.path), "looked_in": e.looked_in} for e in found.empty_repos]
    return {"refused": refused, "empty_repos": empty}


def render_discovery(found: Discovery) -> str:
    """The links discovery refused and the repos with no memory, for a person."""
    return "".join(
        f"{shown(str(r.path))} -> {shown(str(r.target))}\n"
        f"  kind: {r.kind}  refused — {shown(r.reason)}\n  {shown(r.hint)}\n"
        for r in found.refused
    ) + "".join(f"{shown(e.message)}\n" for e in found.empty_repos)


def write_json(out: TextIO, doc: object) -> None:
    """One JSON document, as every `--json` prints it."""
    json.dump(doc, out, indent=2, ensure_ascii=False)
    out.write("\n")


def painter(args: argparse.Namespace, out: TextIO) -> Painter:
    """Colour as `--color` asks for it on this stream (memoryd.model.humanize.use_color)."""
    import os

    from memoryd.model.humanize import Painter, use_color

    return Painter(use_color(args.color, out, os.environ))


def view_for(args: argparse.Namespace, out: TextIO, now: float, width: int, **more: Any) -> View:
    """How a person's terminal gets rows (memoryd.views.logview.View): home as `~`, its width
    (`width` when piped), colour as `--color` asks."""
    import os

    from memoryd.model.humanize import terminal_width
    from memoryd.views.logview import View

    columns = terminal_width(out, os.environ, default=width)
    return View(now=now, home=str(Path.home()), width=columns, paint=painter(args, out), **more)


def given_repo_root(args: argparse.Namespace) -> Path | None:
    """`--repo-root` as an absolute folder (None when not given); UsageError when no folder."""
    if args.repo_root is None:
        return None
    root = Path(args.repo_root).expanduser().absolute()
    if not root.is_dir():
        raise UsageError(f"{root}: --repo-root must be a folder")
    return root


def auto_memory_off(rt: Runtime) -> str:
    """What turned Claude Code's auto memory off for the user (environment, settings), or ""."""
    from memoryd.discover.claude_env import auto_memory_switch, user_settings

    switch = auto_memory_switch(
        rt.config.claude_env, [user_settings(rt.config.paths.claude_home, [])]
    )
    return "" if switch.on else switch.source


def auto_memory_off_line(source: str) -> str:
    return (
        f"Auto memory is turned off ({shown(source)}): Claude Code loads no auto-memory "
        "MEMORY.md; memoryd still maintains the files.\n"
    )
