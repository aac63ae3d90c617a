"""Discovery: every memory location, repo roots from transcripts, symlinked folders."""

import json
import os
from pathlib import Path

from memoryd.config import Config, build_config, with_claude_home
from memoryd.discover import discover, project_repo_root, slugify
from tests.conftest import Env, write_memory


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
        '{"type":"x"}\nnot json\n' + json.dumps({"cwd": str(code)}) + '\n{"cwd": "/tr')
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
    cfg = build_config({"paths": {"claude_home": str(env.claude),
                                  "repos": [str(tmp_path / "repos" / "*")],
                                  "extra_memory_dirs": [str(extra)]}}, "t")
    found = {(d.kind, d.label): d for d in discover(cfg)}
    assert set(found) == {("project", project.name), ("agent", "reviewer"), ("repo", "one"),
                          ("repo-agent", "planner"), ("repo-agent-local", "mine"),
                          ("nested", "sub"), ("extra", "extra")}
    assert found[("project", project.name)].repo_root == code
    assert found[("project", project.name)].heading == "my.app"
    assert found[("repo-agent", "planner")].repo_root == repo
    assert found[("agent", "reviewer")].repo_root is None


def test_symlinked_memory_folder_is_followed_once(env: Env, tmp_path: Path) -> None:
    """A symlinked memory folder is used at its real path and listed once."""
    real = tmp_path / "real-memory"
    write_memory(real, "a.md")
    (env.claude / "agent-memory").mkdir(parents=True)
    os.symlink(real, env.claude / "agent-memory" / "linked")
    dirs = discover(with_claude_home(Config(), env.claude))
    assert len(dirs) == 1
    assert dirs[0].real_path == real.resolve() and dirs[0].via_symlink


def test_claude_config_dir_is_honoured(env: Env, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """$CLAUDE_CONFIG_DIR replaces ~/.claude as the Claude home."""
    other = tmp_path / "claude-elsewhere"
    write_memory(other / "agent-memory" / "x", "a.md")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(other))
    assert [d.label for d in discover(Config())] == ["x"]


def test_missing_claude_home_is_not_an_error(env: Env, cli) -> None:  # type: ignore[no-untyped-def]
    """With no ~/.claude yet, `dirs` and `index` say so and exit 0."""
    result = cli("dirs")
    assert result.code == 0 and "does not exist yet" in result.out
    assert cli("index").code == 0
