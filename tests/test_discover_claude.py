"""Discovery as Claude Code computes it (issue 13): the exact slug, repo roots through the git
root of a cwd another project folder records, relocated and turned-off auto memory, and the
repo-scope dirs of every repo the transcripts know."""

import json
import os
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest

from memoryd.config import ClaudeEnv, Config, PathsConfig
from memoryd.discover.finder import discover, discover_all, memory_dir_at
from memoryd.discover.slugs import slugify
from memoryd.discover.transcripts import Transcripts, project_repo_root
from memoryd.indexing.read import view_kind
from memoryd.model.agentview import ViewKind
from tests.conftest import Env, write_memory
from tests.helpers import git

# --- the slug -----------------------------------------------------------------------------------


def reference_slug(path: str) -> str:
    """Issue 13's rule written out independently: over the UTF-16 code units, as bytes."""
    raw = path.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]
    short = "".join(chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in units)
    if len(short) <= 200:
        return short
    h = 0
    for u in units:
        h = ((h << 5) - h + u) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return f"{short[:200]}-{int_to_36(abs(h))}"


def int_to_36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = digits[n % 36]
    while n >= 36:
        n //= 36
        out = digits[n % 36] + out
    return out


def test_an_emoji_is_two_dashes_and_a_flag_four() -> None:
    """Each UTF-16 code unit outside [A-Za-z0-9] is a `-`: an astral character is two."""
    assert slugify("/a/x\U0001f600y") == "-a-x--y"
    assert slugify("/a/\U0001f1fa\U0001f1f8") == "-a-----"
    assert slugify("/caf\u00e9") == "-caf-"  # a BMP letter is one unit


@pytest.mark.parametrize("length", [199, 200, 201, 202, 400])
def test_slugs_past_200_characters_get_the_path_hash(length: int) -> None:
    """Up to 200 characters the slug is the plain replacement; past it the first 200, `-` and
    the base-36 of the absolute 32-bit string hash of the path."""
    path = "/" + "x" * (length - 1)
    slug = slugify(path)
    if length <= 200:
        assert slug == "-" + "x" * (length - 1)
    else:
        assert slug[:201] == "-" + "x" * 199 + "-" and len(slug) > 201
    assert slug == reference_slug(path)


@pytest.mark.parametrize(
    ("path", "tail"),
    [
        # What Claude Code 2.1.332 named the project folders of these cwds (run on this machine).
        (
            "/tmp/slugprobe/p/" + "a" * 60 + "/" + "b" * 60 + "/" + "c" * 60 + "/" + "d" * 10,
            "cccc--rvnc1r",
        ),
        ("/tmp/slugprobe/p/" + "e\U0001f600" * 40 + "/" + "f" * 100, "fffff-6flotb"),
        (
            "/tmp/slugprobe/p/" + "g" * 60 + "/" + "\U0001f1fa\U0001f1f8" * 20 + "/" + "h" * 60,
            "hhhhh-kaw160",
        ),
    ],
    ids=["ascii-210", "emoji-198-chars", "flags-179-chars"],
)
def test_long_slugs_match_the_client(path: str, tail: str) -> None:
    """Astral characters count twice towards the 200 (a 179-character path of flags is
    hashed) and twice in the hash: the slugs the real client gave these paths."""
    slug = slugify(path)
    assert len(slug) == 207 and slug[195:] == tail
    assert slug == reference_slug(path)


def test_nfc_and_nfd_paths_keep_their_own_slugs() -> None:
    """No Unicode normalisation: an NFC `é` is one dash, an NFD `e` + accent `e-`."""
    nfc = "/src/caf\u00e9"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    assert slugify(nfc) == "-src-caf-"
    assert slugify(nfd) == "-src-cafe-"


