"""MEMORY.md as text: pointer lines and links, ownership, the agent's window, verification. Pure.

Only pointer lines are memoryd's to touch; every other line belongs to the person and is kept
byte-for-byte (order, CRLF, a missing final newline). See DESIGN §3. The edit is index_edit's.
"""

import functools
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import unquote

from memoryd.model.agentview import ARCHIVE_NAME as ARCHIVE_NAME  # named there, used from here
from memoryd.model.agentview import INDEX_NAME as INDEX_NAME
from memoryd.model.agentview import View, ViewKind, agent_view
from memoryd.model.conflicts import HINT as CONFLICT_HINT
from memoryd.model.conflicts import conflict_line, conflict_message

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
    """`parse_line` of each line of an index text, in one loop (a call per line was half the
    parse at 10,000 lines); cached, since each pass reads the same text."""
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


def dominant_eol(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf >= text.count("\n") - crlf else "\n"


# POINTER over a whole text at once (one C-level scan); no match spans two lines.
_POINTER_IN_TEXT = re.compile(r"^[^\S\n]*[-*][^\S\n]+\[(.*?)\]\(([^()\s]+)\)", re.MULTILINE)


_TRAILER_IN_TEXT = re.compile(TRAILER.pattern, re.MULTILINE)


@functools.lru_cache(maxsize=2)  # the two texts of a pass; a big one costs MBs
def local_links(text: str) -> tuple[Link, ...]:
    """The LOCAL links of an index text's pointer lines, in order (cached per text)."""
    links = (classify_link(m.group(2)) for m in _POINTER_IN_TEXT.finditer(text))
    return tuple(link for link in links if link.kind is LinkKind.LOCAL)


_LONE_CR = re.compile(r"\r(?!\n)")


def cr_links(text: str) -> list[Link]:
    """The LOCAL links of pointers that follow a lone `\r` inside a line of `text`: Claude
    Code sends every `\r` as `\n`, so the agent reads each piece as a line, and a pointer in
    one indexes its memory. memoryd keeps such a line whole (its bytes are the person's)."""
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


def cr_visible(content: str, hiding: View | None) -> list[Link]:
    """`cr_links(content)`; of a line a construct hides (`hiding`), only those the loaded
    text holds (a comment starting the line may end before a later piece)."""
    links = cr_links(content)
    if hiding is None or not links:
        return links
    loaded = set(pointer_targets(hiding.loaded))
    return [link for link in links if link.target in loaded]


def release_parsed() -> None:
    """Drop the cached parses (~12 MB at 10,000 memories) between a daemon's passes."""
    _parse_lines.cache_clear()
    local_links.cache_clear()
    _view.cache_clear()
    _classify_link.cache_clear()


@dataclass(frozen=True, slots=True)
class PointerLine:
    target: str  # the decoded basename of a LOCAL link
    content: str  # the whole line, without its ending


def pointer_lines(text: str) -> Iterator[PointerLine]:
    """The LOCAL pointer lines of an index text, in order, without splitting it into Lines."""
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
    """Where a pointer line sat in MEMORY.md, for a restore: the pointer line before it under
    its heading (None: the first there), and that heading (None: above every heading)."""

    after: str | None
    heading: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"after": self.after, "heading": self.heading}

    @classmethod
    def of(cls, value: object) -> "Place | None":
        """A Place from a manifest's record (untrusted: one line each), else None."""
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


def placed_at(lines: Sequence[Line], place: Place) -> int | None:
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


@dataclass(frozen=True, slots=True)
class LastPass:
    """What a caller knows of memoryd's last pass over this index (decide_ownership).

    `known`: the memory files of the last pass, if it managed the index; files that arrived
    since do not count against ownership (a burst of new files must not unmanage an index; a
    person's rewrite still does). `as_left`: MEMORY.md is the file that pass left: managed.
    The held view also knows `archive_targets` (not re-read), `only_missing` (the only files
    that can lack a pointer: the changed and the waiting) and `arrived` (the files not in
    `known`, without looking at every file).
    """

    known: Set[str] | None = None
    as_left: bool = False
    archive_targets: Set[str] | None = None
    only_missing: Set[str] | None = None
    arrived: Set[str] | None = None


def decide_ownership(
    main: str | None,
    archive: str | None,
    linked: Mapping[str, str],
    memory_files: Set[str],
    override: str = "auto",
    last: LastPass = LastPass(),
) -> Ownership:
    """Is this index a list of pointers memoryd may edit? (DESIGN §3, "Whose index is it?").
    A mark or the config decides first; else whether most memory files have a pointer."""
    said = _ownership_said(main, archive, override, last.as_left)
    if said is not None:
        return said
    assert main is not None  # (a missing MEMORY.md is said to be memoryd's above)
    # The files that count are those memoryd knew; those that arrived are few (no copy of the
    # 10,000 others: `memory_files - known` on dict views copies them all first).
    known, arrived = last.known, last.arrived
    if known is None:
        arrived = frozenset[str]()
    elif arrived is None:
        arrived = set(itertools.filterfalse(known.__contains__, memory_files))
    total = len(memory_files) - len(arrived)
    if known is not None and not total:
        return Ownership(True, "memoryd managed this index and every file since is new")
    if not total:
        return Ownership(True, "the dir has no memory files yet")
    uncovered = _uncovered(main, archive, linked, memory_files, arrived, last)
    covered = total - len(uncovered)
    if covered * 2 >= total:
        return Ownership(True, f"{covered} of {total} memory files have pointer lines")
    return Ownership(
        False,
        f"only {covered} of {total} memory files are pointer targets: this index is "
        f"hand-organised (add {MANAGE_MARK} to MEMORY.md to let memoryd manage it)",
    )


def _ownership_said(
    main: str | None, archive: str | None, override: str, as_left: bool
) -> Ownership | None:
    """Ownership as a merge's conflict markers, a mark, the config or the last pass say it;
    None: the pointers decide."""
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
    return None


def _uncovered(
    main: str,
    archive: str | None,
    linked: Mapping[str, str],
    memory_files: Set[str],
    arrived: Set[str],
    last: LastPass,
) -> set[str]:
    """The memory files that count (not `arrived`) with no pointer line anywhere."""
    # Parsed as the edit parses them (cached: the edit that follows reuses the parse).
    targets = {
        link.target
        for _, _, link in _parse_lines(main)
        if link is not None and link.kind is LinkKind.LOCAL
    }
    targets.update(link.target for link in cr_links(main))
    archive_targets = last.archive_targets
    if archive is not None and archive_targets is None:
        targets.update(pointer_targets(archive))
    for name, text in linked.items():
        if name in targets or (archive_targets is not None and name in archive_targets):
            targets.update(pointer_targets(text))
    elsewhere = archive_targets if archive_targets is not None else frozenset()
    if last.only_missing is not None:
        return {
            f
            for f in last.only_missing
            if f in memory_files and f not in arrived and f not in targets and f not in elsewhere
        }
    uncovered = set(memory_files) - targets
    uncovered.difference_update(arrived)
    uncovered.difference_update(elsewhere)  # no copy of the archive's 10,000 targets
    return uncovered


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
    """The window's measure of what the agent loads (`measure` is of the raw text)."""
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
            out.extend(cr_visible(line.content, hiding))
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
    """Problems with the index as it is on disk; none means it is consistent.

    MEMORY.md's pointers count as the agent sees them: one in a comment block or stripped
    frontmatter indexes nothing (and, hand-written, is not checked). `archive_links`:
    `local_links(archive)` when the caller knows them (IndexEdit's)."""
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
