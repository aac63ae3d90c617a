"""The trash: no-replace moves, restore, rotation with clock sanity, links and odd names."""

import errno
import hashlib
import json
import os
import stat
import time
from dataclasses import replace
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.daemon import housekeeping
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.storage.state import dir_key
from memoryd.trash import days as trash_days
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash
from memoryd.versions import witness
from tests.conftest import Env, InjectedCrash, crash_at, tree_digest, write_memory
from tests.helpers import filler, mem, memory_dir, memoryd_child, plant_day, watched_for


def test_plan_purge_respects_retention_and_the_clock() -> None:
    """Old day folders go; future ones are age 0; a clock gone back or far forward purges none."""
    today = date(2026, 11, 30)
    names = ["2026-09-01", "2026-11-05", "2026-11-29", "not-a-date", "2026-13-45"]
    assert trash_days.plan_purge(names, today, 30, today - timedelta(days=1)).purge == [
        "2026-09-01"
    ]
    assert trash_days.plan_purge(names, today, 30, None).purge == ["2026-09-01"]
    back = trash_days.plan_purge(names, today, 30, today + timedelta(days=3))
    assert back.purge == [] and "went back" in back.refused
    ahead = trash_days.plan_purge(names, today, 30, today - timedelta(days=400))
    assert ahead.purge == [] and "jumped forward" in ahead.refused
    future = trash_days.plan_purge([*names, "2026-12-25"], today, 30, None)
    assert future.purge == [] and "before the newest trash folder" in future.refused
    assert trash_days.plan_purge(["2026-12-01"], today, 30, None).purge == []  # a day ahead: age 0


