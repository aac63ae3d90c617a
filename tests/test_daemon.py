"""`memoryd run` as a real process against a temp HOME: events, discovery, signals, liveness."""

import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from tests.conftest import write_memory
from tests.helpers import (
    CONFIG,
    DUPLICATE,
    Running,
    agent_write,
    index_text,
    plant_day,
    settled,
    snapshot,
    start,
    vault,
    wait_for,
    watched_for,
)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Running]:
    running = start(tmp_path)
    yield running
    running.stop()


def test_writes_and_deletes_keep_the_index_in_step(daemon: Running, project) -> None:
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
    assert index_text(folder) == (
        "# Mine\n\nprose line\n\n- [first](first.md) — one\n- [third](third.md) — three\n"
    )


def test_the_agents_first_line_for_a_file_wins_over_its_later_one(daemon: Running, project) -> None:
    """Two pointer lines the agent wrote for one file, the first exactly memoryd's template:
    the daemon keeps the first (memoryd never wrote it) and every other byte."""
    folder = project(daemon, "dup")
    (folder / "MEMORY.md").write_text(
        "# Mine\n\n- [Old](x.md) — one\nprose\n- [Old again](x.md) — two\n"
    )
    write_memory(folder, "x.md", name="Old", description="one")
    wait_for(lambda: index_text(folder).count("(x.md)") == 1, what="the duplicate collapsed")
    assert index_text(folder) == "# Mine\n\n- [Old](x.md) — one\nprose\n"


def test_new_dir_deleted_and_recreated_and_symlinked(
    daemon: Running, project, tmp_path: Path
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
    real = daemon.claude / "elsewhere" / "agent-mem"  # a link out of the home is refused
    real.mkdir(parents=True)
    (daemon.claude / "agent-memory").mkdir(parents=True)
    (daemon.claude / "agent-memory" / "linked").symlink_to(real)
    wait_for(
        lambda: any(str(r.get("real_path")) == str(real) for r in daemon.rows("dir.discovered")),
        what="symlinked dir discovered",
    )
    agent_write(real, "c.md")
    wait_for(lambda: "c.md" in index_text(real), what="symlinked dir watched at its real path")


def test_a_dir_recreated_at_once_files_moved_in_and_a_late_link_are_seen(
    daemon: Running, project, tmp_path: Path
) -> None:
    """Gone and made again in one breath (same inode number, no dir.lost in between): watched
    again. A file moved in from another folder (no close event): indexed. A symlinked memory
    dir made after its project folder: discovered. None of it waits for the reconcile (1 h)."""
    import shutil

    folder = project(daemon, "quick")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="first index")
    shutil.rmtree(folder)
    folder.mkdir()
    # Written before or after the new watch stands: either way the lost watch's dir is
    # looked at in full, and a move in below needs the new watch.
    agent_write(folder, "b.md")
    wait_for(lambda: "b.md" in index_text(folder), timeout=10, what="recreated dir re-armed")
    elsewhere = tmp_path / "drafts"
    elsewhere.mkdir()
    write_memory(elsewhere, "moved.md", description="moved in")
    os.rename(elsewhere / "moved.md", folder / "moved.md")
    wait_for(lambda: "moved.md" in index_text(folder), timeout=10, what="a file moved in")
    slug = daemon.claude / "projects" / "-late-link"
    slug.mkdir(parents=True)  # the project folder first, its memory dir later (as Claude Code)
    real = daemon.claude / "real-memory"  # inside the Claude home: followed
    real.mkdir()
    (slug / "memory").symlink_to(real)
    agent_write(real, "c.md")
    wait_for(lambda: "c.md" in index_text(real), timeout=10, what="a late symlinked dir")


