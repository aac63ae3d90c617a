"""An audit log that cannot be written never fails what it reports: the action's result stands,
the failure is said once on stderr, the exit code is the action's. Own folders that cannot be
written stop `memoryd run` at start-up with a message naming them (exit 2)."""

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.discover.slugs import slugify
from memoryd.storage import audit
from memoryd.storage.audit import AuditLog
from tests.conftest import Env
from tests.helpers import (
    agent_write,
    index_text,
    make_stale_repo,
    mem,
    start,
    wait_for,
)

pytestmark = pytest.mark.repo_tree.with_args(make_stale_repo)

WARNING = "the audit log cannot be written"


def _moved(folder: Path) -> list[str]:
    return sorted(p.name.removesuffix(".trashed") for p in folder.glob(".trash/*/*.md.trashed"))


def test_the_writer_says_once_when_rows_stop_and_once_when_they_come_back(
    tmp_path: Path,
) -> None:
    """Three failing rows: one report; a row that gets through: one note; the rows written
    are the ones that could be."""
    told: list[tuple[Path, int | None]] = []
    path = tmp_path / "log" / "audit.jsonl"
    log = AuditLog(path, on_failure=lambda p, e: told.append((p, e.errno if e else None)))
    path.parent.mkdir()
    path.parent.chmod(0o700)
    broken = True
    real_append = log._append

    def append(data: bytes) -> None:
        if broken:
            raise OSError(errno.EIO, "Input/output error")
        real_append(data)

    log._append = append  # type: ignore[method-assign]
    for _ in range(3):
        assert log.write("dream.skipped", why="x") is None
    assert told == [(path, errno.EIO)]
    broken = False
    assert log.write("dream.skipped", why="y") is not None
    assert log.write("dream.skipped", why="z") is not None
    assert told == [(path, errno.EIO), (path, None)]
    assert [r["why"] for r in audit.iter_lines(path)] == ["y", "z"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EROFS, errno.EFBIG, errno.EACCES])
def test_a_failing_audit_write_leaves_the_pass_done_and_is_said_once(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Every row of a dream pass fails to reach the log: the move is made and recorded in the
    trash, the command exits 0, and stderr says it once, naming the log file."""

    def failing(self: AuditLog, data: bytes) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(AuditLog, "_append", failing)
    folder = repo / ".claude" / "memory"
    result = cli("dream", folder)
    assert result.code == 0, result.err
    assert _moved(folder) == ["stale.md"] and not (folder / "stale.md").exists()
    assert "stale.md" not in (folder / "MEMORY.md").read_text()
    assert result.err.count(WARNING) == 1, result.err
    assert str(env.audit_path) in result.err and os.strerror(code) in result.err


def test_a_failed_pass_whose_failure_row_fails_too_exits_1_with_its_own_error(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass fails (its trash is a file) and so does every audit row, `dream.failed`
    included: the report says why the pass failed, exit 1, no traceback."""

    def full(self: AuditLog, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AuditLog, "_append", full)
    folder = repo / ".claude" / "memory"
    (folder / ".trash").write_text("not a folder\n")
    result = cli("dream", folder)
    assert result.code == 1
    assert "FAILED" in result.out or "failed" in result.out, result.out
    assert ".trash" in result.out and (folder / "stale.md").exists()
    assert result.err.count(WARNING) == 1


def _memoryd(home: Path, *args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "cfg"),
    }

    def limit() -> None:  # in the child: every write past `fsize` bytes fails with EFBIG
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        env=env,
        timeout=60,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=limit,
    )


def _break_log(home: Path, how: str) -> Path:
    """The log file made unwritable in a way that holds for root (chmod does not)."""
    log_dir = home / "state" / "memoryd" / "log"
    if how == "log folder is a file":
        log_dir.parent.mkdir(parents=True)
        log_dir.write_text("not a folder\n")
    elif how == "log file is a folder":
        (log_dir / "audit.jsonl").mkdir(parents=True)
    else:  # the disk is full, for the log only
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        log_dir.mkdir(parents=True)
        (log_dir / "audit.jsonl").symlink_to("/dev/full")
    return log_dir / "audit.jsonl"


