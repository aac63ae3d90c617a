"""The index editor as a pure function: pointer-line edits that never touch a person's lines."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.model import index, index_edit
from memoryd.model.index import (
    TRAILER,
    Budget,
    LastPass,
    LinkKind,
    classify_link,
    decide_ownership,
    encode_target,
    linkable,
    local_links,
    measure,
    parse_line,
    pointer_lines,
    pointer_targets,
    render_pointer,
    split_lines,
    verify,
)
from memoryd.model.index_edit import line_digest, note_own
from tests.helpers import NOW, OLD, entry, many_entries, run


def test_new_index_gets_a_heading_and_pointers_in_file_name_order() -> None:
    """A missing MEMORY.md starts with `# <name> Memory` and lists new files by name."""
    edit = run(None, [entry("b.md", desc="bee"), entry("a.md", "Alpha", "first")])
    assert edit.main == "# proj Memory\n\n- [Alpha](a.md) — first\n- [b](b.md) — bee\n"
    assert edit.added == ["a.md", "b.md"]


def test_new_pointer_goes_after_the_last_pointer_line() -> None:
    """A new pointer lands after the last pointer line, before trailing prose."""
    main = "# T\n\n- [a](a.md) — x\n\n## Notes\nprose stays\n"
    edit = run(main, [entry("a.md"), entry("c.md", desc="new")])
    assert edit.main == "# T\n\n- [a](a.md) — x\n- [c](c.md) — new\n\n## Notes\nprose stays\n"


def test_pointer_appended_after_a_blank_line_when_there_is_none() -> None:
    """With no pointer line at all, new pointers go at the end after one blank line."""
    edit = run("# Only prose\nhello", [entry("a.md")])
    assert edit.main == "# Only prose\nhello\n\n- [a](a.md) — d"


def test_crlf_and_missing_final_newline_are_preserved() -> None:
    """CRLF stays CRLF, and a file without a final newline still has none."""
    main = "# T\r\n\r\n- [a](a.md) — x\r\nclosing prose"
    edit = run(main, [entry("a.md"), entry("b.md")])
    assert edit.main == "# T\r\n\r\n- [a](a.md) — x\r\n- [b](b.md) — d\r\nclosing prose"


def test_gone_file_seen_before_loses_its_pointer_dead_link_kept() -> None:
    """A pointer to a file memoryd saw that is now gone is removed; a never-seen one is kept."""
    main = "- [a](a.md) — x\n- [gone](gone.md) — y\n- [future](future.md) — z\n"
    edit = run(main, [entry("a.md", desc="x")], seen={"a.md": ("a", "x"), "gone.md": ("gone", "y")})
    assert edit.main == "- [a](a.md) — x\n- [future](future.md) — z\n"
    assert edit.removed == ["gone.md"]
    assert edit.dead_links == ["future.md"]


def test_generated_line_follows_a_rename_but_hand_written_does_not() -> None:
    """Only a line exactly as memoryd would have written it is rewritten (invariant 5)."""
    main = "- [old](a.md) — old desc\n- [My own words](b.md) — mine\n"
    seen = {"a.md": ("old", "old desc"), "b.md": ("b", "bdesc")}
    edit = run(main, [entry("a.md", "new", "new desc"), entry("b.md", "B2", "changed")], seen=seen)
    assert edit.main == "- [new](a.md) — new desc\n- [My own words](b.md) — mine\n"
    assert edit.rewritten == ["a.md"]


def test_duplicate_pointers_collapse_hand_written_wins() -> None:
    """Two pointers to one file become one; the person's wording beats the line memoryd wrote
    (the one its state recorded), and the record goes with the line."""
    main = "- [a](a.md) — d\n- [Better words](a.md)\n- [b](b.md) — d\n- [b](b.md) — d\n"
    own = {"a.md": line_digest("- [a](a.md) — d")}
    edit = run(main, [entry("a.md"), entry("b.md")], own=own)
    assert edit.main == "- [Better words](a.md)\n- [b](b.md) — d\n"
    assert sorted(edit.collapsed) == ["a.md", "b.md"]
    assert edit.own == {"a.md": None}


@pytest.mark.parametrize("seen", [None, {"x.md": ("Old", "one")}], ids=["unseen", "old-state"])
def test_a_template_looking_line_the_agent_wrote_wins_over_its_later_one(
    seen: dict[str, tuple[str, str]] | None,
) -> None:
    """Two lines of the agent's for one file, the first exactly memoryd's template: not
    memoryd's (its state never recorded writing it), so the first wins; every other byte
    stays (CRLF, the prose between, no final newline). Also from a state that knows the file
    but has no record of memoryd's lines (one from before it kept them)."""
    main = (
        "# Notes\r\n\r\n- [Old](x.md) — one\r\nsome prose\r\n- [Old again](x.md) — two\r\n"
        "- [y](y.md) — d"
    )
    edit = run(main, [entry("x.md", "Old", "one"), entry("y.md")], seen=seen)
    assert edit.main == main.replace("- [Old again](x.md) — two\r\n", "")
    assert edit.collapsed == ["x.md"]
    assert edit.own == {}


