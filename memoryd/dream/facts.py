"""What the planner needs from one memory file's bytes, derived once per content and reused.

Everything here is a function of the file's bytes alone (and the parse limits): not of its
name, its mtime or the repo. So it is keyed by the bytes' sha256, and an entry can never be
stale: a file that changed has another key. The repo-dependent part (checking the references)
and the time-dependent part (the age, the guards) are left to the planner.
"""

import re
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from memoryd.dream.refs import Refs, extract_refs
from memoryd.dream.similar import Vocabulary, words_and_directives
from memoryd.memfile import Memory
from memoryd.scan import parse_date
from memoryd.sealed import seal_pieces, unseal

_PROHIBITION: Final = re.compile(r"\b(?:do not|don['’]t|never|avoid)\b", re.IGNORECASE)
# Every match holds one of these once lower-cased (of the letters involved only "i" has
# case-insensitive partners outside ASCII), so a body with none of them needs no regex search.
_PROHIBITION_HINTS: Final = ("do not", "don", "never", "avo")
# Most bodies name nothing and give no directive: they share these instead of empty copies.
_NO_REFS: Final = Refs(paths=(), symbols=())
_NOTHING: Final = frozenset[str]()


@dataclass(frozen=True, slots=True)
class Facts:
    """One memory file's frontmatter fields and body-derived facts (the body is not kept)."""

    name: str
    type: str
    modified_ts: float  # a frontmatter `modified`/`last_verified` date as a UNIX time, or 0
    promotion_declined: bool
    refs: Refs
    words: "array[int]"  # significant words, as sorted ids of the vocabulary that derived them
    positives: frozenset[str]
    negatives: frozenset[str]
    prohibition: str  # the prohibition phrase found in the body, or ""


def prohibition(body: str) -> str:
    """The first prohibition phrase of the body (DESIGN §4.4), lower-cased, or ""."""
    lowered = body.lower()
    if not any(hint in lowered for hint in _PROHIBITION_HINTS):
        return ""
    found = _PROHIBITION.search(body)
    return found.group(0).lower() if found else ""


def derive(memory: Memory, vocabulary: Vocabulary) -> Facts:
    body = memory.body
    refs = extract_refs(body)
    words, (positives, negatives) = words_and_directives(body)
    declined = str(memory.frontmatter.get("promotion", "")).strip().lower() == "declined"
    return Facts(
        name=memory.name,
        type=sys.intern(memory.type),
        modified_ts=parse_date(memory.modified),
        promotion_declined=declined,
        refs=_shared(refs),
        words=vocabulary.ids(words),
        positives=positives or _NOTHING,
        negatives=negatives or _NOTHING,
        prohibition=prohibition(body),
    )


def _shared(refs: Refs) -> Refs:
    """``refs`` holding one string per distinct reference across all memories.

    Memories of one project name the same paths and symbols again and again (at 10,000
    memories, 6,600 distinct paths among 16,500); each memory's own copies would all be kept.
    """
    if not refs.paths and not refs.symbols:
        return _NO_REFS
    return Refs(tuple(map(sys.intern, refs.paths)), tuple(map(sys.intern, refs.symbols)))


