"""The index as the agent sees it: hidden pointers index nothing, new ones land in view, and
the budget is measured on what Claude Code loads (issue 13)."""

import json
from datetime import date
from pathlib import Path

from memoryd.model.agentview import Hidden, ViewKind, agent_view
from memoryd.model.index import Budget, Entry, verify
from memoryd.model.index_edit import IndexEdit, IndexInput, update_index
from tests.conftest import Env, write_memory

NOW = 1_800_000_000.0
OLD = NOW - 60 * 86400


def entry(filename: str, desc: str = "d", type_: str = "project", age: float = OLD) -> Entry:
    return Entry(filename, filename[:-3], desc, type_, age)


def run(
    main: str | None,
    memories: list[Entry],
    *,
    ready: set[str] | None = None,
    view: ViewKind = ViewKind.AUTO,
    budget: Budget | None = None,
    archive: str | None = None,
) -> IndexEdit:
    mems = {e.filename: e for e in memories}
    return update_index(
        IndexInput(
            main=main,
            archive=archive,
            memories=mems,
            present=frozenset(mems),
            seen={},
            ready=frozenset(mems if ready is None else ready),
            heading="proj",
            budget=budget or Budget(),
            now=NOW,
            today=date(2026, 11, 30),
            view=view,
        )
    )


def seen_targets(text: str) -> set[str]:
    """Targets of the pointer lines in what the agent loads."""
    view = agent_view(text, ViewKind.AUTO)
    return {
        line.split("](", 1)[1].split(")", 1)[0]
        for line in view.loaded.split("\n")
        if line.startswith("- [")
    }


COMMENTED = "# proj Memory\n\n- [a](a.md) — d\n<!--\n- [b](b.md) — old words\n-->\n\nprose\n"


def test_a_pointer_in_a_comment_gets_a_visible_one_and_stays() -> None:
    """The hidden line is kept byte for byte; the memory gets a pointer after the last one the
    agent sees (not after the hidden one), and the edit says why."""
    edit = run(COMMENTED, [entry("a.md"), entry("b.md")])
    assert edit.main == (
        "# proj Memory\n\n- [a](a.md) — d\n- [b](b.md) — d\n<!--\n- [b](b.md) — old words\n-->\n"
        "\nprose\n"
    )
    assert edit.added == ["b.md"] and edit.collapsed == []
    assert edit.shadowed == {"b.md": Hidden.COMMENT}
    assert seen_targets(edit.main) == {"a.md", "b.md"}
    assert verify(edit.main, None, {"a.md", "b.md"}, {"a.md", "b.md"}) == []
    again = run(edit.main, [entry("a.md"), entry("b.md")])
    assert again.main == edit.main and not again.added and not again.collapsed


def test_new_pointers_never_go_inside_a_comment() -> None:
    """The last pointer line sits in a comment block: a new file's pointer goes after the last
    visible one."""
    edit = run(COMMENTED, [entry("a.md"), entry("b.md"), entry("c.md")])
    assert edit.main is not None
    assert edit.main.index("(c.md)") < edit.main.index("<!--")
    assert seen_targets(edit.main) == {"a.md", "b.md", "c.md"}


def test_only_hidden_pointers_put_new_ones_at_the_end() -> None:
    """With no visible pointer at all, new pointers go at the end, after a blank line."""
    main = "<!--\n- [a](a.md) — d\n-->\nprose\n"
    edit = run(main, [entry("a.md")])
    assert edit.main == main + "\n- [a](a.md) — d\n"


def test_frontmatter_first_index() -> None:
    """Pointers in a leading `---` block are stripped by the agent: each gets one after it."""
    main = "---\n- [a](a.md) — d\n---\n- [b](b.md) — d\n"
    edit = run(main, [entry("a.md"), entry("b.md"), entry("c.md")])
    assert (
        edit.main == "---\n- [a](a.md) — d\n---\n- [b](b.md) — d\n- [a](a.md) — d\n"
        "- [c](c.md) — d\n"
    )
    assert edit.shadowed == {"a.md": Hidden.FRONTMATTER}
    assert seen_targets(edit.main) == {"a.md", "b.md", "c.md"}


def test_agent_memory_dirs_see_comments() -> None:
    """An agent-memory dir's MEMORY.md is not stripped: a pointer in a comment indexes."""
    edit = run(COMMENTED, [entry("a.md"), entry("b.md")], view=ViewKind.PLAIN)
    assert edit.main == COMMENTED and not edit.added