def test_memoryds_own_added_line_loses_to_a_later_agent_line() -> None:
    """The pointer memoryd added is recorded as its own, and loses to a line the agent adds
    for the same file later, even once it no longer looks like the template (the separator
    setting changed since); the record then goes."""
    mems = [entry("x.md", "x", "d"), entry("y.md")]
    first = run("# T\n\n- [y](y.md) — d\n", mems)
    assert first.main == "# T\n\n- [y](y.md) — d\n- [x](x.md) — d\n"
    own: dict[str, str] = {}
    assert note_own(own, first, {e.filename: e for e in mems}, " — ") == {"x.md"}
    main = f"{first.main}- [X, in my words](x.md) — kept\n"
    edit = run(main, mems, seen={"x.md": ("x", "d"), "y.md": ("y", "d")}, own=own, separator=" -- ")
    assert edit.main == "# T\n\n- [y](y.md) — d\n- [X, in my words](x.md) — kept\n"
    assert edit.collapsed == ["x.md"]
    assert note_own(own, edit, {e.filename: e for e in mems}, " -- ") == {"x.md"}
    assert own == {}


def test_a_line_memoryd_rewrote_is_its_own() -> None:
    """A line rewritten under DESIGN §2.5 after a rename is memoryd's from then on: recorded
    as the new text, and it loses to the agent's line for the file."""
    main = "- [old](a.md) — d\n- [A in my words](a.md) — mine\n"
    own = {"a.md": line_digest("- [old](a.md) — d")}
    edit = run(main, [entry("a.md", "new", "d")], seen={"a.md": ("old", "d")}, own=own)
    assert edit.main == "- [A in my words](a.md) — mine\n"
    assert edit.own == {"a.md": None}
    alone = run("- [old](a.md) — d\n", [entry("a.md", "new", "d")], seen={"a.md": ("old", "d")})
    assert alone.main == "- [new](a.md) — d\n"
    assert alone.own == {"a.md": line_digest("- [new](a.md) — d")}


def test_links_elsewhere_are_never_touched() -> None:
    """Subfolder, URL and anchor links are left alone, even when they look like memories."""
    main = (
        "- [sub](sub/a.md)\n- [web](https://example.com/a.md)\n- [anchor](#top)\n- [a](a.md) — d\n"
    )
    edit = run(main, [entry("a.md")], seen={"sub/a.md": ("x", "y")})
    assert edit.main == main


@pytest.mark.parametrize(
    "raw",
    [
        "../../.ssh/id_rsa",
        "/etc/passwd",
        "%2e%2e%2fsecret.md",
        "..%2Fsecret.md",
        "a\\b.md",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "．．／secret.md",
        "~/.ssh/id_rsa",
        "sub/../../x.md",
    ],
)
def test_escaping_links_are_invalid(raw: str) -> None:
    """Traversal, absolute paths, schemes, backslashes, encodings and lookalikes are invalid."""
    assert classify_link(raw).kind is LinkKind.INVALID


