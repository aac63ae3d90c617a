"""The index under faults: a full disk after a dream's moves, pointers put back to files that
left, a read-only MEMORY.md, and an index being rewritten in place while memoryd reads it."""

import errno
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from memoryd.discover.found import MemoryDir
from memoryd.indexing.passes import update, update_changed
from memoryd.indexing.read import BLANK_SETTLE, INDEX_SETTLE, SETTLE_WAIT, settles_at
from memoryd.model.index import INDEX_NAME
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from tests.conftest import Env, tree_digest, write_memory
from tests.helpers import daemon_pass, filler, mem, memory_dir, state_rows

DEPLOY = (
    "Deploy staging by running the release script with the canary flag enabled first then "
    "promote production after verification checks complete"
)


def _dup_repo(root: Path) -> Path:
    """A repo whose memory dir holds a duplicate pair among fillers, every file pointed to
    from a hand-written MEMORY.md memoryd has never indexed; the memory dir."""
    repo = root / "app"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / ".claude" / "memory").mkdir(parents=True)
    mem(repo, "dup_old.md", DEPLOY + " successfully", age=50)
    mem(repo, "dup_new.md", DEPLOY + " fine", age=20)
    filler(repo, 12)
    folder = repo / ".claude" / "memory"
    pointers = "".join(f"- [{p.stem}]({p.name}) — d\n" for p in sorted(folder.glob("*.md")))
    (folder / INDEX_NAME).write_text("# Notes\n\nmine\n\n" + pointers)
    return folder


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """While the flag holds True, writing the temp file of a new MEMORY.md fails with ENOSPC
    (the fault at the writer's boundary; every file stays real)."""
    on = [True]
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if on[0] and os.readlink(f"/proc/self/fd/{fd}").rpartition("/")[2].startswith(
            f".{INDEX_NAME}{fsops.TEMP_MARK}"
        ):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    yield on


@pytest.mark.parametrize("then", ["index", "dream"])
def test_a_failed_index_write_after_moves_fails_the_pass_and_heals_later(
    env: Env, cli, tmp_path: Path, full_disk: list[bool], then: str
) -> None:
    """A dir's first dream on a full disk: the duplicate moves, MEMORY.md cannot be written.
    The pass is failed (exit 1, `failed` in text and JSON, `dream.failed` with the error, no
    `dream.completed`), and once space returns the next `index` or `dream` removes the moved
    file's pointer instead of keeping it as a dead link."""
    folder = _dup_repo(tmp_path)
    before = (folder / INDEX_NAME).read_bytes()
    result = cli("dream", "--json", folder)
    assert result.code == 1, result.out + result.err
    report = json.loads(result.out)["dirs"][0]
    assert report["status"] == "failed" and report["index"] == "error"
    assert "No space left on device" in report["message"] and "dup_old.md" not in str(
        os.listdir(folder)
    )
    assert [c["file"] for c in report["changes"]] == ["dup_old.md"]
    assert (folder / INDEX_NAME).read_bytes() == before  # untouched, pointer still there
    rows = env.audit_rows()
    failed = [r for r in rows if r["event"] == "dream.failed"]
    assert len(failed) == 1 and "No space left" in str(failed[0]["error"])
    assert failed[0]["deleted"] == 1
    assert not [r for r in rows if r["event"] == "dream.completed"]

    full_disk[0] = False  # space returns
    result = cli(then, folder)
    assert result.code == 0, result.out + result.err
    text = (folder / INDEX_NAME).read_text()
    assert "(dup_old.md)" not in text and "(dup_new.md)" in text
    assert text.startswith("# Notes\n\nmine\n\n")
    assert cli("index", "--check", folder).code == 0
    assert not state_rows(env.state, "SELECT pass_id FROM journal_pass")


def test_a_failed_index_write_is_said_plainly_in_the_text_report(
    env: Env, cli, tmp_path: Path, full_disk: list[bool]
) -> None:
    """The text report names the pass `failed`, the index file and the full disk."""
    folder = _dup_repo(tmp_path)
    result = cli("dream", folder)
    assert result.code == 1
    header = next(line for line in result.out.splitlines() if f"({folder}" in line)
    assert ": failed — " in header and INDEX_NAME in header and "No space left" in header
    assert "dup_old.md: moved to" in result.out


