"""Discovery: every memory location, repo roots from transcripts, symlinked folders."""

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Config, PathsConfig, build_config
from memoryd.discover.dirs import nested_dirs
from memoryd.discover.finder import discover, memory_dir_at
from memoryd.discover.slugs import slugify
from memoryd.discover.transcripts import project_repo_root
from tests.conftest import Env, Result, copy_corpus, corpus_memory_dirs, needs_corpus, write_memory
from tests.helpers import snapshot, vault


def _home(env: Env, tmp_path: Path) -> tuple[Path, Path]:
    code = tmp_path / "src" / "my.app"
    (code / "pkg").mkdir(parents=True)
    slug = slugify(str(code))
    project = env.claude / "projects" / slug
    write_memory(project / "memory", "deploy.md")
    return code, project


def test_slug_is_lossy_replacement() -> None:
    """Every character outside [A-Za-z0-9] becomes `-`."""
    assert slugify("/home/me/src/my.app") == "-home-me-src-my-app"


def test_project_repo_root_from_transcripts_tolerates_torn_lines(env: Env, tmp_path: Path) -> None:
    """The cwd comes from session transcripts; torn and foreign lines are skipped."""
    code, project = _home(env, tmp_path)
    (project / "a.jsonl").write_text(
        '{"type":"x"}\nnot json\n' + json.dumps({"cwd": str(code)}) + '\n{"cwd": "/tr'
    )
    assert project_repo_root(project, project.name) == (code, "cwd in a.jsonl")


def test_cwd_that_does_not_match_the_slug_is_not_trusted(env: Env, tmp_path: Path) -> None:
    """A cwd whose slug differs from the folder's is refused, with the reason."""
    _, project = _home(env, tmp_path)
    (project / "a.jsonl").write_text(json.dumps({"cwd": str(tmp_path)}) + "\n")
    root, reason = project_repo_root(project, project.name)
    assert root is None and "does not match the slug" in reason


def test_gone_project_folder_is_said(env: Env, tmp_path: Path) -> None:
    """A transcript naming a folder that no longer exists gives no root and says so."""
    code, project = _home(env, tmp_path)
    (project / "a.jsonl").write_text(json.dumps({"cwd": str(code)}) + "\n")
    code.joinpath("pkg").rmdir()
    code.rmdir()
    root, reason = project_repo_root(project, project.name)
    assert root is None and "no longer exists" in reason


def test_discover_finds_every_location(env: Env, tmp_path: Path) -> None:
    """Project, user agent, repo-scope and nested dirs are found once each."""
    code, project = _home(env, tmp_path)
    (project / "s.jsonl").write_text(json.dumps({"cwd": str(code)}) + "\n")
    write_memory(env.claude / "agent-memory" / "reviewer", "a.md")
    repo = tmp_path / "repos" / "one"
    write_memory(repo / ".claude" / "memory", "r.md")
    write_memory(repo / ".claude" / "agent-memory" / "planner", "p.md")
    write_memory(repo / ".claude" / "agent-memory-local" / "mine", "m.md")
    nested = repo / ".claude" / "memory" / "sub"
    write_memory(nested, "n.md")
    (nested / "MEMORY.md").write_text("- [n](n.md)\n")
    extra = tmp_path / "extra"
    write_memory(extra, "e.md")
    cfg = build_config(
        {
            "paths": {
                "claude_home": str(env.claude),
                "repos": [str(tmp_path / "repos" / "*")],
                "extra_memory_dirs": [str(extra)],
            }
        },
        "t",
    )
    found = {(d.kind, d.label): d for d in discover(cfg)}
    assert set(found) == {
        ("project", project.name),
        ("agent", "reviewer"),
        ("repo", "one"),
        ("repo-agent", "planner"),
        ("repo-agent-local", "mine"),
        ("nested", "sub"),
        ("extra", "extra"),
    }
    assert found[("project", project.name)].repo_root == code
    assert found[("project", project.name)].heading == "my.app"
    assert found[("repo-agent", "planner")].repo_root == repo
    assert found[("agent", "reviewer")].repo_root is None


