"""The trash: no-replace moves, restore, rotation with clock sanity, links and odd names."""

import errno
import json
import os
import time
from datetime import date, timedelta
from pathlib import Path

import pytest

from memoryd import fsops, trash
from tests.conftest import Env, tree_digest, write_memory
from tests.test_dream_planted import _filler, mem


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


def test_plan_purge_respects_retention_and_the_clock() -> None:
    """Old day folders go; future ones are age 0; a clock gone back or far forward purges none."""
    today = date(2026, 11, 30)
    names = ["2026-09-01", "2026-11-05", "2026-11-29", "not-a-date", "2026-13-45"]
    assert trash.plan_purge(names, today, 30, today - timedelta(days=1)).purge == ["2026-09-01"]
    assert trash.plan_purge(names, today, 30, None).purge == ["2026-09-01"]
    back = trash.plan_purge(names, today, 30, today + timedelta(days=3))
    assert back.purge == [] and "went back" in back.refused
    ahead = trash.plan_purge(names, today, 30, today - timedelta(days=400))
    assert ahead.purge == [] and "jumped forward" in ahead.refused
    future = trash.plan_purge([*names, "2026-12-25"], today, 30, None)
    assert future.purge == [] and "before the newest trash folder" in future.refused
    assert trash.plan_purge(["2026-12-01"], today, 30, None).purge == []  # a day ahead: age 0


def _old_day(folder: Path, days_ago: int) -> Path:
    day = folder / ".trash" / (date.today() - timedelta(days=days_ago)).isoformat()
    day.mkdir(parents=True)
    return day


def test_purge_removes_a_planted_link_not_its_target(env: Env, cli, repo: Path) -> None:
    """A symlink inside an old day folder pointing at HOME: purge removes the link only."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    precious = env.home / "precious.txt"
    precious.write_text("keep me")
    day = _old_day(folder, 45)
    (day / "evil").symlink_to(env.home)
    (day / "old.md").write_text("---\nname: old\n---\n")
    keep = folder / ".trash" / "keepme"
    keep.mkdir()
    result = cli("trash", "purge", folder)
    assert result.code == 0, result.err
    assert not day.exists()
    assert precious.read_text() == "keep me" and env.home.is_dir()
    assert keep.is_dir(), "a folder not named YYYY-MM-DD is never touched"
    rows = [r for r in env.audit_rows() if r["event"] == "trash.purged"]
    assert rows and rows[0]["days"] == [day.name]


def test_purge_dry_run_and_older_than(env: Env, cli, repo: Path) -> None:
    """`--dry-run` only says what would go; `--older-than` overrides the retention."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 10)
    out = cli("trash", "purge", "--dry-run", "--older-than", "7d", folder)
    assert out.code == 0 and "[DRY RUN] would purge" in out.out and day.exists()
    assert cli("trash", "purge", folder).code == 0 and day.exists()  # 10 < 30 days
    assert cli("trash", "purge", "--older-than", "7d", folder).code == 0 and not day.exists()


def test_clock_gone_back_refuses_purge(env: Env, cli, repo: Path) -> None:
    """If the last run was in the future, the clock went back: nothing is purged, exit 1."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 90)
    env.state.mkdir(parents=True, exist_ok=True)
    later = (date.today() + timedelta(days=5)).isoformat()
    (env.state / "trash-clock.json").write_text(json.dumps({"last_run": later}))
    result = cli("trash", "purge", folder)
    assert result.code == 1 and "went back" in result.out
    assert day.exists()


def test_leftover_aside_folder_is_finished(env: Env, cli, repo: Path) -> None:
    """A purge that crashed after renaming aside is finished by the next purge."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    aside = folder / ".trash" / ".purging-2026-01-01-abc123"
    aside.mkdir(parents=True)
    (aside / "x.md").write_text("x")
    assert cli("trash", "purge", folder).code == 0
    assert not aside.exists()


