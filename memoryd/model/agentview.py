"""What the agent really loads from a MEMORY.md, and which of its lines it sees. Pure.

Claude Code (2.1.332, read from the binary and checked against it: tests/test_claude_real.py)
loads an auto-memory dir's MEMORY.md like this:

1. a file over 4 MiB is not loaded at all;
2. a leading frontmatter block is stripped: from a first line `---` to the next `---`
   (anywhere, even inside a line) and the whitespace after it;
3. top-level HTML comment blocks are removed by its markdown lexer (a block starts with
   `<!--` at the start of a block, after up to 3 spaces, or at column 0 inside a paragraph, and
   runs to the end of the line holding the first `-->`, with the empty lines after it; what is
   left once every `<!-- ... -->` in it is gone stays when it is not blank). When something
   is removed, the text is the lexer's, with every `\\r\\n` and lone `\\r` turned into `\\n`;
   a lone `\\r` ends a line for the window in any case (2.1.328 cut a file of lone-CR lines
   at its 200th; 2.1.332 counts only `\\n` there and sends each `\\r` as one: counting them
   keeps every pointer memoryd calls loaded loaded by both);
4. the result is trimmed (JS `trim()`: a BOM and leading/trailing blank lines go);
5. the window: split on `\\n`; over 200 lines keeps the first 200; then over 25,000 UTF-16
   units cuts at the last `\\n` at or before unit 25,000 (mid-line only when line 1 alone is
   longer). A warning is appended when the text was over either limit.

An agent-memory dir's MEMORY.md goes through 1, 4 and 5 only. The lexer of step 3 is a full
markdown block lexer; `_comment_spans` follows the constructs that decide whether a `<!--`
line starts a top-level block (fenced code, list items and their indentation, paragraphs,
other HTML blocks) and is linear in the text.
"""

import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePath

from memoryd.model.lazyre import lazy

# The index the agent loads, and the one that holds the pointers moved out of it. Named here,
# not in memoryd.model.index: a search that finds its index in step never imports the grammar.
INDEX_NAME = "MEMORY.md"
ARCHIVE_NAME = "MEMORY-ARCHIVE.md"
MAX_LOAD_BYTES = 4 * 1024 * 1024
MAX_LINES = 200
MAX_UNITS = 25_000


class ViewKind(StrEnum):
    AUTO = "auto"  # <claude_home>/projects/<slug>/memory: frontmatter and comments stripped
    PLAIN = "plain"  # agent-memory and other dirs: the window only


def view_kind_of(path: PurePath, dir_kind: str = "") -> ViewKind:
    """How Claude Code loads the MEMORY.md of the dir at `path`: an auto-memory dir
    (`projects/<slug>/memory`, or kind "project") is stripped, any other only windowed."""
    if dir_kind == "project" or (path.name == "memory" and path.parent.parent.name == "projects"):
        return ViewKind.AUTO
    return ViewKind.PLAIN


class Hidden(StrEnum):
    """Why a line of MEMORY.md is not in what the agent loads."""

    COMMENT = "in an HTML comment"
    FRONTMATTER = "in stripped frontmatter"
    PAST_LINES = "past line 200"
    PAST_CHARS = "past 25,000 characters"
    TOO_BIG = "file over 4 MiB"

    @property
    def by_construct(self) -> bool:
        """Hidden by what the text holds (not by its length): a place no pointer belongs."""
        return self in (Hidden.COMMENT, Hidden.FRONTMATTER)


@dataclass(frozen=True, slots=True)
class View:
    """The agent's view of one MEMORY.md text (lines numbered from 0, split on `\\n`)."""

    kept: str  # what the window keeps, before the binary's last clean-up (see `loaded`)
    warned: bool  # whether Claude Code appends its "only part of it was loaded" warning
    lines: int  # lines of the trimmed text, as the window counts them
    units: int  # its UTF-16 code units
    bytes: int  # the file's size
    too_big: bool
    folded: bool  # the lexer's text was used: every lone `\r` ends a line for the window
    visible: frozenset[int]  # lines whose start the agent sees, with the whole first segment
    construct: dict[int, Hidden] = field(default_factory=dict)  # lines hidden by a construct
    past_lines_from: int | None = None  # the first line at or past window line `max_lines`

    @property
    def loaded(self) -> str:
        """The text the agent gets, as sent (the warning, if any, not included)."""
        return _sanitise(self.kept)

    def hidden(self, number: int) -> Hidden | None:
        """Why line `number` is not seen (None: it is)."""
        if number in self.visible:
            return None
        found = self.construct.get(number)
        if found is not None:
            return found
        if self.too_big:
            return Hidden.TOO_BIG
        if self.past_lines_from is not None and number >= self.past_lines_from:
            return Hidden.PAST_LINES
        return Hidden.PAST_CHARS

    def fits(self, max_lines: int = MAX_LINES, max_units: int = MAX_UNITS) -> bool:
        """Whether the agent loads all of it (no cut, no warning)."""
        return not self.too_big and self.lines <= max_lines and self.units <= max_units


