"""Commands that agree with each other: options anywhere in every command, one resolver of a
memory's name or path, one label per dir, the same words for the same facts."""

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import memoryd.commands.dirs as dirs_command
from memoryd.cli import build_parser
from memoryd.discover.slugs import slugify
from tests.claude_client import BIN_ENV
from tests.conftest import Env, Result, write_memory

Cli = Callable[..., Result]


@pytest.fixture
def memdir(env: Env, tmp_path: Path) -> Path:
    folder = tmp_path / "app" / ".claude" / "memory"
    (tmp_path / "app" / ".git").mkdir(parents=True)
    for n in range(6):
        write_memory(folder, f"project_m{n}.md", description=f"memory {n}", body=f"topic{n}\n")
    write_memory(folder, "project_zookeeper.md", description="zk", body="zookeeper quorum\n")
    return folder


# --- options go anywhere ------------------------------------------------------------------------
def test_forget_takes_its_options_after_a_query_word(cli: Cli, memdir: Path) -> None:
    done = cli("forget", "zookeeper", "--dry-run", memdir)
    assert done.code == 0, done.err
    assert "project_zookeeper.md" in done.out
    assert (memdir / "project_zookeeper.md").exists()


@pytest.mark.parametrize(
    "words",
    [
        ["forget", "q", "--dry-run", "D"],
        ["history", "n", "--json", "D"],
        ["show", "n", "--json", "D"],
        ["search", "q", "--json", "D", "--limit", "3"],
        ["trash", "list", "--json", "D"],
        ["dream", "D", "--dry-run", "E"],
        ["index", "D", "--check", "E"],
        ["recall", "--path", "a", "--json", "D"],
    ],
)
def test_every_command_takes_options_between_its_positionals(words: list[str]) -> None:
    parser = build_parser(words[0])
    args = parser.parse_args(words)
    assert args.command == words[0]


