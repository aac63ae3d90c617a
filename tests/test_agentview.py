"""The agent's view of MEMORY.md: exactly the text Claude Code loads, and which lines it sees.

The expected texts are what Claude Code 2.1.332 sent for each input (recorded with
tests/claude_client.py; tests/test_claude_view.py re-checks this very table against the binary
when one is configured).
"""

import time

import pytest

from memoryd.model.agentview import (
    MAX_LOAD_BYTES,
    Hidden,
    ViewKind,
    agent_view,
    view_of_bytes,
)
from tests.helpers import OBSERVED

AUTO, PLAIN = ViewKind.AUTO, ViewKind.PLAIN


@pytest.mark.parametrize(
    ("text", "loaded"), [c[1:] for c in OBSERVED], ids=[c[0] for c in OBSERVED]
)
def test_loaded_text_is_what_the_binary_loaded(text: str, loaded: str) -> None:
    """Comment blocks, lists, fences, paragraphs and frontmatter are lexed as the binary does."""
    assert agent_view(text, AUTO).loaded == loaded


def lines(n: int, width: int = 0) -> str:
    return "\n".join(f"line {i}".ljust(width, "x") for i in range(1, n + 1))


def pointers(n: int, sep: str = "\n") -> str:
    return sep.join(f"- [M{i}](m{i}.md) — {i}" for i in range(n))


def test_comment_hidden_pointer() -> None:
    """A pointer inside a multi-line comment block is hidden and says so; around it, seen."""
    view = agent_view("- [A](a.md) — one\n<!--\n- [H](h.md) — two\n-->\n- [B](b.md) — 3\n", AUTO)
    assert [view.hidden(i) for i in range(5)] == [
        None,
        Hidden.COMMENT,
        Hidden.COMMENT,
        Hidden.COMMENT,
        None,
    ]
    assert view.loaded == "- [A](a.md) — one\n- [B](b.md) — 3"
    assert Hidden.COMMENT.by_construct


def test_inline_and_unclosed_comments_hide_nothing() -> None:
    """A comment inside a line, and an unclosed `<!--`, leave every line in the view."""
    for text in (
        "- [A](a.md) — one <!-- note -->\n- [B](b.md) — two\n",
        "- [A](a.md) — one\n<!-- open\n- [B](b.md) — two\n",
    ):
        view = agent_view(text, AUTO)
        assert view.loaded == text.strip()
        assert view.visible == {0, 1} | ({2} if "open" in text else set())


def test_frontmatter_hidden_pointers() -> None:
    """A leading `---` block eats the pointers up to the next `---`, even a horizontal rule."""
    text = "---\n\n# Memory\n- [A](a.md) — one\n\n---\n\n- [B](b.md) — two\n"
    view = agent_view(text, AUTO)
    assert view.loaded == "- [B](b.md) — two"
    assert [view.hidden(i) for i in range(8)] == [Hidden.FRONTMATTER] * 7 + [None]


def test_frontmatter_ending_mid_line_hides_that_line() -> None:
    """A `---` inside a line ends the frontmatter: the rest of that line is loaded, and a
    pointer starting on it is not."""
    view = agent_view("---\nx: a---b\n- [A](a.md)\n", AUTO)
    assert view.loaded == "b\n- [A](a.md)"
    assert view.hidden(1) is Hidden.FRONTMATTER and view.hidden(2) is None


def test_agent_memory_dirs_keep_frontmatter_and_comments() -> None:
    """An agent-memory dir's MEMORY.md is windowed only."""
    text = "---\n- [A](a.md)\n---\n<!--\n- [B](b.md)\n-->\n"
    view = agent_view(text, PLAIN)
    assert view.loaded == text.strip()
    assert view.visible == set(range(6)) and not view.construct


def test_lone_cr_with_a_comment_has_a_line_per_cr() -> None:
    """With a comment removed, every lone CR ends a window line: 300 entries, 200 loaded."""
    view = agent_view(pointers(300, "\r") + "\r<!-- c -->\r", AUTO)
    assert view.folded and view.lines == 300 and view.warned
    assert view.loaded.split("\n") == [f"- [M{i}](m{i}.md) — {i}" for i in range(200)]


def test_lone_crs_end_lines_for_the_window_without_a_comment_too() -> None:
    """No comment: each lone CR still ends a line for the window, in either kind of dir, as
    Claude Code 2.1.328 counted them (51 of 250 such pointers past its line 200). 2.1.332
    sends all 300 (tests/test_claude_view.py): what memoryd counts as loaded is loaded by
    both."""
    lines = [f"- [M{i}](m{i}.md) — {i}" for i in range(300)]
    for kind in (AUTO, PLAIN):
        view = agent_view(pointers(300, "\r") + "\r", kind)
        assert view.folded and view.lines == 300 and view.warned
        assert view.loaded.split("\n") == lines[:200]
        assert view.visible == {0}  # the source line starts in the window, its tail not


