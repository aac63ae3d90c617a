"""`memoryd forget`: asks on a terminal (a real pty), does nothing without one unless --yes,
moves through the checked mover to the trash (restorable), and removes the pointer lines
from both tiers; refuses a query matching more than a quarter of a dir."""

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from memoryd.trash import store as trash
from tests.conftest import Env, Result, tree_digest, write_memory

ARCHIVE = "MEMORY-ARCHIVE.md"


def _plant(folder: Path) -> None:
    """Eight memories; two about pnpm (one indexed only in the archive)."""
    for n in range(6):
        write_memory(folder, f"project_m{n}.md", description=f"memory {n}", body=f"topic{n}\n")
    write_memory(folder, "project_pnpm.md", description="package manager", body="Use pnpm.\n")
    write_memory(folder, "feedback_lock.md", description="lockfile", body="pnpm lockfile wins\n")
    lines = "".join(f"- [m{n}](project_m{n}.md) — memory {n}\n" for n in range(6))
    (folder / "MEMORY.md").write_text(
        f"# app Memory\n\n{lines}- [pnpm](project_pnpm.md) — package manager\n"
    )
    (folder / ARCHIVE).write_text("# Archive\n\n- [lock](feedback_lock.md) — lockfile\n")


@pytest.fixture
def folder(repo: Path) -> Path:
    path = repo / ".claude" / "memory"
    _plant(path)
    return path


