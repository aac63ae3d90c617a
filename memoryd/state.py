"""memoryd's memory of each dir, kept in the state dir (never in the memory dir).

Per dir: the memory files it has seen with their name/description (so a gone file's pointer can
be removed and a generated line recognised), what it has already reported (so each problem is
said once), pile-up counts for the daemon, and a parse cache for a fast restart.
"""

import contextlib
import hashlib
import json
from dataclasses import dataclass, field, fields, replace
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


FileId = tuple[int, int, int]  # inode, size, mtime_ns: changes whenever anyone rewrites it


def _file_id(path: Path) -> FileId | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _copy(state: DirState) -> DirState:
    """A copy deep enough for callers that mutate (they replace or update these containers)."""
    return replace(
        state,
        seen=dict(state.seen),
        reported=dict(state.reported),
        changed_since_dream=list(state.changed_since_dream),
        reads=dict(state.reads),
    )


class StateStore:
    """Loads and saves DirState and parse caches under `<state_dir>/dirs/`.

    A long-running process keeps what it last read or wrote in memory, and trusts it while the
    file on disk is unchanged (same inode, size, mtime): a pass over a 10,000-file dir then
    neither re-parses nor re-writes state that did not change.
    """

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "dirs"
        self._states: dict[Path, tuple[FileId, DirState]] = {}
        self._caches: dict[Path, tuple[FileId, dict[str, Scanned]]] = {}

    def _paths(self, real_path: Path) -> tuple[Path, Path]:
        key = dir_key(real_path)
        return self.root / f"{key}.json", self.root / f"{key}.cache"

    def load(self, real_path: Path) -> DirState:
        path, _ = self._paths(real_path)
        current = _file_id(path)
        held = self._states.get(real_path)
        if held is not None and current is not None and held[0] == current:
            return _copy(held[1])
        try:
            data: dict[str, Any] = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return DirState(path=str(real_path))
        state = DirState(path=str(real_path))
        for key, value in data.items():
            if hasattr(state, key):
                setattr(state, key, value)
        if current is not None:
            self._states[real_path] = (current, _copy(state))
        return state

    def save(self, real_path: Path, state: DirState) -> None:
        path, _ = self._paths(real_path)
        held = self._states.get(real_path)
        if held is not None and held[1] == state and held[0] == _file_id(path):
            return  # nothing changed since we read or wrote it
        data = json.dumps(
            {f.name: getattr(state, f.name) for f in fields(state)},
            ensure_ascii=True,
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        with contextlib.suppress(OSError):
            if held is None and path.read_bytes() == data:
                self._states[real_path] = (_file_id(path) or (0, 0, 0), _copy(state))
                return
        fsops.write_private(path, data)
        written = _file_id(path)
        if written is not None:
            self._states[real_path] = (written, _copy(state))

    def load_cache(self, real_path: Path) -> dict[str, Scanned]:
        _, path = self._paths(real_path)
        current = _file_id(path)
        held = self._caches.get(real_path)
        if held is not None and current is not None and held[0] == current:
            return held[1]  # read-only for callers: scan_dir only looks entries up
        try:
            files = load_cache(path.read_bytes())
        except OSError:
            return {}
        if current is not None:
            self._caches[real_path] = (current, files)
        return files

    def save_cache(self, real_path: Path, files: dict[str, Scanned]) -> None:
        _, path = self._paths(real_path)
        held = self._caches.get(real_path)
        if held is not None and held[0] == _file_id(path) and held[1] == files:
            return
        data = dump_cache(files)
        with contextlib.suppress(OSError):
            if held is None and path.read_bytes() == data:
                return
        fsops.write_private(path, data)
        written = _file_id(path)
        if written is not None:
            self._caches[real_path] = (written, dict(files))