def test_invalid_link_is_reported_and_kept() -> None:
    """`[x](../../.ssh/id_rsa)` stays in the index and is reported, never followed."""
    main = "- [x](../../.ssh/id_rsa)\n- [a](a.md) — d\n"
    edit = run(main, [entry("a.md")])
    assert edit.main == main
    assert edit.invalid_links == ["../../.ssh/id_rsa"]


@pytest.mark.parametrize(
    "filename",
    [
        "with space.md",
        "paren(1).md",
        "quote'\"s.md",
        "new\nline.md",
        "-leading-dash.md",
        "百分%.md",
        "hash#tag.md",
    ],
)
def test_odd_file_names_round_trip_through_a_pointer(filename: str) -> None:
    """Names with spaces, parentheses, quotes, newlines or `%` encode so the pattern reads back."""
    line = render_pointer(filename, "n", "d", " — ")
    assert "\n" not in line
    assert pointer_targets(line) == [filename]
    assert encode_target("with space.md") == "with%20space.md"


def test_new_file_within_grace_waits() -> None:
    """A file not yet past its grace gets no pointer (the agent may be about to add one)."""
    edit = run("- [a](a.md) — d\n", [entry("a.md"), entry("b.md")], ready={"a.md"})
    assert edit.main == "- [a](a.md) — d\n"
    assert edit.waiting == ["b.md"]


def test_budget_demotes_oldest_into_archive_with_one_trailer() -> None:
    """250 entries: MEMORY.md fits 200 lines / 25,000 units; the oldest go to the archive."""
    mems = many_entries(250)
    first = run(None, mems)
    assert first.main is not None and first.archive is not None
    m = measure(first.main)
    assert m.lines <= 200 and m.chars <= 25_000
    assert first.demoted[0] == "m0000.md"  # the oldest goes first
    assert [ln for ln in first.main.splitlines() if TRAILER.match(ln)] == [
        "> 250 memory files total. Every file is indexed exactly once across this file and "
        "[MEMORY-ARCHIVE.md](MEMORY-ARCHIVE.md); read the archive when a topic is not listed here."
    ]
    assert "## Moved from MEMORY.md 2026-11-30 (" in first.archive
    names = {e.filename for e in mems}
    assert verify(first.main, first.archive, names, names) == []
    again = run(
        first.main,
        mems,
        archive=first.archive,
        seen={e.filename: (e.name, e.description) for e in mems},
    )
    assert (again.main, again.archive) == (first.main, first.archive)


def test_user_and_recent_memories_are_never_demoted() -> None:
    """`user` memories and ones changed in the last 7 days stay in MEMORY.md."""
    mems = many_entries(240)
    mems[0] = entry("m0000.md", desc="x" * 60, type_="user", age=OLD - 10**6)
    mems[1] = entry("m0001.md", desc="x" * 60, age=NOW - 86400)
    edit = run(None, mems)
    assert "m0000.md" not in edit.demoted
    assert "m0001.md" not in edit.demoted
    assert edit.demoted


def test_budget_never_mode_reports_but_moves_nothing() -> None:
    """With budget = never, an oversize index is reported and nothing is demoted."""
    edit = run(None, many_entries(250), budget=Budget(mode="never"))
    assert edit.demoted == []
    assert edit.over_budget is not None
    assert edit.outside and not edit.fits_window


def test_trailer_count_updates_when_files_change() -> None:
    """The trailer's count follows the number of memory files, and stays single."""
    mems = many_entries(250)
    first = run(None, mems)
    assert first.main is not None
    seen = {e.filename: (e.name, e.description) for e in mems}
    fewer = run(first.main, mems[:-1], archive=first.archive, seen=seen)
    assert fewer.main is not None
    trailers = [ln for ln in fewer.main.splitlines() if TRAILER.match(ln)]
    assert len(trailers) == 1 and trailers[0].startswith("> 249 memory files total.")


