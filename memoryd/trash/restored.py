"""Restores are final (DESIGN §5, Amendments): a memory a person brought back from the trash
is not moved again by any pass until its bytes change.

`memoryd trash restore` records a pin in the state dir (one file per memory dir, beside its
state): the file's name, the sha256 of the bytes restored, when, and the trash id. A dream
pass (a command's or the daemon's) leaves a pinned memory out of every move: not moved as the
loser of a duplicate or a contradiction, nor as fully stale, and not the winner that sends
another memory to the trash either (the person's choice was about this pair; the other one
stays until a person or a change decides). A pin holds while some file holds exactly those
bytes:
- under the recorded name; or, when that name no longer holds them, under the first name
  (in name order) that does: an agent's rename keeps the pin, the content is what the person
  chose;
- a change to the bytes ends it: the changed memory is judged again like any other (and the
  same bytes written again are pinned again: they are what the person restored).
"""

import contextlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from memoryd.storage import safejson
from memoryd.storage.state import StateStore

PINS_KEEP = 1_000  # restores are a person's doing, one at a time: the oldest go past this


@dataclass(frozen=True, slots=True)
class Pin:
    file: str
    sha256: str
    time: str  # ISO-8601, local time with its offset
    id: str  # the trash record it came back from

    @property
    def detail(self) -> str:
        """What `explain` and the pass say about it."""
        return f"restored by a person on {self.time[:10]}; not moved again until it changes"


def load(store: StateStore, real_path: Path) -> list[Pin]:
    """The dir's pins, oldest first; none when there are none or the file cannot be read."""
    raw = store.load_pins(real_path)
    try:
        rows = safejson.loads(raw) if raw is not None else []
    except (ValueError, RecursionError):
        return []
    out = []
    for row in rows if isinstance(rows, list) else []:
        with contextlib.suppress(TypeError):
            pin = Pin(**row) if isinstance(row, dict) else None
            if pin is not None and all(isinstance(v, str) for v in asdict(pin).values()):
                out.append(pin)
    return out


def record(store: StateStore, real_path: Path, pin: Pin) -> None:
    """Add a pin (replacing one for the same name or trash id), durably: written before the
    file moves back, so that no pass can see the restored file unpinned. The caller holds the
    dir's writer lock (every pass that reads pins does too)."""
    kept = [p for p in load(store, real_path) if pin.file != p.file and pin.id != p.id]
    pins = kept[-(PINS_KEEP - 1) :]
    data = json.dumps([asdict(p) for p in (*pins, pin)], ensure_ascii=True, sort_keys=True)
    store.save_pins(real_path, data.encode())


def pinned(pins: Iterable[Pin], files: Iterable[tuple[str, str]]) -> dict[str, Pin]:
    """Which of the dir's memory files (name, sha256 of its bytes now) are pinned, and by
    which pin (see the module's rules)."""
    by_name = dict(files)
    by_sha: dict[str, list[str]] = {}
    for name in sorted(by_name):
        by_sha.setdefault(by_name[name], []).append(name)
    out: dict[str, Pin] = {}
    for pin in pins:
        if by_name.get(pin.file) == pin.sha256:
            out[pin.file] = pin
    for pin in pins:
        if by_name.get(pin.file) != pin.sha256:
            moved = [n for n in by_sha.get(pin.sha256, []) if n not in out]
            if moved:
                out[moved[0]] = pin
    return out


def now_iso(clock: float) -> str:
    return datetime.fromtimestamp(clock).astimezone().isoformat(timespec="seconds")
