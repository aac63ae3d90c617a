"""The `memoryd` command line: argparse, dispatch, rendering. No maintenance logic of its own."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from memoryd import __version__
from memoryd.display import shown
from memoryd.errors import ConfigError, MemorydError, UsageError

if TYPE_CHECKING:
    from memoryd.discover import Discovery, EmptyRepo, MemoryDir, RefusedDir
    from memoryd.indexing.outcome import IndexOutcome
    from memoryd.logview import View
    from memoryd.runtime import Effect, Runtime

# Start-up time is the whole process's (`memoryd --help`, `status`): each handler imports what
# it uses, so a command pays only for its own modules.
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace, "Runtime", TextIO], int]


def _dirs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs",
        nargs="*",
        default=[],  # never "required" in a usage error (argparse: `*` with no default)
        type=Path,
        metavar="DIR",
        help="memory dirs, repos or Claude homes to work on (default: every discovered dir)",
    )


def _repo_root_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repo-root",
        type=Path,
        metavar="PATH",
        help="the code tree to check references against (overrides discovery)",
    )


def _color_arg(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """`--color`, on the top parser (default auto) and on each human view (where it wins)."""
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=default if default is not None else argparse.SUPPRESS,
        help="colour: on a terminal only (auto, the default; NO_COLOR turns it off), always, never",
    )


class _Parser(argparse.ArgumentParser):
    """A parser whose options go anywhere among its positionals (`forget NAME --dry-run DIR`):
    argparse's intermixed parsing, for every command (each subparser is one of these). A
    parser with subcommands of its own parses as before: it only picks the subcommand."""

    _mixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        nested = any(
            a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions()
        )
        if self._mixing or nested:  # the intermixed parse calls this again, twice
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


class _Unbuilt:
    """The parser of a command this run does not name: every call on it does nothing."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *args, **kwargs: self


if TYPE_CHECKING:
    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _Subparsers = argparse._SubParsersAction


class _Commands(_Subparsers):
    """The subcommands, of which only `only` (when set) gets its parser built: a command's
    start-up pays for its own arguments, not for every command's (~6 ms)."""

    only: str | None = None

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if self.only is not None and name != self.only:
            return cast(argparse.ArgumentParser, _Unbuilt())
        return super().add_parser(name, **kwargs)