def test_a_folder_whose_links_say_it_holds_no_folder_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nested dirs are looked for without listing a memory dir that holds no folder (but its
    hidden trash), where its file system counts folders in its link count (listing 10,000
    memories took ~8 ms); a folder made in it is found, and on a file system that does not
    count them (an SMB mount says 2 links whatever it holds) the dir is listed."""
    from memoryd.discover import look

    memory = tmp_path / "memory"
    write_memory(memory, "a.md")
    cfg = Config()
    md = memory_dir_at(memory, cfg)
    listed: list[object] = []
    scandir = os.scandir

    def counted(path: Any) -> Any:
        listed.append(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counted)
    types = look._fs_types()
    if types.get(os.stat(memory).st_dev) not in look._COUNTS_SUBDIRS:
        pytest.skip("the tests' folder is on a file system that does not count its folders")
    assert list(nested_dirs(md, cfg)) == [] and listed == []
    (memory / ".trash").mkdir()  # memoryd's own, hidden: still nothing to list
    assert list(nested_dirs(md, cfg)) == [] and listed == []
    nested = memory / "sub"
    write_memory(nested, "n.md")
    (nested / "MEMORY.md").write_text("- [n](n.md)\n")
    assert [d.label for d in nested_dirs(md, cfg)] == ["sub"] and listed
    (nested / "MEMORY.md").unlink()
    (nested / "n.md").unlink()
    nested.rmdir()
    listed.clear()
    monkeypatch.setattr(look, "_fs_types", lambda: dict.fromkeys(types, "cifs"))
    assert list(nested_dirs(md, cfg)) == [] and listed


def test_symlinked_memory_folder_is_followed_once(env: Env, tmp_path: Path) -> None:
    """A symlinked memory folder inside the Claude home is used at its real path, listed once."""
    real = env.claude / "real-memory"
    write_memory(real, "a.md")
    (env.claude / "agent-memory").mkdir(parents=True)
    os.symlink(real, env.claude / "agent-memory" / "linked")
    dirs = discover(Config(paths=PathsConfig(claude_home=env.claude)))
    assert len(dirs) == 1
    assert dirs[0].real_path == real.resolve() and dirs[0].via_symlink


def test_claude_config_dir_is_honoured(env: Env, tmp_path: Path, monkeypatch) -> None:
    """$CLAUDE_CONFIG_DIR replaces ~/.claude as the Claude home."""
    other = tmp_path / "claude-elsewhere"
    write_memory(other / "agent-memory" / "x", "a.md")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(other))
    assert [d.label for d in discover(Config())] == ["x"]


def test_missing_claude_home_is_not_an_error(env: Env, cli) -> None:
    """With no ~/.claude yet, `dirs` and `index` say so and exit 0."""
    result = cli("dirs")
    assert result.code == 0 and "does not exist yet" in result.out
    assert cli("index").code == 0


# --- memory-dir links out of their repo or Claude home (issue 11, item 6) ---------------------


@pytest.fixture
def linked_repo(env: Env, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repo whose `.claude/agent-memory/notes` links to a vault outside it; a config that
    covers the repo. Returns (repo, vault notes, config file)."""
    notes = vault(tmp_path)
    repo = tmp_path / "repos" / "app"
    (repo / ".claude" / "agent-memory").mkdir(parents=True)
    (repo / ".claude" / "agent-memory" / "notes").symlink_to(notes)
    write_memory(repo / ".claude" / "agent-memory" / "planner", "plan.md")
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\nclaude_home = "{env.claude}"\nrepos = ["{repo}"]\n')
    return repo, notes, config


def refused_rows(env: Env) -> list[dict[str, Any]]:
    return [r for r in env.audit_rows() if r["event"] == "dir.refused"]