def test_trash_on_another_filesystem_is_refused(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EXDEV on the move: nothing moves or is copied, the pass fails with a clear message."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    _filler(repo)
    folder = repo / ".claude" / "memory"
    before = {k: v[0] for k, v in tree_digest(folder).items()}

    def cross_device(*args: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(fsops, "renameat2", cross_device)
    monkeypatch.setattr(fsops.os, "link", cross_device)
    result = cli("dream", folder)
    assert result.code == 1
    assert "another filesystem" in result.out
    after = {k: v[0] for k, v in tree_digest(folder).items() if "/.trash/" not in f"/{k}"}
    assert {k: v for k, v in after.items() if not k.startswith("MEMORY")} == {
        k: v for k, v in before.items() if not k.startswith("MEMORY")
    }
    assert [r["event"] for r in env.audit_rows()].count("dream.failed") == 1


def test_trash_that_is_a_symlink_is_refused(env: Env, cli, repo: Path, tmp_path: Path) -> None:
    """A `.trash` that is a symlink out of the dir is never written through."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    _filler(repo)
    folder = repo / ".claude" / "memory"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / ".trash").symlink_to(elsewhere)
    result = cli("dream", folder)
    assert result.code == 1 and "not a plain folder" in result.out
    assert list(elsewhere.iterdir()) == []
    assert (folder / "stale.md").exists()


@pytest.mark.parametrize("name", ['quo"te.md', "new\nline.md", "it's (1).md"])
def test_odd_names_move_and_come_back(env: Env, cli, repo: Path, name: str) -> None:
    """Names with quotes, a newline or parentheses survive a move into the trash and back."""
    path = mem(repo, name, "Lived in `src/removed.py`.")
    original = path.read_bytes()
    _filler(repo)
    result = json.loads(cli("dream", "--json", repo / ".claude" / "memory").out)
    [change] = result["dirs"][0]["changes"]
    assert change["file"] == name and not path.exists()
    assert cli("trash", "restore", change["id"], repo / ".claude" / "memory").code == 0
    assert path.read_bytes() == original


def test_collision_in_the_trash_never_overwrites(env: Env, repo: Path) -> None:
    """A second file of the same name on the same day is stored as name.2.md."""
    folder = repo / ".claude" / "memory"
    day = trash.day_folder(folder, date.today())
    (day / "x.md").write_text("first")
    assert trash.free_name(day, "x.md") == "x.2.md"
    (day / "x.2.md").write_text("second")
    assert trash.free_name(day, "x.md") == "x.3.md"
    write_memory(folder, "x.md")
    with pytest.raises(FileExistsError):
        fsops.move_no_replace(folder, "x.md", day, "x.md")
    assert (day / "x.md").read_text() == "first"


def test_unreadable_memory_is_kept_and_reported(
    cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory the user cannot read is kept where it is, reported, and not considered."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="memoryd-unreadable-"))
    os.chmod(base, 0o777)
    folder = base / "memory"
    write_memory(folder, "secret.md", body="Lived in `src/removed.py`.\n")
    write_memory(folder, "ok.md")
    os.chmod(folder, 0o777)
    os.chmod(folder / "ok.md", 0o666)
    os.chmod(folder / "secret.md", 0o000)
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    as_root = os.geteuid() == 0
    try:
        if as_root:
            os.seteuid(65534)  # root reads anything; act as an ordinary user
        result = cli("dream", "--json", folder)
    finally:
        if as_root:
            os.seteuid(0)
    try:
        report = json.loads(result.out)["dirs"][0]
        assert "secret.md" in report["unparseable"]
        assert report["changes"] == []
        assert (folder / "secret.md").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_rotation_runs_at_the_start_of_a_pass(env: Env, cli, repo: Path) -> None:
    """A dream pass purges day folders past retention before it starts."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 31)
    time.sleep(0)  # the clock file is written by the pass itself
    assert cli("dream", folder).code == 0
    assert not day.exists()


def test_a_pass_over_midnight_keeps_one_day_folder(env: Env, repo: Path) -> None:
    """The day is taken once: records, manifest and the files' folder agree even when the
    date changes while the pass runs."""
    from dataclasses import replace as dc_replace

    from memoryd.config import Config
    from memoryd.discover import explicit_dirs
    from memoryd.dream.run import RepoCache, dream_dir

    _filler(repo)
    body = "the staging deploy runs through the blue green pipeline every friday evening"
    mem(repo, "older.md", body, age=50)
    mem(repo, "newer.md", body + " again", age=40)
    rt = env.runtime()
    days = iter([date(2026, 5, 1)] + [date(2026, 5, 2)] * 50)  # midnight after the first look
    rt.today = lambda: next(days)  # type: ignore[method-assign]
    md = explicit_dirs(repo / ".claude" / "memory", Config())[0]
    md = dc_replace(md, repo_root=repo, repo_reason="test")
    result = dream_dir(rt, md, repos=RepoCache())
    assert [r.original_name for r in result.moved] == ["older.md"]
    (entry,) = trash.entries(md.real_path)
    assert entry.stored_path.is_file() and entry.record.day == entry.folder.name


def test_a_torn_manifest_tail_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    """After a power cut the last line may be torn or zero-filled: a record appended after it
    must stay readable (and the torn line stays a line of its own)."""
    folder = tmp_path / "memory" / ".trash" / "2026-05-01"
    folder.mkdir(parents=True)
    good = {"id": "a1", "original_name": "a.md", "stored_name": "a.md", "day": "2026-05-01"}
    for tail in (b'{"id": "torn', b"\0\0\0\0"):
        (folder / trash.MANIFEST).write_bytes(json.dumps(good).encode() + b"\n" + tail)
        trash.append_record(tmp_path / "memory", "2026-05-01", json.dumps({**good, "id": "b2"}))
        ids = [row["id"] for row in trash.manifest_rows(tmp_path / "memory", "2026-05-01")]
        assert ids == ["a1", "b2"]
        with trash.Mover(tmp_path / "memory", date(2026, 5, 1)) as mover:
            fd = trash.open_manifest(mover._folder_fd)
            os.close(fd)
        assert (folder / trash.MANIFEST).read_bytes().endswith(b"\n")


def test_nothing_is_purged_listed_or_restored_through_a_symlinked_trash(
    env: Env, cli, repo: Path, tmp_path: Path
) -> None:
    """`.trash` -> a folder elsewhere holding a date-named folder: purge, dream, list and the
    dry run never reach into it (it could be HOME)."""
    folder = repo / ".claude" / "memory"
    mem(repo, "a.md", "Plain words.")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "2020-01-01").mkdir(parents=True)
    (elsewhere / "2020-01-01" / "keep.txt").write_text("not memoryd's\n")
    (elsewhere / "2020-01-01" / trash.MANIFEST).write_text(
        json.dumps({"id": "x1", "original_name": "k.md", "stored_name": "keep.txt",
                    "day": "2020-01-01", "sha256": "0", "size": 1, "reason": "stale",
                    "pass_id": "p", "time": "t"}) + "\n"
    )
    (folder / ".trash").symlink_to(elsewhere)
    dry = cli("trash", "purge", "--dry-run", folder)
    assert "2020-01-01" not in dry.out.replace(str(elsewhere), "")
    purge = cli("trash", "purge", folder)
    assert "not a plain folder" in purge.out + purge.err
    cli("dream", folder)
    assert (elsewhere / "2020-01-01" / "keep.txt").read_text() == "not memoryd's\n"
    listed = cli("trash", "list", folder)
    assert "not a plain folder" in listed.err and "x1" not in listed.out
    assert cli("trash", "restore", "x1", folder).code == 1
    assert not (folder / "k.md").exists()
    rows = [r for r in env.audit_rows() if r["event"] == "trash.purged"]
    assert rows and all(r["days"] == [] and "not a plain folder" in r["refused"] for r in rows)


def test_a_symlinked_day_folder_is_neither_planned_nor_purged(
    env: Env, cli, repo: Path, tmp_path: Path
) -> None:
    folder = repo / ".claude" / "memory"
    mem(repo, "a.md", "Plain words.")
    (folder / ".trash").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    (folder / ".trash" / "2020-01-01").symlink_to(outside)
    assert "2020-01-01" not in cli("trash", "purge", "--dry-run", folder).out
    cli("trash", "purge", folder)
    assert (outside / "keep.txt").exists() and (folder / ".trash" / "2020-01-01").is_symlink()


def test_a_move_whose_record_cannot_be_written_is_undone(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the manifest line is written: the file goes back, the pass fails with
    a message saying what to do, and nothing sits in the trash without its record."""
    folder = repo / ".claude" / "memory"
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    original = path.read_bytes()
    _filler(repo)
    assert cli("index", folder).code == 0
    real = trash._write_line

    def full(fd: int, line: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trash, "_write_line", full)
    result = cli("dream", "--json", folder)
    [report] = json.loads(result.out)["dirs"]
    assert result.code == 1 and report["status"] == "failed"
    assert "Free some disk space" in report["message"]
    assert path.read_bytes() == original
    assert [p.name for p in (folder / ".trash").rglob("*.md")] == []
    assert "stale.md" in (folder / "MEMORY.md").read_text()
    monkeypatch.setattr(trash, "_write_line", real)
    assert cli("dream", folder).code == 0 and not path.exists()
    (entry,) = trash.entries(folder)
    assert entry.record.original_name == "stale.md" and entry.record.size == len(original)


def _crashed_pass(env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A dream pass killed right after its first move (of stale.md): a journal is pending.
    Each patch is put back by name: monkeypatch.undo() would also undo the private HOME."""
    from dataclasses import replace as dc_replace

    from memoryd.config import Config
    from memoryd.discover import explicit_dirs
    from memoryd.dream.run import RepoCache, dream_dir

    class Crash(BaseException):
        pass

    def crash_after_move(label: str) -> None:
        if label == "trash.after_move":
            raise Crash

    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    _filler(repo)
    rt = env.runtime()
    md = dc_replace(explicit_dirs(repo / ".claude" / "memory", Config())[0], repo_root=repo,
                    repo_reason="test")
    real_crash_point = fsops.crash_point
    monkeypatch.setattr(fsops, "crash_point", crash_after_move)
    with pytest.raises(Crash):
        dream_dir(rt, md, repos=RepoCache())
    monkeypatch.setattr(fsops, "crash_point", real_crash_point)
    return rt, md, path


def test_recovery_on_a_full_disk_keeps_the_journal_and_finishes_later(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash right after a move leaves a journal; recovery that cannot write the missing
    manifest record (disk full) neither crashes nor forgets it, and writes it, with the file's
    size, once it can."""
    from memoryd import journal
    from memoryd.recovery import recover

    rt, md, path = _crashed_pass(env, repo, monkeypatch)
    assert journal.pending(rt.paths.state_dir) and not path.exists()
    size = next(md.real_path.glob(".trash/*/stale.md")).stat().st_size  # moved, not recorded

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    real_append = trash.append_record
    monkeypatch.setattr(trash, "append_record", full)
    [first] = recover(rt)
    assert first.unrecorded == ["stale.md"] and journal.pending(rt.paths.state_dir)
    assert trash.entries(md.real_path) == []
    monkeypatch.setattr(trash, "append_record", real_append)
    [second] = recover(rt)
    assert second.unrecorded == [] and not journal.pending(rt.paths.state_dir)
    (entry,) = trash.entries(md.real_path)
    assert entry.record.original_name == "stale.md" and entry.record.size == size


def test_recovery_through_a_trash_made_a_symlink_since_neither_crashes_nor_follows_it(
    env: Env, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd import journal
    from memoryd.recovery import recover

    rt, _, _ = _crashed_pass(env, repo, monkeypatch)
    folder = repo / ".claude" / "memory"
    aside = tmp_path / "trash-aside"
    (folder / ".trash").rename(aside)
    (folder / ".trash").symlink_to(aside)
    manifests = {p: p.read_bytes() for p in aside.rglob(trash.MANIFEST)}
    [recovery] = recover(rt)
    assert any("not a plain folder" in p for p in recovery.problems)
    assert journal.pending(rt.paths.state_dir)  # kept for after the fix
    assert {p: p.read_bytes() for p in aside.rglob(trash.MANIFEST)} == manifests


def test_a_dry_purge_recovers_nothing_and_writes_nothing(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd import journal

    rt, _, _ = _crashed_pass(env, repo, monkeypatch)
    before = tree_digest(env.state)
    rows = len(env.audit_rows())
    assert cli("trash", "purge", "--dry-run", repo / ".claude" / "memory").code == 0
    assert tree_digest(env.state) == before and len(env.audit_rows()) == rows
    assert journal.pending(rt.paths.state_dir)


def test_a_trash_swapped_for_a_link_after_its_check_is_not_moved_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The day folder is checked, then opened: a `.trash` made a symlink in between is
    refused when the mover opens it, never followed."""
    from memoryd.errors import UnsafeFilesystemOperation

    folder = tmp_path / "memory"
    write_memory(folder, "a.md")
    elsewhere = tmp_path / "elsewhere"
    real_day_folder = trash.day_folder

    def checked_then_swapped(memory_dir: Path, day: date) -> Path:
        made = real_day_folder(memory_dir, day)
        (memory_dir / trash.TRASH_DIR).rename(elsewhere)
        (memory_dir / trash.TRASH_DIR).symlink_to(elsewhere)
        return made

    monkeypatch.setattr(trash, "day_folder", checked_then_swapped)
    with pytest.raises(UnsafeFilesystemOperation):
        trash.Mover(folder, date(2026, 5, 1))
    assert (folder / "a.md").exists() and list(elsewhere.iterdir()) == [elsewhere / "2026-05-01"]