def test_ownership_rules() -> None:
    """Managed when missing, marked, or at least half the files are pointer targets."""
    files = {"a.md", "b.md", "c.md", "d.md"}
    assert decide_ownership(None, None, {}, files).managed
    assert decide_ownership("  \n", None, {}, files).managed
    assert decide_ownership("- [a](a.md)\n- [b](b.md)\n", None, {}, files).managed
    assert not decide_ownership("- [a](a.md)\n", None, {}, files).managed
    assert decide_ownership("- [a](a.md)\n<!-- memoryd: manage -->", None, {}, files).managed
    assert not decide_ownership("<!-- memoryd: off -->", None, {}, set()).managed
    tree = decide_ownership(
        "- [cat](cat.md)\n", None, {"cat.md": "- [a](a.md)\n- [b](b.md)"}, files
    )
    assert tree.managed
    assert not decide_ownership("- [a](a.md)\n", None, {}, files, override="off").managed
    assert decide_ownership("prose", None, {}, files, override="manage").managed


lines_st = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "# Heading",
                "",
                "prose line",
                "* [x](x.md) own words",
                "> quote",
                "- [a](a.md) — d",
                "- [b](b.md)",
                "- [ext](https://e.x/y.md)",
            ]
        ),
        st.text(
            st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=20
        ),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    lines_st,
    st.booleans(),
    st.booleans(),
    st.sets(st.sampled_from(["a.md", "b.md", "c.md", "x.md"])),
)
def test_hand_written_lines_survive_in_order_and_a_second_pass_is_a_no_op(
    lines: list[str], crlf: bool, final_newline: bool, files: set[str]
) -> None:
    """Every non-pointer line survives in order, and running the edit again changes nothing."""
    eol = "\r\n" if crlf else "\n"
    main = eol.join(lines) + (eol if final_newline and lines else "")
    mems = [entry(f) for f in sorted(files)]
    first = run(main, mems)
    # A blank MEMORY.md counts as missing (DESIGN §3): it has no lines worth keeping.
    written = [ln.content for ln in split_lines(main) if ln.link is None] if main.strip() else []
    out = first.main or ""
    after = [ln.content for ln in split_lines(out) if ln.link is None]
    it = iter(after)
    assert all(any(w == a for a in it) for w in written), "a hand-written line was lost"
    seen = {e.filename: (e.name, e.description) for e in mems}
    second = run(first.main, mems, seen=seen, archive=first.archive)
    assert (second.main, second.archive) == (first.main, first.archive)


def test_new_pointer_goes_after_the_last_local_pointer_not_a_web_link() -> None:
    """A trailing "## Links" list of URLs is not where a new memory's pointer belongs."""
    main = "- [a](a.md) — d\n\n## Links\n- [wiki](https://example.com/wiki)\n"
    edit = run(main, [entry("a.md"), entry("b.md")])
    assert (
        edit.main
        == "- [a](a.md) — d\n- [b](b.md) — d\n\n## Links\n- [wiki](https://example.com/wiki)\n"
    )


def test_ownership_stays_with_memoryd_when_many_new_files_arrive() -> None:
    """A burst of new files does not make a managed index unmanaged; a rewrite by hand does."""
    known = {"a.md", "b.md"}
    files = known | {f"new{i}.md" for i in range(50)}
    ours = "- [a](a.md)\n- [b](b.md)\n"
    assert not decide_ownership(ours, None, {}, files).managed
    assert decide_ownership(ours, None, {}, files, last=LastPass(known)).managed
    assert decide_ownership(ours, None, {}, {"n1.md", "n2.md"}, last=LastPass(known)).managed
    rewritten = "# My own tree\n- [topics](topics.md)\n"
    assert not decide_ownership(rewritten, None, {}, files, last=LastPass(known)).managed


