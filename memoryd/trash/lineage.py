"""Supersession history from the trash manifests (pure): what a memory superseded and what
superseded it, both ways and transitively.

A manifest record of a duplicate or contradiction loser names its winner (`duplicate_of`,
`superseded_by`): one edge loser -> winner, with the day, time, reason and pass id. From the
edges of one dir, `history(name, entries)` walks forward (what superseded the memory, and what
superseded that...) and backward (what it superseded, and what those had superseded...), each
name once, nearest first. The result is a list of entries each with a `kind`, so that other
kinds of entry (the file's own versions, memoryd.versions) can join the same list.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memoryd.trash.manifest import Entry

SUPERSEDED_BY = "superseded_by"  # the subject (or one it leads to) lost to `winner`
SUPERSEDED = "superseded"  # `loser` lost to the subject (or to one that leads to it)


@dataclass(frozen=True, slots=True)
class Link:
    kind: str  # SUPERSEDED_BY | SUPERSEDED
    depth: int  # 1: the subject itself is the loser (or winner); 2: one step further...
    loser: str
    winner: str
    reason: str  # duplicate | contradiction
    day: str
    time: str
    pass_id: str
    id: str  # the trash record's id (`memoryd trash restore ID`)
    detail: str
    restored_as: str | None
    restored_at: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class History:
    subject: str
    in_trash: list[Entry] = field(default_factory=list)  # the subject's own records, any reason
    entries: list[Link] = field(default_factory=list)

    def lost_to(self) -> list[Link]:
        return [e for e in self.entries if e.kind == SUPERSEDED_BY]

    def won_over(self) -> list[Link]:
        return [e for e in self.entries if e.kind == SUPERSEDED]


def _winner(entry: Entry) -> str | None:
    return entry.record.duplicate_of or entry.record.superseded_by


def _link(kind: str, depth: int, entry: Entry) -> Link:
    r = entry.record
    winner = _winner(entry)
    assert winner is not None
    detail = r.details.get("detail", "") if isinstance(r.details, dict) else ""
    return Link(
        kind, depth, r.original_name, winner, r.reason, r.day, r.time, r.pass_id, r.id,
        str(detail), entry.restored_as, entry.restored_at,
    )  # fmt: skip


def _walk(
    start: str, kind: str, step: dict[str, list[Entry]], ends: Callable[[Entry], str | None]
) -> list[Link]:
    """Breadth first from `start` along `step`, each name expanded once (cycles end)."""
    out: list[Link] = []
    seen = {start}
    frontier = [start]
    depth = 0
    while frontier:
        depth += 1
        following: list[str] = []
        for name in frontier:
            for entry in step.get(name, []):
                out.append(_link(kind, depth, entry))
                nxt = ends(entry)
                if nxt is not None and nxt not in seen:
                    seen.add(nxt)
                    following.append(nxt)
        frontier = following
    return out


def history(name: str, entries: Iterable[Entry]) -> History:
    """The supersession history of the memory file `name` in one dir's trash entries (oldest
    first, as trash.contents gives them). Linear in the entries: each name is expanded once."""
    forward: dict[str, list[Entry]] = {}  # loser -> its records
    backward: dict[str, list[Entry]] = {}  # winner -> the records of its losers
    out = History(name)
    for entry in entries:
        if entry.record.original_name == name:
            out.in_trash.append(entry)
        winner = _winner(entry)
        if winner is None:
            continue
        forward.setdefault(entry.record.original_name, []).append(entry)
        backward.setdefault(winner, []).append(entry)
    out.entries = _walk(name, SUPERSEDED_BY, forward, _winner) + _walk(
        name, SUPERSEDED, backward, lambda e: e.record.original_name
    )
    return out


def names_in(entries: Sequence[Entry]) -> set[str]:
    """Every file name the entries know, as a loser or a winner."""
    out = set()
    for entry in entries:
        out.add(entry.record.original_name)
        winner = _winner(entry)
        if winner:
            out.add(winner)
    return out


def render(h: History, where: str) -> list[str]:
    """Lines for a person: the subject's own trash records, then the chains."""
    lines = [f"{where}"]
    for entry in h.in_trash:
        r = entry.record
        if entry.restored_as:
            when = f" on {entry.restored_at}" if entry.restored_at else ""
            state = f"restored as {entry.restored_as}{when}"
        else:
            state = f"in the trash ({entry.folder.name}/{r.stored_name}, id {r.id})"
        lines.append(f"  trashed {r.day} ({r.reason}, pass {r.pass_id}): {state}")
    lost, won = h.lost_to(), h.won_over()
    lines.append("  superseded by:" if lost else "  superseded by: nothing")
    for link in lost:
        lines.append("    " + _line(link, link.loser, link.winner, "lost to"))
    lines.append("  superseded:" if won else "  superseded: nothing")
    for link in won:
        lines.append("    " + _line(link, link.winner, link.loser, "won over"))
    return lines


def _line(link: Link, a: str, b: str, verb: str) -> str:
    back = f"; restored as {link.restored_as}" if link.restored_as else ""
    pad = "  " * (link.depth - 1)
    return (
        f"{pad}{a} {verb} {b} on {link.day} ({link.reason}, pass {link.pass_id}, id {link.id})"
        f"{back}"
    )
