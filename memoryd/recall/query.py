"""Queries and time frames: words -> FTS5 expressions (word forms, typos), frames -> bounds.
Pure but for `expressions`, which asks an index which words it holds."""

import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from memoryd.recall.store import DirIndex

DAY = 86400.0
DEFAULT_LIMIT = 10  # results of a search, a recall, a listing
TIMEFRAMES = {"recent": 30 * DAY, "last_quarter": 90 * DAY}
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_WORD = re.compile(r"\w+")
# The dream pass's stopwords (DESIGN §4.6) and a few question words: they say nothing of
# what a memory is about, and matched alone they rank every memory.
_STOPWORDS = (
    "the a an is are was were be been have has had do does did will would could should may "
    "might can shall to of in for on with at by from as into through during before after this "
    "that it not no but or and if then than so how what when where which who why about"
)
STOPWORDS = frozenset(_STOPWORDS.split())
# Endings cut to reach a word's other forms (`deploys`, `deploying`, `deployment`): the rest
# is searched as a prefix. Longest first; the rest must keep at least 4 characters.
_ENDINGS = ("ments", "ment", "ings", "ing", "ions", "ion", "ies", "es", "ed", "er", "s")
# A prefix stands for at most this many words of the dir (those it starts, in order). Not an
# FTS5 prefix query: the porter tokenizer stems the prefix too (`doing*` is `do*`, which
# matches `docs`, `done`, `docker`...), and a short prefix's merged doclist costs milliseconds.
PREFIX_WORDS = 24
FUZZY_CUTOFF = 80.0  # rapidfuzz ratio for a word the index does not hold (a typo)
FUZZY_MIN_LEN = 4
FUZZY_ALTERNATIVES = 3


class Frame(NamedTuple):
    """A time frame: memories whose date is in [since, until)."""

    since: float | None = None
    until: float | None = None
    label: str = ""


def parse_frame(timeframe: str | None, since: str | None, now: float) -> Frame:
    """`--timeframe recent|last_quarter|YYYY-MM` or `--since 30d|YYYY-MM-DD`; ValueError for
    anything else, naming what is accepted."""
    if timeframe and since:
        raise ValueError("give --since or --timeframe, not both")
    if timeframe:
        text = timeframe.strip()
        if text in TIMEFRAMES:
            return Frame(now - TIMEFRAMES[text], None, text)
        month = _MONTH.match(text)
        if month and 1 <= int(month.group(2)) <= 12:
            year, number = int(month.group(1)), int(month.group(2))
            start = datetime(year, number, 1, tzinfo=UTC)
            end = datetime(year + (number == 12), number % 12 + 1, 1, tzinfo=UTC)
            return Frame(start.timestamp(), end.timestamp(), text)
        raise ValueError(
            f"timeframe {timeframe!r}: use recent (30 days), last_quarter (90 days) or a month "
            "as YYYY-MM"
        )
    if since:
        from memoryd.config import parse_duration

        text = since.strip()
        try:
            return Frame(now - parse_duration(text), None, f"since {text}")
        except ValueError:
            pass
        try:
            day = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"--since {since!r}: use a duration (30d, 12h) or a date (2026-11-01)"
            ) from None
        if day.tzinfo is None:
            day = day.replace(tzinfo=UTC)
        return Frame(day.timestamp(), None, f"since {text}")
    return Frame()


def words(query: str) -> list[str]:
    """The query's words, lower-cased, stopwords and one- and two-letter words dropped (unless
    nothing else is left)."""
    found = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in found if len(w) > 2 and w not in STOPWORDS]
    return list(dict.fromkeys(kept or found))


def name_keys(query: str) -> list[str]:
    """What an exact name or file name of the query would be stored as (lower-cased)."""
    text = " ".join(query.strip().lower().split())
    if not text:
        return []
    bare = text.removesuffix(".md")
    keys = {text, bare, bare.replace(" ", "_"), bare.replace(" ", "-")}
    return sorted(k for k in keys if k)


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def prefix_of(word: str) -> str:
    """The prefix whose words are a word's other forms: its base when an ending comes off
    (`deploys` -> `deploy`), else the word itself; "" for a word under 4 letters."""
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    return word if len(word) >= 4 else ""


