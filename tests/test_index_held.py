"""The held index's edit restricted to changed files gives exactly what the full edit gives."""

from dataclasses import dataclass, field
from datetime import date

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memoryd.model.index import Budget, Entry, dominant_eol, pointer_lines
from memoryd.model.index_edit import (
    IndexEdit,
    IndexInput,
    archive_frontmatter,
    line_digest,
    note_own,
    update_index,
)
from memoryd.model.index_held import HeldIndex, check, edit_changed, hold, pairs, positions_of

NOW = 1_800_000_000.0
DAY = 86400.0
NAMES = [f"f{i}.md" for i in range(14)]


@dataclass
class Dir:
    main: str | None
    archive: str | None
    memories: dict[str, Entry]
    present: set[str]
    seen: dict[str, list[str]] = field(default_factory=dict)
    young: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)  # as DirState.gone: seen, then left
    own: dict[str, str] = field(default_factory=dict)  # as DirState.own

    def input(self, budget: Budget) -> IndexInput:
        return IndexInput(
            main=self.main,
            archive=self.archive,
            memories=dict(self.memories),
            present=frozenset(self.present),
            seen=pairs(self.seen, gone=self.gone, present=frozenset(self.present)),
            ready=frozenset(set(self.memories) - self.young),
            heading="proj",
            budget=budget,
            now=NOW,
            today=date(2026, 11, 30),
            own=self.own,
        )

    def settle(self, edit: IndexEdit) -> None:
        self.main, self.archive = edit.main, edit.archive
        self.gone |= {n for n in self.seen if n not in self.present}
        self.gone -= self.present
        self.seen = {n: [e.name, e.description] for n, e in self.memories.items()}
        self.own = {n: d for n, d in self.own.items() if n in self.memories}
        note_own(self.own, edit, self.memories, " — ")
        # The record names only lines that are there (so the restricted edit, which sees
        # few lines, never has one to forget).
        there = {
            (p.target, line_digest(p.content))
            for text in (self.main, self.archive)
            if text
            for p in pointer_lines(text)
        }
        assert set(self.own.items()) <= there


def archive_of(held: HeldIndex) -> str | None:
    data = held.archive_data
    return None if data is None else data.decode("utf-8")


def summary(edit: IndexEdit) -> tuple[object, ...]:
    return (
        edit.main,
        edit.archive,
        sorted(edit.added),
        sorted(edit.removed),
        sorted(edit.rewritten),
        sorted(edit.collapsed),
        edit.demoted,
        sorted(edit.waiting),
        set(edit.dead_links),
        sorted(edit.invalid_links),
        edit.over_budget,
        edit.outside,
        edit.own,
    )


def entry(name: str, desc: str, type_: str, age_days: int) -> Entry:
    return Entry(name, name[:-3].upper(), desc, type_, NOW - age_days * DAY)


hand_lines = st.sampled_from(
    [
        "prose a person wrote",
        "",
        "## A heading",
        "- [web](https://example.com/x.md)",
        "- [bad](../escape.md)",
        "- [sub](notes/sub.md)",
        "- [gone](ghost.md) — dead before anything",
        "## Moved from MEMORY.md 2026-11-30 (2)",
        "## Moved from MEMORY.md 2026-10-01 (1)",
        # Comment blocks and a leading `---` hide the pointers between them from the agent.
        "<!--",
        "-->",
        "<!-- a note -->",
        "---",
    ]
)


@st.composite
def index_text(draw: st.DrawFn, names: list[str]) -> str | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            target = draw(st.sampled_from(names))
            style = draw(st.integers(0, 3))
            if style == 0:  # as memoryd wrote it when the description was "old" (see `own`)
                lines.append(f"- [{target[:-3].upper()}]({target}) — old")
            elif style == 1:
                lines.append(f"* [{target}]({target}) hand-written words")
            elif style == 2:  # the agent's, exactly the template of the file as it is first
                lines.append(f"- [{target[:-3].upper()}]({target}) — first")
            else:
                lines.append(f"- [{target[:-3].upper()}]({target})")
        else:
            lines.append(draw(hand_lines))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines)
    if bool(lines) and draw(st.booleans()):  # bool(): mypy would infer draw's type from `lines`
        text += eol
    return text


change = st.tuples(
    st.sampled_from(NAMES),
    st.sampled_from(["delete", "describe", "rename", "create", "young", "note", "retype"]),
    st.integers(0, 3),
)


