"""Plans the circuit breaker refused, kept so that a person can apply one after review
(`memoryd dream DIR --apply PASS_ID`).

A refused pass writes its plan to `<state dir>/refused/<dir key>.<pass id>.json` (0600):
each planned move with its reason, and the sha256 of every file the plan rests on (the files
to move and the newer ones that keep their content). Applying it moves exactly those files,
and only while every one of those files still holds those bytes. The newest plans of a dir
are kept (PLANS_KEEP); an applied plan is removed.
"""

import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd import fsops, safejson
from memoryd.dream.kinds import MoveReason
from memoryd.dream.plan import Move, Plan
from memoryd.errors import MemorydError
from memoryd.paths import read_bounded
from memoryd.state import dir_key

FOLDER = "refused"
PLANS_KEEP = 10  # per dir: a person reviews the last few refusals, not a history
PLAN_MAX_BYTES = 64 << 20  # a 100,000-memory dir's plan is a few MB
_PASS_ID = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$")


@dataclass(frozen=True, slots=True)
class StoredPlan:
    pass_id: str
    dir: str  # the memory dir's real path
    time: str
    moves: list[dict[str, Any]]  # Move fields, and `missing` (the references gone)
    files: dict[str, str] = field(default_factory=dict)  # every file the plan rests on: sha256

    def as_moves(self) -> list[Move]:
        return [
            Move(
                str(m["filename"]),
                str(m["sha256"]),
                MoveReason(str(m["reason"])),
                str(m.get("detail") or ""),
                m.get("duplicate_of"),
                m.get("superseded_by"),
                m.get("overlap"),
            )
            for m in self.moves
        ]

    def missing(self) -> dict[str, list[str]]:
        return {str(m["filename"]): list(m.get("missing") or []) for m in self.moves}


def _folder(state_dir: Path) -> Path:
    return state_dir / FOLDER


def _path(state_dir: Path, real_path: Path, pass_id: str) -> Path:
    return _folder(state_dir) / f"{dir_key(real_path)}.{pass_id}.json"


def save(state_dir: Path, real_path: Path, pass_id: str, plan: Plan) -> None:
    """Keep a refused pass's plan (durably: a person may apply it tomorrow); the dir's oldest
    plans past PLANS_KEEP go."""
    files: dict[str, str] = {}
    moves = []
    for move in plan.moves:
        item = plan.items.get(move.filename)
        moves.append({**asdict(move), "missing": item.missing if item else []})
        files[move.filename] = move.sha256
        for other in (move.duplicate_of, move.superseded_by):
            if other and other in plan.items:
                files[other] = plan.items[other].sha256
    stored = StoredPlan(
        pass_id,
        str(real_path),
        datetime.now().astimezone().isoformat(timespec="seconds"),
        moves,
        files,
    )
    fsops.write_private(_path(state_dir, real_path, pass_id), json.dumps(asdict(stored)).encode())
    kept = sorted(_folder(state_dir).glob(f"{dir_key(real_path)}.*.json"))
    for old in kept[:-PLANS_KEEP]:
        with contextlib.suppress(OSError):
            old.unlink()


def load(state_dir: Path, real_path: Path, pass_id: str) -> StoredPlan:
    """The plan a refused pass of this dir kept; MemorydError saying why there is none."""
    if not _PASS_ID.match(pass_id):
        raise MemorydError(
            f"{pass_id!r} is no pass id (one looks like 20261201T124558-86f002: the refused "
            "pass's report and its dream.refused row give it)"
        )
    path = _path(state_dir, real_path, pass_id)
    try:
        data = safejson.loads(read_bounded(path, PLAN_MAX_BYTES, follow=False))
        stored = StoredPlan(**data)
    except FileNotFoundError:
        elsewhere = list(_folder(state_dir).glob(f"*.{pass_id}.json"))
        where = ""
        if elsewhere:
            with contextlib.suppress(OSError, ValueError, TypeError):
                other = safejson.loads(read_bounded(elsewhere[0], PLAN_MAX_BYTES, follow=False))
                where = f" (it was refused in {other['dir']})"
        raise MemorydError(
            f"{real_path}: no refused plan {pass_id} to apply{where}; it was applied already, "
            f"or is older than the last {PLANS_KEEP} refusals (run `memoryd dream` again for a "
            "new plan)"
        ) from None
    except (OSError, ValueError, TypeError) as error:
        raise MemorydError(f"{path}: the stored plan cannot be read ({error})") from error
    if stored.dir != str(real_path) or stored.pass_id != pass_id:
        raise MemorydError(f"{path}: the stored plan is for another dir or pass")
    return stored


def exists(state_dir: Path, real_path: Path, pass_id: str) -> bool:
    return bool(_PASS_ID.match(pass_id)) and _path(state_dir, real_path, pass_id).is_file()


def remove(state_dir: Path, real_path: Path, pass_id: str) -> None:
    with contextlib.suppress(OSError):
        _path(state_dir, real_path, pass_id).unlink()
