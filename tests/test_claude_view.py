"""memoryd's model of the agent's view, held to the real Claude Code binary (issue 13).

Opt-in, like tests/test_claude_real.py: every test skips unless `$MEMORYD_CLAUDE_BIN` names a
Claude Code binary. Each builds an auto-memory dir with a tricky MEMORY.md, runs `memoryd index`
on it, then runs the binary there and reads the `Contents of …MEMORY.md` block it sent:
every memory memoryd counts as visible must be in that block, every other one in
MEMORY-ARCHIVE.md, whose trailer line must be in the block; and the text memoryd predicts the
agent loads is the text it loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.model.agentview import ViewKind, agent_view
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, TRAILER, local_links, split_lines
from tests.claude_client import BIN_ENV, claude_bin, run_claude
from tests.conftest import Env, write_memory
from tests.helpers import OBSERVED

pytestmark = pytest.mark.timeout(300)

if not os.environ.get(BIN_ENV):
    pytest.skip(
        f"set {BIN_ENV} to a Claude Code binary to run the real-client checks",
        allow_module_level=True,
    )


def slug(path: Path) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in str(path))


def comments(folder: Path) -> None:
    """Pointers inside comment blocks (one the last pointer of the file), and a new file."""
    for name in ("a.md", "b.md", "c.md", "d.md"):
        write_memory(folder, name, description=f"about {name[0]}")
    (folder / INDEX_NAME).write_text(
        "# proj Memory\n\n- [a](a.md) — about a\n<!-- the next ones are retired\n"
        "- [b](b.md) — about b\n-->\n\nSome prose.\n\n<!--\n- [c](c.md) — about c\n-->\n"
    )


def frontmatter_first(folder: Path) -> None:
    """An index that starts with a `---` line: the agent drops everything to the next one."""
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name, description=f"about {name[0]}")
    (folder / INDEX_NAME).write_text("---\n- [a](a.md) — about a\n\n---\n\n- [b](b.md) — about b\n")


def many(folder: Path) -> None:
    """230 entries and a 30-line comment: demotion, measured on what the agent loads."""
    names = [f"m{i:03}.md" for i in range(230)]
    for i, name in enumerate(names):
        write_memory(folder, name, description=f"memory number {i} " + "w" * 40, age_days=400 - i)
    note = "<!--\n" + "".join(f"a note kept for later, {i}\n" for i in range(28)) + "-->\n"
    (folder / INDEX_NAME).write_text(
        "# proj Memory\n\n"
        + note
        + "".join(f"- [m{i:03}]({n}) — memory number {i} {'w' * 40}\n" for i, n in enumerate(names))
    )


def lone_cr(folder: Path) -> None:
    """A MEMORY.md written with lone CRs and a comment: the agent's lexer makes each CR a
    line; memoryd reads one line, so it adds the other pointers itself."""
    names = [f"n{i:02}.md" for i in range(40)]
    for name in names:
        write_memory(folder, name, description=f"note {name[1:3]}")
    (folder / INDEX_NAME).write_bytes(
        ("\r".join(f"- [{n[:-3]}]({n}) — note {n[1:3]}" for n in names) + "\r<!-- c -->\r").encode()
    )


def past_the_lines(folder: Path) -> None:
    """250 one-line entries and no comment: past line 200 they are demoted."""
    for i in range(250):
        write_memory(folder, f"e{i:03}.md", description=f"entry {i}", age_days=300 - i)


CASES: dict[str, Callable[[Path], None]] = {
    "comments": comments,
    "frontmatter-first": frontmatter_first,
    "201+-entries": many,
    "lone-cr": lone_cr,
    "past-line-200": past_the_lines,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_memoryd_counts_visible_is_what_claude_loads(
    env: Env, cli, tmp_path: Path, case: str
) -> None:
    """memoryd's visible memories are in the loaded block; the rest are in the archive, whose
    trailer is loaded; memoryd's predicted text is the loaded text."""
    claude_bin()
    cwd = tmp_path / "proj"
    cwd.mkdir()
    folder = env.claude / "projects" / slug(cwd) / "memory"
    CASES[case](folder)
    result = cli("index", folder)
    assert result.code == 0, result.out + result.err
    main = (folder / INDEX_NAME).read_text()
    archive_path = folder / ARCHIVE_NAME
    archive = archive_path.read_text() if archive_path.exists() else None
    memories = sorted(p.name for p in folder.glob("*.md") if not p.name.startswith("MEMORY"))

    view = agent_view(main, ViewKind.AUTO)
    visible = {
        line.link.target
        for number, line in enumerate(split_lines(main))
        if line.link is not None and view.hidden(number) is None
    }
    archived = {link.target for link in local_links(archive)} if archive else set()

    cap = run_claude(env.home, cwd)
    assert cap.returncode == 0, cap.stderr
    blocks = [b for b in cap.memory if "auto-memory" in b.label]
    assert len(blocks) == 1, cap.memory
    loaded = blocks[0].text
    kept, _, warning = loaded.partition("\n\n> WARNING: MEMORY.md is ")
    assert kept == view.loaded
    assert bool(warning) == view.warned
    for name in memories:
        if name in visible:
            assert f"]({name})" in kept, name
        else:
            assert name in archived, name
    if set(memories) - visible:
        trailer = next(ln for ln in main.splitlines() if TRAILER.match(ln))
        assert trailer in kept
    assert not view.warned  # memoryd brought every case within the window
    if case == "201+-entries":
        # Not loose: the comment's 30 lines cost no entry; the window is full to line 200.
        assert view.lines == 200


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in OBSERVED], ids=[c[0] for c in OBSERVED]
)
def test_the_recorded_table_still_holds(env: Env, tmp_path: Path, text: str, expected: str) -> None:
    """The binary loads what tests/test_agentview.py recorded it loading, and agentview
    predicts it (a newer binary that lexes differently fails here first)."""
    claude_bin()
    cwd = tmp_path / "proj"
    cwd.mkdir()
    folder = env.claude / "projects" / slug(cwd) / "memory"
    folder.mkdir(parents=True)
    (folder / INDEX_NAME).write_text(text)
    cap = run_claude(env.home, cwd)
    assert cap.returncode == 0, cap.stderr
    blocks = [b for b in cap.memory if "auto-memory" in b.label]
    assert [b.text for b in blocks] == [expected]
    assert agent_view(text, ViewKind.AUTO).loaded == expected