def test_a_restore_while_the_daemon_runs_keeps_its_pointer(tmp_path: Path, project) -> None:
    """`memoryd trash restore` writes the pointer back; the daemon, seeing someone else's index
    write, looks at every file and keeps it."""
    running = start(tmp_path, name="r")
    try:
        folder = project(running, "restore")
        topics = ["anchor", "barley", "canyon", "dolphin", "ember", "fjord"]
        for topic in topics:
            write_memory(folder, f"{topic}.md", body=f"{topic} {topic}s {topic}-like\n")
        write_memory(folder, "old.md", body="Lived in `src/removed.py`.\n", age_days=60)
        wait_for(lambda: "old.md" in index_text(folder), what="indexed")
        repo = tmp_path / "code" / "restore"
        (repo / "src").mkdir(parents=True, exist_ok=True)
        (repo / "src" / "app.py").write_text("x = 1\n")
        moved = running.cli("dream", "--json", "--repo-root", str(repo), str(folder))
        [change] = json.loads(moved.stdout)["dirs"][0]["changes"]
        wait_for(lambda: "old.md" not in index_text(folder), what="the pointer gone")
        assert running.cli("trash", "restore", change["id"]).returncode == 0
        assert "old.md" in index_text(folder)
        settled(folder)  # the daemon's pass after the restore has run
        assert "old.md" in index_text(folder)
        assert running.cli("index", "--check", str(folder)).returncode == 0
    finally:
        assert running.stop() == 0


def test_a_memory_broken_for_a_while_is_still_one_memoryd_saw(daemon: Running, project) -> None:
    """Unparseable for a while, then deleted: its pointer goes. Unparseable, then fixed with a
    new description: the line memoryd generated follows it."""
    folder = project(daemon, "broken")
    agent_write(folder, "b.md", "first words")
    agent_write(folder, "c.md", "steady")
    wait_for(lambda: "b.md" in index_text(folder), what="indexed")
    (folder / "b.md").write_text("---\nname: [unclosed\n---\nbody\n")
    wait_for(lambda: daemon.rows("file.unparseable"), what="reported")
    agent_write(folder, "b.md", "second words")
    wait_for(lambda: "second words" in index_text(folder), what="the generated line follows")
    assert "first words" not in index_text(folder)
    (folder / "b.md").write_text("---\nname: [unclosed\n---\nbody\n")
    wait_for(lambda: len(daemon.rows("file.unparseable")) == 2, what="broken again, seen")
    (folder / "b.md").unlink()
    wait_for(lambda: "b.md" not in index_text(folder), what="the pointer of a deleted file")


def test_burst_of_2000_files_gives_one_consistent_index(daemon: Running, project) -> None:
    """2,000 files as fast as possible: every file indexed once, few index writes, no loop."""
    folder = project(daemon, "burst")
    wait_for(lambda: daemon.rows("dir.discovered"), what="discovery")
    began = time.monotonic()
    for i in range(2000):
        (folder / f"m{i:04d}.md").write_text(
            f"---\nname: m{i}\ndescription: burst {i}\ntype: project\n---\nx\n"
        )
    # A file quiet for the debounce (200 ms) makes the dir due, so a burst may be written once
    # per debounce while it lasts (on a loaded machine 2,000 writes take seconds); then once
    # when it ends, and once for the probe. A daemon writing per file would write ~2,000 times.
    bound = math.ceil((time.monotonic() - began) / 0.2) + 2

    def done() -> bool:
        from memoryd.model.index import pointer_targets

        text = index_text(folder)
        archive = folder / "MEMORY-ARCHIVE.md"
        targets = pointer_targets(text) + (
            pointer_targets(archive.read_text()) if archive.exists() else []
        )
        return len(targets) == 2000

    wait_for(done, timeout=60, what="all 2,000 indexed")
    settled(folder)  # every trailing write of the burst made (and one more: the probe's)
    writes = daemon.rows("index.updated")
    assert len(writes) <= max(bound, 11), (
        f"{len(writes)} index writes for one burst (and the probe)"
    )
    from memoryd.model.index import pointer_targets

    text = index_text(folder)
    targets = pointer_targets(text) + pointer_targets(
        (folder / "MEMORY-ARCHIVE.md").read_text()
        if (folder / "MEMORY-ARCHIVE.md").exists()
        else ""
    )
    assert sorted(t for t in targets if not t.startswith("settled-")) == [
        f"m{i:04d}.md" for i in range(2000)
    ]
    # A daemon taking its own writes for news would write again at every debounce: between
    # two probes (each a debounce or more apart), only the second probe's write comes.
    before = len(daemon.rows("index.updated"))
    settled(folder)
    assert len(daemon.rows("index.updated")) == before + 1, "the daemon kept rewriting (a loop)"


