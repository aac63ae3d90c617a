"""The index pass's named use cases: each asks one thing of a dir, and says so in its outcome."""

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from memoryd.config import IndexConfig
from memoryd.indexing import passes
from memoryd.indexing.outcome import IndexStatus
from memoryd.indexing.read import key_now, left_as, settled_under
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, local_links
from memoryd.storage import fsops
from tests.conftest import Env, tree_digest, write_memory
from tests.helpers import memory_dir


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "repo" / ".claude" / "memory"
    write_memory(folder, "alpha.md", description="first memory")
    write_memory(folder, "beta.md", description="second memory")
    (folder / INDEX_NAME).write_text("# Notes\n\n- [alpha](alpha.md) — first memory\n")
    return folder


def test_the_dream_pass_asks_ownership_and_nothing_is_planned_written_or_logged(
    env: Env, tmp_path: Path
) -> None:
    """ownership_for_dream decides ownership and hands back its scan; it plans no edit,
    writes no file and leaves no audit row, though an update would change the index."""
    folder = _folder(tmp_path)
    before = tree_digest(folder)
    outcome = passes.ownership_for_dream(env.runtime(), memory_dir(folder))
    assert outcome.status is IndexStatus.UNCHANGED
    assert outcome.ownership is not None and outcome.ownership.managed
    assert outcome.scan is not None and set(outcome.scan.memories) == {"alpha.md", "beta.md"}
    assert outcome.edit is None
    assert tree_digest(folder) == before and env.audit_rows() == []


def test_the_dream_pass_hears_why_an_index_is_not_managed(env: Env, tmp_path: Path) -> None:
    """An index marked off is unmanaged for the dream pass, with the reason."""
    folder = _folder(tmp_path)
    (folder / INDEX_NAME).write_text("<!-- memoryd: off -->\n- [alpha](alpha.md) — first\n")
    outcome = passes.ownership_for_dream(env.runtime(), memory_dir(folder))
    assert outcome.status is IndexStatus.UNMANAGED and outcome.message
    assert outcome.ownership is not None and not outcome.ownership.managed


def test_check_shows_what_update_then_writes(env: Env, tmp_path: Path) -> None:
    """check() gives the diff and writes nothing; update() writes just that; a second check
    finds nothing to do."""
    folder = _folder(tmp_path)
    rt, md = env.runtime(), memory_dir(folder)
    before = tree_digest(folder)
    checked = passes.check(rt, md)
    assert checked.status is IndexStatus.WOULD_CHANGE
    assert "+- [beta](beta.md) — second memory" in checked.diff
    assert tree_digest(folder) == before
    assert passes.update(rt, md).status is IndexStatus.UPDATED
    assert "- [beta](beta.md) — second memory\n" in (folder / INDEX_NAME).read_text()
    assert passes.check(rt, md).status is IndexStatus.UNCHANGED


def test_statuses_are_their_names_in_json_and_text(env: Env, tmp_path: Path) -> None:
    """A status is an enum member that prints and serialises as the word it always was."""
    outcome = passes.update(env.runtime(), memory_dir(_folder(tmp_path)))
    assert isinstance(outcome.status, IndexStatus)
    assert json.dumps({"status": outcome.status}) == '{"status": "updated"}'
    assert f"{outcome.status}" == "updated" and outcome.status == "updated"


def test_the_daemons_pass_after_a_change_takes_the_held_view(env: Env, tmp_path: Path) -> None:
    """update_changed holds what it leaves; told which file changed, the next one touches only
    that file's lines (the held view) and gives what a full pass would."""
    folder = _folder(tmp_path)
    old = (folder / INDEX_NAME).stat()  # written a while ago: not being written now
    os.utime(folder / INDEX_NAME, ns=(old.st_atime_ns, old.st_mtime_ns - 10**10))
    rt, md = env.runtime(), memory_dir(folder)
    first = passes.update_changed(
        rt, md, grace=0.0, settle=0.0, previous=None, changed=None, held=None
    )
    assert first.status is IndexStatus.UPDATED and not first.held_edit
    assert first.held is not None
    write_memory(folder, "alpha.md", description="revised")
    after = passes.update_changed(
        rt, md, grace=0.0, settle=0.0, previous=first.scan, changed={"alpha.md"}, held=first.held
    )
    assert after.status is IndexStatus.UPDATED and after.held_edit
    assert "- [alpha](alpha.md) — revised\n" in (folder / INDEX_NAME).read_text()
    assert passes.check(rt, md).status is IndexStatus.UNCHANGED