def forms(word: str, index: "DirIndex | None" = None) -> list[str]:
    """FTS5 alternatives for one word: itself (the index stems it), and the words of the
    dir that start with its prefix (`deploys` -> `deploy`, `deployment`, `deploying`...),
    as the dir's vocabulary holds them (none without an index)."""
    out = [_quoted(word)]
    prefix = prefix_of(word)
    if prefix and index is not None:
        out += [_quoted(t) for t in index.starting(prefix, PREFIX_WORDS) if t != word]
    return out


class Words(Protocol):
    """A dir's words by length (memoryd.recall.store.Vocabulary)."""

    def chunks(self, length: int) -> Iterable[Sequence[str]]: ...

    def __len__(self) -> int: ...


def fuzzy(word: str, vocabulary: Words) -> list[str]:
    """The words of `vocabulary` (by length) closest to a word it does not hold (a typo),
    best first. Only words of a length the ratio cutoff allows are compared, a chunk at a
    time: the best of each chunk are kept, the others dropped."""
    if len(word) < FUZZY_MIN_LEN or not len(vocabulary):
        return []
    from rapidfuzz import fuzz, process

    # fuzz.ratio is 2·matches / (len(a) + len(b)): past these lengths it cannot reach the cutoff.
    span = 200.0 / FUZZY_CUTOFF - 1.0
    low, high = math.ceil(len(word) / span - 1e-9), math.floor(len(word) * span + 1e-9)
    ranked: list[tuple[float, str]] = []
    for length in range(low, high + 1):
        for words in vocabulary.chunks(length):
            for term, score, _ in process.extract(
                word,
                words,
                scorer=fuzz.ratio,
                processor=None,
                score_cutoff=FUZZY_CUTOFF,
                limit=FUZZY_ALTERNATIVES,
            ):
                if term != word:
                    ranked.append((score, term))
            del words  # before the next chunk is split out
        ranked.sort(key=lambda pair: (-pair[0], pair[1]))
        del ranked[FUZZY_ALTERNATIVES:]
    return [term for _, term in ranked]


class Expressions(NamedTuple):
    """The FTS5 expressions of a query for one index: all words, then any of them."""

    every: str  # "" when no word matched anything, or another dir holds a word this one lacks
    some: str
    corrected: dict[str, list[str]]  # a word the index does not hold -> what it searched instead


class Held(NamedTuple):
    """A query word and its forms in one index, and whether the index holds any of them."""

    word: str
    alternatives: list[str]
    held: bool


def held_words(query: str, index: "DirIndex") -> list[Held]:
    """Each word of the query with its forms in this index, and whether the index holds it."""
    out = []
    for word in words(query):
        alternatives = forms(word, index)
        out.append(Held(word, alternatives, index.has(" OR ".join(alternatives))))
    return out


def expressions(
    query: str,
    index: "DirIndex",
    *,
    held: Sequence[Held] | None = None,
    elsewhere: Iterable[str] = (),
) -> Expressions:
    """Turn a query into FTS5 expressions over one index: each word with its forms; a word
    that matches nothing here nor in any other dir searched (`elsewhere`: the words some dir
    holds) is replaced by the closest words of the index's vocabulary (typos); a word with no
    match and no close word is dropped. A word another dir holds and this one does not is no
    typo: no memory here holds every word, and the others are searched as any of them, so
    that one list across dirs ranks the memories holding every word first. `held`: what
    `held_words` gave for this index, when the caller has it already."""
    held_elsewhere = set(elsewhere)
    groups: list[list[str]] = []
    corrected: dict[str, list[str]] = {}
    lacking = False
    for found in held if held is not None else held_words(query, index):
        alternatives = found.alternatives
        if not found.held:
            if found.word in held_elsewhere:
                lacking = True
                continue
            close = fuzzy(found.word, index.vocabulary())
            if not close:
                continue
            corrected[found.word] = close
            alternatives = [alt for term in close for alt in forms(term)[:1]]
        groups.append(alternatives)
    if not groups:
        return Expressions("", "", corrected)
    every = "" if lacking else " AND ".join("(" + " OR ".join(g) + ")" for g in groups)
    some = " OR ".join(alt for g in groups for alt in g)
    return Expressions(every, some if len(groups) > 1 or lacking else "", corrected)
