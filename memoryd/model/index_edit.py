"""The index edit: MEMORY.md's and the archive's new text for a dir's files (`update_index`). Pure.

Only pointer lines are memoryd's to touch; every other line belongs to the person and is kept
byte-for-byte (order, CRLF, a missing final newline). See DESIGN §3.
"""

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping, MutableMapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import date

from memoryd.model.agentview import Hidden, View, ViewKind
from memoryd.model.index import (
    DEMOTED_HEADING,
    TRAILER,
    TRAILER_TEXT,
    Budget,
    Entry,
    Line,
    Link,
    LinkKind,
    Measure,
    Place,
    classify_link,
    cr_visible,
    dominant_eol,
    encode_target,
    fits,
    fits_view,
    measure,
    measure_view,
    outside_window,
    parse_line,
    placed_at,
    render_pointer,
    split_lines,
    utf16_len,
    view_of,
    visible_local_links,
)


# --- the edit ----------------------------------------------------------------------------------
@dataclass(slots=True)
class IndexEdit:
    main: str | None
    archive: str | None
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    collapsed: list[str] = field(default_factory=list)
    demoted: list[str] = field(default_factory=list)
    dead_links: list[str] = field(default_factory=list)
    invalid_links: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # new files still inside their grace
    # Memories whose only pointers the agent cannot see, and why (each gets a visible one).
    shadowed: dict[str, Hidden] = field(default_factory=dict)
    over_budget: Measure | None = None
    outside: list[str] = field(default_factory=list)
    fits_window: bool = True
    # What `IndexInput.own` becomes for the files whose lines the edit looked at: the digest of
    # the line memoryd now owns, or None. The pointers added are not in it: see note_own.
    own: dict[str, str | None] = field(default_factory=dict)
    # `local_links(archive)`, known from the lines it was made of (see _links_as_written);
    # derived from `archive`, so no part of an edit's equality.
    archive_links: tuple[Link, ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IndexInput:
    main: str | None
    archive: str | None
    memories: Mapping[str, Entry]
    present: Set[str]  # every name in the dir, exact case
    seen: Mapping[str, tuple[str, str]]  # previous (name, description) of files memoryd saw
    ready: Set[str]  # memory files past their grace: may get a new pointer now
    heading: str
    separator: str = " — "
    budget: Budget = field(default_factory=Budget)
    now: float = 0.0
    # The archive headings' date; None: undated (a dir in a git work tree).
    today: date | None = field(default_factory=date.today)
    preferred: Mapping[str, str] = field(default_factory=dict)  # file -> pointer line to reuse
    # file -> where its pointer sat before it went to the trash (a restore; see Place)
    placements: Mapping[str, Place] = field(default_factory=dict)
    # How many memory files the dir holds when `memories` is partial (index_held); None: all.
    total: int | None = None
    # file -> line_digest of the pointer line memoryd wrote for it (DirState.own): only that
    # line is memoryd's; any other, however much it looks like its template, is not.
    own: Mapping[str, str] = field(default_factory=dict)
    view: ViewKind = ViewKind.AUTO  # how the agent loads this dir's MEMORY.md


def line_digest(content: str) -> str:
    """A short fingerprint of a pointer line (without its ending), as the state records it."""
    data = content.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _is_generated(content: str, record: str | None) -> bool:
    """Whether a line is the one memoryd wrote for its file (`content`: as the pass found it)."""
    return record is not None and line_digest(content) == record


def note_own(
    own: MutableMapping[str, str],
    edit: IndexEdit,
    memories: Mapping[str, Entry],
    separator: str,
    restored: Set[str] = frozenset(),
) -> set[str]:
    """Take `edit`'s word on memoryd's own lines into `own` (IndexInput.own), with the
    pointers it added but those of `restored` files (the agent's lines put back). The names
    whose record changed."""
    changed: set[str] = set()
    for name, digest in edit.own.items():
        if digest is None:
            own.pop(name, None)
        else:
            own[name] = digest
        changed.add(name)
    for name in edit.added:
        if name not in restored:
            entry = memories[name]
            own[name] = line_digest(render_pointer(name, entry.name, entry.description, separator))
            changed.add(name)
    return changed


def _new_pointer(filename: str, inp: IndexInput, eol: str) -> Line:
    """A line for a new pointer: the one it had before (a restore), else a generated one."""
    old = inp.preferred.get(filename)
    if old is not None:
        lines = split_lines(old.rstrip("\r\n"))
        if len(lines) == 1 and lines[0].link is not None and lines[0].link.target == filename:
            return Line(lines[0].content, eol, lines[0].link)
    entry = inp.memories[filename]
    content = render_pointer(filename, entry.name, entry.description, inp.separator)
    return Line(content, eol, classify_link(encode_target(filename)))


def _put_back_placed(
    lines: list[Line], new: Sequence[str], inp: IndexInput, eol: str
) -> dict[str, int]:
    """Insert the pointers of the `new` files that have a place (a restore) there; the files
    placed and where. Of the person's lines, only a missing final ending changes."""
    placed: dict[str, int] = {}
    for filename in new:
        place = inp.placements.get(filename)
        at = placed_at(lines, place) if place is not None else None
        if at is None:
            continue
        if at > 0 and not lines[at - 1].eol:
            lines[at - 1].eol = eol
        lines.insert(at, _new_pointer(filename, inp, eol))
        placed[filename] = at
    return placed


def _finish(lines: list[Line], had_final_newline: bool, eol: str) -> str:
    if not lines:
        return ""
    last = lines[-1]
    if had_final_newline and not last.eol:
        last.eol = eol
    elif not had_final_newline and last.content:
        # Keep "no final newline"; but a blank last line keeps its ending, or it would vanish.
        last.eol = ""
    for line in lines[:-1]:
        if not line.eol:
            line.eol = eol
    return "".join(line.text for line in lines)


def _joined(lines: Sequence[Line], had_final_newline: bool, eol: str) -> str:
    """`_finish`'s text of `lines`, which are left as they are (no copy of each to change)."""
    if not lines:
        return ""
    last = lines[-1]
    last_eol = (last.eol or eol) if had_final_newline else ("" if last.content else last.eol)
    parts = [ln.content + (ln.eol or eol) for ln in itertools.islice(lines, len(lines) - 1)]
    parts.append(last.content + last_eol)
    return "".join(parts)


def update_index(inp: IndexInput) -> IndexEdit:
    """Apply DESIGN §3's incremental rules to the index texts; return the new texts and why."""
    return edit_lines(inp)[0]


@dataclass(slots=True)
class SomeArchiveLines:
    """Some of the archive's lines, in order, and what the edit needs to know of the whole."""

    lines: list[Line]
    exists: bool
    eol: str | None  # its dominant line ending; None when it holds no line
    final_newline: bool


@dataclass(slots=True)
class _Work:
    """The edit's working state: both files' lines as each step leaves them."""

    inp: IndexInput
    edit: IndexEdit
    main_text: str
    blank_main: bool
    eol: str
    main_final_nl: bool
    main: list[Line]
    arch_eol: str
    arch: list[Line] = field(default_factory=list)
    archive_exists: bool = False
    arch_final_nl: bool = True
    # Lines hidden by a construct (a comment block, stripped frontmatter): kept as they are,
    # and none indexes a memory. Known by identity, which each step's filtering keeps.
    shadow: dict[int, Hidden] = field(default_factory=dict)
    seen_view: View | None = None
    rewrote: dict[int, str] = field(default_factory=dict)  # id of a line rewritten -> before
    had_archive: bool = False


def edit_lines(
    inp: IndexInput, some: SomeArchiveLines | None = None
) -> tuple[IndexEdit, list[Line]]:
    """`update_index`, also returning the archive's final lines.

    `some`: only the archive lines a change can affect, instead of `inp.archive` (index_held's
    edit); the returned edit's `archive` is then the text of those lines only.
    """
    work = _start(inp, some)
    _drop_gone(work)
    _follow_renames(work)
    _collapse_duplicates(work)
    _add_new(work)
    _demote_over_budget(work)
    _render(work, some)
    return work.edit, work.arch


def _start(inp: IndexInput, some: SomeArchiveLines | None) -> _Work:
    """Both files as lines, their line endings, and the lines the agent cannot see."""
    main_text = inp.main or ""
    blank_main = not main_text.strip()
    eol = dominant_eol(main_text) if main_text else "\n"
    final_nl = main_text.endswith("\n") if main_text else True
    main = split_lines(main_text) if not blank_main else []
    edit = IndexEdit(main=inp.main, archive=inp.archive)
    work = _Work(inp, edit, main_text, blank_main, eol, final_nl, main, eol)
    if some is not None:
        work.arch, work.archive_exists = some.lines, some.exists
        work.arch_eol, work.arch_final_nl = some.eol or eol, some.final_newline
    elif inp.archive is not None:
        arch_text = inp.archive
        work.arch, work.archive_exists = split_lines(arch_text), True
        if arch_text:
            work.arch_eol, work.arch_final_nl = dominant_eol(arch_text), arch_text.endswith("\n")
        if not has_frontmatter(arch_text):
            # An archive from before memoryd wrote one gets its frontmatter, once.
            work.arch = [*archive_frontmatter(inp.heading, work.arch_eol), *work.arch]
    work.had_archive = work.archive_exists
    if work.main and ("<!--" in main_text or main_text.startswith("---")):
        work.seen_view = view_of(main_text, inp.budget, inp.view)
        lines = work.main
        hidden = [(lines[n], why) for n, why in work.seen_view.construct.items() if n < len(lines)]
        work.shadow = {id(line): why for line, why in hidden}
    return work


def _drop_gone(work: _Work) -> None:
    """1. Pointer lines of gone files go; dead and invalid links are reported and kept."""
    inp, edit, shadow = work.inp, work.edit, work.shadow

    def keep(line: Line) -> bool:
        link = line.link
        if link is None or id(line) in shadow:
            return True
        if link.kind is LinkKind.INVALID:
            edit.invalid_links.append(link.raw)
            return True
        if link.kind is not LinkKind.LOCAL or link.target in inp.present:
            return True
        if link.target in inp.seen:
            edit.removed.append(link.target)
            return False
        edit.dead_links.append(link.target)
        return True

    work.main = [line for line in work.main if keep(line)]
    work.arch = [line for line in work.arch if keep(line)]


def _memory_pointers(work: _Work) -> list[tuple[Line, str]]:
    """The visible pointer lines of both files to a memory file, with the memory each names."""
    memories, shadow, local = work.inp.memories, work.shadow, LinkKind.LOCAL
    return [
        (line, link.target)
        for line in (*work.main, *work.arch)
        if (link := line.link) is not None
        and link.kind is local
        and link.target in memories
        and id(line) not in shadow
    ]


def _follow_renames(work: _Work) -> None:
    """2. A line exactly as memoryd would have written it from the previous name/description
    follows the file's new name/description; a person's wording is never touched."""
    inp = work.inp
    if not inp.seen:
        return  # nothing memoryd saw before: nothing to follow
    for line, target in _memory_pointers(work):
        entry = inp.memories[target]
        prev = inp.seen.get(target)
        if prev is None or prev == (entry.name, entry.description):
            continue
        if line.content == render_pointer(entry.filename, prev[0], prev[1], inp.separator):
            work.rewrote[id(line)] = line.content
            line.content = render_pointer(
                entry.filename, entry.name, entry.description, inp.separator
            )
            work.edit.rewritten.append(entry.filename)


def _collapse_duplicates(work: _Work) -> None:
    """3. Duplicate pointers to one file collapse: memoryd's own line (the one its state
    recorded) loses to any other, and among the others the first wins (MEMORY.md before the
    archive). The record names the line left if memoryd wrote it, else nothing. A hidden line
    takes no part: it is the person's and stays."""
    groups: dict[str, list[Line]] = {}
    for line, target in _memory_pointers(work):
        groups.setdefault(target, []).append(line)
    losers: set[int] = set()
    edit, rewrote = work.edit, work.rewrote
    for target, group in groups.items():
        record = work.inp.own.get(target)
        if len(group) < 2 and record is None and id(group[0]) not in rewrote:
            continue  # the agent's one line: nothing to decide, nothing to record
        mine = [_is_generated(rewrote.get(id(ln), ln.content), record) for ln in group]
        at = next((i for i, m in enumerate(mine) if not m), 0)
        winner = group[at]
        for ln in group:
            if ln is not winner:
                losers.add(id(ln))
                edit.collapsed.append(target)
        owned = mine[at] or id(winner) in rewrote
        now_own = line_digest(winner.content) if owned else None
        if now_own != record:
            edit.own[target] = now_own
    if losers:
        work.main = [ln for ln in work.main if id(ln) not in losers]
        work.arch = [ln for ln in work.arch if id(ln) not in losers]


def _indexed(work: _Work) -> set[str]:
    """The files a visible pointer of either file names."""
    indexed = {
        ln.link.target
        for ln in (*work.main, *work.arch)
        if ln.link is not None and ln.link.kind is LinkKind.LOCAL and id(ln) not in work.shadow
    }
    if "\r" in work.main_text:  # a pointer after a lone CR is one the agent reads (cr_links)
        for ln in work.main:
            if "\r" in ln.content:
                hiding = work.seen_view if id(ln) in work.shadow else None
                indexed.update(link.target for link in cr_visible(ln.content, hiding))
    return indexed


def _add_new(work: _Work) -> None:
    """4. New memory files past their grace get a pointer after the last pointer line (one
    the agent can see); so does a memory whose only pointers are hidden."""
    inp, edit = work.inp, work.edit
    indexed = _indexed(work)
    unindexed = sorted(set(inp.memories) - indexed)
    for ln in work.main:
        why = work.shadow.get(id(ln))
        link = ln.link
        if why is not None and link is not None and link.target in inp.memories.keys() - indexed:
            edit.shadowed.setdefault(link.target, why)
    new = [f for f in unindexed if f in inp.ready]
    edit.waiting = [f for f in unindexed if f not in inp.ready]
    if not new:
        return
    edit.added = new
    # A restored pointer goes back where it was, when that place is still there.
    placed = {} if work.blank_main else _put_back_placed(work.main, new, inp, work.eol)
    added = [_new_pointer(f, inp, work.eol) for f in new if f not in placed]
    if added:
        _insert_new(work, added)


def _insert_new(work: _Work, added: list[Line]) -> None:
    eol, lines = work.eol, work.main
    if work.blank_main:
        work.main = [Line(f"# {work.inp.heading} Memory", eol), Line("", eol), *added]
        work.main_final_nl = True
        return
    # After the last pointer to a file of this dir (not in a "## Links" section, say).
    last = _last_pointer(work, local=True)
    if last is None:
        last = _last_pointer(work, local=False)
    if last is None:
        if lines and not lines[-1].eol:
            lines[-1].eol = eol
        if lines and lines[-1].content.strip():
            lines.append(Line("", eol))
        lines.extend(added)
        return
    if not lines[last].eol:
        lines[last].eol = eol
    lines[last + 1 : last + 1] = added


def _last_pointer(work: _Work, *, local: bool) -> int | None:
    """The last visible pointer line of MEMORY.md (`local`: to a file of this dir)."""
    return max(
        (
            i
            for i, ln in enumerate(work.main)
            if ln.link is not None
            and (not local or ln.link.kind is LinkKind.LOCAL)
            and id(ln) not in work.shadow
        ),
        default=None,
    )


# --- 5. the budget ------------------------------------------------------------------------------
def _with_trailer(work: _Work, lines: list[Line], force: bool = False) -> list[Line]:
    """MEMORY.md's lines with one trailer line to the archive (when there is one), counting
    all memories."""
    inp, eol = work.inp, work.eol
    total = len(inp.memories) if inp.total is None else inp.total
    trailer_at = [i for i, ln in enumerate(lines) if TRAILER.match(ln.content)]
    if not trailer_at:
        if not (work.archive_exists or work.edit.demoted or force):
            return lines
        out = list(lines)
        if out and not out[-1].eol:
            out[-1] = Line(out[-1].content, eol, out[-1].link)
        if out and out[-1].content.strip():
            out.append(Line("", eol))
        out.append(Line(TRAILER_TEXT.format(n=total), eol))
        return out
    out = [ln for i, ln in enumerate(lines) if i == trailer_at[0] or i not in trailer_at]
    first = out[trailer_at[0]]
    match = TRAILER.match(first.content)
    if match and int(match.group(1)) != total:
        out[trailer_at[0]] = Line(TRAILER_TEXT.format(n=total), first.eol)
    return out


def _render_main(work: _Work, lines: list[Line], force_trailer: bool = False) -> str:
    return _joined(_with_trailer(work, lines, force_trailer), work.main_final_nl, work.eol)


def _demote_over_budget(work: _Work) -> None:
    """5. Budget: demote the oldest eligible entries into the archive while over the window."""
    inp = work.inp
    first_text = _render_main(work, work.main) if inp.budget.mode != "never" and work.main else ""
    if not first_text or fits_view(
        first_text,
        view_of(first_text, inp.budget, inp.view),
        inp.budget,
        target=inp.budget.mode == "target",
    ):
        return
    work.main = _split_lone_crs(work.main, work.shadow, work.eol)
    demotion = _Demotion.of(work)
    demotion.run()
    demoted_at = demotion.demoted_at
    if demoted_at:
        moved = [ln for i, ln in enumerate(work.main) if i in demoted_at]
        work.main = [ln for i, ln in enumerate(work.main) if i not in demoted_at]
        work.arch = _append_to_archive(
            work.arch, moved, inp.heading, inp.today, work.arch_eol, work.archive_exists
        )
        work.arch_final_nl = True
        work.archive_exists = True


MAX_ROUNDS = 10  # measurements of MEMORY.md while demoting (each after an estimate fell short)


@dataclass(slots=True)
class _Demotion:
    """The pointers that may go, oldest first, taken until MEMORY.md fits."""

    work: _Work
    queue: Iterator[tuple[float, str, int]]
    strict: bool  # the soft target (else the agent's window)
    later: list[list[tuple[float, str, int]]]
    demoted_at: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, work: _Work) -> "_Demotion":
        """(age, file, where) of the pointers that may go, oldest first. Those changed within
        keep_recent go last, and only while the agent's window is exceeded (never for the soft
        target): DESIGN amendments, "Visibility over recency"."""
        inp = work.inp
        older: list[tuple[float, str, int]] = []
        recent: list[tuple[float, str, int]] = []
        for index, ln in enumerate(work.main):
            link = ln.link
            if link is None or link.kind is not LinkKind.LOCAL or id(ln) in work.shadow:
                continue
            mem = inp.memories.get(link.target)
            if mem is not None and mem.type != "user":
                young = inp.now - mem.age_ts <= inp.budget.keep_recent
                (recent if young else older).append((mem.age_ts, link.target, index))
        older.sort()
        recent.sort()
        return cls(work, iter(older), inp.budget.mode == "target", [recent])

    def run(self) -> None:
        """Subtract each demoted line from one measurement instead of re-rendering per line
        (quadratic at 10,000); then measure exactly, going on if the estimate fell short."""
        work, budget = self.work, self.work.inp.budget
        for rounds in range(MAX_ROUNDS):
            kept = [ln for i, ln in enumerate(work.main) if i not in self.demoted_at]
            text = _render_main(work, kept, force_trailer=True)
            view = view_of(text, budget, work.inp.view)
            if fits_view(text, view, budget, target=self.strict) or rounds == MAX_ROUNDS - 1:
                return
            # Over 4 MiB the agent loads nothing: estimate from the raw text (never less).
            m = measure(text) if view.too_big else measure_view(text, view)
            if not self._take(view, m) and not self._next_queue():
                return

    def _next_queue(self) -> bool:
        """Go on with the recent pointers, for the window only; False: none left."""
        if not (self.later and self.later[-1]):
            return False
        self.queue, self.strict = iter(self.later.pop()), False
        return True

    def _take(self, view: View, m: Measure) -> bool:
        """Demote from the queue until the estimate fits; whether any line was taken. While
        the line count alone is over the window, lines are taken in bulk and their size
        subtracted in one go (one encode, not one per line; the sums are the same)."""
        work, budget, eol = self.work, self.work.inp.budget, self.work.eol
        lines_left, chars, size = m.lines, m.chars, m.bytes
        pending: list[Line] = []
        progressed = False
        if not view.folded and lines_left > budget.max_lines + 1:
            # Each line takes one off the count: those that leave it still over are bulk.
            bulk = list(itertools.islice(self.queue, lines_left - budget.max_lines - 1))
            self._demote(bulk, pending)
            lines_left -= len(bulk)
            progressed = bool(bulk)
        for item in self.queue:
            line = work.main[item[2]]
            self._demote([item], pending)
            progressed = True
            lines_left -= 1 + (line.content.count("\r") if view.folded else 0)
            if lines_left > budget.max_lines:
                continue
            contents = "".join([ln.content for ln in pending])
            ends = len(pending) if view.folded else sum(len(ln.eol or eol) for ln in pending)
            chars -= utf16_len(contents) + ends
            size -= len(contents.encode("utf-8")) + len(eol) * len(pending)
            pending.clear()
            if fits(Measure(lines_left, chars, size), budget, target=self.strict):
                break
        return progressed

    def _demote(self, items: Sequence[tuple[float, str, int]], pending: list[Line]) -> None:
        self.demoted_at.update(index for _, _, index in items)
        self.work.edit.demoted.extend(target for _, target, _ in items)
        pending.extend(self.work.main[index] for _, _, index in items)