def test_pile_up_dreams_after_five_changes_and_survives_restart(tmp_path: Path, project) -> None:
    """4 changes: no pass; a restart keeps the count; the 5th change: one pass. (That no pass
    comes of 4 however long the quiet, and only one of 5, is shown on a fake clock:
    test_watch::test_a_pile_up_waits_for_five_changes_and_quiet_across_a_restart.)"""
    first = start(tmp_path, name="p")
    folder = project(first, "pile")
    write_memory(folder, "base.md")
    wait_for(lambda: "base.md" in index_text(folder), what="baseline")
    for i in range(4):
        agent_write(folder, f"c{i}.md", f"change {i}")
    wait_for(lambda: "c3.md" in index_text(folder), what="four changes indexed")
    assert first.stop() == 0
    assert first.rows("dream.completed") == []
    second = start(tmp_path, name="p")
    try:
        agent_write(folder, "c4.md", "change 4")
        wait_for(lambda: second.rows("dream.completed"), timeout=20, what="a pile-up pass")
        assert len(second.rows("dream.completed")) == 1
        [began] = second.rows("dream.started")  # a pass the daemon starts itself is news
        assert began["trigger"] == "pile-up" and began["level"] == "info"
        from memoryd.storage.state import StateStore

        state = StateStore(second.state).load(folder.resolve())
        assert state.known and state.changed_since_dream == []
    finally:
        second.stop()


def test_start_up_purges_trash_past_retention(tmp_path: Path, project) -> None:
    """Day folders past `trash.keep_days` go when the daemon starts, not only a day later."""
    first = start(tmp_path, name="t")
    folder = project(first, "rot")
    write_memory(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="the first index")
    assert first.stop() == 0
    from datetime import datetime

    old = plant_day(folder, date(2000, 1, 1), datetime(2000, 1, 1, 12), "x.md")
    recent = plant_day(folder, date.today(), datetime.now(), "x.md")
    watched_for(first.state, folder, 45)  # memoryd saw both 45 days ago (retention: 30)
    second = start(tmp_path, name="t")
    try:
        wait_for(lambda: second.rows("trash.purged"), what="the start-up rotation")
        assert not old.exists() and (recent / "x.md").exists()
        assert second.rows("trash.purged")[0]["days"] == ["2000-01-01"]
    finally:
        assert second.stop() == 0


def test_sigterm_flushes_pending_work_and_exits_0(tmp_path: Path, project) -> None:
    """SIGTERM right after a write: the pending change is indexed before a clean exit."""
    running = start(tmp_path, name="t")
    folder = project(running, "flush")
    write_memory(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="first index")
    agent_write(folder, "b.md")  # within the debounce (or not yet seen): the shutdown's look
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


def test_sighup_with_a_bad_config_keeps_the_old_one(daemon: Running, project) -> None:
    """SIGHUP reloads; an invalid file is reported and the daemon keeps working as before."""
    daemon.config.write_text("[watch]\ndebounce = 'soon'\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.rows("config.invalid"), what="config.invalid")
    folder = project(daemon, "after-hup")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="still working")
    daemon.config.write_text(CONFIG.format(grace="0s", pile_up=5))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.rows("config.reloaded"), what="config.reloaded")


