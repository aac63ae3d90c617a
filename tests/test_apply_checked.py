"""A pass moves only the version it checked: a file swapped between the check and the rename
stays in the dir, the trash holds nothing unchecked, and every manifest sha256 is its bytes."""

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.discover.found import MemoryDir
from memoryd.dream.repocache import RepoCache
from memoryd.dream.result import DreamResult
from memoryd.dream.run import dream_dir
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.trash import journal
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash
from tests.conftest import Env, InjectedCrash, crash_at
from tests.helpers import DAY, filler, mem, memory_dir, wait_for


def _version(n: int) -> bytes:
    """Version n of stale.md: still fully stale, so every version is a planned move."""
    return (
        f"---\nname: stale\ndescription: d\ntype: project\n---\n"
        f"Lived in `src/removed.py`. Version {n}.\n"
    ).encode()


def _swap_in(path: Path, data: bytes) -> None:
    """Write like an agent's atomic save (a temp file renamed onto the name), aged so that no
    guard keeps it."""
    tmp = path.with_name(f".{path.name}.agent.tmp")
    tmp.write_bytes(data)
    old = time.time() - 40 * DAY
    os.utime(tmp, (old, old))
    os.replace(tmp, path)


def _trash_check(folder: Path) -> tuple[int, int, set[str]]:
    """(records of files in the trash, records whose sha256 is not their file's bytes, files
    in the trash that no record names: moved unchecked)."""
    records = mismatches = 0
    named: set[Path] = set()
    for entry in trash_manifest.entries(folder):
        if entry.restored_as:
            continue
        records += 1
        named.add(entry.stored_path)
        data = entry.stored_path.read_bytes()
        mismatches += hashlib.sha256(data).hexdigest() != entry.record.sha256
    stored = {p for p in folder.glob(".trash/*/*") if p.name != trash.MANIFEST}
    return records, mismatches, {str(p.relative_to(folder)) for p in stored - named}


def _pass(rt: Runtime, md: MemoryDir, hook: Callable[[str], None] | None = None) -> DreamResult:
    return dream_dir(rt, md, repos=RepoCache(), before_move=hook)


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "link-unlink"])
def test_a_file_swapped_between_check_and_rename_stays_in_the_dir(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch, renameat2: bool
) -> None:
    """An agent's atomic save landing after the pass checked the file and before it renamed
    it: the new version stays under its name byte for byte, the move counts as "modified
    since plan", and the next pass moves (and restore brings back) the version it checked."""
    if renameat2 and not fsops.renameat2_available():
        pytest.skip("no renameat2 here")
    monkeypatch.setattr(fsops, "use_renameat2", renameat2)
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)

    def agent_saves(name: str) -> None:
        assert name == "stale.md"
        _swap_in(path, _version(2))

    result = _pass(rt, md, agent_saves)
    assert result.status == "completed" and result.moved == []
    assert result.skipped_moves == [("stale.md", "modified since plan")]
    assert path.read_bytes() == _version(2)
    assert _trash_check(md.real_path) == (0, 0, set())
    skipped = [r for r in env.audit_rows() if r["event"] == "dream.move_skipped"]
    assert [(r["file"], r["why"]) for r in skipped] == [("stale.md", "modified since plan")]
    assert not [r for r in env.audit_rows() if r["event"] == "trash.moved"]
    assert "stale.md" in (md.real_path / "MEMORY.md").read_text()
    assert not journal.pending(rt.paths.state_dir)

    again = _pass(rt, md)  # no writer now: the version it checks is the one it moves
    assert [r.original_name for r in again.moved] == ["stale.md"] and not path.exists()
    assert _trash_check(md.real_path) == (1, 0, set())
    (entry,) = trash_manifest.entries(md.real_path)
    assert trash_manifest.restore(md.real_path, entry) == "stale.md"
    assert path.read_bytes() == _version(2)


def test_without_renameat2_a_save_between_link_and_unlink_is_not_unlinked(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The portable move links the file into the trash, then unlinks its name: an agent's
    save landing on the name in between is a new file, which stays; the checked one is in
    the trash with its record."""
    monkeypatch.setattr(fsops, "use_renameat2", False)
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    planned = path.read_bytes()
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)
    real_link = os.link

    def link_then_agent_saves(*args: object, **kwargs: object) -> None:
        real_link(*args, **kwargs)  # type: ignore[arg-type]
        if args[:2] == ("stale.md", "stale.md.trashed"):  # into the trash, not yet unlinked
            _swap_in(path, _version(2))

    monkeypatch.setattr(os, "link", link_then_agent_saves)
    result = _pass(rt, md)
    monkeypatch.setattr(os, "link", real_link)
    assert [r.original_name for r in result.moved] == ["stale.md"]
    assert path.read_bytes() == _version(2)
    assert _trash_check(md.real_path) == (1, 0, set())
    (entry,) = trash_manifest.entries(md.real_path)
    assert entry.stored_path.read_bytes() == planned


def test_a_file_rewritten_in_place_after_its_check_is_put_back(env: Env, repo: Path) -> None:
    """The same inode with other bytes (an editor writing in place) is no checked version
    either."""
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)

    def agent_writes_in_place(name: str) -> None:
        ino = path.stat().st_ino
        with path.open("r+b") as handle:
            handle.write(_version(3))
            handle.truncate()
        assert path.stat().st_ino == ino

    result = _pass(rt, md, agent_writes_in_place)
    assert result.moved == [] and result.skipped_moves == [("stale.md", "modified since plan")]
    assert path.read_bytes() == _version(3)
    assert _trash_check(md.real_path) == (0, 0, set())


def test_a_put_back_never_overwrites_a_file_that_took_the_name(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2 is swapped in before the rename, version 3 written under the name right
    after it: version 3 keeps the name, version 2 comes back as `stale.kept-1.md`, and the
    report and the audit row say so."""
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)
    (md.real_path / "stale.kept-1.md").mkdir()  # taken too: the next free name is used
    real_crash_point = fsops.crash_point

    def third_writer(label: str) -> None:
        if label == "trash.after_move":
            path.write_bytes(_version(3))
        real_crash_point(label)

    monkeypatch.setattr(fsops, "crash_point", third_writer)
    result = _pass(rt, md, lambda name: _swap_in(path, _version(2)))
    monkeypatch.setattr(fsops, "crash_point", real_crash_point)
    assert result.moved == [] and result.skipped_moves == [("stale.md", "modified since plan")]
    assert result.kept_as == {"stale.md": "stale.kept-2.md"}
    assert path.read_bytes() == _version(3)
    assert (md.real_path / "stale.kept-2.md").read_bytes() == _version(2)
    assert _trash_check(md.real_path) == (0, 0, set())
    [row] = [r for r in env.audit_rows() if r["event"] == "dream.move_skipped"]
    assert row["why"] == "modified since plan" and row["kept_as"] == "stale.kept-2.md"


