"""A managed index held between passes, edited by looking only at what a change can affect.

`update_index` reads every line of MEMORY.md and MEMORY-ARCHIVE.md. At 10,000 memories the
archive holds ~10,000 lines, and one changed file would cost a pass over all of them. But once a
pass has run, every line is as DESIGN §3's rules want it, and the rules act per target: a line is
removed, rewritten or collapsed only for its own file, and a new pointer is only ever for a file
no line points to. So after a change only these lines can move: the ones that point at a changed
file, and the few the archive's append rules look at (the last "Moved from" heading, the first
line after it that is not a pointer, the end of the file).

The daemon therefore holds the archive as a list of lines with a map from each target to its
positions, runs the very same edit (`edit_lines`) over MEMORY.md (small by design) plus just
those archive lines, and splices the result back. Anything the splice cannot place is refused
(None) and the caller runs the full edit instead. Pure: text in, text out.
"""

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any

from memoryd.model.agentview import ViewKind
from memoryd.model.index import (
    DEMOTED_HEADING,
    TRAILER,
    Line,
    Link,
    LinkKind,
    local_links,
    parse_line,
    split_lines,
    visible_local_links,
)
from memoryd.model.index_edit import (
    IndexEdit,
    IndexInput,
    SomeArchiveLines,
    edit_lines,
    view_reshaped,
)
from memoryd.model.sealed import seal, unseal


@dataclass(frozen=True, slots=True)
class HeldIndex:
    main: str | None
    exists: bool  # whether MEMORY-ARCHIVE.md exists
    # The archive's lines with their endings, in UTF-8 (half the memory of text, and a write
    # joins them instead of encoding 2 MB); b"" where a line was removed.
    lines: list[bytes]
    # Each local pointer target -> its position in `lines`, or a list of them when it has
    # several (an int for the one of nearly every target: a list each was ~1 MB at 10,000).
    where: dict[str, int | list[int]]
    invalid: dict[int, str]  # position -> raw link, for the archive's invalid links
    heading_at: int  # the last "## Moved from MEMORY.md" heading, or -1
    offending_at: int  # the first line after it that is neither a pointer nor blank, or -1
    dead: frozenset[str]  # dead link targets across both files
    crlf: int  # lines ending in CRLF and in a bare LF: the archive's dominant line ending
    lf: int

    @property
    def archive_data(self) -> bytes | None:
        return b"".join(self.lines) if self.exists else None

    def some(self, positions: Iterable[int]) -> SomeArchiveLines:
        last = next((line for line in reversed(self.lines) if line), b"")
        eol = (
            None
            if not (self.crlf or self.lf or last)
            else ("\r\n" if self.crlf and self.crlf >= self.lf else "\n")
        )
        return SomeArchiveLines(
            [_line(p, self.lines[p]) for p in sorted(positions)],
            self.exists,
            eol,
            last.endswith(b"\n") if last else True,
        )


def positions_of(where: Mapping[str, int | list[int]], target: str) -> Sequence[int]:
    """The positions `where` holds for `target` (none: ())."""
    found = where.get(target)
    if found is None:
        return ()
    return (found,) if isinstance(found, int) else found


def _with(where: dict[str, int | list[int]], target: str, position: int) -> None:
    found = where.get(target)
    where[target] = position if found is None else [*positions_of(where, target), position]


def _ending(data: bytes) -> tuple[int, int]:
    if data.endswith(b"\r\n"):
        return 1, 0
    return (0, 1) if data.endswith(b"\n") else (0, 0)


def _line(position: int, data: bytes) -> Line:
    content, eol, link = parse_line(data.decode("utf-8"))
    return Line(content, eol, link, position)


def hold(main: str | None, archive: str | None, dead: Set[str]) -> HeldIndex:
    """Take the index as a full pass left it (one pass over the archive's lines)."""
    return hold_data(main, archive.encode("utf-8") if archive is not None else None, dead)


# What hold_data derives from an archive's lines (the lines aside): each target's positions,
# the invalid links, the heading and the line that offends it.
Positions = tuple[dict[str, int | list[int]], dict[int, str], int, int]
_POSITIONS_HEADER = ("memoryd held archive", 2)  # 2: a lone position as an int


def archive_digest(archive: bytes) -> bytes:
    """What a saved Positions is kept under: the archive's bytes, not its stat (an in-place
    rewrite within one mtime tick keeps the stat). ~1 ms for a 2 MB archive."""
    return hashlib.blake2b(archive, digest_size=16).digest()