# Pointer-like lines of every form the two pointer scans must agree on.
POINTER_LINES = [
    "- [a](a.md)",
    "* [b](b.md) x",
    "  - [c d](c%20d.md)",
    "-[no](space.md)",
    "text [e](e.md)",
    "\u3000- [wide](w.md)",
    "- [f](f.md)\r",
    "",
    "- [g](sub/g.md)",
    "-\t[h](h.md)",
    "\x0b- [v](v.md)",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(POINTER_LINES),
        max_size=10,
    ),
    st.sampled_from(["\n", "\r\n"]),
)
def test_whole_text_scan_agrees_with_line_by_line(lines: list[str], eol: str) -> None:
    """The fast whole-text pointer scan finds exactly what the line-by-line parser finds."""
    text = eol.join(lines)
    slow = [
        ln.link.target
        for ln in split_lines(text)
        if ln.link is not None and ln.link.kind is LinkKind.LOCAL
    ]
    assert pointer_targets(text) == slow


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*POINTER_LINES, "\r- [r](r.md)", " \r\t* [s](s.md) tail\r", "- [a](a.md) again"]
        ),
        max_size=10,
    ),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
)
def test_pointer_lines_agree_with_the_line_parser(lines: list[str], eol: str, end: bool) -> None:
    """The pointer lines found without splitting are the parser's, with their whole content."""
    text = eol.join(lines) + (eol if end else "")
    slow = [
        (ln.link.target, ln.content)
        for ln in split_lines(text)
        if ln.link is not None and ln.link.kind is LinkKind.LOCAL
    ]
    assert [(p.target, p.content) for p in pointer_lines(text)] == slow


_LOOKALIKE_CHARS = "\uff0e\uff0f\uff3c\u2215\u2044\u2024\u3002\ufe52\u29f8\u29f9\u2216"


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        st.one_of(st.characters(), st.sampled_from(list(":?#%~\\()[] .") + list(_LOOKALIKE_CHARS))),
        min_size=1,
        max_size=12,
    ).filter(lambda n: "/" not in n and "\0" not in n and n not in (".", ".."))
)
def test_every_name_without_a_trick_gets_a_link_that_reads_back_as_itself(name: str) -> None:
    """The pointer memoryd writes for a file must name that file when read back, or the file
    would get a new pointer on every pass; only names a link cannot carry safely are refused."""
    import re

    tricky = (
        any(c in _LOOKALIKE_CHARS for c in name)
        or any(0xD800 <= ord(c) <= 0xDFFF for c in name)
        or ".." in re.split(r"\\", name)
    )
    assert linkable(name) is not tricky
    if not tricky:
        line = render_pointer(name, "label", "d", " — ")
        assert pointer_targets(line + "\n") == [name]


@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(
        st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}", fullmatch=True),
        st.text(alphabet="ab._-/%2eE:#?~\\\uff0e", max_size=12),
    )
)
def test_the_fast_look_at_a_plain_name_classifies_as_the_full_rules_do(raw: str) -> None:
    """A link target made of letters, digits, `_`, `.` and `-` only (not leading `.` or
    `-`) is taken for a file in the dir without the full rules; for every target the
    answer is the full rules' (near misses: traversal, encodings, schemes, look-alikes)."""
    from memoryd.model import index

    assert classify_link(raw) == index._classify_link.__wrapped__(raw)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from([*POINTER_LINES, "\r", "](", "- [x](y.md)\r\r", "\u2028- [u](u.md)"]),
        max_size=10,
    ),
    st.lists(st.sampled_from(["\n", "\r\n", "\r", ""]), min_size=10, max_size=10),
)
def test_the_line_parse_of_a_whole_text_is_parse_line_of_each_line(
    lines: list[str], ends: list[str]
) -> None:
    """The one-loop parse of a text (split on `\\n` only, a line with no `](` never matched)
    gives what `parse_line` gives for each line with its ending, as the old regex split did."""
    text = "".join(line + end for line, end in zip(lines, ends, strict=False))
    by_line = [parse_line(chunk) for chunk in re.split(r"(?<=\n)", text) if chunk]
    assert [(ln.content, ln.eol, ln.link) for ln in split_lines(text)] == by_line