# JS `\s` and String.prototype.trim's whitespace (Python's differ: \x1c-\x1f, \x85, no BOM).
JS_SPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_S = "[" + re.escape(JS_SPACE) + "]"
# Claude Code's frontmatter pattern, tried only when a `---` sits at or after index 3.
_FRONTMATTER = lazy(rf"---{_S}*\n(?:.*?)---{_S}*\n?", re.DOTALL)
_COMMENT = lazy(r"<!--.*?-->", re.DOTALL)
_LINE_BREAK = lazy(r"\r\n?")
_LONE_CR = lazy(r"\r(?!\n)")


def view_of_bytes(
    data: bytes, kind: ViewKind, *, max_lines: int = MAX_LINES, max_units: int = MAX_UNITS
) -> View:
    """`agent_view` of a file's bytes (UTF-8, a BOM allowed; bad bytes read as U+FFFD)."""
    text = data.decode("utf-8", "replace")
    bom = text.startswith("\ufeff")
    return agent_view(
        text.removeprefix("\ufeff"),
        kind,
        size=len(data),
        max_lines=max_lines,
        max_units=max_units,
        bom=bom,
    )


def agent_view(
    text: str,
    kind: ViewKind,
    *,
    bom: bool = False,
    size: int | None = None,
    max_lines: int = MAX_LINES,
    max_units: int = MAX_UNITS,
) -> View:
    """What the agent loads from a MEMORY.md holding `text` (its BOM removed: `bom`), and
    which of its lines it sees. `size`: the file's bytes, when the caller knows them."""
    if size is None:
        size = (len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))) + (
            3 if bom else 0
        )
    if size > MAX_LOAD_BYTES:
        return View("", False, 0, 0, size, True, False, frozenset())
    construct: dict[int, Hidden] = {}
    start_line = 0  # the first source line after the frontmatter
    body_at = 0  # where it starts in `text`
    rest_of_first = None  # what is left of a line the frontmatter ends in
    if kind is ViewKind.AUTO and text.startswith("---") and text.find("---", 3) >= 0:
        found = _FRONTMATTER.match(text)
        if found is not None:
            cut = found.end()
            upto = text.count("\n", 0, cut)  # the line holding the cut (or starting there)
            line_start = text.rfind("\n", 0, cut) + 1
            for number in range(upto):
                construct[number] = Hidden.FRONTMATTER
            start_line, body_at = upto, cut
            if cut > line_start:
                construct[upto] = Hidden.FRONTMATTER
                end = text.find("\n", cut)
                rest_of_first = text[cut:] if end < 0 else text[cut:end]
                start_line, body_at = upto + 1, len(text) if end < 0 else end + 1
    lone_cr = "\r" in text and _LONE_CR.search(text, body_at) is not None
    if kind is ViewKind.AUTO and "<!--" in text:
        folded = _folded(text, body_at, start_line, rest_of_first)
        stripped = _strip_comments(folded, construct)
        if stripped is not None:
            return _window(stripped, size, True, construct, max_lines, max_units)
        if lone_cr:
            return _window(folded, size, True, construct, max_lines, max_units)
    elif lone_cr:
        # Claude Code's window ends a line at a lone `\r` too (2.1.328 hid 51 of 250 pointers
        # so): counted so, a pointer after one is never taken for loaded when it may not be.
        folded = _folded(text, body_at, start_line, rest_of_first)
        return _window(folded, size, True, construct, max_lines, max_units)
    if rest_of_first is not None:
        # The rest of the line comes first, with no line start of its own.
        rest = text[body_at:]
        pieces: list[tuple[str, int | None]] = [(rest_of_first, None)]
        if body_at < len(text):
            lines = rest.split("\n")
            if len(lines) > 1 and lines[-1] == "":
                lines.pop()
            pieces.extend((line, start_line + i) for i, line in enumerate(lines))
        return _window(pieces, size, False, construct, max_lines, max_units)
    return _plain_window(
        text[body_at:] if body_at else text, start_line, size, construct, max_lines, max_units
    )


