"""Exact pairs at a high overlap among docs that share a key, by prefix filtering.

The dream pass's engine (memoryd.dream.similar) counts the shared words of every same-type
pair, quadratic in the docs; a JSONL record store of up to 80,000 records pairs only records
sharing a scope entry, at the duplicate threshold: counting every pair there took 13 s.

Here a pair is found through its smaller doc's rarest words only, among docs sharing a key.
Exact (pigeonhole): a doc of `size` words needs `k` shared words to reach the threshold, so
one of any `size - k + 1` of its words is shared; the rarest have the shortest posting lists.
Each candidate is checked by its real overlap, computed as the dream engines do.
"""

from collections import Counter
from collections.abc import Collection, Hashable, Sequence

from memoryd.dream.pairs_pure import min_shared
from memoryd.dream.similar import Pair


class Pairs(list[Pair]):
    """The pairs found, and how many candidates were checked (about one per doc when few are
    alike, never every pair)."""

    checked: int = 0


def pairs_sharing_a_key(
    docs: Sequence[tuple[Collection[Hashable], Sequence[int]]], low: float
) -> Pairs:
    """Every pair of docs that share a key and whose overlap coefficient |A∩B| / min(|A|,|B|)
    is ≥ ``low``, sorted by (a, b). ``docs[i]`` is (keys, word ids); ids are a set. A doc
    with no key or no word pairs with none."""
    if not low > 0.0:  # also refuses NaN
        raise ValueError(f"overlap threshold must be a number > 0, got {low!r}")
    df = Counter(w for _, words in docs for w in set(words))
    rows: dict[int, list[int]] = {}  # doc -> its words, rarest first
    keys_of: dict[int, frozenset[Hashable]] = {}
    need: dict[int, int] = {}  # doc -> the shared words a pair needs with it as the smaller
    prefixes: dict[tuple[Hashable, int], list[int]] = {}  # (key, word) -> docs, its prefix
    for i, (keys, words) in enumerate(docs):
        row = sorted(set(words), key=lambda w: (df[w], w))
        if not row or not keys:
            continue
        rows[i], keys_of[i], need[i] = row, frozenset(keys), min_shared(low, len(row))
        for w in row[: len(row) - need[i] + 1]:
            for key in keys_of[i]:
                prefixes.setdefault((key, w), []).append(i)
    out = Pairs()
    for j, row in rows.items():
        # j as the larger doc of its pairs (ties: the later index); a pair's rarest shared
        # word is in the smaller's prefix and at least `need` words from the end of j's row.
        size, mine = len(row), frozenset(row)
        seen: set[int] = set()
        for position, w in enumerate(row):
            for key in keys_of[j]:
                for i in prefixes.get((key, w), ()):
                    if i in seen or position > size - need[i] or (len(rows[i]), i) >= (size, j):
                        continue
                    seen.add(i)
                    out.checked += 1
                    score = len(mine.intersection(rows[i])) / len(rows[i])
                    if score >= low:
                        out.append(Pair(min(i, j), max(i, j), score))
    out.sort(key=lambda p: (p.a, p.b))
    return out