def dump_positions(index: HeldIndex, digest: bytes) -> bytes:
    """`index`'s Positions, sealed under the digest of the archive it was held from."""
    return seal(
        _POSITIONS_HEADER,
        (digest, index.where, index.invalid, index.heading_at, index.offending_at),
    )


def load_positions(data: bytes | None, digest: bytes) -> Positions | None:
    """The Positions saved for the archive of `digest`; None for any other (or a damaged file)."""
    payload = unseal(_POSITIONS_HEADER, data) if data else None
    if not (isinstance(payload, tuple) and len(payload) == 5 and payload[0] == digest):
        return None
    _, where, invalid, heading_at, offending_at = payload
    if not (isinstance(where, dict) and isinstance(invalid, dict)
            and isinstance(heading_at, int) and isinstance(offending_at, int)):  # fmt: skip
        return None
    return where, invalid, heading_at, offending_at


def hold_data(
    main: str | None, archive: bytes | None, dead: Set[str], known: Positions | None = None
) -> HeldIndex:
    """`hold` from the archive's bytes as read (no BOM), never decoded whole: its text would
    cost twice its bytes (one em dash makes every character of a str two bytes wide).

    `known`: the Positions a hold of these very bytes found (load_positions), so the lines are
    split but not parsed (the parse is ~25 ms of a 10,000-line archive).

    Raises UnicodeDecodeError when a line is not UTF-8 (never with `known`: a hold of the
    same bytes decoded them).
    """
    data = archive if archive is not None else b""
    # Split at the line ends split_lines uses ("\n" is one byte in UTF-8 and never part of
    # another character): the held lines are made in one go, not among the parse's
    # temporaries, which would leave them scattered over the heap once those are freed.
    lines = split_after_newlines(data)
    crlf = data.count(b"\r\n")
    lf = data.count(b"\n") - crlf
    if known is not None:
        return HeldIndex(main, archive is not None, lines, *known, frozenset(dead), crlf, lf)
    where: dict[str, int | list[int]] = {}
    invalid: dict[int, str] = {}
    heading_at = offending_at = -1
    # Line by line, nothing kept but the maps: split_lines would hold every line of a
    # 100,000-line archive as objects at once (~60 MB), and cache them.
    for position, chunk in enumerate(lines):
        content, _, link = parse_line(chunk.decode("utf-8"))
        if link is not None:
            if link.kind is LinkKind.LOCAL:
                _with(where, link.target, position)
            elif link.kind is LinkKind.INVALID:
                invalid[position] = link.raw
        elif DEMOTED_HEADING.match(content):
            heading_at, offending_at = position, -1
        elif heading_at >= 0 and offending_at < 0 and content.strip():
            offending_at = position
    return HeldIndex(
        main,
        archive is not None,
        lines,
        where,
        invalid,
        heading_at,
        offending_at,
        frozenset(dead),
        crlf,
        lf,
    )


def split_after_newlines(data: bytes) -> list[bytes]:
    """`data`'s lines, each with its "\n" (the last one without, if it has none); [] for b"".

    Slices found with bytes.find, made one after the other with no temporaries between them:
    a lookbehind regex split did the same ~10x slower (12 ms of a 2 MB archive's 36 ms).
    Without a "\r" (bytes split at no other character), bytes.splitlines is the same split,
    in C (~1.5 ms of a 10,000-line archive's 3.5).
    """
    if b"\r" not in data:
        return data.splitlines(keepends=True)
    lines: list[bytes] = []
    append, find = lines.append, data.find
    start = 0
    while (end := find(b"\n", start) + 1) > 0:
        append(data[start:end])
        start = end
    if start < len(data):
        append(data[start:])
    return lines


def _from_end(held: HeldIndex, changed: Set[str]) -> Iterator[int]:
    """Positions from the end back to the last line no edit of `changed` can remove.

    The ending rules (a final newline kept or not, trailing blank lines dropped before an
    append) look at the archive's last lines as they are after removals, so the restricted
    edit must see every line down to one that is sure to stay.
    """
    for position in range(len(held.lines) - 1, -1, -1):
        data = held.lines[position]
        if not data:
            continue
        yield position
        line = _line(position, data)
        link = line.link
        removable = link is not None and link.kind is LinkKind.LOCAL and link.target in changed
        if line.content.strip() and not removable:
            return


@dataclass(slots=True)
class ChangedEdit:
    # As update_index's edit, except `archive`, which is not made (decoding 2 MB would cost
    # more than the whole edit): the new archive is `held.lines`, written as they are.
    edit: IndexEdit
    held: HeldIndex  # the index after the edit, for the next one
    archive_changed: bool


