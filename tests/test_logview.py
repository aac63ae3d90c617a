"""`memoryd log` for a person: follow without losing a row, tail first, compact lines, a summary."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.model.humanize import Painter
from memoryd.storage.audit import AuditLog, read_rows
from memoryd.views.logfollow import Follower
from memoryd.views.logview import View, dir_label, render_row, render_summary, summary_json
from tests.conftest import Env
from tests.helpers import wait_for

HOME = "/home/ann"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TS = "2027-01-15T07:58:20.123Z"
PROJECT = f"{HOME}/.claude/projects/-home-ann-src-shop/memory"
SHA = "9f" * 32


# --- following ---------------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from memoryd.storage.audit import AuditLog, read_rows
log = AuditLog(Path(sys.argv[1]), max_bytes=int(sys.argv[2]), backups=int(sys.argv[3]))
name, count = sys.argv[4], int(sys.argv[5])
for i in range(count):
    log.write("dream.skipped", why=f"{name} {i} " + "x" * 40)
    time.sleep(0.001)
"""


class Reader:
    """A `memoryd log -f --json` process and the rows it printed so far."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "log", "-f", "--json", *args],
            env=os.environ.copy(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.rows: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.rows.append(json.loads(line))

    def whys(self) -> list[str]:
        return [str(r.get("why", "")).split(" x")[0] for r in self.rows]

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._thread.join(timeout=10)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return err


def test_follow_sees_every_row_once_in_order_across_many_rotations(env: Env) -> None:
    """Two writer processes append 300 rows each through AuditLog rotating every ~30 rows (some
    20 rotations) while `memoryd log -f --json` runs: it prints every row exactly once, each
    writer's in order. The old reader lost the last row written before each rename."""
    backups = 40  # more than a loaded machine could rotate between two looks; a row rotated
    # off the end before any reader saw it would be lost to `tail -F` too
    env.config_dir.mkdir(parents=True)
    (env.config_dir / "config.toml").write_text(f"[log]\nbackups = {backups}\n")
    log = AuditLog(env.audit_path, max_bytes=4096, backups=backups)
    log.write("dream.skipped", why="ready")
    reader = Reader()
    try:
        wait_for(lambda: "ready" in reader.whys(), timeout=30, what="the reader's first row")
        writers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WRITER,
                    str(env.audit_path),
                    "4096",
                    str(backups),
                    name,
                    "300",
                ],
                env=os.environ.copy(),
            )
            for name in ("a", "b")
        ]
        for writer in writers:
            assert writer.wait(timeout=120) == 0
        log.write("dream.skipped", why="done")
        wait_for(lambda: "done" in reader.whys(), timeout=30, what="the last row")
    finally:
        err = reader.stop()
    rotated = sorted(env.logs.glob("audit.jsonl.*"))
    assert len(rotated) >= 10, rotated  # the writers did rotate, many times
    seen = reader.whys()
    assert seen[0] == "ready" and seen[-1] == "done", (seen[:3], seen[-3:], err)
    for name in ("a", "b"):
        mine = [w for w in seen if w.startswith(name + " ")]
        assert mine == [f"{name} {i}" for i in range(300)], (name, len(mine), err)
    assert len(seen) == 602


def test_follow_starts_with_the_last_ten_rows_like_tail(env: Env) -> None:
    """`log -f` prints the last 10 rows (across the rotated file too), `-n 3` the last 3,
    `-n all` all of them; then it follows. The old one printed the whole history."""
    log = AuditLog(env.audit_path, max_bytes=2048, backups=5)
    for i in range(40):
        log.write("dream.skipped", why=f"row {i}")
    assert env.audit_path.with_name("audit.jsonl.1").exists()
    for args, last in (((), 10), (("-n", "3"), 3), (("-n", "all"), None)):
        so_far = [str(r["why"]) for r in read_rows(env.audit_path, 5)]
        history = so_far[-last:] if last else so_far
        reader = Reader(*args)
        try:
            shown = reader.rows
            wait_for(lambda: len(shown) >= len(history), timeout=30, what=f"history with {args}")  # noqa: B023
            log.write("dream.skipped", why=f"new {args}")
            wait_for(lambda: len(shown) > len(history), timeout=30, what="a followed row")  # noqa: B023
        finally:
            reader.stop()
        assert reader.whys() == [*history, f"new {args}"], args
    assert len(history) == 42  # `-n all`: the rotated file's rows too


