"""The index pass's named use cases: each asks one thing of a dir, and says so in its outcome."""

import json
import os
from pathlib import Path

from memoryd import indexer
from memoryd.config import Config
from memoryd.discover import explicit_dirs
from memoryd.index import INDEX_NAME
from memoryd.indexer import IndexStatus
from tests.conftest import Env, tree_digest, write_memory


def _dir(path: Path):
    return explicit_dirs(path, Config())[0]


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
    outcome = indexer.ownership_for_dream(env.runtime(), _dir(folder))
    assert outcome.status is IndexStatus.UNCHANGED
    assert outcome.ownership is not None and outcome.ownership.managed
    assert outcome.scan is not None and set(outcome.scan.memories) == {"alpha.md", "beta.md"}
    assert outcome.edit is None
    assert tree_digest(folder) == before and env.audit_rows() == []


def test_the_dream_pass_hears_why_an_index_is_not_managed(env: Env, tmp_path: Path) -> None:
    """An index marked off is unmanaged for the dream pass, with the reason."""
    folder = _folder(tmp_path)
    (folder / INDEX_NAME).write_text("<!-- memoryd: off -->\n- [alpha](alpha.md) — first\n")
    outcome = indexer.ownership_for_dream(env.runtime(), _dir(folder))
    assert outcome.status is IndexStatus.UNMANAGED and outcome.message
    assert outcome.ownership is not None and not outcome.ownership.managed


def test_check_shows_what_update_then_writes(env: Env, tmp_path: Path) -> None:
    """check() gives the diff and writes nothing; update() writes just that; a second check
    finds nothing to do."""
    folder = _folder(tmp_path)
    rt, md = env.runtime(), _dir(folder)
    before = tree_digest(folder)
    checked = indexer.check(rt, md)
    assert checked.status is IndexStatus.WOULD_CHANGE
    assert "+- [beta](beta.md) — second memory" in checked.diff
    assert tree_digest(folder) == before
    assert indexer.update(rt, md).status is IndexStatus.UPDATED
    assert "- [beta](beta.md) — second memory\n" in (folder / INDEX_NAME).read_text()
    assert indexer.check(rt, md).status is IndexStatus.UNCHANGED


def test_statuses_are_their_names_in_json_and_text(env: Env, tmp_path: Path) -> None:
    """A status is an enum member that prints and serialises as the word it always was."""
    outcome = indexer.update(env.runtime(), _dir(_folder(tmp_path)))
    assert isinstance(outcome.status, IndexStatus)
    assert json.dumps({"status": outcome.status}) == '{"status": "updated"}'
    assert f"{outcome.status}" == "updated" and outcome.status == "updated"


def test_the_daemons_pass_after_a_change_takes_the_held_view(env: Env, tmp_path: Path) -> None:
    """update_changed holds what it leaves; told which file changed, the next one touches only
    that file's lines (the held view) and gives what a full pass would."""
    folder = _folder(tmp_path)
    old = (folder / INDEX_NAME).stat()  # written a while ago: not being written now
    os.utime(folder / INDEX_NAME, ns=(old.st_atime_ns, old.st_mtime_ns - 10**10))
    rt, md = env.runtime(), _dir(folder)
    first = indexer.update_changed(
        rt, md, grace=0.0, settle=0.0, previous=None, changed=None, held=None
    )
    assert first.status is IndexStatus.UPDATED and not first.held_edit
    assert first.held is not None
    write_memory(folder, "alpha.md", description="revised")
    after = indexer.update_changed(
        rt, md, grace=0.0, settle=0.0, previous=first.scan, changed={"alpha.md"}, held=first.held
    )
    assert after.status is IndexStatus.UPDATED and after.held_edit
    assert "- [alpha](alpha.md) — revised\n" in (folder / INDEX_NAME).read_text()
    assert indexer.check(rt, md).status is IndexStatus.UNCHANGED