def test_sd_notify_ready_watchdog_stopping(tmp_path: Path) -> None:
    """READY=1, WATCHDOG=1 and STOPPING=1 arrive on a NOTIFY_SOCKET the test binds."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    try:
        running = start(
            tmp_path, name="n", extra_env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "1000000"}
        )
        got: set[str] = set()
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
    from memoryd.daemon.notify import notify

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


SMALL_INDEX = 'max_lines = 12\nkeep_recent = "0s"\n'


def consistent(folder: Path, hand: list[str]) -> bool:
    """Every memory file indexed once across both files, no dangling link, hand lines kept."""
    from memoryd.model.index import verify

    main = index_text(folder)
    archive_path = folder / "MEMORY-ARCHIVE.md"
    archive = archive_path.read_text() if archive_path.exists() else None
    files = {p.name for p in folder.glob("*.md") if not p.name.startswith("MEMORY")}
    present = {p.name for p in folder.iterdir()}
    return not verify(main, archive, files, present) and all(line in main for line in hand)


def archive_text(folder: Path) -> str:
    return (folder / "MEMORY-ARCHIVE.md").read_text()


def test_a_change_touches_only_its_own_line_and_a_hand_edit_is_kept(
    tmp_path: Path, project
) -> None:
    """With an archive, a description change rewrites one archive line and nothing else; a
    person's edit of MEMORY.md between two changes is kept (the held index is not trusted)."""
    running = start(tmp_path, name="h", index_config=SMALL_INDEX)
    try:
        folder = project(running, "held")
        for i in range(30):
            write_memory(folder, f"m{i:02d}.md", description=f"note {i}")
        wait_for(
            lambda: (
                consistent(folder, []) and "m29.md" in index_text(folder) + archive_text(folder)
            ),
            what="30 files indexed across both files",
        )
        archived = next(
            f"m{i:02d}.md" for i in range(30) if f"(m{i:02d}.md)" in archive_text(folder)
        )
        main_before, archive_before = index_text(folder), archive_text(folder)
        agent_write(folder, archived, "revised words")
        wait_for(lambda: "revised words" in archive_text(folder), what="the archive line rewritten")
        assert index_text(folder) == main_before
        changed = [
            (a, b)
            for a, b in zip(
                archive_before.splitlines(), archive_text(folder).splitlines(), strict=True
            )
            if a != b
        ]
        assert len(changed) == 1 and f"({archived})" in changed[0][1]

        with (folder / "MEMORY.md").open("a") as handle:
            handle.write("a line a person added\n")
        agent_write(folder, "late.md", "added after the hand edit")
        wait_for(
            lambda: "late.md" in index_text(folder) + archive_text(folder),
            what="the new file indexed",
        )
        (folder / archived).unlink()
        wait_for(lambda: f"({archived})" not in archive_text(folder), what="the pointer removed")
        wait_for(lambda: consistent(folder, ["a line a person added"]), what="a consistent index")
        check = running.cli("index", "--check", str(folder))
        assert check.returncode == 0, check.stdout + check.stderr  # a full pass agrees
        assert running.rows("index.verify_failed") == []
    finally:
        running.stop()


def crash_once(base: Path, project, k: int, hand: list[str]) -> bool:
    """One run of the scenario with the daemon killed at its k-th write step; then a restart.

    Returns whether the daemon lived through the scenario (k is past its last write step).
    """
    crashing = start(
        base,
        name="c",
        index_config=SMALL_INDEX,
        # The index pass's steps (the version store's are looped over in test_versions).
        extra_env={"MEMORYD_CRASH_AT": str(k), "MEMORYD_CRASH_ONLY": "index.,journal.,trash."},
    )
    folder = project(crashing, f"crash{k}")
    # The index first: written after the files, it would race the daemon's first pass.
    (folder / "MEMORY.md").write_text("# Mine\n\n" + "\n".join(hand) + "\n")
    for i in range(20):
        write_memory(folder, f"m{i:02d}.md", description=f"note {i}")
    before = {p.name for p in folder.glob("m*.md")}
    # The scenario rewrites m00-m02 itself; every other memory must keep its bytes (§2.1).
    untouched = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.glob("m*.md")
        if p.name[1:3] not in ("00", "01", "02")
    }

    def indexed(name: str) -> bool:
        archive = folder / "MEMORY-ARCHIVE.md"
        return f"({name})" in index_text(folder) + (archive.read_text() if archive.exists() else "")

    try:
        wait_for(
            lambda: crashing.proc.poll() is not None or indexed("m19.md"),
            timeout=20,
            what="indexed or killed",
        )
        for step in range(3):
            if crashing.proc.poll() is not None:
                break
            agent_write(folder, f"m{step:02d}.md", f"revised {step}")
            agent_write(folder, f"new{step}.md", f"new {step}")
            name = f"new{step}.md"
            wait_for(
                lambda: crashing.proc.poll() is not None or indexed(name),  # noqa: B023
                timeout=20,
                what="the new file indexed or killed",
            )
        survived = crashing.proc.poll() is None
    finally:
        crashing.stop()
    after = start(base, name="c", index_config=SMALL_INDEX)
    try:
        wait_for(lambda: consistent(folder, hand), timeout=20, what=f"consistent after k={k}")
        assert before <= {p.name for p in folder.glob("*.md")}  # every memory file is still there
        assert untouched == {
            n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in untouched
        }
        assert after.rows("index.verify_failed") == []
    finally:
        after.stop()
    return survived