def _folded(
    text: str, body_at: int, first: int, rest_of_first: str | None
) -> list[tuple[str, int | None]]:
    """The lexer's lines of the text from `body_at` (source line `first`), after the rest of
    the line the frontmatter ends in: every `\\r\\n`, lone `\\r` and `\\n` ends one."""
    body = text[body_at:].split("\n") if body_at < len(text) or rest_of_first is None else []
    final_newline = len(body) > 1 and body[-1] == ""
    if final_newline:
        body.pop()
    lines: list[tuple[str, int | None]] = []
    last = len(body) - 1
    if rest_of_first is not None:
        lines.extend(_segments(rest_of_first, None, last >= 0 or final_newline))
    for i, line in enumerate(body):
        lines.extend(_segments(line, first + i, i < last or final_newline))
    return lines


def _strip_comments(
    lines: list[tuple[str, int | None]], construct: dict[int, Hidden]
) -> list[tuple[str, int | None]] | None:
    """`_folded`'s lines without top-level comment blocks; None when there is none."""
    spans = list(_comment_spans([content for content, _ in lines]))
    if not spans:
        return None
    out: list[tuple[str, int | None]] = []
    at = 0
    for start, end, residue in spans:
        out.extend(lines[at:start])
        for _, number in lines[start:end]:
            if number is not None:
                construct[number] = Hidden.COMMENT
        if residue is not None:
            pieces = residue.split("\n")
            if residue.endswith("\n"):
                pieces.pop()
            out.extend((piece, None) for piece in pieces)
        at = end
    out.extend(lines[at:])
    return out


def _segments(line: str, number: int | None, followed: bool) -> Iterator[tuple[str, int | None]]:
    """A source line (split on `\\n`) as the lexer's lines: a lone `\\r` ends one too.
    `followed`: a `\\n` came after it, so a last `\\r` was half of a `\\r\\n`."""
    if followed and line.endswith("\r"):
        line = line[:-1]
    if "\r" not in line:
        yield line, number
        return
    parts = _LINE_BREAK.split(line)
    yield parts[0], number
    for part in parts[1:]:
        yield part, None


# --- the comment lexer ---------------------------------------------------------------------
_BULLET = lazy(r"( {0,3})([-+*]|\d{1,9}[.)])(?=[ \t]|$)")
_HR = lazy(r" {0,3}(?:-[\t ]*-[\t ]*-[-\t ]*|_[\t ]*_[\t ]*_[_\t ]*|\*[\t ]*\*[\t ]*\*[*\t ]*)$")
_FENCE = lazy(r" {0,3}(`{3,}(?![^`]*`)|~{3,})")
# What ends a list item when it starts within the item's first columns (the binary's `TL`).
_ITEM_BREAK = lazy(
    r"#|```|~~~|(?:- *- *-[- ]*|_ *_ *_[_ ]*|[*] *[*] *[*][* ]*)$|<!--|<[A-Z].*>"
    r"|(?:\d{1,9}[).]|[-+*])(?![^\t ])",
    re.IGNORECASE,
)
_BLOCK_START = lazy(r"#|```|~~~|(?:- *- *-[- ]*|_ *_ *_[_ ]*|[*] *[*] *[*][* ]*)$")
_INDENTED = lazy(r"(?: {0,3}\t| {4})[\t ]*[^\t ]")
_HEADING = lazy(r" {0,3}#{1,6}(?!\S)")
_RAW_TAG = lazy(r"<(script|pre|style|textarea)(?=[\s>]|$)", re.IGNORECASE)
_OTHER_HTML = lazy(r"<(?:[?]|![A-Za-z]|!\[CDATA\[)")
# CommonMark's block-level tag names (an HTML block of kind 6 starts with one) ...
_BLOCK_TAG = lazy(
    r"</?(?:address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd"
    r"|details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame|frameset|h[1-6]"
    r"|head|header|hr|html|iframe|legend|li|link|main|menu|menuitem|nav|noframes|ol|optgroup"
    r"|option|p|param|search|section|summary|table|tbody|td|tfoot|th|thead|title|tr|track|ul)"
    r"(?=[ \t>]|/>|$)",
    re.IGNORECASE,
)
# ... and any other tag alone on its line starts one of kind 7.
_LONE_TAG = lazy(
    r"(?:<[A-Za-z][A-Za-z0-9-]*(?:\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:[^\s\"'=<>`]+|'[^']*'"
    r"|\"[^\"]*\"))?)*\s*/?>|</[A-Za-z][A-Za-z0-9-]*\s*>)[ \t]*$"
)
_PARA_INTERRUPT = lazy(r" {0,3}(?:>|[-+*] |1[).] |#{1,6}(?!\S)|```|~~~)")