# --- one resolver -------------------------------------------------------------------------------
def _project(env: Env, tmp_path: Path, name: str) -> Path:
    """A repo and its auto-memory dir in the Claude home, with a transcript naming the repo."""
    repo = tmp_path / "code" / name
    (repo / ".git").mkdir(parents=True)
    folder = env.claude / "projects" / slugify(str(repo))
    (folder / "memory").mkdir(parents=True)
    (folder / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
    for n in range(5):
        write_memory(folder / "memory", f"project_f{n}.md", description=f"filler {n}")
    write_memory(folder / "memory", "user_role.md", name="Role", description=f"the role in {name}")
    return folder / "memory"


@pytest.fixture
def two(env: Env, tmp_path: Path) -> tuple[Path, Path]:
    return _project(env, tmp_path, "alpha"), _project(env, tmp_path, "beta")


def test_show_inside_a_repo_finds_that_repos_memory_first(
    cli: Cli, two: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for folder, name in zip(two, ("alpha", "beta"), strict=True):
        monkeypatch.chdir(tmp_path / "code" / name / ".git")  # anywhere inside the repo
        shown = cli("show", "user_role", "--json")
        assert shown.code == 0, shown.err
        assert json.loads(shown.out)["memory"]["file"] == str(folder / "user_role.md")


def _trash_both(cli: Cli, two: tuple[Path, Path]) -> None:
    for folder in two:
        assert cli("forget", folder / "user_role.md", "--yes").code == 0


@pytest.mark.parametrize(
    "words",
    [
        ["show", "user_role"],
        ["show", "Role"],
        ["history", "user_role"],
        ["history", "user_role.md"],
        ["explain", "user_role"],
        ["ack", "user_role.md"],
        ["forget", "user_role.md", "--dry-run"],
        ["trash", "restore", "user_role"],
    ],
)
def test_an_ambiguous_name_is_a_usage_error_listing_every_candidate(
    cli: Cli,
    two: tuple[Path, Path],
    words: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if words[0] in ("history", "trash"):
        assert cli("index").code == 0  # a version of each kept
    if words[0] == "trash":
        _trash_both(cli, two)
    monkeypatch.chdir(tmp_path)  # in neither repo
    done = cli(*words)
    assert done.code == 2, (done.out, done.err)
    for folder in two:
        assert str(folder / "user_role.md") in done.err
    assert all((folder / "user_role.md").exists() for folder in two) or words[0] == "trash"


@pytest.mark.parametrize(
    "words",
    [
        ["show", "Role"],
        ["history", "user_role"],
        ["explain", "user_role"],
        ["trash", "restore", "user_role"],
    ],
)
def test_each_command_takes_a_name_without_md_or_its_name_field_inside_a_repo(
    cli: Cli,
    two: tuple[Path, Path],
    words: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    assert cli("index").code == 0
    if words[0] == "trash":
        _trash_both(cli, two)
    monkeypatch.chdir(tmp_path / "code" / "beta")
    done = cli(*words)
    assert done.code == 0, (done.out, done.err)
    assert str(two[1]) in done.out and str(two[0]) not in done.out
    if words[0] == "trash":
        assert (two[1] / "user_role.md").exists() and not (two[0] / "user_role.md").exists()


def test_ack_takes_a_memorys_name(
    cli: Cli, two: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path / "code" / "alpha")
    done = cli("ack", "user_role")
    # Resolved to alpha's file: it is a memory, not flagged (nothing to acknowledge).
    assert f"{two[0] / 'user_role.md'}: not flagged for review" in done.out, done.err


def test_history_by_name_without_md_lists_its_versions_and_diffs_them(
    cli: Cli, memdir: Path
) -> None:
    assert cli("index", memdir).code == 0
    write_memory(memdir, "project_m1.md", description="memory 1", body="topic1, changed\n")
    assert cli("index", memdir).code == 0
    listed = cli("history", "project_m1", "--json", memdir)
    assert listed.code == 0, listed.err
    assert len(json.loads(listed.out)["versions"]["versions"]) == 2
    diff = cli("history", "project_m1", memdir, "--diff")
    assert diff.code == 0 and "+topic1, changed" in diff.out, diff.out


def test_history_of_memory_md_named_inside_its_dir(
    cli: Cli, two: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("index").code == 0
    monkeypatch.chdir(two[0])
    done = cli("history", "MEMORY.md")
    assert done.code == 0, done.err
    assert str(two[0] / "MEMORY.md") in done.out and str(two[1]) not in done.out
    assert f"{two[0] / 'MEMORY.md'}: 1 version kept" in done.out


def test_history_names_a_deleted_memory(cli: Cli, memdir: Path) -> None:
    assert cli("index", memdir).code == 0
    (memdir / "project_m2.md").unlink()
    assert cli("index", memdir).code == 0
    done = cli("history", "project_m2", memdir)
    assert done.code == 0, done.err
    assert "project_m2.md" in done.out and "Versions:" in done.out


# --- one label per dir --------------------------------------------------------------------------
@pytest.fixture
def labelled(env: Env) -> dict[Path, str]:
    """Two per-project dirs under the home: one whose repo a transcript names (labelled by
    the repo), one with none (by its slug less the home folder's)."""
    repo = env.home / "src" / "claude-config"
    (repo / ".git").mkdir(parents=True)
    known = env.claude / "projects" / slugify(str(repo))
    (known / "memory").mkdir(parents=True)
    (known / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
    unknown = env.claude / "projects" / slugify(str(env.home / "src" / "gone-project"))
    out = {known / "memory": "claude-config", unknown / "memory": "src-gone-project"}
    for folder in out:
        write_memory(folder, "project_deploy.md", description="deploy steps", body="deploy\n")
    return out


def test_every_command_labels_a_dir_the_same_way(
    cli: Cli, labelled: dict[Path, str], env: Env
) -> None:
    index = cli("index", "-v")
    dream = cli("dream", "--dry-run")
    dirs = {row["path"]: row["name"] for row in json.loads(cli("dirs", "--json").out)["dirs"]}
    status = cli("status").out
    log = cli("log").out
    hits = json.loads(cli("search", "deploy", "--json").out)["results"]
    searched = {str(Path(hit["file"]).parent): hit["dir"] for hit in hits}
    for folder, label in labelled.items():
        assert f"{label} ({folder}): " in index.out, index.out
        assert f"{label} ({folder}): " in dream.out, dream.out
        assert dirs[str(folder)] == label
        assert f"  {label}  " in status, status
        assert f" {label}  " in log, log
        assert searched[str(folder)] == label


def test_a_user_scope_agent_dir_named_is_the_users_not_a_repos(cli: Cli, env: Env) -> None:
    folder = env.claude / "agent-memory" / "reviewer"
    write_memory(folder, "feedback_style.md", description="style")
    (row,) = json.loads(cli("dirs", folder, "--json").out)["dirs"]
    assert (row["kind"], row["repo_root"], row["name"]) == ("agent", None, "agent/reviewer")


# --- switches under which Claude Code loads no MEMORY.md ----------------------------------------
LOADS_NONE = (
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_CODE_SAFE_MODE",
    "CLAUDE_MEMORY_STORES",
    "CLAUDE_CODE_REMOTE",
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS",
)


@pytest.fixture
def clean_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LOADS_NONE, "CLAUDE_CODE_DISABLE_AUTO_MEMORY", "CLAUDE_CODE_REMOTE_MEMORY_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("where", ["environment", "settings"])
@pytest.mark.parametrize("name", LOADS_NONE)
def test_dirs_and_status_say_claude_code_loads_no_memory_md_under_each_switch(
    cli: Cli,
    env: Env,
    labelled: dict[Path, str],
    clean_switches: None,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    where: str,
) -> None:
    if where == "environment":
        monkeypatch.setenv(name, "1")
        said = f"Auto memory is turned off ({name}=1 in memoryd's environment)"
    else:
        settings = env.claude / "settings.json"
        settings.write_text(json.dumps({"env": {name: "1"}}))
        said = f"Auto memory is turned off ({name}=1 in the env of {settings})"
    assert said in cli("dirs").out
    assert said in cli("status").out
    assert json.loads(cli("status", "--json").out)["auto_memory_off"]
    rows = json.loads(cli("dirs", "--json").out)["dirs"]
    assert all(name in row["not_loaded"] for row in rows if row["kind"] == "project"), rows


def test_a_switch_set_false_leaves_auto_memory_on(
    cli: Cli, labelled: dict[Path, str], clean_switches: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in LOADS_NONE:
        monkeypatch.setenv(name, "" if name == "CLAUDE_MEMORY_STORES" else "0")
    assert "Auto memory is turned off" not in cli("dirs").out
    assert json.loads(cli("status", "--json").out)["auto_memory_off"] == ""


@pytest.mark.skipif(not os.environ.get(BIN_ENV), reason=f"set {BIN_ENV} to run the real client")
@pytest.mark.parametrize("name", LOADS_NONE)
def test_the_real_client_loads_no_memory_md_where_memoryd_says_so(
    cli: Cli,
    env: Env,
    tmp_path: Path,
    clean_switches: None,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    from tests.claude_client import run_claude

    repo = tmp_path / "proj"
    (repo / ".git").mkdir(parents=True)
    folder = env.claude / "projects" / slugify(str(repo)) / "memory"
    write_memory(folder, "user_zebra.md", description="about zebras")
    assert cli("index", folder).code == 0
    loaded = run_claude(env.home, repo)
    assert [b for b in loaded.memory if "auto-memory" in b.label]  # the baseline loads it
    switched = run_claude(env.home, repo, {name: "1"})
    assert switched.returncode == 0, switched.stderr
    assert not [b for b in switched.memory if "auto-memory" in b.label]
    monkeypatch.setenv(name, "1")  # read by memoryd at the command's start
    assert f"Auto memory is turned off ({name}=1" in cli("dirs").out


# --- words that are true ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "advice", "not_said"),
    [
        (errno.EACCES, "Fix the permissions there", "Free disk space"),
        (errno.ENOSPC, "Free disk space there", "permissions"),
    ],
)
def test_an_error_no_step_handled_is_answered_by_what_the_system_said(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, code: int, advice: str, not_said: str
) -> None:
    def fails(*args: object) -> int:
        raise OSError(code, os.strerror(code), "/proc/1/fdinfo/MEMORY.md")

    monkeypatch.setattr(dirs_command, "run", fails)
    done = cli("dirs")
    assert done.code == 1
    assert f"/proc/1/fdinfo/MEMORY.md: {os.strerror(code)}. {advice}" in done.err, done.err
    assert not_said not in done.err


def test_log_summary_tells_a_version_written_back_from_a_restore_out_of_the_trash(
    cli: Cli, memdir: Path
) -> None:
    assert cli("index", memdir).code == 0
    write_memory(memdir, "project_m1.md", description="memory 1", body="topic1, changed\n")
    assert cli("index", memdir).code == 0
    assert cli("history", "project_m1", memdir, "--restore", "1").code == 0
    summary = cli("log", "--summary").out
    assert "1 earlier version written back" in summary, summary
    assert "restored from the trash" not in summary
    (counts,) = json.loads(cli("log", "--summary", "--json").out)["dirs"].values()
    assert (counts["restored"], counts["versions_restored"]) == (0, 1)


def test_history_json_is_the_document_the_readme_describes(cli: Cli, memdir: Path) -> None:
    assert cli("index", memdir).code == 0
    doc = json.loads(cli("history", "project_m1", memdir, "--json").out)
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith("| `memoryd history")]
    assert "list of entries" not in row
    for key in (*doc, *doc["histories"][0], *doc["versions"], *doc["versions"]["versions"][0]):
        assert f"`{key}`" in row, key


def test_trash_purge_dry_run_says_when_nothing_would_be_purged(cli: Cli, memdir: Path) -> None:
    done = cli("trash", "purge", "--dry-run", memdir)
    assert done.code == 0
    assert done.out == (
        "[DRY RUN] nothing would be purged: no trash day folder is past the retention "
        "(30 days) in the 1 dir(s) looked at\n"
    )


def test_trash_restore_usage_names_only_its_required_argument(cli: Cli) -> None:
    done = cli("trash", "restore")
    assert done.code == 2
    assert "the following arguments are required: ID|PATH|NAME\n" in done.err, done.err


# --- trash list REPO, and a dir deleted whole --------------------------------------------------
RULES = "## Rules Reference\n\n- never push on Fridays\n"


@pytest.fixture
def agent_dir(tmp_path: Path, env: Env, cli: Cli) -> Path:
    """A repo-scope agent dir with a hand-written section in its index, its versions kept."""
    folder = tmp_path / "app" / ".claude" / "agent-memory" / "reviewer"
    (tmp_path / "app" / ".git").mkdir(parents=True)
    for n in range(3):
        write_memory(folder, f"feedback_r{n}.md", description=f"review rule {n}")
    (folder / "MEMORY.md").write_text(
        "# reviewer Memory\n\n"
        + "".join(f"- [r{n}](feedback_r{n}.md) — review rule {n}\n" for n in range(3))
        + "\n"
        + RULES
    )
    assert cli("index", tmp_path / "app").code == 0
    return folder


@pytest.mark.parametrize("named", ["app", "app/.claude"])
def test_trash_list_of_a_repo_lists_what_was_deleted_outside_memoryd_in_its_dirs(
    cli: Cli, agent_dir: Path, tmp_path: Path, named: str
) -> None:
    (agent_dir / "feedback_r1.md").unlink()
    assert cli("index", tmp_path / "app").code == 0  # sees it gone
    listed = cli("trash", "list", tmp_path / named)
    assert "The trash is empty." not in listed.out
    assert f"deleted outside memoryd, just now  {agent_dir / 'feedback_r1.md'}" in listed.out
    doc = json.loads(cli("trash", "list", tmp_path / named, "--json").out)
    assert [d["file"] for d in doc["deleted_outside"]] == ["feedback_r1.md"]


def test_a_dir_deleted_whole_comes_back_with_its_last_kept_index(
    cli: Cli, agent_dir: Path, tmp_path: Path
) -> None:
    before = (agent_dir / "MEMORY.md").read_text()
    assert RULES in before
    shutil.rmtree(agent_dir)
    doc = json.loads(cli("trash", "list", tmp_path / "app", "--json").out)
    ids = [d["id"] for d in doc["deleted_outside"]]
    assert len(ids) == 3
    back = cli("trash", "restore", ids[0], tmp_path / "app")
    assert back.code == 0, back.err
    assert RULES in (agent_dir / "MEMORY.md").read_text()
    for restore_id in ids[1:]:
        assert cli("trash", "restore", restore_id).code == 0
    assert (agent_dir / "MEMORY.md").read_text() == before


# --- the MCP tools -------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_the_mcp_tools_refuse_what_the_cli_refuses_bound_every_list_and_read_the_clients_project(
    env: Env, tmp_path: Path
) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed")
    import asyncio
    import sys

    from mcp.client.stdio import StdioServerParameters

    from memoryd.commands.search import TYPES
    from tests.helpers import mcp_drive, mcp_structured

    repo = tmp_path / "app"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def handle():\n    return 1\n")
    folder = repo / ".claude" / "memory"
    for n in range(14):
        write_memory(
            folder, f"project_n{n}.md", description=f"n {n}", body="See `src/app.py`.\n", age_days=5
        )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", str(repo)],
        cwd=elsewhere,  # the server's own folder is not the client's project
        env={
            "HOME": str(env.home),
            "XDG_CONFIG_HOME": str(env.home / ".config"),
            "XDG_STATE_HOME": str(env.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(env.home / ".cache"),
            "CLAUDE_PROJECT_DIR": str(repo),
        },
    )
    calls: list[tuple[str, dict[str, object]]] = [
        ("search_memories", {"query": "note", "type": "notes"}),
        ("search_memories", {"query": "note", "limit": 0}),
        ("recent_memories", {"timeframe": "lastweek"}),
        ("recent_memories", {}),
        ("recent_memories", {"limit": 12}),
        ("recall_for_paths", {"paths": ["src/app.py"]}),
        ("read_memory", {"file": ".claude/memory/project_n3.md"}),
    ]
    _, tools, answers = asyncio.run(mcp_drive(params, calls))
    schemas = {t.name: t.input_schema["properties"] for t in tools.tools}
    assert {"enum": list(TYPES), "type": "string"} in schemas["search_memories"]["type"]["anyOf"]
    for name in ("search_memories", "recent_memories"):
        frames = schemas[name]["timeframe"]["anyOf"]
        assert {"enum": ["recent", "last_quarter"], "type": "string"} in frames
    for name in ("search_memories", "recall_for_paths", "recent_memories"):
        assert (schemas[name]["limit"]["minimum"], schemas[name]["limit"]["maximum"]) == (1, 50)
    assert all(answer.is_error for answer in answers[:3])
    assert len(mcp_structured(answers[3])["results"]) == 10
    assert len(mcp_structured(answers[4])["results"]) == 12
    recalled = mcp_structured(answers[5])["results"]
    assert len(recalled) == 10 and all(r["why"] == ["cites src/app.py"] for r in recalled)
    assert mcp_structured(answers[6])["text"] == (folder / "project_n3.md").read_text()


def test_the_label_a_search_shows_is_a_project_it_takes(
    labelled: dict[Path, str], env: Env
) -> None:
    from memoryd.config import Config
    from memoryd.discover.finder import memory_dir_at
    from memoryd.recall.engine import matches_project

    for folder, label in labelled.items():
        assert matches_project(memory_dir_at(folder, Config()), label), label


def test_a_dir_named_on_its_own_inside_a_repo_has_one_label_too(
    cli: Cli, env: Env, tmp_path: Path
) -> None:
    (tmp_path / "app" / ".git").mkdir(parents=True)
    folder = tmp_path / "app" / "docs" / "memories"
    for n in range(2):
        write_memory(folder, f"project_e{n}.md", description=f"explicit {n}")
    index = cli("index", folder)
    assert f"app/docs/memories ({folder}): updated" in index.out, index.out
    (row,) = json.loads(cli("dirs", folder, "--json").out)["dirs"]
    assert row["name"] == "app/docs/memories"
    assert " app/docs/memories  " in cli("log").out
