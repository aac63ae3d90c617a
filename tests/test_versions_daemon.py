"""The version store with a real `memoryd run`: an agent's burst of deletions and rewrites
raises the alarm, and every lost version comes back byte-identical."""

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.conftest import tree_digest
from tests.helpers import Running, agent_write, start, wait_for


def _memory(folder: Path, name: str, body: str) -> bytes:
    data = (
        f"---\nname: {name}\ndescription: about {name}\ntype: feedback\n---\n\n{body}\n"
    ).encode()
    (folder / f"{name}.md").write_bytes(data)
    return data


def _stored(running: Running) -> dict[str, bytes]:
    """The kept versions' bytes by sha256, as state.sqlite holds them (read beside the
    daemon: WAL lets a reader in while it writes)."""
    path = running.state / "state.sqlite"
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(path)) as conn:
        try:
            return dict(conn.execute("SELECT sha, data FROM versions_objects").fetchall())
        except sqlite3.OperationalError:  # no table yet
            return {}


@contextlib.contextmanager
def _paused(running: Running, folder: Path | None = None) -> Iterator[None]:
    """The daemon stopped (SIGSTOP) while the block runs, then let go on; with `folder`,
    once its pass is over (stopped holding the dir's writer lock, a command would wait)."""
    if folder is not None:
        wait_for(lambda: _unlocked(running, folder), what="the daemon's pass over")
    os.kill(running.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(running.proc.pid, signal.SIGCONT)


def test_an_agents_burst_is_an_alarm_and_every_version_comes_back(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """5 memories deleted (rm and mv out) and 2 rewritten by atomic rename: one
    memory.mass_change row, a deleted_outside / rewritten_outside row each; `trash restore`
    brings each deleted one back byte-identical, `history --restore` each rewritten one; the
    store holds each distinct version once, nothing of it in the memory dir, all 0600/0700."""
    running = start(tmp_path)
    try:
        folder = project(running, "app")
        original = {f"m{i}": _memory(folder, f"m{i}", f"lesson number {i}") for i in range(8)}
        wait_for(
            lambda: (
                all(f"m{i}.md" in (folder / "MEMORY.md").read_text() for i in range(8))
                if (folder / "MEMORY.md").exists()
                else False
            ),
            what="all 8 indexed",
        )
        wait_for(lambda: len(_stored(running)) >= 9, what="versions stored")
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        # The alarm is raised by the pass that first sees more than alarm_files changes in
        # the window, and counts those it has seen by then; so the last part of the burst
        # must reach the daemon as one pass. A move out of the dir is told ~0.5 s late
        # (watchdog waits for a move's other half), so the two moves come first (2 changes:
        # no alarm yet); the rest is made while the daemon is stopped (its events wait in
        # the kernel's queue), so that no pause on a busy machine splits it either.
        for i in (3, 4):
            shutil.move(folder / f"m{i}.md", outside / f"m{i}.md")  # mv out of the dir
        wait_for(lambda: len(running.rows("memory.deleted_outside")) == 2, what="the moves")
        with _paused(running):
            for i in range(3):
                (folder / f"m{i}.md").unlink()  # plain rm
            for i in (5, 6):
                agent_write(folder, f"m{i}.md", description="rewritten by the agent")
        wait_for(lambda: running.rows("memory.mass_change"), what="the alarm")
        wait_for(
            lambda: (
                len(running.rows("memory.deleted_outside")) == 5
                and len(running.rows("memory.rewritten_outside")) >= 2
            ),
            what="the rows",
        )
        alarm = running.rows("memory.mass_change")
        assert len(alarm) == 1 and alarm[0]["level"] == "warning"
        assert alarm[0]["deleted"] == 5 and alarm[0]["rewritten"] == 2
        status = running.cli("status")
        assert "ALARM" in status.stdout and "5 memory files deleted" in status.stdout
        rewritten = {r["file"] for r in running.rows("memory.rewritten_outside")}
        assert {"m5.md", "m6.md"} <= rewritten

        listing = running.cli("trash", "list")
        assert listing.returncode == 0, listing.stderr
        lines = [ln for ln in listing.stdout.splitlines() if "deleted outside memoryd" in ln]
        assert len(lines) == 5, listing.stdout
        for line in lines:
            done = running.cli("trash", "restore", line.split()[0])
            assert done.returncode == 0, done.stderr
        for i in range(5):
            assert (folder / f"m{i}.md").read_bytes() == original[f"m{i}"]
        for i in (5, 6):
            shown = running.cli("history", str(folder / f"m{i}.md"))
            assert shown.returncode == 0, shown.stderr
            assert "another process" in shown.stdout
            back = running.cli("history", str(folder / f"m{i}.md"), "--restore", "1")
            assert back.returncode == 0, back.stderr
            assert (folder / f"m{i}.md").read_bytes() == original[f"m{i}"]
        diff = running.cli("history", str(folder / "m5.md"), "--diff", "1..2")
        assert "-description: about m5" in diff.stdout
        assert "+description: rewritten by the agent" in diff.stdout
        wait_for(
            lambda: all(f"m{i}.md" in (folder / "MEMORY.md").read_text() for i in range(8)),
            what="the pointers back",
        )
        # memoryd's own restores raised no second alarm
        assert len(running.rows("memory.mass_change")) == 1
    finally:
        assert running.stop() == 0
    objects = _stored(running)
    for sha, data in objects.items():
        assert hashlib.sha256(data).hexdigest() == sha  # each once (its key), by content
    for data in original.values():
        assert hashlib.sha256(data).hexdigest() in objects
    assert stat.S_IMODE(os.stat(running.state).st_mode) == 0o700
    assert stat.S_IMODE((running.state / "state.sqlite").stat().st_mode) == 0o600
    assert not (running.state / "versions").exists()
    kept = tree_digest(folder)
    assert not [n for n in kept if "versions" in n or n.startswith(".memoryd")]
    with contextlib.closing(sqlite3.connect(running.state / "state.sqlite")) as conn:
        dirs = [p for (p,) in conn.execute("SELECT path FROM versions_dirs")]
    assert dirs == [str(folder.resolve())]


def test_memoryd_forget_while_the_daemon_runs_is_no_outside_deletion(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """A person forgets four memories (more than alarm_files) with `memoryd forget` while the
    daemon runs: the daemon's passes over the moves write no memory.deleted_outside and no
    memory.mass_change, and `trash list` holds them as forgotten, not deleted elsewhere."""
    running = start(tmp_path, more_config="\n[versions]\nalarm_files = 3\n")
    try:
        folder = project(running, "app")
        for i in range(8):
            _memory(folder, f"m{i}", f"lesson number {i}")
        wait_for(
            lambda: (
                (folder / "MEMORY.md").exists()
                and all(f"m{i}.md" in (folder / "MEMORY.md").read_text() for i in range(8))
            ),
            what="all 8 indexed",
        )
        wait_for(lambda: len(_stored(running)) >= 9, what="versions stored")
        named = [str(folder / f"m{i}.md") for i in range(4)]
        done = running.cli("forget", *named, "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        before = len(running.rows("index.updated"))
        agent_write(folder, "later.md")  # a change after the moves: the daemon passes again
        wait_for(
            lambda: (
                len(running.rows("index.updated")) > before
                and "later.md" in (folder / "MEMORY.md").read_text()
            ),
            what="a pass after the forget",
        )
        assert running.rows("memory.deleted_outside") == []
        assert running.rows("memory.mass_change") == []
        listing = running.cli("trash", "list")
        assert listing.stdout.count("forgotten") == 4, listing.stdout
        assert "deleted outside memoryd" not in listing.stdout
    finally:
        assert running.stop() == 0


def test_a_version_the_daemon_read_moments_ago_is_restorable_before_its_heartbeat(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """An agent rewrites a memory twice within one heartbeat (15 s): `history` lists the
    middle version as restorable and `history --restore` writes it back before the daemon's
    next heartbeat (an older store held a pass's objects under temp names until then). The
    daemon is held stopped meanwhile, so no heartbeat can come first."""
    running = start(tmp_path)
    try:
        folder = project(running, "app")
        first = _memory(folder, "b", "the first lesson")
        wait_for(lambda: "b.md" in _index(folder), what="b.md indexed")
        middle = _memory(folder, "b", "the second lesson, rewritten by the agent")
        wait_for(lambda: len(running.rows("memory.rewritten_outside")) == 1, what="a rewrite")
        _memory(folder, "b", "the third lesson")
        wait_for(lambda: len(running.rows("memory.rewritten_outside")) == 2, what="another")
        with _paused(running, folder):
            listed = json.loads(running.cli("history", str(folder / "b.md"), "--json").stdout)
            kept = listed["versions"]["versions"]
            assert [v["sha256"] for v in kept][:2] == [_sha(first), _sha(middle)]
            assert all(v["restorable"] for v in kept), kept
            back = running.cli("history", str(folder / "b.md"), "--restore", "2")
            assert back.returncode == 0, back.stderr
            assert (folder / "b.md").read_bytes() == middle
    finally:
        running.stop()


def _unlocked(running: Running, folder: Path) -> bool:
    from memoryd.storage.state import StateStore

    with StateStore(running.state).lock(folder.resolve(), wait=False) as got:
        return got


def _index(folder: Path) -> str:
    return (folder / "MEMORY.md").read_text() if (folder / "MEMORY.md").exists() else ""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_memoryd_commands_and_the_daemon_never_take_each_others_index_writes_for_outside(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """The daemon adds a pointer (its write stored only at its next heartbeat) and
    `memoryd index` reads it at once; then `forget` and `trash
    restore` rewrite MEMORY.md while the daemon runs: no outside row, no alarm, and the
    history of MEMORY.md is memoryd's versions, in time order, the last the file's."""
    running = start(tmp_path)
    try:
        folder = project(running, "app")
        for i in range(3):
            _memory(folder, f"m{i}", f"lesson number {i}")
        wait_for(lambda: "m2.md" in _index(folder), what="indexed")
        wait_for(lambda: running.rows("index.updated"), what="written")
        agent_write(folder, "later.md")
        wait_for(lambda: "later.md" in _index(folder), what="the daemon's pointer")
        done = running.cli("index", str(folder))  # well within the heartbeat's 15 s
        assert done.returncode == 0, done.stderr
        done = running.cli("forget", str(folder / "m0.md"), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        listing = running.cli("trash", "list")
        (line,) = [ln for ln in listing.stdout.splitlines() if "forgotten" in ln]
        done = running.cli("trash", "restore", line.split()[0])
        assert done.returncode == 0, done.stdout + done.stderr
        agent_write(folder, "last.md")
        wait_for(lambda: "last.md" in _index(folder), what="a pass after the restore")
        assert running.rows("memory.rewritten_outside") == []
        assert running.rows("memory.deleted_outside") == []
        assert running.rows("memory.mass_change") == []
        shown = json.loads(running.cli("history", str(folder / "MEMORY.md"), "--json").stdout)
        kept = shown["versions"]["versions"]
        assert {v["by"] for v in kept} == {"memoryd"}, kept
        assert [v["seen"] for v in kept] == sorted(v["seen"] for v in kept)
        assert kept[-1]["sha256"] == _sha((folder / "MEMORY.md").read_bytes())
        assert all(a["sha256"] != b["sha256"] for a, b in itertools.pairwise(kept))
    finally:
        assert running.stop() == 0