def _lead(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _comment_spans(lines: Sequence[str]) -> Iterator[tuple[int, int, str | None]]:
    """Top-level comment blocks: (first line, end line, what is left or None when blank)."""
    n = len(lines)
    i = 0
    para = False
    while i < n:
        line = lines[i]
        stripped = line.strip(" \t")
        if not stripped:
            para = False
            i += 1
            continue
        lead = _lead(line)
        if lead >= 4 or (lead < 4 and line[lead : lead + 1] == "\t"):
            i += 1  # indented code, or a lazy paragraph line
            continue
        rest = line[lead:]
        if rest.startswith("<!--") and (not para or lead == 0):
            end = _comment_end(lines, i, lead + 2)
            if end is None:
                return  # unclosed: the block runs to the end and keeps all of it
            raw = "\n".join(lines[i:end]) + ("\n" if end < n else "")
            residue = _COMMENT.sub("", raw)
            yield i, end, residue if residue.strip(JS_SPACE) else None
            i, para = end, False
            continue
        fence = _FENCE.match(line)
        if fence is not None:
            i = _fence_end(lines, i, fence.group(1))
            para = False
            continue
        if (
            _RAW_TAG.match(rest)
            or _BLOCK_TAG.match(rest)
            or (not para and (_OTHER_HTML.match(rest) or _LONE_TAG.match(rest)))
        ):
            i, para = _html_end(lines, i, rest), False
            continue
        if _HR.match(line) or _HEADING.match(line):
            para = False
            i += 1
            continue
        bullet = _BULLET.match(line)
        if bullet is not None and (not para or _PARA_INTERRUPT.match(line)):
            i = _list_end(lines, i, bullet)
            para = False
            continue
        para = True  # a paragraph or a blockquote line (both take lazy lines)
        i += 1


def _comment_end(lines: Sequence[str], i: int, column: int) -> int | None:
    """The line after a comment block starting on line `i` (with its empty lines)."""
    n = len(lines)
    j, at = i, column
    while j < n and lines[j].find("-->", at) < 0:
        j, at = j + 1, 0
    if j >= n:
        return None
    j += 1
    while j < n and lines[j] == "":
        j += 1
    return j


def _fence_end(lines: Sequence[str], i: int, opening: str) -> int:
    n = len(lines)
    close = re.compile(r" {0,3}" + re.escape(opening) + r"[`~]* *$")
    j = i + 1
    while j < n and not close.match(lines[j]):
        j += 1
    return min(j + 1, n)


def _html_end(lines: Sequence[str], i: int, rest: str) -> int:
    """The line after an HTML block that is not a comment (its `<!--` lines are kept)."""
    n = len(lines)
    raw = _RAW_TAG.match(rest)
    if raw is not None:
        closing = f"</{raw.group(1).lower()}>"
        j = i
        while j < n and closing not in lines[j].lower():
            j += 1
        return min(j + 1, n)
    if rest.startswith(("<?", "<!")):
        end = "?>" if rest.startswith("<?") else "]]>" if rest.startswith("<![CDATA[") else ">"
        j, at = i, 2
        while j < n and lines[j].find(end, at) < 0:
            j, at = j + 1, 0
        return min(j + 1, n)
    j = i + 1
    while j < n and lines[j].strip(" \t"):
        j += 1
    return j


def _list_end(lines: Sequence[str], i: int, bullet: re.Match[str]) -> int:
    """The line after the list starting at line `i` (the binary's list item continuation)."""
    n = len(lines)
    while True:
        indent = _item_indent(lines[i], bullet)
        limit = min(3, indent - 1)
        previous = lines[i][bullet.end() :]
        saw_blank = False
        j = i + 1
        while j < n:
            line = lines[j]
            lead = _lead(line)
            if lead <= limit and _ITEM_BREAK.match(line, lead):
                break
            expanded = line.replace("\t", "    ")
            blank = not line.strip(" \t")
            if blank or _lead(expanded) >= indent:
                saw_blank = saw_blank or blank
                previous = expanded[indent:]
                j += 1
                continue
            if saw_blank or not _lazy_after(previous, limit):
                break
            previous = expanded[indent:]
            j += 1
        if j < n:
            nxt = _BULLET.match(lines[j])
            if nxt is not None and not _HR.match(lines[j]):
                i, bullet = j, nxt
                continue
        return j


def _item_indent(line: str, bullet: re.Match[str]) -> int:
    marker_end = bullet.end()
    after = line[marker_end:]
    if not after.strip(" \t"):
        return marker_end + 1
    spaces = len(after) - len(after.lstrip(" "))
    return marker_end + (1 if spaces > 4 or spaces == 0 else spaces)


def _lazy_after(previous: str, limit: int) -> bool:
    """Whether a line may continue the previous one lazily (it was paragraph text)."""
    at = _lead(previous)
    return not _INDENTED.match(previous) and (at > limit or not _BLOCK_START.match(previous, at))


# --- the window --------------------------------------------------------------------------------
def _window(
    pieces: list[tuple[str, int | None]],
    size: int,
    folded: bool,
    construct: dict[int, Hidden],
    max_lines: int,
    max_units: int,
) -> View:
    first = next((k for k, (c, _) in enumerate(pieces) if c.strip(JS_SPACE)), None)
    if first is None:
        return View("", False, 0, 0, size, False, folded, frozenset(), construct)
    last = next(k for k in range(len(pieces) - 1, -1, -1) if pieces[k][0].strip(JS_SPACE))
    kept = pieces[first : last + 1]
    contents = [c for c, _ in kept]
    contents[0] = contents[0].lstrip(JS_SPACE)
    contents[-1] = contents[-1].rstrip(JS_SPACE)
    count = len(contents)
    trimmed = "\n".join(contents)
    units = _utf16_len(trimmed)
    past_lines_from = None
    if count > max_lines:
        past_lines_from = next(
            (kept[k][1] for k in range(max_lines, count) if kept[k][1] is not None), None
        )
    shown = contents[:max_lines]
    cut_mid_line: str | None = None
    whole = len(shown)
    if units > max_units:
        total = 0
        whole = 0
        for k, content in enumerate(shown):
            total += _utf16_len(content)
            if total > max_units:
                break
            whole = k + 1
            total += 1  # its "\n"
        if whole == 0:
            cut_mid_line = _utf16_prefix(shown[0], max_units)
    visible = frozenset(number for (_, number) in kept[:whole] if number is not None)
    text = cut_mid_line if cut_mid_line is not None else "\n".join(shown[:whole])
    warned = count > max_lines or units > max_units
    return View(
        text,
        warned,
        count,
        units,
        size,
        False,
        folded,
        visible,
        construct,
        past_lines_from,
    )


def _plain_window(
    text: str,
    offset: int,
    size: int,
    construct: dict[int, Hidden],
    max_lines: int,
    max_units: int,
) -> View:
    """`_window` for source lines from `offset` on, nothing stripped inside (every edit's
    measurement): C-level string calls only."""
    left = text.lstrip(JS_SPACE)
    trimmed = left.rstrip(JS_SPACE)
    if not trimmed:
        return View("", False, 0, 0, size, False, False, frozenset(), construct)
    first = offset + text.count("\n", 0, len(text) - len(left))
    count = trimmed.count("\n") + 1
    units = _utf16_len(trimmed)
    past_lines_from = None
    shown, whole = trimmed, count
    if count > max_lines:
        past_lines_from = first + max_lines
        shown, whole = "\n".join(trimmed.split("\n", max_lines)[:max_lines]), max_lines
    kept = shown
    if _utf16_len(shown) > max_units:
        head = _utf16_prefix(shown, max_units + 1)  # a "\n" at index max_units still counts
        cut = head.rfind("\n")
        if cut > 0:
            kept = shown[:cut]
            whole = kept.count("\n") + 1
        else:
            kept, whole = _utf16_prefix(shown, max_units), 0
    warned = count > max_lines or units > max_units
    visible = frozenset(range(first, first + whole))
    return View(kept, warned, count, units, size, False, False, visible, construct, past_lines_from)


def _utf16_len(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _utf16_prefix(text: str, units: int) -> str:
    """The first `units` UTF-16 units of `text` (a split pair leaves its high surrogate)."""
    data = text.encode("utf-16-le", "surrogatepass")[: units * 2]
    return data.decode("utf-16-le", "surrogatepass")


def _sanitise(text: str) -> str:
    """The kept text as the binary sends it: line breaks as `\\n`; no surrogates, format
    characters or C0 controls but tab and newline."""
    text = _LINE_BREAK.sub("\n", text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        c
        for c in text
        if not (unicodedata.category(c) in ("Cs", "Cf") or (c < " " and c not in "\t\n"))
    )