class _Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def test_follower_handles_truncation_and_a_torn_last_line(tmp_path: Path) -> None:
    """A torn last line is held until its newline comes; a file truncated in place is read
    again from its start."""
    path = tmp_path / "audit.jsonl"
    path.write_text('{"event":"a"}\n{"event":"b"')
    warnings = _Warnings()
    follower = Follower(path, warn=warnings)
    assert [r["event"] for r in follower.history(None)] == ["a"]
    assert follower.poll() == []
    with path.open("a") as handle:
        handle.write(',"x":1}\n{"event":"c"}\n')
    assert [r["event"] for r in follower.poll()] == ["b", "c"]
    with path.open("w") as handle:  # truncated in place (copytruncate), then a row
        handle.write('{"event":"d"}\n')
    assert [r["event"] for r in follower.poll()] == ["d"]
    follower.close()
    assert warnings == []


def test_follower_skips_a_giant_line_without_holding_it(tmp_path: Path) -> None:
    """A line over the bound is dropped as it streams (never held whole), with a warning; the
    rows around it are read."""
    path = tmp_path / "audit.jsonl"
    path.write_text('{"event":"a"}\n')
    warnings = _Warnings()
    follower = Follower(path, warn=warnings, max_line=1024)
    assert len(follower.history(None)) == 1
    with path.open("a") as handle:
        handle.write('{"event":"big","x":"' + "y" * 5000)
    assert follower.poll() == []
    assert follower.current is not None and len(follower.current.held) <= 1024
    with path.open("a") as handle:
        handle.write('"}\n{"event":"b"}\n')
    assert [r["event"] for r in follower.poll()] == ["b"]
    assert len(warnings) == 1 and "over 1024 bytes" in warnings[0]
    follower.close()


def test_follower_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    """A FIFO in the log's place is said once and looked at again, never opened for a read
    that would wait for a writer; a regular file put back is followed."""
    path = tmp_path / "audit.jsonl"
    os.mkfifo(path)
    warnings = _Warnings()
    follower = Follower(path, warn=warnings)
    assert follower.history(10) == []
    assert follower.poll() == [] and follower.poll() == []
    assert len(warnings) == 1 and "FIFO" in warnings[0]
    path.unlink()
    path.write_text('{"event":"a"}\n')
    assert [r["event"] for r in follower.poll()] == ["a"]
    follower.close()


def test_log_says_when_there_is_no_log_or_no_such_dir(env: Env, cli, tmp_path: Path) -> None:
    """No log yet: said on stderr with where it would be (exit 0). `--dir` naming a folder
    that does not exist and no row: said, exit 1. The old code printed nothing."""
    result = cli("log")
    assert result.code == 0 and result.out == ""
    assert "no audit log yet" in result.err and str(env.audit_path) in result.err
    AuditLog(env.audit_path).write("dream.skipped", dir=tmp_path, why="x")
    missing = cli("log", "--dir", tmp_path / "nope")
    assert missing.code == 1 and missing.out == ""
    assert str(tmp_path / "nope") in missing.err and "no such folder" in missing.err
    quiet = cli("log", "--dir", env.home)  # a folder, with no rows about it
    assert quiet.code == 0 and "no rows about" in quiet.err


# --- one row, one line -----------------------------------------------------------------------

ROWS: list[tuple[dict[str, Any], str]] = [
    (
        {
            "event": "trash.moved",
            "dir": PROJECT,
            "file": "deploy_steps.md",
            "id": "fa1ef06571",
            "reason": "duplicate",
            "sha256": SHA,
            "duplicate_of": "deploy_howto.md",
            "superseded_by": None,
            "stored": ".trash/2027-01-15/deploy_steps.md",
        },
        "07:58:20 trash.moved       src-shop  deploy_steps.md  duplicate of deploy_howto.md  id "
        "fa1ef06571",
    ),
    (
        {
            "event": "index.updated",
            "dir": PROJECT,
            "added": ["a.md"],
            "removed": [],
            "rewritten": [],
            "collapsed": [],
            "demoted": ["x.md", "y.md", "z.md"],
            "bytes_before": 900,
            "bytes_after": 700,
        },
        "07:58:20 index.updated     src-shop  +a.md  demoted 3  (900 → 700 bytes)",
    ),
    (
        {
            "event": "file.unparseable",
            "level": "warning",
            "dir": f"{HOME}/repo/.claude/memory",
            "file": "broken.md",
            "problem": "malformed YAML frontmatter (line 2)",
        },
        "07:58:20 WARN file.unparseable  repo  broken.md: malformed YAML frontmatter (line 2)",
    ),
    (
        {
            "event": "dream.completed",
            "dir": f"{HOME}/.claude/agent-memory/reviewer",
            "pass_id": "p-123",
            "status": "completed",
            "saved": 0,
            "deleted": 2,
            "flagged": 1,
            "kept": 0,
            "duration_ms": 41,
        },
        "07:58:20 dream.completed   agent/reviewer  2 moved, 1 flagged  41 ms",
    ),
    (
        {"event": "daemon.started", "version": "0.1.0", "dirs": 12, "config": "built-in"},
        "07:58:20 daemon.started    memoryd 0.1.0, 12 dirs",
    ),
    (
        {"event": "something.new", "dir": "/srv/notes", "count": 3, "empty": "", "digest": SHA},
        "07:58:20 something.new     /srv/notes  count=3",
    ),
]