def _named_command(argv: Sequence[str] | None) -> str | None:
    """The command when it is the first word (`memoryd index ...`): no option before it can
    ask for the list of every command (`memoryd --help index`)."""
    words = sys.argv[1:] if argv is None else argv
    return words[0] if words and not words[0].startswith("-") else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `only`, the parser of that command alone (the top parser's help
    and usage errors need every command: a name that is none builds them all)."""
    parser = _Parser(
        prog="memoryd",
        description="Keeps coding agents' memory folders healthy: deterministic, explainable, "
        "reversible maintenance of memory files and their MEMORY.md index.",
        epilog="Exit codes: 0 fine, 1 findings or a failed action, 2 usage or configuration error.",
    )
    parser.add_argument("--version", action="version", version=f"memoryd {__version__}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="configuration file (default: <user config dir>/memoryd/config.toml, else built-in "
        "defaults)",
    )
    _color_arg(parser, "auto")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, action=_Commands)
    assert isinstance(sub, _Commands)
    sub.only = only

    p = sub.add_parser(
        "dirs",
        help="list memory dirs, their kind, repo root, files and budget",
        description="List every memory dir memoryd finds as a table (name, kind, mode, "
        "memories, index lines and window use, flagged, last pass); with DIR, the detail: "
        "repo root (or why none), why the index is managed or not, unparseable files, "
        "index lines and budget use.",
    )
    _dirs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    _color_arg(p)
    p.add_argument(
        "--secrets",
        action="store_true",
        help="list each secret a memory holds (file, line, kind; never the value)",
    )

    p = sub.add_parser(
        "index",
        help="bring MEMORY.md in step with the memory files",
        description="Update each managed dir's MEMORY.md incrementally: add "
        "pointers for new memories, remove pointers of gone ones, keep every "
        "hand-written line, keep the index within the agent's load window.",
    )
    _dirs_arg(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; print what would change as a unified diff and exit 1 "
        "if anything would",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every dir, those in sync too, and why each unmanaged one is",
    )
    # The post-write hook's pass: the dir is where the agent wrote, not a person's request to
    # write an index git tracks (gitwork.hands_off_reason), so it is not counted as named.
    p.add_argument("--not-named", action="store_true", help=argparse.SUPPRESS)

    p = sub.add_parser(
        "run",
        help="run the daemon in the foreground (as a user service does)",
        description="Watch every memory dir, keep indexes in step as files "
        "change, dream when memories pile up, write a heartbeat. Runs in the "
        "foreground; one instance per user. SIGTERM/SIGINT stop it cleanly, "
        "SIGHUP reloads the configuration.",
    )
    p = sub.add_parser(
        "status",
        help="is the daemon running, and how are its dirs",
        description="Read the daemon's heartbeat (status.json). Exit 0 when it "
        "runs with a fresh heartbeat, 1 otherwise.",
    )
    p.add_argument("--json", action="store_true", help="print the status document")
    _color_arg(p)

    p = sub.add_parser(
        "service",
        help="install memoryd as a user service (systemd/launchd)",
        description="Render the systemd user unit or the launchd agent with the "
        "absolute path of this memoryd, write it, and enable and start it.",
    )
    p.add_argument("action", choices=["install", "uninstall", "status"], help="what to do")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the file and the commands instead of running them",
    )
    p.add_argument(
        "--manager",
        choices=["systemd", "launchd"],
        default=None,
        help="which service manager (default: launchd on macOS, else systemd)",
    )
    p = sub.add_parser(
        "demo",
        help="show memoryd at work in a throw-away sandbox",
        description="Build a sandbox (its own HOME, Claude home, repo and "
        "memories with a duplicate, a stale reference, a contradiction and a "
        "hand-written index), run the daemon against it, write a memory as an "
        "agent would, and show the index change, a dream report, the log and a "
        "restore. Nothing outside the sandbox is touched.",
    )
    p.add_argument("--keep", action="store_true", help="keep the sandbox folder afterwards")

    p = sub.add_parser(
        "dream",
        help="run the deterministic consolidation pass",
        description="Prune fully stale memories, merge duplicates and resolve "
        "contradictions by checks anyone can repeat; move (never delete) into "
        "the trash; update the index; print the report.",
    )
    _dirs_arg(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing at all; print [DRY RUN] Would move: lines",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.add_argument(
        "--apply",
        metavar="PASS_ID",
        help="apply the plan of this pass the circuit breaker refused, after review: exactly "
        "its moves, and only if every file it names still holds the bytes it was planned from "
        "(else exit 1, naming those that changed, and nothing moves)",
    )
    _repo_root_arg(p)

    p = sub.add_parser(
        "explain",
        help="show every check and rule applied to one memory",
        description="For one memory: its references and their scope, its "
        "classification, each guard and whether it holds, consult evidence, "
        "duplicate and contradiction candidates with overlap scores, and the "
        "decision the dream pass would take.",
    )
    p.add_argument(
        "file",
        type=Path,
        metavar="FILE|NAME",
        help="a memory file, its file name or name (as `show` finds it), or a JSONL record store",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    _repo_root_arg(p)

    p = sub.add_parser(
        "trash",
        help="list, restore or purge trashed memories",
        description="memoryd moves memories into <memory dir>/.trash/YYYY-MM-DD/ (for a "
        "dir in a git work tree, the state dir's trash/<dir key>/YYYY-MM-DD/) with a "
        "manifest; nothing is deleted until the day folder is purged.",
    )
    trash_sub = p.add_subparsers(dest="trash_command", metavar="ACTION", required=True)
    q = trash_sub.add_parser("list", help="list trashed files (id, when, reason, file)")
    _dirs_arg(q)
    q.add_argument("--json", action="store_true", help="print one JSON document")
    _color_arg(q)
    q = trash_sub.add_parser("restore", help="move a trashed file back and restore its pointer")
    q.add_argument(
        "key",
        metavar="ID|PATH|NAME",
        help="as `trash list` prints it: an id, the file's path or the trashed file's path "
        "(relative or absolute, with or without .trash/), or its name; a path or a name means "
        "its newest entry still in the trash",
    )
    q.add_argument(
        "dirs",
        nargs="*",
        default=[],  # never "required" in a usage error (argparse: `*` with no default)
        type=Path,
        metavar="DIR",
        help="where to look (default: every discovered dir)",
    )
    q = trash_sub.add_parser("purge", help="remove day folders past their retention")
    _dirs_arg(q)
    q.add_argument(
        "--older-than",
        metavar="AGE",
        default=None,
        help="retention as a duration, e.g. 30d (default: trash.keep_days)",
    )
    q.add_argument("--dry-run", action="store_true", help="say what would be purged")

    p = sub.add_parser(
        "log",
        help="show the audit log for a person",
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
    _color_arg(p)
    p.add_argument(
        "--since", metavar="WHEN", help="only rows newer than this (2h, 30m, 7d or an ISO time)"
    )
    p.add_argument("--dir", metavar="D", help="only rows about this memory dir")
    p.add_argument("--event", metavar="PATTERN", help="only these events (glob, e.g. 'dream.*')")
    p.add_argument("--json", action="store_true", help="print the raw JSON rows")

    p = sub.add_parser(
        "config",
        help="check or show the configuration",
        description="Validate the configuration (every problem at once) or "
        "print the effective configuration.",
    )
    config_sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    config_sub.add_parser("check", help="validate; exit 2 listing every problem")
    config_sub.add_parser("show", help="print the effective configuration as TOML")
    from memoryd import cmd_ack

    cmd_ack.add_parser(sub)
    from memoryd import cmd_forget, cmd_history  # their parsers; the work imports on use

    cmd_forget.add_parser(sub)
    cmd_history.add_parser(sub)

    from memoryd import cmd_recall  # search, recall, show, mcp: their handlers import the rest

    cmd_recall.add_parser(sub)
    from memoryd import cmd_claude  # claude install/uninstall: the work imports on use

    cmd_claude.add_parser(sub)
    if only is not None and only not in sub.choices:
        return build_parser()
    return parser


# --- dirs --------------------------------------------------------------------------------------
def _dir_summary(rt: Runtime, md: MemoryDir) -> dict[str, Any]:
    from memoryd import findings, fsops
    from memoryd.indexing import passes
    from memoryd.indexing.read import read_index_file, view_kind
    from memoryd.indexing.window import budget_use
    from memoryd.model.index import INDEX_NAME

    outcome = passes.check(rt, md)
    scan = outcome.scan
    main_text = None
    with fsops.open_dir(md.real_path) as fd:
        main_text = read_index_file(fd, INDEX_NAME, rt.versions).text
    return {
        "path": str(md.path),
        "real_path": str(md.real_path),
        "via_symlink": md.via_symlink,
        "kind": md.kind,
        "label": md.label,
        "repo_root": str(md.repo_root) if md.repo_root else None,
        "repo_reason": md.repo_reason,
        "not_loaded": md.not_loaded,
        "mode": "managed" if outcome.ownership and outcome.ownership.managed else "unmanaged",
        "mode_reason": outcome.ownership.reason if outcome.ownership else "",
        "memory_files": len(scan.memories) if scan else 0,
        "unparseable": sorted(scan.problems) if scan else [],
        "problems": [
            {
                "file": name,
                "kind": found.problem_kind,
                "problem": found.problem_message,
                "hint": found.problem_hint,
            }
            for name, found in sorted(scan.problems.items())
        ]
        if scan
        else [],
        "notes": sorted(n for n, s in scan.files.items() if s.kind == "note") if scan else [],
        "conflict_copies": scan.conflicts if scan else [],
        "secrets": [
            {"file": name, **f.to_json()}
            for name, found in sorted(
                findings.dir_secrets(rt, md, findings.secret_names(scan)).items()
            )
            for f in found
        ],
        "dangling_links": [d.to_json() for d in findings.dir_dangling_links(rt, md, scan)]
        if scan
        else [],
        "index": budget_use(main_text, rt, view_kind(md)) if main_text is not None else None,
        "in_sync": outcome.status in ("unchanged", "unmanaged"),
        "drift": _git_drift(rt, md, outcome),
        **_dir_history(rt, md),
        **_claude_lock_json(md, rt),
    }


def _git_drift(rt: Runtime, md: MemoryDir, outcome: Any) -> dict[str, int] | None:
    """For a dir left alone because git tracks it: what `memoryd index DIR` would change
    (pointers added, removed, moved to the archive); None for any other dir."""
    from dataclasses import replace

    from memoryd import gitwork
    from memoryd.indexing import passes

    reason = outcome.ownership.reason if outcome.ownership else ""
    if outcome.status != "unmanaged" or not reason.startswith(gitwork.TRACKED):
        return None
    named = passes.check(replace(rt, named=(md.real_path,)), md)
    edit = named.edit
    if named.status != "would_change" or edit is None:
        return {"added": 0, "removed": 0, "demoted": 0}
    return {"added": len(edit.added), "removed": len(edit.removed), "demoted": len(edit.demoted)}


def _drift_text(drift: dict[str, int], path: str) -> str:
    if not any(drift.values()):
        return "drift: none (MEMORY.md is in step with the files)"
    parts = [
        f"{drift[key]} {word}"
        for key, word in (("added", "to add"), ("removed", "to remove"), ("demoted", "to archive"))
        if drift[key]
    ]
    return f"drift: pointers {', '.join(parts)} (`memoryd index {shown(path)}` writes them)"


def _iso(ts: float) -> str | None:
    from datetime import UTC, datetime

    if not ts:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _dir_history(rt: Runtime, md: MemoryDir) -> dict[str, Any]:
    """Its label, and what the dir's state says of memoryd's last passes (absolute UTC
    times)."""
    from memoryd.dirlabel import label

    state = rt.store.load(md.real_path)
    return {
        "name": label(md),
        "flagged": state.last_dream_flagged if state.last_dream_flagged >= 0 else None,
        "last_pass": _iso(state.last_dream_ts),
        "last_pass_result": state.last_dream_result or None,
        "last_index_write": _iso(state.last_index_ts),
    }


def _claude_lock_json(md: MemoryDir, rt: Runtime) -> dict[str, Any]:
    """When Claude Code last consolidated the dir (its `.consolidate-lock`'s mtime, which
    stays after a dream of its own), and whether it holds the lock now."""
    from datetime import datetime

    from memoryd.discover import claude_lock

    lock = claude_lock(md, rt.clock())
    when = datetime.fromtimestamp(lock.mtime).astimezone() if lock else None
    return {
        "claude_consolidated": when.isoformat(timespec="seconds") if when else None,
        "claude_lock_held": bool(lock and lock.held),
    }


def _refused_json(r: RefusedDir) -> dict[str, Any]:
    return {
        "path": str(r.path),
        "target": str(r.target),
        "kind": r.kind,
        "label": r.label,
        "within": str(r.within),
        "reason": r.reason,
        "hint": r.hint,
    }


def _render_refused(refused: list[RefusedDir]) -> str:
    return "".join(
        f"{shown(str(r.path))} -> {shown(str(r.target))}\n"
        f"  kind: {r.kind}  refused — {shown(r.reason)}\n  {shown(r.hint)}\n"
        for r in refused
    )


def _empty_json(e: EmptyRepo) -> dict[str, Any]:
    return {"repo": str(e.path), "looked_in": e.looked_in}


def _render_empty(found: Discovery) -> str:
    return "".join(f"{shown(e.message)}\n" for e in found.empty_repos)


def _discover(rt: Runtime, dirs: list[Path]) -> Discovery:
    """The dirs to work on; links leading out of their repo or Claude home are said once."""
    from memoryd.discover import discover_all, report_refused

    found = discover_all(rt.config, dirs)
    report_refused(rt, found.refused)
    rt.named = tuple(dirs)  # named: a dir git tracks is written (see gitwork.hands_off_reason)
    return found


def _no_dirs() -> Discovery:
    from memoryd.discover import Discovery

    return Discovery(dirs=[], refused=[])


def cmd_dirs(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import time

    from memoryd import findings
    from memoryd.discover import discover_all

    named = [p for p in args.dirs if not findings.is_store_file(p)]
    found = discover_all(rt.config, named) if named or not args.dirs else _no_dirs()
    dirs = found.dirs
    rows = [_dir_summary(rt, md) for md in dirs]
    stores = _store_reports(rt, dirs, args.dirs)
    if args.json:
        json.dump(
            {
                "claude_home": str(rt.config.paths.claude_home),
                "auto_memory_off": found.auto_memory_off,
                "warnings": found.warnings,
                "dirs": rows,
                "refused": [_refused_json(r) for r in found.refused],
                "empty_repos": [_empty_json(e) for e in found.empty_repos],
                "record_stores": stores,
            },
            out,
            indent=2,
            ensure_ascii=False,
        )
        out.write("\n")
        return EXIT_OK
    out.write("".join(f"warning: {shown(w)}\n" for w in found.warnings))
    if found.auto_memory_off:
        out.write(_auto_memory_off_line(found.auto_memory_off))
    out.write(_render_refused(found.refused))
    out.write(_render_empty(found))
    _render_stores(stores, out)
    if not rows and (found.empty_repos or stores):
        return EXIT_OK
    if not rows:
        home = rt.config.paths.claude_home
        note = "" if home.exists() else " (it does not exist yet)"
        out.write(f"No memory dirs found under {home}{note}.\n")
        return EXIT_OK
    if not args.dirs:
        import os

        from memoryd.humanize import Painter, terminal_width, use_color
        from memoryd.views.dirs import render

        paint = Painter(use_color(args.color, out, os.environ))
        out.write(render(rows, time.time(), terminal_width(out, os.environ), paint))
        if args.secrets:
            out.write(_render_secrets(rows))
        return EXIT_OK
    for row in rows:
        link = f" (via symlink {row['path']})" if row["via_symlink"] else ""
        out.write(f"{shown(row['real_path'])}{shown(link)}\n")
        out.write(f"  kind: {row['kind']}  index: {row['mode']} — {row['mode_reason']}\n")
        if row["drift"] is not None:
            out.write(f"  {_drift_text(row['drift'], row['real_path'])}\n")
        root = row["repo_root"] or "none"
        out.write(f"  repo root: {shown(root)} ({shown(row['repo_reason'])})\n")
        if row["not_loaded"]:
            out.write(f"  not loaded by the agent: {shown(row['not_loaded'])}\n")
        out.write(f"  memory files: {row['memory_files']}")
        if row["unparseable"]:
            out.write(f"  unparseable: {len(row['unparseable'])}")
        if row["notes"]:
            out.write(f"  other markdown: {len(row['notes'])}")
        if row["secrets"]:
            files = len({s["file"] for s in row["secrets"]})
            out.write(f"  secrets: {len(row['secrets'])} in {files} file(s)")
        out.write("\n")
        if args.secrets:
            out.write(_render_secrets([row], indent="    ", where=False))
        for problem in row["problems"]:
            out.write(f"    {shown(problem['file'])}: {problem['problem']} — {problem['hint']}\n")
        for link in row["dangling_links"]:
            linked = f"{shown(link['file'])}: [[{shown(link['link'])}]]"
            out.write(f"  dangling link: {linked} — {link['why']}\n")
        if row["claude_consolidated"]:
            now = " (it holds its lock now)" if row["claude_lock_held"] else ""
            out.write(f"  Claude Code's last consolidation: {row['claude_consolidated']}{now}\n")
        idx = row["index"]
        if idx is None:
            out.write("  MEMORY.md: missing\n")
        else:
            out.write(
                f"  MEMORY.md: {idx['lines']}/{idx['max_lines']} lines, "
                f"{idx['chars']}/{idx['max_chars']} chars, {idx['bytes']}/"
                f"{idx['target_bytes']} bytes target"
                f"{'' if row['in_sync'] else ' — out of step (run memoryd index)'}\n"
            )
            if idx["hidden_pointers"]:
                why = ", ".join(f"{n} {reason}" for reason, n in idx["hidden_pointers"].items())
                out.write(f"  pointers the agent does not see: {why}\n")
    return EXIT_OK


def _store_reports(rt: Runtime, dirs: list[MemoryDir], named: list[Path]) -> list[dict[str, Any]]:
    """Every known JSONL record store, validated (memoryd.records), as JSON rows."""
    from memoryd import findings

    files = findings.store_files(rt.config, dirs, named)
    if not files:
        return []
    from memoryd import records

    out = []
    for file in files:
        read = findings.read_store(file)
        row: dict[str, Any] = {"path": str(file.path), "origin": file.origin}
        if read.data is None:
            row["problem"] = read.problem
        else:
            store = records.parse(read.data, cut=read.cut)
            report = records.report(store, rt.clock(), rt.config.dream.duplicate_threshold)
            row.update(report.to_json())
            row["lines"] = records.render(report)
        out.append(row)
    return out


def _render_secrets(rows: list[dict[str, Any]], *, indent: str = "", where: bool = True) -> str:
    """Each secret a memory holds, as `file:line: kind` (never the value)."""
    lines = []
    for row in rows:
        base = f"{row['real_path']}/" if where else ""
        lines += [
            f"{indent}{shown(base + s['file'])}:{s['line']}: {s['kind']} "
            "(flagged, never moved; take it out by hand)\n"
            for s in row["secrets"]
        ]
    if where and lines:
        lines.insert(0, "\nSecrets in memories:\n")
    return "".join(lines)


def _render_stores(stores: list[dict[str, Any]], out: TextIO) -> None:
    for row in stores:
        out.write(f"{shown(row['path'])}\n  kind: record store ({shown(row['origin'])})\n")
        if "problem" in row:
            out.write(f"  not read: {row['problem']}\n")
            continue
        for line in row["lines"]:
            out.write(f"  {shown(line)}\n")


# --- index -------------------------------------------------------------------------------------
def _outcome_json(o: IndexOutcome) -> dict[str, Any]:
    edit = o.edit
    return {
        "dir": str(o.dir.path),
        "status": o.status,
        "managed": bool(o.ownership and o.ownership.managed),
        "reason": o.ownership.reason if o.ownership else "",
        "message": o.message,
        "added": edit.added if edit else [],
        "removed": edit.removed if edit else [],
        "rewritten": edit.rewritten if edit else [],
        "collapsed": edit.collapsed if edit else [],
        "demoted": edit.demoted if edit else [],
        "waiting": edit.waiting if edit else [],
        "dead_links": edit.dead_links if edit else [],
        "invalid_links": edit.invalid_links if edit else [],
        "problems": o.problems,
        "diff": o.diff,
    }


def cmd_index(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.discover import discover_all
    from memoryd.indexing import passes

    if not args.check:
        _recover(rt)
    # --check changes nothing: not even the audit log. It shows what `index DIR` would do.
    rt.named = tuple(args.dirs)
    found = discover_all(rt.config, args.dirs) if args.check else _discover(rt, args.dirs)
    if args.not_named:
        rt.named = ()
    dirs, refused = found.dirs, found.refused
    # Why a dir is unmanaged is said once (as its `index.unmanaged` row is), not at every run:
    # the run that records it in the dir's state says it; `-v` and `dirs DIR` say it again.
    said = {md.real_path: rt.store.load(md.real_path).reported.get("unmanaged") for md in dirs}
    use_case = passes.check if args.check else passes.update
    outcomes = [use_case(rt, md) for md in dirs]
    # A dir left to the program writing its index is not in step either: a failed action.
    failed = any(o.status in ("error", "conflict", "settling") for o in outcomes)
    would = any(o.status == "would_change" for o in outcomes)
    if args.json:
        doc = {
            "dirs": [_outcome_json(o) for o in outcomes],
            "refused": [_refused_json(r) for r in refused],
            "empty_repos": [_empty_json(e) for e in found.empty_repos],
        }
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        if not dirs and not found.empty_repos:
            out.write(f"No memory dirs found under {rt.config.paths.claude_home}.\n")
        quiet = {"in sync": 0, "unmanaged": 0}
        for o in outcomes:
            if not args.verbose and o.status == "unchanged" and _nothing_to_note(o):
                quiet["in sync"] += 1
                continue
            if not args.verbose and o.status == "unmanaged" and not args.check:
                now_said = rt.store.load(o.dir.real_path).reported.get("unmanaged")
                if now_said == said.get(o.dir.real_path):
                    quiet["unmanaged"] += 1
                    continue
            out.write(_render_outcome(o))
        out.write(_render_refused(refused))
        out.write(_render_empty(found))
        out.write(_quiet_line(quiet))
    if failed or (args.check and would):
        return EXIT_FINDINGS
    return EXIT_OK


def _nothing_to_note(o: IndexOutcome) -> bool:
    """An in-sync dir with nothing to say (no dead link, no file in its grace, in the window)."""
    edit = o.edit
    return edit is None or not (
        edit.waiting or edit.dead_links or edit.invalid_links or not edit.fits_window
    )


def _quiet_line(quiet: dict[str, int]) -> str:
    """What `index` left unsaid, in one line: the dirs in sync, and the unmanaged ones whose
    reason was said before."""
    parts = []
    if quiet["in sync"]:
        parts.append(f"{quiet['in sync']} dir{'s' if quiet['in sync'] != 1 else ''} in sync")
    if quiet["unmanaged"]:
        parts.append(f"{quiet['unmanaged']} unmanaged, nothing changed")
    if not parts:
        return ""
    why = ", and says why a dir is unmanaged" if quiet["unmanaged"] else ""
    return f"{'; '.join(parts)} (-v lists them{why}).\n"


def _some(items: list[str], limit: int = 5) -> str:
    unique = sorted(set(items))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(map(shown, unique[:limit])) + more


def _render_outcome(o: IndexOutcome) -> str:
    """One dir's outcome for a person: its one label and path, messages, names and diff `shown`."""
    from memoryd.dirlabel import label

    where, message = f"{label(o.dir)} ({shown(o.dir.path)})", shown(o.message)
    if o.status == "unmanaged":
        return f"{where}: unmanaged — {message} (nothing changed)\n"
    if o.status == "settling":
        return f"{where}: not updated — {message}\n"
    if o.status in ("error", "conflict"):
        details = "".join(f"    {shown(p)}\n" for p in o.problems)
        return f"{where}: FAILED — {message}\n{details}"
    edit = o.edit
    assert edit is not None
    parts = [
        f"{label} {len(items)}"
        for label, items in (
            ("added", edit.added),
            ("removed", edit.removed),
            ("rewritten", edit.rewritten),
            ("collapsed", edit.collapsed),
            ("demoted", edit.demoted),
        )
        if items
    ]
    notes = []
    if edit.waiting:
        notes.append(f"{len(edit.waiting)} new file(s) within their grace")
    if edit.dead_links:
        notes.append(f"dead links kept (no such file yet): {_some(edit.dead_links)}")
    if edit.invalid_links:
        notes.append(f"invalid links kept (never followed): {_some(edit.invalid_links)}")
    if not edit.fits_window:
        notes.append(
            "still over the agent's load window (hand-written content or recent "
            "entries cannot move)"
        )
    note = "".join(f"    {n}\n" for n in notes)
    if o.status == "would_change":
        diff = shown(o.diff, lines=True)
        return f"{where}: would change ({', '.join(parts) or 'trailer'})\n{note}{diff}"
    if o.status == "updated":
        return f"{where}: updated ({', '.join(parts) or 'trailer'})\n{note}"
    return f"{where}: in sync\n{note}"


