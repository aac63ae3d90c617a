"""Crash safety: SIGKILL at every step of a dream pass and of an index write loses nothing."""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from memoryd.indexing.scan import scan_dir
from memoryd.model.index import pointer_targets, split_lines
from memoryd.storage.audit import iter_lines
from tests.helpers import filler, mem, plant_day, state_rows, watched_for

JOURNALS = "SELECT pass_id FROM journal_pass"  # the pass journals left in a state store
HAND_WRITTEN = "# Project notes\n\nKeep these words exactly.\n\n"


def _template(root: Path) -> Path:
    repo = root / "app"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / ".claude" / "memory").mkdir(parents=True)
    mem(repo, "stale_a.md", "Lived in `src/removed_a.py`.")
    mem(repo, "stale_b.md", "Lived in `src/removed_b.py`.")
    deploy = (
        "Deploy staging by running the release script with the canary flag enabled "
        "first then promote production after verification checks complete"
    )
    mem(repo, "dup_old.md", deploy + " successfully", age=50)
    mem(repo, "dup_new.md", deploy + " fine", age=20)
    filler(repo, 12)
    folder = repo / ".claude" / "memory"
    pointers = "".join(f"- [{p.stem}]({p.name}) — d\n" for p in sorted(folder.glob("*.md")))
    (folder / "MEMORY.md").write_text(HAND_WRITTEN + pointers + "\n## Footer\nmine\n")
    return repo


def _memory_hashes(folder: Path) -> Counter[str]:
    out: Counter[str] = Counter()
    for path in folder.rglob("*.md*"):  # a trashed file is `<name>.md.trashed`
        if path.name.startswith(("MEMORY", ".")) or path.is_symlink() or not path.is_file():
            continue
        out[hashlib.sha256(path.read_bytes()).hexdigest()] += 1
    return out


# The pass's own steps; the version store's (a memory read is kept as a version) have their
# own crash loop in test_versions, and would only lengthen these.
PASS_STEPS = "index.,journal.,trash."


def _run(
    env: dict[str, str], *args: str, crash_at: int | None = None
) -> subprocess.CompletedProcess[str]:
    run_env = dict(env)
    if crash_at is not None:
        run_env["MEMORYD_CRASH_AT"] = str(crash_at)
        run_env["MEMORYD_CRASH_ONLY"] = PASS_STEPS
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _check_consistent(folder: Path, before: Counter[str]) -> None:
    after = _memory_hashes(folder)  # the dir and its .trash
    assert not (before - after), "a memory's bytes are in neither the dir nor the trash"
    text = (folder / "MEMORY.md").read_text()
    assert text.startswith(HAND_WRITTEN) and text.endswith("\n## Footer\nmine\n")
    live = set(scan_dir(folder).memories)
    targets = pointer_targets(text)
    assert sorted(targets) == sorted(live), "the index does not list exactly the live memories"
    assert all(line.eol for line in split_lines(text))


def _env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "cfg"),
    }


@pytest.mark.parametrize("indexed", [False, True], ids=["hand-written index", "settled index"])
def test_sigkill_at_every_step_of_a_dream_pass(tmp_path: Path, indexed: bool) -> None:
    """For k = 1, 2, ...: kill -9 at crash point k, recover, check nothing was lost. With the
    index as memoryd's own pass left it, the update after the moves is the held edit."""
    template = _template(tmp_path / "template")
    k = recovered = 0
    completed = False
    while not completed:
        k += 1
        assert k < 60, "the pass never completed"
        case = tmp_path / f"k{k}"
        shutil.copytree(template.parent, case, symlinks=True)
        folder = case / "app" / ".claude" / "memory"
        env = _env(case / "home")
        if indexed:
            assert _run(env, "index", str(folder)).returncode == 0
        before = _memory_hashes(folder)
        proc = _run(env, "dream", str(folder), crash_at=k)
        if proc.returncode == -signal.SIGKILL:
            recovery = _run(env, "index", str(folder))  # any writing command recovers first
            assert recovery.returncode == 0, recovery.stdout + recovery.stderr
            if "recovered an unfinished pass" in recovery.stderr:
                recovered += 1
                log = case / "home" / "state" / "memoryd" / "log" / "audit.jsonl"
                rows = [r for r in iter_lines(log) if r["event"] == "pass.recovered"]
                assert len(rows) == 1 and rows[0]["dir"] == str(folder.resolve()), rows
                assert rows[0]["outcome"] and rows[0]["level"] == "warning"
            _check_consistent(folder, before)
            again = _run(env, "dream", str(folder))  # a rerun completes the pass
            assert again.returncode == 0, again.stdout + again.stderr
        else:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            completed = True
        _check_consistent(folder, before)
        assert not (folder / "stale_a.md").exists() and not (folder / "dup_old.md").exists()
        assert not state_rows(case / "home" / "state" / "memoryd", JOURNALS)
    assert k > 8, "the crash points were never reached"
    assert recovered >= 5, "recovery from the journal was never exercised"