def _old_day(folder: Path, days_ago: int) -> Path:
    """A day folder with its manifest, named and recorded `days_ago` days back (memoryd has
    not watched it yet: see watched_for)."""
    when = datetime.now() - timedelta(days=days_ago)
    return plant_day(folder, when.date(), when)


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
    watched_for(env.state, folder, 45)
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
    watched_for(env.state, folder, 10)
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
    witness.write_record(env.state, {"last_run": later})
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
    filler(repo)
    folder = repo / ".claude" / "memory"
    before = {k: v[0] for k, v in tree_digest(folder).items()}

    def cross_device(*args: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(fsops, "renameat2", cross_device)
    monkeypatch.setattr(os, "link", cross_device)
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
    filler(repo)
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
    filler(repo)
    result = json.loads(cli("dream", "--json", repo / ".claude" / "memory").out)
    [change] = result["dirs"][0]["changes"]
    assert change["file"] == name and not path.exists()
    assert cli("trash", "restore", change["id"], repo / ".claude" / "memory").code == 0
    assert path.read_bytes() == original


def test_collision_in_the_trash_never_overwrites(env: Env, repo: Path) -> None:
    """A second file of the same name on the same day is stored as name.2.md.trashed (a file
    of the older plain naming counts as taken too)."""
    folder = repo / ".claude" / "memory"
    day = trash.day_folder(folder, date.today())
    assert trash.free_name(day, "x.md") == "x.md.trashed"
    (day / "x.md").write_text("first")  # as an older memoryd stored it
    assert trash.free_name(day, "x.md") == "x.2.md.trashed"
    (day / "x.2.md.trashed").write_text("second")
    assert trash.free_name(day, "x.md") == "x.3.md.trashed"
    assert trash.free_name(day, "x.md", {"x.3.md.trashed"}) == "x.4.md.trashed"
    write_memory(folder, "x.md")
    with (
        fsops.open_dir(folder) as src,
        fsops.open_dir(day) as dst,
        pytest.raises(FileExistsError),
    ):
        fsops.rename_no_replace(src, "x.md", dst, "x.md", where=(folder, day))
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
    watched_for(env.state, folder, 31)
    assert cli("dream", folder).code == 0
    assert not day.exists()


def test_a_pass_over_midnight_keeps_one_day_folder(env: Env, repo: Path) -> None:
    """The day is taken once: records, manifest and the files' folder agree even when the
    date changes while the pass runs."""
    from dataclasses import replace as dc_replace

    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir

    filler(repo)
    body = "the staging deploy runs through the blue green pipeline every friday evening"
    mem(repo, "older.md", body, age=50)
    mem(repo, "newer.md", body + " again", age=40)
    rt = env.runtime()
    days = iter([date(2026, 5, 1)] + [date(2026, 5, 2)] * 50)  # midnight after the first look
    rt = replace(rt, today=lambda: next(days))
    md = memory_dir(repo / ".claude" / "memory")
    md = dc_replace(md, repo_root=repo, repo_reason="test")
    result = dream_dir(rt, md, repos=RepoCache())
    assert [r.original_name for r in result.moved] == ["older.md"]
    (entry,) = trash_manifest.entries(md.real_path)
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
        ids = [row["id"] for row in trash_manifest.manifest_rows(tmp_path / "memory", "2026-05-01")]
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
        json.dumps(
            {
                "id": "x1",
                "original_name": "k.md",
                "stored_name": "keep.txt",
                "day": "2020-01-01",
                "sha256": "0",
                "size": 1,
                "reason": "stale",
                "pass_id": "p",
                "time": "t",
            }
        )
        + "\n"
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
    filler(repo)
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
    trashed = (folder / ".trash").rglob("*")
    assert [p.name for p in trashed if p.is_file() and p.name != trash.MANIFEST] == []
    assert "stale.md" in (folder / "MEMORY.md").read_text()
    monkeypatch.setattr(trash, "_write_line", real)
    assert cli("dream", folder).code == 0 and not path.exists()
    (entry,) = trash_manifest.entries(folder)
    assert entry.record.original_name == "stale.md" and entry.record.size == len(original)


def _crashed_pass(env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch):
    """A dream pass killed right after its first move (of stale.md): a journal is pending.
    Each patch is put back by name: monkeypatch.undo() would also undo the private HOME."""

    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir

    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt = env.runtime()
    md = memory_dir(repo / ".claude" / "memory", repo_root=repo)
    real_crash_point = fsops.crash_point
    monkeypatch.setattr(fsops, "crash_point", crash_at("trash.after_move"))
    with pytest.raises(InjectedCrash):
        dream_dir(rt, md, repos=RepoCache())
    monkeypatch.setattr(fsops, "crash_point", real_crash_point)
    return rt, md, path


def test_recovery_on_a_full_disk_keeps_the_journal_and_finishes_later(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash right after a move leaves a journal; recovery that cannot write the missing
    manifest record (disk full) neither crashes nor forgets it, and writes it, with the file's
    size, once it can."""
    from memoryd.trash import journal
    from memoryd.trash.recovery import recover

    rt, md, path = _crashed_pass(env, repo, monkeypatch)
    assert journal.pending(rt.paths.state_dir) and not path.exists()
    size = next(md.real_path.glob(".trash/*/stale.md.trashed")).stat().st_size  # not recorded

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    real_append = trash.append_record
    monkeypatch.setattr(trash, "append_record", full)
    [first] = recover(rt)
    assert first.unrecorded == ["stale.md"] and journal.pending(rt.paths.state_dir)
    assert trash_manifest.entries(md.real_path) == []
    monkeypatch.setattr(trash, "append_record", real_append)
    [second] = recover(rt)
    assert second.unrecorded == [] and not journal.pending(rt.paths.state_dir)
    (entry,) = trash_manifest.entries(md.real_path)
    assert entry.record.original_name == "stale.md" and entry.record.size == size


def test_recovery_through_a_trash_made_a_symlink_since_neither_crashes_nor_follows_it(
    env: Env, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.trash import journal
    from memoryd.trash.recovery import recover

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
    from memoryd.trash import journal

    rt, _, _ = _crashed_pass(env, repo, monkeypatch)

    def state() -> dict[str, tuple[str, int]]:
        # Every file but SQLite's shared-memory index (`-shm`), which any reader of a WAL
        # database updates and which holds no state (SQLite rebuilds it from the WAL).
        return {k: v for k, v in tree_digest(env.state).items() if not k.endswith("-shm")}

    before = state()
    rows = len(env.audit_rows())
    assert cli("trash", "purge", "--dry-run", repo / ".claude" / "memory").code == 0
    assert state() == before and len(env.audit_rows()) == rows
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


# --- retention rests on when memoryd moved a file, by clocks it can vouch for -----------------
class FakeClocks:
    """The wall clock (and its date) and the boot clock, set by the test."""

    def __init__(self, rt: Runtime, wall: float) -> None:
        self.wall, self.boot_id, self.uptime = wall, "boot-1", 1000.0
        self.rt = replace(  # the Runtime on these clocks
            rt,
            clock=lambda: self.wall,
            today=lambda: date.fromtimestamp(self.wall),
            boot=lambda: (self.boot_id, self.uptime),
        )

    def advance(self, seconds: float, *, wall: float | None = None) -> None:
        """Real time passes; the wall clock says `wall` (else it keeps time too)."""
        self.uptime += seconds
        self.wall = self.wall + seconds if wall is None else wall


def _pass(rt: Runtime, repo: Path) -> Path:
    """What `memoryd dream` does: rotate, then a pass that trashes stale.md; its day folder."""

    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir

    md = memory_dir(repo / ".claude" / "memory", repo_root=repo)
    housekeeping.rotate(rt, [md])
    result = dream_dir(rt, md, repos=RepoCache())
    assert [r.original_name for r in result.moved] == ["stale.md"]
    return md.real_path / trash.TRASH_DIR / result.moved[0].day


def _as_the_clock_wrote_it(day: Path, wall: float) -> None:
    """The manifest's times as a wrong system clock writes them (the pass takes the record's
    time from the system clock, which the test cannot set)."""
    stamp = datetime.fromtimestamp(wall).astimezone().isoformat(timespec="seconds")
    rows = [json.loads(line) for line in (day / trash.MANIFEST).read_text().splitlines()]
    (day / trash.MANIFEST).write_text(
        "".join(json.dumps({**r, "time": stamp}) + "\n" for r in rows)
    )


def _rotate(rt: Runtime, repo: Path, **kw: object) -> housekeeping.Rotation:
    md = memory_dir(repo / ".claude" / "memory")
    [result] = housekeeping.rotate(rt, [md], **kw)  # type: ignore[arg-type]
    return result


def test_a_pass_under_a_clock_set_in_the_past_is_not_purged_once_it_is_corrected(
    env: Env, repo: Path
) -> None:
    """The clock is 100 days behind during a pass: its moves are filed under that date. The
    first purge after the clock is put right keeps them; they go keep_days of real time later."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.", age=400)
    filler(repo)
    rt = env.runtime()
    true_now = time.time()
    clocks = FakeClocks(rt, true_now)
    rt = clocks.rt
    _rotate(rt, repo)  # memoryd ran before, with the clock right
    clocks.advance(600, wall=true_now - 100 * 86400)
    day = _pass(rt, repo)
    _as_the_clock_wrote_it(day, clocks.wall)
    assert day.name == date.fromtimestamp(true_now - 100 * 86400).isoformat()
    clocks.advance(600, wall=true_now + 1200)  # put right, minutes after the pass
    kept = _rotate(rt, repo)
    assert day.is_dir() and kept.purged == [] and [d for d, _ in kept.kept] == [day.name]
    assert "watched it for 0.0 of 30 days" in kept.kept[0][1]
    (entry,) = trash_manifest.entries(day.parent.parent)
    assert entry.stored_path.is_file()
    clocks.advance(29 * 86400)
    assert _rotate(rt, repo).purged == [] and day.is_dir()
    clocks.advance(2 * 86400)  # 31 days of real time since memoryd first saw it
    assert _rotate(rt, repo).purged == [day.name] and not day.exists()


