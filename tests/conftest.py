"""Shared fixtures: an isolated HOME/XDG per test, corpus copies, tree hashing, CLI runner."""

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memoryd.cli import main
from memoryd.config import Config
from memoryd.discover.slugs import slugify
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime

if TYPE_CHECKING:  # tests.helpers imports this module
    from tests.helpers import Running


def _find_corpus() -> Path | None:
    """`$MEMORYD_CORPUS`, else a `shared/corpus` beside the checkout or any folder above it.

    The corpus is not part of the project: a clone of it alone has none, and the tests that
    need it skip (``needs_corpus``). `$MEMORYD_CORPUS` naming no folder is an error, reported
    before any test runs (``pytest_configure``): whoever set it meant the tests to run.
    """
    if os.environ.get("MEMORYD_CORPUS"):
        return Path(os.environ["MEMORYD_CORPUS"])
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "corpus"
        if candidate.is_dir():
            return candidate
    return None


CORPUS = _find_corpus()
CORPUS_MISSING = (
    "the real-world corpus is not here (no shared/corpus beside the checkout or above it): "
    "set MEMORYD_CORPUS to its folder to run this test"
)
# For every test that reads the corpus: skipped, with the reason, when there is none.
needs_corpus = pytest.mark.skipif(CORPUS is None, reason=CORPUS_MISSING)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "repo_tree(builder): the code tree the `repo` fixture builds (tests.helpers)"
    )
    if CORPUS is not None and not CORPUS.is_dir():
        raise pytest.UsageError(
            f"MEMORYD_CORPUS={os.environ.get('MEMORYD_CORPUS')}: no such folder; point it at "
            "the real-world corpus (shared/corpus), or unset it to skip the tests that need it"
        )


LEVEL_ORDER = {"debug": 10, "info": 20, "warning": 30, "error": 40}


@dataclass
class Env:
    home: Path
    claude: Path
    state: Path
    logs: Path
    config_dir: Path

    @property
    def audit_path(self) -> Path:
        return self.logs / "audit.jsonl"

    def audit_rows(self) -> list[dict[str, Any]]:
        from memoryd.storage.audit import iter_lines

        return list(iter_lines(self.audit_path))

    def runtime(self, config: Config | None = None) -> Runtime:
        paths = AppPaths(self.config_dir / "config.toml", self.state, self.logs)
        return Runtime.create(config or Config(), paths)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """A private HOME with XDG dirs so memoryd never touches the real user's files."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("MEMORYD_CRASH_AT", raising=False)
    import platformdirs

    return Env(
        home=home,
        claude=home / ".claude",
        state=Path(platformdirs.user_state_dir("memoryd", appauthor=False)),
        logs=Path(platformdirs.user_log_dir("memoryd", appauthor=False)),
        config_dir=Path(platformdirs.user_config_dir("memoryd", appauthor=False)),
    )


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(env: Env) -> Callable[..., Result]:
    """Run `memoryd <args>` in-process and capture its output and exit code."""

    def run(*args: str | Path) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = main([str(a) for a in args], out=out, err=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime_ns of every regular file under root (relative paths)."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(path.relative_to(root))] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    st.st_mtime_ns,
                )
    return out


def copy_corpus(dest: Path) -> Path:
    """A writable copy of the shared corpus (which is read-only and must never change)."""
    if CORPUS is None:
        pytest.skip(CORPUS_MISSING)
    shutil.copytree(CORPUS, dest, symlinks=True, ignore=shutil.ignore_patterns("_alt_versions"))
    for dirpath, _, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                os.chmod(path, 0o644)
    # The upstream repo's `.claude/agent-memory` is a symlink to `agent-memory-src/`; the
    # corpus stores it as a small file holding the target, so make it a link again.
    link = dest / "chalbert__web-everything" / ".claude" / "agent-memory"
    if link.is_file() and not link.is_symlink():
        target = link.read_text().strip()
        link.unlink()
        link.symlink_to(target)
    return dest


def corpus_memory_dirs(root: Path) -> list[Path]:
    """Every folder of the corpus copy that holds a MEMORY.md."""
    return sorted(p.parent for p in root.rglob("MEMORY.md") if "golden-corpus" not in str(p))


def write_lesson(folder: Path, name: str, body: str) -> bytes:
    """A memory file of one fixed shape (name, description `d <name>`, type project, body),
    written as bytes; its bytes, for the version tests to compare with what is kept."""
    data = f"---\nname: {name}\ndescription: d {name}\ntype: project\n---\n\n{body}\n".encode()
    (folder / name).write_bytes(data)
    return data


def write_memory(
    folder: Path,
    filename: str,
    *,
    name: str | None = None,
    description: str = "a memory",
    type_: str = "project",
    body: str = "Some body text.\n",
    age_days: float | None = 30,
) -> Path:
    """Write a memory file the way an agent would; optionally age its mtime."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = filename.removesuffix(".md")
    text = (
        f"---\nname: {name if name is not None else stem}\ndescription: {description}\n"
        f"type: {type_}\n---\n\n{body}"
    )
    path = folder / filename
    path.write_text(text, encoding="utf-8")
    if age_days is not None:
        import time

        old = time.time() - age_days * 86400
        os.utime(path, (old, old))
    return path