def test_a_link_out_of_the_repo_is_left_alone_by_index_dream_and_dirs(
    env: Env, cli, linked_repo: tuple[Path, Path, Path]
) -> None:
    """`index`, `dream` and `dirs` leave a vault linked as an agent-memory dir byte-identical
    (no MEMORY.md, no .trash/, no note moved), report the link once, and `dirs` shows it as
    refused with its target and what to do; the repo's own memory dir is still worked on."""
    repo, notes, config = linked_repo
    link = repo / ".claude" / "agent-memory" / "notes"
    before = snapshot(notes.parent)
    first: Result = cli("--config", config, "index")
    assert first.code == 0, first.err
    assert "refused" in first.out and str(notes) in first.out
    dream = cli("--config", config, "dream")
    assert dream.code == 0, dream.out + dream.err
    again = cli("--config", config, "index")
    assert again.code == 0
    assert snapshot(notes.parent) == before, "the vault was written to"
    assert (repo / ".claude" / "agent-memory" / "planner" / "MEMORY.md").is_file()
    [row] = refused_rows(env)  # said once over three commands
    assert row["dir"] == str(link) and row["target"] == str(notes.resolve())
    assert row["within"] == str(repo.resolve()) and row["level"] == "warning"
    assert "paths.extra_memory_dirs" in str(row["hint"])
    listed = cli("--config", config, "dirs", "--json")
    doc = json.loads(listed.out)
    assert [d["label"] for d in doc["dirs"]] == ["planner"]
    [refused] = doc["refused"]
    assert refused["path"] == str(link) and refused["target"] == str(notes.resolve())
    assert "outside the repo" in refused["reason"]
    text = cli("--config", config, "dirs")
    assert f"{link} -> {notes.resolve()}" in text.out and "refused" in text.out
    assert "paths.extra_memory_dirs" in text.out
    named = cli("--config", config, "index", repo)  # the repo named: its link is not
    assert named.code == 0 and "refused" in named.out
    assert snapshot(notes.parent) == before
    assert len(refused_rows(env)) == 1


