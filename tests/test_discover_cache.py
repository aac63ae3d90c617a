"""Discovery's cost over many project folders: each transcript's first cwd kept between runs
(by the transcript's identity), each path looked at once per run, and git read from `.git`;
with results the same as reading everything afresh."""

import contextlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.config import ClaudeEnv, Config, PathsConfig
from memoryd.discover import cwd_cache
from memoryd.discover.finder import discover_all
from memoryd.discover.found import Discovery
from memoryd.discover.slugs import slugify
from memoryd.storage.statedb import forget_shared
from tests.conftest import Env, write_memory
from tests.helpers import state_rows


def cached_files(env: Env) -> list[tuple[object, object]]:
    """The cache's rows (inode, cwd) in the state store."""
    return state_rows(env.state, "SELECT ino, cwd FROM cache_cwd")


def config_for(env: Env) -> Config:
    return Config(paths=PathsConfig(claude_home=env.claude), claude_env=ClaudeEnv(home=env.home))


def uncached(config: Config) -> Discovery:
    """Discovery reading every transcript, keeping nothing (the reference result)."""
    from memoryd.discover.cwd_cache import CwdCache

    return discover_all(config, cache=CwdCache.off())


def row(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def session(env: Env, cwd: Path, name: str = "s.jsonl", *rows: str, age: float = 0) -> Path:
    """A transcript under the cwd's own slug: its rows, by default a summary then the cwd."""
    folder = env.claude / "projects" / slugify(str(cwd))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(rows) if rows else row(type="summary") + row(cwd=str(cwd)))
    if age:
        when = path.stat().st_mtime - age
        os.utime(path, (when, when))
    return path


@pytest.fixture
def home(env: Env, tmp_path: Path) -> Path:
    """A Claude home of 40 project folders: sessions in repo roots, subfolders and plain
    folders (some gone), a few transcripts each (one folder's newest has no cwd, one's only
    a cwd of another slug), 3 auto-memory dirs and a repo-scope one; memoryd's state dir
    exists, as once memoryd ran."""
    env.state.mkdir(parents=True)
    code = tmp_path / "deep" / "er" / "code"
    repos = []
    for i in range(5):
        repo = code / f"r{i}"
        (repo / "src" / "app").mkdir(parents=True)
        (repo / ".git").mkdir()
        repos.append(repo)
    plain = [code / f"plain{i}" for i in range(25)]
    cwds = [*repos, *(r / "src" for r in repos), *(r / "src" / "app" for r in repos), *plain]
    for cwd in cwds[:-5]:
        cwd.mkdir(parents=True, exist_ok=True)
    for cwd in cwds:
        for k in range(3):
            session(env, cwd, f"s{k}.jsonl", age=100 * k)
    session(env, plain[0], "s9.jsonl", row(type="summary"))  # the newest: no cwd yet
    session(env, plain[1], "s9.jsonl", row(cwd=str(code / "elsewhere")))
    lonely = env.claude / "projects" / slugify(str(code / "lonely"))
    lonely.mkdir()
    (lonely / "s.jsonl").write_text(row(cwd=str(code / "zz")) + row(cwd=str(code / "aa")))
    for repo in repos[:3]:
        write_memory(env.claude / "projects" / slugify(str(repo)) / "memory", "a.md")
    write_memory(repos[4] / ".claude" / "memory", "b.md")
    return code


class Calls:
    def __init__(self) -> None:
        self.transcript_opens = 0
        self.looks = 0  # stat, lstat and open calls
        self.processes = 0


@contextlib.contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Count what discovery asks of the system: opens of transcripts, stats, processes."""
    calls = Calls()
    real_open, real_stat, real_lstat = os.open, os.stat, os.lstat
    real_popen = subprocess.Popen.__init__

    def opening(path, *args, **kwargs):
        calls.looks += 1
        calls.transcript_opens += str(path).endswith(".jsonl")
        return real_open(path, *args, **kwargs)

    def stat(*args, **kwargs):
        calls.looks += 1
        return real_stat(*args, **kwargs)

    def lstat(*args, **kwargs):
        calls.looks += 1
        return real_lstat(*args, **kwargs)

    def popen(self, *args, **kwargs):
        calls.processes += 1
        real_popen(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", opening)
        patch.setattr(os, "stat", stat)
        patch.setattr(os, "lstat", lstat)
        patch.setattr(subprocess.Popen, "__init__", popen)
        yield calls


def test_a_second_discovery_with_nothing_changed_opens_no_transcript(
    env: Env, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first discovery reads each folder's transcripts up to a cwd of its slug and keeps
    what it read (0600); the next, nothing changed, opens no transcript and finds the same."""
    config = config_for(env)
    with counting(monkeypatch) as first:
        found = discover_all(config)
    assert first.transcript_opens >= 41  # a folder's newest without a cwd: one more read
    with counting(monkeypatch) as second:
        again = discover_all(config)
    assert second.transcript_opens == 0
    assert cached_files(env) and (env.state / "state.sqlite").stat().st_mode & 0o777 == 0o600
    assert again == found == uncached(config)
    roots = {md.label: md.repo_reason for md in found.dirs}
    assert any("cwd in s0.jsonl" in r for r in roots.values())


