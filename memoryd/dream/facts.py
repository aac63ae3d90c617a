"""What the planner needs from one memory file's bytes, derived once per content and reused.

Everything here is a function of the bytes alone (and the parse limits), so it is keyed by
their sha256 and never stale. Checking references (the repo) and age (the clock) is the
planner's.
"""

import re
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from memoryd.dream.refs import Refs, extract_refs
from memoryd.dream.similar import Vocabulary, words_and_directives
from memoryd.model.memfile import Memory, parse_date
from memoryd.model.sealed import frame, frames
from memoryd.model.secrets import mask

_PROHIBITION: Final = re.compile(r"\b(?:do not|don['’]t|never|avoid)\b", re.IGNORECASE)
# Every match holds one of these once lower-cased (only "i" has non-ASCII case partners here).
_PROHIBITION_HINTS: Final = ("do not", "don", "never", "avo")
# Most bodies name nothing and give no directive: they share these instead of empty copies.
_NO_REFS: Final = Refs(paths=(), symbols=())
_NOTHING: Final = frozenset[str]()


@dataclass(frozen=True, slots=True)
class Facts:
    """One memory file's frontmatter fields and body-derived facts (the body is not kept)."""

    name: str
    type: str  # the protective reading, for the guards (Memory.type)
    modified_ts: float  # a frontmatter `modified`/`last_verified` date as a UNIX time, or 0
    promotion_declined: bool
    refs: Refs
    words: "array[int]"  # significant words, as sorted ids of the vocabulary that derived them
    positives: frozenset[str]
    negatives: frozenset[str]
    prohibition: str  # the prohibition phrase found in the body, or ""
    agent_type: str = ""  # the type as Claude Code reads it, for pairing (Memory.agent_type)


def prohibition(body: str) -> str:
    """The first prohibition phrase of the body (DESIGN §4.4), lower-cased, or ""."""
    lowered = body.lower()
    if not any(hint in lowered for hint in _PROHIBITION_HINTS):
        return ""
    found = _PROHIBITION.search(body)
    return found.group(0).lower() if found else ""


def derive(memory: Memory, vocabulary: Vocabulary) -> Facts:
    # Masked: the facts cache must hold no secret, and a secret is no word shared by meaning.
    body = mask(memory.body)
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
        agent_type=sys.intern(memory.agent_type),
    )


def _shared(refs: Refs) -> Refs:
    """``refs`` holding one string per distinct reference across all memories (memories name
    the same paths again and again: 6,600 distinct among 16,500 at 10,000)."""
    if not refs.paths and not refs.symbols:
        return _NO_REFS
    return Refs(tuple(map(sys.intern, refs.paths)), tuple(map(sys.intern, refs.symbols)))