@settings(max_examples=300, deadline=None)
@given(
    main=index_text([*NAMES, "ghost.md"]),
    archive=index_text([*NAMES, "ghost.md"]),
    initial=st.sets(st.sampled_from(NAMES), min_size=0, max_size=12),
    ages=st.lists(st.integers(0, 90), min_size=len(NAMES), max_size=len(NAMES)),
    max_lines=st.integers(3, 14),
    steps=st.lists(st.lists(change, min_size=1, max_size=4), min_size=1, max_size=4),
    wrote=st.sets(st.sampled_from(NAMES)),
)
@example(  # demoting the first pointer above a `---` line turns the rest into frontmatter
    main="- [F0](f0.md) — old\n---\nprose a person wrote\n- [gone](ghost.md) — dead\n---",
    archive=None,
    initial={"f0.md"},
    ages=[8] + [0] * (len(NAMES) - 1),
    max_lines=3,
    steps=[[("f0.md", "delete", 0)]],
    wrote=set(),
)
def test_restricted_edit_equals_the_full_edit(
    main: str | None,
    archive: str | None,
    initial: set[str],
    ages: list[int],
    max_lines: int,
    steps: list[list[tuple[str, str, int]]],
    wrote: set[str],
) -> None:
    """Over random indexes, budgets and change sequences, every step matches update_index.

    `wrote`: the files whose "— old" line memoryd wrote (the state's record of its own
    lines), so that an agent's template-looking line may come before memoryd's own."""
    budget = Budget(max_lines=max_lines)
    types = ["project", "feedback", "user", "reference"]
    d = Dir(
        main,
        archive,
        {n: entry(n, "first", types[i % 4], ages[i]) for i, n in enumerate(NAMES) if n in initial},
        set(initial) | {"notes"},
        own={n: line_digest(f"- [{n[:-3].upper()}]({n}) — old") for n in wrote & initial},
    )
    first = update_index(d.input(budget))
    d.settle(first)
    held: HeldIndex = hold(d.main, d.archive, set(first.dead_links))
    waiting = set(first.waiting)
    for k, step in enumerate(steps):
        changed: set[str] = set()
        d.young = set()
        for name, kind, n in step:
            changed.add(name)
            i = NAMES.index(name)
            if kind == "delete":
                d.memories.pop(name, None)
                d.present.discard(name)
            elif kind == "note":  # present, but not a memory (no frontmatter, or unparseable)
                d.memories.pop(name, None)
                d.present.add(name)
            else:
                old = d.memories.get(name) or entry(name, "first", types[i % 4], ages[i])
                new = Entry(
                    name,
                    f"R{k}{n}" if kind == "rename" else old.name,
                    f"step {k} v{n}" if kind == "describe" else old.description,
                    types[n] if kind == "retype" else old.type,
                    NOW - n * DAY if kind != "create" else old.age_ts,
                )
                d.memories[name] = new
                d.present.add(name)
                if kind == "young":
                    d.young.add(name)
        if k % 2 and d.gone and d.main is not None:
            # An agent writes back a stale MEMORY.md naming a file that left: MEMORY.md
            # changed, so the daemon holds the index afresh; the next step is restricted.
            start = "\n" if d.main and not d.main.endswith("\n") else ""
            d.main += f"{start}- [{min(d.gone)[:-3].upper()}]({min(d.gone)}) — put back\n"
            put_back = update_index(d.input(budget))
            assert min(d.gone) in put_back.removed or min(d.gone) in d.present
            d.settle(put_back)
            held = hold(d.main, d.archive, set(put_back.dead_links))
            waiting = set(put_back.waiting)
        inp = d.input(budget)
        full = update_index(inp)
        fast = edit_changed(held, inp, changed, waiting)
        if fast is None:
            held = hold(full.main, full.archive, set(full.dead_links))
        else:
            assert archive_of(fast.held) == full.archive
            assert fast.archive_changed == (full.archive != d.archive)
            fast.edit.archive = full.archive  # not made by the restricted edit
            assert summary(fast.edit) == summary(full)
            held = fast.held
            touched = (changed | set(full.added) | set(full.demoted)) & set(d.memories)
            assert check(held, touched - set(full.waiting), d.present, set(full.dead_links)) == []
        waiting = set(full.waiting)
        d.settle(full)
        assert held.main == d.main and archive_of(held) == d.archive
        if archive_of(held):
            assert held.some(()).eol == dominant_eol(archive_of(held) or "")


def test_the_splice_keeps_every_untouched_archive_line_byte_for_byte() -> None:
    """A rewrite deep in a large archive changes that one line and nothing else."""
    names = [f"m{i:04}.md" for i in range(3000)]
    memories = {n: Entry(n, n[:-3], "d", "project", NOW - 30 * DAY) for n in names}
    front = "".join(line.text for line in archive_frontmatter("proj", "\r\n"))  # as written now
    archive = (
        front
        + "# proj Memory Archive\r\n\r\n"
        + "".join(f"- [{n[:-3]}]({n}) — d\r\n" for n in names)
    )
    main = "# proj Memory\n\nhand-written\n"
    held = hold(main, archive, set())
    memories["m1500.md"] = Entry("m1500.md", "m1500", "new words", "project", NOW)
    inp = IndexInput(
        main=main,
        archive=archive,
        memories=memories,
        present=frozenset(names),
        seen={n: (n[:-3], "d") for n in names},
        ready=frozenset(),
        heading="proj",
        now=NOW,
        today=date(2026, 11, 30),
    )
    result = edit_changed(held, inp, {"m1500.md"}, set())
    assert result is not None
    assert result.edit.rewritten == ["m1500.md"]
    assert result.archive_changed
    expected = archive.replace("- [m1500](m1500.md) — d\r\n", "- [m1500](m1500.md) — new words\r\n")
    assert result.held.archive_data == expected.encode()
    result.edit.archive = expected
    assert result.edit == update_index(inp)
    assert result.held.where["m1500.md"] == held.where["m1500.md"]


def test_an_archive_target_with_one_pointer_is_held_as_its_position_alone() -> None:
    """`where` holds a lone position as an int (one list per target was ~1 MB of a daemon
    holding 10,000 archive lines); a target with several keeps their list."""
    archive = "- [A](a.md) — one\n- [B](b.md) — two\ntext\n- [B again](b.md) — three\n"
    held = hold(None, archive, set())
    assert held.where == {"a.md": 0, "b.md": [1, 3]}
    assert positions_of(held.where, "a.md") == (0,)
    assert list(positions_of(held.where, "b.md")) == [1, 3]
    assert positions_of(held.where, "c.md") == ()
