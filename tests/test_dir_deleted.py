"""`rm -rf` of a whole memory dir under the running daemon: no scan can record its files
gone, and the daemon said only `dir.lost`. It raises the alarm `memoryd status` shows, once,
and the files stay listed and restorable."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.conftest import write_memory
from tests.helpers import Running, start, wait_for


def test_rm_rf_of_a_memory_dir_under_the_daemon_raises_the_alarm_status_shows(
    tmp_path: Path, project: Callable[[Running, str], Path]
) -> None:
    """A real daemon watching a dir of two memories; `rm -rf` of the dir: `status` shows the
    alarm naming the whole dir (the old daemon logged `dir.lost` and nothing else), the
    audit log one memory.mass_change naming both files, `trash list` both."""
    running = start(tmp_path)
    try:
        folder = project(running, "app")
        for i in range(2):
            write_memory(folder, f"m{i}.md", description=f"lesson {i}")
        wait_for(
            lambda: (
                (folder / "MEMORY.md").exists() and "m1.md" in (folder / "MEMORY.md").read_text()
            ),
            what="the dir indexed",
        )
        shutil.rmtree(folder)
        wait_for(lambda: running.rows("dir.lost"), what="the dir lost")
        wait_for(lambda: "ALARM" in running.cli("status").stdout, what="the alarm in status")
        status = running.cli("status").stdout
        assert f"ALARM {folder}: the whole dir deleted (2 memory files)" in status, status
        (alarm,) = running.rows("memory.mass_change")
        assert alarm["files"] == ["m0.md", "m1.md"] and alarm["deleted"] == 2
        listed = json.loads(running.cli("trash", "list", "--json").stdout)
        assert sorted(d["file"] for d in listed["deleted_outside"]) == ["m0.md", "m1.md"]
    finally:
        assert running.stop() == 0