class FactsCache:
    """Facts by sha256, kept between passes in one process, with the vocabulary of their ids.

    After a pass over a dir, entries no dir's latest pass used are dropped; once more were
    dropped than are kept (the vocabulary keeps their words), or the parse limits change, it
    starts again empty.
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
            self.clear()
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
            self.clear()

    def adopt(self, saved: "SavedFacts") -> frozenset[str]:
        """Take the saved entries this cache lacks; returns the contents the file holds."""
        entries = self._entries
        held: set[str] = set()
        # A fresh cache takes the saved ids as they are; one that holds words renumbers them.
        fresh = not entries and not len(self.vocabulary)
        if fresh:
            self.vocabulary = Vocabulary.of(saved.words)
        remap: list[int] | None = None
        for rows in saved.chunks:
            for row in rows:
                held.add(row[0])
                if row[0] in entries:
                    continue
                ids = array("I", row[5])
                if not fresh:
                    if remap is None:
                        remap = [self.vocabulary.id(w) for w in saved.words]
                    ids = array("I", sorted(map(remap.__getitem__, ids)))
                entries[row[0]] = _facts_of(row, ids)
        return frozenset(held)

    def dump(self, used: Iterable[str]) -> Iterator[bytes]:
        """The entries in ``used`` for the state dir (``load_saved``), a frame at a time and
        copying nothing: the whole file at once is ~80 MB more peak at 100,000 memories."""
        shas = [sha for sha in used if sha in self._entries]
        words: Sequence[str] = self.vocabulary.all_words()
        renumber: dict[int, int] | None = None
        if len(self._entries) > len(shas):
            needed: set[int] = set()
            for sha in shas:
                needed.update(self._entries[sha].words)
            if len(words) > 2 * len(needed) + 1024:
                # Words of other dirs would dominate the file: number this dir's own afresh.
                order = sorted(needed)
                renumber = {old: new for new, old in enumerate(order)}
                words = [words[i] for i in order]
        yield frame((_SAVED_HEADER, self._limits, words))
        del words
        for start in range(0, len(shas), _ROWS_PER_FRAME):
            rows = []
            for sha in shas[start : start + _ROWS_PER_FRAME]:
                f = self._entries[sha]
                ids = f.words
                if renumber is not None:
                    ids = array("I", map(renumber.__getitem__, ids))
                rows.append(
                    (sha, f.name, f.type, f.modified_ts, f.promotion_declined, ids.tobytes(),
                     f.refs.paths, f.refs.symbols, f.positives, f.negatives, f.prohibition,
                     f.agent_type)
                )  # fmt: skip
            yield frame(tuple(rows))

    def clear(self) -> None:
        self._entries = {}
        self._used = {}
        self._dropped = 0
        self.vocabulary = Vocabulary()


# The saved file (sealed.frames): a first frame (header, parse limits, words), then frames of
# up to _ROWS_PER_FRAME rows, each (sha256, name, type, modified_ts, promotion_declined, word ids
# as array("I") bytes into `words`, paths, symbols, positives, negatives, prohibition,
# agent_type).
_SAVED_HEADER: Final = ("memoryd dream facts", 6, Facts.__slots__)  # 6: names with ı, ſ, İ
_ROWS_PER_FRAME: Final = 2048


@dataclass(frozen=True, slots=True)
class SavedFacts:
    """The facts a pass saved for a dir, read back from the state dir a frame at a time."""

    words: tuple[str, ...]
    chunks: Iterator[list[tuple[Any, ...]]]  # the checked rows of each whole frame


def load_saved(data: bytes | None, limits: tuple[int, int]) -> SavedFacts | None:
    """What ``FactsCache.dump`` wrote under these parse limits; None for anything else. Rows
    are checked as their frame is taken: a bad one ends the file there."""
    if not data:
        return None
    payloads = frames(data)
    try:
        header, saved_limits, saved_words = next(payloads)
        if header != _SAVED_HEADER or tuple(saved_limits) != limits:
            return None
        if not isinstance(saved_words, list | tuple):
            return None
        words = tuple(saved_words)
        del saved_words
        if len(set(words)) != len(words) or not all(isinstance(w, str) for w in words):
            return None
    except (StopIteration, TypeError, ValueError):
        return None
    return SavedFacts(words, _checked(payloads, len(words)))


def _checked(payloads: Iterator[Any], n_words: int) -> Iterator[list[tuple[Any, ...]]]:
    for rows in payloads:
        good: list[tuple[Any, ...]] = []
        try:
            for row in rows:
                if not _row_ok(row, n_words):
                    return
                good.append(row)
        except (TypeError, ValueError):
            return
        yield good


def _row_ok(row: Any, n_words: int) -> bool:
    """A row as dump writes it: field types, and word ids within the file's words."""
    if not isinstance(row, tuple) or len(row) != 12:
        return False
    sha, name, type_, modified_ts, declined, ids, paths, symbols, pos, neg, banned, agent = row
    if not (
        isinstance(sha, str)
        and isinstance(name, str)
        and isinstance(type_, str)
        and isinstance(agent, str)
        and isinstance(modified_ts, float | int)
        and isinstance(declined, bool)
        and isinstance(ids, bytes)
        and isinstance(banned, str)
        and all(
            isinstance(x, tuple) and all(isinstance(v, str) for v in x) for x in (paths, symbols)
        )
        and all(isinstance(x, frozenset) and all(isinstance(v, str) for v in x) for x in (pos, neg))
    ):
        return False
    words = array("I", ids)  # ValueError when not a whole number of ids
    return not words or max(words) < n_words


def _facts_of(row: tuple[Any, ...], ids: "array[int]") -> Facts:
    _, name, type_, modified_ts, declined, _, paths, symbols, positives, negatives = row[:10]
    banned, agent = row[10:]
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
        agent_type=sys.intern(agent),
    )