@pytest.mark.parametrize("how", ["log folder is a file", "log file is a folder", "disk full"])
def test_memoryd_commands_with_an_unwritable_log_do_their_work(
    tmp_path: Path, repo: Path, how: str
) -> None:
    """Real processes: `dream` moves, `trash restore` restores and `index` indexes with exit
    0, each saying once on stderr that the log cannot be written; no traceback."""
    home = tmp_path / "home"
    log = _break_log(home, how)
    folder = repo / ".claude" / "memory"
    dream = _memoryd(home, "dream", "--json", str(folder))
    assert dream.returncode == 0, dream.stderr
    assert "Traceback" not in dream.stderr and dream.stderr.count(WARNING) == 1, dream.stderr
    assert str(log) in dream.stderr
    [change] = json.loads(dream.stdout)["dirs"][0]["changes"]
    assert _moved(folder) == ["stale.md"]
    restore = _memoryd(home, "trash", "restore", change["id"], str(folder))
    assert restore.returncode == 0, restore.stderr
    assert "Traceback" not in restore.stderr and restore.stderr.count(WARNING) == 1
    assert (folder / "stale.md").exists() and "stale.md" in (folder / "MEMORY.md").read_text()
    mem(repo, "new.md", "A new memory.")
    index = _memoryd(home, "index", str(folder))
    assert index.returncode == 0 and "Traceback" not in index.stderr, index.stderr
    assert "new.md" in (folder / "MEMORY.md").read_text()


def test_a_disk_too_full_for_any_write_fails_the_command_with_a_message(
    tmp_path: Path, repo: Path
) -> None:
    """RLIMIT_FSIZE=0: no state file, trash record or audit row can be written. `dream`
    exits 1 naming a file and what to do; no traceback, no memory moved or changed."""
    folder = repo / ".claude" / "memory"
    before = {p.name: p.read_bytes() for p in folder.glob("*.md")}
    proc = _memoryd(tmp_path / "home", "dream", str(folder), fsize=0)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "memoryd: " in proc.stderr and "Free disk space" in proc.stderr
    assert {p.name: p.read_bytes() for p in folder.glob("*.md")} == before
    assert _moved(folder) == []


@pytest.mark.parametrize("broken", ["state", "log"])
def test_run_with_an_unwritable_own_folder_names_it_and_exits_2(
    tmp_path: Path, broken: str
) -> None:
    """`memoryd run` whose state folder (or log folder) cannot be made: exit 2, the folder
    named with what to do, no traceback."""
    home = tmp_path / "home"
    home.mkdir()
    if broken == "state":
        (home / "state").write_text("a file where the state folder goes\n")
        folder = home / "state" / "memoryd"
    else:
        (home / "state" / "memoryd").mkdir(parents=True)
        (home / "state" / "memoryd" / "log").write_text("a file\n")
        folder = home / "state" / "memoryd" / "log"
    proc = _memoryd(home, "run")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"{folder}: memoryd cannot write its {broken} folder" in proc.stderr
    assert "XDG_STATE_HOME" in proc.stderr


def test_the_daemon_keeps_working_when_its_log_fills_the_disk(tmp_path: Path) -> None:
    """The daemon's audit log on a full disk: it indexes as ever, says so once on stderr,
    and stops with exit 0 (its last row, `daemon.stopped`, fails too)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    log_dir = tmp_path / "home-full" / ".local" / "state" / "memoryd" / "log"
    log_dir.mkdir(parents=True)
    (log_dir / "audit.jsonl").symlink_to("/dev/full")
    running = start(tmp_path, name="full")
    code = tmp_path / "code"
    code.mkdir()
    folder = running.claude / "projects" / slugify(str(code)) / "memory"
    folder.mkdir(parents=True)
    (folder.parent / "s.jsonl").write_text(json.dumps({"cwd": str(code)}) + "\n")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="the index")
    assert running.stop() == 0
    stderr = (tmp_path / "daemon-full.log").read_text()
    assert stderr.count(WARNING) == 1 and "Traceback" not in stderr, stderr