def test_each_path_is_looked_at_once_per_run(
    env: Env, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 41 project folders a discovery costs a bounded number of stat/lstat/open calls
    a folder (about 13 here; resolving every path afresh took about 100 a folder at this
    depth), and starts no process: `.git` is read, git never run."""
    config = config_for(env)
    discover_all(config)
    with counting(monkeypatch) as calls:
        discover_all(config)
    folders = len(list((env.claude / "projects").iterdir()))
    assert folders == 41
    assert calls.looks <= 30 * folders
    assert calls.processes == 0


def test_a_changed_transcript_is_read_again(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transcript caught mid-write (its first row torn, no cwd yet) gives no root; once
    the row is whole, its new size and mtime make the next discovery read it again (that
    transcript alone) and find the root."""
    env.state.mkdir(parents=True)
    code = tmp_path / "code"
    code.mkdir()
    write_memory(env.claude / "projects" / slugify(str(code)) / "memory", "a.md")
    other = tmp_path / "other"
    other.mkdir()
    session(env, other)
    torn = session(env, code, "s.jsonl", '{"type": "user", "cwd": "' + str(code))
    config = config_for(env)
    [md] = discover_all(config).dirs
    assert md.repo_root is None
    with torn.open("a") as handle:
        handle.write('"}\n')
    with counting(monkeypatch) as calls:
        [md] = discover_all(config).dirs
    assert md.repo_root == code and md.repo_reason == "cwd in s.jsonl"
    assert calls.transcript_opens == 1


@pytest.mark.parametrize("damage", ["old version", "wrong types", "forged cwd"])
def test_a_damaged_cache_is_done_without(env: Env, home: Path, tmp_path: Path, damage: str) -> None:
    """Cache rows that are not what memoryd writes (of another schema version, of the wrong
    types, a cwd that does not match its folder's slug) are no failure: discovery reads the
    transcripts and finds the same, and the next save replaces them."""
    config = config_for(env)
    reference = uncached(config)
    discover_all(config)
    conn = sqlite3.connect(env.state / "state.sqlite")
    with conn:
        if damage == "old version":
            conn.execute("UPDATE schemas SET version = 0 WHERE name = 'cache_cwd'")
        elif damage == "wrong types":
            conn.execute("UPDATE cache_cwd SET ino = '1', size = NULL, mtime_ns = 2.5")
        else:
            forged = str(tmp_path / "forged")
            conn.execute("UPDATE cache_cwd SET cwd = ? WHERE cwd IS NOT NULL", (forged,))
    conn.close()
    forget_shared()  # as a new process: its schemas looked at again
    assert discover_all(config) == reference
    rows = cached_files(env)
    assert rows and all(isinstance(ino, int) for ino, _ in rows)
    assert str(tmp_path / "forged") not in {cwd for _, cwd in rows}


def test_no_state_folder_is_created_and_a_read_only_one_is_no_failure(
    env: Env, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery never creates memoryd's state folder (a dry run on a new machine writes
    nothing); one it cannot write to costs the cache, never the discovery."""
    config = config_for(env)
    os.rmdir(env.state)
    found = discover_all(config)
    assert not env.state.exists()
    env.state.mkdir(parents=True)

    def refused(*_: object) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(cwd_cache, "_write", refused)
    assert discover_all(config) == found
    assert not cached_files(env)


def test_a_worktree_git_file_is_resolved_without_git(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worktree's `.git` file (`gitdir:` relative, its `commondir` relative too), made by
    hand: a session there gives the main work tree's auto-memory dir its root, and the main
    work tree's `.claude/memory` is found, with no git on the machine (PATH empty)."""
    env.state.mkdir(parents=True)
    main = tmp_path / "code" / "main"
    admin = main / ".git" / "worktrees" / "feature"
    admin.mkdir(parents=True)
    (admin / "commondir").write_text("../..\n")
    tree = tmp_path / "code" / "feature"
    tree.mkdir()
    (tree / ".git").write_text("gitdir: ../main/.git/worktrees/feature\n")
    write_memory(main / ".claude" / "memory", "repo.md")
    memory = env.claude / "projects" / slugify(str(main)) / "memory"
    write_memory(memory, "auto.md")
    session(env, tree)
    monkeypatch.setenv("PATH", "")
    with counting(monkeypatch) as calls:
        dirs = {md.real_path: md for md in discover_all(config_for(env)).dirs}
    assert calls.processes == 0
    assert dirs[memory].repo_root == main
    assert f"git root of the cwd {tree}" in dirs[memory].repo_reason
    assert dirs[main / ".claude" / "memory"].repo_root == main


def test_a_command_that_writes_nothing_does_not_save_the_cache(env, cli) -> None:
    """`dirs` and `dream --dry-run` promise to write nothing: they read the cache, never save
    it; `index` (a command that writes) saves it."""
    project = env.claude / "projects" / "-p"
    (project / "memory").mkdir(parents=True)
    (project / "memory" / "a.md").write_text("---\nname: a\ndescription: a\ntype: user\n---\nA.\n")
    (project / "s.jsonl").write_text('{"type":"user","cwd":"/nowhere/p"}\n')
    env.state.mkdir(parents=True, exist_ok=True)
    assert cli("dirs").code == 0
    assert cli("dream", "--dry-run").code in (0, 1)
    assert not cached_files(env)
    assert cli("index").code == 0
    assert cached_files(env)