def edit_changed(
    held: HeldIndex, inp: IndexInput, changed: Set[str], waiting: Set[str]
) -> ChangedEdit | None:
    """`update_index` for a held index after `changed` files changed, without reading it all.

    `inp.memories` holds every memory file of the dir (only the entries the edit needs are
    looked up); `inp.ready` need only cover `changed` and `waiting` (files that were still in
    their grace at the last pass); `inp.main` and `inp.archive` are not read (the held index
    has them). Returns None when the result cannot be spliced back.
    """
    if held.exists and not next((line for line in held.lines if line), b"").startswith(
        (b"---", b"\xef\xbb\xbf---")
    ):
        return None  # an archive without its frontmatter: the full edit gives it one
    main_targets = {link.target for link in local_links(held.main)} if held.main else set()
    wanted = (main_targets | changed | waiting) & inp.memories.keys()
    positions = _lines_to_look_at(held, inp, changed, main_targets)
    some = held.some(positions)
    links = {line.origin: line.link for line in some.lines}  # before the edit changes them
    restricted = replace(
        inp,
        main=held.main,
        archive=None,
        memories={name: inp.memories[name] for name in wanted},
        total=len(inp.memories),
    )
    edit, out = edit_lines(restricted, some)
    if view_reshaped(held.main or "", edit.main or ""):
        return None  # what the agent cannot see changed shape: the full edit re-reads it all
    splice = _Splice.of(held, held.exists != (edit.archive is not None))
    taken = splice.keep(out)
    if taken is None:
        return None  # a line moved: not an edit this splice can express
    kept, appended = taken
    splice.drop(positions - kept, links)
    splice.append(appended)
    exists = edit.archive is not None
    edit.archive = None  # see ChangedEdit
    # The restricted edit saw only some archive lines: add what the others still report.
    edit.invalid_links += [raw for p, raw in held.invalid.items() if p not in positions]
    dead = frozenset(edit.dead_links) | (held.dead - changed)
    edit.dead_links = sorted(dead)
    after = HeldIndex(
        edit.main,
        exists,
        splice.lines,
        splice.where,
        held.invalid,
        splice.heading_at,
        splice.offending_at,
        dead,
        splice.crlf,
        splice.lf,
    )
    return ChangedEdit(edit, after, splice.changed)


def _lines_to_look_at(
    held: HeldIndex, inp: IndexInput, changed: Set[str], main_targets: Set[str]
) -> set[int]:
    """The archive lines a change can affect: the changed files' pointers, those of memories
    MEMORY.md points to where the agent cannot see it, the demoted heading and what follows
    it, and the lines from the end the edit may append after."""
    positions: set[int] = set()
    for target in changed:
        positions.update(positions_of(held.where, target))
    if held.main and main_targets:
        # A memory whose pointers in MEMORY.md the agent cannot see (in a comment block, in
        # stripped frontmatter) is indexed by its archive line, if any: the edit must see it,
        # or it would give the memory a second pointer.
        seen = {link.target for link in visible_local_links(held.main, inp.view)}
        for target in main_targets - seen:
            positions.update(positions_of(held.where, target))
    for position in (held.heading_at, held.offending_at):
        if position >= 0:
            positions.add(position)
    positions.update(_from_end(held, changed))
    return positions


@dataclass(slots=True)
class _Splice:
    """The held archive's lines as the restricted edit's result is spliced back into them."""

    lines: list[bytes]
    where: dict[str, int | list[int]]
    heading_at: int
    offending_at: int
    crlf: int
    lf: int
    changed: bool

    @classmethod
    def of(cls, held: HeldIndex, changed: bool) -> "_Splice":
        return cls(
            list(held.lines),
            dict(held.where),
            held.heading_at,
            held.offending_at,
            held.crlf,
            held.lf,
            changed,
        )

    def put(self, position: int, data: bytes) -> None:
        if data == self.lines[position]:
            return
        old, new = _ending(self.lines[position]), _ending(data)
        self.crlf += new[0] - old[0]
        self.lf += new[1] - old[1]
        self.lines[position] = data
        self.changed = True

    def keep(self, out: Sequence[Line]) -> tuple[set[int], list[Line]] | None:
        """Put back the lines the edit kept, in their places; the positions kept and the lines
        the edit added at the end. None: a line moved."""
        kept: set[int] = set()
        appended: list[Line] = []
        last = -1
        for line in out:
            if line.origin < 0:
                appended.append(line)
                continue
            if appended or line.origin <= last:
                return None
            last = line.origin
            kept.add(line.origin)
            self.put(line.origin, (line.content + line.eol).encode("utf-8"))
        return kept, appended

    def drop(self, positions: Set[int], links: Mapping[int, Link | None]) -> None:
        """Blank the lines the edit removed, and forget where their pointers were."""
        where = self.where
        for position in positions:
            self.put(position, b"")
            link = links[position]
            if link is not None and link.kind is LinkKind.LOCAL:
                rest = [p for p in positions_of(where, link.target) if p != position]
                if rest:
                    where[link.target] = rest[0] if len(rest) == 1 else rest
                else:
                    del where[link.target]

    def append(self, appended: Sequence[Line]) -> None:
        for line in appended:
            position = len(self.lines)
            self.lines.append(b"")
            self.put(position, (line.content + line.eol).encode("utf-8"))
            if line.link is not None and line.link.kind is LinkKind.LOCAL:
                _with(self.where, line.link.target, position)
            elif DEMOTED_HEADING.match(line.content):
                self.heading_at, self.offending_at = position, -1
            elif self.heading_at >= 0 and self.offending_at < 0 and line.content.strip():
                self.offending_at = position


