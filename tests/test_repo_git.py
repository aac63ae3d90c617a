"""Repo memory under git: what git tracks is read and reported, never written unless named or
opted in; nothing of memoryd's in a work tree but the index files it manages; a checkout is
one `memory.checkout` row, not outside deletions; the same files give the same bytes."""

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from memoryd.discover import gitwork
from tests.conftest import CORPUS, Env, Result, needs_corpus, write_memory
from tests.helpers import git, memoryd_child, start, wait_for

Cli = Callable[..., Result]
AGENT = ".claude/agent-memory/reviewer"
HAND = (
    "# Reviewer memory\n\nHand-written notes the team keeps here.\n\n"
    "- [Style](style.md) — style\n- [Deploy](deploy.md) — deploy\n"
)


def porcelain(root: Path) -> str:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def make_repo(root: Path, index: str = HAND) -> Path:
    """A repo whose reviewer memory is committed: a MEMORY.md that lacks two pointers."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    folder = root / AGENT
    for name in ("style.md", "deploy.md", "review.md"):
        write_memory(folder, name, description=f"about {name[:-3]}")
    (folder / "MEMORY.md").write_text(index)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "memory")
    return folder


def use_repos(env: Env, *roots: Path) -> None:
    env.config_dir.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{r}"' for r in roots)
    (env.config_dir / "config.toml").write_text(f"[paths]\nrepos = [{listed}]\n")


def test_a_dir_git_tracks_is_not_written_by_index_or_dream_without_naming_it(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`index` and `dream` without DIR leave a tracked memory dir byte for byte as committed
    (no pointer added, no .MEMORY.md.prev, no trash): `git status` shows nothing at all."""
    root = tmp_path / "app"
    folder = make_repo(root)
    use_repos(env, root)
    assert cli("index").code == 0
    assert cli("dream").code == 0
    assert porcelain(root) == ""
    assert (folder / "MEMORY.md").read_text() == HAND
    rows = [r for r in env.audit_rows() if r["event"] == "index.unmanaged"]
    assert rows and "tracked by git" in rows[0]["reason"]
    assert "its memory dir tracked by git: read and reported, never written" in cli("status").out