def test_sigkill_during_a_purge_is_finished_later(tmp_path: Path) -> None:
    """A purge killed after renaming a day folder aside finishes on the next purge."""
    repo = _template(tmp_path)
    folder = repo / ".claude" / "memory"
    from datetime import date, datetime

    old = plant_day(folder, date(2020, 1, 1), datetime(2020, 1, 1, 12), "gone.md")
    (old / "gone.md").write_text("old\n")
    env = _env(tmp_path / "home")
    watched_for(tmp_path / "home" / "state" / "memoryd", folder, 45)
    before = _memory_hashes(folder) - Counter([hashlib.sha256(b"old\n").hexdigest()])
    proc = _run(env, "trash", "purge", str(folder), crash_at=1)
    assert proc.returncode == -signal.SIGKILL
    assert not old.exists() and list((folder / ".trash").glob(".purging-*"))
    assert _run(env, "trash", "purge", str(folder)).returncode == 0
    assert list((folder / ".trash").iterdir()) == []
    assert _memory_hashes(folder) == before


SWAPPING_PASS = """
import os, sys, time
from pathlib import Path
from memoryd.config import Config
from memoryd.discover.finder import discover
from memoryd.dream.run import dream_dir
from memoryd.discover.finder import discover
from memoryd.dream.repocache import RepoCache
from memoryd.dream.run import dream_dir
from memoryd.paths import app_paths
from memoryd.trash.recovery import recover
from memoryd.runtime import Runtime

folder, marker = Path(sys.argv[1]), Path(sys.argv[2])
rt = Runtime.create(Config(), app_paths())
recover(rt)
[md] = discover(rt.config, [folder])

def agent_saves(name):
    if name == "stale_a.md" and not marker.exists():
        tmp = folder / ".stale_a.md.agent.tmp"
        tmp.write_bytes(sys.argv[3].encode())
        old = time.time() - 40 * 86400
        os.utime(tmp, (old, old))
        os.replace(tmp, folder / "stale_a.md")
        marker.touch()

result = dream_dir(rt, md, repos=RepoCache.of(rt), before_move=agent_saves)
sys.exit(0 if result.status == "completed" else 1)
"""


def test_sigkill_at_every_step_of_a_pass_whose_file_is_swapped_before_its_rename(
    tmp_path: Path,
) -> None:
    """An agent saves stale_a.md by rename between the pass's check and its rename; kill -9
    at every crash point of that pass (the put-back included), recover: the agent's version
    is in the dir byte for byte (or, after a rerun checked it, in the trash), every manifest
    sha256 is its file's bytes, and nothing sits in the trash without its record."""
    from memoryd.trash import manifest as trash_manifest
    from memoryd.trash import store as trash

    template = _template(tmp_path / "template")
    new_version = (
        "---\nname: stale_a\ndescription: d\ntype: project\n---\n"
        "Lived in `src/removed_a.py`. Saved again by the agent.\n"
    )
    new_sha = hashlib.sha256(new_version.encode()).hexdigest()
    trace = tmp_path / "trace"  # the label of each crash point that killed the pass
    k = 0
    completed = False
    while not completed:
        k += 1
        assert k < 60, "the pass never completed"
        case = tmp_path / f"k{k}"
        shutil.copytree(template.parent, case, symlinks=True)
        folder = case / "app" / ".claude" / "memory"
        env = {
            **_env(case / "home"),
            "PYTHONPATH": str(Path(__file__).parents[1]),
            "MEMORYD_CRASH_AT": str(k),
            "MEMORYD_CRASH_ONLY": PASS_STEPS,
            "MEMORYD_CRASH_TRACE": str(trace),
        }
        before = _memory_hashes(folder)
        old_sha = hashlib.sha256((folder / "stale_a.md").read_bytes()).hexdigest()
        marker = case / "swapped"
        proc = subprocess.run(
            [sys.executable, "-c", SWAPPING_PASS, str(folder), str(marker), new_version],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode == -signal.SIGKILL:
            recovery = _run(_env(case / "home"), "index", str(folder))
            assert recovery.returncode == 0, recovery.stdout + recovery.stderr
        else:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            completed = True
        if marker.exists():  # the agent's save replaced the version the pass planned
            before = before - Counter([old_sha]) + Counter([new_sha])
            assert (folder / "stale_a.md").read_text() == new_version
        _check_consistent(folder, before)
        entries = [e for e in trash_manifest.entries(folder) if not e.restored_as]
        for entry in entries:
            data = entry.stored_path.read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry.record.sha256, entry.record
        stored = {p for p in folder.glob(".trash/*/*") if p.name != trash.MANIFEST}
        assert stored == {e.stored_path for e in entries}, "a file in the trash has no record"
        assert new_sha not in {e.record.sha256 for e in entries}, "moved without a check"
        again = _run(_env(case / "home"), "dream", str(folder))  # a rerun completes the pass
        assert again.returncode == 0, again.stdout + again.stderr
        _check_consistent(folder, before)
        assert not (folder / "stale_a.md").exists() and not (folder / "dup_old.md").exists()
        assert not state_rows(case / "home" / "state" / "memoryd", JOURNALS)
    labels = {line.split()[1] for line in trace.read_text().splitlines()}
    assert {"trash.after_move", "trash.put_back", "journal.marked"} <= labels, labels