class FactsCache:
    """Facts by sha256, kept between passes in one process, with the vocabulary of their ids.

    Bounded by what the dirs hold: after a pass over a dir, entries that no dir's latest pass
    used are dropped. The vocabulary still holds the words of dropped entries, so once more
    entries were dropped than are kept, it starts again, empty, with an empty cache. A change
    of parse limits (which decide what parses at all) also starts again.
    """

    __slots__ = ("_dropped", "_entries", "_limits", "_used", "vocabulary")

    def __init__(self) -> None:
        self._limits: tuple[int, int] = (0, 0)
        self._entries: dict[str, Facts] = {}
        self._used: dict[Path, frozenset[str]] = {}
        self._dropped = 0
        self.vocabulary = Vocabulary()

    def __len__(self) -> int:
        return len(self._entries)

    def begin(self, limits: tuple[int, int]) -> None:
        """Start a pass parsed with these (max file, max frontmatter) byte limits."""
        if limits != self._limits:
            self._reset()
            self._limits = limits

    def get(self, sha256: str) -> Facts | None:
        return self._entries.get(sha256)

    def put(self, sha256: str, facts: Facts) -> None:
        self._entries[sha256] = facts

    def finish(self, dir_path: Path, used: frozenset[str]) -> None:
        """The pass over ``dir_path`` used these entries: drop what no dir still uses."""
        self._used[dir_path] = used
        live = frozenset[str]().union(*self._used.values())
        if len(live) < len(self._entries):
            self._dropped += len(self._entries) - len(live)
            self._entries = {k: v for k, v in self._entries.items() if k in live}
        if self._dropped > len(self._entries):
            self._reset()

    def clear(self) -> None:
        """Forget everything (the next pass derives every memory's facts again)."""
        self._reset()

    def adopt(self, saved: "SavedFacts") -> None:
        """Take the entries of a saved file that this cache does not hold yet."""
        entries = self._entries
        if not entries and not len(self.vocabulary):
            # A fresh cache takes the saved ids as they are: no renumbering.
            self.vocabulary = Vocabulary.of(saved.words)
            for sha256, row in saved.rows.items():
                entries[sha256] = _facts_of(row, array("I", row[5]))
            return
        remap: list[int] | None = None
        for sha256, row in saved.rows.items():
            if sha256 in entries:
                continue
            if remap is None:
                remap = [self.vocabulary.id(w) for w in saved.words]
            ids = array("I", sorted(map(remap.__getitem__, array("I", row[5]))))
            entries[sha256] = _facts_of(row, ids)

    def dump(self, used: Iterable[str]) -> list[bytes]:
        """The entries in ``used``, sealed for the state dir (see ``load_saved``), as pieces
        to write one after the other."""
        chosen = [(sha, self._entries[sha]) for sha in used if sha in self._entries]
        words = self.vocabulary.words()
        arrays = [f.words for _, f in chosen]
        needed: set[int] = set()
        for ids in arrays:
            needed.update(ids)
        if len(words) > 2 * len(needed) + 1024:
            # Words of other dirs would dominate the file: number this dir's own afresh.
            order = sorted(needed)
            renumber = {old: new for new, old in enumerate(order)}
            words = [words[i] for i in order]
            arrays = [array("I", map(renumber.__getitem__, ids)) for ids in arrays]
        rows = tuple(
            (sha, f.name, f.type, f.modified_ts, f.promotion_declined, ids.tobytes(),
             f.refs.paths, f.refs.symbols, f.positives, f.negatives, f.prohibition)
            for (sha, f), ids in zip(chosen, arrays, strict=True)
        )  # fmt: skip
        return seal_pieces(_SAVED_HEADER, (self._limits, tuple(words), rows))

    def _reset(self) -> None:
        self._entries = {}
        self._used = {}
        self._dropped = 0
        self.vocabulary = Vocabulary()


# The saved file: each row is (sha256, name, type, modified_ts, promotion_declined, word ids as
# array("I") bytes into `words`, paths, symbols, positives, negatives, prohibition).
_SAVED_HEADER: Final = ("memoryd dream facts", 1, Facts.__slots__)


@dataclass(frozen=True, slots=True)
class SavedFacts:
    """The facts a pass saved for a dir, as read back from the state dir."""

    words: tuple[str, ...]
    rows: Mapping[str, tuple[Any, ...]]  # sha256 -> row


def load_saved(data: bytes | None, limits: tuple[int, int]) -> SavedFacts | None:
    """What ``FactsCache.dump`` wrote under these parse limits; None for anything else."""
    payload: Any = unseal(_SAVED_HEADER, data) if data else None
    try:
        saved_limits, words, rows = payload
        if tuple(saved_limits) != limits or not isinstance(words, tuple):
            return None
        by_sha = {row[0]: row for row in rows if len(row) == 11}
        if len(by_sha) != len(rows) or len(set(words)) != len(words):
            return None
        for row in rows:  # ids must name words of the file
            ids = array("I", row[5])
            if ids and max(ids) >= len(words):
                return None
        return SavedFacts(words, by_sha)
    except (TypeError, ValueError):
        return None


def _facts_of(row: tuple[Any, ...], ids: "array[int]") -> Facts:
    _, name, type_, modified_ts, declined, _, paths, symbols, positives, negatives, banned = row
    return Facts(
        name=name,
        type=sys.intern(type_),
        modified_ts=modified_ts,
        promotion_declined=declined,
        refs=_shared(Refs(paths, symbols)),
        words=ids,
        positives=positives or _NOTHING,
        negatives=negatives or _NOTHING,
        prohibition=banned,
    )
