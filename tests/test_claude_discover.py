"""memoryd's discovery held to the real Claude Code binary (issue 13): the dir memoryd finds is
the one whose `Contents of <path>` block the binary sends, and the repo root memoryd reads from
the transcripts the binary wrote is the repo.

Opt-in, like tests/test_claude_real.py: every test skips unless `$MEMORYD_CLAUDE_BIN` names a
Claude Code binary. One binary run each, a few seconds in all.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from memoryd.config import ClaudeEnv, Config, PathsConfig
from memoryd.discover.finder import discover, discover_all
from memoryd.discover.found import MemoryDir
from memoryd.discover.slugs import slugify
from memoryd.indexing.read import view_kind
from memoryd.model.agentview import ViewKind
from memoryd.model.index import INDEX_NAME
from tests.claude_client import BIN_ENV, Captured, MemoryBlock, claude_bin, run_claude
from tests.helpers import git

pytestmark = pytest.mark.timeout(300)

if not os.environ.get(BIN_ENV):
    pytest.skip(
        f"set {BIN_ENV} to a Claude Code binary to run the real-client checks",
        allow_module_level=True,
    )


@pytest.fixture(autouse=True)
def _binary() -> None:
    claude_bin()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def config(home: Path, **env: object) -> Config:
    """memoryd's configuration for the binary's private HOME and the variables it ran with."""
    return replace(
        Config(paths=PathsConfig(claude_home=home / ".claude")),
        claude_env=ClaudeEnv(home=home, **env),  # type: ignore[arg-type]
    )


def block(cap: Captured) -> MemoryBlock:
    assert cap.returncode == 0, cap.stderr
    [found] = [b for b in cap.memory if "auto-memory" in b.label]
    return found


def loaded_dir(dirs: list[MemoryDir], cap: Captured) -> MemoryDir:
    """The memory dir memoryd discovered whose MEMORY.md the binary loaded."""
    path = Path(block(cap).path)
    assert path.name == INDEX_NAME
    matches = [md for md in dirs if md.real_path == path.parent.resolve()]
    assert matches, (path, [str(md.real_path) for md in dirs])
    return matches[0]


def test_a_hashed_slug_names_the_dir_the_binary_loads(home: Path, tmp_path: Path) -> None:
    """A cwd whose slug is over 200 characters (emoji count twice): memoryd's slug names the
    dir the binary loads, and the binary's own transcript gives it the cwd as its root."""
    cwd = tmp_path / ("e\U0001f600" * 40) / ("f" * 60)
    cwd.mkdir(parents=True)
    assert len(slugify(str(cwd))) > 200
    memory = home / ".claude" / "projects" / slugify(str(cwd)) / "memory"
    memory.mkdir(parents=True)
    (memory / INDEX_NAME).write_text("hashed slug\n")
    cap = run_claude(home, cwd)
    assert block(cap).text == "hashed slug"
    md = loaded_dir(discover(config(home)), cap)
    assert md.repo_root == cwd


@pytest.mark.parametrize("where", ["subfolder", "worktree"])
def test_a_subfolder_or_worktree_session_roots_the_repo_dir(
    home: Path, tmp_path: Path, where: str
) -> None:
    """A session in a git subfolder or a worktree loads the main repo's dir; memoryd finds
    that repo as the dir's root through the transcript the binary left under the session's
    own slug."""
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "init")
    cwd = repo / "pkg" / "sub"
    if where == "worktree":
        cwd = tmp_path / "repo-feature"
        git(repo, "worktree", "add", "-q", str(cwd), "-b", "feature")
    memory = home / ".claude" / "projects" / slugify(str(repo)) / "memory"
    memory.mkdir(parents=True)
    (memory / INDEX_NAME).write_text("main repo memory\n")
    cap = run_claude(home, cwd)
    assert slugify(str(cwd)) in cap.projects  # the transcript stays under the cwd's slug
    md = loaded_dir(discover(config(home)), cap)
    assert md.repo_root == repo.resolve()
    assert str(cwd) in md.repo_reason


