"""MEMORY.md as text: pointer lines, line-level edits, budget and archive. Pure: text in, text out.

Only pointer lines are memoryd's to touch; every other line belongs to the person and is kept
byte-for-byte (order, CRLF, a missing final newline). See DESIGN §3.
"""

import functools
import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from urllib.parse import unquote

from memoryd.agentview import Hidden, View, ViewKind, agent_view
from memoryd.conflicts import HINT as CONFLICT_HINT
from memoryd.conflicts import conflict_line, conflict_message

INDEX_NAME = "MEMORY.md"
ARCHIVE_NAME = "MEMORY-ARCHIVE.md"
PREV_NAME = ".MEMORY.md.prev"
MANAGE_MARK = "<!-- memoryd: manage -->"
OFF_MARK = "<!-- memoryd: off -->"

POINTER = re.compile(r"^\s*[-*]\s+\[(.*?)\]\(([^()\s]+)\)")
TRAILER = re.compile(
    r"^> (\d+) memory files? total\. Every file is indexed exactly once across this file and "
    r"\[MEMORY-ARCHIVE\.md\]\(MEMORY-ARCHIVE\.md\)"
)
TRAILER_TEXT = (
    "> {n} memory files total. Every file is indexed exactly once across this file and "
    "[MEMORY-ARCHIVE.md](MEMORY-ARCHIVE.md); read the archive when a topic is not listed here."
)
# Dated, or not in a git work tree (the same bytes on every machine, every day).
DEMOTED_HEADING = re.compile(r"^## Moved from MEMORY\.md (?:(\d{4}-\d{2}-\d{2}) )?\((\d+)\)\s*$")
_SEPARATOR = re.compile(r"^\s*(?:—|–|--|-)\s*")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# `.`, `/` and NUL never need encoding in a basename: encoded, they can only hide a traversal.
# (An encoded `\` can stand for a real backslash in a name; see the decoded check below.)
_ENCODED_TRAVERSAL = re.compile(r"%(?:2e|2f|00)", re.IGNORECASE)
# Characters that look like `.`, `/` or `\` but are not, used to smuggle traversal past checks.
_LOOKALIKES = frozenset("\uff0e\uff0f\uff3c\u2215\u2044\u2024\u3002\ufe52\u29f8\u29f9\u2216")
# Bytes a link target cannot hold raw under the pointer pattern, or that markdown would misread.
# `:` would read as a URL scheme and `?` as a query; a leading `~` is encoded too (below).
_ENCODE = {c: f"%{ord(c):02X}" for c in "%()[]<>#?:\\ \t\r\n\x0b\x0c"}


class LinkKind(StrEnum):
    LOCAL = "local"  # a basename inside the memory dir
    ELSEWHERE = "elsewhere"  # a subfolder, an anchor, a web URL: never touched
    INVALID = "invalid"  # leaves the folder or is disguised: reported, never opened


@dataclass(frozen=True, slots=True)
class Link:
    raw: str
    target: str  # decoded basename for LOCAL links, else the raw text
    kind: LinkKind


def encode_target(filename: str) -> str:
    """Percent-encode what the pointer pattern or markdown cannot carry (spaces, parens, ...)."""
    if filename.isprintable() and _ENCODE.keys().isdisjoint(filename) and filename[:1] != "~":
        return filename  # nearly every name: two C-level checks instead of a loop per character
    encoded = "".join(
        _ENCODE.get(c, c) if c.isprintable() or c in _ENCODE else _utf8_escaped(c) for c in filename
    )
    return "%7E" + encoded[1:] if encoded.startswith("~") else encoded


def _utf8_escaped(char: str) -> str:
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


# Names made of these alone always link back to themselves (nearly every memory's name): no
# need to build and classify the link (4 µs a name, 40 ms of a 10,000-file cold scan).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def linkable(filename: str) -> bool:
    """Whether a pointer line can name this file so that it reads back as this very file
    (a name holding a look-alike of `.`, `/` or `\\` cannot: such links are refused as tricks)."""
    if _PLAIN_NAME.fullmatch(filename):
        return True
    link = classify_link(encode_target(filename))
    return link.kind is LinkKind.LOCAL and link.target == filename


def classify_link(raw: str) -> Link:
    """What a pointer line's link target is: a file in the dir, somewhere else, or a trick."""
    if _PLAIN_NAME.fullmatch(raw):
        # A plain name is always a file in the dir (nearly every pointer's): one C-level
        # match, where a fresh process would classify each of an archive's 10,000 anew.
        return Link(raw, raw, LinkKind.LOCAL)
    return _classify_link(raw)