def test_recovery_puts_back_an_unchecked_file_a_crash_left_in_the_trash(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass killed right after renaming a swapped-in version (before it looked at what it
    moved): recovery finds the trashed bytes are not the planned ones, puts the file back and
    records no move."""
    from memoryd.trash.recovery import recover

    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)
    real_crash_point = fsops.crash_point
    monkeypatch.setattr(fsops, "crash_point", crash_at("trash.after_move"))
    with pytest.raises(InjectedCrash):
        _pass(rt, md, lambda name: _swap_in(path, _version(2)))
    monkeypatch.setattr(fsops, "crash_point", real_crash_point)
    assert not path.exists() and journal.pending(rt.paths.state_dir)
    [recovery] = recover(rt)
    assert recovery.moved == [] and recovery.not_moved == ["stale.md"]
    assert "put back" in recovery.outcome
    assert path.read_bytes() == _version(2)
    assert _trash_check(md.real_path) == (0, 0, set())
    assert not journal.pending(rt.paths.state_dir)


# Saves both files once per round until the stop file exists, then prints the rounds done.
# After each round it puts the count in `progress` (by rename: read whole or not at all), so
# that the test can wait for rounds instead of hoping the process was scheduled in time.
SWAPPER = """
import os, sys, time
folder, stop, progress = sys.argv[1], sys.argv[2], sys.argv[3]
old = time.time() - 40 * 86400
n = 0
while not os.path.exists(stop):
    n += 1
    for name in ("stale_a.md", "stale_b.md"):
        tmp = os.path.join(folder, "." + name + ".agent.tmp")
        with open(tmp, "wb") as handle:
            handle.write(("---\\nname: " + name[:-3] + "\\ndescription: d\\ntype: project\\n---\\n"
                          "Lived in `src/removed.py`. Version %d.\\n" % (n % 2)).encode())
        os.utime(tmp, (old, old))
        os.replace(tmp, os.path.join(folder, name))
    with open(progress + ".tmp", "w") as handle:
        handle.write(str(n))
    os.replace(progress + ".tmp", progress)
print(n)
"""


def _rounds(progress: Path) -> int:
    """How many rounds the swapper has finished (0 before its first)."""
    try:
        return int(progress.read_text())
    except FileNotFoundError:
        return 0


def test_a_concurrent_process_swapping_files_gets_nothing_unchecked_trashed(
    env: Env, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real process saving two memories by rename in a tight loop while passes run: no
    manifest sha256 differs from its file's bytes and no file sits in the trash unrecorded.
    (Before the fix about one pass in ten moved a version it never checked.)"""
    for name in ("stale_a.md", "stale_b.md"):
        mem(repo, name, "Lived in `src/removed.py`.")
    filler(repo)
    rt, md = env.runtime(), memory_dir(repo / ".claude" / "memory", repo_root=repo)
    put_backs: list[int] = []  # how often the race was hit (printed: it depends on timing)
    real_put_back = trash.put_back

    def counted(*args: object) -> str:
        put_backs.append(1)
        return real_put_back(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(trash, "put_back", counted)
    stop, progress = tmp_path / "stop", tmp_path / "progress"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(md.real_path), str(stop), str(progress)],
        stdout=subprocess.PIPE,
        text=True,
    )
    moved = skipped = 0
    try:
        for i in range(60):
            # Before each pass the swapper has finished more rounds than there were passes, so
            # it runs through all of them (a slow start on a loaded machine once let the passes
            # end before it began), and it is still running (it stops only on the stop file).
            def ahead(passes: int = i) -> bool:
                return _rounds(progress) > passes + 1 or swapper.poll() is not None

            wait_for(ahead, timeout=60, what=f"the swapper's round {i + 2}")
            assert swapper.poll() is None, "the swapper ended before the passes"
            result = _pass(rt, md)
            assert result.status == "completed", result.message
            moved += len(result.moved)
            skipped += len(result.skipped_moves)
    finally:
        stop.touch()
        out, _ = swapper.communicate(timeout=30)
    assert swapper.returncode == 0 and int(out) > 60
    records, mismatches, unchecked = _trash_check(md.real_path)
    assert mismatches == 0 and unchecked == set()
    assert records == moved > 0
    stray = {p.name for p in md.real_path.glob("*.kept-*")}
    assert {p.name for p in md.real_path.glob("stale*")} - stray == {"stale_a.md", "stale_b.md"}
    print(
        f"{moved} moved, {skipped} skipped ({len(put_backs)} put back after the rename, "
        f"{len(stray)} of them under another name), {mismatches} mismatches"
    )