def test_an_nfd_project_folder_finds_its_repo_root(env: Env, tmp_path: Path) -> None:
    """A cwd written in NFD keys its memory dir by its NFD slug, and its transcripts give
    that dir its repo root (no normalisation on either side)."""
    code = tmp_path / unicodedata.normalize("NFD", "caf\u00e9")
    code.mkdir()
    project = env.claude / "projects" / slugify(str(code))
    write_memory(project / "memory", "a.md")
    (project / "s.jsonl").write_text(json.dumps({"cwd": str(code)}) + "\n")
    [md] = discover(Config(paths=PathsConfig(claude_home=env.claude)))
    assert md.label.endswith("cafe-") and md.repo_root == code


# --- repo roots through the git root of a cwd ---------------------------------------------------


def transcript(claude: Path, cwd: Path, name: str = "s.jsonl", rows: int = 0) -> Path:
    """A session transcript under the cwd's own slug, as the client writes it: a few rows
    without a cwd, then rows that carry it."""
    folder = claude / "projects" / slugify(str(cwd))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    lines = [json.dumps({"type": "queue-operation", "operation": "enqueue"})]
    lines += [json.dumps({"type": "user", "cwd": str(cwd), "n": i}) for i in range(max(rows, 1))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "code" / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "init")
    return repo


def test_a_subfolder_session_gives_the_repo_memory_its_root(env: Env, git_repo: Path) -> None:
    """A session in a subfolder loads the repo's auto memory but keeps its transcripts under
    the subfolder's slug: the repo's memory dir (no transcripts of its own) gets the repo
    as its root, found through the subfolder's transcripts."""
    memory = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(memory, "deploy.md")
    sub = git_repo / "pkg" / "sub"
    transcript(env.claude, sub)
    root, reason = project_repo_root(memory.parent, memory.parent.name)
    assert root == git_repo.resolve()
    assert str(sub) in reason and slugify(str(sub)) in reason
    [md] = discover(Config(paths=PathsConfig(claude_home=env.claude)))
    assert md.real_path == memory and md.repo_root == git_repo.resolve()


def test_a_worktree_session_gives_the_main_repo_memory_its_root(
    env: Env, git_repo: Path, tmp_path: Path
) -> None:
    """`git worktree add`: a session there loads the main work tree's auto memory; its
    transcripts (under the worktree's slug) give that dir the main work tree as its root."""
    tree = tmp_path / "code" / "repo-feature"
    git(git_repo, "worktree", "add", "-q", str(tree), "-b", "feature")
    memory = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(memory, "deploy.md")
    transcript(env.claude, tree)
    dirs = {md.real_path: md for md in discover(Config(paths=PathsConfig(claude_home=env.claude)))}
    assert dirs[memory].repo_root == git_repo.resolve()
    assert "git root of the cwd" in dirs[memory].repo_reason


def test_the_own_transcripts_come_first_and_other_repos_do_not_count(
    env: Env, git_repo: Path, tmp_path: Path
) -> None:
    """The dir's own transcripts still decide when they name a folder that exists; a
    session elsewhere, in another repo, gives this dir nothing."""
    other = tmp_path / "code" / "other"
    (other / "src").mkdir(parents=True)
    git(other, "init", "-q")
    transcript(env.claude, other / "src")
    memory = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(memory, "deploy.md")
    assert project_repo_root(memory.parent, memory.parent.name)[0] is None
    transcript(env.claude, git_repo)
    root, reason = project_repo_root(memory.parent, memory.parent.name)
    assert (root, reason) == (git_repo, "cwd in s.jsonl")


def test_a_gone_subfolder_maps_to_nothing(env: Env, git_repo: Path) -> None:
    """A subfolder that no longer exists is keyed by its own path: it gives the repo's dir no
    root, and the reason still says the dir has no transcripts of its own."""
    memory = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(memory, "deploy.md")
    transcript(env.claude, git_repo / "gone")
    root, reason = project_repo_root(memory.parent, memory.parent.name)
    assert root is None and "no session transcripts" in reason


