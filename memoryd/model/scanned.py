"""What a scan keeps of each memory file between scans (`Scanned`), and the parse cache that
holds them in the state store: pure values, so the store loads and saves the cache without
the scan itself."""

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memoryd.model.sealed import seal, unseal

# The index grammar is imported by the first entry made: indexing.scan imports this module,
# and a search's skip_reason needs none of it.
if TYPE_CHECKING:
    from memoryd.model.index import Entry


@dataclass(slots=True)
class Scanned:
    """What memoryd keeps per file between scans: small, no body (bodies are re-read by dream)."""

    filename: str
    ino: int
    size: int
    mtime_ns: int
    kind: str  # "memory" | "note" | "problem"
    sha256: str = ""
    name: str = ""
    description: str = ""
    type: str = ""
    modified_ts: float = 0.0
    problem_kind: str = ""
    problem_message: str = ""
    problem_hint: str = ""

    @property
    def age_ts(self) -> float:
        return max(self.mtime_ns / 1e9, self.modified_ts)

    def entry(self) -> "Entry":
        from memoryd.model.index import Entry

        return Entry(self.filename, self.name, self.description, self.type, self.age_ts)

    def as_tuple(self) -> tuple[object, ...]:
        return _scanned_fields(self)


_scanned_fields = operator.attrgetter(*Scanned.__slots__)


# The cache file (sealed.py): a header naming the format and Scanned's fields, and one column
# per field, which marshal loads faster than a tuple per file.
CACHE_HEADER = ("memoryd scan cache", 7, Scanned.__slots__)  # 7: names with ı, ſ, İ


_COLUMNS = tuple(operator.attrgetter(name) for name in Scanned.__slots__)


def dump_cache(files: Mapping[str, Scanned]) -> bytes:
    # Column by column, in C: no tuple per file to transpose (~2 ms of a one-change `index`).
    entries = files.values()
    return seal(CACHE_HEADER, tuple(tuple(map(column, entries)) for column in _COLUMNS))


def load_cache(data: bytes) -> dict[str, Scanned]:
    """The files of a saved cache; {} for anything unreadable, so a bad cache means a re-parse."""
    columns = unseal(CACHE_HEADER, data)
    try:
        if not isinstance(columns, tuple) or len(columns) != len(Scanned.__slots__):
            return {}
        return dict(zip(columns[0], map(Scanned, *columns), strict=True))
    except (ValueError, TypeError, LookupError):
        return {}
