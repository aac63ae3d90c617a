"""memoryd reads a memory dir as Claude Code does (issue 13): its scan of memory files, the
archive it picks on demand, memory types, `.consolidate-lock`, lone-CR indexes."""

import hashlib
import json
import os
from datetime import date, datetime, timedelta
from pathlib import Path

from memoryd import trash
from tests.conftest import Env
from tests.test_dream_planted import _filler, dream, mem, moved, repo  # noqa: F401
from tests.test_trash import plant_day


def claude_scan(folder: Path) -> list[str]:
    """The memory files Claude Code 2.1.197 lists: every `*.md` below the memory dir,
    recursively, dot-folders included, other than MEMORY.md (relative paths)."""
    out = []
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = Path(dirpath, name)
            if name.endswith(".md") and path != folder / "MEMORY.md":
                out.append(path.relative_to(folder).as_posix())
    return sorted(out)


# --- 1. trashed files are invisible to every Claude Code version's scan ---------------------
def test_a_trashed_file_is_no_memory_to_claudes_scan_and_comes_back_whole(
    env: Env, cli, repo: Path  # noqa: F811
) -> None:
    """A pass's move leaves no `*.md` in `.trash/` (2.1.197 would list it as a live memory);
    `trash list` shows it, and a restore by its name brings the same bytes back under the
    same name."""
    folder = repo / ".claude" / "memory"
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    original = path.read_bytes()
    _filler(repo)
    before = claude_scan(folder)
    assert moved(dream(cli, repo)) == {"stale.md": "stale"}
    assert claude_scan(folder) == [n for n in before if n != "stale.md"]
    [row] = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert row["file"] == "stale.md" and row["path"].endswith(".trashed")
    assert cli("trash", "restore", "stale.md", folder).code == 0
    assert path.read_bytes() == original and claude_scan(folder) == before


def test_trash_of_the_older_plain_naming_lists_restores_and_purges(
    env: Env, cli, repo: Path  # noqa: F811
) -> None:
    """Day folders an older memoryd wrote (`<name>.md` stored as is) still list, restore (by
    name, by id and by their stored path) and purge: no migration needed."""
    folder = repo / ".claude" / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    today = date.today()
    day = plant_day(folder, today, datetime.now(), "one.md")
    plant_day(folder, today, datetime.now(), "two.md")
    planted = {n: (day / n).read_bytes() for n in ("one.md", "two.md")}
    rows = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert sorted(r["file"] for r in rows) == ["one.md", "two.md"]
    assert cli("trash", "restore", "one.md", folder).code == 0
    assert cli("trash", "restore", f".trash/{today.isoformat()}/two.md", folder).code == 0
    assert {n: (folder / n).read_bytes() for n in planted} == planted
    old = plant_day(folder, today - timedelta(days=400), datetime.now() - timedelta(days=400))
    assert [e.record.stored_name for e in trash.entries(folder) if not e.restored_as] == [
        "old.md"]
    assert cli("trash", "purge", "--older-than", "0d", folder).code == 0
    assert old.exists()  # memoryd has not watched it yet: retention rests on what it saw


def test_a_stored_name_never_ends_in_md_and_fits_the_name_limit(tmp_path: Path) -> None:
    """Names at the 255-byte limit (ASCII, and multi-byte characters) get a stored name that
    fits, ends in `.md.trashed`, is valid to the manifest reader, and never repeats."""
    folder = tmp_path / "day"
    folder.mkdir()
    for name in ("a" * 252 + ".md", "é" * 125 + "xy.md", "日" * 84 + ".md"):
        assert len(os.fsencode(name)) == 255
        taken: set[str] = set()
        for _ in range(3):
            stored = trash.free_name(folder, name, taken)
            assert stored.endswith(".md.trashed") and len(os.fsencode(stored)) <= 255
            assert trash.stored_problem(stored) is None, stored
            assert stored not in taken
            taken.add(stored)
            (folder / stored).write_bytes(b"x")
    assert trash.stored_problem("x.md") is None  # the older naming
    for bad in ("manifest.jsonl", ".x.md.trashed", "x.trashed", "MEMORY.md.trashed"):
        assert trash.stored_problem(bad) is not None, bad


def test_a_long_name_moves_and_restores(env: Env, cli, repo: Path) -> None:  # noqa: F811
    """A memory whose name is 255 bytes goes to the trash under a shorter stored name and
    comes back under its own."""
    name = "s" * 252 + ".md"
    path = mem(repo, name, "Lived in `src/removed.py`.")
    original = path.read_bytes()
    _filler(repo)
    folder = repo / ".claude" / "memory"
    assert moved(dream(cli, repo)) == {name: "stale"}
    (entry,) = trash.entries(folder)
    assert entry.record.stored_name != name and not path.exists()
    assert hashlib.sha256(entry.stored_path.read_bytes()).hexdigest() == entry.record.sha256
    assert cli("trash", "restore", entry.record.id, folder).code == 0
    assert path.read_bytes() == original
