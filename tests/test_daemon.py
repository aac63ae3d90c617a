"""`memoryd run` as a real process against a temp HOME: events, discovery, signals, liveness."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryd.audit import iter_lines
from memoryd.discover import slugify
from tests.conftest import write_memory

CONFIG = """\
[index]
new_file_grace = "{grace}"
[watch]
debounce = "200ms"
max_wait = "2s"
reconcile_every = "1h"
[dream]
pile_up = 5
quiet = "1s"
min_interval = "0s"
"""


@dataclass
class Running:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    home: Path
    config: Path

    @property
    def claude(self) -> Path:
        return self.home / ".claude"

    @property
    def state(self) -> Path:
        return self.home / ".local" / "state" / "memoryd"

    def rows(self, event: str | None = None) -> list[dict[str, object]]:
        rows = list(iter_lines(self.state / "log" / "audit.jsonl"))
        return [r for r in rows if event is None or r["event"] == event]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memoryd", "--config", str(self.config),
                               *args], env=self.env, capture_output=True, text=True, timeout=60,
                              check=False)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def start(tmp_path: Path, *, grace: str = "0s", extra_env: dict[str, str] | None = None,
          name: str = "d") -> Running:
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    config = tmp_path / f"config-{name}.toml"
    config.write_text(CONFIG.format(grace=grace))
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""),
           "XDG_STATE_HOME": str(home / ".local" / "state"),
           "XDG_CONFIG_HOME": str(home / ".config"), **(extra_env or {})}
    log = tmp_path / f"daemon-{name}.log"
    with log.open("a") as stderr:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "--config", str(config), "run"],
            env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    running = Running(proc, env, home, config)
    wait_for(lambda: (running.state / "status.json").exists() or proc.poll() is not None,
             what="the first heartbeat")
    assert proc.poll() is None, log.read_text()
    return running


@pytest.fixture
def project(tmp_path: Path) -> Callable[[Running, str], Path]:
    """Make a Claude project memory dir (with a transcript naming its repo) inside a HOME."""

    def make(running: Running, name: str) -> Path:
        repo = tmp_path / "code" / name
        repo.mkdir(parents=True, exist_ok=True)
        folder = running.claude / "projects" / slugify(str(repo))
        (folder / "memory").mkdir(parents=True, exist_ok=True)
        (folder / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
        return folder / "memory"

    return make


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Running]:
    running = start(tmp_path)
    yield running
    running.stop()


def agent_write(folder: Path, filename: str, description: str = "new") -> None:
    """Write like Claude Code: a temp file, then an atomic rename onto the name."""
    tmp = folder / f"{filename}.tmp.{os.getpid()}.a1b2"
    tmp.write_text(f"---\nname: {filename[:-3]}\ndescription: {description}\ntype: project\n"
                   "---\n\nbody\n")
    tmp.rename(folder / filename)


def index_text(folder: Path) -> str:
    path = folder / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def test_writes_and_deletes_keep_the_index_in_step(daemon: Running, project) -> None:  # type: ignore[no-untyped-def]
    """Atomic rename, in-place rewrite and delete each update MEMORY.md; prose is untouched."""
    folder = project(daemon, "app")
    write_memory(folder, "first.md", description="one")
    (folder / "MEMORY.md").write_text("# Mine\n\nprose line\n\n- [first](first.md) — one\n")
    wait_for(lambda: daemon.rows("dir.discovered"), what="discovery")
    agent_write(folder, "second.md", "two")
    wait_for(lambda: "second.md" in index_text(folder), what="pointer after atomic rename")
    with open(folder / "third.md", "w", encoding="utf-8") as handle:  # an editor's in-place save
        handle.write("---\nname: third\ndescription: three\ntype: project\n---\nx\n")
    wait_for(lambda: "third.md" in index_text(folder), what="pointer after in-place write")
    (folder / "second.md").unlink()
    wait_for(lambda: "second.md" not in index_text(folder), what="pointer removed")
    assert index_text(folder) == ("# Mine\n\nprose line\n\n- [first](first.md) — one\n"
                                  "- [third](third.md) — three\n")


def test_new_dir_deleted_and_recreated_and_symlinked(daemon: Running, project, tmp_path: Path  # type: ignore[no-untyped-def]
                                                     ) -> None:
    """A dir made after start is indexed; deleted and recreated it is re-armed; links followed."""
    folder = project(daemon, "late")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="new project dir indexed")
    import shutil

    shutil.rmtree(folder)
    wait_for(lambda: daemon.rows("dir.lost"), what="dir.lost")
    folder.mkdir()
    agent_write(folder, "b.md")
    wait_for(lambda: "b.md" in index_text(folder), what="recreated dir re-armed")
    real = tmp_path / "elsewhere" / "agent-mem"
    real.mkdir(parents=True)
    (daemon.claude / "agent-memory").mkdir(parents=True)
    (daemon.claude / "agent-memory" / "linked").symlink_to(real)
    wait_for(lambda: any(str(r.get("real_path")) == str(real) for r in
                         daemon.rows("dir.discovered")), what="symlinked dir discovered")
    agent_write(real, "c.md")
    wait_for(lambda: "c.md" in index_text(real), what="symlinked dir watched at its real path")


def test_burst_of_2000_files_gives_one_consistent_index(daemon: Running, project) -> None:  # type: ignore[no-untyped-def]
    """2,000 files as fast as possible: every file indexed once, few index writes, no loop."""
    folder = project(daemon, "burst")
    wait_for(lambda: daemon.rows("dir.discovered"), what="discovery")
    for i in range(2000):
        (folder / f"m{i:04d}.md").write_text(
            f"---\nname: m{i}\ndescription: burst {i}\ntype: project\n---\nx\n")

    def done() -> bool:
        from memoryd.index import pointer_targets

        text = index_text(folder)
        archive = folder / "MEMORY-ARCHIVE.md"
        targets = pointer_targets(text) + (pointer_targets(archive.read_text())
                                           if archive.exists() else [])
        return len(targets) == 2000
    wait_for(done, timeout=60, what="all 2,000 indexed")
    time.sleep(1.0)
    writes = daemon.rows("index.updated")
    assert len(writes) <= 10, f"{len(writes)} index writes for one burst"
    from memoryd.index import pointer_targets

    text = index_text(folder)
    targets = pointer_targets(text) + pointer_targets((folder / "MEMORY-ARCHIVE.md").read_text()
                                                      if (folder / "MEMORY-ARCHIVE.md").exists()
                                                      else "")
    assert sorted(targets) == [f"m{i:04d}.md" for i in range(2000)]
    settled = len(daemon.rows("index.updated"))
    time.sleep(1.0)
    assert len(daemon.rows("index.updated")) == settled, "the daemon kept rewriting (a loop)"


def test_pile_up_dreams_after_five_changes_and_survives_restart(tmp_path: Path, project) -> None:  # type: ignore[no-untyped-def]
    """4 changes and quiet: no pass; a restart keeps the count; the 5th change: one pass."""
    first = start(tmp_path, name="p")
    folder = project(first, "pile")
    write_memory(folder, "base.md")
    wait_for(lambda: "base.md" in index_text(folder), what="baseline")
    for i in range(4):
        agent_write(folder, f"c{i}.md", f"change {i}")
    wait_for(lambda: "c3.md" in index_text(folder), what="four changes indexed")
    time.sleep(1.5)  # longer than dream.quiet
    assert first.rows("dream.completed") == []
    assert first.stop() == 0
    second = start(tmp_path, name="p")
    try:
        agent_write(folder, "c4.md", "change 4")
        wait_for(lambda: second.rows("dream.completed"), timeout=20, what="a pile-up pass")
        time.sleep(1.5)
        assert len(second.rows("dream.completed")) == 1
        from memoryd.state import StateStore

        state = StateStore(second.state).load(folder.resolve())
        assert state.known and state.changed_since_dream == []
    finally:
        second.stop()


def test_sigterm_flushes_pending_work_and_exits_0(tmp_path: Path, project) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM right after a write: the pending change is indexed before a clean exit."""
    running = start(tmp_path, name="t")
    folder = project(running, "flush")
    write_memory(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="first index")
    agent_write(folder, "b.md")
    time.sleep(0.05)  # within the debounce: the work is pending
    started = time.monotonic()
    assert running.stop() == 0
    assert time.monotonic() - started < 10
    assert "b.md" in index_text(folder)
    assert running.rows("daemon.stopped")
    status = running.cli("status")
    assert status.returncode == 1 and "not running" in status.stdout