def test_demoting_thousands_of_pointers_measures_only_the_lines_near_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3,000 pointers, 200 lines allowed: the demotion measures the lines it takes off in one
    go while the line count alone is over the window, then one by one: a few dozen
    measurements, not one per demoted line (the old loop encoded each of the ~2,800 lines)."""
    measured: list[int] = []
    real = index.utf16_len

    def counting(text: str) -> int:
        measured.append(len(text))
        return real(text)

    monkeypatch.setattr(index, "utf16_len", counting)
    mems = many_entries(3000)
    edit = run(None, mems)
    assert len(edit.demoted) > 2700
    assert edit.main is not None and measure(edit.main).lines <= 200
    assert len(measured) <= 200  # at most one per line left in the window, whatever the dir
    monkeypatch.setattr(index, "utf16_len", real)
    names = {e.filename for e in mems}
    assert verify(edit.main, edit.archive, names, names) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["plain", "a](b.md) c", "x]", "[y", "](", "q](r) s", "ok (z)"]),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([None, "# proj Memory Archive\n\n- [old](old.md)\nsee [x](x.md)\n"]),
)
def test_the_archive_links_the_edit_knows_are_those_its_text_holds(
    labels: list[str], archive: str | None
) -> None:
    """`IndexEdit.archive_links` (what verification takes instead of parsing the archive it
    wrote) is `local_links` of the archive's text, or None when a line memoryd rendered
    reads back as another link (a name holding `](...)`)."""
    mems = [
        entry(f"m{i:02d}.md", name=label, desc="d", age=OLD - i) for i, label in enumerate(labels)
    ]
    edit = run(None, mems, archive=archive, budget=Budget(max_lines=4))
    if edit.archive is None:
        assert edit.archive_links is None
    elif edit.archive_links is not None:
        assert edit.archive_links == local_links(edit.archive)
    else:
        assert any("](" in label for label in labels)


def test_the_archive_links_an_edit_vouches_for_are_a_parse_of_its_text_whatever_the_names() -> None:
    """A name holding `](b.md)` is still its own file's pointer, so the edit vouches for the
    archive's links; a line that would read back as another link leaves them to a parse."""
    labels = ["a](b.md) c", "plain", "x", "y", "z", "w"]
    mems = [entry(f"m{i:02d}.md", name=n, desc="d", age=OLD - i) for i, n in enumerate(labels)]
    edit = run(None, mems, budget=Budget(max_lines=4))
    assert "m00.md" in edit.demoted and edit.archive is not None
    assert edit.archive_links == local_links(edit.archive)
    names = {e.filename for e in mems}
    assert verify(edit.main, edit.archive, names, names, archive_links=edit.archive_links) == []
    claimed = index.Line("- [a](b.md) c](m00.md) — d", "\n", parse_line("- [a](m00.md)")[2])
    assert index_edit._links_as_written([claimed], {"m00.md"}) is None


@settings(max_examples=400, deadline=None)
@given(st.text(st.sampled_from(list("[]() x")), max_size=16))
def test_a_label_holding_link_syntax_still_points_at_its_own_file(label: str) -> None:
    """A memory's name is the pointer's label: `](` in it must not end the link early, or the
    line would point elsewhere and the file get another pointer on every pass."""
    line = render_pointer("mem.md", label, "d", " — ")
    assert pointer_targets(line + "\n") == ["mem.md"]
    assert parse_line(line + "\n")[2] is not None


def test_a_heading_with_a_line_break_leaves_the_archive_links_to_a_parse() -> None:
    """The archive's heading is made from a folder name: should one hold a line break, the
    edit does not vouch for links it did not parse; verification parses the text."""
    from datetime import date

    from memoryd.model.index_edit import IndexInput, update_index

    mems = {e.filename: e for e in [entry(f"m{i:02d}.md", age=OLD - i) for i in range(8)]}
    inp = IndexInput(main=None, archive=None, memories=mems, present=frozenset(mems), seen={},
                     ready=frozenset(mems), heading="proj\n- [ghost](ghost.md)",
                     budget=Budget(max_lines=4), now=NOW, today=date(2026, 11, 30), own={},
                     separator=" — ")  # fmt: skip
    edit = update_index(inp)
    assert edit.archive is not None
    assert edit.archive_links is None or edit.archive_links == local_links(edit.archive)
    names = set(mems)
    found = verify(edit.main, edit.archive, names, names, archive_links=edit.archive_links)
    assert found == verify(edit.main, edit.archive, names, names)