def test_the_gone_record_outlives_a_state_that_cannot_be_recovered_from_the_journal(
    env: Env, cli, tmp_path: Path, full_disk: list[bool]
) -> None:
    """Even with the pass's journal gone (set aside by a person), the dir's state remembers
    the moved file: the next index pass removes its pointer."""
    folder = _dup_repo(tmp_path)
    assert cli("dream", folder).code == 1
    conn = sqlite3.connect(env.state / "state.sqlite")
    with conn:
        assert conn.execute("DELETE FROM journal_pass").rowcount
    conn.close()
    full_disk[0] = False
    assert cli("index", folder).code == 0
    assert "(dup_old.md)" not in (folder / INDEX_NAME).read_text()


@pytest.mark.parametrize("path", ["full", "held"])
def test_a_pointer_put_back_to_a_file_memoryd_saw_leave_is_removed_later(
    env: Env, tmp_path: Path, path: str
) -> None:
    """An agent's stale read-modify-write of MEMORY.md puts back the pointer memoryd just
    removed for a deleted file: it is removed again, not kept as a dead link for good; and
    once a file of that name exists again, its pointer is kept."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="second")
    rt = env.runtime()
    md = memory_dir(folder)
    first = daemon_pass(rt, md)
    stale = (folder / INDEX_NAME).read_text()  # what the agent read
    assert "(b.md)" in stale
    (folder / "b.md").unlink()
    second = daemon_pass(rt, md, held=first.held, changed={"b.md"})
    assert second.status == "updated" and "(b.md)" not in (folder / INDEX_NAME).read_text()
    # The agent writes back its stale copy, with a line of its own.
    (folder / INDEX_NAME).write_text(stale + "- [c](c.md) — the agent's, file to come\n")
    if path == "held":
        # A daemon's pass holds the index it wrote; MEMORY.md changed: a full look follows.
        third = daemon_pass(rt, md, held=second.held, changed={INDEX_NAME})
    else:
        third = update(rt, md)
    assert third.status == "updated", third.message
    text = (folder / INDEX_NAME).read_text()
    assert "(b.md)" not in text and "- [c](c.md)" in text  # c.md was never seen: kept
    assert third.edit is not None and third.edit.removed == ["b.md"]
    write_memory(folder, "b.md", description="back again")
    (folder / INDEX_NAME).write_text(stale)
    update(rt, md)
    assert "(b.md)" in (folder / INDEX_NAME).read_text()
    assert "b.md" not in rt.store.load(md.real_path).gone


# --- an index being written ------------------------------------------------------------------
class FakeClock:
    """A wall clock that moves only when memoryd sleeps; `on_sleep` acts as the writer."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []
        self.on_sleep: list[object] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        for act in self.on_sleep:
            act(self.now)  # type: ignore[operator]


def test_a_blank_or_just_changed_index_is_being_written() -> None:
    """The rule, on a fake clock: blank and recent, or changed within the last moments, is
    being written until it has been still long enough; old, or dated far ahead, it is not."""
    t = 1_000_000.0
    ns = int(t * 1e9)
    assert settles_at(True, ns, t + 0.001) == t + BLANK_SETTLE
    assert settles_at(True, ns, t + BLANK_SETTLE - 0.01) == t + BLANK_SETTLE
    assert settles_at(True, ns, t + BLANK_SETTLE) is None
    assert settles_at(False, ns, t + 0.001) == t + INDEX_SETTLE
    assert settles_at(False, ns, t + INDEX_SETTLE) is None
    assert settles_at(False, ns, t - 1.0) == t + INDEX_SETTLE  # a coarse clock lags a little
    assert settles_at(True, ns, t - 3600.0) is None  # dated an hour ahead: cannot tell
    assert INDEX_SETTLE < BLANK_SETTLE < SETTLE_WAIT