@pytest.mark.parametrize("reboot", [False, True], ids=["same boot", "after a reboot"])
def test_a_clock_a_year_ahead_purges_nothing_recent(env: Env, repo: Path, reboot: bool) -> None:
    """Moves made today, then the clock jumps 365 days ahead (under the 366-day limit): no
    purge removes them, nor today's folder, by the retention or by a person's --older-than
    30d, however many readings that wrong clock gives, until 30 days of real time passed."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    rt = env.runtime()
    clocks = FakeClocks(rt, time.time())
    rt = clocks.rt
    day = _pass(rt, repo)
    digest = tree_digest(day)
    if reboot:
        clocks.boot_id, clocks.uptime = "boot-2", 300.0
    clocks.advance(600, wall=clocks.wall + 365 * 86400)
    first = _rotate(rt, repo)
    assert first.purged == [] and first.refused == "" and [d for d, _ in first.kept] == [day.name]
    for _ in range(20):  # the wrong clock keeps time from there: an hour per reading
        clocks.advance(3600)
        assert _rotate(rt, repo, keep_days=30).purged == []
    assert tree_digest(day) == digest
    clocks.advance(30 * 86400)
    assert _rotate(rt, repo).purged == [day.name]


def test_todays_folder_is_never_purged_even_by_older_than_0d(env: Env, cli, repo: Path) -> None:
    folder = repo / ".claude" / "memory"
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    assert cli("dream", folder).code == 0
    [day] = (folder / ".trash").iterdir()
    result = cli("trash", "purge", "--older-than", "0d", folder)
    assert result.code == 0 and day.is_dir() and "purged" not in result.out


@pytest.mark.parametrize(
    "manifest",
    [None, b"", b"not json\n", b'{"id": "x"}\n'],
    ids=["no manifest", "empty", "not JSON", "no valid record"],
)
def test_a_planted_folder_without_a_manifest_is_kept_and_reported_once(
    env: Env, cli, repo: Path, manifest: bytes | None
) -> None:
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = folder / ".trash" / "2020-01-01"
    day.mkdir(parents=True)
    (day / "x.md").write_text("a trashed memory\n")
    if manifest is not None:
        (day / trash.MANIFEST).write_bytes(manifest)
    watched_for(env.state, folder, 45)
    digest = tree_digest(day)
    first = cli("trash", "purge", folder)
    assert first.code == 1 and f"{day}: kept" in first.out and "by hand" in first.out
    assert cli("trash", "purge", folder).code == 1 and cli("dream", folder).code == 0
    assert tree_digest(day) == digest
    rows = [r for r in env.audit_rows() if r["event"] == "trash.kept"]
    assert len(rows) == 1 and rows[0]["day"] == "2020-01-01" and rows[0]["level"] == "warning"
    assert not [r for r in env.audit_rows() if r["event"] == "trash.purged" and r["days"]]


def test_a_record_within_keep_days_of_the_high_water_mark_is_kept() -> None:
    """Records stamped by a clock a year ahead, the clock since put right and 40 days watched:
    a record within keep_days of the latest time memoryd saw still holds the folder. (A purge
    also refuses while the clock is behind the last run's date; this holds without that.)"""
    now = time.time()
    ahead = now + 365 * 86400
    facts = trash_days.DayFacts("1 2 3 4 5 6", [ahead])
    clock = housekeeping.Clock(now, ahead, 40 * 86400)
    when = housekeeping._When(date.fromtimestamp(now), None, clock)
    why = housekeeping._held_because("2020-01-01", facts, 0.0, when, 30)
    assert why is not None and "by a clock memoryd has seen" in why
    later = housekeeping.Clock(ahead + 31 * 86400, ahead + 31 * 86400, 400 * 86400)
    when = housekeeping._When(date.fromtimestamp(later.wall), None, later)
    assert housekeeping._held_because("2020-01-01", facts, 0.0, when, 30) is None


# --- names read from a manifest -----------------------------------------------------------------
def _hostile_row(folder: Path, outside: Path, field_name: str, value: str) -> tuple[Path, str]:
    """A day folder of today holding a planted manifest line; the stored file matches its sha."""
    day = folder / ".trash" / date.today().isoformat()
    day.mkdir(parents=True)
    data = b"planted\n"
    (day / "victim.md").write_bytes(data)
    if value == "STORED-OUTSIDE":
        value = os.path.relpath(outside / "victim.txt", day)
        data = (outside / "victim.txt").read_bytes()
    if value == "ORIGINAL-OUTSIDE":  # lands exactly in `outside` when taken as a path
        value = os.path.relpath(outside / "x.md", folder)
    row = {
        "id": "ab12cd34ef",
        "original_name": "victim.md",
        "stored_name": "victim.md",
        "day": day.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "reason": "stale",
        "pass_id": "p",
        "time": datetime.now().astimezone().isoformat(),
    }
    row[field_name] = value
    (day / trash.MANIFEST).write_text(json.dumps(row) + "\n")
    return day, str(row["id"])


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("original_name", "../../outside/x"),
        ("original_name", "ORIGINAL-OUTSIDE"),
        ("stored_name", "STORED-OUTSIDE"),
        ("original_name", "sub/x.md"),
        ("original_name", ".hidden.md"),
        ("original_name", "MEMORY.md"),
        ("original_name", "x.md\0.md"),
        ("original_name", "x" * 253 + ".md"),
        ("original_name", "notes.txt"),
        ("stored_name", "manifest.jsonl"),
        ("stored_name", ".."),
        ("day", "../2020-01-01"),
        ("id", "../../x"),
    ],
)
def test_a_hostile_manifest_name_is_reported_and_never_acted_on(
    env: Env, cli, repo: Path, tmp_path: Path, field_name: str, value: str
) -> None:
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("someone else's file\n")
    day, key = _hostile_row(folder, outside, field_name, value)
    before = (tree_digest(outside), tree_digest(folder))
    listed = cli("trash", "list", folder)
    assert listed.code == 1 and f"INVALID  {day / trash.MANIFEST} line 1:" in listed.out
    assert "The trash is empty." in listed.out  # not shown as a restorable entry
    doc = json.loads(cli("trash", "list", "--json", folder).out)
    assert doc["trash"] == [] and doc["invalid"][0]["manifest"] == str(day / trash.MANIFEST)
    restored = cli("trash", "restore", key if field_name != "id" else value, folder)
    assert restored.code == 1 and "victim" not in os.listdir(folder)
    if field_name != "id":
        assert f"{day / trash.MANIFEST} line 1" in restored.err
    cli("trash", "purge", folder)
    assert (tree_digest(outside), tree_digest(folder)) == before
    assert sorted(os.listdir(outside)) == ["victim.txt"]


