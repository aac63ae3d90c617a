"""Significant words, exact duplicate search and contradiction search over memory bodies.

Duplicate search is exact: every same-type pair whose overlap coefficient |A∩B| / min(|A|,|B|)
reaches the threshold is found. At 0.4-0.6, prefix filtering still leaves a large share of all
pairs, so both engines count the shared words of every same-type pair, cheaply: words many
docs hold densely, a row of pairs at a time, the rest from posting lists. Docs are sorted by
size, so min(|A|,|B|) is the earlier doc's. Engines: pairs_numpy (numpy, optional) and
pairs_pure, with the same answers to the last bit of every overlap.
"""

import functools
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from memoryd.dream import pairs_numpy, pairs_pure

HAVE_NUMPY: Final = pairs_numpy.HAVE_NUMPY

# DESIGN §4.6, verbatim.
STOPWORDS: Final = frozenset(
    {
        "the", "a", "an", "is", "are", "was", "were", "be", "been", "have", "has", "had",
        "do", "does", "did", "will", "would", "could", "should", "may", "might", "can",
        "shall", "to", "of", "in", "for", "on", "with", "at", "by", "from", "as", "into",
        "through", "during", "before", "after", "this", "that", "it", "not", "no", "but",
        "or", "and", "if", "then", "than", "so",
    }
)  # fmt: skip

POSITIVE_DIRECTIVES: Final = ("do", "use", "always", "prefer")
NEGATIVE_DIRECTIVES: Final = ("do not", "don't", "dont", "avoid", "stop using", "never")
_NEGATIVE_PHRASES: Final = frozenset(tuple(d.split()) for d in NEGATIVE_DIRECTIVES if " " in d)
_NEGATIVE_WORDS: Final = frozenset(d for d in NEGATIVE_DIRECTIVES if " " not in d)


def significant_words(body: str) -> frozenset[str]:
    """The body's significant words (DESIGN §4.6): lower-cased, split on whitespace alone (so
    "pnpm." is not "pnpm"), minus words of 2 characters or fewer and ``STOPWORDS``."""
    return frozenset(_significant(body.lower().split()))


def _significant(tokens: list[str]) -> set[str]:
    words = set(tokens)
    words.difference_update(STOPWORDS)
    return {w for w in words if len(w) > 2}


def words_and_directives(body: str) -> tuple[set[str], tuple[frozenset[str], frozenset[str]]]:
    """``significant_words`` of one body, and (objects it tells to do/use, objects it tells not
    to), per DESIGN §4.7: the object is the first significant word after the directive,
    skipping ``use``/``using``, punctuation stripped. Words between a directive and its object
    are no directives themselves, so "don't use X" is never also "use X"."""
    text = body.lower()
    tokens = text.split()
    words = _significant(tokens)
    if "’" in text or "‘" in text:
        return words, _directives(text.replace("’", "'").replace("‘", "'").split())
    return words, _directives(tokens)


class Vocabulary:
    """Dense integer ids for words, so word sets can be compact sorted ``array('I')``."""

    __slots__ = ("_ids", "_words")

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []

    @classmethod
    def of(cls, words: Iterable[str]) -> "Vocabulary":
        """A vocabulary whose ids are the positions of ``words`` (distinct words)."""
        made = cls()
        made._words = list(words)
        made._ids = {w: i for i, w in enumerate(made._words)}
        if len(made._ids) != len(made._words):
            raise ValueError("a vocabulary's words must be distinct")
        return made

    def __len__(self) -> int:
        return len(self._words)

    def all_words(self) -> Sequence[str]:
        """Every word, by id: the vocabulary's own list, not a copy (do not change it)."""
        return self._words

    def id(self, word: str) -> int:
        """The id of ``word``, assigning the next free one on first sight."""
        found = self._ids.get(word)
        if found is None:
            found = len(self._words)
            self._ids[word] = found
            self._words.append(word)
        return found

    def ids(self, words: Iterable[str]) -> "array[int]":
        """Sorted, de-duplicated ids of ``words`` (new words get new ids)."""
        unique = words if isinstance(words, set | frozenset) else set(words)
        known = self._ids
        for w in unique.difference(known):  # the set difference runs in C; most words are known
            known[w] = len(self._words)
            self._words.append(w)
        return array("I", sorted(map(known.__getitem__, unique)))


@dataclass(frozen=True, slots=True)
class Pair:
    """Two docs (indexes into the input, ``a < b``) and their overlap coefficient."""

    a: int
    b: int
    overlap: float