def _truncated(tmp_path: Path) -> tuple[Path, os.stat_result]:
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    (folder / INDEX_NAME).write_text("")  # `tool > MEMORY.md`, before the tool writes
    return folder, (folder / INDEX_NAME).stat()


def test_a_one_shot_pass_waits_for_a_just_truncated_index(env: Env, tmp_path: Path) -> None:
    """A command finding MEMORY.md blank a moment after it was truncated waits, and then
    edits what the writer wrote, not a blank file of its own."""
    folder, st = _truncated(tmp_path)
    write_memory(folder, "b.md", description="second")
    clock = FakeClock(st.st_mtime_ns / 1e9 + 0.001)
    mine = "# Regenerated by a tool\n\nhand-written mark 1\n- [a](a.md) — as the tool says\n"

    def writer(now: float) -> None:
        if now >= st.st_mtime_ns / 1e9 + 0.5 and (folder / INDEX_NAME).stat().st_size == 0:
            with open(folder / INDEX_NAME, "r+", encoding="utf-8") as handle:
                handle.write(mine)
            os.utime(folder / INDEX_NAME, (now, now))

    clock.on_sleep.append(writer)
    rt = env.runtime()
    rt = replace(rt, clock=clock, sleep=clock.sleep)
    outcome = update(rt, memory_dir(folder))
    assert outcome.status == "updated", outcome.message
    assert (folder / INDEX_NAME).read_text() == mine + "- [b](b.md) — second\n"
    assert clock.slept and sum(clock.slept) <= SETTLE_WAIT


def test_a_pass_never_takes_an_index_that_stays_blank_while_written(
    env: Env, tmp_path: Path
) -> None:
    """Still blank and still being written after the longest wait: the command writes
    nothing and says why (status `settling`); the daemon does not wait at all, it looks
    again when the file is due to settle. The dream pass's probe skips the pass."""
    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir

    folder, st = _truncated(tmp_path)
    before = tree_digest(folder)
    clock = FakeClock(st.st_mtime_ns / 1e9 + 0.001)

    def truncating_again(now: float) -> None:
        os.truncate(folder / INDEX_NAME, 0)
        os.utime(folder / INDEX_NAME, (now, now))

    clock.on_sleep.append(truncating_again)
    rt = env.runtime()
    rt = replace(rt, clock=clock, sleep=clock.sleep)
    md = memory_dir(folder)
    outcome = update(rt, md)
    assert outcome.status == "settling" and "being written" in outcome.message
    assert str(folder / INDEX_NAME) in outcome.message
    assert sum(clock.slept) <= SETTLE_WAIT
    clock.slept.clear()
    daemon = update_changed(rt, md, grace=0.0, settle=0.0, previous=None, changed=None, held=None)
    assert daemon.status == "settling" and not clock.slept
    assert daemon.retry_after == clock.now + BLANK_SETTLE  # the file was just truncated
    result = dream_dir(rt, md, repos=RepoCache.of(rt))
    assert result.status == "skipped" and "being written" in result.message
    assert tree_digest(folder).keys() == before.keys()  # no new index, no trash
    assert (folder / INDEX_NAME).read_text() == ""
    assert not [r for r in env.audit_rows() if r["event"] == "index.updated"]