@pytest.mark.parametrize(("row", "line"), ROWS, ids=[r["event"] for r, _ in ROWS])
@pytest.mark.parametrize("width", [80, 120])
def test_a_row_renders_as_one_compact_line(row: dict[str, Any], line: str, width: int) -> None:
    """Local time (here UTC), the level only when not info, the event, the dir as its project
    or repo, the fields that matter; no sha256, no empty field; cut to the width."""
    full = {"ts": TS, "v": 1, "level": "info", "pid": 42, **row}
    got = render_row(full, View(now=NOW, home=HOME, utc=True, width=width))
    expected = line.replace("07:58:20 ", "07:58:20Z ", 1)
    if len(expected) > width:
        expected = expected[: width - 1] + "…"
    assert got == expected
    assert len(got) <= width and SHA not in got and "\n" not in got


def test_verbose_shows_every_field_and_colour_never_counts_as_columns() -> None:
    """`--verbose`: the full dir, every field (hash, empty ones, pid). With colour on, the
    text is the same once the escapes are taken out, and fits the same width."""
    row = {"ts": TS, "v": 1, "level": "warning", "pid": 42, **ROWS[0][0]}
    verbose = render_row(row, View(now=NOW, home=HOME, utc=True, width=400, verbose=True))
    assert SHA in verbose and "superseded_by=None" not in verbose
    assert "superseded_by=" in verbose and "pid=42" in verbose
    assert "~/.claude/projects/-home-ann-src-shop/memory" in verbose
    plain = render_row(row, View(now=NOW, home=HOME, utc=True, width=80))
    coloured = render_row(row, View(now=NOW, home=HOME, utc=True, width=80, paint=Painter(True)))
    import re

    assert "\x1b[33mWARN\x1b[0m" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_local_time_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --utc the time is local (here UTC+5:30) and has no Z."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        line = render_row(
            {"ts": TS, "event": "daemon.stopped", "level": "info", "reason": "signal"},
            View(now=NOW, home=HOME),
        )
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert line.startswith("13:28:20 daemon.stopped")


@pytest.mark.parametrize(
    ("path", "label"),
    [
        (PROJECT, "src-shop"),
        ("/srv/x/.claude/projects/-work-api/memory", "-work-api"),
        (f"{HOME}/code/web/.claude/agent-memory/reviewer", "web/reviewer"),
        (f"{HOME}/.claude/agent-memory/planner", "agent/planner"),
        (f"{HOME}/code/web/.claude/memory", "web"),
        (f"{HOME}/notes", "~/notes"),
        ("/srv/code/vrcpilot/memory/agents/critic", "…/agents/critic"),
        ("/srv/code/web/.claude/agent-memory", "web/agent-memory"),
        ("/srv/notes", "/srv/notes"),
    ],
)
def test_dir_labels(path: str, label: str) -> None:
    assert dir_label(path, HOME) == label


def test_cli_log_is_compact_and_json_unchanged(env: Env, cli, tmp_path: Path) -> None:
    """`memoryd log` prints one short line a row, no sha256; `--json` the rows as written."""
    folder = tmp_path / "m"
    log = AuditLog(env.audit_path)
    log.write("trash.moved", dir=folder, file="a.md", id="abc", reason="stale", sha256=SHA)
    text = cli("log", "--utc").out
    assert text.count("\n") == 1 and SHA not in text and "a.md  stale  id abc" in text
    assert [json.loads(x) for x in cli("log", "--json").out.splitlines()] == env.audit_rows()
    assert SHA in cli("log", "--verbose").out


# --- the summary -------------------------------------------------------------------------------


def _summary_rows() -> list[dict[str, Any]]:
    other = f"{HOME}/code/web/.claude/memory"
    rows: list[dict[str, Any]] = [
        {"event": "daemon.started", "version": "0.1.0", "dirs": 2},
        {"event": "trash.moved", "dir": PROJECT, "file": "a.md", "reason": "duplicate"},
        {"event": "trash.moved", "dir": PROJECT, "file": "b.md", "reason": "duplicate"},
        {"event": "trash.moved", "dir": PROJECT, "file": "c.md", "reason": "contradiction"},
        {
            "event": "index.updated",
            "dir": PROJECT,
            "added": ["n1.md", "n2.md"],
            "removed": ["a.md", "b.md", "c.md"],
            "rewritten": [],
            "collapsed": [],
            "demoted": [],
        },
        {
            "event": "index.updated",
            "dir": PROJECT,
            "added": ["n3.md", "n4.md", "n5.md"],
            "removed": [],
            "rewritten": [],
            "collapsed": [],
            "demoted": [],
        },
        {"event": "index.demoted", "dir": PROJECT, "files": ["x"] * 12, "count": 12},
        {"event": "file.unparseable", "dir": PROJECT, "file": "bad1.md", "problem": "p"},
        {"event": "file.unparseable", "dir": PROJECT, "file": "bad2.md", "problem": "p"},
        {"event": "dream.started", "dir": PROJECT, "pass_id": "p1"},
        {"event": "dream.completed", "dir": PROJECT, "pass_id": "p1"},
        {"event": "index.unmanaged", "dir": other, "reason": "hand-written"},
        {"event": "watch.overflow", "detail": "queue"},
        {"event": "brand.new", "dir": other},
        {"event": "dream.started", "dir": "/srv/quiet/.claude/memory", "pass_id": "p2"},
    ]
    return [{"ts": TS, "v": 1, "level": "info", "pid": 1, **r} for r in rows]