def test_second_instance_exits_2_and_status_is_right(daemon: Running) -> None:
    """A second `memoryd run` exits 2 naming the pid; `status` is 0 while the first runs."""
    second = daemon.cli("run")
    assert second.returncode == 2
    assert f"pid {daemon.proc.pid}" in second.stderr
    status = daemon.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"pid {daemon.proc.pid}" in status.stdout and "Waiting for" in status.stdout
    as_json = json.loads(daemon.cli("status", "--json").stdout)
    assert as_json["running"] and as_json["fresh"]


def test_sighup_with_a_bad_config_keeps_the_old_one(daemon: Running, project) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP reloads; an invalid file is reported and the daemon keeps working as before."""
    daemon.config.write_text("[watch]\ndebounce = 'soon'\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.rows("config.invalid"), what="config.invalid")
    folder = project(daemon, "after-hup")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="still working")
    daemon.config.write_text(CONFIG.format(grace="0s"))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.rows("config.reloaded"), what="config.reloaded")


def test_sd_notify_ready_watchdog_stopping(tmp_path: Path) -> None:
    """READY=1, WATCHDOG=1 and STOPPING=1 arrive on a NOTIFY_SOCKET the test binds."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    try:
        running = start(tmp_path, name="n", extra_env={"NOTIFY_SOCKET": str(path),
                                                       "WATCHDOG_USEC": "1000000"})
        got = set()
        deadline = time.monotonic() + 10
        while not {"READY=1", "WATCHDOG=1"} <= got and time.monotonic() < deadline:
            got.add(sock.recv(256).decode())
        assert {"READY=1", "WATCHDOG=1"} <= got
        assert running.stop() == 0
        while "STOPPING=1" not in got:
            got.add(sock.recv(256).decode())
    finally:
        sock.close()


def test_abstract_notify_socket(tmp_path: Path) -> None:
    """An abstract `@name` NOTIFY_SOCKET works too."""
    from memoryd.notify import notify

    name = f"memoryd-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(64) == b"READY=1"
    finally:
        sock.close()
    assert not notify("READY=1", {})


def test_waits_for_a_missing_claude_home_and_says_so(daemon: Running) -> None:
    """With no ~/.claude the daemon runs, says it is waiting once, and picks it up later."""
    assert len(daemon.rows("daemon.waiting")) == 1
    folder = daemon.claude / "agent-memory" / "helper"
    folder.mkdir(parents=True)
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="the new Claude home")