@functools.lru_cache(maxsize=65536)
def _classify_link(raw: str) -> Link:
    if raw.startswith("#"):
        return Link(raw, raw, LinkKind.ELSEWHERE)
    if raw.lower().startswith(("http://", "https://", "mailto:")):
        return Link(raw, raw, LinkKind.ELSEWHERE)
    if (
        _SCHEME.match(raw)
        or raw.startswith(("/", "~"))
        or "\\" in raw
        or _ENCODED_TRAVERSAL.search(raw)
        or not _LOOKALIKES.isdisjoint(raw)
    ):
        return Link(raw, raw, LinkKind.INVALID)
    path = raw.split("#", 1)[0].split("?", 1)[0]
    decoded = unquote(path)
    if (
        ".." in re.split(r"[/\\]", decoded)
        or not _LOOKALIKES.isdisjoint(decoded)
        or "\0" in decoded
    ):
        return Link(raw, raw, LinkKind.INVALID)
    if "/" in decoded or "#" in raw or "?" in raw or decoded in ("", "."):
        return Link(raw, raw, LinkKind.ELSEWHERE)
    return Link(raw, decoded, LinkKind.LOCAL)


@dataclass(slots=True)
class Line:
    content: str  # without its line ending
    eol: str  # "\n", "\r\n" or "" (only the last line may lack one)
    link: Link | None = None
    origin: int = -1  # where an edit restricted to some lines took it from (index_held)

    @property
    def text(self) -> str:
        return self.content + self.eol


ParsedLine = tuple[str, str, Link | None]


@functools.lru_cache(maxsize=2)  # the two texts of a pass; a big one costs MBs
def _parse_lines(text: str) -> tuple[ParsedLine, ...]:
    """The lines of an index text, classified; cached, since the same text is read each pass.

    What `parse_line` gives for each line, in one loop: at 10,000 lines a call per line and a
    regex split were half of the parse. A pointer line holds `](`: no other is matched."""
    if not text:
        return ()
    # Split on "\n" only: str.splitlines would also split on \x0b, \x1c, U+2028 and others.
    parts = text.split("\n")
    tail = parts.pop()  # after the last "\n": "" when the text ends with one
    match, classify = POINTER.match, classify_link
    out: list[ParsedLine] = []
    append = out.append
    for part in parts:
        if part[-1:] == "\r":
            content, eol = part[:-1], "\r\n"
        else:
            content, eol = part, "\n"
        found = match(content) if "](" in content else None
        append((content, eol, classify(found.group(2)) if found else None))
    if tail:
        found = match(tail) if "](" in tail else None
        append((tail, "", classify(found.group(2)) if found else None))
    return tuple(out)


def parse_line(chunk: str) -> ParsedLine:
    """One line with its ending: its content, the ending, its pointer link if it is one."""
    if chunk.endswith("\r\n"):
        content, eol = chunk[:-2], "\r\n"
    elif chunk.endswith("\n"):
        content, eol = chunk[:-1], "\n"
    else:
        content, eol = chunk, ""
    match = POINTER.match(content)
    return content, eol, classify_link(match.group(2)) if match else None


def split_lines(text: str) -> list[Line]:
    """Fresh, mutable Line objects (the edit changes them in place; the cache stays intact)."""
    return [Line(content, eol, link) for content, eol, link in _parse_lines(text)]


def join_lines(lines: Iterable[Line]) -> str:
    return "".join(line.text for line in lines)


