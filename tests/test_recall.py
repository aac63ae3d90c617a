"""Recall: `memoryd search`, `recall`, `show` and the search index behind them (issue 15)."""

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from time import time_ns
from types import SimpleNamespace

import pytest

from memoryd.config import Config, RecallConfig, build_config
from memoryd.discover.finder import memory_dir_at
from memoryd.discover.found import MemoryDir
from memoryd.recall import listing, reads, records, store
from memoryd.recall.engine import Engine
from memoryd.recall.lookup import engine_for
from memoryd.recall.query import Frame, parse_frame
from memoryd.recall.store import DirIndex, IndexOptions, index_path, update_dir
from tests.conftest import Env, tree_digest, write_memory
from tests.helpers import home_env

DAY = 86400.0
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC).timestamp()


def plant(
    folder: Path,
    filename: str,
    *,
    name: str,
    description: str,
    body: str,
    type_: str = "project",
    age_days: float = 1.0,
    extra: str = "",
) -> Path:
    """A memory file whose mtime is `age_days` before NOW (the fake clock)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(
        f"---\nname: {name}\ndescription: {description}\ntype: {type_}\n{extra}---\n\n{body}",
        encoding="utf-8",
    )
    when = NOW - age_days * DAY
    os.utime(path, (when, when))
    return path


@pytest.fixture
def mem(tmp_path: Path) -> Path:
    """A memory dir with memories in both tiers, one unindexed, and every date kind."""
    folder = tmp_path / "mem"
    plant(
        folder,
        "project_deploy_flow.md",
        name="Deploy flow",
        description="how staging deployments run",
        body="Staging deploys go through `scripts/deploy.sh`; prod needs a green build.\n",
        age_days=3,
    )
    plant(
        folder,
        "feedback_db_tests.md",
        name="Database tests",
        description="never mock the database in integration tests",
        body="Use the real postgres container; mocks hid a broken migration.\n",
        type_="feedback",
        age_days=200,
        # Confirmed 10 days ago, whatever its mtime says.
        extra="last_verified: 2026-06-05\n",
    )
    plant(
        folder,
        "project_old_cache.md",
        name="Old cache layer",
        description="redis cache in front of the search service",
        body="The cache layer keys entries by tenant; eviction is LRU.\n",
        age_days=120,
    )
    plant(
        folder,
        "reference_dashboards.md",
        name="Dashboards",
        description="where the grafana dashboards live",
        body="Latency panels for the search service are on the ops board.\n",
        type_="reference",
        age_days=45,
    )
    plant(
        folder,
        "user_prefs.md",
        name="User preferences",
        description="prefers short answers",
        body="Keep replies short; no emojis.\n",
        type_="user",
        age_days=400,
        extra="modified: 2026-05-20\n",
    )
    (folder / "MEMORY.md").write_text(
        "# Memory\n\n"
        "- [Deploy flow](project_deploy_flow.md) — how staging deployments run\n"
        "- [Database tests](feedback_db_tests.md) — never mock the database\n"
        "- [Dashboards](reference_dashboards.md) — grafana\n",
        encoding="utf-8",
    )
    (folder / "MEMORY-ARCHIVE.md").write_text(
        "# Archive\n\n- [Old cache layer](project_old_cache.md) — redis cache\n",
        encoding="utf-8",
    )
    return folder


def md_of(folder: Path) -> MemoryDir:
    return memory_dir_at(folder, Config())


def engine(env: Env, *folders: Path, stale_after: float = 90 * DAY) -> Engine:
    return Engine(
        [md_of(f) for f in folders],
        env.state,
        clock=lambda: NOW,
        stale_after=stale_after,
        options=IndexOptions(warn=lambda m: None),
    )


def files(hits: list[dict[str, object]]) -> list[str]:
    return [Path(str(h["file"])).name for h in hits]


def search(env: Env, folder: Path, query: str, **kw: object) -> list[dict[str, object]]:
    with engine(env, folder) as e:
        e.refresh()
        return e.results(e.search(query, **kw))  # type: ignore[arg-type]


# --- tiers, dates, flags ------------------------------------------------------------------------
def test_results_carry_both_tiers_and_unindexed_files(env: Env, mem: Path) -> None:
    """A pointer in MEMORY.md is tier `index` (with its line), the archive's is `archive`, a
    memory with no pointer is `unindexed`; all three are searched."""
    with engine(env, mem) as e:
        e.refresh()
        got = {Path(str(r["file"])).name: r for r in e.results(e.recent(frame=Frame()))}
    assert got["project_deploy_flow.md"]["tier"] == "index"
    assert got["project_deploy_flow.md"]["line"] == 3
    assert got["project_old_cache.md"]["tier"] == "archive"
    assert got["project_old_cache.md"]["line"] == 3
    assert got["user_prefs.md"]["tier"] == "unindexed"
    assert got["user_prefs.md"]["line"] == 0
    assert files(search(env, mem, "redis eviction")) == ["project_old_cache.md"]


def test_dates_are_the_newest_of_mtime_modified_and_last_verified(env: Env, mem: Path) -> None:
    """A memory's date is the newest of its mtime and its frontmatter `modified` /
    `last_verified`; older than recall.stale_after it is flagged unconfirmed with its age."""
    with engine(env, mem) as e:
        e.refresh()
        got = {Path(str(r["file"])).name: r for r in e.results(e.recent(frame=Frame()))}
    assert got["feedback_db_tests.md"]["date"] == "2026-06-05"
    assert got["feedback_db_tests.md"]["unconfirmed"] is False
    assert got["user_prefs.md"]["date"] == "2026-05-20"
    assert got["project_old_cache.md"]["unconfirmed"] is True
    assert got["project_old_cache.md"]["flags"] == ["unconfirmed 120 d"]
    assert got["project_old_cache.md"]["age_days"] == 120
    assert got["reference_dashboards.md"]["unconfirmed"] is False


def test_stale_after_comes_from_the_config(env: Env, mem: Path) -> None:
    """`recall.stale_after` moves the line: at 30d the 45-day-old memory is unconfirmed."""
    config = build_config({"recall": {"stale_after": "30d"}}, "test")
    assert config.recall == RecallConfig(stale_after=30 * DAY)
    rt = replace(env.runtime(config), clock=lambda: NOW)
    with engine_for(rt, [md_of(mem)]) as e:
        e.refresh()
        (hit,) = e.results(e.search("grafana dashboards"))
    assert hit["flags"] == ["unconfirmed 45 d"]
    with pytest.raises(Exception, match=r"recall\.stale_after"):
        build_config({"recall": {"stale_after": "soon"}}, "test")


def test_memoryds_own_commands_give_the_index_worker_processes(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memoryd search`/`recall`/`show` and the MCP server (engine_for) give each index
    worker_count()'s processes for a big first build: their __main__ is guarded."""
    monkeypatch.setattr(store, "worker_count", lambda: 3)
    with engine_for(env.runtime(Config()), [md_of(mem)]) as e:
        assert [index.workers for index in e.indexes.values()] == [3]
    with Engine([md_of(mem)], env.state) as e:
        assert [index.workers for index in e.indexes.values()] == [0]


def test_unconfirmed_memories_rank_after_confirmed_ones(env: Env, tmp_path: Path) -> None:
    """The better bm25 match loses its place when it is unconfirmed; nothing is moved."""
    folder = tmp_path / "m"
    old = plant(
        folder,
        "a_old.md",
        name="Cache",
        description="search cache search cache",
        body="search cache search cache search cache\n",
        age_days=200,
    )
    plant(folder, "b_new.md", name="Other", description="notes", body="a search cache", age_days=2)
    before = tree_digest(folder)
    hits = search(env, folder, "search cache")
    assert files(hits) == ["b_new.md", "a_old.md"]
    assert hits[1]["flags"] == ["unconfirmed 200 d"]
    # With a longer stale_after both are confirmed and bm25 decides.
    with engine(env, folder, stale_after=400 * DAY) as e:
        e.refresh()
        assert files(e.results(e.search("search cache"))) == ["a_old.md", "b_new.md"]
    assert tree_digest(folder) == before and old.exists()