def test_summary_says_what_memoryd_did_per_dir() -> None:
    """Sentences with counts per dir, what needs a person after `;`; unknown events counted."""
    text = render_summary(
        _summary_rows(), View(now=NOW, home=HOME, utc=True, width=120), since=NOW - 86400
    )
    assert text.splitlines() == [
        "memoryd since Jan 14 08:00Z (24 h ago): 15 rows, 3 dirs.",
        "src-shop (~/.claude/projects/-home-ann-src-shop/memory)",
        "  3 memories moved to the trash (2 duplicates, 1 contradiction), 5 pointers added, 3 "
        "pointers removed, 1 index demoted",
        "  12 entries, 1 dream pass; 2 files unparseable.",
        "web (~/code/web/.claude/memory)",
        "  1 brand.new.",
        "Nothing to report in 1 other dir.",
        "memoryd itself: 1 start, 1 lost batch of file events.",
    ]
    counts = summary_json(_summary_rows())["dirs"]
    assert counts[PROJECT]["moved"] == {"duplicate": 2, "contradiction": 1}
    assert counts[PROJECT]["pointers_added"] == 5 and counts[PROJECT]["unparseable"] == 2


def test_summary_at_80_columns_wraps_and_says_nothing_logged() -> None:
    narrow = render_summary(
        _summary_rows(), View(now=NOW, home=HOME, utc=True, width=80), since=None
    )
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert narrow.startswith("memoryd in the whole log: 15 rows")
    assert render_summary([], View(now=NOW, home=HOME), since=NOW - 3600).startswith(
        "Nothing logged since"
    )


def test_cli_summary_defaults_to_the_last_day(env: Env, cli) -> None:
    """`log --summary` counts the last day's rows; `--since` widens it; `--json` gives counts."""
    rows = _summary_rows()
    old = {**rows[1], "ts": "2020-01-01T00:00:00Z"}
    fresh = {**rows[2], "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    env.audit_path.parent.mkdir(parents=True)
    env.audit_path.write_text(json.dumps(old) + "\n" + json.dumps(fresh) + "\n")
    assert "1 memory moved to the trash (1 duplicate)" in cli("log", "--summary").out
    assert "2 memories moved" in cli("log", "--summary", "--since", "4000d").out
    doc = json.loads(cli("log", "--summary", "--json").out)
    assert doc["dirs"][PROJECT]["moved"] == {"duplicate": 1}


def test_summary_says_what_others_did_and_what_a_person_asked() -> None:
    """The version store's rows (deletions, rewrites, a mass change), secrets found, forgets and
    acknowledgements read as sentences, not as event names."""
    ts = "2027-01-15T07:00:00Z"
    rows: list[dict[str, Any]] = [
        {"ts": ts, "event": "memory.deleted_outside", "dir": PROJECT, "file": "a.md"},
        {"ts": ts, "event": "memory.deleted_outside", "dir": PROJECT, "file": "b.md"},
        {"ts": ts, "event": "memory.rewritten_outside", "dir": PROJECT, "file": "c.md"},
        {"ts": ts, "event": "memory.mass_change", "dir": PROJECT, "deleted": 2},
        {"ts": ts, "event": "memory.secret_found", "dir": PROJECT, "file": "d.md", "line": 3},
        {"ts": ts, "event": "memory.forgotten", "dir": PROJECT, "file": "e.md"},
        {"ts": ts, "event": "flag.acknowledged", "dir": PROJECT, "file": "f.md"},
    ]
    text = render_summary(rows, View(now=NOW, home=HOME, utc=True, width=200), since=None)
    said = text.splitlines()[2]
    assert said == (
        "  1 memory forgotten on request, 1 flag acknowledged; 1 mass change by other "
        "processes, 2 memories deleted outside memoryd, 1 file rewritten outside memoryd, "
        "1 secret found."
    )
