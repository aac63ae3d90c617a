"""Flags a person has seen (`memoryd ack FILE`): a memory flagged for review (partially stale,
or fully stale and kept by a guard) is listed by every pass's report until someone says they
saw it; then it is not listed again until it changes.

The record is memoryd's, in the state dir beside the dir's state (`<key>.acked`), never in
the memory file: per file, the sha256 of its bytes and a digest of its references' status
when it was acknowledged, and when. An acknowledgement holds while both are what they were:
an edit to the file, or a reference found again or gone since (a repo change), lists it
again.
"""

import contextlib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from memoryd import fsops, safejson
from memoryd.dream.plan import Item, Plan
from memoryd.state import StateStore, dir_key

ACKS_KEEP = 10_000  # a person's doing, one file at a time: the oldest go past this
ACKS_MAX_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Ack:
    file: str
    sha256: str  # the file's bytes when acknowledged
    refs: str  # refs_digest of its references then
    time: str  # ISO-8601, local time with its offset

    @property
    def detail(self) -> str:
        """What `explain` says of it."""
        return (
            f"acknowledged by a person on {self.time[:10]}; not listed for review again until "
            "its bytes or its references' status change"
        )


def refs_digest(item: Item) -> str:
    """The status of every reference the memory names, as one digest."""
    checks = sorted(
        (c.ref, c.kind, c.scope.value, c.status.value, c.moved_to or "") for c in item.checks
    )
    return hashlib.sha256(json.dumps(checks).encode()).hexdigest()[:32]


def _path(store: StateStore, real_path: Path) -> Path:
    return store.root / f"{dir_key(real_path)}.acked"


def load(store: StateStore, real_path: Path) -> list[Ack]:
    """The dir's acknowledgements, oldest first; none when there are none or the record
    cannot be read (the flags are listed again: nothing is lost)."""
    raw = store.read_file(_path(store, real_path))
    try:
        rows = safejson.loads(raw) if raw is not None and len(raw) <= ACKS_MAX_BYTES else []
    except ValueError:
        return []
    out = []
    for row in rows if isinstance(rows, list) else []:
        with contextlib.suppress(TypeError):
            ack = Ack(**row) if isinstance(row, dict) else None
            if ack is not None and all(isinstance(v, str) for v in asdict(ack).values()):
                out.append(ack)
    return out


def record(store: StateStore, real_path: Path, acks: Iterable[Ack]) -> None:
    """Add acknowledgements (each replacing one for the same file), durably, as 0600. The
    caller holds the dir's writer lock."""
    new = {a.file: a for a in acks}
    kept = [a for a in load(store, real_path) if a.file not in new]
    rows = [*kept, *new.values()][-ACKS_KEEP:]
    data = json.dumps([asdict(a) for a in rows], ensure_ascii=True, sort_keys=True)
    fsops.write_private(_path(store, real_path), data.encode())


def holds(ack: Ack | None, item: Item) -> bool:
    """Whether `ack` still covers the memory as `item` sees it now."""
    return ack is not None and ack.sha256 == item.sha256 and ack.refs == refs_digest(item)


def acknowledged(acks: Iterable[Ack], plan: Plan) -> set[str]:
    """The flagged memories of `plan` a person acknowledged as they are now."""
    by_file = {a.file: a for a in acks}
    return {
        f.filename
        for f in plan.flagged
        if f.filename in plan.items and holds(by_file.get(f.filename), plan.items[f.filename])
    }