def _render(work: _Work, some: SomeArchiveLines | None) -> None:
    """The texts of both files as the steps left them, measured against the window."""
    inp, edit = work.inp, work.edit
    if work.main:
        edit.main = _render_main(work, work.main)
    else:
        edit.main = inp.main if work.blank_main else ""
    if work.had_archive or edit.demoted:
        edit.archive = _finish(work.arch, work.arch_final_nl, work.arch_eol)
        if some is None:
            edit.archive_links = _links_as_written(work.arch, {*edit.added, *edit.rewritten})
    else:
        edit.archive = None
    if edit.main is not None:
        view = view_of(edit.main, inp.budget, inp.view)
        final = measure_view(edit.main, view)
        edit.fits_window = view.fits(inp.budget.max_lines, inp.budget.max_chars)
        if final.bytes > inp.budget.target_bytes or not edit.fits_window:
            edit.over_budget = final
            # Within the window no line is past it (the common case: over the soft target).
            edit.outside = (
                [] if edit.fits_window else outside_window(edit.main, inp.budget, view=view)
            )
    if edit.dead_links and edit.main is not None and view_reshaped(work.main_text, edit.main):
        # Dead links are those of the index as written (the edit may hide or reveal lines:
        # removing a first pointer above a `---` line makes the rest frontmatter).
        dead = {link.target for link in visible_local_links(edit.main, inp.view)}
        dead.update(ln.link.target for ln in work.arch if ln.link is not None)
        edit.dead_links = [t for t in edit.dead_links if t in dead]


