"""memoryd's memory of each dir, kept in the state dir (never in the memory dir).

Per dir: the memory files it has seen with their name/description (so a gone file's pointer can
be removed and a generated line recognised), what it has already reported (so each problem is
said once), pile-up counts for the daemon, and a parse cache for a fast restart.
"""

import contextlib
import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from memoryd import fsops
from memoryd.scan import Scanned, dump_cache, load_cache


def dir_key(real_path: Path) -> str:
    return hashlib.sha256(str(real_path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


@dataclass(slots=True)
class DirState:
    path: str = ""
    known: bool = False  # False until memoryd has finished one index pass over the dir
    managed: bool = False  # whether memoryd managed the index at its last pass
    seen: dict[str, list[str]] = field(default_factory=dict)  # file -> [name, description]
    reported: dict[str, str] = field(default_factory=dict)  # what was said once -> signature
    changed_since_dream: list[str] = field(default_factory=list)
    last_dream_ts: float = 0.0
    last_dream_result: str = ""
    last_index_ts: float = 0.0
    last_change_ts: float = 0.0
    reads: dict[str, float] = field(default_factory=dict)  # file -> last read by the agent

    def seen_pairs(self) -> dict[str, tuple[str, str]]:
        return {k: (v[0], v[1]) for k, v in self.seen.items()}

    def report_once(self, key: str, signature: str = "1") -> bool:
        """True the first time (key, signature) is reported; remember it."""
        if self.reported.get(key) == signature:
            return False
        self.reported[key] = signature
        return True

    def forget_reports(self, prefix: str, keep: set[str]) -> None:
        """Forget reports under a prefix that no longer apply, so a recurrence is said again."""
        for key in [k for k in self.reported if k.startswith(prefix) and k not in keep]:
            del self.reported[key]


class StateStore:
    """Loads and saves DirState and parse caches under `<state_dir>/dirs/`."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "dirs"

    def _paths(self, real_path: Path) -> tuple[Path, Path]:
        key = dir_key(real_path)
        return self.root / f"{key}.json", self.root / f"{key}.cache"

    def load(self, real_path: Path) -> DirState:
        path, _ = self._paths(real_path)
        try:
            data: dict[str, Any] = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return DirState(path=str(real_path))
        state = DirState(path=str(real_path))
        for key, value in data.items():
            if hasattr(state, key):
                setattr(state, key, value)
        return state

    def save(self, real_path: Path, state: DirState) -> None:
        path, _ = self._paths(real_path)
        data = json.dumps(
            {f.name: getattr(state, f.name) for f in fields(state)},
            ensure_ascii=True,
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        with contextlib.suppress(OSError):
            if path.read_bytes() == data:
                return
        fsops.write_private(path, data)

    def load_cache(self, real_path: Path) -> dict[str, Scanned]:
        _, path = self._paths(real_path)
        try:
            return load_cache(path.read_bytes())
        except OSError:
            return {}

    def save_cache(self, real_path: Path, files: dict[str, Scanned]) -> None:
        _, path = self._paths(real_path)
        data = dump_cache(files)
        with contextlib.suppress(OSError):
            if path.read_bytes() == data:
                return
        fsops.write_private(path, data)