class InjectedCrash(BaseException):
    """Raised by `crash_at` (a BaseException, so no `except Exception` in memoryd swallows it)."""


def crash_at(label: str) -> Callable[[str], None]:
    """A stand-in for `fsops.crash_point` that crashes the operation at the point `label`."""

    def crash_point(at: str) -> None:
        if at == label:
            raise InjectedCrash

    return crash_point


@pytest.fixture
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A code tree under tmp_path, as built by the builder a module (`pytestmark`) or a test
    names with `pytest.mark.repo_tree.with_args(builder)` (tests.helpers has them all; a lone
    callable given to a mark without `with_args` would be decorated instead), else by
    `make_small_repo`."""
    from tests.helpers import make_small_repo

    marker = request.node.get_closest_marker("repo_tree")
    build: Callable[[Path], Path] = marker.args[0] if marker is not None else make_small_repo
    return build(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Callable[["Running", str], Path]:
    """Make a Claude project memory dir (with a transcript naming its repo) inside a HOME."""

    def make(running: "Running", name: str) -> Path:
        repo = tmp_path / "code" / name
        repo.mkdir(parents=True, exist_ok=True)
        folder = running.claude / "projects" / slugify(str(repo))
        (folder / "memory").mkdir(parents=True, exist_ok=True)
        (folder / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
        return folder / "memory"

    return make


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Path]:
    yield copy_corpus(tmp_path / "corpus")


@contextlib.contextmanager
def lock_held_elsewhere(state_dir: Path, real_path: Path) -> Iterator[None]:
    """Another process holds the dir's writer lock (StateStore.lock) until the block ends."""
    script = (
        "import sys; from pathlib import Path; from memoryd.storage.state import StateStore\n"
        f"s = StateStore(Path({str(state_dir)!r}))\n"
        f"with s.lock(Path({str(real_path)!r})):\n"
        "    print('held', flush=True); sys.stdin.readline()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "held"
            yield
        finally:
            holder.stdin.close()
            holder.wait(timeout=10)


# --- test tiers ----------------------------------------------------------------------------------
# Every test module is in exactly one tier, named here and nowhere else; a module in none stops
# the collection (a new module must be classified). `pytest -m unit|integration|e2e` runs one
# tier; every run ends with a line per tier (tests, outcomes, seconds), so CI's one
# `.venv/bin/pytest` reports the tiers separately.
#   unit: in-process only: memoryd's code in the test's own process (real files under tmp_path,
#     the in-process `cli` fixture, a fake clock), no other process started by the test.
#   integration: the test starts other processes (memoryd commands, a lock holder, git,
#     tail -F, a service verifier, pytest in a fresh clone), but no daemon.
#   e2e: a real daemon (a `memoryd run` process, or the Daemon in a thread with its own watcher,
#     worker and timing), kill -9 crash loops, the real Claude Code client.
TIERS: dict[str, frozenset[str]] = {
    "unit": frozenset(
        {
            "test_ack",
            "test_adversarial_inputs",
            "test_agentview",
            "test_claude_install",
            "test_consult_transcripts",
            "test_corpus_index",
            "test_discover",
            "test_discover_cache",
            "test_dream_apply",
            "test_dream_cache",
            "test_dream_corpus",
            "test_dream_refs",
            "test_dream_repo",
            "test_dream_repo_cache",
            "test_history",
            "test_humanize",
            "test_index_after_dream",
            "test_index_held",
            "test_index_rules",
            "test_index_use_cases",
            "test_index_view",
            "test_memfile",
            "test_privacy",
            "test_recall",
            "test_recall_records",
            "test_recall_relevance",
            "test_records",
            "test_report_quiet",
            "test_safejson",
            "test_statedb",
            "test_layout",
            "test_scan",
            "test_secrets",
            "test_secrets_purge",
            "test_views_dirs",
            "test_views_dream",
            "test_views_index",
            "test_views_trash",
        }
    ),
    "integration": frozenset(
        {
            "test_commands_agree",
            "test_agent_semantics",
            "test_apply_checked",
            "test_audit",
            "test_cli",
            "test_config",
            "test_demo",
            "test_discover_claude",
            "test_dream_planted",
            "test_dream_repo_memory",
            "test_dream_similar",
            "test_forget",
            "test_fresh_clone",
            "test_history_deleted",
            "test_hooks",
            "test_pager",
            "test_quick_start",
            "test_gitwork",
            "test_index_faults",
            "test_secrets_outputs",
            "test_index_on_disk",
            "test_logview",
            "test_open_writer",
            "test_recall_mcp",
            "test_service",
            "test_state",
            "test_terminal_escaping",
            "test_trash",
            "test_versions",
            "test_versions_clock",
            "test_versions_restore",
            "test_versions_import",
            "test_wholeproc_steps",
        }
    ),
    "e2e": frozenset(
        {
            "test_audit_failures",
            "test_churn",
            "test_claude_discover",
            "test_claude_hooks_real",
            "test_claude_mcp",
            "test_claude_real",
            "test_claude_view",
            "test_commands_agree::test_the_real_client_loads_no_memory_md_where_memoryd_says_so",
            "test_crash",
            "test_daemon",
            "test_hostile_documents",
            "test_dir_deleted",
            "test_repo_git",
            "test_restore_final",
            "test_status_view",
            "test_versions_daemon",
            "test_watch",
        }
    ),
}
TIER_OF = {module: tier for tier, modules in TIERS.items() for module in modules}
assert len(TIER_OF) == sum(map(len, TIERS.values())), "a module is in two tiers"

# Tests that take over ~3 s (all their parametrisations; measured with --durations=0 on the
# shared 2-core machine), by module::function, or a whole module: `-m "not slow"` is the quick
# loop. The real Claude Code client and the orchestkit checkout run only when configured, for
# minutes.
SLOW: frozenset[str] = frozenset(
    {
        "test_agentview::test_linear_at_the_index_read_limit",
        "test_claude_discover",
        "test_claude_hooks_real",
        "test_claude_mcp",
        "test_claude_real",
        "test_claude_view",
        "test_quick_start",
        "test_cli::test_run_says_started_then_waiting_and_where_the_log_is",
        "test_corpus_index::test_index_over_a_corpus_repo_is_safe_and_idempotent",
        "test_crash::test_sigkill_at_every_step_of_a_dream_pass",
        "test_crash::test_sigkill_at_every_step_of_a_pass_whose_file_is_swapped_before_its_rename",
        "test_daemon::test_a_memory_broken_for_a_while_is_still_one_memoryd_saw",
        "test_daemon::test_burst_of_2000_files_gives_one_consistent_index",
        "test_daemon::test_pile_up_dreams_after_five_changes_and_survives_restart",
        "test_daemon::test_sigkill_during_a_pass_after_a_change_leaves_a_consistent_index",
        "test_daemon::test_the_daemon_threads_do_not_grow_with_its_dirs",
        "test_dream_repo_memory::test_a_real_repo_flags_the_memory_citing_removed_code_and_no_other",
        "test_index_faults::test_a_tool_rewriting_the_index_in_place_loses_no_mark_to_concurrent_passes",
        "test_index_on_disk::test_odd_names_are_indexed_once_and_resolve",
        "test_memfile::test_what_the_loader_is_skipped_for_it_refuses",
        "test_repo_git::test_a_branch_switch_under_the_daemon_is_one_checkout_row_and_no_alarm",
        "test_repo_git::test_the_corpus_repo_memory_is_left_as_committed_by_the_daemon_index_and_dream",
        "test_restore_final::test_the_daemons_pile_up_passes_leave_a_restored_memory_alone",
        "test_versions::test_kill_9_while_storing_loses_nothing_and_leaves_no_half_version",
    }
)


_tier_of_test: dict[str, str] = {}
# tier -> outcome -> count, and tier -> seconds (setup, call and teardown of its tests).
_tier_outcomes: dict[str, dict[str, int]] = {tier: {} for tier in TIERS}
_tier_seconds: dict[str, float] = dict.fromkeys(TIERS, 0.0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unlisted = sorted({item.path.name for item in items if item.path.stem not in TIER_OF})
    if unlisted:
        raise pytest.UsageError(
            f"tests/conftest.py: {', '.join(unlisted)} in no test tier: add each module to TIERS "
            "(unit, integration or e2e; the comment above it says which)"
        )
    for item in items:
        marked = {m.name for m in item.iter_markers() if m.name in TIERS or m.name == "slow"}
        if marked:
            raise pytest.UsageError(
                f"{item.nodeid}: marked {', '.join(sorted(marked))} by hand: tiers and `slow` "
                "are assigned in tests/conftest.py (TIERS, SLOW) only"
            )
        item.add_marker(TIER_OF[item.path.stem])
        _tier_of_test[item.nodeid] = TIER_OF[item.path.stem]
        function = getattr(item, "originalname", item.name)
        if item.path.stem in SLOW or f"{item.path.stem}::{function}" in SLOW:
            item.add_marker("slow")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier_of_test.get(report.nodeid)
    if tier is None:
        return
    _tier_seconds[tier] += report.duration
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        _tier_outcomes[tier][outcome] = _tier_outcomes[tier].get(outcome, 0) + 1
    elif report.when == "teardown" and report.failed:
        _tier_outcomes[tier]["error"] = _tier_outcomes[tier].get("error", 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    ran = [tier for tier in TIERS if _tier_outcomes[tier]]
    if not ran:
        return
    terminalreporter.section("test tiers (tests/conftest.py: TIERS)")
    for tier in ran:
        counts = ", ".join(f"{n} {what}" for what, n in sorted(_tier_outcomes[tier].items()))
        total = sum(_tier_outcomes[tier].values())
        terminalreporter.write_line(
            f"{tier:<12} {total:>5} tests: {counts}; {_tier_seconds[tier]:.1f} s"
        )