def test_sigkill_during_a_pass_after_a_change_leaves_a_consistent_index(
    tmp_path: Path, project
) -> None:
    """The daemon killed at each write step of its passes (k = 1, 2, ...): after a restart the
    index is consistent, every memory file is still there, hand-written lines are intact."""
    hand = ["<!-- memoryd: manage -->", "prose a person wrote"]
    k = 0
    while True:
        k += 1
        base = tmp_path / f"k{k}"
        base.mkdir()
        if crash_once(base, project, k, hand):
            break  # k is past every write step of the scenario
    assert k > 4  # the loop did kill the daemon at several steps


def test_an_unparseable_change_is_reported_once_and_again_after_a_fix(
    daemon: Running, project
) -> None:
    """A pass over just the changed files reports a broken file once (never indexing it),
    forgets the report when it is fixed, and reports it again when it breaks again."""
    folder = project(daemon, "broken")
    write_memory(folder, "good.md")
    wait_for(lambda: "good.md" in index_text(folder), what="baseline")

    def break_it() -> None:
        path = folder / "bad.md"
        path.write_text("---\nname: [unclosed\ndescription: x\n---\nbody\n")
        old = time.time() - 60  # past the settle time a fresh file gets
        os.utime(path, (old, old))

    def reports() -> int:
        return sum(1 for r in daemon.rows("file.unparseable") if r["file"] == "bad.md")

    break_it()
    wait_for(lambda: reports() == 1, what="the broken file reported")
    agent_write(folder, "good2.md")  # another pass: no second report
    wait_for(lambda: "good2.md" in index_text(folder), what="a later change indexed")
    assert reports() == 1 and "bad.md" not in index_text(folder)
    agent_write(folder, "bad.md", "fixed now")
    wait_for(lambda: "bad.md" in index_text(folder), what="the fixed file indexed")
    break_it()
    wait_for(lambda: reports() == 2, what="reported again after breaking again")


def test_the_daemon_leaves_a_vault_linked_into_a_repo_alone(tmp_path: Path) -> None:
    """A repo's agent-memory link to a notes vault outside it: the running daemon reports it
    once and never writes there (byte-identical, no new file), while the repo's own dir is
    indexed, dreamed over, and a dir made later is still discovered."""

    notes = vault(tmp_path)
    repo = tmp_path / "repos" / "app"
    agents = repo / ".claude" / "agent-memory"
    agents.mkdir(parents=True)
    (agents / "notes").symlink_to(notes)
    planner = agents / "planner"
    write_memory(planner, "plan.md")
    running = start(tmp_path, pile_up=2, more_config=f'[paths]\nrepos = ["{repo}"]\n')
    try:
        wait_for(lambda: running.rows("dir.refused"), what="the link reported")
        # The person keeps writing notes in the vault: nothing of it is memoryd's business.
        write_memory(notes, "deploy-third.md", body=DUPLICATE, age_days=None)
        write_memory(notes, "deploy-fourth.md", body=DUPLICATE, age_days=None)
        before = snapshot(notes.parent)
        agent_write(planner, "one.md", "first change")
        agent_write(planner, "two.md", "second change")
        wait_for(
            lambda: [r for r in running.rows("dream.completed") if r["dir"] == str(planner)],
            timeout=30,
            what="the repo dir's pass",
        )
        write_memory(agents / "late", "late.md")  # a rediscovery after the refusal
        wait_for(lambda: "late.md" in index_text(agents / "late"), what="a late dir indexed")
        assert running.stop() == 0
    finally:
        running.stop()
    assert snapshot(notes.parent) == before, "the daemon wrote in the vault"
    [row] = running.rows("dir.refused")
    assert row["dir"] == str(agents / "notes") and row["target"] == str(notes.resolve())
    assert not [r for r in running.rows() if str(r.get("dir", "")).startswith(str(notes))]


