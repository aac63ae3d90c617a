"""The search indexes of many dirs, with only a few open at a time.

An open index holds three files (the database, its -wal and its -shm) and SQLite's page
cache: kept open for every dir, a search over 340 dirs met the common limit of 1,024 open
files (100 dirs under macOS's 256), and an MCP server over 2,000 dirs held 6,000 files and
600 MB. A query works on one dir at a time, so the indexes are kept in a mapping that closes
the least recently used one's connection past MAX_OPEN; a closed index opens again, by
itself, when it is next used.
"""

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path

from memoryd.recall.store import DirIndex

MAX_OPEN = 16  # 48 files at most, far below every common limit


class OpenBounded(Mapping[Path, DirIndex]):
    """Dir -> its search index; getting one marks it used and closes those beyond `limit`."""

    def __init__(self, indexes: dict[Path, DirIndex], limit: int = MAX_OPEN) -> None:
        self._indexes = indexes
        self._limit = max(1, limit)
        self._used: OrderedDict[Path, None] = OrderedDict()

    def __getitem__(self, key: Path) -> DirIndex:
        index = self._indexes[key]
        self._used[key] = None
        self._used.move_to_end(key)
        while len(self._used) > self._limit:
            oldest, _ = self._used.popitem(last=False)
            self._indexes[oldest].close()
        return index

    def __iter__(self) -> Iterator[Path]:
        return iter(self._indexes)

    def __len__(self) -> int:
        return len(self._indexes)

    def close(self) -> None:
        """Close every index's connection."""
        for index in self._indexes.values():
            index.close()
        self._used.clear()

    def open_now(self) -> int:
        """How many indexes may hold an open connection now (at most the limit)."""
        return len(self._used)