def dominant_eol(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf >= text.count("\n") - crlf else "\n"


# POINTER over a whole text at once: one C-level scan instead of a Python loop per line. A
# line ends at "\n" only, as split_lines reads it, so its leading whitespace may hold a lone
# "\r"; it never holds a "\n": no match spans two lines.
_POINTER_IN_TEXT = re.compile(r"^[^\S\n]*[-*][^\S\n]+\[(.*?)\]\(([^()\s]+)\)", re.MULTILINE)
_TRAILER_IN_TEXT = re.compile(TRAILER.pattern, re.MULTILINE)


@functools.lru_cache(maxsize=2)  # the two texts of a pass; a big one costs MBs
def local_links(text: str) -> tuple[Link, ...]:
    """The LOCAL links of an index text's pointer lines, in order (cached per text)."""
    links = (classify_link(m.group(2)) for m in _POINTER_IN_TEXT.finditer(text))
    return tuple(link for link in links if link.kind is LinkKind.LOCAL)


_LONE_CR = re.compile(r"\r(?!\n)")


def cr_links(text: str) -> list[Link]:
    """The LOCAL links of pointers that follow a lone `\r` inside a line of `text`.

    A line split on `\n` only is what Claude Code's window counts (with no comment removed,
    a lone-CR file is one line to it), but before sending the text it turns every `\r` into
    `\n`: the agent reads each piece as a line of its own, and a pointer in one indexes its
    memory. memoryd keeps such a line whole (its bytes are the person's)."""
    if "\r" not in text or not _LONE_CR.search(text):
        return []
    out = []
    for line in text.split("\n"):
        for piece in line.removesuffix("\r").split("\r")[1:]:
            match = POINTER.match(piece)
            if match:
                link = classify_link(match.group(2))
                if link.kind is LinkKind.LOCAL:
                    out.append(link)
    return out


def _cr_visible(content: str, hiding: View | None) -> list[Link]:
    """`cr_links(content)`; of a line a construct hides (`hiding`: the view that says so),
    only those the agent's loaded text holds: the construct that starts the line (a comment)
    may end before a later piece of it."""
    links = cr_links(content)
    if hiding is None or not links:
        return links
    loaded = set(pointer_targets(hiding.loaded))
    return [link for link in links if link.target in loaded]


def release_parsed() -> None:
    """Drop the cached parses of the last texts and their links: at 10,000 memories they hold
    ~12 MB, which a long-running process should not keep between passes."""
    _parse_lines.cache_clear()
    local_links.cache_clear()
    _view.cache_clear()
    _classify_link.cache_clear()


@dataclass(frozen=True, slots=True)
class PointerLine:
    target: str  # the decoded basename of a LOCAL link
    content: str  # the whole line, without its ending


def pointer_lines(text: str) -> Iterator[PointerLine]:
    """The pointer lines of an index text with a LOCAL link, in order, as `split_lines` reads
    them (content without its ending), without splitting the text into line objects."""
    for found in _POINTER_IN_TEXT.finditer(text):
        link = classify_link(found.group(2))
        if link.kind is LinkKind.LOCAL:
            start = found.start()
            end = text.find("\n", found.end())
            content = text[start:] if end < 0 else text[start:end].removesuffix("\r")
            yield PointerLine(link.target, content)


# A heading line (ATX: up to three spaces, one to six `#`, then a blank or the end).
HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class Place:
    """Where a pointer line sat in MEMORY.md, so that a restore can put it back there: the
    pointer line just before it under the same heading (None: it was the first there), and
    that heading's line (None: it sat above every heading)."""

    after: str | None
    heading: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"after": self.after, "heading": self.heading}

    @classmethod
    def of(cls, value: object) -> "Place | None":
        """A Place from a manifest's record, None when it has none or it is malformed (a
        manifest is a file anyone who can write the dir can plant: one line each, or nothing)."""
        if not isinstance(value, dict):
            return None
        after, heading = value.get("after"), value.get("heading")
        for text in (after, heading):
            if text is not None and (not isinstance(text, str) or "\n" in text or "\r" in text):
                return None
        return cls(after, heading)


def pointer_places(text: str, wanted: Set[str]) -> dict[str, Place]:
    """Where the first pointer line of each of `wanted` sits in an index text (see Place)."""
    out: dict[str, Place] = {}
    heading: str | None = None
    before: str | None = None
    for content, _, link in _parse_lines(text):
        if link is None and HEADING.match(content):
            heading, before = content, None
        elif link is not None:
            if link.kind is LinkKind.LOCAL and link.target in wanted:
                out.setdefault(link.target, Place(before, heading))
            before = content
    return out


def _placed_at(lines: Sequence[Line], place: Place) -> int | None:
    """Where a restored pointer goes back (an index into `lines`), or None for the usual rule
    (after the last pointer): after its old neighbour if that line is still there; else, under
    its heading, before the section's first pointer if it was the first there, or after the
    section's last line that is not blank; a heading gone (or none, with no neighbour left)
    is no place."""
    if place.after is not None:
        for i, line in enumerate(lines):
            if line.link is not None and line.content == place.after:
                return i + 1
    if place.heading is None:
        if place.after is not None:
            return None
        start = 0
    else:
        found = next(
            (i for i, ln in enumerate(lines) if ln.link is None and ln.content == place.heading),
            None,
        )
        if found is None:
            return None
        start = found + 1
    end = next(
        (
            i
            for i in range(start, len(lines))
            if lines[i].link is None
            and (HEADING.match(lines[i].content) or TRAILER.match(lines[i].content))
        ),
        len(lines),
    )
    if place.after is None:
        first = next((i for i in range(start, end) if lines[i].link is not None), None)
        if first is not None:
            return first
        if place.heading is None:
            return None
    # (The heading's own line is not blank: an empty section puts it right under its heading.)
    return max(i for i in range(start - 1, end) if lines[i].content.strip()) + 1


def pointer_targets(text: str) -> list[str]:
    """Decoded basenames of the LOCAL pointer lines of an index text, in order."""
    return [link.target for link in local_links(text)]


@dataclass(frozen=True, slots=True)
class Entry:
    """What the index needs to know about one parseable memory file."""

    filename: str
    name: str
    description: str
    type: str
    age_ts: float  # the newest of mtime and a frontmatter `modified` date, as a UNIX time


def render_pointer(filename: str, name: str, description: str, separator: str) -> str:
    # A `](` in the label would end the link there (the pointer pattern's label is the shortest
    # match), so the line would point elsewhere and the file would get a new pointer each pass.
    label = (name or filename.removesuffix(".md")).replace("](", "] (")
    line = f"- [{label}]({encode_target(filename)})"
    return f"{line}{separator}{description}" if description else line