def test_lone_cr_without_a_comment_over_the_units_is_cut_at_a_lone_cr() -> None:
    """Over 25,000 units, the cut is at the last lone CR within them: a prefix of what
    2.1.332 loads (it cuts mid-line at unit 25,000)."""
    text = "\r".join("e" * 198 for _ in range(150))
    view = agent_view(text, AUTO)
    assert text[:25000].replace("\r", "\n").startswith(view.loaded)
    assert view.loaded == "\n".join(["e" * 198] * 125) and view.warned
    assert view.hidden(0) is None


def test_crlf_and_bom() -> None:
    """CRLF loads as LF; a BOM, leading blank lines and spaces are trimmed."""
    assert agent_view("a\r\nb\r\n", AUTO).loaded == "a\nb"
    view = view_of_bytes("\ufeff\n\n  - [A](a.md) — one\n\n\n".encode(), AUTO)
    assert view.loaded == "- [A](a.md) — one" and view.visible == {2}
    assert view_of_bytes("\ufeff---\nx: 1\n---\nbody".encode(), AUTO).loaded == "body"
    assert view_of_bytes("\ufeffa\n".encode(), AUTO).bytes == 5


@pytest.mark.parametrize("n", [199, 200])
def test_up_to_200_lines_load_whole(n: int) -> None:
    """199 and 200 lines: all seen, no warning."""
    view = agent_view(lines(n) + "\n", AUTO)
    assert view.loaded == lines(n) and not view.warned and view.fits()
    assert view.visible == set(range(n))


def test_201_lines_keep_200() -> None:
    """Line 201 is past line 200; the warning is appended."""
    view = agent_view(lines(201) + "\n", AUTO)
    assert view.loaded == lines(200) and view.warned and not view.fits()
    assert view.hidden(199) is None and view.hidden(200) is Hidden.PAST_LINES


def test_exactly_25000_units_load_whole() -> None:
    """25,000 UTF-16 units fit; one more cuts at the last newline."""
    text = lines(99, 249) + "\n" + "z" * (25000 - 99 * 250)
    view = agent_view(text, AUTO)
    assert view.units == 25000 and view.loaded == text and view.fits()
    view = agent_view(text + "z", AUTO)
    assert view.loaded == lines(99, 249) and view.hidden(99) is Hidden.PAST_CHARS
    assert view.hidden(98) is None


def test_newline_at_unit_25000_keeps_25000_units() -> None:
    """A `\\n` at index 25,000 is the cut."""
    view = agent_view("a" * 25000 + "\nsecond", AUTO)
    assert view.loaded == "a" * 25000 and view.visible == {0}


def test_emoji_straddling_the_cut() -> None:
    """An astral character across unit 25,000 is cut, and its lone half dropped."""
    view = agent_view("c" * 24999 + "\U0001f600" + "d" * 100, AUTO)
    assert view.loaded == "c" * 24999 and view.units == 25101
    two = agent_view("\U0001f600" * 12499 + "\n" + "x" * 10, AUTO)  # 24,998 units, then 11
    assert two.loaded == "\U0001f600" * 12499 and two.hidden(1) is Hidden.PAST_CHARS


def test_lines_and_units_together() -> None:
    """201 wide lines: 125 fit the units; the rest past the characters, then past line 200."""
    view = agent_view(lines(201, 199), AUTO)
    assert view.loaded == lines(125, 199)
    assert view.hidden(125) is Hidden.PAST_CHARS and view.hidden(200) is Hidden.PAST_LINES


@pytest.mark.parametrize(("extra", "seen"), [(0, True), (1, False)])
def test_over_4_mib_loads_nothing(extra: int, seen: bool) -> None:
    """4 MiB loads (cut by the window); a byte more loads nothing at all."""
    data = b"- [A](a.md) - one\n" + b"x" * (MAX_LOAD_BYTES - 18 + extra)
    view = view_of_bytes(data, AUTO)
    assert bool(view.loaded) is seen and view.too_big is not seen
    assert view.hidden(0) is (None if seen else Hidden.TOO_BIG)


def test_linear_at_the_index_read_limit() -> None:
    """Adversarial 8 MiB texts (comment blocks, lists, fences, frontmatter, lone CRs) take
    seconds, not the hours a quadratic lexer would (a generous budget, not a timing claim)."""
    mib8 = 8 * 1024 * 1024
    texts = [
        "<!--\n-->\n" * (mib8 // 9),
        "- a\n  <!--\n" * (mib8 // 12),
        "```\n<!--\n" * (mib8 // 9),
        "---\n" + "x\n" * (mib8 // 2),
        "<!-- x -->" + "\r- [a](a.md)" * (mib8 // 12),
        "<!--\n" * (mib8 // 5),
        "<div>\n<!-- -->\n\n" * (mib8 // 16),
    ]
    start = time.monotonic()
    for text in texts:
        agent_view(text, AUTO, size=0)
    assert time.monotonic() - start < 60