def test_dirs_says_a_tracked_dir_is_left_alone_and_how_to_opt_in(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`dirs DIR` names the reason (tracked by git) and the three ways to have it written."""
    root = tmp_path / "app"
    folder = make_repo(root)
    use_repos(env, root)
    shown = cli("dirs", folder)
    assert shown.code == 0, shown.err
    assert "tracked by git" in shown.out
    assert f"memoryd index {folder}" in shown.out
    assert "<!-- memoryd: manage -->" in shown.out
    assert "drift: pointers 1 to add" in shown.out  # review.md has no pointer yet
    assert porcelain(root) == ""


def test_naming_a_tracked_dir_writes_only_its_index(tmp_path: Path, env: Env, cli: Cli) -> None:
    """`index DIR` is an explicit request: it writes once, and `git status` shows MEMORY.md
    modified and nothing else of memoryd's (no .MEMORY.md.prev, no temp)."""
    root = tmp_path / "app"
    folder = make_repo(root)
    use_repos(env, root)
    assert cli("index", folder).code == 0
    assert porcelain(root) == f" M {AGENT}/MEMORY.md\n"
    assert "review.md" in (folder / "MEMORY.md").read_text()
    # A second write after a change, still named: still only the index.
    write_memory(folder, "ci.md", description="about ci")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "more")
    assert cli("index", root).code == 0  # the repo named: its dirs are asked for
    assert porcelain(root) == f" M {AGENT}/MEMORY.md\n"
    # Not named again: left as it is.
    (folder / "extra.md").write_text("---\nname: e\ndescription: e\ntype: project\n---\nx\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "extra")
    assert cli("index").code == 0
    assert porcelain(root) == ""


def test_the_manage_mark_in_the_committed_index_opts_a_tracked_dir_in(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`<!-- memoryd: manage -->` in the committed MEMORY.md: memoryd manages it for everyone
    who clones the repo, with no DIR named."""
    root = tmp_path / "app"
    folder = make_repo(root, index="<!-- memoryd: manage -->\n" + HAND)
    use_repos(env, root)
    assert cli("index").code == 0
    assert "review.md" in (folder / "MEMORY.md").read_text()
    assert porcelain(root) == f" M {AGENT}/MEMORY.md\n"


def test_the_config_opts_a_tracked_dir_in_for_one_person(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`[dirs."DIR"] mode = "manage"` manages a tracked dir on this machine only."""
    root = tmp_path / "app"
    folder = make_repo(root)
    env.config_dir.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text(
        f'[paths]\nrepos = ["{root}"]\n[dirs."{folder}"]\nmode = "manage"\n'
    )
    assert cli("index").code == 0
    assert "review.md" in (folder / "MEMORY.md").read_text()


def test_paths_manage_repos_opts_every_tracked_dir_of_a_repo_in_for_one_person(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`paths.manage_repos` (globs) manages the tracked dirs of the repos it matches, on this
    machine only; those of another repo stay read-only."""
    root, other = tmp_path / "src" / "app", tmp_path / "elsewhere" / "lib"
    folder, kept = make_repo(root), make_repo(other)
    env.config_dir.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text(
        f'[paths]\nrepos = ["{root}", "{other}"]\nmanage_repos = ["{tmp_path}/src/*"]\n'
    )
    assert cli("index").code == 0
    assert "review.md" in (folder / "MEMORY.md").read_text()
    assert (kept / "MEMORY.md").read_text() == HAND
    assert porcelain(other) == ""


def test_an_untracked_dir_in_a_repo_is_managed_as_before(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """A memory dir not yet committed is memoryd's to index, in a repo or not."""
    root = tmp_path / "app"
    make_repo(root)
    other = root / ".claude" / "agent-memory" / "tester"
    write_memory(other, "unit.md", description="about unit tests")
    use_repos(env, root)
    assert cli("index").code == 0
    assert "unit.md" in (other / "MEMORY.md").read_text()
    assert not (other / ".MEMORY.md.prev").exists()


def test_a_leftover_prev_file_in_a_work_tree_goes(
    tmp_path: Path, env: Env, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .MEMORY.md.prev an older memoryd left beside an index it manages in a work tree is
    removed at the next pass (the version store keeps the old index)."""
    root = tmp_path / "app"
    make_repo(root)
    other = root / ".claude" / "agent-memory" / "tester"
    write_memory(other, "unit.md", description="about unit tests")
    (other / "MEMORY.md").write_text("")
    use_repos(env, root)
    from memoryd.discover import gitwork

    with monkeypatch.context() as patched:  # an older memoryd: it kept the old index as .prev
        patched.setattr(gitwork, "work_tree", lambda path: None)
        assert cli("index").code == 0
    assert (other / ".MEMORY.md.prev").exists()
    write_memory(other, "lint.md", description="about lint")
    assert cli("index").code == 0
    assert not (other / ".MEMORY.md.prev").exists()
    assert "lint.md" in (other / "MEMORY.md").read_text()


def test_a_branch_switch_under_the_daemon_is_one_checkout_row_and_no_alarm(
    tmp_path: Path,
) -> None:
    """The daemon's first start leaves committed memory dirs as they are; a checkout of a
    branch without most of them, and back, is `memory.checkout` rows (with the branch), no
    `memory.deleted_outside`, no alarm in `status`, and a clean tree after each."""
    root = tmp_path / "app"
    folder = make_repo(root)
    for i in range(6):
        write_memory(folder, f"extra{i}.md", description=f"extra {i}")
    tester = root / ".claude" / "agent-memory" / "tester"  # a dir the slim branch has not
    for i in range(4):
        write_memory(tester, f"unit{i}.md", description=f"unit {i}")
    (tester / "MEMORY.md").write_text("".join(f"- [u{i}](unit{i}.md) — u\n" for i in range(4)))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "many")
    git(root, "checkout", "-q", "-b", "slim")
    git(root, "rm", "-q", "-r", ".claude/agent-memory/tester")
    for i in range(6):
        git(root, "rm", "-q", f"{AGENT}/extra{i}.md")
    with (folder / "style.md").open("a") as handle:
        handle.write("rewritten on the slim branch\n")
    git(root, "commit", "-q", "-am", "slim")
    git(root, "checkout", "-q", "main")
    running = start(tmp_path, more_config=f'[paths]\nrepos = ["{root}"]\n')
    try:
        wait_for(lambda: running.rows("index.unmanaged"), what="the first pass")
        assert porcelain(root) == ""
        git(root, "checkout", "-q", "slim")

        def counts(at: str) -> tuple[int, int]:
            """Files deleted and rewritten by checkouts of `at` in the reviewer's dir."""
            rows = [r for r in running.rows("memory.checkout") if r["dir"] == str(folder)]
            mine = [r for r in rows if r["at"] == at]
            return sum(r["deleted"] for r in mine), sum(r["rewritten"] for r in mine)

        # (A scan may see the checkout half done: its changes may take more than one row.)
        wait_for(lambda: counts("slim") == (6, 1), what="the checkout rows")
        assert not tester.exists()  # git removed the folder: nothing of memoryd's kept it
        git(root, "checkout", "-q", "main")
        wait_for(lambda: counts("main") == (0, 1), what="the way back")
        status = running.cli("status")
        assert "ALARM" not in status.stdout
        assert not running.rows("memory.mass_change")
        assert not running.rows("memory.deleted_outside")
        assert not running.rows("memory.rewritten_outside")
        assert porcelain(root) == ""
        git(root, "checkout", "-q", "slim")  # git's deletions again, within the alarm's window
        wait_for(lambda: counts("slim") == (12, 2), what="the second checkout")
        # A person's deletion of a tracked file is still an outside deletion, the only one
        # `trash list` offers to restore, and it alone is no mass change.
        (folder / "deploy.md").unlink()
        wait_for(lambda: running.rows("memory.deleted_outside"), what="the outside deletion")
        assert [r["file"] for r in running.rows("memory.deleted_outside")] == ["deploy.md"]
        listed = running.cli("trash", "list", str(folder)).stdout
        assert "deploy.md" in listed and "extra0.md" not in listed, listed
        # The dir the checkout removed whole: its files are git's, none offered back.
        assert "unit0.md" not in running.cli("trash", "list", str(root)).stdout
        assert "ALARM" not in running.cli("status").stdout
        assert not running.rows("memory.mass_change")
    finally:
        running.proc.terminate()
        running.proc.wait(timeout=30)


def _home(tmp_path: Path, name: str, config: str) -> SimpleNamespace:
    home = tmp_path / name
    (home / ".config" / "memoryd").mkdir(parents=True)
    (home / ".config" / "memoryd" / "config.toml").write_text(config)
    return SimpleNamespace(home=home)


def test_two_clones_on_two_machines_write_the_same_index_bytes(tmp_path: Path) -> None:
    """Two clones (different folder names, checked out at different times) indexed by two
    memoryds with their own state dirs write byte-identical MEMORY.md and MEMORY-ARCHIVE.md:
    no folder name, slug, mtime or date in them."""
    origin = tmp_path / "origin"
    folder = origin / ".claude" / "memory"
    for i in range(40):
        write_memory(folder, f"topic{i:02}.md", description=f"what topic {i} is about")
    (folder / "MEMORY.md").write_text("<!-- memoryd: manage -->\n")
    git(origin, "init", "-q")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "memory")
    clones = [tmp_path / "one" / "app", tmp_path / "two" / "app-copy"]
    for n, clone in enumerate(clones):
        clone.parent.mkdir()
        git(clone.parent, "clone", "-q", str(origin), clone.name)
        if n == 0:  # the first clone is old: its files' mtimes are two months back
            for path in (clone / ".claude" / "memory").iterdir():
                os.utime(path, (1e9, 1e9))
        machine = _home(tmp_path, f"machine{n}", "[index]\nmax_lines = 20\n")
        done = memoryd_child(machine, "index", clone / ".claude" / "memory")
        assert done.returncode == 0, done.stderr
    one, two = (c / ".claude" / "memory" for c in clones)
    assert (one / "MEMORY-ARCHIVE.md").exists()
    for name in ("MEMORY.md", "MEMORY-ARCHIVE.md"):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    for text in ((one / "MEMORY.md").read_text(), (one / "MEMORY-ARCHIVE.md").read_text()):
        assert "app" not in text and "machine" not in text and str(tmp_path) not in text
        assert not re.search(r"\d{4}-\d{2}-\d{2}", text)


def _conflicted(root: Path) -> Path:
    """A merge that left conflict markers in MEMORY.md and in style.md."""
    folder = _conflicted_branches(root, "<!-- memoryd: manage -->\n" + HAND)
    with pytest.raises(subprocess.CalledProcessError):
        git(root, "merge", "-q", "theirs")
    assert "<<<<<<<" in (folder / "MEMORY.md").read_text()
    return folder


def _conflicted_branches(root: Path, index: str = HAND) -> Path:
    """`main` and `theirs` changing the same lines of MEMORY.md and style.md (main checked out)."""
    folder = make_repo(root, index=index)
    git(root, "checkout", "-q", "-b", "theirs")
    (folder / "MEMORY.md").write_text(
        (folder / "MEMORY.md").read_text().replace("— style", "— theirs")
    )
    write_memory(folder, "style.md", description="their style", age_days=None)
    git(root, "commit", "-q", "-am", "theirs")
    git(root, "checkout", "-q", "main")
    (folder / "MEMORY.md").write_text(
        (folder / "MEMORY.md").read_text().replace("— style", "— ours")
    )
    write_memory(folder, "style.md", description="our style", age_days=None)
    git(root, "commit", "-q", "-am", "ours")
    return folder


def test_conflict_markers_are_never_parsed_or_edited_and_are_reported(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """After a merge with conflicts in MEMORY.md and a memory file, even a named `index` and
    `dream` change nothing; `dirs`, `status` and the dream report name each file and say to
    finish the merge."""
    root = tmp_path / "app"
    folder = _conflicted(root)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    use_repos(env, root)
    assert cli("index", folder).code == 0
    dreamt = cli("dream", folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    shown = cli("dirs", folder).out
    assert "MEMORY.md holds git conflict markers" in shown and "git add" in shown
    assert "style.md" in shown and "conflict" in shown
    assert "conflict markers" in dreamt.out, dreamt.out
    status = cli("status").out
    assert "conflict" in status, status


def test_a_named_dream_of_a_tracked_dir_shows_in_git_status_as_exactly_what_changed(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """`dream DIR` moves a duplicate: `git status` shows MEMORY.md modified and the moved
    file deleted, nothing else (its trash is in the state dir); `trash restore` brings it
    back the same way as from any trash."""
    root = tmp_path / "app"
    folder = make_repo(root)
    use_repos(env, root)
    report = json.loads(cli("dream", folder, "--json").out)
    moved = [m for d in report["dirs"] for m in d["changes"]]
    assert moved, report
    gone = moved[0]["file"]
    deleted = {f" D {AGENT}/{m['file']}" for m in moved}
    assert set(porcelain(root).splitlines()) == {f" M {AGENT}/MEMORY.md", *deleted}
    assert str(env.state) in moved[0]["trash"]
    listed = cli("trash", "list", folder)
    assert gone in listed.out
    told = cli("history", moved[0]["trash"])  # the trashed file's path, as the report gave it
    assert told.code == 0 and f"{gone} lost to" in told.out, told  # the file it was
    assert cli("trash", "restore", moved[0]["id"]).code == 0
    assert (folder / gone).exists()
    assert f"{AGENT}/{gone}" not in porcelain(root)


@needs_corpus
def test_the_corpus_repo_memory_is_left_as_committed_by_the_daemon_index_and_dream(
    tmp_path: Path,
) -> None:
    """siglens and orchestkit, committed as their upstreams are: the daemon's first passes,
    `index` and `dream` without DIR leave `git status --ignored` clean, and `dirs` says each
    dir is tracked by git."""
    assert CORPUS is not None
    roots = []
    for name in ("y0ngha__siglens", "yonatangross__orchestkit"):
        root = tmp_path / name.split("__")[1]
        shutil.copytree(CORPUS / name, root)
        for path in [root, *root.rglob("*")]:  # the corpus is read-only; a clone is not
            path.chmod(0o755 if path.is_dir() else 0o644)
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "upstream")
        roots.append(root)
    listed = ", ".join(f'"{r}"' for r in roots)
    running = start(tmp_path, more_config=f"[paths]\nrepos = [{listed}]\n")
    try:
        wait_for(lambda: len(running.rows("index.unmanaged")) >= 10, what="the first passes")
        for args in (("index",), ("dream",)):
            assert running.cli(*args).returncode == 0
        for root in roots:
            assert porcelain(root) == "", root
        shown = running.cli("dirs", "--json")
        rows = json.loads(shown.stdout)["dirs"]
        reasons = {r["path"]: r["mode_reason"] for r in rows}
        assert rows and all(r.startswith("tracked by git") for r in reasons.values()), reasons
        assert not running.rows("index.updated") and not running.rows("trash.moved")
        status = running.cli("status").stdout
        assert status.count("memory dirs tracked by git") == 2, status  # one line a repo
        assert "siglens: 4 memory dirs tracked by git" in status and "ALARM" not in status
    finally:
        running.proc.terminate()
        running.proc.wait(timeout=30)


def test_a_stash_its_pop_and_a_conflicted_merge_under_the_daemon_raise_nothing(
    tmp_path: Path,
) -> None:
    """A person's edit of a tracked memory is an outside rewrite; `git stash` taking it away,
    `git stash pop` putting it back and a merge writing conflict markers into a memory are
    `memory.checkout` rows, never outside changes; the merge's conflicts are reported."""
    root = tmp_path / "app"
    folder = _conflicted_branches(root)
    running = start(tmp_path, more_config=f'[paths]\nrepos = ["{root}"]\n')
    outside = ("memory.rewritten_outside", "memory.deleted_outside", "memory.mass_change")
    try:
        wait_for(lambda: running.rows("index.unmanaged"), what="the first pass")
        write_memory(folder, "deploy.md", description="edited by hand", age_days=None)
        wait_for(lambda: running.rows("memory.rewritten_outside"), what="the person's edit")
        git(root, "stash", "-q")
        wait_for(lambda: len(running.rows("memory.checkout")) == 1, what="the stash")
        git(root, "stash", "pop", "-q")
        wait_for(lambda: len(running.rows("memory.checkout")) == 2, what="the pop")
        assert "edited by hand" in (folder / "deploy.md").read_text()
        git(root, "checkout", "-q", "--", ".")  # the edit given up: the file is HEAD's again
        wait_for(lambda: len(running.rows("memory.checkout")) == 3, what="the checkout")
        with pytest.raises(subprocess.CalledProcessError):
            git(root, "merge", "-q", "theirs")
        wait_for(lambda: len(running.rows("memory.checkout")) == 4, what="the merge")
        assert [len(running.rows(e)) for e in outside] == [1, 0, 0]
        wait_for(
            lambda: "conflict markers" in running.cli("status").stdout, what="the conflict said"
        )
    finally:
        running.proc.terminate()
        running.proc.wait(timeout=30)


def test_the_post_write_hook_leaves_a_dir_git_tracks_as_committed(tmp_path: Path, env: Env) -> None:
    """The agent writing a memory into a tracked dir is no person's request to write its
    index: Claude Code's post-write hook (`memoryd hook post-tool-use`) leaves MEMORY.md as
    committed, so `git status` shows the agent's new file and nothing of memoryd's."""
    root = tmp_path / "app"
    folder = make_repo(root)
    new = write_memory(folder, "release.md", description="about release")
    data = {
        "session_id": "s1",
        "cwd": str(root),
        "hook_event_name": "PostToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(new)},
        "tool_use_id": "toolu_1",
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "memoryd"), "hook", "post-tool-use"],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

    def left_alone() -> bool:  # the pass the hook started has run: said why it writes nothing
        rows = [r for r in env.audit_rows() if r["event"] == "index.unmanaged"]
        return any("tracked by git" in r["reason"] for r in rows)

    wait_for(left_alone, 60, "the hook's index pass")
    assert (folder / "MEMORY.md").read_text() == HAND
    assert porcelain(root) == f"?? {AGENT}/release.md\n"


def test_a_trash_stays_found_where_it_is_when_its_dir_enters_or_leaves_a_work_tree(
    tmp_path: Path, env: Env, cli: Cli
) -> None:
    """A `.trash` made before the dir's folder became a repo (or by an older memoryd) is
    still the dir's trash once git is there; a trash in the state dir is still the dir's once
    the repo is gone: `trash list` lists both entries and `trash restore` brings them back."""
    plain = tmp_path / "plain"
    folder = plain / AGENT
    for name in ("style.md", "deploy.md", "review.md", "notes.md"):
        write_memory(folder, name, description=f"about {name[:-3]}")
    assert cli("index", folder).code == 0
    assert cli("forget", "style.md", folder, "--yes").code == 0
    assert (folder / ".trash").is_dir()
    git(plain, "init", "-q")
    gitwork._work_trees.clear()  # as a new process sees it (the runner is this process)
    assert "style.md" in cli("trash", "list", folder).out
    assert cli("trash", "restore", "style.md", folder).code == 0
    assert (folder / "style.md").exists()

    root = tmp_path / "app"
    repo_dir = make_repo(root)
    use_repos(env, root)
    moved = [m for d in json.loads(cli("dream", repo_dir, "--json").out)["dirs"]
             for m in d["changes"]]  # fmt: skip
    assert moved and str(env.state) in moved[0]["trash"]
    shutil.rmtree(root / ".git")  # no repo any more: the trash it had is still the dir's
    gitwork._work_trees.clear()
    assert moved[0]["file"] in cli("trash", "list", repo_dir).out
    assert cli("trash", "restore", moved[0]["id"]).code == 0
    assert (repo_dir / moved[0]["file"]).exists()