# --- ownership ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ownership:
    managed: bool
    reason: str


def decide_ownership(
    main: str | None,
    archive: str | None,
    linked: Mapping[str, str],
    memory_files: Set[str],
    override: str = "auto",
    known: Set[str] | None = None,
    archive_targets: Set[str] | None = None,
    only_missing: Set[str] | None = None,
    arrived: Set[str] | None = None,
    as_left: bool = False,
) -> Ownership:
    """Is this index a list of pointers memoryd may edit? (DESIGN §3, "Whose index is it?").

    `known`: when memoryd managed this index at its last pass, the memory files it knew then.
    Files that arrived since are what the index should gain, so they do not count against
    ownership (a burst of new files must not turn a managed index into an unmanaged one);
    a person rewriting the index into something else still does. `archive_targets`: the
    archive's pointer targets when the caller holds them already (not re-read from its text).
    `only_missing`: when the caller knows that no other memory file can lack a pointer (the
    daemon, after a pass that gave every file one: only the changed and the waiting can).
    `arrived` (with `known`): the memory files not in `known`, from a caller that knows them
    without looking at every file. `as_left`: MEMORY.md is the file memoryd's last pass over
    this managed index left, so every pointer line in it is memoryd's own: managed.
    """
    for label, text in ((INDEX_NAME, main), (ARCHIVE_NAME, archive)):
        line = conflict_line(text) if text else None
        if line is not None:  # either side's pointers may be meant: none are taken
            return Ownership(False, f"{label} {conflict_message(line)}: {CONFLICT_HINT}")
    if main is not None and OFF_MARK in main:
        return Ownership(False, f"MEMORY.md holds {OFF_MARK}")
    if override == "off":
        return Ownership(False, "the config sets mode = off for this dir")
    if override == "manage":
        return Ownership(True, "the config sets mode = manage for this dir")
    if main is None or not main.strip():
        return Ownership(True, "MEMORY.md is missing or blank")
    if MANAGE_MARK in main:
        return Ownership(True, f"MEMORY.md holds {MANAGE_MARK}")
    if as_left:
        return Ownership(True, "MEMORY.md is as memoryd's last pass left it")
    # The files that count are those memoryd knew; the set of those that arrived since is
    # small, where a copy of the others would be 10,000 names on every daemon pass.
    # (`memory_files - known` would copy all of them first: dict views subtract that way.)
    if known is None:
        arrived = frozenset[str]()
    elif arrived is None:
        arrived = set(itertools.filterfalse(known.__contains__, memory_files))
    total = len(memory_files) - len(arrived)
    if known is not None and not total:
        return Ownership(True, "memoryd managed this index and every file since is new")
    if not total:
        return Ownership(True, "the dir has no memory files yet")
    # MEMORY.md's lines as the edit parses them (cached: the edit that follows takes them, so
    # a MEMORY.md of 10,000 lines at a first index is parsed once, not once more here).
    targets = {
        link.target
        for _, _, link in _parse_lines(main)
        if link is not None and link.kind is LinkKind.LOCAL
    }
    targets.update(link.target for link in cr_links(main))
    if archive is not None and archive_targets is None:
        targets.update(pointer_targets(archive))
    for name, text in linked.items():
        if name in targets or (archive_targets is not None and name in archive_targets):
            targets.update(pointer_targets(text))
    elsewhere = archive_targets if archive_targets is not None else frozenset()
    if only_missing is not None:
        uncovered = {
            f
            for f in only_missing
            if f in memory_files and f not in arrived and f not in targets and f not in elsewhere
        }
    else:
        uncovered = set(memory_files) - targets
        uncovered.difference_update(arrived)
        uncovered.difference_update(elsewhere)  # no copy of the archive's 10,000 targets
    covered = total - len(uncovered)
    if covered * 2 >= total:
        return Ownership(True, f"{covered} of {total} memory files have pointer lines")
    return Ownership(
        False,
        f"only {covered} of {total} memory files are pointer targets: this index is "
        f"hand-organised (add {MANAGE_MARK} to MEMORY.md to let memoryd manage it)",
    )


# --- budget ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Budget:
    max_lines: int = 200
    max_chars: int = 25_000  # UTF-16 code units, as the agent counts them
    target_bytes: int = 17_408
    mode: str = "hard"  # never | hard | target
    keep_recent: float = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Measure:
    lines: int
    chars: int
    bytes: int


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def measure(text: str) -> Measure:
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return Measure(lines, utf16_len(text), len(text.encode("utf-8")))


def fits(m: Measure, budget: Budget, *, target: bool) -> bool:
    ok = m.lines <= budget.max_lines and m.chars <= budget.max_chars
    return ok and (not target or m.bytes <= budget.target_bytes)


def view_of(text: str, budget: Budget, kind: ViewKind) -> View:
    """The agent's view of an index text under this budget's window (DESIGN §3, amended)."""
    return _view(text, budget.max_lines, budget.max_chars, kind)