def test_a_hostile_restored_name_is_reported(env: Env, cli, repo: Path) -> None:
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 0)
    with (day / trash.MANIFEST).open("a") as manifest:
        manifest.write(json.dumps({"restored": "x", "as": "../../y"}) + "\n")
    listed = cli("trash", "list", folder)
    assert f"{day / trash.MANIFEST} line 2: its restored name" in listed.out


def test_restore_checks_the_names_of_an_entry_it_is_given(tmp_path: Path) -> None:
    """Whoever built the entry, restore itself refuses a name the mover could not write."""
    from memoryd.errors import MemorydError

    folder = tmp_path / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 0)
    (entry,) = trash_manifest.entries(folder)
    record = {**json.loads(entry.record.to_json()), "original_name": "../escaped.md"}
    bad = trash_manifest.Entry(trash.TrashRecord(**record), entry.folder)
    with pytest.raises(MemorydError, match=r"manifest\.jsonl"):
        trash_manifest.restore(folder, bad)
    assert not (tmp_path / "escaped.md").exists() and (day / "old.md").exists()


# --- special files and sizes in the trash (DESIGN §2.7) -----------------------------------------
def test_a_fifo_manifest_hangs_no_trash_command(env: Env, repo: Path) -> None:
    """A FIFO planted as a day folder's manifest.jsonl (the memory dir is the agents' to write)
    is reported by `trash list`, and list, restore and purge all finish; the old code's list
    and restore opened it for reading and waited for a writer for ever."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    good = _old_day(folder, 3)
    (entry,) = trash_manifest.entries(folder)
    planted = folder / ".trash" / "2020-01-01"
    planted.mkdir()
    (planted / "x.md").write_text("---\nname: x\n---\n")
    os.mkfifo(planted / trash.MANIFEST)
    listed = memoryd_child(env, "trash", "list", folder)
    assert listed.returncode == 1, listed.stderr
    assert f"INVALID  {planted / trash.MANIFEST}: it is a FIFO" in listed.stdout
    assert entry.record.id in listed.stdout  # the good day is listed all the same
    restored = memoryd_child(env, "trash", "restore", entry.record.id, folder)
    assert restored.returncode == 0, restored.stderr
    assert (folder / "old.md").exists() and not (good / "old.md").exists()
    purged = memoryd_child(env, "trash", "purge", folder)
    assert purged.returncode == 1 and f"{planted}: kept" in purged.stdout
    assert stat.S_ISFIFO(os.lstat(planted / trash.MANIFEST).st_mode)


def test_a_fifo_as_todays_manifest_moves_nothing(env: Env, repo: Path) -> None:
    """A FIFO as today's manifest.jsonl: the pass refuses it before its first move (its records
    would go into the pipe and be lost), names it, and the memory stays where it is."""
    folder = repo / ".claude" / "memory"
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    today = folder / ".trash" / date.today().isoformat()
    today.mkdir(parents=True)
    os.mkfifo(today / trash.MANIFEST)
    done = memoryd_child(env, "dream", "--json", folder)
    [report] = json.loads(done.stdout)["dirs"]
    assert done.returncode == 1 and report["status"] == "failed", done.stderr
    assert f"{today / trash.MANIFEST} is a FIFO" in report["message"]
    assert path.exists() and os.listdir(today) == [trash.MANIFEST]
    assert not trash_manifest.contents(folder).entries


def test_a_symlinked_manifest_is_reported_and_never_followed(
    env: Env, cli, repo: Path, tmp_path: Path
) -> None:
    """manifest.jsonl as a link to a manifest elsewhere whose record names a file in the day
    folder: reported, its record neither listed nor restorable (the old code said nothing)."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 3)
    (entry,) = trash_manifest.entries(folder)
    outside = tmp_path / "outside.jsonl"
    (day / trash.MANIFEST).rename(outside)
    (day / trash.MANIFEST).symlink_to(outside)
    listed = cli("trash", "list", folder)
    assert listed.code == 1 and entry.record.id not in listed.out.split("INVALID")[0]
    assert f"INVALID  {day / trash.MANIFEST}: it is a symbolic link" in listed.out
    restored = cli("trash", "restore", entry.record.id, folder)
    assert restored.code == 1 and (day / "old.md").exists() and not (folder / "old.md").exists()


