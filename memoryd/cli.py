"""The `memoryd` command line: argparse, dispatch, rendering. No maintenance logic of its own."""

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from memoryd import __version__, audit, fsops
from memoryd.config import Config, config_as_dict, load_config
from memoryd.discover import (
    Discovery,
    EmptyRepo,
    MemoryDir,
    RefusedDir,
    discover,
    discover_all,
    report_refused,
)
from memoryd.display import shown
from memoryd.errors import ConfigError, MemorydError, UsageError
from memoryd.index import INDEX_NAME
from memoryd.indexer import IndexOutcome, budget_use, index_dir, read_index_file, view_kind
from memoryd.logsetup import configure
from memoryd.paths import app_paths, read_bounded
from memoryd.runtime import Runtime, tune_gc

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
STATUS_MAX_BYTES = 64 << 20  # status.json: a few hundred bytes a dir

Handler = Callable[[argparse.Namespace, Runtime, TextIO], int]


def _dirs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs",
        nargs="*",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "dirs",
        help="list memory dirs, their kind, repo root, files and budget",
        description="List every memory dir memoryd finds, with its kind, repo "
        "root (or why none), memory files, unparseable files, index lines and "
        "budget use.",
    )
    _dirs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")

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

    p = sub.add_parser("run", help="run the daemon in the foreground (as a user service does)",
                       description="Watch every memory dir, keep indexes in step as files "
                       "change, dream when memories pile up, write a heartbeat. Runs in the "
                       "foreground; one instance per user. SIGTERM/SIGINT stop it cleanly, "
                       "SIGHUP reloads the configuration.")
    p = sub.add_parser("status", help="is the daemon running, and how are its dirs",
                       description="Read the daemon's heartbeat (status.json). Exit 0 when it "
                       "runs with a fresh heartbeat, 1 otherwise.")
    p.add_argument("--json", action="store_true", help="print the status document")

    p = sub.add_parser("service", help="install memoryd as a user service (systemd/launchd)",
                       description="Render the systemd user unit or the launchd agent with the "
                       "absolute path of this memoryd, write it, and enable and start it.")
    p.add_argument("action", choices=["install", "uninstall", "status"], help="what to do")
    p.add_argument("--dry-run", action="store_true",
                   help="print the file and the commands instead of running them")
    p.add_argument("--manager", choices=["systemd", "launchd"], default=None,
                   help="which service manager (default: launchd on macOS, else systemd)")
    p = sub.add_parser("demo", help="show memoryd at work in a throw-away sandbox",
                       description="Build a sandbox (its own HOME, Claude home, repo and "
                       "memories with a duplicate, a stale reference, a contradiction and a "
                       "hand-written index), run the daemon against it, write a memory as an "
                       "agent would, and show the index change, a dream report, the log and a "
                       "restore. Nothing outside the sandbox is touched.")
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
    _repo_root_arg(p)

    p = sub.add_parser(
        "explain",
        help="show every check and rule applied to one memory",
        description="For one memory: its references and their scope, its "
        "classification, each guard and whether it holds, consult evidence, "
        "duplicate and contradiction candidates with overlap scores, and the "
        "decision the dream pass would take.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="a memory file")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    _repo_root_arg(p)

    p = sub.add_parser(
        "trash",
        help="list, restore or purge trashed memories",
        description="memoryd moves memories into <memory dir>/.trash/YYYY-MM-DD/ "
        "with a manifest; nothing is deleted until the day folder is purged.",
    )
    trash_sub = p.add_subparsers(dest="trash_command", metavar="ACTION", required=True)
    q = trash_sub.add_parser("list", help="list trashed files (id, date, reason, file)")
    _dirs_arg(q)
    q.add_argument("--json", action="store_true", help="print one JSON document")
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
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new rows")
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

    from memoryd import cmd_recall  # search, recall, show, mcp: their handlers import the rest

    cmd_recall.add_parser(sub)
    return parser


# --- dirs --------------------------------------------------------------------------------------
def _dir_summary(rt: Runtime, md: MemoryDir) -> dict[str, Any]:
    outcome = index_dir(rt, md, check=True)
    scan = outcome.scan
    main_text = None
    with fsops.open_dir(md.real_path) as fd:
        main_text = read_index_file(fd, INDEX_NAME).text
    return {
        "path": str(md.path),
        "real_path": str(md.real_path),
        "via_symlink": md.via_symlink,
        "kind": md.kind,
        "label": md.label,
        "repo_root": str(md.repo_root) if md.repo_root else None,
        "repo_reason": md.repo_reason,
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
        "index": budget_use(main_text, rt, view_kind(md)) if main_text is not None else None,
        "in_sync": outcome.status in ("unchanged", "unmanaged"),
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
    found = discover_all(rt.config, dirs)
    report_refused(rt, found.refused)
    return found


def cmd_dirs(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    rt.dry_run = True
    found = discover_all(rt.config, args.dirs)
    dirs = found.dirs
    rows = [_dir_summary(rt, md) for md in dirs]
    if args.json:
        json.dump(
            {
                "claude_home": str(rt.config.paths.claude_home),
                "dirs": rows,
                "refused": [_refused_json(r) for r in found.refused],
                "empty_repos": [_empty_json(e) for e in found.empty_repos],
            },
            out,
            indent=2,
            ensure_ascii=False,
        )
        out.write("\n")
        return EXIT_OK
    out.write(_render_refused(found.refused))
    out.write(_render_empty(found))
    if not rows and found.empty_repos:
        return EXIT_OK
    if not rows:
        home = rt.config.paths.claude_home
        note = "" if home.exists() else " (it does not exist yet)"
        out.write(f"No memory dirs found under {home}{note}.\n")
        return EXIT_OK
    for row in rows:
        link = f" (via symlink {row['path']})" if row["via_symlink"] else ""
        out.write(f"{shown(row['real_path'])}{shown(link)}\n")
        out.write(f"  kind: {row['kind']}  index: {row['mode']} — {row['mode_reason']}\n")
        root = row["repo_root"] or "none"
        out.write(f"  repo root: {root} ({row['repo_reason']})\n")
        out.write(f"  memory files: {row['memory_files']}")
        if row["unparseable"]:
            out.write(f"  unparseable: {len(row['unparseable'])}")
        if row["notes"]:
            out.write(f"  other markdown: {len(row['notes'])}")
        out.write("\n")
        for problem in row["problems"]:
            out.write(
                f"    {shown(problem['file'])}: {problem['problem']} — {problem['hint']}\n"
            )
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
    if not args.check:
        _recover(rt)
    # --check changes nothing: not even the audit log.
    found = discover_all(rt.config, args.dirs) if args.check else _discover(rt, args.dirs)
    dirs, refused = found.dirs, found.refused
    outcomes = [index_dir(rt, md, check=args.check) for md in dirs]
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
        for o in outcomes:
            out.write(_render_outcome(o))
        out.write(_render_refused(refused))
        out.write(_render_empty(found))
    if failed or (args.check and would):
        return EXIT_FINDINGS
    return EXIT_OK


def _some(items: list[str], limit: int = 5) -> str:
    unique = sorted(set(items))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(unique[:limit]) + more


def _render_outcome(o: IndexOutcome) -> str:
    where = str(o.dir.path)
    if o.status == "unmanaged":
        return f"{where}: unmanaged — {o.message} (nothing changed)\n"
    if o.status == "settling":
        return f"{where}: not updated — {o.message}\n"
    if o.status in ("error", "conflict"):
        details = "".join(f"    {p}\n" for p in o.problems)
        return f"{where}: FAILED — {o.message}\n{details}"
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
        return f"{where}: would change ({', '.join(parts) or 'trailer'})\n{note}{o.diff}"
    if o.status == "updated":
        return f"{where}: updated ({', '.join(parts) or 'trailer'})\n{note}"
    return f"{where}: in sync\n{note}"


# --- log ---------------------------------------------------------------------------------------
def _render_row(row: dict[str, Any]) -> str:
    skip = {"ts", "v", "event", "level", "pid", "dir"}
    rest = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
        for k, v in row.items()
        if k not in skip
    )
    where = f" {row['dir']}" if "dir" in row else ""
    level = "" if row.get("level") == "info" else f" [{str(row.get('level', '')).upper()}]"
    line = f"{row.get('ts', '?')} {row.get('event', '?')}{level}{where}  {rest}".rstrip()
    return shown(line) + "\n"


def cmd_log(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    import fnmatch

    try:
        since = audit.parse_since(args.since) if args.since else None
    except ValueError as error:
        raise UsageError(str(error)) from error
    want_dir = str(Path(args.dir).expanduser().absolute()) if args.dir else None

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

    def emit(row: dict[str, Any]) -> None:
        if wanted(row):
            out.write(json.dumps(row, ensure_ascii=False) + "\n" if args.json else _render_row(row))

    path = rt.paths.audit_log
    for row in audit.read_rows(path, rt.config.log.backups):
        emit(row)
    if not args.follow:
        return EXIT_OK
    out.flush()
    return _follow(path, emit, out)


def _follow(path: Path, emit: Callable[[dict[str, Any]], None], out: TextIO) -> int:
    """Like `tail -F`: reopen by name when the file is rotated, skip torn lines until whole."""
    import os

    position = path.stat().st_size if path.exists() else 0
    inode = path.stat().st_ino if path.exists() else None
    pending = b""
    try:
        while True:
            try:
                st = path.stat()
            except FileNotFoundError:
                time.sleep(0.5)
                continue
            if st.st_ino != inode or st.st_size < position:
                inode, position, pending = st.st_ino, 0, b""
            if st.st_size > position:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.lseek(fd, position, os.SEEK_SET)
                    chunk = os.read(fd, st.st_size - position)
                finally:
                    os.close(fd)
                position += len(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    try:
                        row = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(row, dict):
                        emit(row)
                out.flush()
            time.sleep(0.3)
    except KeyboardInterrupt:
        return EXIT_OK


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
def _recover(rt: Runtime) -> None:
    """Finish what a crash left unfinished before doing anything else (DESIGN §2.3)."""
    from memoryd.recovery import recover

    for recovery in recover(rt):
        sys.stderr.write(
            f"memoryd: recovered an unfinished pass in {recovery.journal.dir}: {recovery.outcome}\n"
        )


def cmd_dream(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from dataclasses import replace

    from memoryd import housekeeping
    from memoryd.dream.run import RepoCache, dream_dir
    from memoryd.report import render_text, result_json, totals

    rt.dry_run = args.dry_run  # a dry run writes nothing at all: no state, no audit row
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
    results = [dream_dir(rt, md, repos=repos, dry_run=args.dry_run) for md in dirs]
    declined: dict[Path, set[str]] = {
        r.dir.real_path: {i.filename for i in r.plan.items.values() if i.promotion_declined}
        for r in results
        if r.plan
    }
    # Other projects' indexes count even when this run names one dir (their memory dirs are
    # only read, never passed over).
    known = discover(rt.config) if args.dirs else dirs
    promo_line, promos = housekeeping.promotion_candidates(dirs, declined, known)
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
        out.write(render_text(results, hk, args.dry_run, len(promos)))
        out.write(_render_refused(refused))
        out.write(_render_empty(found))
    failed = any(r.status in ("failed", "refused") for r in results)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_explain(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.dream.explain import explain, render
    from memoryd.dream.run import RepoCache

    rt.dry_run = True
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


def cmd_trash(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import housekeeping, trash
    from memoryd.config import parse_duration

    if args.trash_command == "list":
        listing = housekeeping.list_trash(discover(rt.config, args.dirs))
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
        if args.json:
            json.dump({"trash": rows, "invalid": invalid}, out, indent=2, ensure_ascii=False)
            out.write("\n")
        elif not rows:
            out.write("The trash is empty.\n")
        for r in [] if args.json else rows:
            because = r["duplicate_of"] or r["superseded_by"]
            extra = f" (kept: {because})" if because else ""
            where = shown(f"{r['dir']}/{r['file']}")
            out.write(f"{r['id']}  {r['day']}  {r['reason']:<13} {where}{shown(extra)}\n")
        for bad in [] if args.json else invalid:
            out.write(f"INVALID  {shown(bad['message'])}\n")
        return EXIT_FINDINGS if invalid else EXIT_OK
    if not (args.trash_command == "purge" and args.dry_run):  # a dry run writes nothing at all
        _recover(rt)
    if args.trash_command == "restore":
        dirs = discover(rt.config, args.dirs)
        if not args.dirs:  # also every dir memoryd has worked on, wherever it was
            dirs += housekeeping.known_dirs(rt)
        found = housekeeping.find_entry(rt, dirs, args.key)
        name = housekeeping.restore(rt, found)
        out.write(
            f"restored {shown(found.entry.record.original_name)} as "
            f"{shown(found.dir.path / name)}\n"
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
    return EXIT_FINDINGS if any(rot.refused or rot.problems for rot in results) else EXIT_OK


# --- run, status -------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import daemon

    return daemon.run(args.config, rt.paths, rt.config)


def cmd_status(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from datetime import UTC, datetime

    from memoryd import daemon

    pid = daemon.lock_holder(rt.paths)
    try:
        # Bounded, and never a FIFO planted in its place (it would hang `memoryd status`).
        status = json.loads(read_bounded(rt.paths.status_file, STATUS_MAX_BYTES, follow=False))
    except (OSError, ValueError):
        status = None
    age = None
    if status and status.get("heartbeat"):
        beat = datetime.fromisoformat(status["heartbeat"])
        age = (datetime.now(UTC) - beat).total_seconds()
    stale_after = 4 * float(status.get("heartbeat_every", daemon.HEARTBEAT_EVERY)) if status else 0
    running = pid is not None
    fresh = running and age is not None and age <= stale_after and status.get("pid") == pid
    if args.json:
        doc = {"running": running, "pid": pid, "heartbeat_age_s": age, "fresh": fresh,
               "status": status}
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return EXIT_OK if fresh else EXIT_FINDINGS
    if not running:
        out.write(f"memoryd is not running (nothing holds {rt.paths.lock_file}).\n")
        if status:
            out.write(f"Its last heartbeat was {status.get('heartbeat')} (pid {status.get('pid')})."
                      "\n")
        out.write("Start it with `memoryd run`, or `memoryd service install` to run it as a "
                  "user service.\n")
        return EXIT_FINDINGS
    if not fresh:
        when = f"{age:.0f} s ago" if age is not None else "never"
        out.write(f"memoryd is running (pid {pid}) but its heartbeat is stale (last {when}); "
                  "it may be stuck: see its log (journalctl --user -u memoryd).\n")
        return EXIT_FINDINGS
    assert status is not None
    out.write(f"memoryd {status.get('version')} is running (pid {pid}) since {status['started']};"
              f" heartbeat {age:.0f} s ago.\n")
    if status.get("waiting_for_claude_home"):
        out.write(f"Waiting for {status['claude_home']} to exist.\n")
    if status.get("read_events") == "lost":
        out.write("Consult signal from read events is off (file events were lost once).\n")
    for d in status.get("dirs", []):
        out.write(f"  {d['real_path']}  [{d['kind']}] files {d['files']}, index {d['index']}, "
                  f"pending changes {d['pending_changes']}, last pass {d['last_pass'] or 'never'}"
                  f"{' (' + d['last_pass_result'] + ')' if d['last_pass_result'] else ''}, "
                  f"watch {d['watch']}\n")
    return EXIT_OK


def cmd_service(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd import service

    manager = args.manager or service.default_manager()
    config = args.config.expanduser().absolute() if args.config else None
    plan = service.plan(args.action, manager, config, rt.paths)
    if args.dry_run:
        if plan.content:
            out.write(f"# would write {plan.file}:\n{plan.content}\n")
        for cmd in plan.commands:
            out.write(f"$ {' '.join(cmd)}\n")
        return EXIT_OK
    for line in service.execute(plan, args.action):
        out.write(line + "\n")
    return EXIT_OK


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
}


READ_ONLY = frozenset({"status", "log", "dirs"})  # and `trash list`
CONFIG_PROBLEMS_SHOWN = 3


def _read_only(args: argparse.Namespace) -> bool:
    """A command that only looks (it runs on the built-in defaults when the file is invalid)."""
    return args.command in READ_ONLY or (
        args.command == "trash" and args.trash_command == "list"
    )


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
    tune_gc()
    parser = build_parser()
    try:
        # argparse prints help and usage errors itself; send them where the caller asked.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else EXIT_USAGE
    # Warnings (an audit log that cannot be written) go where this run's errors go.
    configure(file=err)
    paths = app_paths()
    try:
        config: Config = load_config(args.config, paths)
    except ConfigError as error:
        if _read_only(args):
            # A daemon may still run on the configuration it read before the file broke:
            # looking at it must not need the file fixed first.
            config = Config(source="built-in defaults (the configuration file is invalid)")
            err.write(_config_warning(error))
        else:
            err.write(f"memoryd: {error}\n")
            if args.command != "config":
                err.write("Fix the file, then check it with `memoryd config check`.\n")
            if args.command == "run":  # the daemon's own log says why it did not start
                with contextlib.suppress(OSError):
                    Runtime.create(Config(), paths).audit.write(
                        "config.invalid", source=error.source, problems=error.problems
                    )
            return EXIT_USAGE
    rt = Runtime.create(config, paths)
    try:
        return (getattr(args, "handler", None) or HANDLERS[args.command])(args, rt, out)
    except UsageError as error:
        err.write(f"memoryd: {error}\n")
        return EXIT_USAGE
    except MemorydError as error:
        err.write(f"memoryd: {error}\n")
        return EXIT_FINDINGS
    except BrokenPipeError:
        return EXIT_OK
    except OSError as error:
        # What no step turned into a message of its own (a state file on a full disk, say):
        # still the file and what to do, not a traceback.
        where = f"{error.filename}: " if error.filename else ""
        err.write(
            f"memoryd: {where}{error.strerror or error}. Free disk space or fix the "
            "permissions there, then rerun.\n"
        )
        return EXIT_FINDINGS


def entry() -> None:
    sys.exit(main())