def _run(
    *args: str | Path, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *map(str, args)],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _on_pty(args: list[str | Path], answer: bytes) -> tuple[int, str]:
    """Run memoryd with a pty as its terminal; answer its question; (exit code, output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", *map(str, args)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    answered = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if not answered and b"[y/N]" in seen:
                os.write(master, answer)
                answered = True
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert answered, seen.decode(errors="replace")
    return code, seen.decode(errors="replace")


def test_on_a_terminal_yes_forgets_from_both_tiers_and_restore_brings_it_back(
    env: Env, repo: Path, folder: Path
) -> None:
    """Asked on a pty, `y` moves both pnpm memories to the trash (reason forgotten), their
    pointer lines leave MEMORY.md and the archive, the rest is untouched, each is logged, and
    `trash restore` brings one back with its pointer."""
    others = {k: v for k, v in tree_digest(folder).items() if "pnpm" not in k and "lock" not in k}
    others.pop("MEMORY.md")
    others.pop(ARCHIVE)
    code, output = _on_pty(["forget", "pnpm", repo], b"y\n")
    assert code == 0, output
    assert "Forget these 2 memories? [y/N]" in output
    assert not (folder / "project_pnpm.md").exists() and not (folder / "feedback_lock.md").exists()
    assert "project_pnpm.md" not in (folder / "MEMORY.md").read_text()
    assert "feedback_lock.md" not in (folder / ARCHIVE).read_text()
    after = tree_digest(folder)
    assert {k: after[k] for k in others} == others
    trashed = _run("trash", "list", repo, "--json")
    rows = json.loads(trashed.stdout)["trash"]
    assert sorted((r["file"], r["reason"]) for r in rows) == [
        ("feedback_lock.md", "forgotten"),
        ("project_pnpm.md", "forgotten"),
    ]
    logged = sorted(r["file"] for r in env.audit_rows() if r["event"] == "memory.forgotten")
    assert logged == ["feedback_lock.md", "project_pnpm.md"]
    pnpm = next(r["id"] for r in rows if r["file"] == "project_pnpm.md")
    restored = _run("trash", "restore", pnpm, repo)
    assert restored.returncode == 0, restored.stderr
    assert (folder / "project_pnpm.md").exists()
    assert "- [pnpm](project_pnpm.md) — package manager" in (folder / "MEMORY.md").read_text()


def test_on_a_terminal_no_changes_nothing(env: Env, repo: Path, folder: Path) -> None:
    """Any answer but yes leaves every file byte-identical."""
    before = tree_digest(repo)
    code, output = _on_pty(["forget", "pnpm", repo], b"n\n")
    assert code == 1 and "Nothing was forgotten" in output
    assert tree_digest(repo) == before


def test_on_a_terminal_purge_is_asked_for_by_name_and_no_keeps_every_copy(
    env: Env, repo: Path, folder: Path
) -> None:
    """`forget --purge` asks about the kept copies too; `n` leaves the files and the kept
    versions as they were; `y` forgets and purges."""
    assert _run("index", folder).returncode == 0
    from memoryd.versions import kept as kept_module

    def objects() -> list[str]:
        return sorted(kept_module.VersionStore(env.state).object_sizes())

    kept = objects()
    before = tree_digest(repo)
    code, output = _on_pty(["forget", "--purge", "pnpm", repo], b"n\n")
    assert code == 1 and "and every copy memoryd keeps" in output
    assert tree_digest(repo) == before
    assert objects() == kept
    code, output = _on_pty(["forget", "--purge", "pnpm", repo], b"y\n")
    assert code == 0, output
    assert "purged: 2 kept version(s)" in output  # one of each pnpm memory
    assert not (folder / "project_pnpm.md").exists()


def test_without_a_terminal_nothing_happens_unless_yes(env: Env, repo: Path, folder: Path) -> None:
    """No terminal and no --yes: exit 1, it says so, nothing changes (not the state dir's
    trash either); --dry-run lists and changes nothing; --yes forgets."""
    before = tree_digest(repo)
    result = _run("forget", "pnpm", repo)
    assert result.returncode == 1
    assert "Not on a terminal, and --yes was not given: nothing was forgotten" in result.stdout
    assert "project_pnpm.md" in result.stdout and "feedback_lock.md" in result.stdout
    dry = _run("forget", "pnpm", repo, "--dry-run")
    assert dry.returncode == 0 and "[DRY RUN] Would forget (2)" in dry.stdout
    assert tree_digest(repo) == before
    assert not (folder / ".trash").exists()
    done = _run("forget", "pnpm", repo, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "forgot " in done.stdout and "restore: memoryd trash restore" in done.stdout
    assert not (folder / "project_pnpm.md").exists()


def test_a_query_matching_over_a_quarter_is_refused_unless_files_are_named(
    env: Env, repo: Path, folder: Path, cli: Callable[..., Result]
) -> None:
    """`memory` is in 6 of 8 descriptions: refused, exit 1, nothing changed; the same six
    named as files are forgotten."""
    before = tree_digest(repo)
    refused = cli("forget", "memory", repo, "--yes")
    assert refused.code == 1
    assert "matches 6 of its 8 memories, more than a quarter" in refused.out
    assert tree_digest(repo) == before
    named = [folder / f"project_m{n}.md" for n in range(3)]
    done = cli("forget", *named, "--yes")
    assert done.code == 0, done.out + done.err
    assert all(not p.exists() for p in named)
    assert "project_m0.md" not in (folder / "MEMORY.md").read_text()


def test_a_file_changed_since_it_was_listed_is_not_moved(
    env: Env, repo: Path, folder: Path
) -> None:
    """The move checks the bytes that were listed: a file the agent rewrote meanwhile stays."""
    from memoryd.commands.forgetting import forget_in, select
    from memoryd.discover.finder import discover

    rt = env.runtime()
    dirs = discover(rt.config, [repo])
    chosen = select(rt, ["pnpm"], [], dirs)
    assert sorted(t.name for t in chosen.targets) == ["feedback_lock.md", "project_pnpm.md"]
    (folder / "project_pnpm.md").write_text((folder / "project_pnpm.md").read_text() + "new\n")
    done = forget_in(rt, dirs[0], chosen.targets)
    assert [r.original_name for r in done.moved] == ["feedback_lock.md"]
    assert done.skipped == [("project_pnpm.md", "changed since it was listed")]
    assert (folder / "project_pnpm.md").read_text().endswith("new\n")


def test_an_unmanaged_index_is_refused(
    env: Env, repo: Path, folder: Path, cli: Callable[..., Result]
) -> None:
    """A dir whose MEMORY.md says `memoryd: off` keeps everything: its pointers would stay."""
    (folder / "MEMORY.md").write_text(
        "<!-- memoryd: off -->\n" + (folder / "MEMORY.md").read_text()
    )
    before = tree_digest(repo)
    result = cli("forget", "pnpm", repo, "--yes")
    assert result.code == 1
    assert "not memoryd's to edit" in result.out
    assert tree_digest(repo) == before


def test_forgotten_files_get_the_trashs_names_even_when_two_would_clash(
    env: Env, repo: Path, folder: Path, cli: Callable[..., Result]
) -> None:
    """`a.md` whose `a.md.trashed` is already in the trash goes to `a.2.md.trashed`, and
    `a.2.md` forgotten with it must not take that name: each gets its own, none ends in `.md`
    (Claude Code's scan would list it as a live memory)."""
    write_memory(folder, "a.md", description="alpha note", body="alpha\n")
    write_memory(folder, "a.2.md", description="alpha two", body="alpha two\n")
    with (folder / "MEMORY.md").open("a") as index:
        index.write("- [a](a.md) — alpha note\n- [a.2](a.2.md) — alpha two\n")
    day = folder / ".trash" / date.today().isoformat()
    day.mkdir(parents=True)
    (day / "a.md.trashed").write_text("an earlier forgotten a\n")
    done = cli("forget", folder / "a.md", folder / "a.2.md", "--yes")
    assert done.code == 0, done.err
    stored = sorted(p.name for p in day.iterdir() if p.name != trash.MANIFEST)
    assert stored == ["a.2.2.md.trashed", "a.2.md.trashed", "a.md.trashed"]


def test_forgetting_is_memoryds_own_move_no_outside_deletion_and_no_alarm(
    env: Env, repo: Path, folder: Path, cli: Callable[..., Result]
) -> None:
    """The version store knows every memory (an `index` read them); `forget` of four, more than
    `versions.alarm_files` (set to 3), is memoryd's own move: the next pass writes no
    `memory.deleted_outside` and no `memory.mass_change`, `trash list` shows them trashed and not
    deleted elsewhere, and each one's history ends with the move."""
    from memoryd.versions import kept, listing

    env.config_dir.mkdir(parents=True, exist_ok=True)  # four is more than alarm_files here
    (env.config_dir / "config.toml").write_text("[versions]\nalarm_files = 3\n")
    assert cli("index", repo).code == 0
    named = [folder / f"project_m{n}.md" for n in range(4)]
    done = cli("forget", *named, "--yes")
    assert done.code == 0, done.out + done.err
    assert cli("index", repo).code == 0
    events = [r["event"] for r in env.audit_rows()]
    assert events.count("memory.forgotten") == 4
    assert "memory.deleted_outside" not in events and "memory.mass_change" not in events
    listed = cli("trash", "list", repo, "--json")
    doc = json.loads(listed.out)
    assert sorted(r["file"] for r in doc["trash"]) == sorted(p.name for p in named)
    assert doc["deleted_outside"] == []
    store = kept.for_runtime(env.runtime())
    assert listing.deleted(store, folder.resolve()) == []
    for path in named:
        ended = [v.ended_by for v in listing.versions_of(store, folder.resolve(), path.name)]
        assert ended == ["moved"], (path.name, ended)