def _split_lone_crs(lines: list[Line], shadow: Mapping[int, Hidden], eol: str) -> list[Line]:
    """`lines`, each holding a lone CR (not hidden) split into the lines the agent reads, so
    that their pointers can be demoted one by one (whole, they stayed past the window)."""
    if not any("\r" in line.content for line in lines):
        return lines
    out: list[Line] = []
    for line in lines:
        if "\r" not in line.content or id(line) in shadow:
            out.append(line)
            continue
        pieces = line.content.split("\r")
        out.extend(Line(piece, eol, parse_line(piece)[2]) for piece in pieces[:-1])
        out.append(Line(pieces[-1], line.eol, parse_line(pieces[-1])[2]))
    return out


def _links_as_written(lines: Sequence[Line], rendered: Set[str]) -> tuple[Link, ...] | None:
    """`local_links` of the text `lines` join into, from the links the lines carry (a line
    parsed from the text read is as read). Lines the edit wrote (the pointers of `rendered`
    files, any line with `](` but no link) are parsed again: one reading back otherwise, or
    holding a line break, gives None (the verification parses the text)."""
    out: list[Link] = []
    for line in lines:
        if "\n" in line.content or "\r" in line.content:
            return None  # a made line that is more than one once written (none should be)
        link = line.link
        made = link.target in rendered if link is not None else "](" in line.content
        if made and parse_line(line.content)[2] != link:
            return None
        if link is not None and link.kind is LinkKind.LOCAL:
            out.append(link)
    return tuple(out)