def test_a_hidden_pointer_in_its_grace_waits() -> None:
    """A memory whose only pointer is hidden waits out its grace like a new file."""
    edit = run(COMMENTED, [entry("a.md"), entry("b.md")], ready={"a.md"})
    assert edit.main == COMMENTED and edit.waiting == ["b.md"]


def test_comment_lines_do_not_count_against_the_window() -> None:
    """200 pointers and a 30-line comment block: the agent loads all 200, nothing moves."""
    mems = [entry(f"m{i:03}.md") for i in range(200)]
    comment = "<!--\n" + "".join(f"note {i}\n" for i in range(28)) + "-->\n"
    main = (
        "".join(f"- [m{i:03}](m{i:03}.md) — d\n" for i in range(100))
        + comment
        + "".join(f"- [m{i:03}](m{i:03}.md) — d\n" for i in range(100, 200))
    )
    edit = run(main, mems)
    assert edit.demoted == [] and edit.main == main and edit.fits_window


def test_lone_cr_with_a_comment_is_measured_as_the_agent_counts() -> None:
    """300 CR-separated notes and a comment: 2 lines to a reader that splits at "\\n", 300
    to the agent (its lexer folds every CR once a comment goes): over the window, said so."""
    main = "- [a](a.md) — d\n" + "\r".join(f"note {i}" for i in range(300)) + "\r<!-- c -->\r\n"
    edit = run(main, [entry("a.md")])
    assert edit.demoted == ["a.md"]  # the one entry that can move, to no avail
    assert not edit.fits_window and edit.over_budget is not None
    assert edit.main is not None  # the notes, then the trailer naming the archive
    assert edit.over_budget.lines == agent_view(edit.main, ViewKind.AUTO).lines == 301


def test_over_the_window_demotes_visible_pointers_only() -> None:
    """Demotion moves pointers the agent sees; a hidden one stays where it is."""
    mems = [entry(f"m{i:03}.md", age=OLD - (250 - i) * 60) for i in range(250)]
    main = "<!--\n- [m000](m000.md) — hidden\n-->\n" + "".join(
        f"- [m{i:03}](m{i:03}.md) — d\n" for i in range(250)
    )
    edit = run(main, mems)
    assert edit.main is not None and edit.archive is not None
    assert edit.main.startswith("<!--\n- [m000](m000.md) — hidden\n-->\n")
    assert "m000.md" in edit.demoted and "(m000.md)" in edit.archive
    assert agent_view(edit.main, ViewKind.AUTO).fits()
    names = {e.filename for e in mems}
    assert verify(edit.main, edit.archive, names, names) == []


def test_verify_counts_only_what_the_agent_sees() -> None:
    """A memory pointed at only from inside a comment is indexed 0 times."""
    assert verify(COMMENTED, None, {"a.md", "b.md"}, {"a.md", "b.md"}) == [
        "b.md is indexed 0 times across MEMORY.md and the archive"
    ]
    assert verify(COMMENTED, None, {"a.md", "b.md"}, {"a.md", "b.md"}, kind=ViewKind.PLAIN) == []


def project_dir(env: Env) -> Path:
    return env.claude / "projects" / "-home-u-proj" / "memory"


def test_index_dirs_and_explain_on_disk(env: Env, cli) -> None:
    """`memoryd index` gives the hidden memory a visible pointer; `dirs` counts the hidden
    pointers and `explain` names the construct that hides one."""
    folder = project_dir(env)
    write_memory(folder, "a.md")
    write_memory(folder, "b.md")
    (folder / "MEMORY.md").write_text(COMMENTED.replace(" — d", " — a memory"))
    shown = cli("dirs", "--json", folder)
    row = json.loads(shown.out)["dirs"][0]
    assert row["index"]["hidden_pointers"] == {"in an HTML comment": 1}
    assert "pointers the agent does not see: 1 in an HTML comment" in cli("dirs", folder).out
    before = cli("explain", folder / "b.md").out
    assert "the pointer on MEMORY.md line 5 is in an HTML comment" in before
    assert "not indexed for the agent" in before
    assert cli("index", folder).code == 0
    text = (folder / "MEMORY.md").read_text()
    assert seen_targets(text) == {"a.md", "b.md"} and "<!--\n- [b](b.md) — old words\n-->" in text
    after = cli("explain", folder / "b.md").out
    assert "loaded: its pointer on MEMORY.md line 4 is in what the agent loads" in after
    assert cli("index", "--check", folder).code == 0
