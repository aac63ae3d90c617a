"""What the real Claude Code binary loads from an auto-memory dir (issue 13's claims, checked).

Opt-in: every test skips unless `$MEMORYD_CLAUDE_BIN` names a Claude Code binary (see
tests/claude_client.py for the install). These assert on the binary's behaviour, not on
memoryd's: they are the ground truth memoryd's model of the agent's view is held to.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.claude_client import BIN_ENV, Captured, MemoryBlock, Reply, claude_bin, run_claude
from tests.helpers import git

pytestmark = pytest.mark.timeout(300)

WARN = "\n\n> WARNING: MEMORY.md is "  # a blank line, then a quote line
TAIL = " Keep index entries to one line under ~200 chars; move detail into topic files."
MIB4 = 4 * 1024 * 1024


# One skip line for the whole module (not one per check) when no binary is configured.
if not os.environ.get(BIN_ENV):
    pytest.skip(
        f"set {BIN_ENV} to a Claude Code binary to run the real-client checks",
        allow_module_level=True,
    )


@pytest.fixture(autouse=True)
def _binary() -> None:
    claude_bin()


def slug(path: str | Path) -> str:
    """Issue 13's slug rule for paths up to 200 characters: each UTF-16 unit outside
    [A-Za-z0-9] becomes `-`."""
    units = str(path).encode("utf-16-le", "surrogatepass")
    out = []
    for i in range(0, len(units), 2):
        unit = int.from_bytes(units[i : i + 2], "little")
        ch = chr(unit)
        out.append(ch if ch.isascii() and ch.isalnum() else "-")
    return "".join(out)


def long_slug(path: str | Path) -> str:
    """Issue 13's full rule: over 200 characters, the first 200, `-`, and the base-36 of the
    absolute 32-bit string hash `h = (h << 5) - h + unit` over the path's UTF-16 units.

    Not NFC-normalised, unlike the issue says: on Linux the binary slugs the path as it is (an
    NFD `e\u0301` gives `e-`, see test_slug_of_unusual_paths[nfd])."""
    text = str(path)
    short = slug(text)
    if len(short) <= 200:
        return short
    raw = text.encode("utf-16-le", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = ((h << 5) - h + int.from_bytes(raw[i : i + 2], "little")) & 0xFFFFFFFF
    h = abs(h - (1 << 32) if h >= 1 << 31 else h)
    digits = ""
    while True:
        h, r = divmod(h, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if h == 0:
            break
    return f"{short[:200]}-{digits}"


def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def memory_dir(home: Path, project: Path) -> Path:
    return home / ".claude" / "projects" / slug(project) / "memory"


def load(home: Path, cwd: Path, content: str | bytes, **kw: Any) -> Captured:
    """Write `content` as the auto-memory MEMORY.md of `cwd` and run the binary once."""
    folder = memory_dir(home, cwd)
    folder.mkdir(parents=True, exist_ok=True)
    data = content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")
    (folder / "MEMORY.md").write_bytes(data)
    return run_claude(home, cwd, **kw)


def one_block(cap: Captured) -> MemoryBlock:
    assert cap.returncode == 0, cap.stderr
    blocks = [b for b in cap.memory if "auto-memory" in b.label]
    assert len(blocks) == 1, cap.memory
    return blocks[0]


def loaded(home: Path, cwd: Path, content: str | bytes) -> str:
    return one_block(load(home, cwd, content)).text


# --- where the block sits, its header --------------------------------------------------------


def test_block_header_and_place(home: Path, cwd: Path) -> None:
    cap = load(home, cwd, "- [Foo](foo.md) — the foo fact\n")
    block = one_block(cap)
    path = memory_dir(home, cwd) / "MEMORY.md"
    assert block.path == str(path)
    assert block.label == " (user's auto-memory, persists across conversations)"
    assert block.text == "- [Foo](foo.md) — the foo fact"
    # The first user message's first text block: a system-reminder holding the CLAUDE.md-style
    # "Contents of" blocks, MEMORY.md last.
    assert block.where == "messages[0].content[0]"
    first = cap.agent_requests[0]["messages"][0]["content"][0]["text"]
    assert first.startswith("<system-reminder>\nCodebase and user instructions are shown below.")
    assert first.endswith(
        f"\n\nContents of {path} (user's auto-memory, persists across conversations):\n\n"
        "- [Foo](foo.md) — the foo fact\n</system-reminder>"
    )
    # The system prompt names the dir (with its trailing slash) in its "# Memory" section.
    system = "\n".join(s["text"] for s in cap.agent_requests[0]["system"])
    assert f"You have a persistent file-based memory at `{path.parent}/`." in system
    # The transcript records what was loaded: an `instructions` attachment, type AutoMem.
    (rows,) = cap.transcripts.values()
    files = [
        f
        for r in rows
        if r.get("type") == "attachment" and r["attachment"].get("type") == "instructions"
        for f in r["attachment"]["files"]
    ]
    assert files == [{"path": str(path), "type": "AutoMem", "content": block.text}]


def test_no_index_no_block(home: Path, cwd: Path) -> None:
    cap = run_claude(home, cwd)
    assert cap.returncode == 0, cap.stderr
    assert cap.memory == []
    # ...but the binary creates the memory dir itself.
    assert memory_dir(home, cwd).is_dir()


# --- slug, memory dir, transcripts -----------------------------------------------------------


def transcript_cwds(cap: Captured) -> dict[str, set[str]]:
    return {
        key.split("/")[0]: {line["cwd"] for line in lines if "cwd" in line}
        for key, lines in cap.transcripts.items()
    }


def test_plain_cwd_slug(home: Path, cwd: Path) -> None:
    cap = load(home, cwd, "plain")
    assert one_block(cap).path == str(memory_dir(home, cwd) / "MEMORY.md")
    assert cap.projects == [slug(cwd)]
    assert transcript_cwds(cap) == {slug(cwd): {str(cwd)}}


@pytest.mark.parametrize(
    "name",
    ["emoji-\U0001f600", "flag-\U0001f1fa\U0001f1f8", "nfd-e\u0301", "x" * 150, "y" * 200],
    ids=["emoji", "flag", "nfd", "long-under-200", "long-over-200"],
)
def test_slug_of_unusual_paths(home: Path, tmp_path: Path, name: str) -> None:
    cwd = tmp_path / name
    cwd.mkdir()
    cap = run_claude(home, cwd)
    assert cap.returncode == 0, cap.stderr
    assert cap.projects == [long_slug(cwd)]
    assert (home / ".claude" / "projects" / long_slug(cwd) / "memory").is_dir()


def test_git_subfolder_uses_the_repo_roots_memory(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sub = repo / "pkg" / "sub"
    sub.mkdir(parents=True)
    git(repo, "init", "-q")
    folder = memory_dir(home, repo)
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("root memory")
    cap = run_claude(home, sub)
    block = one_block(cap)
    assert block.path == str(folder / "MEMORY.md")
    assert block.text == "root memory"
    # The transcript stays under the subfolder's own slug, with the subfolder as cwd.
    assert transcript_cwds(cap) == {slug(sub): {str(sub)}}
    assert sorted(cap.projects) == sorted({slug(repo), slug(sub)})


def test_worktree_uses_the_main_repos_memory(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "init")
    wt = tmp_path / "wt-feature"
    git(repo, "worktree", "add", "-q", str(wt), "-b", "feature")
    folder = memory_dir(home, repo)
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("main repo memory")
    cap = run_claude(home, wt)
    block = one_block(cap)
    assert block.path == str(folder / "MEMORY.md")
    assert transcript_cwds(cap) == {slug(wt): {str(wt)}}
    assert not memory_dir(home, wt).exists()


# --- the load window -------------------------------------------------------------------------


def lines(n: int, width: int = 0) -> str:
    return "\n".join(f"line {i}".ljust(width, "x") for i in range(1, n + 1))


@pytest.mark.parametrize("n", [199, 200])
def test_up_to_200_lines_load_whole(home: Path, cwd: Path, n: int) -> None:
    assert loaded(home, cwd, lines(n) + "\n") == lines(n)


def test_201_lines_keep_200_and_warn(home: Path, cwd: Path) -> None:
    assert loaded(home, cwd, lines(201) + "\n") == lines(200) + WARN + (
        "201 lines (limit: 200). Only part of it was loaded: "
        '1 of 201 lines were cut off, starting at line 201 ("line 201").' + TAIL
    )


def test_exactly_25000_units_load_whole(home: Path, cwd: Path) -> None:
    text = lines(99, 249) + "\n" + "z" * (25000 - 99 * 250)
    assert units(text) == 25000
    assert loaded(home, cwd, text) == text


def test_25001_units_cut_at_the_last_newline(home: Path, cwd: Path) -> None:
    text = lines(99, 249) + "\n" + "z" * (25001 - 99 * 250)
    assert units(text) == 25001
    assert loaded(home, cwd, text) == lines(99, 249) + WARN + (
        "24.4KB (limit: 24.4KB) — index entries are too long. "
        f"Only part of it was loaded: 1 of 100 lines were cut off, starting at line 100 "
        f'("{"z" * 79}…").' + TAIL  # the next line: its first 79 units and an ellipsis
    )


def test_newline_at_unit_25000_is_the_cut(home: Path, cwd: Path) -> None:
    # The `\n` sits at index 25000 (the 25,001st unit): "at or before unit 25,000" keeps it.
    text = "a" * 25000 + "\nsecond"
    got = loaded(home, cwd, text)
    assert got.startswith("a" * 25000 + WARN)
    assert '1 of 2 lines were cut off, starting at line 2 ("second")' in got


def test_one_long_line_is_cut_mid_line(home: Path, cwd: Path) -> None:
    text = "b" * 30000 + "\nsecond"
    assert loaded(home, cwd, text) == "b" * 25000 + WARN + (
        "29.3KB (limit: 24.4KB) — index entries are too long. "
        "Only part of it was loaded: everything after the first 25000 characters of line 1 "
        "was cut off." + TAIL
    )


def test_emoji_straddling_the_cut(home: Path, cwd: Path) -> None:
    # Units 24999-25000 are one astral character: the cut at 25,000 splits its surrogate pair.
    text = "c" * 24999 + "\U0001f600" + "d" * 100
    got = loaded(home, cwd, text)
    head, _, warning = got.partition(WARN)
    assert head == "c" * 24999  # the lone high surrogate is dropped, not sent
    assert warning.startswith("24.5KB (limit: 24.4KB)")
    assert "everything after the first 25000 characters of line 1 was cut off" in warning


def test_201_lines_over_25000_units(home: Path, cwd: Path) -> None:
    text = lines(201, 199)
    got = loaded(home, cwd, text)
    assert got == lines(125, 199) + WARN + (
        "201 lines and 39.3KB. Only part of it was loaded: "
        f'76 of 201 lines were cut off, starting at line 126 ("{"line 126".ljust(79, "x")}…").'
        + TAIL
    )


# --- what is stripped before the window ------------------------------------------------------


def test_leading_frontmatter_is_stripped(home: Path, cwd: Path) -> None:
    text = "---\n- [Hidden](hidden.md) — in the frontmatter\n---\n- [Seen](seen.md) — after\n"
    assert loaded(home, cwd, text) == "- [Seen](seen.md) — after"


def test_leading_rule_is_taken_for_frontmatter(home: Path, cwd: Path) -> None:
    text = "---\n\n# Memory\n- [A](a.md) — one\n\n---\n\n- [B](b.md) — two\n"
    assert loaded(home, cwd, text) == "- [B](b.md) — two"


def test_unclosed_leading_rule_keeps_everything(home: Path, cwd: Path) -> None:
    text = "---\n- [A](a.md) — one\n"
    assert loaded(home, cwd, text) == text.strip()


def test_frontmatter_after_blank_line_is_kept(home: Path, cwd: Path) -> None:
    text = "\n---\nx: 1\n---\n- [A](a.md) — one\n"
    assert loaded(home, cwd, text) == text.strip()


def test_multiline_html_comment_is_removed(home: Path, cwd: Path) -> None:
    text = "- [A](a.md) — one\n<!--\n- [Hidden](h.md) — two\n-->\n- [B](b.md) — three\n"
    got = loaded(home, cwd, text)
    assert "Hidden" not in got
    assert got == "- [A](a.md) — one\n- [B](b.md) — three"


def test_inline_html_comment_is_kept(home: Path, cwd: Path) -> None:
    text = "- [A](a.md) — one <!-- note -->\n- [B](b.md) — two\n"
    assert loaded(home, cwd, text) == text.strip()


def test_unclosed_html_comment_is_kept(home: Path, cwd: Path) -> None:
    text = "- [A](a.md) — one\n<!-- open\n- [B](b.md) — two\n"
    assert loaded(home, cwd, text) == text.strip()


def test_lone_cr_with_a_comment_counts_every_line(home: Path, cwd: Path) -> None:
    # With a comment to remove, the lexer runs first and turns each lone CR into a newline, so
    # the window counts 300 lines (the comment's own line is gone).
    text = "\r".join(f"- [M{i}](m{i}.md) — {i}" for i in range(300)) + "\r<!-- c -->\r"
    got = loaded(home, cwd, text)
    head, _, warning = got.partition(WARN)
    assert head.split("\n") == [f"- [M{i}](m{i}.md) — {i}" for i in range(200)]
    assert warning.startswith(
        "300 lines (limit: 200). Only part of it was loaded: 100 of 300 "
        'lines were cut off, starting at line 201 ("- [M200](m200.md) — 200")'
    )


def test_lone_cr_without_a_comment_is_one_line_to_the_window(home: Path, cwd: Path) -> None:
    # No comment: the text reaches the window with its lone CRs, one "line"; it is loaded whole
    # and the CRs become newlines only afterwards.
    text = "\r".join(f"- [M{i}](m{i}.md) — {i}" for i in range(300)) + "\r"
    assert loaded(home, cwd, text).split("\n") == [f"- [M{i}](m{i}.md) — {i}" for i in range(300)]


def test_lone_cr_without_a_comment_over_25000_units(home: Path, cwd: Path) -> None:
    text = "\r".join("e" * 98 for _ in range(300))  # the cut falls mid-"line"
    got = loaded(home, cwd, text)
    head, _, warning = got.partition(WARN)
    assert head == text[:25000].replace("\r", "\n")
    assert "everything after the first 25000 characters of line 1 was cut off" in warning


def test_crlf(home: Path, cwd: Path) -> None:
    assert loaded(home, cwd, "a\r\nb\r\n") == "a\nb"


def test_bom_and_blank_lines_are_trimmed(home: Path, cwd: Path) -> None:
    assert loaded(home, cwd, "\ufeff\n\n  - [A](a.md) — one\n\n\n") == "- [A](a.md) — one"


def test_bom_then_frontmatter(home: Path, cwd: Path) -> None:
    assert loaded(home, cwd, "\ufeff---\nx: 1\n---\nbody") == "body"


@pytest.mark.parametrize(
    ("body", "seen"),
    [
        ("x" * (MIB4 - 20), True),
        ("x" * (MIB4 - 19), False),
        ("é" * ((MIB4 - 20) // 2) + "y", False),
    ],
    ids=["4MiB", "4MiB+1", "4MiB+1-in-2-byte-chars"],
)
def test_over_4_mib_is_not_loaded(home: Path, cwd: Path, body: str, seen: bool) -> None:
    data = ("- [A](a.md) — one\n" + body).encode()  # the head is 20 bytes
    assert len(data) - MIB4 == (0 if seen else 1)
    cap = load(home, cwd, data)
    assert cap.returncode == 0, cap.stderr
    blocks = [b for b in cap.memory if "auto-memory" in b.label]
    assert bool(blocks) is seen
    if seen:
        assert blocks[0].text.startswith(
            "- [A](a.md) — one" + WARN + "4MB (limit: 24.4KB) — index entries are too long."
        )


# --- relocation and switches -----------------------------------------------------------------


def test_claude_config_dir(home: Path, cwd: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    folder = cfg / "projects" / slug(cwd) / "memory"
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("from config dir")
    memory_dir(home, cwd).mkdir(parents=True)
    (memory_dir(home, cwd) / "MEMORY.md").write_text("from home")
    cap = run_claude(home, cwd, {"CLAUDE_CONFIG_DIR": str(cfg)})
    block = one_block(cap)
    assert (block.path, block.text) == (str(folder / "MEMORY.md"), "from config dir")
    assert cap.projects == [slug(cwd)]  # transcripts under the config dir too
    assert not (home / ".claude" / "projects" / slug(cwd) / "x").exists()


def test_remote_memory_dir(home: Path, cwd: Path, tmp_path: Path) -> None:
    base = tmp_path / "remote"
    folder = base / "projects" / slug(cwd) / "memory"
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("from remote base")
    cap = run_claude(home, cwd, {"CLAUDE_CODE_REMOTE_MEMORY_DIR": str(base)})
    block = one_block(cap)
    assert (block.path, block.text) == (str(folder / "MEMORY.md"), "from remote base")


def test_cowork_override(home: Path, cwd: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cowork"
    folder.mkdir()
    (folder / "MEMORY.md").write_text("from override")
    cap = run_claude(home, cwd, {"CLAUDE_COWORK_MEMORY_PATH_OVERRIDE": str(folder)})
    block = one_block(cap)
    assert (block.path, block.text) == (str(folder / "MEMORY.md"), "from override")


def _settings(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("where", ["user", "project", "local"])
def test_auto_memory_directory_setting(home: Path, cwd: Path, where: str) -> None:
    target = home / "elsewhere" / where
    target.mkdir(parents=True)
    (target / "MEMORY.md").write_text(f"relocated by {where} settings")
    settings = {
        "user": home / ".claude" / "settings.json",
        "project": cwd / ".claude" / "settings.json",
        "local": cwd / ".claude" / "settings.local.json",
    }[where]
    _settings(settings, {"autoMemoryDirectory": f"~/elsewhere/{where}"})
    block = one_block(run_claude(home, cwd))
    assert (block.path, block.text) == (str(target / "MEMORY.md"), f"relocated by {where} settings")


def test_disable_auto_memory_env(home: Path, cwd: Path) -> None:
    cap = load(home, cwd, "should not load", env_extra={"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"})
    assert cap.returncode == 0, cap.stderr
    assert cap.memory == []
    system = "\n".join(s["text"] for s in cap.agent_requests[0]["system"])
    assert "# Memory\n" not in system


def test_auto_memory_enabled_false(home: Path, cwd: Path) -> None:
    _settings(home / ".claude" / "settings.json", {"autoMemoryEnabled": False})
    cap = load(home, cwd, "should not load")
    assert cap.returncode == 0, cap.stderr
    assert cap.memory == []


# --- transcripts of a Read of a memory file --------------------------------------------------


def test_transcript_of_a_read_tool_call(home: Path, cwd: Path) -> None:
    folder = memory_dir(home, cwd)
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("- [Foo](foo.md) — the foo fact\n")
    target = folder / "foo.md"
    target.write_text("---\nname: foo\ndescription: the foo fact\ntype: project\n---\n\nFoo.\n")
    cap = run_claude(
        home,
        cwd,
        replies=[Reply(tool="Read", tool_input={"file_path": str(target)}), Reply(text="done")],
        args=("-p", "hi", "--max-turns", "2"),
    )
    assert cap.returncode == 0, cap.stderr
    assert len(cap.agent_requests) == 2
    (key,) = [k for k in cap.transcripts if k.startswith(slug(cwd) + "/")]
    rows = cap.transcripts[key]
    uses = [
        c
        for r in rows
        if r.get("type") == "assistant"
        for c in r["message"]["content"]
        if c.get("type") == "tool_use"
    ]
    assert [(u["name"], u["input"]) for u in uses] == [("Read", {"file_path": str(target)})]
    results = [
        (r, c)
        for r in rows
        if r.get("type") == "user" and isinstance(r["message"]["content"], list)
        for c in r["message"]["content"]
        if c.get("type") == "tool_result"
    ]
    assert len(results) == 1
    row, result = results[0]
    assert result["tool_use_id"] == uses[0]["id"]
    assert "Foo." in json.dumps(result["content"])
    assert row["cwd"] == str(cwd)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row["timestamp"])
    assert isinstance(row.get("sessionId"), str)
