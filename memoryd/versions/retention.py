"""When an ended version in the version store has been kept long enough: by the time memoryd
watched pass since it first found it ended (`witness`, the trash's clock check), never by the
wall clock's reading alone.

A version's row says when it ended by the wall clock of the process that saw it end; that
time may be a month ahead (a clock fault at a daemon's start) or a year behind (a machine
booting before its clock syncs). So each prune records, per dir, the `witnessed` count when it
first found each ended version (`versions_watched`, keyed by name, sha256 and end time): a
version goes only once memoryd has watched it ended for the whole retention and no clock
memoryd has seen puts its end within it.
"""

import sqlite3
from pathlib import Path

from memoryd.versions import witness


def _key(name: str, sha: str, until: float) -> str:
    return f"{name}\0{sha}\0{until!r}"


class Ages:
    """The ended versions one prune looks at, with when memoryd first watched each ended."""

    def __init__(self, conn: sqlite3.Connection, clock: witness.Clock) -> None:
        self.conn = conn
        self.clock = clock
        self._known: dict[Path, dict[str, float]] = {}  # as recorded before this prune
        self._now: dict[Path, dict[str, float]] = {}  # what this prune found ended

    def _load(self, path: Path) -> dict[str, float]:
        known = self._known.get(path)
        if known is None:
            rows = self.conn.execute(
                "SELECT key, since FROM versions_watched WHERE dir = ?", (str(path),)
            )
            known = self._known[path] = dict(rows.fetchall())
            self._now[path] = {}
        return known

    def young(self, path: Path, name: str, sha: str, until: float, span: float) -> bool:
        """Whether the version of `name` with `sha`, ended at `until` (a wall-clock reading),
        is within a retention of `span` seconds."""
        key = _key(name, sha, until)
        since = self._load(path).get(key, self.clock.witnessed)
        self._now[path][key] = since
        return not witness.may_go(self.clock, since, (until,), span)

    def save(self) -> None:
        """Record, per dir looked at, the ended versions this prune found (those past the
        log's compaction drop out)."""
        for path, found in self._now.items():
            if found == self._known.get(path):
                continue
            self.conn.execute("DELETE FROM versions_watched WHERE dir = ?", (str(path),))
            self.conn.executemany(
                "INSERT INTO versions_watched (dir, key, since) VALUES (?, ?, ?)",
                [(str(path), key, since) for key, since in found.items()],
            )
