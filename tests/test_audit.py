"""The audit log: declared events only, private files, rotation `tail -F` survives, torn lines."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from memoryd.storage.audit import EVENTS, AuditLog, iter_lines, parse_since, read_rows


def test_rows_carry_the_common_fields_and_escape_non_ascii(tmp_path: Path) -> None:
    """Every row has ts, v, event, level, pid and dir; non-ASCII is escaped."""
    log = AuditLog(tmp_path / "logs" / "audit.jsonl")
    log.write(
        "index.updated",
        dir=Path("/m"),
        added=["메모.md"],
        removed=[],
        rewritten=[],
        collapsed=[],
        demoted=[],
        bytes_before=1,
        bytes_after=2,
    )
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
    tail = subprocess.Popen(
        ["tail", "-F", "-n", "+1", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        for i in range(60):
            log.write("dream.skipped", why=f"row {i:03d} " + "x" * 40)
        assert path.with_name("audit.jsonl.1").exists()  # the last rows are in the new file
        deadline = time.monotonic() + 10
        raw = b""
        os.set_blocking(tail.stdout.fileno(), False)  # type: ignore[union-attr]
        # tail -F looks for a renamed file about once a second: wait until it has found it.
        while b"row 059" not in raw and time.monotonic() < deadline:
            raw += tail.stdout.read() or b""  # type: ignore[union-attr]
            time.sleep(0.1)
        log.write("dream.skipped", why="after rotation")
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


def _row_of(size: int, event: str) -> bytes:
    """A valid audit row of exactly `size` bytes, newline included."""
    head = json.dumps({"ts": "2026-12-01T00:00:00.000Z", "v": 1, "event": event, "pad": ""})
    line = head[:-2] + "x" * (size - len(head) - 1) + '"}\n'
    assert len(line) == size
    return line.encode()


def test_a_line_over_the_limit_is_skipped_as_torn(tmp_path: Path) -> None:
    """A row of MAX_LINE_BYTES (newline included) is read; one byte more and it is skipped
    like a torn line, never held whole; the rows around it are read. The old reader read any
    line whole and returned the over-long row."""
    from memoryd.storage.audit import MAX_LINE_BYTES

    path = tmp_path / "audit.jsonl"
    path.write_bytes(
        _row_of(200, "a.first")
        + _row_of(MAX_LINE_BYTES, "b.at_limit")
        + _row_of(MAX_LINE_BYTES + 1, "c.over")
        + _row_of(200, "d.last")
    )
    assert [r["event"] for r in iter_lines(path)] == ["a.first", "b.at_limit", "d.last"]


def _memoryd_log(home: Path) -> subprocess.CompletedProcess[str]:
    """`memoryd log --json` in a child with its address space capped at 768 MiB."""
    import resource
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))

    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryd", "log", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=cap,
    )


def test_a_gigabyte_line_is_read_through_in_bounded_memory(tmp_path: Path) -> None:
    """A 1 GiB line (a sparse run of NULs, as a crash can leave) between two rows: `memoryd
    log` shows both rows in a child capped at 768 MiB; the old reader held the line whole and
    died of MemoryError."""
    path = tmp_path / "state" / "memoryd" / "log" / "audit.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("wb") as log:
        log.write(_row_of(200, "a.first"))
        log.truncate(200 + (1 << 30))
        log.seek(0, os.SEEK_END)
        log.write(b"\n" + _row_of(200, "b.last"))
    done = _memoryd_log(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [json.loads(line)["event"] for line in done.stdout.splitlines()] == ["a.first", "b.last"]


def test_a_fifo_at_the_audit_path_hangs_neither_the_reader_nor_the_writer(tmp_path: Path) -> None:
    """A FIFO planted as audit.jsonl: `memoryd log` names it and exits 1 at once (the old code
    waited for a writer for ever); a row written meanwhile is refused and said once, never
    put into the pipe."""
    path = tmp_path / "state" / "memoryd" / "log" / "audit.jsonl"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    done = _memoryd_log(tmp_path)
    assert done.returncode == 1 and f"{path}: it is a FIFO" in done.stderr
    told: list[object] = []
    log = AuditLog(path, on_failure=lambda p, e: told.append(e))
    assert log.write("dream.skipped", why="x") is None
    assert log.write("dream.skipped", why="y") is None
    assert len(told) == 1 and "FIFO" in str(told[0])
