"""A file's own quiet period decides when the daemon looks, not its dir's: while another file
of the dir changes all the time, a version that sits on disk is read, and so kept, before it
is replaced (the dir's quiet never came, and the pass waited for watch.max_wait)."""

import hashlib
import itertools
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memoryd.daemon.watch import Debouncer
from tests.conftest import write_memory
from tests.helpers import Running, agent_write, start, wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_files_own_quiet_makes_its_dir_due_under_churn_of_another_file() -> None:
    """b.md changes every second; a.md changes once: the dir is due `quiet` after a.md's
    change, not `max_wait` after the burst began; b.md alone still waits `max_wait` at most."""
    clock = FakeClock()
    d = Debouncer(2.0, 30.0, clock)
    due_at: list[float] = []
    for second in range(40):
        d.touch("dir", "b.md")
        if second == 5:
            d.touch("dir", "a.md")
        clock.now += 1.0
        if d.pop_due():
            due_at.append(clock.now - 1000.0)
    assert due_at[0] == 7.0  # a.md quiet for 2 s (old: 30, the dir never went quiet)
    assert due_at[1] == 37.0  # then b.md alone: its burst's max_wait, from second 7
    assert all(b - a <= 30.0 for a, b in itertools.pairwise(due_at))


def _history(running: Running, file: Path) -> list[dict[str, Any]]:
    listed = json.loads(running.cli("history", str(file), "--json").stdout or "{}")
    kept: list[dict[str, Any]] = listed.get("versions", {}).get("versions", [])
    return kept


def test_a_version_that_sat_on_disk_is_kept_while_another_file_churns(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """A real daemon (debounce 200 ms, max_wait 1 h) while another program appends to b.md
    every 20 ms: a.md's first version sits on disk, then is replaced. It was never kept:
    every event of b.md put the dir's pass off. It is kept, restorable, once it has sat for
    the debounce, and so is the version that replaced it."""
    running = start(tmp_path, max_wait="1h")
    churn: subprocess.Popen[bytes] | None = None
    try:
        folder = project(running, "app")
        write_memory(folder, "b.md")
        wait_for(lambda: "b.md" in _index(folder), what="the first pass")
        size = (folder / "b.md").stat().st_size
        churn = subprocess.Popen(
            ["sh", "-c", 'i=0; while :; do i=$((i+1)); echo "$i" >> b.md; sleep 0.02; done'],
            cwd=folder,
        )
        wait_for(lambda: (folder / "b.md").stat().st_size > size, what="the churn")
        agent_write(folder, "a.md", "the first version")
        first = _sha((folder / "a.md").read_bytes())
        wait_for(
            lambda: first in [v["sha256"] for v in _history(running, folder / "a.md")],
            what="a.md's first version kept",
        )
        agent_write(folder, "a.md", "the second version")
        second = _sha((folder / "a.md").read_bytes())
        wait_for(
            lambda: second in [v["sha256"] for v in _history(running, folder / "a.md")],
            what="a.md's second version kept",
        )
        kept = _history(running, folder / "a.md")
        assert [v["sha256"] for v in kept] == [first, second]
        assert all(v["restorable"] for v in kept), kept
    finally:
        if churn is not None:
            churn.kill()
            churn.wait()
        running.stop()


def _index(folder: Path) -> str:
    return (folder / "MEMORY.md").read_text() if (folder / "MEMORY.md").exists() else ""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