def test_the_links_said_are_kept_in_the_state_store(
    env: Env, cli, linked_repo: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of the refused links said is the state store's `refused_link` table: a dry
    run says nothing and makes no store; a run says a link once and keeps its target; a new
    target is said again and replaces it; a record past REFUSED_RECORD_MAX starts over."""
    from memoryd.discover import finder
    from memoryd.storage.statedb import StateDB

    repo, notes, config = linked_repo
    link, other = repo / ".claude" / "agent-memory" / "notes", notes.parent / "other"
    db = StateDB.in_state_dir(env.state)

    def said() -> tuple[list[str], dict[str, str]]:
        conn = db.reader(finder.REFUSED)
        kept = dict(conn.execute("SELECT link, target FROM refused_link")) if conn else {}
        return [r["target"] for r in refused_rows(env)], kept

    assert cli("--config", config, "dream", "--dry-run").code == 0
    assert said() == ([], {}) and not (env.state / "state.sqlite").exists()
    for _ in range(2):
        assert cli("--config", config, "index").code == 0
        assert said() == ([str(notes.resolve())], {str(link): str(notes.resolve())})
    other.mkdir()
    link.unlink()
    link.symlink_to(other)
    assert cli("--config", config, "index").code == 0
    now = {str(link): str(other.resolve())}
    assert said() == ([str(notes.resolve()), str(other.resolve())], now)
    monkeypatch.setattr(finder, "REFUSED_RECORD_MAX", len(str(link)) + len(str(other.resolve())))
    assert cli("--config", config, "index").code == 0 and len(said()[0]) == 2  # at it: not past
    with db.transaction() as tx:
        tx.execute("INSERT INTO refused_link VALUES ('/gone/link', '/t')")
    assert cli("--config", config, "index").code == 0
    assert said() == ([str(notes.resolve()), *[str(other.resolve())] * 2], now)


def test_a_link_named_in_extra_memory_dirs_is_followed(
    env: Env, cli, linked_repo: tuple[Path, Path, Path]
) -> None:
    """Naming the target in paths.extra_memory_dirs opts in: the dir is kept as the repo's
    agent memory (its repo root the repo) and indexed; nothing is refused."""
    repo, notes, config = linked_repo
    config.write_text(config.read_text() + f'extra_memory_dirs = ["{notes}"]\n')
    result = cli("--config", config, "index")
    assert result.code == 0, result.err
    assert "deploy.md" in (notes / "MEMORY.md").read_text()
    doc = json.loads(cli("--config", config, "dirs", "--json").out)
    assert doc["refused"] == []
    [linked] = [d for d in doc["dirs"] if d["real_path"] == str(notes.resolve())]
    assert linked["kind"] == "repo-agent" and linked["repo_root"] == str(repo)
    assert refused_rows(env) == []


def test_the_link_named_on_the_command_line_is_followed(
    env: Env, cli, linked_repo: tuple[Path, Path, Path]
) -> None:
    """A person naming the linked folder itself on the command line means it."""
    repo, notes, config = linked_repo
    result = cli("--config", config, "index", repo / ".claude" / "agent-memory" / "notes")
    assert result.code == 0, result.err
    assert (notes / "MEMORY.md").is_file() and refused_rows(env) == []


def test_links_that_stay_inside_or_come_back_are_followed(env: Env, cli, tmp_path: Path) -> None:
    """A link to a folder inside the repo is followed; so is a chain that leaves the repo and
    comes back (the resolved folder is inside, and all I/O goes there, not through the hop);
    a chain that starts inside and ends outside is refused."""
    repo = tmp_path / "repo"
    agents = repo / ".claude" / "agent-memory"
    agents.mkdir(parents=True)
    write_memory(repo / "memories" / "inside", "a.md")
    write_memory(repo / "memories" / "back", "b.md")
    (agents / "inside").symlink_to("../../memories/inside")
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "back").symlink_to(repo / "memories" / "back")
    (agents / "back").symlink_to(hops / "back")
    outside = vault(tmp_path)
    (repo / "memories" / "hop-out").symlink_to(outside)
    (agents / "out").symlink_to(repo / "memories" / "hop-out")
    before_out, before_hops = snapshot(outside.parent), snapshot(hops)
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\nclaude_home = "{env.claude}"\nrepos = ["{repo}"]\n')
    assert cli("--config", config, "index").code == 0
    assert (repo / "memories" / "inside" / "MEMORY.md").is_file()
    assert (repo / "memories" / "back" / "MEMORY.md").is_file()
    assert snapshot(outside.parent) == before_out and snapshot(hops) == before_hops
    [row] = refused_rows(env)
    assert row["dir"] == str(agents / "out") and row["target"] == str(outside.resolve())
    # The hop repointed at the vault: the chain now ends outside, and is refused too.
    (hops / "back").unlink()
    (hops / "back").symlink_to(outside)
    assert cli("--config", config, "index").code == 0
    assert snapshot(outside.parent) == before_out
    assert {r["dir"] for r in refused_rows(env)} == {str(agents / "out"), str(agents / "back")}


def test_a_claude_home_link_out_of_it_is_refused(env: Env, cli, tmp_path: Path) -> None:
    """`projects/<slug>/memory` and `agent-memory/<agent>` linking out of the Claude home are
    left alone (the project's transcripts are not read either)."""
    notes = vault(tmp_path)
    project = env.claude / "projects" / "-x"
    project.mkdir(parents=True)
    (project / "memory").symlink_to(notes)
    (env.claude / "agent-memory").mkdir()
    (env.claude / "agent-memory" / "vaulted").symlink_to(notes)
    before = snapshot(notes.parent)
    assert cli("index").code == 0
    assert cli("dream").code == 0
    assert snapshot(notes.parent) == before
    rows = refused_rows(env)
    assert sorted(r["kind"] for r in rows) == ["agent", "project"]
    assert all(r["within"] == str(env.claude.resolve()) for r in rows)


# --- a repo named on the command line (issue 12, item 2) ---------------------------------------

DESIGN_DOC = "---\ntitle: Design\nstatus: draft\n---\n\n# Design\n\nHow the app is built.\n"


def root_files(repo: Path) -> dict[str, str]:
    """sha256 of every entry right in the repo root (a new MEMORY.md or .trash/ shows up)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in repo.iterdir()
        if p.name not in (".claude", ".git")
    }


@pytest.fixture
def planted_repo(env: Env, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A git repo with top-level docs (a DESIGN.md with frontmatter, a near copy of it, a
    README), a reviewer agent's memory dir, and the user's auto-memory dir for the repo.
    Returns (repo, the agent's dir, the auto-memory dir)."""
    repo = tmp_path / "code" / "app"
    (repo / ".git").mkdir(parents=True)
    (repo / "DESIGN.md").write_text(DESIGN_DOC)
    (repo / "DESIGN-old.md").write_text(DESIGN_DOC)  # a duplicate a dream pass would move
    old = (repo / "DESIGN-old.md").stat().st_mtime - 40 * 86400
    os.utime(repo / "DESIGN-old.md", (old, old))
    (repo / "README.md").write_text("# app\n")
    reviewer = repo / ".claude" / "agent-memory" / "reviewer"
    write_memory(reviewer, "review_style.md", description="how reviews are written")
    auto = env.claude / "projects" / slugify(str(repo)) / "memory"
    write_memory(auto, "deploy.md", description="how staging deploys run")
    return repo, reviewer, auto


def test_a_named_repo_is_its_memory_dirs_never_its_root(
    env: Env, cli, planted_repo: tuple[Path, Path, Path]
) -> None:
    """`dirs`, `index` and `dream --dry-run` on a repo name exactly its agent-memory dir and
    the user's auto-memory dir for it: the root's markdown is never taken for memories (no
    MEMORY.md there, no `Would move: DESIGN-old.md`, its files byte-identical)."""
    repo, reviewer, auto = planted_repo
    before = root_files(repo)
    expected = {str(reviewer), str(auto)}
    listed = cli("dirs", "--json", repo)
    assert listed.code == 0, listed.err
    doc = json.loads(listed.out)
    assert {d["real_path"] for d in doc["dirs"]} == expected
    kinds = {d["real_path"]: (d["kind"], d["repo_root"]) for d in doc["dirs"]}
    assert kinds[str(reviewer)] == ("repo-agent", str(repo))
    assert kinds[str(auto)] == ("project", str(repo))  # no transcripts: the repo it names
    dry = cli("dream", "--dry-run", "--json", repo)
    assert dry.code == 0, dry.err
    assert {d["dir"] for d in json.loads(dry.out)["dirs"]} == expected
    assert "DESIGN" not in dry.out
    text = cli("dream", "--dry-run", repo)
    assert "Would move" not in text.out and "DESIGN" not in text.out
    indexed = cli("index", "--json", repo)
    assert indexed.code == 0, indexed.err
    assert {d["dir"] for d in json.loads(indexed.out)["dirs"]} == expected
    assert (reviewer / "MEMORY.md").is_file() and (auto / "MEMORY.md").is_file()
    assert cli("dream", repo).code == 0
    assert root_files(repo) == before, "the repo root was written to"


def test_a_worktree_is_a_repo_and_finds_its_main_repo_auto_memory(
    env: Env, cli, tmp_path: Path
) -> None:
    """A git worktree has a `.git` file: it is a repo (its notes with frontmatter are no
    memories), and Claude Code's auto memory of its main work tree is found too."""
    main = tmp_path / "code" / "app"
    gitdir = main / ".git" / "worktrees" / "feature"
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    tree = tmp_path / "code" / "app-feature"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {gitdir}\n")
    (tree / "NOTES.md").write_text(DESIGN_DOC)
    auto = env.claude / "projects" / slugify(str(main)) / "memory"
    write_memory(auto, "deploy.md")
    mine = env.claude / "projects" / slugify(str(tree)) / "memory"
    write_memory(mine, "feature.md")
    before = root_files(tree)
    listed = cli("dirs", "--json", tree)
    assert listed.code == 0, listed.err
    assert {d["real_path"] for d in json.loads(listed.out)["dirs"]} == {str(auto), str(mine)}
    assert cli("index", tree).code == 0
    assert root_files(tree) == before and not (tree / "MEMORY.md").exists()


def test_a_repo_without_memory_dirs_says_so_and_writes_nothing(
    env: Env, cli, tmp_path: Path
) -> None:
    """A repo with no memory dir yet is not a usage error: `dirs`, `index` and `dream` say
    plainly that there is nothing, where they looked, and exit 0; nothing is created."""
    repo = tmp_path / "code" / "app"
    (repo / ".claude").mkdir(parents=True)  # a repo by its .claude/ alone (settings only)
    (repo / ".claude" / "settings.json").write_text("{}\n")
    (repo / "DESIGN.md").write_text(DESIGN_DOC)
    before = snapshot(repo)
    for command in (("dirs",), ("index",), ("dream",), ("dream", "--dry-run")):
        result = cli(*command, repo)
        assert result.code == 0, (command, result.err)
        assert "a repo with no memory dirs yet" in result.out, command
        assert f"{repo / '.claude' / 'agent-memory'}/<agent>/" in result.out
        assert slugify(str(repo)) in result.out  # the auto-memory dir it looked for
    doc = json.loads(cli("dirs", "--json", repo).out)
    assert doc["dirs"] == [] and doc["empty_repos"][0]["repo"] == str(repo)
    assert snapshot(repo) == before


def test_explain_refuses_a_file_in_a_repo_root(
    env: Env, cli, planted_repo: tuple[Path, Path, Path]
) -> None:
    """`explain DESIGN.md` in a repo root says it is no memory dir (exit 2), naming what to do."""
    repo, _, _ = planted_repo
    result = cli("explain", repo / "DESIGN.md")
    assert result.code == 2 and "no memory dir" in result.err and "memoryd dirs" in result.err


@needs_corpus
def test_a_folder_of_repos_lists_every_memory_dir_in_it(env: Env, cli, tmp_path: Path) -> None:
    """`memoryd dirs` on the corpus's top folder (a README and a folder per repo) lists every
    memory dir of every repo, each with its repo's kind, and not the top folder itself."""
    root = copy_corpus(tmp_path / "corpus")
    result = cli("--config", "/dev/null", "dirs", "--json", root)
    assert result.code == 0, result.err
    rows = json.loads(result.out)["dirs"]
    listed = {Path(d["real_path"]) for d in rows}
    assert {d.resolve() for d in corpus_memory_dirs(root)} <= listed
    assert root.resolve() not in listed
    kinds = {Path(d["real_path"]).name: d["kind"] for d in rows}
    assert kinds["ork-web-research-analyst"] == "repo-agent"  # a sub-project's .claude/
    assert kinds["review-agent"] == "repo-agent"


# --- an empty memory dir at a known layout (issue 12, item 5) ----------------------------------


def test_an_empty_auto_memory_dir_is_a_dir_with_nothing_to_do(env: Env, cli) -> None:
    """`projects/<slug>/memory/` with no files yet, named on the command line: listed by
    `dirs`, nothing to do for `index` and `dream` (exit 0), nothing written."""
    memory = env.claude / "projects" / "-home-me-app" / "memory"
    memory.mkdir(parents=True)
    listed = cli("dirs", "--json", memory)
    assert listed.code == 0, listed.err
    [row] = json.loads(listed.out)["dirs"]
    assert row["kind"] == "project" and row["memory_files"] == 0
    for command in ("index", "dream"):
        result = cli(command, memory)
        assert result.code == 0, (command, result.err)
    assert sorted(memory.iterdir()) == []


def test_a_trash_path_in_a_gone_folder_is_a_usage_error(env: Env, cli, tmp_path: Path) -> None:
    """`trash restore` of a `.trash/` path whose memory dir does not exist names the folder
    (exit 2), as before memory dirs were told from repos."""
    result = cli("trash", "restore", tmp_path / "gone" / ".trash" / "2024-01-01" / "x.md")
    assert result.code == 2 and "gone: no such folder" in result.err