def view_reshaped(before: str, after: str) -> bool:
    """Whether an edit may have changed which MEMORY.md lines the agent cannot see: the text
    now starts (or no longer starts) with a `---` line, or its comment markers changed."""
    if before.startswith("---") != after.startswith("---"):
        return True
    return (before.count("<!--"), before.count("-->")) != (after.count("<!--"), after.count("-->"))


def archive_frontmatter(heading: str, eol: str) -> list[Line]:
    """The archive's frontmatter: Claude Code lists the archive as a memory and reads it on
    demand by its description. Values are JSON strings (a `:` or `#` cannot break them); a
    `---` in the name would end the block for Claude Code, so it becomes `--`."""
    project = re.sub(r"-{3,}", "--", " ".join(heading.split()))
    description = (
        f"Archived index entries for {project}: pointers to older memories, moved out of "
        "MEMORY.md to keep it within what the agent loads. Search here for a topic "
        "MEMORY.md does not list."
    )
    return [
        Line("---", eol),
        Line(f"name: {json.dumps(f'{project} memory archive', ensure_ascii=False)}", eol),
        Line(f"description: {json.dumps(description, ensure_ascii=False)}", eol),
        Line("---", eol),
    ]


def has_frontmatter(text: str) -> bool:
    """Whether an archive's text starts with a frontmatter block (its own or a person's)."""
    return text.removeprefix("\ufeff").startswith("---")