def check(
    held: HeldIndex,
    targets: Set[str],
    present: Set[str],
    allowed_dead: Set[str],
    kind: ViewKind = ViewKind.AUTO,
) -> list[str]:
    """DESIGN §3's promises for the files an edit touched (`targets`): each indexed once
    (MEMORY.md's pointers as the agent sees them, as `index.verify` counts them).

    Every other file was checked by an earlier pass and no line of it moved since.
    """
    problems: list[str] = []
    in_main: dict[str, int] = {}
    for link in visible_local_links(held.main, kind) if held.main else ():
        in_main[link.target] = in_main.get(link.target, 0) + 1
        if link.target not in present and link.target not in allowed_dead:
            problems.append(f"MEMORY.md: link {link.raw} does not resolve (exact case)")
    for name in sorted(targets):
        n = in_main.get(name, 0) + len(positions_of(held.where, name))
        if n != 1:
            problems.append(f"{name} is indexed {n} times across MEMORY.md and the archive")
    trailers = sum(1 for line in split_lines(held.main or "") if TRAILER.match(line.content))
    if trailers > 1:
        problems.append(f"MEMORY.md holds {trailers} trailer lines")
    return problems


def pairs(
    seen: Mapping[str, list[str]],
    forget: Set[str] = frozenset(),
    *,
    gone: Set[str] = frozenset(),
    present: Set[str] = frozenset(),
) -> Mapping[str, tuple[str, str]]:
    """State's `seen` ([name, description] lists) as the pairs IndexInput wants, without a copy.

    `forget`: files memoryd itself moved away, seen or not (their pointers go, as for any file
    memoryd saw), with no name or description. `gone`: files memoryd saw leave on an earlier
    pass (DirState.gone), the same while no file of that name is in `present`; looked up as
    they are, not copied (up to 10,000 names on every daemon pass)."""
    return _Pairs(seen, frozenset(n for n in forget if n not in seen), gone, present)


class _Pairs(Mapping[str, tuple[str, str]]):
    __slots__ = ("_extra", "_gone", "_present", "_seen")

    def __init__(
        self,
        seen: Mapping[str, list[str]],
        extra: frozenset[str],
        gone: Set[str],
        present: Set[str],
    ) -> None:
        self._seen = seen
        self._extra = extra  # none of them in seen
        self._gone = gone
        self._present = present

    def _unnamed(self, key: object) -> bool:
        """Whether `key` stands, with no name or description, for a file that left."""
        return key in self._extra or (key in self._gone and key not in self._present)

    def __getitem__(self, key: str) -> tuple[str, str]:
        value = self._seen.get(key)
        if value is None:
            if self._unnamed(key):
                return ("", "")
            raise KeyError(key)
        return (value[0], value[1])

    def get(self, key: str, default: Any = None) -> Any:  # Mapping's goes through a KeyError
        value = self._seen.get(key)
        if value is None:
            return ("", "") if self._unnamed(key) else default
        return (value[0], value[1])

    def __contains__(self, key: object) -> bool:
        return key in self._seen or self._unnamed(key)

    def __iter__(self) -> Iterator[str]:
        yield from self._seen
        yield from self._extra
        yield from (n for n in self._gone if n not in self._present and n not in self._seen
                    and n not in self._extra)  # fmt: skip

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # not through __len__: one look, not 10,000 (`if inp.seen`)
        return next(iter(self), None) is not None