def test_flags_from_frontmatter(env: Env, tmp_path: Path) -> None:
    """`acknowledged` and `supersedes` in a memory's frontmatter become flags."""
    folder = tmp_path / "m"
    plant(
        folder,
        "x.md",
        name="Queue",
        description="the job queue",
        body="Jobs retry three times.\n",
        age_days=150,
        extra="acknowledged: 2026-06-01\nsupersedes: [old_queue, older_queue]\n",
    )
    (hit,) = search(env, folder, "queue")
    assert hit["flags"] == [
        "unconfirmed 150 d",
        "acknowledged",
        "supersedes old_queue, older_queue",
    ]


# --- filters and time frames --------------------------------------------------------------------
def test_type_filter(env: Env, mem: Path) -> None:
    """`type` keeps only memories of that type."""
    assert files(search(env, mem, "search service")) == [
        "reference_dashboards.md",
        "project_old_cache.md",
    ]
    assert files(search(env, mem, "search service", type_="reference")) == [
        "reference_dashboards.md"
    ]
    assert search(env, mem, "search service", type_="user") == []


@pytest.mark.parametrize(
    ("timeframe", "since", "expected"),
    [
        ("recent", None, {"project_deploy_flow.md", "feedback_db_tests.md", "user_prefs.md"}),
        (
            "last_quarter",
            None,
            {
                "project_deploy_flow.md",
                "feedback_db_tests.md",
                "user_prefs.md",
                "reference_dashboards.md",
            },
        ),
        ("2026-05", None, {"reference_dashboards.md", "user_prefs.md"}),
        ("2026-02", None, {"project_old_cache.md"}),
        (None, "7d", {"project_deploy_flow.md"}),
        (None, "2026-06-01", {"project_deploy_flow.md", "feedback_db_tests.md"}),
    ],
)
def test_time_frames(
    env: Env, mem: Path, timeframe: str | None, since: str | None, expected: set[str]
) -> None:
    """recent = 30 days, last_quarter = 90 days, YYYY-MM = that month (UTC), --since a
    duration or a date; all against the injected clock."""
    frame = parse_frame(timeframe, since, NOW)
    with engine(env, mem) as e:
        e.refresh()
        assert set(files(e.results(e.recent(frame=frame, limit=50)))) == expected
        # The same frame filters a search.
        found = set(files(e.results(e.search("the", frame=frame, limit=50))))
        assert found <= expected


def test_bad_time_frames_are_usage_errors(env: Env, mem: Path, cli) -> None:
    """An unknown frame or --since names what is accepted and exits 2."""
    for bad in (["--timeframe", "lastweek"], ["--timeframe", "2026-13"], ["--since", "soon"]):
        result = cli("search", "deploy", mem, *bad)
        assert result.code == 2
        assert "recent" in result.err or "duration" in result.err
    with pytest.raises(ValueError, match="not both"):
        parse_frame("recent", "30d", NOW)


def test_project_filter(env: Env, mem: Path, tmp_path: Path) -> None:
    """`project` keeps only the dirs of that name or path."""
    other = tmp_path / "other"
    plant(other, "deploy.md", name="Deploy", description="deploys elsewhere", body="x\n")
    with engine(env, mem, other) as e:
        e.refresh()
        assert set(files(e.results(e.search("deploy")))) == {"project_deploy_flow.md", "deploy.md"}
        assert files(e.results(e.search("deploy", project="other"))) == ["deploy.md"]
        assert files(e.results(e.search("deploy", project=str(mem)))) == ["project_deploy_flow.md"]


# --- matching -----------------------------------------------------------------------------------
def test_typos_and_word_forms_match_and_exact_names_rank_first(env: Env, mem: Path) -> None:
    """`deploymnt` (a typo) and `deploys`/`deploying` (word forms) find the deploy memory; a
    memory's exact name ranks first even over better text matches."""
    for query in ("deploymnt", "deploys", "deploying", "deployment", "stagng"):
        assert files(search(env, mem, query))[:1] == ["project_deploy_flow.md"], query
    folder = mem.parent / "names"
    plant(folder, "a.md", name="Alpha", description="cache cache cache", body="cache cache\n")
    plant(folder, "cache.md", name="Cache", description="notes", body="x\n")
    hits = search(env, folder, "cache")
    assert files(hits) == ["cache.md", "a.md"]
    assert hits[0]["why"] == ["exact name"]


def test_one_list_across_dirs_ranks_the_memory_holding_every_word_first(
    env: Env, tmp_path: Path
) -> None:
    """`e2e test`: the one memory holding both words ranks first, before the many of other
    dirs holding only `test`/`tests`/`tests2` (no memory there holds `e2e`, which another dir
    does: they hold some of the words, not every one)."""
    pilot = tmp_path / "vrcpilot"
    description = (
        "tests/e2e/ シナリオは人手作業として残さず、Claude 自身が `just e2e-test` で実行・検証する"
    )
    body = "`tests/e2e/` 配下の e2e シナリオは Claude セッション内で実行する\n"
    plant(pilot, "feedback_e2e_run.md", name="e2e は Claude が実行する", type_="feedback",
          description=description, body=body)  # fmt: skip
    plant(pilot, "notes.md", name="Notes", description="misc", body="capture window\n")
    for d in range(3):
        other = tmp_path / f"proj{d}"
        for topic in ("anchor", "barley", "canyon", "dolphin", "ember", "fjord"):
            plant(other, f"{topic}.md", name=topic, description="misc", body=f"{topic} notes\n")
        plant(other, "tests.md", name="tests", description="tests2 tests", body="tests tests2\n")
        plant(other, "test.md", name="test", description="test runner", body="test test\n")
    with engine(env, *sorted(tmp_path.iterdir())) as e:
        e.refresh()
        hits = e.results(e.search("e2e test", limit=30))
    assert files(hits)[0] == "feedback_e2e_run.md"
    assert all("why" not in h for h in hits)  # nothing taken for a typo of `e2e`


def test_a_word_one_dir_holds_is_no_typo_in_another(env: Env, tmp_path: Path) -> None:
    """`stash --type feedback`: the exact `stash` memories of two dirs, never a third dir's
    fuzzy `stats` one; a word no dir holds still finds its closest words."""
    for d in ("a", "b"):
        plant(tmp_path / d, f"stash_{d}.md", name=f"Stash {d}", type_="feedback",
              description="git", body="never stash with untracked files\n")  # fmt: skip
    plant(tmp_path / "c", "stats.md", name="Numbers", type_="feedback",
          description="metrics", body="the stats page is slow\n")  # fmt: skip
    with engine(env, *sorted(tmp_path.iterdir())) as e:
        e.refresh()
        assert set(files(e.results(e.search("stash", type_="feedback")))) == {
            "stash_a.md",
            "stash_b.md",
        }
        assert files(e.results(e.search("statz", type_="feedback"))) == ["stats.md"]


def test_word_forms_are_words_the_dir_holds_not_a_stemmed_prefix(env: Env, tmp_path: Path) -> None:
    """A word's other forms are the dir's words starting with its prefix (`deploys` ->
    `deployment`), not an FTS5 prefix query: the porter tokenizer stems that prefix too
    (`doing*` is `do*`), which matched `docker`, `docs`, `done`, and cost a merge of every
    doclist those words have."""
    folder = tmp_path / "forms"
    plant(folder, "doing.md", name="Release", description="notes", body="doing the release\n")
    plant(folder, "docker.md", name="Images", description="notes", body="docker docs done\n")
    plant(folder, "deploy.md", name="Rollout", description="notes", body="the deployments\n")
    assert files(search(env, folder, "doing")) == ["doing.md"]
    assert files(search(env, folder, "deploys")) == ["deploy.md"]