def _append_to_archive(
    arch_lines: list[Line],
    moved: Sequence[Line],
    heading: str,
    today: date | None,
    eol: str,
    exists: bool,
) -> list[Line]:
    out = list(arch_lines)
    if not exists:
        out = [
            *archive_frontmatter(heading, eol),
            Line(f"# {heading} Memory Archive", eol),
            Line("", eol),
            Line("Entries moved out of MEMORY.md to keep it within what the agent loads.", eol),
        ]
    if out and not out[-1].eol:
        out[-1].eol = eol
    stamp = f"{today.isoformat()} " if today is not None else ""
    headings = [i for i, ln in enumerate(out) if DEMOTED_HEADING.match(ln.content)]
    if headings:
        match = DEMOTED_HEADING.match(out[headings[-1]].content)
        assert match is not None
        last_is_today = (f"{match.group(1)} " if match.group(1) else "") == stamp and all(
            ln.link is not None or not ln.content.strip() for ln in out[headings[-1] + 1 :]
        )
        if last_is_today:
            count = int(match.group(2)) + len(moved)
            # Changed in place, so an edit restricted to some lines knows where it came from.
            out[headings[-1]].content = f"## Moved from MEMORY.md {stamp}({count})"
            out[headings[-1]].eol = eol
            while out and not out[-1].content.strip():
                out.pop()
            out.extend(Line(ln.content, eol, ln.link) for ln in moved)
            return out
    if out and out[-1].content.strip():
        out.append(Line("", eol))
    out.append(Line(f"## Moved from MEMORY.md {stamp}({len(moved)})", eol))
    out.extend(Line(ln.content, eol, ln.link) for ln in moved)
    return out