# --- log ---------------------------------------------------------------------------------------
FOLLOW_EVERY = 0.25  # seconds between looks at the log while following
FOLLOW_LAST = 10  # rows `log -f` shows before following, as `tail` does


def _lines_arg(text: str) -> int | None:
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give a number of rows or `all`")


def _log_view(args: argparse.Namespace, rt: Runtime, out: TextIO) -> View:
    import os

    from memoryd.humanize import Painter, terminal_width, use_color
    from memoryd.logview import View

    # Piped into grep or a file, a row is never cut; on a terminal it fits the width.
    width = terminal_width(out, os.environ, default=1 << 20)
    return View(
        now=rt.clock(),
        home=str(Path.home()),
        utc=args.utc,
        width=width,
        verbose=args.verbose,
        paint=Painter(use_color(args.color, out, os.environ)),
    )


def cmd_log(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import fnmatch
    import os

    from memoryd import audit

    err: TextIO = getattr(args, "stderr", sys.stderr)
    try:
        since = audit.parse_since(args.since, rt.clock()) if args.since else None
    except ValueError as error:
        raise UsageError(str(error)) from error
    if args.summary and since is None:
        since = rt.clock() - 86400  # the morning view: the last day unless told otherwise
    want = Path(args.dir).expanduser().absolute() if args.dir else None
    want_dir = str(want) if want else None

    def wanted(row: dict[str, Any]) -> bool:
        if since is not None and audit.row_time(row) < since:
            return False
        if args.event and not fnmatch.fnmatchcase(str(row.get("event")), args.event):
            return False
        if not want_dir:
            return True
        # The dir or a folder inside it (a parent such as ~/.claude/projects takes all of its
        # memory dirs), never a sibling that merely starts with the same letters.
        found = str(row.get("dir", ""))
        return found == want_dir or found.startswith(want_dir.rstrip("/") + "/")

    from dataclasses import replace

    from memoryd.logfollow import Follower
    from memoryd.logview import render_row, render_summary, summary_json

    known: dict[str, str] = {}  # repo roots of the project dirs named so far, for their labels
    view = replace(_log_view(args, rt, out), roots=known)
    looked: set[str] = set()  # the dirs whose repo root was looked for

    def label_dirs(rows: list[dict[str, Any]]) -> None:
        """Each dir by its one label (memoryd.dirlabel): the repo roots of the project dirs
        these rows name, looked for once each."""
        from memoryd.dirlabel import roots

        named = {str(r["dir"]) for r in rows if isinstance(r.get("dir"), str)} - looked
        if named and not args.json:
            looked.update(named)
            known.update(roots(named, rt.config))

    def emit(row: dict[str, Any]) -> None:
        label_dirs([row])
        out.write(
            json.dumps(row, ensure_ascii=False) + "\n"
            if args.json
            else render_row(row, view) + "\n"
        )

    def warn(message: str) -> None:
        err.write(f"memoryd: {'warning: ' if args.follow else ''}{message}\n")
        err.flush()

    path = rt.paths.audit_log
    backups = rt.config.log.backups
    follower = Follower(path, warn=warn, backups=backups)
    try:
        last = args.lines if args.lines != -1 else (FOLLOW_LAST if args.follow else None)
        filtered = since is not None or args.event or want_dir
        history = [r for r in follower.history(None if filtered else last) if wanted(r)]
        label_dirs(history)
        logged = os.path.lexists(path) or any(
            path.with_name(f"{path.name}.{n}").exists() for n in range(1, backups + 1)
        )
        if not logged:
            err.write(
                f"memoryd: no audit log yet at {path} (memoryd writes it once it does "
                f"something){'; waiting for rows' if args.follow else ''}.\n"
            )
        elif want and not history and not args.follow:
            missing = "" if want.exists() else " (no such folder)"
            err.write(f"memoryd: no rows about {want}{missing} in {path}.\n")
            if missing:
                return EXIT_FINDINGS
        if args.summary:
            if args.json:
                json.dump(summary_json(history), out, indent=2, ensure_ascii=False)
                out.write("\n")
            else:
                out.write(render_summary(history, view, since=since))
            return EXIT_OK
        for row in history[-last:] if last else [] if last == 0 else history:
            emit(row)
        if not args.follow:
            return EXIT_FINDINGS if follower.problem else EXIT_OK  # a file that is no log
        out.flush()
        while True:
            rows = follower.poll()
            for row in rows:
                if wanted(row):
                    emit(row)
            out.flush()
            if not rows:  # while rows come, look again at once: rotations come fast then
                rt.sleep(FOLLOW_EVERY)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        follower.close()


# --- config ------------------------------------------------------------------------------------
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def cmd_config(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.config import config_as_dict

    if args.config_command == "check":
        out.write(f"{rt.config.source}: configuration is valid\n")
        return EXIT_OK
    data = config_as_dict(rt.config)
    out.write(f"# effective configuration (from {rt.config.source})\n")
    for section, table in data.items():
        assert isinstance(table, dict)
        if section == "dirs":
            for path, values in table.items():
                out.write(f"\n[dirs.{json.dumps(path)}]\n")
                for key, value in values.items():
                    out.write(f"{key} = {_toml_value(value)}\n")
            continue
        out.write(f"\n[{section}]\n")
        for key, value in table.items():
            out.write(f"{key} = {_toml_value(value)}\n")
    return EXIT_OK


# --- dream, explain, trash ---------------------------------------------------------------------
JOURNALS = "journal"  # journal.JOURNAL_DIR, spelled out here (a test checks they agree)


def _journals_left(state_dir: Path) -> bool:
    """Whether any pass journal is in the state dir (what journal.pending lists): without one
    there is nothing to recover, and the recovery's modules (the journal, the trash, the
    version store: ~18 ms of start-up) are not imported at all."""
    try:
        return any(n.endswith(".jsonl") for n in os.listdir(state_dir / JOURNALS))
    except OSError:
        return False  # as journal.pending: no folder, no journal


def _recover(rt: Runtime) -> None:
    """Finish what a crash left unfinished before doing anything else (DESIGN §2.3)."""
    if not _journals_left(rt.paths.state_dir):
        return
    from memoryd.recovery import recover

    for recovery in recover(rt):
        sys.stderr.write(
            f"memoryd: recovered an unfinished pass in {recovery.journal.dir}: {recovery.outcome}\n"
        )


def cmd_dream(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from dataclasses import replace

    from memoryd import housekeeping
    from memoryd.discover import discover
    from memoryd.dream.run import RepoCache, dream_dir
    from memoryd.report import render_text, result_json, totals

    if args.apply:
        return _dream_apply(args, rt, out)
    # A dry run writes nothing at all: no state, no audit row (rt.effect, see effect_of).
    if not args.dry_run:
        _recover(rt)
    found = _discover(rt, args.dirs)  # a dry run says nothing (rt.dry_run)
    dirs, refused = found.dirs, found.refused
    if args.repo_root is not None:
        root = args.repo_root.expanduser().absolute()
        if not root.is_dir():
            raise UsageError(f"{root}: --repo-root must be a folder")
        dirs = [replace(d, repo_root=root, repo_reason="given with --repo-root") for d in dirs]
    if not args.dry_run:
        housekeeping.rotate(rt, dirs)
    repos = RepoCache.of(rt)
    # Why a dir is unmanaged is said by the pass that records it (see cmd_index).
    said = {md.real_path: rt.store.load(md.real_path).reported.get("unmanaged") for md in dirs}
    results = [dream_dir(rt, md, repos=repos, dry_run=args.dry_run) for md in dirs]
    said_before = {
        r.dir.real_path
        for r in results
        if r.status == "unmanaged"
        and said[r.dir.real_path] is not None
        and rt.store.load(r.dir.real_path).reported.get("unmanaged") == said[r.dir.real_path]
    }
    declined: dict[Path, set[str]] = {
        r.dir.real_path: {i.filename for i in r.plan.items.values() if i.promotion_declined}
        for r in results
        if r.plan
    }
    # Other projects' indexes count even when this run names one dir (their memory dirs are
    # only read, never passed over).
    known = discover(rt.config) if args.dirs else dirs
    texts = {r.dir.real_path: r.index_text for r in results if r.index_text is not None}
    promo_line, promos = housekeeping.promotion_candidates(
        dirs, declined, known, texts, rt.versions
    )
    hk = [housekeeping.orphan_hints(dirs), promo_line]
    hk += [f"  {d}: {f} (topic in {n} other projects)" for d, f, n in promos]
    if args.json:
        doc = {
            "dry_run": args.dry_run,
            "totals": totals(results, len(promos)),
            "dirs": [result_json(r) for r in results],
            "housekeeping": hk,
            "promotion_candidates": [
                {"dir": d, "file": f, "other_projects": n} for d, f, n in promos
            ],
            "refused": [_refused_json(r) for r in refused],
            "empty_repos": [_empty_json(e) for e in found.empty_repos],
        }
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render_text(results, hk, args.dry_run, len(promos), said_before))
        out.write(_render_refused(refused))
        out.write(_render_empty(found))
    failed = any(r.status in ("failed", "refused") for r in results)
    return EXIT_FINDINGS if failed else EXIT_OK


def _dream_apply(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`dream DIR --apply PASS_ID`: the plan a refused pass kept, applied after review."""
    from memoryd.dream import refused
    from memoryd.dream.run import apply_refused
    from memoryd.report import render_text, result_json

    if args.dry_run or args.repo_root is not None:
        raise UsageError("--apply takes no --dry-run or --repo-root: it applies a stored plan")
    if not args.dirs:
        raise UsageError("--apply PASS_ID needs the DIR whose pass was refused")
    _recover(rt)
    dirs = _discover(rt, args.dirs).dirs
    held = [md for md in dirs if refused.exists(rt.paths.state_dir, md.real_path, args.apply)]
    md = held[0] if held else dirs[0] if len(dirs) == 1 else None
    if md is None:
        raise MemorydError(
            f"no refused plan {args.apply} for {', '.join(str(d) for d in args.dirs)}; name "
            "the memory dir its report named"
        )
    result = apply_refused(rt, md, args.apply)
    if args.json:
        json.dump(
            {"applied": args.apply, "dirs": [result_json(result)]},
            out,
            indent=2,
            ensure_ascii=False,
        )
        out.write("\n")
    else:
        out.write(render_text([result], [], False))
    return EXIT_OK if result.status == "completed" and not result.skipped_moves else EXIT_FINDINGS


def cmd_explain(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import findings
    from memoryd.dream.explain import explain, render
    from memoryd.dream.run import RepoCache

    if findings.is_store_file(args.file):
        return _explain_store(args, rt, out)
    from memoryd.resolve import is_path, resolve

    if not is_path(str(args.file)):  # a name, as memoryd.resolve finds it
        args.file = resolve(rt, str(args.file)).path
    root = args.repo_root.expanduser().absolute() if args.repo_root else None
    if root is not None and not root.is_dir():
        raise UsageError(f"{root}: --repo-root must be a folder")
    data = explain(rt, args.file, RepoCache.of(rt), root)
    if args.json:
        json.dump(data, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(data))
    return EXIT_OK


def _explain_store(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`explain STORE`: every line of a JSONL record store validated, and its findings."""
    path = args.file.expanduser().absolute()
    if not path.exists():
        raise MemorydError(f"{path}: no such file (name a JSONL record store or a memory file)")
    (row,) = _store_reports(rt, [], [path])
    if args.json:
        json.dump(row, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _render_stores([row], out)
    if "problem" in row:
        raise MemorydError(
            f"{path}: {row['problem']}; memoryd reads a store only as a regular file"
        )
    return EXIT_OK


def cmd_trash(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import time

    from memoryd import housekeeping, trash
    from memoryd.config import parse_duration
    from memoryd.discover import discover

    named, gone = list(args.dirs), list[Path]()
    if args.trash_command in ("list", "restore"):  # a DIR deleted whole: its files are listed
        from memoryd.cmd_versions import split_gone

        named, gone = split_gone(rt, args.dirs)
    if args.trash_command == "list":
        listed_dirs = discover(rt.config, named) if named or not gone else []
        listing = housekeeping.list_trash(listed_dirs)
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
        # versions: files deleted outside memoryd, restorable the same way
        from memoryd import cmd_versions

        elsewhere = cmd_versions.deleted_rows(rt, args.dirs)
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
            json.dump(document, out, indent=2, ensure_ascii=False)
            out.write("\n")
        else:
            import os

            from memoryd.humanize import Painter, use_color
            from memoryd.views.trash import render

            paint = Painter(use_color(args.color, out, os.environ))
            if rows or not elsewhere:  # not "The trash is empty." above what is restorable
                out.write(render(rows, time.time(), paint))
        for bad in [] if args.json else invalid:
            out.write(f"INVALID  {shown(bad['message'])}\n")
        if not args.json:
            out.write(cmd_versions.render_deleted(elsewhere))
        return EXIT_FINDINGS if invalid else EXIT_OK
    if not (args.trash_command == "purge" and args.dry_run):  # a dry run writes nothing at all
        _recover(rt)
    if args.trash_command == "restore":
        dirs = discover(rt.config, named) if named or not gone else []
        if not args.dirs:  # also every dir memoryd has worked on, wherever it was
            dirs += housekeeping.known_dirs(rt)
        key, holder = _trashed_key(rt, args.key, args.dirs)
        if holder is not None:  # a name: the one dir the resolver found it in
            dirs = [holder]
        try:
            found = housekeeping.find_entry(rt, dirs, key)
        except MemorydError:  # versions: or a file deleted outside memoryd
            from memoryd import cmd_versions

            if cmd_versions.restore_deleted(rt, key, args.dirs, out):
                return EXIT_OK
            raise
        name = housekeeping.restore(rt, found)
        out.write(
            f"restored {shown(found.entry.record.original_name)} as "
            f"{shown(found.dir.path / name)}\n"
        )
        record = found.entry.record
        winner = record.duplicate_of or record.superseded_by
        if winner:  # a restored loser says what it had lost to
            out.write(
                f"  it had lost to {shown(winner)} on {record.day} ({record.reason}, pass "
                f"{record.pass_id}); see `memoryd history {shown(name)}`\n"
            )
        return EXIT_OK
    dirs = discover(rt.config, args.dirs)
    keep = None
    if args.older_than:
        try:
            keep = max(0, int(parse_duration(args.older_than) // 86400))
        except ValueError as error:
            raise UsageError(f"--older-than: {error}") from error
    results = housekeeping.rotate(rt, dirs, keep_days=keep, dry_run=args.dry_run)
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
    """`trash restore NAME`: the name (with or without .md) as memoryd.resolve finds it among
    the files to restore, nearest dirs first, as `<dir>/<file>` and its dir; an ambiguous
    name is a usage error listing the candidates. An id or a path is left as it is."""
    import re

    from memoryd.resolve import is_path, resolve

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


# --- run, status -------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import daemon

    return daemon.run(args.config, rt.paths, rt.config, rt.versions)


def cmd_status(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import os

    from memoryd.humanize import Painter, terminal_width, use_color
    from memoryd.logview import View
    from memoryd.statusview import gather, render

    now = rt.clock()
    found = gather(rt, now)
    off = _auto_memory_off(rt)
    if args.json:
        json.dump({**found.as_json(), "auto_memory_off": off}, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        from memoryd.dirlabel import roots

        view = View(
            now=now,
            home=str(Path.home()),
            width=terminal_width(out, os.environ),
            paint=Painter(use_color(args.color, out, os.environ)),
            roots=roots([d.path for d in found.dirs], rt.config),
        )
        out.write(render(found, view))
        if off:
            out.write(_auto_memory_off_line(off))
        import time

        from memoryd.statusview import alarm_lines

        out.write(alarm_lines(rt, time.time()))  # mass changes by other processes, last day
    return EXIT_OK if found.fresh else EXIT_FINDINGS


def _auto_memory_off(rt: Runtime) -> str:
    """What turned Claude Code's auto memory off where no project says otherwise, or "" (the
    environment and the user's settings: memoryd.claude_env, no discovery)."""
    from memoryd.claude_env import auto_memory_switch, user_settings

    switch = auto_memory_switch(
        rt.config.claude_env, [user_settings(rt.config.paths.claude_home, [])]
    )
    return "" if switch.on else switch.source


def _auto_memory_off_line(source: str) -> str:
    return (
        f"Auto memory is turned off ({shown(source)}): Claude Code loads no auto-memory "
        "MEMORY.md; memoryd still maintains the files.\n"
    )


def cmd_service(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import service

    manager = args.manager or service.default_manager()
    config = args.config.expanduser().absolute() if args.config else None
    plan = service.plan(args.action, manager, config, rt.paths)
    if plan.note:
        args.stderr.write(plan.note + "\n")
    if args.dry_run:
        if plan.content:
            out.write(f"# would write {plan.file}:\n{plan.content}\n")
        for cmd in plan.commands:
            out.write(f"$ {' '.join(cmd)}\n")
        return EXIT_OK
    done = service.execute(plan, args.action)
    for line in done.lines:
        out.write(line + "\n")
    return EXIT_OK if done.ok else EXIT_FINDINGS


def cmd_ack(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import cmd_ack as ack

    return ack.cmd_ack(args, rt, out)


def cmd_demo(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import demo

    return demo.run(out, keep=args.keep)


HANDLERS: dict[str, Handler] = {
    "service": cmd_service,
    "demo": cmd_demo,
    "run": cmd_run,
    "status": cmd_status,
    "dirs": cmd_dirs,
    "dream": cmd_dream,
    "explain": cmd_explain,
    "trash": cmd_trash,
    "index": cmd_index,
    "log": cmd_log,
    "config": cmd_config,
    "ack": cmd_ack,
    "forget": lambda args, rt, out: _lazy("cmd_forget", args, rt, out),
    "history": lambda args, rt, out: _lazy("cmd_history", args, rt, out),
}


@contextlib.contextmanager
def _looking_only(effect: Effect) -> Iterator[None]:
    """A command that promises to write nothing (a read-only one, a dry run, `--check`) does
    not save even discovery's cache (memoryd.cwd_cache), for as long as it runs."""
    if effect.writes:
        yield
        return
    from memoryd.cwd_cache import LOOKING_ONLY

    token = LOOKING_ONLY.set(True)
    try:
        yield
    finally:
        LOOKING_ONLY.reset(token)


def _keeping_versions(
    args: argparse.Namespace, rt: Runtime
) -> contextlib.AbstractContextManager[None]:
    """The version store for a command that may write in memory dirs (cmd_versions.keeping);
    the others do not even import it: a check or a dry run keeps none."""
    if not rt.effect.keeps_versions:
        return contextlib.nullcontext()
    from memoryd.cmd_versions import keeping

    return keeping(args, rt)


def _lazy(module: str, args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """A command whose module is imported only when it runs."""
    import importlib

    handler: Handler = getattr(importlib.import_module(f"memoryd.{module}"), module)
    return handler(args, rt, out)


# The commands that may write in a memory dir (moves included), and so keep versions of what
# they read and record their own moves (cmd_versions.keeping).
VERSIONED = frozenset({"run", "index", "dream", "trash", "history", "forget"})
READ_ONLY = frozenset({"status", "log", "dirs", "history"})  # and `trash list`
CONFIG_PROBLEMS_SHOWN = 3


def effect_of(args: argparse.Namespace) -> Effect:
    """What this command may change (runtime.Effect), decided here once for the whole run."""
    from memoryd.runtime import Effect

    command = args.command
    if command == "history":  # `--restore` writes a version back
        return Effect.LOOKS if getattr(args, "restore", None) is None else Effect.KEEPS
    if command in READ_ONLY or (command == "trash" and args.trash_command == "list"):
        return Effect.LOOKS
    if getattr(args, "dry_run", False) or getattr(args, "check", False) or command == "explain":
        return Effect.DRY
    return Effect.KEEPS if command in VERSIONED else Effect.WRITES


def _config_warning(error: ConfigError) -> str:
    shown_problems = "; ".join(error.problems[:CONFIG_PROBLEMS_SHOWN])
    more = len(error.problems) - CONFIG_PROBLEMS_SHOWN
    if more > 0:
        shown_problems += f"; and {more} more"
    return (
        f"memoryd: warning: {error.source}: invalid configuration ({shown_problems}); this "
        "command uses the built-in defaults instead. See every problem with "
        "`memoryd config check`.\n"
    )


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if _named_command(argv) == "hook":  # Claude Code's hooks: no parser, no config, always 0
        from memoryd.hooks import main as hook_main

        return hook_main(list((sys.argv[1:] if argv is None else argv)[1:]), out=out)
    parser = build_parser(_named_command(argv))
    try:
        # argparse prints help and usage errors itself; send them where the caller asked.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else EXIT_USAGE
    from memoryd.config import Config, load_config
    from memoryd.logsetup import configure
    from memoryd.paths import app_paths
    from memoryd.runtime import Effect, Runtime, tune_gc

    tune_gc()
    effect = effect_of(args)
    # Warnings (an audit log that cannot be written) go where this run's errors go.
    configure(file=err)
    paths = app_paths()
    try:
        config = load_config(args.config, paths)
    except ConfigError as error:
        if effect is Effect.LOOKS:
            # A daemon may still run on the configuration it read before the file broke:
            # looking at it must not need the file fixed first.
            config = Config(source="built-in defaults (the configuration file is invalid)")
            err.write(_config_warning(error))
        else:
            err.write(f"memoryd: {shown(error, lines=True)}\n")
            if args.command != "config":
                err.write("Fix the file, then check it with `memoryd config check`.\n")
            if args.command == "run":  # the daemon's own log says why it did not start
                with contextlib.suppress(OSError):
                    Runtime.create(Config(), paths).audit.write(
                        "config.invalid", source=error.source, problems=error.problems
                    )
            return EXIT_USAGE
    rt = Runtime.create(config, paths, effect)
    args.stderr = err  # a handler's warnings go where this run's errors go
    try:
        handler = getattr(args, "handler", None) or HANDLERS[args.command]
        from memoryd.pager import paged  # long output through $PAGER on a terminal

        with _keeping_versions(args, rt), _looking_only(effect), paged(args, out) as shown_out:
            return handler(args, rt, shown_out)
    except UsageError as error:
        err.write(f"memoryd: {shown(error, lines=True)}\n")
        return EXIT_USAGE
    except MemorydError as error:  # it may name a file, or quote a line, of anyone's making
        err.write(f"memoryd: {shown(error, lines=True)}\n")
        return EXIT_FINDINGS
    except BrokenPipeError:
        return EXIT_OK
    except OSError as error:
        # What no step turned into a message of its own (a state file on a full disk, say):
        # still the file and what to do, not a traceback.
        where = f"{error.filename}: " if error.filename else ""
        from memoryd.fdlimit import out_of_files

        fix = out_of_files(error)
        if fix is not None:
            err.write(f"memoryd: {where}{fix}.\n")
            return EXIT_FINDINGS
        err.write(f"memoryd: {where}{error.strerror or error}. {_advice(error)}\n")
        return EXIT_FINDINGS


def _advice(error: OSError) -> str:
    """What to do about an error no step gave a message of its own, by what the system said
    (a permission is no full disk)."""
    import errno

    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # EFBIG: a size limit
        return "Free disk space there (or raise the file size limit), then rerun."
    if error.errno in (errno.EACCES, errno.EPERM):
        return "Fix the permissions there, or name folders memoryd may read, then rerun."
    if error.errno == errno.EROFS:
        return "That file system is read-only; make it writable, then rerun."
    return "Check the file system there, then rerun."


def entry() -> None:
    code = main()
    # What the command built (an entry per memory file...) is left to the process's end, not
    # to the collector's last walk at exit, which would free it object by object (~15 ms at
    # 10,000 memories). Files are flushed as before: every write closes its file.
    gc.freeze()
    sys.exit(code)