def test_bytes_written_to_the_old_index_during_the_swap_survive(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that opened MEMORY.md before memoryd's exchange writes to it just after:
    its file goes back under the name and memoryd edits that one; nothing of it is lost."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="second")
    (folder / INDEX_NAME).write_text("# Mine\n\n- [a](a.md) — first\n")
    old = (folder / INDEX_NAME).stat()
    os.utime(folder / INDEX_NAME, ns=(old.st_atime_ns, old.st_mtime_ns - 10**10))
    opened: list[int] = []

    def open_early(dir_path: Path, name: str) -> None:
        if name == INDEX_NAME and not opened:
            opened.append(os.open(dir_path / name, os.O_WRONLY | os.O_APPEND))

    real_point = fsops.crash_point

    def late_write(label: str) -> None:
        if label == "index.after_swap" and opened and opened[0] >= 0:
            os.write(opened[0], b"hand-written after the exchange\n")
            os.close(opened[0])
            opened[0] = -1
        real_point(label)

    monkeypatch.setattr(fsops, "crash_point", late_write)
    rt = env.runtime()
    rt = replace(rt, on_own_write=lambda dir_path, name, _identity: open_early(dir_path, name))
    outcome = update(rt, memory_dir(folder))
    assert outcome.status == "updated", outcome.message
    text = (folder / INDEX_NAME).read_text()
    assert "hand-written after the exchange\n" in text and "- [b](b.md) — second" in text
    assert [r["event"] for r in env.audit_rows()].count("index.conflict") == 1


WRITER = r"""
import random, sys, time
path, rounds = sys.argv[1], int(sys.argv[2])
rng = random.Random(11)
lost = 0
for i in range(rounds):
    with open(path, "w", encoding="utf-8") as handle:  # `tool > MEMORY.md`: truncate, then write
        handle.flush()
        time.sleep(rng.choice([0.001, 0.02, 0.2]))
        handle.write(f"# Made by a tool\n\nmark-{i} by hand\n- [a](a.md) — the tool's words\n")
    # Every other pause outlasts the settle wait, so memoryd edits it then (keeping every mark).
    time.sleep(0.8 if i % 2 else 0.05)
    with open(path, encoding="utf-8") as handle:
        lost += f"mark-{i} by hand" not in handle.read()
print(lost, flush=True)
"""


def _race(rt: Runtime, md: MemoryDir, script: str, index: Path, *args: str) -> tuple[int, int]:
    """Index passes back to back while a writer process runs `script` on `index`: the marks
    the writer says it lost, and how many passes ran."""
    with subprocess.Popen(
        [sys.executable, "-c", script, str(index), *args], stdout=subprocess.PIPE, text=True
    ) as writer:
        passes = 0
        while writer.poll() is None:
            update(rt, md)
            passes += 1
        assert writer.stdout is not None
        return int(writer.stdout.read()), passes


def test_a_tool_rewriting_the_index_in_place_loses_no_mark_to_concurrent_passes(
    env: Env, tmp_path: Path
) -> None:
    """A real writer process regenerates MEMORY.md in place (truncate, a gap of 1-200 ms,
    write) while index passes run back to back: every hand-written mark it wrote is still
    in MEMORY.md when it looks, and memoryd did edit the file meanwhile (b.md's pointer)."""

    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="second")
    (folder / INDEX_NAME).write_text("# Made by a tool\n\n- [a](a.md) — the tool's words\n")
    rt = env.runtime()
    md = memory_dir(folder)
    lost, passes = _race(rt, md, WRITER, folder / INDEX_NAME, "16")
    updates = [r for r in env.audit_rows() if r["event"] == "index.updated"]
    assert lost == 0, f"{lost} of 16 hand-written marks lost over {passes} passes"
    assert updates  # memoryd did write between the tool's rounds: the race was run


SLOW_WRITER = r"""
import sys, time
path, rounds, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lost = 0
for i in range(rounds):
    with open(path, "w", encoding="utf-8") as handle:  # `slow_tool > MEMORY.md`
        handle.flush()
        time.sleep(gap)  # longer than any wait for a blank index to settle
        handle.write(f"# Made by a slow tool\n\nmark-{i} by hand\n- [a](a.md) — the tool's\n")
    deadline = time.monotonic() + 5.0  # memoryd's next pass brings it back
    while True:
        with open(path, encoding="utf-8") as handle:
            if f"mark-{i} by hand" in handle.read():
                break
        if time.monotonic() > deadline:
            lost += 1
            break
        time.sleep(0.02)
print(lost, flush=True)
"""


