"""`memoryd hook EVENT` as Claude Code runs it: a process given the hook's JSON on stdin (the
fields 2.1.332 sends, see memoryd/claude/hooks.py), whose stdout goes to the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.claude.hook_recall import MAX_CHARS
from memoryd.discover.slugs import slugify
from tests.conftest import Env, write_memory
from tests.helpers import make_git_repo_without_memory, wait_for
from tests.secret_samples import POSITIVES

pytestmark = pytest.mark.repo_tree.with_args(make_git_repo_without_memory)

MEMORYD = Path(sys.executable).parent / "memoryd"
TOKEN = next(value for kind, value, _ in POSITIVES if kind == "GitHub token")


def hook(event: str, data: dict[str, Any] | str) -> subprocess.CompletedProcess[str]:
    text = data if isinstance(data, str) else json.dumps(data)
    return subprocess.run(
        [str(MEMORYD), "hook", event],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def memoryd(*args: str, cwd: Path | None = None) -> None:
    subprocess.run([str(MEMORYD), *args], cwd=cwd, capture_output=True, check=False, timeout=60)


def auto_dir(env: Env, root: Path) -> Path:
    return env.claude / "projects" / slugify(str(root)) / "memory"


def payload(
    env: Env, root: Path, event: str, file: str = "", session: str = "s1"
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "session_id": session,
        "transcript_path": str(env.claude / "projects" / slugify(str(root)) / f"{session}.jsonl"),
        "cwd": str(root),
        "hook_event_name": event,
    }
    if file:
        data.update(tool_name="Read", tool_input={"file_path": file}, tool_use_id="toolu_1")
    return data


def context(done: subprocess.CompletedProcess[str], event: str) -> str:
    assert done.returncode == 0 and done.stderr == "", done.stderr
    if not done.stdout:
        return ""
    out = json.loads(done.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == event
    return str(out["additionalContext"])


def test_pre_tool_use_gives_the_memories_citing_the_file_once_per_session_secrets_masked(
    env: Env, repo: Path
) -> None:
    folder = auto_dir(env, repo)
    body = f"Never change src/pkg/app.py by hand.\nexport GH_TOKEN={TOKEN}\n"
    write_memory(folder, "app_rule.md", name="App rule", description="keep x at 1", body=body)
    write_memory(folder, "pkg_note.md", name="Pkg note", description="the package layout",
                 body="Everything in `src/pkg/` is generated.\n")  # fmt: skip
    write_memory(folder, "other.md", name="Other", body="See docs/guide.md.\n")
    memoryd("recall", "--path", str(repo / "src" / "pkg" / "app.py"), cwd=repo)
    data = payload(env, repo, "PreToolUse", "src/pkg/app.py")
    said = context(hook("pre-tool-use", data), "PreToolUse")
    assert said.startswith(f"memoryd: memories that cite {repo / 'src' / 'pkg' / 'app.py'}")
    first, second = said.index("App rule"), said.index("Pkg note")
    assert first < second  # the file itself before its folder
    assert f"file: {folder / 'app_rule.md'} (cites src/pkg/app.py)" in said
    assert "> Never change src/pkg/app.py by hand." in said
    assert TOKEN not in said and "Other" not in said
    # Once per session: the edit that follows hears nothing more; another session does.
    assert context(hook("pre-tool-use", data), "PreToolUse") == ""
    again = context(hook("pre-tool-use", payload(env, repo, "PreToolUse", "src/pkg/app.py", "s2")),
                    "PreToolUse")  # fmt: skip
    assert "App rule" in again


def test_pre_tool_use_says_nothing_for_a_file_no_memory_cites(env: Env, repo: Path) -> None:
    write_memory(auto_dir(env, repo), "app_rule.md", body="about src/pkg/app.py\n")
    memoryd("recall", "--path", "src/pkg/app.py", cwd=repo)
    done = hook("pre-tool-use", payload(env, repo, "PreToolUse", str(repo / "README.md")))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_pre_tool_use_stays_within_a_few_hundred_tokens(env: Env, repo: Path) -> None:
    folder = auto_dir(env, repo)
    for i in range(12):
        write_memory(folder, f"m{i:02}.md", description="d" * 150,
                     body=f"src/pkg/app.py {'w' * 300}\n")  # fmt: skip
    memoryd("recall", "--path", "src/pkg/app.py", cwd=repo)
    said = context(hook("pre-tool-use", payload(env, repo, "PreToolUse", "src/pkg/app.py")),
                   "PreToolUse")  # fmt: skip
    assert 0 < len(said) <= MAX_CHARS + 100
    assert "more: `memoryd recall --path" in said


def test_post_tool_use_indexes_a_memory_the_agent_wrote_at_once(env: Env, repo: Path) -> None:
    """No 10 s grace: the hook answers at once and the pointer follows within moments (the
    pass runs in a process the hook starts), and the search index has the new memory for
    the next pre-tool-use hook."""
    folder = auto_dir(env, repo)
    write_memory(folder, "old.md", description="older")
    memoryd("index", str(folder))
    new = write_memory(folder, "fresh.md", name="Fresh", description="just written",
                       body="src/pkg/app.py matters\n", age_days=None)  # fmt: skip
    data = payload(env, repo, "PostToolUse")
    data.update(tool_name="Write", tool_input={"file_path": str(new), "content": "…"})
    done = hook("post-tool-use", data)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    index = folder / "MEMORY.md"
    wait_for(lambda: "- [Fresh](fresh.md) — just written" in index.read_text(), 60, "the pointer")

    def recalled() -> str:
        return context(
            hook("pre-tool-use", payload(env, repo, "PreToolUse", "src/pkg/app.py", "s2")),
            "PreToolUse",
        )

    wait_for(lambda: "Fresh — just written" in recalled(), 60, "the search index")


def test_two_memories_written_in_a_row_both_get_their_pointer(env: Env, repo: Path) -> None:
    """Each write starts a pass; they run one after the other (the dir's lock), and the index
    ends with both pointers whichever pass saw which file."""
    folder = auto_dir(env, repo)
    write_memory(folder, "old.md", description="older")
    memoryd("index", str(folder))
    for name in ("first.md", "second.md"):
        new = write_memory(folder, name, description=f"about {name[:-3]}", age_days=None)
        data = payload(env, repo, "PostToolUse")
        data.update(tool_name="Write", tool_input={"file_path": str(new)})
        assert hook("post-tool-use", data).returncode == 0
    index = folder / "MEMORY.md"
    wait_for(
        lambda: "(first.md)" in index.read_text() and "(second.md)" in index.read_text(),
        60,
        "both pointers",
    )


def test_post_tool_use_leaves_markdown_outside_memory_dirs_alone(env: Env, repo: Path) -> None:
    docs = repo / "docs"
    write_memory(docs, "guide.md", description="looks like a memory", age_days=None)
    data = payload(env, repo, "PostToolUse")
    data.update(tool_name="Write", tool_input={"file_path": str(docs / "guide.md")})
    done = hook("post-tool-use", data)
    assert (done.returncode, done.stdout) == (0, "")
    assert sorted(os.listdir(docs)) == ["guide.md"]


def test_session_start_is_silent_when_all_is_well(env: Env, repo: Path) -> None:
    folder = auto_dir(env, repo)
    write_memory(folder, "a.md")
    memoryd("index", str(folder))
    assert context(hook("session-start", payload(env, repo, "SessionStart")), "SessionStart") == ""


def test_session_start_says_when_auto_memory_is_off(env: Env, repo: Path) -> None:
    env.claude.mkdir(parents=True, exist_ok=True)
    (env.claude / "settings.json").write_text('{"autoMemoryEnabled": false}')
    said = context(hook("session-start", payload(env, repo, "SessionStart")), "SessionStart")
    assert said.startswith("memoryd: Claude Code's auto memory is off (autoMemoryEnabled: false")
    assert "\n" not in said


def test_session_start_says_how_many_pointers_the_agent_does_not_see(env: Env, repo: Path) -> None:
    folder = auto_dir(env, repo)
    folder.mkdir(parents=True)
    lines = [f"- [M{i}](m{i}.md) — memory {i}" for i in range(230)]
    (folder / "MEMORY.md").write_text("\n".join(lines) + "\n")
    said = context(hook("session-start", payload(env, repo, "SessionStart")), "SessionStart")
    assert said.startswith(f"memoryd: 30 pointer line(s) of {folder / 'MEMORY.md'} are not loaded")
    assert "past line 200" in said


def test_session_start_does_not_wait_on_a_fifo_as_memory_md(env: Env, repo: Path) -> None:
    folder = auto_dir(env, repo)
    folder.mkdir(parents=True)
    os.mkfifo(folder / "MEMORY.md")
    done = hook("session-start", payload(env, repo, "SessionStart"))  # a wait is a timeout
    assert (done.returncode, context(done, "SessionStart")) == (0, "")


def test_session_start_names_an_alarm_of_the_last_day(env: Env, repo: Path) -> None:
    folder = auto_dir(env, repo)
    folder.mkdir(parents=True)
    from memoryd.versions import kept

    kept.VersionStore(env.state)._keep_alarm(folder, time.time() - 60, 40, 2)
    said = context(hook("session-start", payload(env, repo, "SessionStart")), "SessionStart")
    assert said.startswith("memoryd: ALARM: 40 memory files deleted and 2 rewritten")


@pytest.mark.parametrize("damage", ["not a database", "a damaged page"])
def test_session_start_says_the_state_store_is_damaged(env: Env, repo: Path, damage: str) -> None:
    """A state.sqlite SQLite cannot read is said, not taken for "no alarm"; the file is left
    as it was (it may hold kept versions)."""
    folder = auto_dir(env, repo)
    folder.mkdir(parents=True)
    from memoryd.versions import kept

    store = kept.VersionStore(env.state)
    store._keep_alarm(folder, time.time() - 60, 40, 2)
    conn = store.conn()
    sql = "SELECT rootpage FROM sqlite_schema WHERE name = 'versions_alarms'"
    root = conn.execute(sql).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.db.close()
    path = env.state / "state.sqlite"
    with open(path, "r+b") as file:
        if damage == "not a database":
            file.write(b"not SQLite at all\n")
        else:
            file.seek((root - 1) * page_size)
            file.write(b"\xff" * 16)
    before = path.read_bytes()
    done = hook("session-start", payload(env, repo, "SessionStart"))
    said = context(done, "SessionStart")
    assert done.returncode == 0
    assert said.startswith(f"memoryd: its state store {path} is damaged"), said
    assert "`memoryd status`" in said and "\n" not in said
    assert path.read_bytes() == before


@pytest.mark.parametrize("given", ["{not json", '{"tool_input": {"file_path": 7}}', "[]"])
def test_a_hook_that_fails_exits_0_prints_nothing_and_logs_why(env: Env, given: str) -> None:
    done = hook("pre-tool-use", given)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    unknown = hook("no-such-event", "{}")
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (0, "", "")
    log = (env.logs / "hooks.log").read_text()
    assert "no-such-event" in log
    if given == "{not json":
        assert "pre-tool-use: JSONDecodeError" in log


def test_the_recall_hook_imports_none_of_memoryds_machinery(env: Env, repo: Path) -> None:
    """Start-up is a hook's whole cost: the pre-tool-use hook that finds a memory loads the
    command line's own modules, the hook's and the masker, not discovery, the config, the
    search store or platformdirs (bench/bench_hooks.py has the times)."""
    write_memory(auto_dir(env, repo), "app_rule.md", body="src/pkg/app.py\n")
    memoryd("recall", "--path", "src/pkg/app.py", cwd=repo)
    probe = (
        "import io, sys\n"
        "from memoryd.cli import main\n"
        "out = io.StringIO()\n"
        "main(['hook', 'pre-tool-use'], out=out)\n"
        "print(out.getvalue().count('app_rule.md'))\n"
        "names = [m for m in sys.modules if m.startswith(('memoryd', 'platformdirs'))]\n"
        "print(' '.join(sorted(names)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        input=json.dumps(payload(env, repo, "PreToolUse", "src/pkg/app.py")),
        capture_output=True,
        text=True,
        check=True,
    )
    found, modules = done.stdout.splitlines()
    assert found == "1", done.stdout
    # The bounded parse of the hook's own input is safejson's; the folders' __init__ modules
    # are docstrings only.
    assert set(modules.split()) == {
        "memoryd", "memoryd.cli", "memoryd.errors",
        "memoryd.model.display",
        "memoryd.claude", "memoryd.claude.hooks", "memoryd.claude.hookio",
        "memoryd.claude.hook_recall",
        "memoryd.model.secrets",
        "memoryd.model.safejson", "memoryd.model", "memoryd.model.lazyre",
    }  # fmt: skip


def test_session_start_brings_the_search_index_up_in_the_background(env: Env, repo: Path) -> None:
    """No daemon and no `memoryd` command ran yet: the session-start hook returns at once and
    leaves a process building the project's search index, after which the pre-tool-use hook
    finds the memory."""
    write_memory(auto_dir(env, repo), "app_rule.md", name="App rule", body="src/pkg/app.py\n")
    assert not (env.state / "recall").exists()
    assert context(hook("session-start", payload(env, repo, "SessionStart")), "SessionStart") == ""
    deadline = time.monotonic() + 60
    said = ""
    while time.monotonic() < deadline and not said:
        data = payload(env, repo, "PreToolUse", "src/pkg/app.py", f"s{time.monotonic_ns()}")
        said = context(hook("pre-tool-use", data), "PreToolUse")
        if not said:
            time.sleep(0.2)
    assert "App rule" in said


def test_a_secret_cut_at_the_line_limit_is_masked_before_the_cut(env: Env, repo: Path) -> None:
    """A key line longer than the limit is cut after its secrets are masked: a token that the
    cut would split (and so no longer look like a token) never reaches the model in part."""
    folder = auto_dir(env, repo)
    line = "src/pkg/app.py " + "w" * 130 + " " + TOKEN
    write_memory(folder, "long_line.md", name="Long", body=line + "\n")
    memoryd("recall", "--path", "src/pkg/app.py", cwd=repo)
    said = context(hook("pre-tool-use", payload(env, repo, "PreToolUse", "src/pkg/app.py")),
                   "PreToolUse")  # fmt: skip
    assert "Long" in said
    assert TOKEN[:8] not in said, said


def test_a_link_in_place_of_a_memory_gives_the_model_none_of_its_target(
    env: Env, repo: Path, tmp_path: Path
) -> None:
    """The memory the search index knows is now a link to another file: no line of that file
    is given to the model."""
    folder = auto_dir(env, repo)
    memory = write_memory(folder, "app_rule.md", name="App rule", body="src/pkg/app.py rule\n")
    memoryd("recall", "--path", "src/pkg/app.py", cwd=repo)
    private = tmp_path / "private.txt"
    private.write_text("src/pkg/app.py PRIVATE-LINE-OF-ANOTHER-FILE\n")
    memory.unlink()
    memory.symlink_to(private)
    said = context(hook("pre-tool-use", payload(env, repo, "PreToolUse", "src/pkg/app.py")),
                   "PreToolUse")  # fmt: skip
    assert "PRIVATE-LINE" not in said