@functools.lru_cache(maxsize=4)  # an edit looks at the same text more than once
def _view(text: str, max_lines: int, max_units: int, kind: ViewKind) -> View:
    return agent_view(text, kind, max_lines=max_lines, max_units=max_units)


def measure_view(text: str, view: View) -> Measure:
    """The window's measure of what the agent loads (not of the raw text: `measure`)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return Measure(view.lines, view.units, size)


def fits_view(text: str, view: View, budget: Budget, *, target: bool) -> bool:
    return view.fits(budget.max_lines, budget.max_chars) and (
        not target or measure_view(text, view).bytes <= budget.target_bytes
    )


def outside_window(
    text: str, budget: Budget, kind: ViewKind = ViewKind.AUTO, view: View | None = None
) -> list[str]:
    """Targets of pointer lines past the agent's window (line 200, 25,000 UTF-16 units, or
    the 4 MiB limit); those hidden in a comment or in frontmatter are not listed here."""
    view = view if view is not None else view_of(text, budget, kind)
    out: list[str] = []
    for number, line in enumerate(split_lines(text)):
        if line.link is None:
            continue
        why = view.hidden(number)
        if why is not None and not why.by_construct:
            out.append(line.link.target)
    return out


def visible_local_links(text: str, kind: ViewKind, budget: Budget | None = None) -> list[Link]:
    """The LOCAL links of the pointer lines the agent can see for what they hold (outside
    comments and stripped frontmatter; the window's cut does not count here)."""
    hides = "<!--" in text or text.startswith("---")
    view = view_of(text, budget or Budget(), kind) if hides else None
    if view is None or not view.construct:
        return [*local_links(text), *cr_links(text)]
    construct = view.construct
    out = []
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is not None and link.kind is LinkKind.LOCAL and number not in construct:
            out.append(link)
        if "\r" in line.content:
            hiding = view if number in construct else None
            out.extend(_cr_visible(line.content, hiding))
    return out


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
    # Memories whose only pointers in MEMORY.md the agent cannot see, and why (the hand-written
    # lines stay; each memory gets a visible pointer once past its grace).
    shadowed: dict[str, Hidden] = field(default_factory=dict)
    over_budget: Measure | None = None
    outside: list[str] = field(default_factory=list)
    fits_window: bool = True
    # What `IndexInput.own` becomes for the files whose lines the edit looked at: the digest of
    # the line memoryd now owns, or None (its line is gone, or lost to another). The pointers
    # the edit adds are not in it: see note_own.
    own: dict[str, str | None] = field(default_factory=dict)
    # `local_links(archive)`, known from the lines the archive was made of (no parse of the
    # whole archive again to verify it); None when not known (see _links_as_written). Derived
    # from `archive`: no part of what an edit is when two are compared (the twin tests).
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
    # How many memory files the dir holds, when `memories` carries only the ones an edit
    # restricted to changed files needs (index_held); None: len(memories).
    total: int | None = None
    # file -> line_digest of the pointer line memoryd itself wrote for it (DirState.own): only
    # that line is memoryd's; any other, however much it looks like memoryd's template, is
    # the agent's or a person's.
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
    """Take `edit`'s word on memoryd's own lines into `own` (see IndexInput.own), with the
    pointers it added: generated from the entry, except those of `restored` files (a line put
    back from the trash is as the agent wrote it). The names whose record changed."""
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
    """Insert the pointers of the `new` files that have a place (a restore) there, in place;
    the files placed and where. Only a line's missing final ending is added to a line that
    is there: every other byte of the person's text stays as it was."""
    placed: dict[str, int] = {}
    for filename in new:
        place = inp.placements.get(filename)
        at = _placed_at(lines, place) if place is not None else None
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
        # Keep "no final newline" as it was; but a blank last line would vanish without its
        # line ending, and a person's line outranks the missing newline.
        last.eol = ""
    for line in lines[:-1]:
        if not line.eol:
            line.eol = eol
    return join_lines(lines)


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


def edit_lines(
    inp: IndexInput, some: SomeArchiveLines | None = None
) -> tuple[IndexEdit, list[Line]]:
    """`update_index`, also returning the archive's final lines.

    `some`: only some of the archive's lines instead of `inp.archive` (ignored then): the edit
    of `index_held`, which looks only at the lines a change can affect. The returned edit's
    `archive` is then the text of those lines after the edit, not of the whole archive.
    """
    edit = IndexEdit(main=inp.main, archive=inp.archive)
    main_text = inp.main or ""
    blank_main = not main_text.strip()
    eol = dominant_eol(main_text) if main_text else "\n"
    main_final_nl = main_text.endswith("\n") if main_text else True
    main_lines = split_lines(main_text) if not blank_main else []
    if some is not None:
        arch_lines = some.lines
        archive_exists = some.exists
        arch_eol = some.eol or eol
        arch_final_nl = some.final_newline
    else:
        arch_text = inp.archive
        arch_lines = split_lines(arch_text) if arch_text is not None else []
        archive_exists = arch_text is not None
        arch_eol = dominant_eol(arch_text) if arch_text else eol
        arch_final_nl = arch_text.endswith("\n") if arch_text else True
        if arch_text is not None and not has_frontmatter(arch_text):
            # An archive from before memoryd wrote one gets its frontmatter (once: then it
            # has one). The held edit (index_held) refuses such an archive, so this runs.
            arch_lines = [*archive_frontmatter(inp.heading, arch_eol), *arch_lines]
    had_archive = archive_exists
    # Lines the agent cannot see for what the text holds (a comment block, stripped
    # frontmatter): hand-written, kept as they are, and no pointer of them indexes a memory.
    # They are known by identity, so the filtering below keeps the mark (and `hidden` keeps
    # them alive, so no line made later can take an identity over).
    shadow: dict[int, Hidden] = {}
    seen_view: View | None = None
    if main_lines and ("<!--" in main_text or main_text.startswith("---")):
        seen_view = view_of(main_text, inp.budget, inp.view)
        construct = seen_view.construct
        hidden = [(main_lines[n], why) for n, why in construct.items() if n < len(main_lines)]
        shadow = {id(line): why for line, why in hidden}

    # 1. Pointer lines of gone files go; dead and invalid links are reported and kept.
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

    main_lines = [line for line in main_lines if keep(line)]
    arch_lines = [line for line in arch_lines if keep(line)]

    # 2. A line exactly as memoryd would have written it from the previous name/description
    #    follows the file's new name/description; a person's wording is never touched.
    rewrote: dict[int, str] = {}  # id of a line rewritten -> its content before
    for line in (*main_lines, *arch_lines):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL or link.target not in inp.memories:
            continue
        if id(line) in shadow:
            continue
        entry = inp.memories[link.target]
        prev = inp.seen.get(link.target)
        if prev is None or prev == (entry.name, entry.description):
            continue
        if line.content == render_pointer(entry.filename, prev[0], prev[1], inp.separator):
            rewrote[id(line)] = line.content
            line.content = render_pointer(
                entry.filename, entry.name, entry.description, inp.separator
            )
            edit.rewritten.append(entry.filename)

    # 3. Duplicate pointers to one file collapse: memoryd's own line (the one its state
    #    recorded, not one that merely looks like its template) loses to any other, and among
    #    the others the first wins (MEMORY.md before the archive). The record follows: it
    #    names the line left if memoryd wrote it (a rewrite above included), else nothing.
    #    A hidden line takes no part: it is the person's and stays, and the visible pointer
    #    beside it is the one that indexes the memory for the agent.
    groups: dict[str, list[Line]] = {}
    for line in (*main_lines, *arch_lines):
        link = line.link
        if (
            link is not None
            and link.kind is LinkKind.LOCAL
            and link.target in inp.memories
            and id(line) not in shadow
        ):
            groups.setdefault(link.target, []).append(line)
    losers: set[int] = set()
    for target, group in groups.items():
        record = inp.own.get(target)
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
        main_lines = [ln for ln in main_lines if id(ln) not in losers]
        arch_lines = [ln for ln in arch_lines if id(ln) not in losers]

    # 4. New memory files past their grace get a pointer after the last pointer line (one
    #    the agent can see); so does a memory whose only pointers are hidden.
    indexed = {
        ln.link.target
        for ln in (*main_lines, *arch_lines)
        if ln.link is not None and ln.link.kind is LinkKind.LOCAL and id(ln) not in shadow
    }
    if "\r" in main_text:  # a pointer after a lone CR is one the agent reads (cr_links)
        for ln in main_lines:
            if "\r" in ln.content:
                hiding = seen_view if id(ln) in shadow else None
                indexed.update(link.target for link in _cr_visible(ln.content, hiding))
    unindexed = sorted(set(inp.memories) - indexed)
    for ln in main_lines:
        why = shadow.get(id(ln))
        link = ln.link
        if why is not None and link is not None and link.target in inp.memories.keys() - indexed:
            edit.shadowed.setdefault(link.target, why)
    new = [f for f in unindexed if f in inp.ready]
    edit.waiting = [f for f in unindexed if f not in inp.ready]
    if new:
        edit.added = new
        # A restored pointer goes back where it was, when that place is still there.
        placed = {} if blank_main else _put_back_placed(main_lines, new, inp, eol)
        new = [f for f in new if f not in placed]
        added = [_new_pointer(f, inp, eol) for f in new]
    if new:
        if blank_main:
            heading = Line(f"# {inp.heading} Memory", eol)
            main_lines = [heading, Line("", eol), *added]
            main_final_nl = True
        else:
            # After the last pointer to a file of this dir; links to the web or elsewhere
            # (a "## Links" section) are not where a new memory belongs.
            last_pointer = max(
                (
                    i
                    for i, ln in enumerate(main_lines)
                    if ln.link is not None
                    and ln.link.kind is LinkKind.LOCAL
                    and id(ln) not in shadow
                ),
                default=None,
            )
            if last_pointer is None:
                last_pointer = max(
                    (
                        i
                        for i, ln in enumerate(main_lines)
                        if ln.link is not None and id(ln) not in shadow
                    ),
                    default=None,
                )
            if last_pointer is None:
                if main_lines and not main_lines[-1].eol:
                    main_lines[-1].eol = eol
                if main_lines and main_lines[-1].content.strip():
                    main_lines.append(Line("", eol))
                main_lines.extend(added)
            else:
                if not main_lines[last_pointer].eol:
                    main_lines[last_pointer].eol = eol
                main_lines[last_pointer + 1 : last_pointer + 1] = added

    # 5. Budget: demote the oldest eligible entries into the archive while over the window.
    total = len(inp.memories) if inp.total is None else inp.total
    trailer_line = Line(TRAILER_TEXT.format(n=total), eol)

    def with_trailer(lines: list[Line], force: bool = False) -> list[Line]:
        trailer_at = [i for i, ln in enumerate(lines) if TRAILER.match(ln.content)]
        if not trailer_at:
            if not (archive_exists or edit.demoted or force):
                return lines
            out = list(lines)
            if out and not out[-1].eol:
                out[-1] = Line(out[-1].content, eol, out[-1].link)
            if out and out[-1].content.strip():
                out.append(Line("", eol))
            out.append(trailer_line)
            return out
        out = [ln for i, ln in enumerate(lines) if i == trailer_at[0] or i not in trailer_at]
        first = out[trailer_at[0]]
        match = TRAILER.match(first.content)
        if match and int(match.group(1)) != total:
            out[trailer_at[0]] = Line(TRAILER_TEXT.format(n=total), first.eol)
        return out

    def render_main(lines: list[Line], force_trailer: bool = False) -> str:
        return _joined(with_trailer(lines, force_trailer), main_final_nl, eol)

    target_mode = inp.budget.mode == "target"
    first_text = render_main(main_lines) if inp.budget.mode != "never" and main_lines else ""
    if first_text and not fits_view(
        first_text, view_of(first_text, inp.budget, inp.view), inp.budget, target=target_mode
    ):
        main_lines = _split_lone_crs(main_lines, shadow, eol)
        # (age, file, where) of the pointers that may go, oldest first: each line's entry is
        # looked up once (a generator of four lookups a line was a tenth of a first index).
        # Those changed within keep_recent go last, and only while the agent's window is
        # exceeded (never for the soft target): a newer pointer is never left where the
        # agent does not load it (DESIGN amendments, "Visibility over recency").
        older: list[tuple[float, str, int]] = []
        recent: list[tuple[float, str, int]] = []
        for index, ln in enumerate(main_lines):
            link = ln.link
            if link is None or link.kind is not LinkKind.LOCAL or id(ln) in shadow:
                continue
            mem = inp.memories.get(link.target)
            if mem is not None and mem.type != "user":
                young = inp.now - mem.age_ts <= inp.budget.keep_recent
                (recent if young else older).append((mem.age_ts, link.target, index))
        older.sort()
        recent.sort()
        demoted_at: set[int] = set()
        queue, strict, later = iter(older), target_mode, [recent]
        rounds = 0
        while True:
            # Subtract each demoted line from one measurement of the agent's view instead of
            # re-rendering per line (quadratic at 10,000 entries); then measure again exactly,
            # and go on only if the estimate fell short (trimmed edges, lone CRs).
            text = render_main(
                [ln for i, ln in enumerate(main_lines) if i not in demoted_at], force_trailer=True
            )
            view = view_of(text, inp.budget, inp.view)
            if fits_view(text, view, inp.budget, target=strict) or rounds > 8:
                break
            rounds += 1
            # Over 4 MiB the agent loads nothing: estimate from the raw text (never less).
            m = measure(text) if view.too_big else measure_view(text, view)
            lines_left, chars, size = m.lines, m.chars, m.bytes
            progressed = False
            # Lines demoted whose characters and bytes are not subtracted yet: while the line
            # count alone is over the window no estimate can fit, so they are subtracted in
            # one go once it is not (9,870 demoted lines at a first index: one encode, not
            # 20,000). The sums are the same either way.
            pending: list[Line] = []
            if not view.folded and lines_left > inp.budget.max_lines + 1:
                # Each line takes exactly one off the count: the lines after which it is still
                # over the window by more than one (the loop below goes on past them without a
                # look) are taken in one go; the loop takes the next one.
                bulk = list(itertools.islice(queue, lines_left - inp.budget.max_lines - 1))
                demoted_at.update(index for _, _, index in bulk)
                edit.demoted.extend(target for _, target, _ in bulk)
                pending.extend(main_lines[index] for _, _, index in bulk)
                lines_left -= len(bulk)
                progressed = bool(bulk)
            for _, target, index in queue:
                line = main_lines[index]
                demoted_at.add(index)
                edit.demoted.append(target)
                progressed = True
                lines_left -= 1 + (line.content.count("\r") if view.folded else 0)
                pending.append(line)
                if lines_left > inp.budget.max_lines:
                    continue
                contents = "".join([ln.content for ln in pending])
                ends = len(pending) if view.folded else sum(len(ln.eol or eol) for ln in pending)
                chars -= utf16_len(contents) + ends
                size -= len(contents.encode("utf-8")) + len(eol) * len(pending)
                pending.clear()
                estimate = Measure(lines_left, chars, size)
                if fits(estimate, inp.budget, target=strict):
                    break
            if not progressed:
                if not (later and later[-1]):
                    break
                queue, strict = iter(later.pop()), False  # the recent ones: for the window
        if demoted_at:
            moved = [ln for i, ln in enumerate(main_lines) if i in demoted_at]
            main_lines = [ln for i, ln in enumerate(main_lines) if i not in demoted_at]
            arch_lines = _append_to_archive(
                arch_lines, moved, inp.heading, inp.today, arch_eol, archive_exists
            )
            arch_final_nl = True
            archive_exists = True

    if main_lines:
        edit.main = render_main(main_lines)
    elif blank_main:
        edit.main = inp.main
    else:
        edit.main = ""
    if had_archive or edit.demoted:
        edit.archive = _finish(arch_lines, arch_final_nl, arch_eol)
        if some is None:
            edit.archive_links = _links_as_written(arch_lines, {*edit.added, *edit.rewritten})
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
    if edit.dead_links and edit.main is not None and view_reshaped(main_text, edit.main):
        # Dead links are reported for the index as written: one the edit's own change hid
        # (removing a first pointer above a `---` line makes the rest frontmatter) is no
        # pointer of the agent's any more, and one it revealed is one.
        dead = {link.target for link in visible_local_links(edit.main, inp.view)}
        dead.update(ln.link.target for ln in arch_lines if ln.link is not None)
        edit.dead_links = [t for t in edit.dead_links if t in dead]
    return edit, arch_lines


def _split_lone_crs(lines: list[Line], shadow: Mapping[int, Hidden], eol: str) -> list[Line]:
    """`lines`, each one holding a lone CR (outside a comment or frontmatter) as the lines
    the agent reads it as, ended by `eol` but the last: for an index over the agent's window,
    so that their pointers can go to the archive one by one (the agent counts each piece as
    a line; kept whole, such a line left its pointers past the window for good)."""
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
    """`local_links` of the text `lines` join into, from the links the lines carry: a line
    parsed from the text read carries what its content reads as, and its content is as read
    (only line endings change, and a line parses on its own). Lines the edit wrote itself
    (the pointers of `rendered` files, and any other line with `](` but no link) are parsed
    again: if one reads back as another link, or a line holds a line break, None, and the
    verification parses the text."""
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
    """The frontmatter the archive starts with: Claude Code's scan of the memory dir lists
    the archive as a memory, and picks memories to read on demand by their description.

    The values are YAML double-quoted (JSON) strings, so a `:` or a `#` in the project's name
    cannot break them; a run of three dashes in the name would end the block early for Claude
    Code (it closes frontmatter at the first `---` anywhere), so it becomes two."""
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


# --- verification ------------------------------------------------------------------------------
def verify(
    main: str | None,
    archive: str | None,
    memory_files: Set[str],
    present: Set[str],
    allowed_dead: Set[str] = frozenset(),
    kind: ViewKind = ViewKind.AUTO,
    archive_links: Sequence[Link] | None = None,
) -> list[str]:
    """Problems with the index as it is on disk; an empty list means it is consistent.

    MEMORY.md's pointer lines count as the agent sees them: one hidden in a comment block or
    in stripped frontmatter indexes nothing (and, hand-written, is not checked).
    `archive_links`: `local_links(archive)` from a caller that knows them (IndexEdit's)."""
    problems: list[str] = []
    counts: dict[str, int] = {}
    trailers = len(_TRAILER_IN_TEXT.findall(main)) if main else 0
    for label, text in (("MEMORY.md", main), ("MEMORY-ARCHIVE.md", archive)):
        if text is None:
            continue
        if label == INDEX_NAME:
            links: Sequence[Link] = visible_local_links(text, kind)
        else:
            links = archive_links if archive_links is not None else local_links(text)
        for link in links:
            counts[link.target] = counts.get(link.target, 0) + 1
            if link.target not in present and link.target not in allowed_dead:
                problems.append(f"{label}: link {link.raw} does not resolve (exact case)")
    for name in sorted(memory_files):
        n = counts.get(name, 0)
        if n != 1:
            problems.append(f"{name} is indexed {n} times across MEMORY.md and the archive")
    if trailers > 1:
        problems.append(f"MEMORY.md holds {trailers} trailer lines")
    return problems
