"""The audit log: declared events only, private files, rotation `tail -F` survives, torn lines."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from memoryd.audit import EVENTS, AuditLog, iter_lines, parse_since, read_rows


def test_rows_carry_the_common_fields_and_escape_non_ascii(tmp_path: Path) -> None:
    """Every row has ts, v, event, level, pid and dir; non-ASCII is escaped."""
    log = AuditLog(tmp_path / "logs" / "audit.jsonl")
    log.write("index.updated", dir=Path("/m"), added=["메모.md"], removed=[], rewritten=[],
              collapsed=[], demoted=[], bytes_before=1, bytes_after=2)
    raw = (tmp_path / "logs" / "audit.jsonl").read_bytes()
    assert raw.isascii()
    row = json.loads(raw)
    assert {"ts", "v", "event", "level", "pid", "dir"} <= set(row)
    assert row["added"] == ["메모.md"] and row["ts"].endswith("Z")
    assert (tmp_path / "logs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "logs" / "audit.jsonl").stat().st_mode & 0o777 == 0o600


def test_undeclared_events_are_refused(tmp_path: Path) -> None:
    """An event missing from the schema table is a programming error, caught at once."""
    with pytest.raises(KeyError, match="undeclared"):
        AuditLog(tmp_path / "a.jsonl").write("index.exploded")
    assert all(name.count(".") == 1 for name in EVENTS)


def test_debug_rows_are_dropped_below_the_configured_level(tmp_path: Path) -> None:
    """At level info, debug rows are not written."""
    log = AuditLog(tmp_path / "a.jsonl", level="info")
    assert log.write("dream.skipped", why="x", level="debug") is None
    assert not (tmp_path / "a.jsonl").exists()


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    """A reader skips a torn last line and a line that is not JSON."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"event":"a.b","ts":"x"}\nnot json\n{"event":"c.d","ts":"y"}\n{"event":"e.')
    assert [r["event"] for r in iter_lines(path)] == ["a.b", "c.d"]


def test_a_row_after_a_torn_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """A writer killed mid-row leaves a torn line; the next row must not be glued to it."""
    log = AuditLog(tmp_path / "audit.jsonl")
    log.write("daemon.started", version="1")
    with (tmp_path / "audit.jsonl").open("ab") as handle:
        handle.write(b'{"event": "daemon.sto')
    log.write("daemon.stopped")
    log.write("daemon.started", version="2")
    assert [r["event"] for r in iter_lines(tmp_path / "audit.jsonl")] == [
        "daemon.started",
        "daemon.stopped",
        "daemon.started",
    ]
    assert (tmp_path / "audit.jsonl").read_bytes().count(b"\n") == 4  # one newline added


def test_rotation_keeps_rows_and_tail_follows(tmp_path: Path) -> None:
    """Size rotation renames the file; `tail -F` keeps printing across it; readers see all rows."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, max_bytes=4096, backups=3)
    log.write("dream.skipped", why="start")
    tail = subprocess.Popen(["tail", "-F", "-n", "+1", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        for i in range(60):
            log.write("dream.skipped", why=f"row {i:03d} " + "x" * 40)
        time.sleep(1.5)  # tail -F polls about once a second for a renamed file
        log.write("dream.skipped", why="after rotation")
        deadline = time.monotonic() + 10
        raw = b""
        os.set_blocking(tail.stdout.fileno(), False)  # type: ignore[union-attr]
        while b"after rotation" not in raw and time.monotonic() < deadline:
            raw += tail.stdout.read() or b""  # type: ignore[union-attr]
            time.sleep(0.1)
        seen = raw.decode()
    finally:
        tail.kill()
        tail.wait()
        tail.stdout.close()  # type: ignore[union-attr]
    assert "after rotation" in seen
    assert path.with_name("audit.jsonl.1").exists()
    whys = [r["why"] for r in read_rows(path, 3)]
    assert whys[-1] == "after rotation"
    assert len(whys) >= 30  # older rows beyond the kept backups are dropped by design


def test_since_accepts_relative_and_iso_times() -> None:
    """`--since 2h` and an ISO time both become UNIX times."""
    assert parse_since("2h", now=10_000) == 10_000 - 7200
    assert parse_since("2026-11-30T00:00:00Z") == 1795996800
    with pytest.raises(ValueError, match="--since"):
        parse_since("yesterday-ish")