def test_a_burst_the_daemon_indexed_in_part_stays_managed(env: Env, tmp_path: Path) -> None:
    """1,000 new memories in a new dir, a pass in the middle of the burst: the files memoryd
    was still holding back (their grace) lack a pointer because of memoryd, not a person; the
    next passes (full and held) keep managing the index, which ends listing all 1,000."""
    folder = tmp_path / "repo" / ".claude" / "memory"
    names = [f"m{i:04d}.md" for i in range(1000)]
    for i, name in enumerate(names):  # the first 125 written long enough ago: past the grace
        write_memory(folder, name, description=f"burst {i}", age_days=1 if i < 125 else None)
    rt, md = env.runtime(), memory_dir(folder)
    first = passes.update_changed(
        rt, md, grace=10.0, settle=0.0, previous=None, changed=None, held=None
    )
    assert first.status is IndexStatus.UPDATED
    assert len(local_links((folder / INDEX_NAME).read_text())) == 125
    write_memory(folder, "late.md", description="one more", age_days=None)
    held = passes.update_changed(
        rt, md, grace=10.0, settle=0.0, previous=first.scan, changed={"late.md"}, held=first.held
    )
    assert held.status is not IndexStatus.UNMANAGED, held.message
    full = passes.update_changed(
        rt, md, grace=10.0, settle=0.0, previous=first.scan, changed=None, held=None
    )
    assert full.status is not IndexStatus.UNMANAGED, full.message
    rt = replace(rt, clock=lambda: time.time() + 60)  # past every file's grace
    last = passes.update_changed(
        rt, md, grace=10.0, settle=0.0, previous=full.scan, changed=None, held=None
    )
    assert last.status is IndexStatus.UPDATED, last.message
    text = (folder / INDEX_NAME).read_text()
    archive = folder / ARCHIVE_NAME
    targets = [*local_links(text), *(local_links(archive.read_text()) if archive.exists() else ())]
    assert sorted(link.target for link in targets) == sorted([*names, "late.md"])
    events = [r.get("event") for r in env.audit_rows()]
    assert "index.unmanaged" not in events
    assert events.count("index.updated") <= 3, "a handful of writes for the burst"


def test_one_rule_says_when_an_index_file_is_as_memoryds_last_pass_left_it(
    env: Env, tmp_path: Path
) -> None:
    """read.left_as is the one rule the held, settled and dream views ask, over one stat
    spelling: the file memoryd's last verified pass left, writable, under the same settings.
    A chmod (which keeps the mtime) or a rewrite of the same bytes is no longer that file."""
    folder = _folder(tmp_path)
    rt, md = env.runtime(), memory_dir(folder)
    assert passes.update(rt, md).status is IndexStatus.UPDATED
    state = rt.store.load(md.real_path)
    heading = md.heading
    assert settled_under(state, rt.config.index, heading)
    assert not settled_under(state, IndexConfig(separator=" -- "), heading)
    with fsops.open_dir(folder) as dir_fd:
        assert left_as(state, 0, key_now(dir_fd, INDEX_NAME))
        assert left_as(state, 1, key_now(dir_fd, ARCHIVE_NAME))  # left missing, still missing
        os.chmod(folder / INDEX_NAME, 0o444)
        assert key_now(dir_fd, INDEX_NAME) == [] and not left_as(state, 0, [])
        os.chmod(folder / INDEX_NAME, 0o644)
        assert left_as(state, 0, key_now(dir_fd, INDEX_NAME))
        text = (folder / INDEX_NAME).read_text()
        (folder / "tmp").write_text(text)
        (folder / "tmp").replace(folder / INDEX_NAME)  # the same bytes, another file
        assert not left_as(state, 0, key_now(dir_fd, INDEX_NAME))
    # An index another pass left is not this one's either, nor an unmanaged dir's.
    state.managed = False
    assert not left_as(state, 1, None)
