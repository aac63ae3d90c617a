"""An older memoryd's version store, written as that memoryd wrote it (files under
`<state>/versions/`), for the tests of its import into `state.sqlite`
(memoryd.versions.importer)."""

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

_PACK_ENTRY = struct.Struct(">32sQQ")
_PACK_TRAILER = struct.Struct(">8sQQ")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dir_key(path: Path) -> str:
    return hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def root(state: Path) -> Path:
    return state / "versions"


def _private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def loose(state: Path, data: bytes) -> str:
    """`objects/<sha256>`: one version's bytes."""
    (_private(root(state) / "objects") / sha(data)).write_bytes(data)
    return sha(data)


def pack(state: Path, blobs: list[bytes]) -> Path:
    """`packs/<id>.pack`: the head, each object's bytes, the index sorted by sha256, the
    trailer (magic, entries, where the index starts)."""
    body = bytearray(b"memoryd pack 1\n")
    entries = []
    for data in blobs:
        entries.append((bytes.fromhex(sha(data)), len(body), len(data)))
        body += data
    start = len(body)
    for entry in sorted(entries):
        body += _PACK_ENTRY.pack(*entry)
    body += _PACK_TRAILER.pack(b"mdpackix", len(entries), start)
    path = _private(root(state) / "packs") / f"{hashlib.blake2b(body).hexdigest()[:32]}.pack"
    path.write_bytes(bytes(body))
    return path


def log(state: Path, folder: Path, rows: list[dict[str, Any]], raw: str = "") -> Path:
    """`logs/<dir key>.jsonl`: a first line naming the dir, then one line a row (and `raw`)."""
    path = _private(root(state) / "logs") / f"{dir_key(folder)}.jsonl"
    lines = [json.dumps({"dir": str(folder)})] + [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n" + raw)
    return path


def row(
    t: float, name: str, data: bytes, event: str, by: str = "other", **extra: Any
) -> dict[str, Any]:
    return {"t": t, "f": name, "h": sha(data), "n": len(data), "e": event, "by": by, **extra}


def extras(
    state: Path, folder: Path, own: list[tuple[str, str]], alarms: list[dict[str, Any]]
) -> None:
    """The ledger of own writes, the alarms, a retention record and the trash's clock."""
    key = dir_key(folder)
    text = "".join(f"{h} {name}\n" for h, name in own)
    (_private(root(state) / "own") / f"{key}.own").write_text(text)
    (root(state) / "alarms.json").write_text(json.dumps(alarms))
    watched = {f"a.md\0{'0' * 64}\0{1.0!r}": 5.0}
    (_private(root(state) / "watched") / f"{key}.json").write_text(json.dumps(watched))
    (_private(root(state) / "tables") / f"{key}.table").write_bytes(b"a cache")
    (root(state) / ".lock").write_bytes(b"")
    clock = {"wall": 100.0, "boot": None, "high_water": 100.0, "witnessed": 42.0}
    (state / "trash-clock.json").write_text(json.dumps(clock))


def present(state: Path) -> list[str]:
    """What is left of the old layout."""
    out = (
        [str(p.relative_to(state)) for p in root(state).rglob("*")] if root(state).exists() else []
    )
    return sorted(
        out + (["trash-clock.json"] if os.path.lexists(state / "trash-clock.json") else [])
    )