def test_a_fifo_config_at_start_up_exits_2_at_once(tmp_path: Path) -> None:
    """`memoryd --config FIFO run` names the file and exits 2; it does not wait for a writer
    (the old code blocked in open() forever: the timeout below fails it)."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(fifo), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert str(fifo) in done.stderr and "FIFO" in done.stderr


def test_sighup_with_a_fifo_config_keeps_indexing_and_stops_on_sigterm(
    daemon: Running, project
) -> None:
    """The config replaced by a FIFO, then SIGHUP: the reload refuses it (config.invalid, the
    old config kept), the worker goes on indexing, and SIGTERM stops it with exit 0. The old
    code's worker blocked opening the FIFO: no more indexing, and SIGTERM waited for it."""
    daemon.config.unlink()
    os.mkfifo(daemon.config)
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.rows("config.invalid"), what="config.invalid")
    [row] = daemon.rows("config.invalid")
    assert row["source"] == str(daemon.config) and "FIFO" in str(row["problems"])
    folder = project(daemon, "after-fifo")
    agent_write(folder, "a.md")
    wait_for(lambda: "a.md" in index_text(folder), what="still indexing")
    assert daemon.stop() == 0


def test_fifos_in_place_of_the_lock_and_status_files_hang_nothing(tmp_path: Path) -> None:
    """A FIFO planted as memoryd.lock or status.json: `memoryd run` exits 2 naming the lock
    file, `memoryd status` answers (exit 1, not running); the old code blocked in open()."""
    home = tmp_path / "home"
    state = home / ".local" / "state" / "memoryd"
    state.mkdir(parents=True, mode=0o700)
    os.mkfifo(state / "memoryd.lock")
    os.mkfifo(state / "status.json")
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
    }

    def memoryd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memoryd", "--config", "/dev/null", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    status = memoryd("status")
    assert status.returncode == 1 and "not running" in status.stdout
    run = memoryd("run")
    assert run.returncode == 2 and str(state / "memoryd.lock") in run.stderr
    assert "FIFO" in run.stderr


def test_the_daemon_keeps_the_search_index_in_step_in_the_same_pass(
    daemon: Running, project
) -> None:
    """A memory an agent writes is in the dir's search index (memoryd.recall) once its pointer
    is in MEMORY.md, with no command run in between; a deleted one leaves it."""
    import sqlite3

    from memoryd.recall.store import index_path

    folder = project(daemon, "searched")
    wait_for(lambda: daemon.rows("dir.discovered"), what="discovery")
    agent_write(folder, "deploys.md", "how the deploys run")
    wait_for(lambda: "deploys.md" in index_text(folder), what="the pointer")
    db = index_path(daemon.state, folder.resolve())

    def indexed() -> set[str]:
        if not db.exists():
            return set()
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return {row[0] for row in con.execute("SELECT file FROM files")}

    wait_for(lambda: "deploys.md" in indexed(), what="the memory in the search index")
    (folder / "deploys.md").unlink()
    wait_for(lambda: "deploys.md" not in index_text(folder), what="the pointer removed")
    wait_for(lambda: "deploys.md" not in indexed(), what="the memory out of the search index")


def test_the_daemon_threads_do_not_grow_with_its_dirs(tmp_path: Path, project) -> None:
    """One event thread reads every watch (one inotify descriptor): a daemon watching 40
    memory dirs (and their project folders) runs as many threads as one watching one. The
    old observer ran two threads per watched folder: 61 threads for 31 dirs."""
    counts: dict[int, int] = {}
    for n in (1, 10, 40):
        running = start(tmp_path, name=f"t{n}")
        try:
            folders = [project(running, f"t{n}-p{i}") for i in range(n)]
            for folder in folders:
                agent_write(folder, "a.md")
            wait_for(
                lambda: all("a.md" in index_text(f) for f in folders),  # noqa: B023
                timeout=60,
                what=f"{n} dirs indexed",
            )
            counts[n] = len(os.listdir(f"/proc/{running.proc.pid}/task"))
        finally:
            assert running.stop() == 0
    assert counts[1] == counts[10] == counts[40], counts
    assert counts[1] <= 3, counts  # the loop's, the event thread, and no more than one other