def test_the_cwd_is_read_from_the_first_rows_only(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big transcript is read up to its first cwd, not 256 KiB of it: the bytes read for a
    5 MB transcript with the cwd in row 2 stay within one 64 KiB read (before: 256 KiB)."""
    code = tmp_path / "code"
    code.mkdir()
    path = transcript(env.claude, code)
    with path.open("a") as handle:
        for i in range(5000):
            handle.write(
                json.dumps({"type": "assistant", "cwd": str(code), "pad": "x" * 1000, "i": i})
                + "\n"
            )
    assert path.stat().st_size > 5_000_000
    read = 0
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        nonlocal read
        data = real_read(fd, n)
        read += len(data)
        return data

    monkeypatch.setattr(os, "read", counting)
    assert Transcripts(env.claude / "projects").repo_root(slugify(str(code)))[0] == code
    assert 0 < read <= 64 * 1024


# --- relocated auto memory ---------------------------------------------------------------------


def config_with(env: Env, **claude: object) -> Config:
    """The defaults for this HOME, with Claude Code's environment as given."""
    return replace(
        Config(paths=PathsConfig(claude_home=env.claude)),
        claude_env=ClaudeEnv(home=env.home, **claude),  # type: ignore[arg-type]
    )


def settings(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def test_the_remote_memory_base_is_discovered_with_its_root(env: Env, tmp_path: Path) -> None:
    """CLAUDE_CODE_REMOTE_MEMORY_DIR=<base>: `<base>/projects/<slug>/memory/` is an
    auto-memory dir (the agent's view strips it as one), its repo root from the transcripts
    that stay in the Claude home; the Claude home's own dir for it is no longer loaded."""
    code = tmp_path / "code"
    code.mkdir()
    transcript(env.claude, code)
    base = tmp_path / "remote"
    remote = base / "projects" / slugify(str(code)) / "memory"
    write_memory(remote, "a.md")
    old = env.claude / "projects" / slugify(str(code)) / "memory"
    write_memory(old, "b.md")
    found = discover_all(config_with(env, remote_memory_dir=base))
    dirs = {md.real_path: md for md in found.dirs}
    assert dirs[remote].kind == "project" and dirs[remote].repo_root == code
    assert view_kind(dirs[remote]) is ViewKind.AUTO
    assert dirs[remote].not_loaded == ""
    assert "CLAUDE_CODE_REMOTE_MEMORY_DIR" in dirs[old].not_loaded
    assert str(remote) in dirs[old].not_loaded


def test_the_cowork_override_is_one_auto_memory_dir(env: Env, tmp_path: Path) -> None:
    """CLAUDE_COWORK_MEMORY_PATH_OVERRIDE=<dir>: `<dir>` is an auto-memory dir, named on
    the command line too; the default dirs are not what the agent loads any more."""
    folder = tmp_path / "cowork"
    write_memory(folder, "a.md")
    default = env.claude / "projects" / "-some-project" / "memory"
    write_memory(default, "b.md")
    config = config_with(env, cowork_override=folder)
    dirs = {md.real_path: md for md in discover(config)}
    assert dirs[folder].kind == "project" and view_kind(dirs[folder]) is ViewKind.AUTO
    assert "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE" in dirs[default].not_loaded
    named = memory_dir_at(folder, config)
    assert named.kind == "project" and view_kind(named) is ViewKind.AUTO


def test_the_user_setting_relocates_with_home_expanded(env: Env, tmp_path: Path) -> None:
    """`autoMemoryDirectory: "~/notes/mem"` in the user's settings.json: that folder is an
    auto-memory dir (`~/` is the home); `~/../x`, which climbs out of it, is ignored."""
    folder = env.home / "notes" / "mem"
    write_memory(folder, "a.md")
    settings(env.claude / "settings.json", {"autoMemoryDirectory": "~/notes/mem/"})
    dirs = {md.real_path: md for md in discover(config_with(env))}
    assert view_kind(dirs[folder]) is ViewKind.AUTO
    assert "settings.json" in dirs[folder].repo_reason
    write_memory(tmp_path / "x", "b.md")
    settings(env.claude / "settings.json", {"autoMemoryDirectory": "~/../x"})
    assert tmp_path / "x" not in {md.real_path for md in discover(config_with(env))}


@pytest.mark.parametrize("name", ["settings.json", "settings.local.json"])
def test_a_project_setting_relocates_inside_its_repo(env: Env, git_repo: Path, name: str) -> None:
    """A project's `.claude/settings.json` or `settings.local.json` moving its auto memory to
    a folder in the repo: found, an auto-memory dir, with the repo as its root; the default
    dir of the project is not loaded any more, and says where it went."""
    folder = git_repo / "docs" / "memory"
    write_memory(folder, "a.md")
    settings(git_repo / ".claude" / name, {"autoMemoryDirectory": str(folder)})
    transcript(env.claude, git_repo)
    default = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(default, "b.md")
    dirs = {md.real_path: md for md in discover(config_with(env))}
    assert dirs[folder].kind == "project" and view_kind(dirs[folder]) is ViewKind.AUTO
    assert dirs[folder].repo_root == git_repo.resolve()
    assert str(folder) in dirs[default].not_loaded and name in dirs[default].not_loaded


def test_a_relative_setting_is_ignored(env: Env, git_repo: Path) -> None:
    """A relative `autoMemoryDirectory` is no relocation to the client (it uses the default
    place): the folder is not discovered and the default dir is what the agent loads."""
    folder = git_repo / "docs" / "memory"
    write_memory(folder, "a.md")
    settings(git_repo / ".claude" / "settings.local.json", {"autoMemoryDirectory": "docs/memory"})
    transcript(env.claude, git_repo)
    default = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(default, "b.md")
    dirs = {md.real_path: md for md in discover(config_with(env))}
    assert folder not in dirs and dirs[default].not_loaded == ""


def test_a_subfolder_session_reads_the_roots_local_settings_only(
    env: Env, git_repo: Path, tmp_path: Path
) -> None:
    """As the client does (observed, 2.1.332): a session in a subfolder honours the repo
    root's `settings.local.json` but not its `settings.json`; a worktree session its main work
    tree's `settings.local.json`."""
    sub = git_repo / "pkg" / "sub"
    transcript(env.claude, sub)
    memory = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    write_memory(memory, "a.md")
    settings(git_repo / ".claude" / "settings.json", {"autoMemoryEnabled": False})
    [md] = discover(config_with(env))
    assert md.not_loaded == ""
    settings(git_repo / ".claude" / "settings.local.json", {"autoMemoryEnabled": False})
    [md] = discover(config_with(env))
    assert "auto memory is off for" in md.not_loaded and str(sub) in md.not_loaded
    (git_repo / ".claude" / "settings.json").unlink()
    folder = env.home / "moved"
    write_memory(folder, "b.md")
    settings(git_repo / ".claude" / "settings.local.json", {"autoMemoryDirectory": "~/moved"})
    (env.claude / "projects" / slugify(str(sub))).rename(tmp_path / "away")
    tree = tmp_path / "code" / "repo-feature"
    git(git_repo, "worktree", "add", "-q", str(tree), "-b", "feature")
    transcript(env.claude, tree)
    dirs = {md.real_path: md for md in discover(config_with(env))}
    assert dirs[folder].repo_root == git_repo.resolve()
    assert str(folder) in dirs[memory].not_loaded


def test_a_checked_in_setting_out_of_the_repo_is_refused(
    env: Env, git_repo: Path, tmp_path: Path, cli
) -> None:
    """A checked-in settings.json pointing auto memory at a folder outside the repo and the
    Claude home (a notes vault) does not get memoryd to edit it: refused, naming the file;
    the same value in the person's own settings.local.json is followed."""
    vault = tmp_path / "vault"
    write_memory(vault, "note.md")
    settings(git_repo / ".claude" / "settings.json", {"autoMemoryDirectory": str(vault)})
    transcript(env.claude, git_repo)
    found = discover_all(config_with(env))
    assert vault not in {md.real_path for md in found.dirs}
    [refused] = found.refused
    assert refused.target == vault and "settings.json" in refused.reason
    assert "paths.extra_memory_dirs" in refused.hint
    result = cli("index")
    assert result.code == 0, result.err
    assert not (vault / "MEMORY.md").exists()
    settings(git_repo / ".claude" / "settings.local.json", {"autoMemoryDirectory": str(vault)})
    assert vault in {md.real_path for md in discover(config_with(env))}


@pytest.mark.parametrize(
    "content", ["{not json", "[1, 2]", b"\xff\xfe"], ids=["bad", "list", "binary"]
)
def test_a_broken_settings_file_is_a_warning_naming_it(env: Env, cli, content: str | bytes) -> None:
    """A user settings.json that is not a JSON object: `dirs` warns naming the file, exit 0."""
    write_memory(env.claude / "projects" / "-p" / "memory", "a.md")
    path = env.claude / "settings.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = cli("dirs")
    assert result.code == 0, result.err
    assert f"warning: {path}:" in result.out
    doc = json.loads(cli("dirs", "--json").out)
    assert doc["warnings"] and str(path) in doc["warnings"][0]


def test_a_settings_fifo_is_not_read(env: Env, cli, git_repo: Path) -> None:
    """A FIFO as a project's settings.local.json: a warning, never a read that blocks."""
    transcript(env.claude, git_repo)
    (git_repo / ".claude").mkdir()
    os.mkfifo(git_repo / ".claude" / "settings.local.json")
    result = cli("dirs")
    assert result.code == 0, result.err
    assert "settings.local.json: not read" in result.out and "FIFO" in result.out


# --- auto memory turned off ---------------------------------------------------------------------


def test_the_env_switch_turns_auto_memory_off_and_dirs_says_so(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLAUDE_CODE_DISABLE_AUTO_MEMORY=1: `dirs` says auto memory is off and where, each
    auto-memory dir is "not loaded"; memoryd still maintains it (index writes MEMORY.md)."""
    memory = env.claude / "projects" / "-p" / "memory"
    write_memory(memory, "a.md")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "1")
    result = cli("dirs")
    assert result.code == 0, result.err
    assert "Auto memory is turned off (CLAUDE_CODE_DISABLE_AUTO_MEMORY=1" in result.out
    assert "not loaded" in result.out  # the table's INDEX cell
    assert "1 not loaded by the agent" in result.out  # its summary line
    detail = cli("dirs", str(memory))
    assert "not loaded by the agent: auto memory is off" in detail.out
    doc = json.loads(cli("dirs", "--json").out)
    assert "CLAUDE_CODE_DISABLE_AUTO_MEMORY=1" in doc["auto_memory_off"]
    assert doc["dirs"][0]["not_loaded"].startswith("auto memory is off")
    assert cli("index").code == 0 and (memory / "MEMORY.md").is_file()


def test_the_setting_turns_it_off_and_the_env_can_force_it_on(env: Env) -> None:
    """`autoMemoryEnabled: false` in the user's settings turns it off (naming the file);
    CLAUDE_CODE_DISABLE_AUTO_MEMORY=0 turns it back on over any setting."""
    write_memory(env.claude / "projects" / "-p" / "memory", "a.md")
    settings(env.claude / "settings.json", {"autoMemoryEnabled": False})
    found = discover_all(config_with(env))
    assert found.auto_memory_off == f"autoMemoryEnabled: false in {env.claude / 'settings.json'}"
    assert found.dirs[0].not_loaded.startswith("auto memory is off")
    forced = discover_all(config_with(env, disable_auto_memory="0"))
    assert forced.auto_memory_off == "" and forced.dirs[0].not_loaded == ""


def test_a_project_turns_off_its_own_auto_memory(env: Env, git_repo: Path, tmp_path: Path) -> None:
    """`autoMemoryEnabled: false` in one project's settings.local.json: that project's dir is
    not loaded, another project's is; auto memory as a whole is still on."""
    settings(git_repo / ".claude" / "settings.local.json", {"autoMemoryEnabled": False})
    transcript(env.claude, git_repo)
    other = tmp_path / "other"
    other.mkdir()
    transcript(env.claude, other)
    mine = env.claude / "projects" / slugify(str(git_repo)) / "memory"
    theirs = env.claude / "projects" / slugify(str(other)) / "memory"
    write_memory(mine, "a.md")
    write_memory(theirs, "b.md")
    found = discover_all(config_with(env))
    dirs = {md.real_path: md for md in found.dirs}
    assert found.auto_memory_off == ""
    assert "auto memory is off for" in dirs[mine].not_loaded
    assert "settings.local.json" in dirs[mine].not_loaded
    assert dirs[theirs].not_loaded == ""


# --- repo-scope memory of every repo the transcripts know ---------------------------------------


def test_repos_known_from_transcripts_have_their_dirs_discovered(
    env: Env, git_repo: Path, tmp_path: Path
) -> None:
    """Without paths.repos: the `.claude/memory/` and `.claude/agent-memory*/` dirs of every
    repo a session ran in (a subfolder's repo, a worktree and its main work tree), once each
    by real path; a cwd that is gone is skipped."""
    write_memory(git_repo / ".claude" / "memory", "r.md")
    write_memory(git_repo / ".claude" / "agent-memory" / "planner", "p.md")
    tree = tmp_path / "code" / "repo-feature"
    git(git_repo, "worktree", "add", "-q", str(tree), "-b", "feature")
    write_memory(tree / ".claude" / "agent-memory-local" / "mine", "m.md")
    transcript(env.claude, tree)
    transcript(env.claude, git_repo / "pkg" / "sub")
    transcript(env.claude, tmp_path / "gone")
    link = tmp_path / "code" / "repo-link"
    link.symlink_to(git_repo)
    transcript(env.claude, link)  # the same repo by another path: listed once
    dirs = discover(config_with(env))
    kinds = sorted((md.kind, md.label) for md in dirs)
    assert kinds == [("repo", "repo"), ("repo-agent", "planner"), ("repo-agent-local", "mine")]
    assert len({md.real_path for md in dirs}) == len(dirs)


def test_a_known_repos_link_out_of_it_is_refused(env: Env, git_repo: Path, tmp_path: Path) -> None:
    """A transcript-known repo's agent-memory link to a vault elsewhere is refused, as for a
    repo in paths.repos."""
    vault = tmp_path / "vault"
    write_memory(vault, "note.md")
    (git_repo / ".claude" / "agent-memory").mkdir(parents=True)
    (git_repo / ".claude" / "agent-memory" / "notes").symlink_to(vault)
    transcript(env.claude, git_repo)
    found = discover_all(config_with(env))
    assert found.dirs == [] and [r.target for r in found.refused] == [vault]


def test_a_session_in_the_home_folder_is_no_repo(env: Env) -> None:
    """A session run in the home folder: its `.claude/` is the Claude home, whose agent
    memory stays user-scope agent memory."""
    write_memory(env.claude / "agent-memory" / "reviewer", "a.md")
    transcript(env.claude, env.home)
    [md] = discover(config_with(env))
    assert (md.kind, md.label) == ("agent", "reviewer")


def test_a_subfolder_slug_memory_dir_is_not_loaded(env: Env, git_repo: Path) -> None:
    """A memory dir under a subfolder's own slug (written before the repo was a git repo, say)
    is not what a session there loads: `not_loaded` names the git root's dir instead."""
    sub = git_repo / "pkg" / "sub"
    transcript(env.claude, sub)
    stale = env.claude / "projects" / slugify(str(sub)) / "memory"
    write_memory(stale, "a.md")
    [md] = discover(config_with(env))
    assert md.real_path == stale
    assert f"the dir of its git root {git_repo.resolve()}" in md.not_loaded


def test_a_relative_cwd_is_no_repo_root(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transcript naming a relative cwd (no client writes one) gives no root, whatever
    folder of that name memoryd happens to run in."""
    (tmp_path / "code").mkdir()
    monkeypatch.chdir(tmp_path)
    project = env.claude / "projects" / "code"
    write_memory(project / "memory", "a.md")
    (project / "s.jsonl").write_text(json.dumps({"cwd": "code"}) + "\n")
    assert project_repo_root(project, "code")[0] is None