def test_a_slow_tool_writing_after_the_settle_wait_loses_no_mark(env: Env, tmp_path: Path) -> None:
    """A real writer process truncates MEMORY.md and writes only after memoryd has taken the
    blank file as settled (the pass's clock runs ahead by more than the wait) and swapped its
    own in: the bytes land in the old file, now .MEMORY.md.prev, and the next pass puts that
    file back as MEMORY.md (an index.conflict); every mark survives the passes after it."""
    import time

    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="second")
    (folder / INDEX_NAME).write_text("# Made by a slow tool\n\n- [a](a.md) — the tool's\n")
    rt = replace(env.runtime(), clock=lambda: time.time() + SETTLE_WAIT + 1.0)  # all blanks old
    md = memory_dir(folder)
    lost, passes = _race(rt, md, SLOW_WRITER, folder / INDEX_NAME, "6", "0.3")
    assert lost == 0, f"{lost} of 6 hand-written marks lost over {passes} passes"
    back = [r for r in env.audit_rows() if r["event"] == "index.conflict"]
    assert any("written to after memoryd replaced" in str(r["detail"]) for r in back)
    update(rt, md)
    text = (folder / INDEX_NAME).read_text()
    assert "mark-5 by hand" in text and "- [b](b.md) — second" in text


def test_a_one_shot_index_in_a_slow_tools_gap_loses_nothing(
    env: Env, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adversary's case with `memoryd index`: the tool truncated MEMORY.md longer ago
    than the wait (its mtime is set back), the command swaps in a blank index's edit, then
    the tool writes. The next command gives the tool's file its name back; the write after
    that edits it and never replaces the kept old file it came from."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="a")
    write_memory(folder, "b.md", description="b")
    path = folder / INDEX_NAME
    path.write_text("- [a](a.md) — a\n- [b](b.md) — b\n")
    with open(path, "w", encoding="utf-8") as tool:  # truncates now
        old = path.stat().st_mtime_ns - int((SETTLE_WAIT + 1) * 1e9)
        os.utime(path, ns=(old, old))
        first = cli("index", folder)
        assert first.code == 0 and "updated" in first.out, first.out + first.err
        tool.write("# Hand-written index\nMY NOTES\n- [a](a.md) — a\n- [b](b.md) — b\n")
    assert "MY NOTES" not in path.read_text()  # (the old code's loss starts here)
    assert cli("index", folder).code == 0
    assert "MY NOTES" in path.read_text()
    write_memory(folder, "c.md", description="c")
    assert cli("index", folder).code == 0
    text = path.read_text()
    assert "MY NOTES" in text and "- [c](c.md) — c" in text
    [row] = [r for r in env.audit_rows() if r["event"] == "index.conflict"]
    assert "it is MEMORY.md again" in str(row["detail"])


def test_late_bytes_are_kept_aside_when_memory_md_changed_since(
    env: Env, cli, tmp_path: Path
) -> None:
    """The tool writes into the old file after an agent replaced memoryd's MEMORY.md: neither
    is lost. The agent's stays MEMORY.md, the tool's becomes MEMORY.md.late (no memory, never
    indexed), said once; a second time, MEMORY.md.late-1."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="a")
    path = folder / INDEX_NAME
    for n, kept in enumerate(["MEMORY.md.late", "MEMORY.md.late-1"]):
        path.write_text(f"- [a](a.md) — a {n}\n")
        with open(path, "w", encoding="utf-8") as tool:
            old = path.stat().st_mtime_ns - int((SETTLE_WAIT + 1) * 1e9)
            os.utime(path, ns=(old, old))
            assert cli("index", folder).code == 0
            tool.write(f"TOOL {n}\n")
        agent = folder / "agent.tmp"
        agent.write_text(f"# Agent {n}\n\n- [a](a.md) — a\n")
        agent.rename(path)
        assert cli("index", folder).code == 0
        assert (folder / kept).read_text() == f"TOOL {n}\n"
        assert path.read_text().startswith(f"# Agent {n}\n")
    rows = [r for r in env.audit_rows() if r["event"] == "index.conflict"]
    assert ["kept as MEMORY.md.late" in str(r["detail"]) for r in rows] == [True, True]


def test_a_kept_old_index_written_to_is_never_replaced(tmp_path: Path) -> None:
    """The writer's own check: given what `.MEMORY.md.prev` was when memoryd made it, a
    swap that would replace it after it was written to in place refuses, and changes
    nothing; another file under that name (memoryd's own, after a crash) is replaced."""
    from memoryd.errors import WriteConflict
    from memoryd.model.index import PREV_NAME

    (tmp_path / INDEX_NAME).write_text("index\n")
    (tmp_path / PREV_NAME).write_text("")
    was = fsops.stat_id(os.open(tmp_path, os.O_RDONLY), PREV_NAME)
    assert was is not None
    with open(tmp_path / PREV_NAME, "a", encoding="utf-8") as late:
        late.write("late bytes\n")
    with fsops.open_dir(tmp_path) as dir_fd:
        _, current = fsops.identity_of(dir_fd, INDEX_NAME) or (b"", None)
    with pytest.raises(WriteConflict, match="written to after"):
        fsops.replace_file(
            tmp_path, INDEX_NAME, b"new\n", current, keep_prev=PREV_NAME, prev_was=was
        )
    assert (tmp_path / INDEX_NAME).read_text() == "index\n"
    assert (tmp_path / PREV_NAME).read_text() == "late bytes\n"
    other = [was[0] + 1, *was[1:]]
    fsops.replace_file(tmp_path, INDEX_NAME, b"new\n", current, keep_prev=PREV_NAME, prev_was=other)
    assert (tmp_path / PREV_NAME).read_text() == "index\n"


# --- a read-only index -----------------------------------------------------------------------
@pytest.mark.parametrize("which", [INDEX_NAME, "MEMORY-ARCHIVE.md"])
def test_a_read_only_index_is_the_persons_do_not_touch(
    env: Env, cli, tmp_path: Path, which: str
) -> None:
    """A MEMORY.md (or archive) without its owner's write permission is left exactly as it
    is: nothing written, said once with the file and `chmod u+w`, shown by `dirs`, and
    `index --check` says unmanaged and exits 0. Writable again, it is managed again."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    write_memory(folder, "b.md", description="second")
    (folder / INDEX_NAME).write_text("# Mine\n\n- [a](a.md) — first\n")
    (folder / "MEMORY-ARCHIVE.md").write_text("# Archive\n")
    for name in (INDEX_NAME, "MEMORY-ARCHIVE.md"):
        st = (folder / name).stat()
        os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))
    os.chmod(folder / which, 0o444)
    before = tree_digest(folder)
    first = cli("index", folder)
    assert first.code == 0, first.out + first.err
    assert "unmanaged" in first.out and f"{which} is read-only" in first.out
    assert f"chmod u+w {folder / which}" in first.out
    assert cli("index", folder).code == 0
    check = cli("index", "--check", folder)
    assert check.code == 0 and "read-only" in check.out
    assert tree_digest(folder) == before
    assert (folder / which).stat().st_mode & 0o777 == 0o444
    said = [r for r in env.audit_rows() if r["event"] == "index.unmanaged"]
    assert len(said) == 1 and f"{which} is read-only" in str(said[0]["reason"])
    row = json.loads(cli("dirs", "--json", folder).out)["dirs"][0]
    assert row["mode"] == "unmanaged" and "read-only" in row["mode_reason"]
    os.chmod(folder / which, 0o644)
    assert cli("index", folder).code == 0
    assert "- [b](b.md) — second" in (folder / INDEX_NAME).read_text()


def test_the_daemons_held_pass_leaves_an_index_made_read_only_since(
    env: Env, tmp_path: Path
) -> None:
    """A chmod keeps the mtime, so the held index still matches by stat: the held pass
    must look at the mode too, and leave the file to the full pass, which writes nothing."""
    folder = tmp_path / "proj" / "memory"
    write_memory(folder, "a.md", description="first")
    rt = env.runtime()
    md = memory_dir(folder)
    first = daemon_pass(rt, md)
    assert first.status == "updated" and first.held is not None
    os.chmod(folder / INDEX_NAME, 0o444)
    before = tree_digest(folder)
    write_memory(folder, "b.md", description="second")
    after = daemon_pass(rt, md, held=first.held, changed={"b.md"})
    assert after.status == "unmanaged" and "read-only" in after.message
    assert tree_digest(folder).items() >= before.items()
    assert "(b.md)" not in (folder / INDEX_NAME).read_text()