@pytest.mark.parametrize("where", ["user", "local"])
def test_auto_memory_directory_is_the_dir_memoryd_finds(
    home: Path, tmp_path: Path, where: str
) -> None:
    """`autoMemoryDirectory` (`~/`) in the user's or the project's own settings: memoryd finds
    the folder the binary loads and models it as an auto-memory dir."""
    cwd = tmp_path / "proj"
    cwd.mkdir()
    target = home / "elsewhere" / where
    target.mkdir(parents=True)
    (target / INDEX_NAME).write_text(f"relocated by {where}\n")
    settings = {
        "user": home / ".claude" / "settings.json",
        "local": cwd / ".claude" / "settings.local.json",
    }[where]
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"autoMemoryDirectory": f"~/elsewhere/{where}"}))
    cap = run_claude(home, cwd)
    md = loaded_dir(discover(config(home)), cap)
    assert md.kind == "project" and view_kind(md) is ViewKind.AUTO and md.not_loaded == ""


@pytest.mark.parametrize(
    "variable", ["CLAUDE_CODE_REMOTE_MEMORY_DIR", "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE"]
)
def test_the_environment_relocation_is_the_dir_memoryd_finds(
    home: Path, tmp_path: Path, variable: str
) -> None:
    """The two variables that move auto memory: memoryd, given the same environment, finds
    the dir the binary loads."""
    cwd = tmp_path / "proj"
    cwd.mkdir()
    base = tmp_path / "moved"
    folder = (
        base / "projects" / slugify(str(cwd)) / "memory"
        if variable.endswith("REMOTE_MEMORY_DIR")
        else base
    )
    folder.mkdir(parents=True)
    (folder / INDEX_NAME).write_text("moved\n")
    cap = run_claude(home, cwd, {variable: str(base)})
    key = "remote_memory_dir" if variable.endswith("REMOTE_MEMORY_DIR") else "cowork_override"
    md = loaded_dir(discover(config(home, **{key: base})), cap)
    assert view_kind(md) is ViewKind.AUTO


def test_turned_off_the_binary_loads_nothing_and_memoryd_says_so(
    home: Path, tmp_path: Path
) -> None:
    """`autoMemoryEnabled: false`: no block sent; memoryd reports auto memory off, naming
    the settings file, and the dir as not loaded."""
    cwd = tmp_path / "proj"
    cwd.mkdir()
    memory = home / ".claude" / "projects" / slugify(str(cwd)) / "memory"
    memory.mkdir(parents=True)
    (memory / INDEX_NAME).write_text("should not load\n")
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"autoMemoryEnabled": False}))
    cap = run_claude(home, cwd)
    assert cap.returncode == 0, cap.stderr
    assert [b for b in cap.memory if "auto-memory" in b.label] == []
    found = discover_all(config(home))
    assert str(settings) in found.auto_memory_off
    [md] = found.dirs
    assert md.not_loaded.startswith("auto memory is off")


def test_a_subfolder_session_takes_the_repo_roots_local_settings(
    home: Path, tmp_path: Path
) -> None:
    """In a git subfolder the binary honours the repo root's `settings.local.json` (and not its
    `settings.json`, whose `autoMemoryEnabled: false` it ignores there): memoryd, reading the
    binary's transcript, finds the same dir and calls it loaded."""
    repo = tmp_path / "repo"
    sub = repo / "pkg" / "sub"
    sub.mkdir(parents=True)
    git(repo, "init", "-q")
    target = home / "moved"
    target.mkdir()
    (target / INDEX_NAME).write_text("moved by the root's local settings\n")
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text(
        json.dumps({"autoMemoryDirectory": "~/moved"})
    )
    (repo / ".claude" / "settings.json").write_text(json.dumps({"autoMemoryEnabled": False}))
    cap = run_claude(home, sub)
    md = loaded_dir(discover(config(home)), cap)
    assert md.real_path == target.resolve() and md.not_loaded == ""
    assert md.repo_root == repo.resolve()