Docs = Sequence[tuple[str, Sequence[int]]]


def _pairs(
    docs: Docs, low: float, engine: Callable[..., list[tuple[int, int, float]]]
) -> list[Pair]:
    """The pairs `engine` finds in each type's docs, none empty, sorted by (a, b)."""
    groups: dict[str, list[int]] = {}
    for i, (doc_type, words) in enumerate(docs):
        if len(words):
            groups.setdefault(doc_type, []).append(i)
    found = [
        pair
        for ids in groups.values()
        if len(ids) > 1
        for pair in engine(ids, [docs[i][1] for i in ids], low)
    ]
    found.sort()
    return [Pair(a, b, ov) for a, b, ov in found]


def _pairs_numpy(docs: Docs, low: float, **tuning: Any) -> list[Pair]:
    """The numpy engine's pairs; `tuning`: pairs_numpy.Tuning's fields (tests make it small)."""
    return _pairs(
        docs, low, functools.partial(pairs_numpy.group_pairs, tuning=pairs_numpy.Tuning(**tuning))
    )


def _pairs_pure(docs: Docs, low: float) -> list[Pair]:
    def engine(
        ids: list[int], rows: list[Sequence[int]], low: float
    ) -> list[tuple[int, int, float]]:
        return pairs_pure.group_pairs(ids, [array("I", sorted(set(r))) for r in rows], low)

    return _pairs(docs, low, engine)


def find_similar_pairs(
    docs: Sequence[tuple[str, Sequence[int]]], low: float, *, use_numpy: bool | None = None
) -> list[Pair]:
    """Every pair of same-type docs whose overlap coefficient is ≥ ``low``, sorted by (a, b).

    ``docs[i]`` is (type, word ids); ids are treated as a set. Empty docs never pair. Exact.
    ``use_numpy`` None picks numpy when it is installed; both engines give the same list.
    """
    if not 0.0 < low < math.inf:  # also refuses NaN
        raise ValueError(f"overlap threshold must be a finite number > 0, got {low!r}")
    if use_numpy and not HAVE_NUMPY:
        raise RuntimeError("use_numpy=True but numpy is not installed")
    if HAVE_NUMPY if use_numpy is None else use_numpy:
        return _pairs_numpy(docs, low)
    return _pairs_pure(docs, low)


# ---------------------------------------------------------------------------------------------
# Contradictions.

_STRIP: Final = "\"'`*_~.,;:!?()[]{}<>«»“”‘’—–-"
_SKIP_AFTER_DIRECTIVE: Final = frozenset({"use", "using"})


# The first token of every directive: only these positions can start one.
_DIRECTIVE_STARTS: Final = frozenset(
    {*POSITIVE_DIRECTIVES, *_NEGATIVE_WORDS, *(phrase[0] for phrase in _NEGATIVE_PHRASES)}
)


def _directive_at(tokens: list[str], i: int) -> tuple[int, bool] | None:
    """(length, is_positive) of the directive starting at ``tokens[i]``, if there is one."""
    t = tokens[i]
    # Two-word negatives first, so that "do not" is never read as the positive "do".
    if i + 1 < len(tokens) and (t, tokens[i + 1]) in _NEGATIVE_PHRASES:
        return 2, False
    if t in _NEGATIVE_WORDS:
        return 1, False
    if t in POSITIVE_DIRECTIVES:
        return 1, True
    return None


def _directives(words: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The directives of a lower-cased body split on whitespace, curly quotes made straight."""
    tokens = [t.strip(_STRIP) for t in words]
    positive: set[str] = set()
    negative: set[str] = set()
    if _DIRECTIVE_STARTS.isdisjoint(tokens):
        return frozenset(), frozenset()
    n = len(tokens)
    resume = 0  # tokens before this were a directive or stood between one and its object
    for i in [k for k, t in enumerate(tokens) if t in _DIRECTIVE_STARTS]:
        if i < resume:
            continue
        found = _directive_at(tokens, i)
        if found is None:
            continue
        length, is_positive = found
        j = i + length
        while j < n and tokens[j] in _SKIP_AFTER_DIRECTIVE:
            j += 1
        while j < n and (len(tokens[j]) <= 2 or tokens[j] in STOPWORDS):
            j += 1
        if j == n:
            break
        (positive if is_positive else negative).add(tokens[j])
        resume = j  # the object may itself start a directive ("always avoid X")
    return frozenset(positive), frozenset(negative)