def test_a_huge_manifest_is_read_to_its_limit_and_the_rest_reported(
    env: Env, cli, repo: Path
) -> None:
    """A record line over 1 MiB and the lines past 64 MiB (trash_manifest.MANIFEST_LINE_MAX,
    MANIFEST_MAX_BYTES) are reported, never listed as restorable; the records before them are.
    The old code read every line whole, at any length: it listed both planted records."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md")
    day = _old_day(folder, 3)
    (first,) = trash_manifest.entries(folder)
    good = json.loads(first.record.to_json())
    long_row = {
        **good,
        "id": "aaaaaaaaaa",
        "details": {"pad": "x" * trash_manifest.MANIFEST_LINE_MAX},
    }
    late_row = {**good, "id": "bbbbbbbbbb"}
    filler = (
        b"#" * (trash_manifest.MANIFEST_LINE_MAX - 1) + b"\n"
    )  # at the line limit: read, no JSON
    with (day / trash.MANIFEST).open("ab") as manifest:
        manifest.write(json.dumps(long_row).encode() + b"\n")
        for _ in range(trash_manifest.MANIFEST_MAX_BYTES // len(filler)):
            manifest.write(filler)
        manifest.write(json.dumps(late_row).encode() + b"\n")
    assert (day / trash.MANIFEST).stat().st_size > trash_manifest.MANIFEST_MAX_BYTES
    doc = json.loads(cli("trash", "list", "--json", folder).out)
    assert [r["id"] for r in doc["trash"]] == [first.record.id]
    problems = {r["line"]: r["problem"] for r in doc["invalid"]}
    with (day / trash.MANIFEST).open("rb") as manifest:  # the line that crosses the limit
        limit = manifest.read(trash_manifest.MANIFEST_MAX_BYTES).count(b"\n") + 1
    assert problems == {
        2: f"the line is over {trash_manifest.MANIFEST_LINE_MAX} bytes: none memoryd wrote",
        limit: f"the manifest is over {trash_manifest.MANIFEST_MAX_BYTES} bytes: this line and all "
        "after it are not read",
    }
    assert cli("trash", "restore", "bbbbbbbbbb", folder).code == 1


def test_fifos_in_the_state_dir_hang_no_command(env: Env, cli, repo: Path) -> None:
    """Every state file a pass and a purge read (a pending journal, the old layout's state,
    trash-days record, cache, facts and restore pins) replaced by a FIFO: `dream` and `trash
    purge` finish, each FIFO read is named, the old files of things memoryd rebuilds are gone
    and the pins are left for a person (named by each command). The old code waited on the
    first FIFO it read (the journal, at recovery) for ever."""
    folder = repo / ".claude" / "memory"
    mem(repo, "a.md", "Plain words.")
    filler(repo)
    assert cli("dream", folder).code == 0 and cli("trash", "purge", folder).code == 0
    key = dir_key(folder.resolve())
    # The old layout's files (imported once, then removed), as FIFOs.
    suffixes = (".json", ".trash-days.json", ".cache", ".facts")
    old = [env.state / "dirs" / f"{key}{suffix}" for suffix in suffixes]
    pins = env.state / "dirs" / f"{key}.restored"
    for path in [*old, pins]:
        os.mkfifo(path)
    (env.state / "journal").mkdir(mode=0o700, exist_ok=True)
    os.mkfifo(env.state / "journal" / "0123456789.jsonl")
    dreamt = memoryd_child(env, "dream", folder)
    assert dreamt.returncode == 0, dreamt.stderr
    purged = memoryd_child(env, "trash", "purge", folder)
    assert purged.returncode == 0, purged.stderr
    said = dreamt.stderr + purged.stderr
    assert all(said.count(str(p)) == 1 for p in old[:2]), said
    assert dreamt.stderr.count(str(pins)) == purged.stderr.count(str(pins)) == 1
    assert not any(os.path.lexists(p) for p in old) and stat.S_ISFIFO(pins.lstat().st_mode)
