"""`memoryd status` for a person: real file counts, the debounce queue, the last index write,
relative times; and the dirs from disk when the daemon is stopped."""

import json
import re
from pathlib import Path

import pytest

from memoryd.views.logview import View
from memoryd.views.statusview import DirRow, Status, render
from tests.conftest import Env, write_memory
from tests.helpers import agent_write, start, wait_for

HOME = "/home/ann"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
PROJECT = f"{HOME}/.claude/projects/-home-ann-src-shop/memory"


def _status(**over: object) -> Status:
    rows = [
        DirRow(
            PROJECT,
            "project",
            12,
            "updated",
            3,
            True,
            "2027-01-15T07:57:00Z",
            "2027-01-15T05:00:00Z",
            "completed",
            "ok",
        ),
        DirRow(
            f"{HOME}/.claude/agent-memory/reviewer",
            "agent",
            40,
            "unmanaged",
            0,
            False,
            None,
            None,
            None,
            "polling",
        ),
    ]
    doc = {
        "pid": 77,
        "version": "0.1.0",
        "started": "2027-01-15T05:00:00+00:00",
        "heartbeat": "2027-01-15T07:59:56+00:00",
        "heartbeat_every": 15.0,
        "dirs": [],
    }
    fields: dict[str, object] = {
        "running": True,
        "pid": 77,
        "fresh": True,
        "heartbeat_age_s": 4.0,
        "status": doc,
        "dirs": rows,
        "audit_log": f"{HOME}/.local/state/memoryd/log/audit.jsonl",
        "config": "built-in defaults",
        "lock_file": f"{HOME}/.local/state/memoryd/memoryd.lock",
    }
    fields.update(over)
    return Status(**fields)  # type: ignore[arg-type]


WIDE = [
    "memoryd 0.1.0 is running (pid 77) since 05:00:00Z (3 h ago); heartbeat just now.",
    "1 dir with changes waiting out the debounce.",
    "Audit log: ~/.local/state/memoryd/log/audit.jsonl   config: built-in defaults",
    "Dirs:",
    "  DIR             KIND     FILES  INDEX      CHANGED  WRITTEN    LAST PASS  QUEUED  WATCH",
    "  src-shop        project  12     updated    3        3 min ago  3 h ago    yes     ok",
    "  agent/reviewer  agent    40     unmanaged  0        never      never      no      polling",
    "  (CHANGED: files changed since the last dream; WRITTEN: the last index write; QUEUED: "
    "waiting out the debounce)",
]
NARROW = [
    "  DIR           FILES  INDEX      CHANGED  WRITTEN    LAST PASS  QUEUED  WATCH",
    "  src-shop      12     updated    3        3 min ago  3 h ago    yes     ok",
    "  agent/revie…  40     unmanaged  0        never      never      no      polling",
    "  (CHANGED: files changed since the last dream; WRITTEN: the last index write;",
    "  QUEUED: waiting out the debounce)",
]


def test_running_status_renders_at_120_columns() -> None:
    """Relative times, the real counts, the queue, the last index write, where the log is."""
    got = render(_status(), View(now=NOW, home=HOME, utc=True, width=120)).splitlines()
    assert [line.rstrip() for line in got] == [line.rstrip() for line in WIDE]


def test_running_status_fits_80_columns() -> None:
    got = render(_status(), View(now=NOW, home=HOME, utc=True, width=80)).splitlines()
    """At 80 columns the kind column goes and the dir's name gives up room; nothing is cut."""
    assert all(len(line) <= 80 for line in got), got
    assert [line.rstrip() for line in got[4:]] == NARROW


def test_stopped_status_says_where_things_are_and_shows_dirs_from_disk() -> None:
    stopped = _status(running=False, pid=None, fresh=False, from_disk=True)
    text = render(stopped, View(now=NOW, home=HOME, utc=True, width=100))
    assert text.startswith(
        "memoryd is not running (nothing holds ~/.local/state/memoryd/memoryd.lock).\n"
    )
    assert "Its last heartbeat was 4 s ago (pid 77)." not in text  # the beat's own time
    assert "Its last heartbeat was just now (pid 77)." in text
    assert "Audit log: ~/.local/state/memoryd/log/audit.jsonl" in text
    assert "state on disk" in text and "QUEUED" not in text and "src-shop" in text


def test_status_of_a_stopped_daemon_reads_each_dir_from_disk(env: Env, cli, tmp_path: Path) -> None:
    """No daemon: exit 1, and still each dir memoryd has state for, its last index write, the
    audit log and the config; `--json` the same with absolute times. The old one printed
    only that it was not running."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    result = cli("status")
    assert result.code == 1 and "memoryd is not running" in result.out
    assert "agent/reviewer" in result.out and "just now" in result.out
    assert "Audit log: ~/.local/state/memoryd/log/audit.jsonl" in result.out
    doc = json.loads(cli("status", "--json").out)
    assert doc["dirs_from_disk"] and doc["audit_log"] == str(env.audit_path)
    (row,) = doc["dirs"]
    assert row["path"] == str(folder) and row["files"] == 2
    assert row["last_index_write"].endswith("+00:00")  # absolute


def test_a_running_daemon_counts_unmanaged_files_and_shows_its_queue(
    tmp_path: Path, project
) -> None:
    """A dir whose index memoryd does not manage shows its real memory count (the old
    heartbeat said `files 0`); status.json says which dirs are queued; `status` prints the
    last index write and no raw ISO times."""
    running = start(tmp_path, name="s")
    try:
        mine = project(running, "mine")
        theirs = project(running, "theirs")
        (theirs / "MEMORY.md").write_text("# notes\n\nno pointers here\n")
        for n in range(4):
            agent_write(theirs, f"t{n}.md")
        agent_write(mine, "m.md")
        status_file = running.state / "status.json"

        def dirs() -> dict[str, dict[str, object]]:
            try:
                doc = json.loads(status_file.read_text())
            except ValueError:
                return {}
            return {Path(d["real_path"]).parent.name: d for d in doc["dirs"]}

        wait_for(
            lambda: (
                dirs().get(theirs.parent.name, {}).get("index") == "unmanaged"
                and dirs().get(mine.parent.name, {}).get("index") == "updated"
            ),
            timeout=60,
            what="both dirs indexed in a heartbeat",
        )
        now = dirs()
        assert now[theirs.parent.name]["files"] == 4
        assert now[theirs.parent.name]["queued"] is False
        text = running.cli("status").stdout
        assert "WRITTEN" in text and ("ago" in text or "just now" in text)
        assert not re.search(r"\d{4}-\d\d-\d\dT", text)  # no raw ISO time
    finally:
        assert running.stop() == 0


@pytest.mark.parametrize("width", [80, 120])
def test_a_stale_heartbeat_is_said_relatively(width: int) -> None:
    stale = _status(fresh=False, heartbeat_age_s=600.0)
    text = render(stale, View(now=NOW, home=HOME, utc=True, width=width))
    assert "heartbeat is stale (last 10 min ago)" in text