def test_snippet_marks_the_matches(env: Env, mem: Path) -> None:
    """A result's snippet is one line with the matched words marked."""
    (hit,) = search(env, mem, "postgres")
    assert "**postgres**" in str(hit["snippet"])
    assert "\n" not in str(hit["snippet"])


# --- unparseable and other files ----------------------------------------------------------------
def test_unparseable_files_are_excluded_with_why_and_never_crash(env: Env, mem: Path, cli) -> None:
    """Bad YAML, binary data, a FIFO, a symlink, a file over the limit and a note without
    frontmatter are not searched; each is listed with why, and search still answers."""
    (mem / "bad_yaml.md").write_text("---\nname: [deploy\n---\ndeploy\n")
    (mem / "binary.md").write_bytes(b"---\nname: deploy\n---\n\x00\x01deploy")
    os.mkfifo(mem / "pipe.md")
    (mem / "link.md").symlink_to(mem / "project_deploy_flow.md")
    (mem / "huge.md").write_text("---\nname: deploy\n---\n" + "deploy " * 200_000)
    (mem / "README.md").write_text("# deploy notes\n")
    result = cli("search", "deploy", mem, "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert files(data["results"]) == ["project_deploy_flow.md"]
    why = {Path(x["file"]).name: x["why"] for x in data["excluded"]}
    assert "not valid YAML" in why["bad_yaml.md"]
    assert "binary" in why["binary.md"]
    assert "FIFO" in why["pipe.md"]
    assert "symlink" in why["link.md"]
    assert "limit" in why["huge.md"]
    assert "no frontmatter" in why["README.md"]
    text = cli("search", "deploy", mem)
    for name in ("bad_yaml.md", "binary.md", "pipe.md", "link.md", "huge.md"):
        assert f"not searched: {mem / name}: " in text.out
    assert "README.md" not in text.out
    shown = cli("show", mem / "bad_yaml.md")
    assert shown.code == 1
    assert "not shown" in shown.out and "not valid YAML" in shown.out


def test_a_file_name_that_is_not_utf8_is_left_out_and_search_still_answers(
    env: Env, mem: Path, cli
) -> None:
    """A name read with surrogate escapes cannot be put in SQLite's text: every search (and
    every daemon update naming it) crashed with UnicodeEncodeError."""
    odd = os.fsdecode(b"und\xffcodable.md")
    (mem / odd).write_text("---\nname: odd\ndescription: deploy odd\ntype: user\n---\nx\n")
    result = cli("search", "deploy", mem, "--json")
    assert result.code == 0, result.err
    assert files(json.loads(result.out)["results"]) == ["project_deploy_flow.md"]
    with DirIndex(index_path(env.state, mem.resolve()), mem.resolve()) as index:
        index.update([odd, "project_deploy_flow.md"])


# --- path and symbol recall ---------------------------------------------------------------------
@pytest.fixture
def planted_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A repo with code and a repo-scope memory dir whose memories cite its files."""
    root = tmp_path / "app"
    (root / "src" / "api").mkdir(parents=True)
    (root / "src" / "api" / "handler.py").write_text("def handle_request():\n    pass\n")
    (root / "src" / "jobs").mkdir()
    (root / "src" / "jobs" / "worker.py").write_text("class RetryPolicy: ...\n")
    (root / "docs").mkdir()
    (root / ".git").mkdir()
    folder = root / ".claude" / "memory"
    plant(folder, "m_exact.md", name="Handler", description="request handler",
          body="Edit `src/api/handler.py:40` with care.\n")  # fmt: skip
    plant(folder, "m_folder.md", name="API", description="the api package",
          body="Everything under `src/api/` is public.\n")  # fmt: skip
    plant(folder, "m_moved.md", name="Worker", description="the worker",
          body="The queue worker lives in `src/worker.py`.\n")  # fmt: skip
    plant(folder, "m_symbol.md", name="Retries", description="retry rules",
          body="Use `RetryPolicy` and call `handle_request()` once.\n")  # fmt: skip
    plant(folder, "m_none.md", name="Docs", description="docs", body="See `docs/guide.md`.\n")
    return root, folder


def test_recall_by_path_and_symbol_on_a_planted_repo(
    env: Env, planted_repo: tuple[Path, Path], cli
) -> None:
    """The file cited, a folder above it, and the old place of a moved file all recall their
    memories (the dream pass's extraction); symbols recall the memories naming them."""
    root, _ = planted_repo
    before = tree_digest(root)
    result = cli("recall", "--path", root / "src" / "api" / "handler.py", "--json", "--", root)
    assert result.code == 0, result.err
    got = {Path(r["file"]).name: r["why"] for r in json.loads(result.out)["results"]}
    assert got == {
        "m_exact.md": ["cites src/api/handler.py"],
        "m_folder.md": ["cites its folder src/api/"],
    }
    result = cli("recall", "--path", root / "src" / "jobs" / "worker.py", "--json", "--", root)
    got = {Path(r["file"]).name: r["why"] for r in json.loads(result.out)["results"]}
    assert got == {"m_moved.md": ["cites src/worker.py, now at src/jobs/worker.py"]}
    # A folder recalls memories citing files inside it.
    result = cli("recall", "--path", root / "src", "--json", "--", root)
    assert {Path(r["file"]).name for r in json.loads(result.out)["results"]} == {
        "m_exact.md",
        "m_folder.md",
        "m_moved.md",
    }
    result = cli("recall", "--symbol", "RetryPolicy", "handle_request", "--json", "--", root)
    (hit,) = json.loads(result.out)["results"]
    assert Path(hit["file"]).name == "m_symbol.md"
    assert "names RetryPolicy" in hit["why"] and "names handle_request" in hit["why"]
    # Relative paths are read against the working folder.
    os.chdir(root)
    result = cli("recall", "--path", "src/api/handler.py")
    assert result.code == 0 and "m_exact.md" in result.out
    none = cli("recall", "--path", root / "docs" / "other.md", "--", root)
    assert none.code == 1 and "No memory refers" in none.out
    assert cli("recall", root).code == 2
    assert tree_digest(root) == before


# --- show ---------------------------------------------------------------------------------------
def test_show_by_name_and_path(env: Env, mem: Path, cli) -> None:
    """`show` prints the memory as written and where it is indexed; a name works as well as
    a path; a name nothing has exits 1."""
    by_path = cli("show", mem / "project_old_cache.md")
    assert by_path.code == 0, by_path.err
    assert "indexed in MEMORY-ARCHIVE.md, line 3" in by_path.out
    assert (mem / "project_old_cache.md").read_text() in by_path.out
    by_name = cli("show", "User preferences", mem, "--json")
    data = json.loads(by_name.out)
    assert data["memory"]["tier"] == "unindexed"
    assert data["indexed"].startswith("not indexed")
    assert data["text"] == (mem / "user_prefs.md").read_text()
    missing = cli("show", "no such memory", mem)
    assert missing.code == 1 and "No memory named" in missing.out


def test_search_cli_text_and_exit_codes(env: Env, mem: Path, cli) -> None:
    """Exit 0 with results (file, dir, type, tier, date, snippet), 1 without."""
    result = cli("search", "postgres", mem)
    assert result.code == 0
    assert "feedback_db_tests.md" in result.out
    assert "feedback · index" in result.out and "**postgres**" in result.out
    assert cli("search", "zebra", mem).code == 1
    assert cli("search", "deploy", mem, "--limit", "0").code == 2


def test_a_pointer_past_the_agents_window_is_flagged_hidden(env: Env, tmp_path: Path, cli) -> None:
    """A memory whose only MEMORY.md pointer lies past what the agent loads (line 200, as
    `memoryd dirs` counts it; index.max_lines from the config) is flagged `hidden by the agent's
    view`, in the text and in --json; one the agent sees is not; `show` says it too."""
    folder = tmp_path / "mem"
    plant(folder, "project_seen.md", name="Seen", description="release checklist seen",
          body="The release checklist.\n")  # fmt: skip
    plant(folder, "project_late.md", name="Late", description="release checklist late",
          body="The release checklist, late.\n")  # fmt: skip
    filler = "".join(f"- line {n}\n" for n in range(250))
    (folder / "MEMORY.md").write_text(
        "# Memory\n- [Seen](project_seen.md) — seen\n"
        + filler
        + "- [Late](project_late.md) — late\n",
        encoding="utf-8",
    )
    flag = "hidden by the agent's view (past line 200)"
    found = cli("search", "release checklist", folder, "--json")
    assert found.code == 0, found.err
    by_file = {Path(r["file"]).name: r for r in json.loads(found.out)["results"]}
    assert by_file["project_late.md"]["tier"] == "index"
    assert flag in by_file["project_late.md"]["flags"]
    assert not any("hidden" in f for f in by_file["project_seen.md"]["flags"])
    text = cli("search", "late", folder)
    assert text.code == 0 and flag in text.out
    assert flag.replace(" (", ": ").rstrip(")") in cli("show", folder / "project_late.md").out
    # A window the config widens sees it: the index reads its pointers again.
    (env.config_dir / "config.toml").parent.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text("[index]\nmax_lines = 400\n")
    wide = json.loads(cli("search", "release checklist", folder, "--json").out)["results"]
    assert not any("hidden" in f for r in wide for f in r["flags"])


def test_the_window_kind_is_the_indexers(tmp_path: Path) -> None:
    """The engine's view kind of a dir is memoryd.indexing.read.view_kind's (kept apart so that a
    search need not import the indexer)."""

    from memoryd.discover.finder import discover_all
    from memoryd.indexing.read import view_kind
    from memoryd.recall.engine import _window

    auto = tmp_path / ".claude" / "projects" / "-src-app" / "memory"
    plain = tmp_path / "notes"
    for folder in (auto, plain):
        plant(folder, "a.md", name="A", description="a", body="a\n")
    dirs = discover_all(Config(), [auto, plain]).dirs
    assert len(dirs) == 2
    for md in dirs:
        assert _window(md, (200, 25_000)) == (view_kind(md).value, 200, 25_000)
    assert {_window(md, (1, 2))[0] for md in dirs} == {"auto", "plain"}  # type: ignore[index]


# --- the index itself ---------------------------------------------------------------------------
def test_index_is_private_and_in_the_state_dir(env: Env, mem: Path) -> None:
    """The index lives under the state dir, 0600 (and its WAL files), in a 0700 folder, and
    nothing is written in the memory dir."""
    before = tree_digest(mem)
    listing = sorted(os.listdir(mem))
    with engine(env, mem) as e:
        e.refresh()
        e.search("deploy")
        path = index_path(env.state, mem.resolve())
        assert path.parent == env.state / "recall"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        wal = list(path.parent.iterdir())
        assert {p.name for p in wal} >= {path.name, path.name + "-wal"}
        for p in wal:
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        journal = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert journal == "wal"
    assert tree_digest(mem) == before
    assert sorted(os.listdir(mem)) == listing


def test_update_reads_only_changed_files(env: Env, mem: Path) -> None:
    """Up to date by stat: a second update reads nothing; one changed file is one read; a
    removed one is dropped; `update_dir` with names looks only at those."""
    real = mem.resolve()
    with DirIndex(index_path(env.state, real), real, IndexOptions(warn=lambda m: None)) as index:
        first = index.update()
        assert (first.read, first.pointers) == (5, True)
        assert not index.update().any
        path = mem / "project_deploy_flow.md"
        path.write_text(path.read_text().replace("green build", "blue build"))
        os.utime(path, (NOW, NOW))
        assert index.update().read == 1
        (mem / "user_prefs.md").unlink()
        change = index.update()
        assert (change.read, change.removed) == (0, 1)
    plant(mem, "new_one.md", name="New", description="fresh", body="kiwi\n")
    plant(mem, "unseen.md", name="Unseen", description="fresh", body="kiwi\n")
    change = update_dir(env.state, real, ["new_one.md"], warn=lambda m: None)
    assert (change.read, change.removed) == (1, 0)
    assert set(files(search(env, mem, "kiwi"))) == {"new_one.md", "unseen.md"}  # by stat
    # What was removed is no longer found, and the changed text is.
    assert "user_prefs.md" not in files(search(env, mem, "User preferences"))
    assert files(search(env, mem, "blue")) == ["project_deploy_flow.md"]


def test_an_index_in_step_is_not_compared_file_by_file(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's refresh of an index in step with the dir (the listing's names and stats
    are the ones its last update matched) loads no file's row to compare; a changed file is
    still read, and a write by the daemon's hook leaves no digest an older listing matches."""
    real = mem.resolve()
    loads: list[object] = []
    compare = DirIndex._compare

    def counted(self: DirIndex, conn: sqlite3.Connection, listing: object) -> object:
        loads.append(listing)
        return compare(self, conn, listing)  # type: ignore[arg-type]

    monkeypatch.setattr(DirIndex, "_compare", counted)

    def refresh() -> store.Change:
        with DirIndex(
            index_path(env.state, real), real, IndexOptions(warn=lambda m: None)
        ) as index:
            return index.update()

    assert refresh().read == 5
    loads.clear()
    assert not refresh().any and loads == []
    path = mem / "reference_dashboards.md"
    path.write_text(path.read_text().replace("ops board", "ops panel"))
    os.utime(path, (NOW, NOW))
    assert refresh().read == 1 and loads
    loads.clear()
    assert not refresh().any and loads == []
    # The hook reads a change; the file is then put back to the stat the last full refresh
    # listed (same inode, size and mtime, other text): it is still compared, and read.
    path.write_text(path.read_text().replace("ops panel", "ops board"))
    os.utime(path, (NOW + 5, NOW + 5))
    assert update_dir(env.state, real, [path.name], warn=lambda m: None).read == 1
    path.write_text(path.read_text().replace("ops board", "ops panex"))
    os.utime(path, (NOW, NOW))  # as at the last full refresh
    assert refresh().read == 1
    assert files(search(env, mem, "panex")) == [path.name]


def test_a_refresh_in_step_fills_no_table(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that finds the index in step puts no entry in a table (filling it was 10 ms
    of a 45 ms refresh at 10,000 files). A dir of more than HELD_MAX entries goes to the
    table as it is read: its digest is the same, found in step or changed all the same."""
    real = mem.resolve()
    statements: list[str] = []
    later = lambda: time_ns() + 10 * store.RACY_NS  # noqa: E731 - the files are not racy
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
        assert index.update().read == 5
        index.conn.set_trace_callback(statements.append)
        assert not index.update().any
        assert not [s for s in statements if s.startswith(("ATTACH", "INSERT", "BEGIN"))]
        monkeypatch.setattr(listing, "HELD_MAX", 2)
        statements.clear()
        assert not index.update().any
        assert [s for s in statements if s.startswith("INSERT INTO listing.listing")]
        assert not [s for s in statements if s.startswith("BEGIN IMMEDIATE")]  # in step
        path = mem / "reference_dashboards.md"
        path.write_text(path.read_text().replace("ops board", "ops panel"))
        assert index.update().read == 1
        monkeypatch.setattr(listing, "HELD_MAX", 16_384)
        statements.clear()
        assert not index.update().any
        assert not [s for s in statements if s.startswith(("ATTACH", "BEGIN"))]
    assert files(search(env, mem, "panel")) == [path.name]


def test_a_refresh_holds_nothing_per_file(env: Env, tmp_path: Path) -> None:
    """Bringing an index of 3,000 files up to date (in step, then with one change) holds no
    Python object per file: the listing is hashed as it is read and compared in SQLite.
    (Holding the listing and every file's row, as before, peaked at over 1.5 MB here; the
    MCP server kept the rows between refreshes: 30 MB at 100,000 files.)"""
    import tracemalloc

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3000):
        (folder / f"m_{i:04d}.md").write_text(
            f"---\nname: M {i}\ndescription: d\ntype: project\n---\nbody {i}\n"
        )
    real = folder.resolve()
    later = lambda: time_ns() + 10 * store.RACY_NS  # noqa: E731 - the files are not racy
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
        assert index.update().read == 3000
    for touch in (False, True):
        if touch:
            (folder / "m_0007.md").write_text(
                "---\nname: M 7\ndescription: e\ntype: project\n---\n"
            )
        with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
            index.conn  # noqa: B018 - opened before measuring
            tracemalloc.start()
            try:
                change = index.update()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert change.read == int(touch)
        assert peak < 400_000, peak


def _index_rows(path: Path) -> dict[str, list[object]]:
    """Everything an index holds but its digest, table by table, and its indexes' SQL."""
    conn = sqlite3.connect(path)
    try:
        queries = {
            "indexes": "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
            "files": "SELECT * FROM files ORDER BY id",
            "refs": "SELECT * FROM refs ORDER BY rowid",
            "pointers": "SELECT * FROM pointers ORDER BY file",
            "docs": "SELECT rowid, * FROM docs ORDER BY rowid",
            "words": "SELECT * FROM words_vocab ORDER BY term",
            "meta": "SELECT * FROM meta WHERE key != 'digest' ORDER BY key",
        }
        return {table: conn.execute(sql).fetchall() for table, sql in queries.items()}
    finally:
        conn.close()


def test_a_first_build_makes_its_indexes_after_the_rows(
    env: Env, mem: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build of many files fills the tables with their indexes dropped and makes
    them again from the rows (row by row, 100,000 files' refs and files took 21 s), and
    does not wait for the disk meanwhile (synchronous=OFF, NORMAL again after, then a full
    checkpoint puts the build on the disk). It builds
    the same index, indexes included, as row by row, and a later update is as before."""
    real = mem.resolve()
    later = lambda: time_ns() + 10 * store.RACY_NS  # noqa: E731 - the files are not racy
    with DirIndex(tmp_path / "row_by_row.sqlite", real, IndexOptions(clock_ns=later)) as index:
        assert index.update().read == 5
    monkeypatch.setattr(store, "BULK_MIN", 3, raising=False)
    statements: list[str] = []
    with DirIndex(tmp_path / "bulk.sqlite", real, IndexOptions(clock_ns=later)) as index:
        index.conn.set_trace_callback(statements.append)
        assert index.update().read == 5
        assert index.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        index.conn.set_trace_callback(None)

    def at(start: str, after: int = 0) -> int:
        return next(n for n, s in enumerate(statements) if n > after and s.startswith(start))

    fast = at("PRAGMA synchronous=OFF")
    dropped = at("DROP INDEX refs_norm", at("BEGIN IMMEDIATE", fast))
    made = at("CREATE INDEX refs_norm", at("INSERT INTO refs", dropped))
    at("PRAGMA wal_checkpoint(FULL)", at("PRAGMA synchronous=NORMAL", at("COMMIT", made)))
    assert _index_rows(tmp_path / "bulk.sqlite") == _index_rows(tmp_path / "row_by_row.sqlite")
    # Not a first build: row by row, at the index's normal safety.
    path = mem / "reference_dashboards.md"
    path.write_text(path.read_text() + "more\n")
    statements.clear()
    with DirIndex(tmp_path / "bulk.sqlite", real, IndexOptions(clock_ns=later)) as index:
        index.conn.set_trace_callback(statements.append)
        assert index.update().read == 1
    assert not [s for s in statements if "synchronous" in s or s.startswith(("CREATE I", "DROP I"))]


def test_a_backticked_path_is_cleaned_once() -> None:
    """Reference extraction cleans a path in backticks once, not once as a run of path
    characters and again as a code span (half of a first build's cleaning, at 10,000
    memories), and finds the same references."""
    from memoryd.dream import refs

    line = "- edit `src/pkg_{0}/mod_{0}.py:{0}` and see docs/x_{0}.md.\n"
    body = "".join(line.format(i) for i in range(50))
    calls: list[str] = []
    clean = refs._clean_run

    def counted(run: str) -> str:
        calls.append(run)
        return clean(run)

    found = refs.extract_refs(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(refs, "_clean_run", counted)
        assert refs.extract_refs(body) == found
    assert len(found.paths) == 100
    assert len(calls) == 100  # each run once


def test_a_refresh_after_one_change_lists_the_dir_once(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's refresh after one file changed lists the dir once (into the temp table,
    hashed as it goes) and compares it once: no second pass of stats to fill the table, and
    no second compare under the write lock when no other process wrote meanwhile. (Before,
    it listed the dir twice and compared twice: 100 ms instead of 55 at 10,000 files.)"""
    real = mem.resolve()
    later = lambda: time_ns() + 10 * store.RACY_NS  # noqa: E731 - the files are not racy
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
        assert index.update().read == 5
    listed: list[object] = []
    compares: list[object] = []
    scandir, compare = os.scandir, DirIndex._compare

    def counted_scandir(path: int) -> object:
        listed.append(path)
        return scandir(path)

    def counted_compare(self: DirIndex, conn: sqlite3.Connection, listing: object) -> object:
        compares.append(listing)
        return compare(self, conn, listing)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", counted_scandir)
    monkeypatch.setattr(DirIndex, "_compare", counted_compare)
    path = mem / "reference_dashboards.md"
    path.write_text(path.read_text().replace("ops board", "ops panel"))
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
        change = index.update()
    assert (change.read, change.removed) == (1, 0)
    assert (len(listed), len(compares)) == (1, 1)
    assert files(search(env, mem, "panel")) == [path.name]


def test_the_listing_compare_reads_no_files_row(env: Env, mem: Path) -> None:
    """The compare of the listing with the index finds each file's stat in a covering index,
    not in its `files` row (a second B-tree lookup per file: 9.5 ms at 10,000 files, 4 ms
    with the index), and still finds the changed file."""
    real = mem.resolve()
    with DirIndex(index_path(env.state, real), real) as index:
        index.update()
        conn = index.conn
        listing.Listing.attach(conn)
        names = ("MEMORY.md", "MEMORY-ARCHIVE.md")
        plan = conn.execute("EXPLAIN QUERY PLAN " + listing.CHANGED, names).fetchall()
        assert any("SEARCH f USING COVERING INDEX" in row[-1] for row in plan), plan
        path = mem / "reference_dashboards.md"
        path.write_text(path.read_text() + "more\n")
        assert index.update().read == 1


def test_a_refresh_leaves_no_listing_behind(env: Env, mem: Path) -> None:
    """The listing a refresh compares is dropped with its memory after it (a database of its
    own, detached): a temp table of it stayed with the connection, 6 MB at 100,000 files in
    the MCP server, which refreshes every 2 s; whether the refresh found the index in step
    or wrote."""
    real = mem.resolve()

    def left(index: DirIndex) -> list[object]:
        conn = index.conn
        names = [row[1] for row in conn.execute("PRAGMA database_list")]
        temp = conn.execute("SELECT name FROM sqlite_temp_master").fetchall()
        return [*(n for n in names if n not in ("main", "temp")), *temp]

    with DirIndex(index_path(env.state, real), real) as index:
        assert index.update().read == 5 and left(index) == []
        assert not index.update().any and left(index) == []
        path = mem / "reference_dashboards.md"
        path.write_text(path.read_text() + "more\n")
        assert index.update().read == 1 and left(index) == []


def test_a_name_listed_twice_is_read_once(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dir listing may hold a name twice (renamed over while it was listed, under its old
    and its new inode): the refresh reads it once and neither fails nor takes the index for
    damaged. (The listing's table keyed by name failed on it: UNIQUE constraint failed.)"""
    real = mem.resolve()
    with DirIndex(index_path(env.state, real), real, IndexOptions(warn=lambda m: None)) as index:
        assert index.update().read == 5
    path = mem / "reference_dashboards.md"
    path.write_text(path.read_text().replace("ops board", "ops panel"))
    scandir = os.scandir

    def twice(fd: int) -> contextlib.nullcontext[list[object]]:
        listed: list[object] = []
        with scandir(fd) as found:
            for entry in found:
                listed.append(entry)
                if entry.name == path.name:
                    st = entry.stat(follow_symlinks=False)
                    moved = SimpleNamespace(
                        st_ino=st.st_ino + 1,
                        st_size=st.st_size,
                        st_mtime_ns=st.st_mtime_ns,
                        st_mode=st.st_mode,
                    )
                    again = SimpleNamespace(name=entry.name, stat=lambda m=moved, **_: m)
                    listed.append(again)
        return contextlib.nullcontext(listed)

    monkeypatch.setattr(os, "scandir", twice)
    warned: list[str] = []
    with DirIndex(index_path(env.state, real), real, IndexOptions(warn=warned.append)) as index:
        change = index.update()
    assert (change.read, change.removed, change.rebuilt, warned) == (1, 0, "", [])
    assert files(search(env, mem, "panel")) == [path.name]


def test_a_file_written_just_now_is_read_again(env: Env, tmp_path: Path) -> None:
    """A file whose mtime is within the racy window is read again on the next update (a
    rewrite in the same mtime tick would otherwise be missed)."""
    folder = tmp_path / "m"
    path = plant(folder, "a.md", name="A", description="d", body="apple\n")
    real = folder.resolve()
    ns = int(NOW * 1e9)
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=lambda: ns)) as index:
        index.update()
        os.utime(path, ns=(ns, ns))
        assert index.update().read == 1
        assert index.update().read == 1  # still racy against this clock
    with DirIndex(
        index_path(env.state, real), real, IndexOptions(clock_ns=lambda: ns + store.RACY_NS + 1)
    ) as index:
        assert index.update().read == 1
        assert not index.update().any


@pytest.mark.parametrize("damage", ["garbage", "truncated", "symlink", "folder", "other_dir"])
def test_a_damaged_index_is_rebuilt_with_a_warning(
    env: Env, mem: Path, tmp_path: Path, damage: str
) -> None:
    """Garbage, a truncated file, a symlink, a folder or another dir's index where the index
    should be: a warning naming it, a rebuild from the files, the right results."""
    real = mem.resolve()
    path = index_path(env.state, real)
    with DirIndex(path, real, IndexOptions(warn=lambda m: None)) as index:
        index.update()
    outside = tmp_path / "outside.db"
    outside.write_bytes(b"keep me")
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 500)
    elif damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif damage == "symlink":
        path.unlink()
        path.symlink_to(outside)
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    else:
        other = tmp_path / "other"
        plant(other, "x.md", name="X", description="x", body="x\n")
        path.unlink()
        with DirIndex(index_path(env.state, other.resolve()), other.resolve()) as index:
            index.update()
        index_path(env.state, other.resolve()).rename(path)
    store._WARNED.clear()
    warnings: list[str] = []
    with Engine(
        [md_of(mem)], env.state, clock=lambda: NOW, options=IndexOptions(warn=warnings.append)
    ) as e:
        changes = e.refresh()
        assert files(e.results(e.search("postgres"))) == ["feedback_db_tests.md"]
    assert len(warnings) == 1 and str(path) in warnings[0] and "rebuilt" in warnings[0]
    assert changes[real].rebuilt
    assert outside.read_bytes() == b"keep me"
    assert path.is_file() and not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_missing_index_is_rebuilt_silently(env: Env, mem: Path, cli) -> None:
    """Deleting the index (and its WAL files) costs a rebuild on the next command, no warning."""
    assert cli("search", "postgres", mem).code == 0
    for p in (env.state / "recall").iterdir():
        p.unlink()
    result = cli("search", "postgres", mem)
    assert result.code == 0 and "feedback_db_tests.md" in result.out
    assert "warning" not in result.err


def test_nothing_is_written_in_memory_dirs(env: Env, mem: Path, cli) -> None:
    """search, recall, show: the sha256 and mtime of every file in the memory dir, and its
    listing, are the same after as before."""
    before = tree_digest(mem.parent)
    listing = sorted(os.listdir(mem))
    assert cli("search", "deploy", mem, "--json").code == 0
    assert cli("search", "deploy", mem, "--timeframe", "recent").code in (0, 1)
    assert cli("recall", "--symbol", "deploy", "--", mem).code in (0, 1)
    assert cli("show", "Deploy flow", mem).code == 0
    after = tree_digest(mem.parent)
    assert {k: v for k, v in after.items() if not k.startswith("home/")} == {
        k: v for k, v in before.items() if not k.startswith("home/")
    }
    assert sorted(os.listdir(mem)) == listing


def test_a_query_matching_nearly_everything_ranks_field_matches_then_the_newest(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past RANK_ALL matches, bm25 ranks only the memories matching in name, description
    or file name; the rest of the page is the most recently indexed of the others (bm25
    over every match is what made such queries slow)."""
    folder = tmp_path / "m"
    for i in range(30):
        plant(folder, f"body_{i:02d}.md", name=f"Note {i}", description="misc",
              body="a common word\n", age_days=1 + i)  # fmt: skip
    plant(folder, "named.md", name="Common", description="x", body="y\n", age_days=50)
    plant(folder, "described.md", name="Other", description="a common one", body="z\n",
          age_days=60)  # fmt: skip
    with engine(env, folder) as e:
        e.refresh()
        plant(folder, "body_07.md", name="Note 7", description="misc", body="a common edit\n")
        e.refresh()  # body_07.md is indexed again: the most recent
        full = files(e.results(e.search("common", limit=5)))
        monkeypatch.setattr(reads, "RANK_ALL", 10)
        capped = files(e.results(e.search("common", limit=5)))
    assert full[:2] == ["named.md", "described.md"]
    assert capped == ["named.md", "described.md", "body_07.md", "body_29.md", "body_28.md"]


def test_an_index_another_process_updated_is_read_again(env: Env, mem: Path) -> None:
    """A reader that holds the index open sees what another process wrote (the daemon's
    hook), and does not read that file again itself."""
    real = mem.resolve()
    with DirIndex(index_path(env.state, real), real, IndexOptions(warn=lambda m: None)) as reader:
        reader.update()
        plant(mem, "late.md", name="Late", description="added later", body="quince\n")
        assert update_dir(env.state, real, ["late.md"]).read == 1
        assert not reader.update().any
        assert [r.file for r in reader.match('"quince"')] == ["late.md"]


def test_a_state_dir_that_cannot_hold_the_index_is_a_warning(env: Env, mem: Path, cli) -> None:
    """With no room for the index in the state dir (its folder is a file), search still
    answers from the files, with a warning naming the place."""
    env.state.mkdir(parents=True)
    (env.state / "recall").write_text("not a folder")
    store._WARNED.clear()
    result = cli("search", "postgres", mem)
    assert result.code == 0 and "feedback_db_tests.md" in result.out
    assert "cannot be kept there" in result.err
    assert (env.state / "recall").read_text() == "not a folder"


def test_the_daemon_hook_never_raises(env: Env, mem: Path, tmp_path: Path) -> None:
    """`update_dir` on a state dir that cannot hold the index, or a memory dir gone, says so
    once and returns (the daemon's pass goes on); the next command fills the index."""
    env.state.mkdir(parents=True)
    (env.state / "recall").write_text("not a folder")
    store._WARNED.clear()
    said: list[str] = []
    assert not update_dir(env.state, mem.resolve(), ["x.md"], warn=said.append).any
    assert len(said) == 1 and "was not updated" in said[0]
    (env.state / "recall").unlink()
    assert not update_dir(env.state, tmp_path / "gone", None, warn=said.append).any
    assert len(said) == 2


def test_an_empty_index_file_is_a_new_one_not_damage(env: Env, mem: Path) -> None:
    """A 0-byte index (a process that made the file and has not made its tables yet, or a
    crash right after) is filled without a warning, and never removed under that process."""
    real = mem.resolve()
    path = index_path(env.state, real)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    inode = path.stat().st_ino
    store._WARNED.clear()
    said: list[str] = []
    with DirIndex(path, real, IndexOptions(warn=said.append)) as index:
        assert index.update().read == 5
    assert said == [] and path.stat().st_ino == inode


# --- how the index is built and kept (the figures at 100,000 memories) ---------------------
SHARED = ("src/deploy.py", "app/api/router.tsx", "tools/config.toml")


def plant_citing(folder: Path, i: int, *paths: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = (
        "".join(f"- see `{p}`\n" for p in paths) + f"and `{i:04d}_only.py` calls `do_thing_{i}()`\n"
    )
    path = folder / f"note_{i:04d}.md"
    path.write_text(f"---\nname: Note {i}\ndescription: d {i}\ntype: project\n---\n\n{body}")
    when = 1_700_000_000 + i
    os.utime(path, (when, when))
    return path


def counts(path: Path) -> tuple[int, int]:
    """(refs rows, cites rows) of an index file."""
    with sqlite3.connect(path) as conn:
        refs = conn.execute("SELECT count(*) FROM refs").fetchone()[0]
        cites = conn.execute("SELECT count(*) FROM cites").fetchone()[0]
    return refs, cites


def cited_by(index: DirIndex, path: str) -> list[str]:
    return sorted(row.file for row, _, _ in index.by_refs("path", "norm", [path]))


@pytest.mark.parametrize("bulk_min", [10, 10_000])  # a first build's bulk path, and row by row
def test_a_reference_is_one_row_however_many_memories_cite_it(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk_min: int
) -> None:
    """40 memories citing the same 3 paths, each a path and a symbol of its own: 3 + 80 refs
    rows (a row per citation was 200 MB of a 100,000-memory index), 200 citations; a memory
    removed takes the references only it cited with it, and recall finds the same memories
    either way."""
    monkeypatch.setattr(store, "BULK_MIN", bulk_min)
    folder = tmp_path / "mem"
    for i in range(40):
        plant_citing(folder, i, *SHARED)
    real = folder.resolve()
    path = index_path(env.state, real)
    with DirIndex(path, real, IndexOptions(clock_ns=lambda: 2_000_000_000 * 10**9)) as index:
        assert index.update().read == 40
        assert counts(path) == (3 + 2 * 40, 5 * 40)
        assert cited_by(index, "src/deploy.py") == [f"note_{i:04d}.md" for i in range(40)]
        assert cited_by(index, "0007_only.py") == ["note_0007.md"]
        (folder / "note_0007.md").unlink()
        plant_citing(folder, 40, SHARED[0])  # a shared path again: no new row for it
        assert index.update().read == 1
        assert counts(path) == (3 + 2 * 40, 5 * 39 + 3)
        assert cited_by(index, "0007_only.py") == []
        assert len(cited_by(index, "src/deploy.py")) == 40
        symbols = [row.file for row, _, _ in index.by_refs("symbol", "norm", ["do_thing_3"])]
        assert symbols == ["note_0003.md"]


def test_an_index_of_an_older_schema_is_rebuilt(env: Env, tmp_path: Path) -> None:
    """An index made by a memoryd whose tables were other (schema 3: a refs row per
    citation) is said once and made anew, and answers as a new one does."""
    folder = tmp_path / "mem"
    for i in range(3):
        plant_citing(folder, i, *SHARED)
    real = folder.resolve()
    path = index_path(env.state, real)
    with DirIndex(path, real) as index:
        index.update()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    store._WARNED.clear()
    said: list[str] = []
    with DirIndex(path, real, IndexOptions(warn=said.append)) as index:
        assert index.update().rebuilt == "was made by another version of memoryd"
        assert len(cited_by(index, "src/deploy.py")) == 3
    assert len(said) == 1 and str(path) in said[0]


def test_a_typo_is_matched_a_bounded_chunk_of_the_vocabulary_at_a_time(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzy match of a typo against 300 words of its length holds at most
    VOCABULARY_CHUNK of them as str objects at once (the whole length's words, split out at
    once, were 12 MB of the MCP server's peak at 100,000 memories), and finds the same
    closest words: the best of each chunk are kept."""
    from memoryd.recall.query import fuzzy

    monkeypatch.setattr(reads, "VOCABULARY_PIECE", 4)
    monkeypatch.setattr(reads, "VOCABULARY_CHUNK", 16)
    letters = "bcdfghjklmnpqrstvwxz"
    words = sorted({f"{a}{b}{c}ab" for a in letters for b in letters[:5] for c in letters[:3]})
    assert len(words) == 300
    folder = tmp_path / "mem"
    plant(folder, "words.md", name="Words", description="many", body=" ".join(words) + "\n")
    plant(folder, "deploy.md", name="Deploy", description="the deployment", body="x\n")
    real = folder.resolve()
    with DirIndex(index_path(env.state, real), real) as index:
        index.update()
        vocabulary = index.vocabulary()
        assert fuzzy("deploymnt", vocabulary) == ["deployment", "deploy"]
        assert fuzzy("zdcabb", vocabulary) == ["zdcab"]
        assert 0 < vocabulary.held_most <= 16


def dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row an index holds that a search reads (its meta's times aside)."""
    sql = {
        "files": "SELECT * FROM files ORDER BY id",
        "docs": "SELECT rowid, * FROM docs ORDER BY rowid",
        "refs": "SELECT * FROM refs ORDER BY rid",
        "cites": "SELECT * FROM cites ORDER BY id, rid",
        "words": "SELECT * FROM words_vocab ORDER BY term",
        "pointers": "SELECT * FROM pointers ORDER BY file",
    }
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(query).fetchall() for table, query in sql.items()}


def test_a_first_build_in_worker_processes_is_the_same_index(
    env: Env, mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big first build given worker processes reads and parses in them (spawned), three
    files a task here: the index holds the same rows, in the same ids, as one built in this
    process, with the unparseable file and the symlink each excluded for the same reason."""
    for i in range(12):
        plant_citing(mem, i, *SHARED[: i % 3 + 1])
    (mem / "broken.md").write_text("---\nname: [unclosed\n---\nbody\n")
    (mem / "link.md").symlink_to(mem / "note_0001.md")
    real = mem.resolve()
    monkeypatch.setattr(store, "BULK_MIN", 2)
    clock = lambda: 2_000_000_000 * 10**9  # noqa: E731
    serial = index_path(env.state, real)
    with DirIndex(serial, real, IndexOptions(clock_ns=clock)) as index:
        index.update()
        assert index.spawned == 0
    parallel = serial.with_name("parallel.sqlite")
    monkeypatch.setattr(store, "PARALLEL_MIN", 2)
    monkeypatch.setattr(records, "READ_CHUNK", 3)
    with DirIndex(parallel, real, IndexOptions(clock_ns=clock, workers=2)) as index:
        assert index.update().read == 5 + 12 + 2
        assert index.spawned == 2
        assert {e.file for e in index.excluded()} == {"broken.md", "link.md"}
    assert dump(parallel) == dump(serial)


def test_a_first_build_in_workers_reads_only_the_dir_it_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory dir replaced at its path (renamed away, another renamed in) after a big first
    build listed it: the workers, which open it by path, see another dir and read nothing, and
    the build reads the listed dir's files through the descriptor it listed with."""
    mem, other = tmp_path / "mem", tmp_path / "other"
    for i in range(6):
        plant(mem, f"n{i}.md", name=f"Mine {i}", description="d", body="mine\n")
        plant(other, f"n{i}.md", name=f"Swapped {i}", description="d", body="swapped\n")
    real = mem.resolve()
    monkeypatch.setattr(store, "BULK_MIN", 2)
    monkeypatch.setattr(store, "PARALLEL_MIN", 2)
    monkeypatch.setattr(records, "READ_CHUNK", 3)
    in_workers = records.records_in_workers

    def replaced_after_listing(*args: object) -> object:
        mem.rename(tmp_path / "mem.old")
        other.rename(mem)
        return in_workers(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "records_in_workers", replaced_after_listing)
    with DirIndex(tmp_path / "idx.sqlite", real, IndexOptions(workers=2)) as index:
        assert index.update().read == 6
        assert index.spawned == 2
    with sqlite3.connect(tmp_path / "idx.sqlite") as conn:
        names = dict(conn.execute("SELECT file, name FROM files").fetchall())
    assert names == {f"n{i}.md": f"Mine {i}" for i in range(6)}


UNGUARDED = """
from pathlib import Path
from memoryd.recall import records, store

print("ran the script", flush=True)  # no `if __name__ == "__main__":` guard
store.BULK_MIN = store.PARALLEL_MIN = 2
records.READ_CHUNK = 1
here = Path(__file__).parent
import os
with store.DirIndex(here / f"index_{os.getpid()}.sqlite", (here / "mem").resolve()) as index:
    print("read", index.update().read, "in", index.spawned, "workers", flush=True)
"""


def test_a_library_build_starts_no_process_unless_given_workers(tmp_path: Path) -> None:
    """A library caller's big first build, with DirIndex's defaults, is read in its own
    process: a spawned worker would import the caller's unguarded script again and run its
    build a second time (each its own index here, so that no run waits on another's lock)."""
    for i in range(4):
        plant(tmp_path / "mem", f"n{i}.md", name=f"N {i}", description="d", body="body\n")
    script = tmp_path / "caller.py"
    script.write_text(UNGUARDED)
    ran = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["ran the script", "read 4 in 0 workers"]


def deleted_files_open() -> set[str]:
    """The files this process holds open that are no longer in any folder."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.endswith(" (deleted)"):
                out.add(target)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_refresh_lists_the_dir_in_a_file_not_in_memory(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing a refresh compares goes to a temporary file (SQLite's, removed as it is
    made) past a small page cache, not into memory: in memory, 100,000 entries were 2 MB more
    of the MCP server's peak at each refresh. Here 1,000 entries past a 1 KiB cache, compared
    after a change; and a dir of more than HELD_MAX entries, whose listing goes there as it
    is read, in step."""
    monkeypatch.setattr(listing, "LISTING_CACHE_KIB", 1)  # old code: none
    folder = tmp_path / "mem"
    folder.mkdir()
    for i in range(1000):
        (folder / f"n_{i:04d}.md").write_text(f"---\nname: N {i}\ndescription: d\n---\nb\n")
    real = folder.resolve()
    seen: list[set[str]] = []
    compare, in_step = DirIndex._compare, DirIndex._in_step

    def compared(self: DirIndex, conn: sqlite3.Connection, found: listing.Listing) -> object:
        seen.append(deleted_files_open())  # the listing is filled and still attached
        return compare(self, conn, found)

    def looked(self: DirIndex, conn: sqlite3.Connection, digest: str) -> bool:
        seen.append(deleted_files_open())
        return in_step(self, conn, digest)

    later = lambda: time_ns() + 10 * store.RACY_NS  # noqa: E731 - the files are not racy
    with DirIndex(index_path(env.state, real), real, IndexOptions(clock_ns=later)) as index:
        index.update()
        before = deleted_files_open()
        monkeypatch.setattr(DirIndex, "_compare", compared)
        (folder / "n_0007.md").write_text("---\nname: N 7\ndescription: e\n---\nb\n")
        assert index.update().read == 1
        monkeypatch.setattr(listing, "HELD_MAX", 100)
        monkeypatch.setattr(DirIndex, "_in_step", looked)
        assert not index.update().any
    assert len(seen) == 2 and all(s - before for s in seen)
    assert deleted_files_open() <= before  # detached: the file is gone with it


def test_a_memory_trashed_then_restored_is_found_again_through_later_passes(
    env: Env, tmp_path: Path, cli
) -> None:
    """A repo's own memory dir: a dream pass moves a stale memory to the trash (search no
    longer finds it), `trash restore` brings it back (found again), and the index passes
    after that leave it found, with its pointer back in MEMORY.md."""
    from tests.helpers import dream, filler, make_planted_repo, moved
    from tests.helpers import mem as plant_mem

    repo = make_planted_repo(tmp_path)
    folder = repo / ".claude" / "memory"
    plant_mem(repo, "stale.md", "Quokkamatic lived in `src/removed.py`.")
    filler(repo)
    assert cli("search", "quokkamatic", folder).code == 0
    assert moved(dream(cli, repo)) == {"stale.md": "stale"}
    assert cli("search", "quokkamatic", folder).code == 1
    assert cli("trash", "restore", "stale.md", folder).code == 0
    for _ in range(2):
        found = cli("search", "quokkamatic", folder, "--json")
        assert found.code == 0, found.err
        assert files(json.loads(found.out)["results"]) == ["stale.md"]
        assert cli("index", folder).code == 0
    assert "(stale.md)" in (folder / "MEMORY.md").read_text()


# A child process under a lower open-files limit: `memoryd ARGS`, with the test's HOME.
UNDER_LIMIT = """
import resource, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
hold = []
if sys.argv[2] == "exhaust":  # this process already holds all but two of its files
    import memoryd.cli, memoryd.commands.search, memoryd.recall.engine, structlog  # loaded first
    import memoryd.recall.lookup, memoryd.views.results
    import os
    try:
        while True:
            hold.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        os.close(hold.pop()); os.close(hold.pop())
from memoryd.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _under_limit(env: Env, limit: int, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", UNDER_LIMIT, str(limit), mode, *args],
        env=home_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_search_over_more_dirs_than_the_open_files_limit_allows(env: Env) -> None:
    """Under `ulimit -n 128`, search over 60 project dirs (three files each, were every index
    held open) finds the memory of every dir, twice (built, then read), and warns of nothing."""
    for i in range(60):
        folder = env.claude / "projects" / f"-work-proj{i:02d}" / "memory"
        write_memory(folder, f"kestrel_{i:02d}.md", body=f"The kestrel note number {i}.\n")
    for _ in range(2):
        done = _under_limit(env, 128, "", "search", "kestrel", "--limit", "100", "--json")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        found = {Path(r["file"]).name for r in json.loads(done.stdout)["results"]}
        assert found == {f"kestrel_{i:02d}.md" for i in range(60)}


def test_an_index_that_cannot_be_opened_for_want_of_files_says_so(env: Env) -> None:
    """A process at its open-files limit: what it says names that limit and `ulimit -n`, not
    disk space, permissions or damage, and the search index it could not open is kept."""
    write_memory(env.claude / "projects" / "-work-one" / "memory", "kestrel.md", body="kestrel\n")
    built = _under_limit(env, 1024, "", "search", "kestrel", "--json")
    assert built.returncode == 0, built.stderr
    [index] = (env.state / "recall").glob("*.sqlite")
    inode = index.stat().st_ino
    done = _under_limit(env, 64, "exhaust", "search", "kestrel", "--json")
    said = done.stderr.lower()
    assert "too many open files" in said and "ulimit -n" in said and "64" in said, done.stderr
    for wrong in ("free space", "free disk", "permissions", "damaged"):
        assert wrong not in said, done.stderr
    assert index.stat().st_ino == inode
