"""The index under faults: a full disk after a dream's moves, pointers put back to files that
left, a read-only MEMORY.md, and an index being rewritten in place while memoryd reads it."""

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd import fsops
from memoryd.config import Config
from memoryd.discover import explicit_dirs
from memoryd.index import INDEX_NAME
from memoryd.indexer import index_dir
from tests.conftest import Env, write_memory
from tests.test_dream_planted import _filler, mem

DEPLOY = (
    "Deploy staging by running the release script with the canary flag enabled first then "
    "promote production after verification checks complete"
)


def _dir(path: Path):  # type: ignore[no-untyped-def]
    return explicit_dirs(path, Config())[0]


def _dup_repo(root: Path) -> Path:
    """A repo whose memory dir holds a duplicate pair among fillers, every file pointed to
    from a hand-written MEMORY.md memoryd has never indexed; the memory dir."""
    repo = root / "app"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / ".claude" / "memory").mkdir(parents=True)
    mem(repo, "dup_old.md", DEPLOY + " successfully", age=50)
    mem(repo, "dup_new.md", DEPLOY + " fine", age=20)
    _filler(repo, 12)
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

    monkeypatch.setattr(fsops.os, "write", write)
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
    assert not list((env.state / "journal").glob("*.jsonl"))


def test_a_failed_index_write_is_said_plainly_in_the_text_report(
    env: Env, cli, tmp_path: Path, full_disk: list[bool]
) -> None:
    """The text report names the pass `failed`, the index file and the full disk."""
    folder = _dup_repo(tmp_path)
    result = cli("dream", folder)
    assert result.code == 1
    header = next(line for line in result.out.splitlines() if line.startswith(str(folder)))
    assert ": failed — " in header and INDEX_NAME in header and "No space left" in header
    assert "dup_old.md: moved to" in result.out


def test_the_gone_record_outlives_a_state_that_cannot_be_recovered_from_the_journal(
    env: Env, cli, tmp_path: Path, full_disk: list[bool]
) -> None:
    """Even with the pass's journal gone (set aside by a person), the dir's state remembers
    the moved file: the next index pass removes its pointer."""
    folder = _dup_repo(tmp_path)
    assert cli("dream", folder).code == 1
    for journal in (env.state / "journal").glob("*.jsonl"):
        journal.unlink()
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
    md = _dir(folder)
    first = index_dir(rt, md, hold=True)
    stale = (folder / INDEX_NAME).read_text()  # what the agent read
    assert "(b.md)" in stale
    (folder / "b.md").unlink()
    second = index_dir(rt, md, hold=True, held=first.held, only={"b.md"})
    assert second.status == "updated" and "(b.md)" not in (folder / INDEX_NAME).read_text()
    # The agent writes back its stale copy, with a line of its own.
    (folder / INDEX_NAME).write_text(stale + "- [c](c.md) — the agent's, file to come\n")
    if path == "held":
        # A daemon's pass holds the index it wrote; MEMORY.md changed: a full look follows.
        third = index_dir(rt, md, hold=True, held=second.held, only={INDEX_NAME})
    else:
        third = index_dir(rt, md)
    assert third.status == "updated", third.message
    text = (folder / INDEX_NAME).read_text()
    assert "(b.md)" not in text and "- [c](c.md)" in text  # c.md was never seen: kept
    assert third.edit is not None and third.edit.removed == ["b.md"]
    write_memory(folder, "b.md", description="back again")
    (folder / INDEX_NAME).write_text(stale)
    index_dir(rt, md)
    assert "(b.md)" in (folder / INDEX_NAME).read_text()
    assert "b.md" not in rt.store.load(md.real_path).gone
