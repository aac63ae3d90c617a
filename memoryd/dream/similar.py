"""Significant words, exact duplicate search and contradiction search over memory bodies.

Duplicate search is exact: every pair of the same type whose overlap coefficient
|A∩B| / min(|A|,|B|) reaches the threshold is found, none missed, none approximated. At a
0.4-0.6 threshold, candidate filters (prefix filtering) still leave a large share of all pairs,
so both engines count the shared words of every same-type pair, but cheaply: the words held by
many docs are counted densely, a whole row of pairs at a time, and the rest from posting lists.
Docs are sorted by size, so min(|A|,|B|) is the size of the earlier doc of a pair.

* numpy (optional): per type, in blocks of rows, the frequent words are 64-bit masks ANDed
  and popcounted (a float32 matrix product on numpy < 2), and the rare words' co-occurrences
  are scattered in from a CSC posting array.
* pure Python: each frequent word is one big-int bitset over the docs, and a row's counts are
  kept bit-sliced with carry-save adders (about five big-int operations a word); the rare
  words are counted from posting lists. Same answers, to the last bit of every overlap.
"""

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Final

try:
    import numpy as np
except ImportError:  # numpy is optional: the pure-Python engine gives the same answers
    np = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import numpy.typing as npt

HAVE_NUMPY: Final = np is not None

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

# Tuning of the engines (they change speed and memory, never the answer).
_BLOCK_CELLS: Final = 1 << 18  # pairs scored at once by the numpy engine (1 MB float32)
_BLOCK_MIN_ROWS: Final = 32  # ... but never fewer rows than this, for the BLAS product
_GATHER_MAX: Final = 1 << 20  # posting entries expanded at once by the numpy engine
# numpy: words in at least this share of a type's docs are counted densely (per kernel).
_DENSE_FRACTION_POPCOUNT: Final = 0.05
_DENSE_FRACTION_GEMM: Final = 0.1
_DENSE_MAX_COLS: Final = 2048
_DENSE_MAX_CELLS: Final = 1 << 24  # docs × dense words, float32 (64 MB)
_BITSET_MIN_DF: Final = 16  # pure: words in at least this many docs get a bitset ...
_BITSET_DF_DIVISOR: Final = 256  # ... and in at least 1/256 of the type's docs
_QUERY_BITSET_MIN_DF: Final = 8  # pure query index: bitsets for words in this many docs


def significant_words(body: str) -> frozenset[str]:
    """The body's significant words (DESIGN §4.6).

    Lower-cased, split on whitespace, minus words of 2 characters or fewer and minus
    ``STOPWORDS``. Punctuation is deliberately kept ("pnpm." and "pnpm" are different words):
    the spec defines the split on whitespace alone.
    """
    return frozenset(_significant(body.lower().split()))


def _significant(tokens: list[str]) -> set[str]:
    words = set(tokens)
    words.difference_update(STOPWORDS)
    return {w for w in words if len(w) > 2}


def words_and_directives(body: str) -> tuple[set[str], tuple[frozenset[str], frozenset[str]]]:
    """``significant_words`` and ``directives`` of one body, lower-cased and split once."""
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

    def word(self, word_id: int) -> str:
        """The word behind ``word_id``."""
        return self._words[word_id]


@dataclass(frozen=True, slots=True)
class Pair:
    """Two docs (indexes into the input, ``a < b``) and their overlap coefficient."""

    a: int
    b: int
    overlap: float


def overlap(a: Sequence[int], b: Sequence[int]) -> float:
    """|A∩B| / min(|A|,|B|) of two word-id collections; 0.0 when either is empty."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / min(len(sa), len(sb))


def _check_low(low: float) -> None:
    if not 0.0 < low < math.inf:  # also refuses NaN
        raise ValueError(f"overlap threshold must be a finite number > 0, got {low!r}")


def _resolve_numpy(use_numpy: bool | None) -> bool:
    if use_numpy is None:
        return HAVE_NUMPY
    if use_numpy and not HAVE_NUMPY:
        raise RuntimeError("use_numpy=True but numpy is not installed")
    return use_numpy


def _min_shared(low: float, size: int) -> int:
    """Smallest shared-word count k with k / size >= low, exactly as the final check divides."""
    k = max(1, math.ceil(low * size) - 1)
    while k <= size and k / size < low:
        k += 1
    return k  # size + 1 when no count can reach low


def _need_table(low: float, max_size: int) -> list[int]:
    return [max_size + 2] + [_min_shared(low, m) for m in range(1, max_size + 1)]


# ---------------------------------------------------------------------------------------------
# Bit-sliced counting over big-int bitsets (pure engine).


def _bit_slices(vectors: list[int]) -> list[int]:
    """Sum 0/1 vectors column-wise: slice ``l`` of the result holds bit ``l`` of every count.

    A carry-save tree: each full adder folds three vectors of one weight into one of that
    weight and one of the next, so n vectors cost about 5n big-int operations.
    """
    slices: list[int] = []
    level = vectors
    while level:
        items = list(level)
        carries: list[int] = []
        i = 0
        while len(items) - i >= 3:
            a, b, c = items[i], items[i + 1], items[i + 2]
            i += 3
            t = a ^ b
            items.append(t ^ c)
            carry = (a & b) | (t & c)
            if carry:
                carries.append(carry)
        rest = items[i:]
        if len(rest) == 2:
            slices.append(rest[0] ^ rest[1])
            carry = rest[0] & rest[1]
            if carry:
                carries.append(carry)
        else:
            slices.append(rest[0] if rest else 0)
        level = carries
    return slices


def _at_least(slices: list[int], k: int) -> int:
    """Bitset of the columns whose bit-sliced count is ≥ k (k ≥ 1)."""
    if k.bit_length() > len(slices):
        return 0
    gt = 0
    eq = -1  # every column ties so far; becomes a finite bitset at k's first 1 bit
    for lvl in range(len(slices) - 1, -1, -1):
        s = slices[lvl]
        if (k >> lvl) & 1:
            eq &= s
            if not eq:
                return gt
        else:
            gt |= eq & s
            eq &= ~s
    return gt | eq


def _bit_positions(x: int) -> list[int]:
    """Indexes of the set bits of ``x`` ≥ 0, ascending (scans in C via ``bin``)."""
    text = bin(x)[:1:-1]
    out: list[int] = []
    p = text.find("1")
    while p >= 0:
        out.append(p)
        p = text.find("1", p + 1)
    return out


def _bitset(positions: Iterable[int], nbits: int) -> int:
    buf = bytearray((nbits + 7) // 8)
    for p in positions:
        buf[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def _bit_of(data: bytes, pos: int) -> int:
    byte = pos >> 3
    return (data[byte] >> (pos & 7)) & 1 if byte < len(data) else 0


def _to_bytes(x: int) -> bytes:
    return x.to_bytes((x.bit_length() + 7) // 8, "little")


def _group_pairs_pure(
    members: list[int], rows: "list[array[int]]", low: float
) -> list[tuple[int, int, float]]:
    """All qualifying pairs inside one type (``rows[k]`` = sorted unique ids of members[k])."""
    n = len(members)
    order = sorted(range(n), key=lambda k: (len(rows[k]), members[k]))
    members = [members[k] for k in order]
    rows = [rows[k] for k in order]
    sizes = [len(r) for r in rows]
    need = _need_table(low, sizes[-1] if sizes else 0)
    df = Counter(chain.from_iterable(rows))
    bitset_min = max(_BITSET_MIN_DF, n // _BITSET_DF_DIVISOR)
    postings: dict[int, array[int]] = {}
    for pos, row in enumerate(rows):
        for w in row:
            if df[w] >= 2:
                plist = postings.get(w)
                if plist is None:
                    plist = postings[w] = array("I")
                plist.append(pos)
    bits = {w: _bitset(p, n) for w, p in postings.items() if len(p) >= bitset_min}
    for w in bits:
        del postings[w]

    out: list[tuple[int, int, float]] = []
    for i in range(n - 1):
        row = rows[i]
        shift = i + 1
        vectors = [v for w in row if w in bits and (v := bits[w] >> shift)]
        hits: list[int] = []
        for plist in [postings[w] for w in row if w in postings]:
            start = bisect_right(plist, i)
            if start < len(plist):
                hits.extend(plist[start:])
        if not vectors and not hits:
            continue
        k = need[sizes[i]]
        slices = _bit_slices(vectors)
        found = {shift + p for p in _bit_positions(_at_least(slices, k))}
        if hits:
            rare = Counter(hits)
            for r in set(rare.values()):
                if r >= k:
                    found.update(j for j, c in rare.items() if c == r)
                    continue
                enough = _at_least(slices, k - r)
                # Walk whichever side is smaller: the columns that qualify, or the hits.
                if enough.bit_count() * 4 < len(rare):
                    found.update(
                        shift + p for p in _bit_positions(enough) if rare.get(shift + p) == r
                    )
                elif enough:
                    data = _to_bytes(enough)
                    found.update(j for j, c in rare.items() if c == r and _bit_of(data, j - shift))
        if not found:
            continue
        mine = set(row)
        for j in sorted(found):
            ov = len(mine.intersection(rows[j])) / sizes[i]
            if ov >= low:
                a, b2 = members[i], members[j]
                out.append((a, b2, ov) if a < b2 else (b2, a, ov))
    return out


# ---------------------------------------------------------------------------------------------
# numpy engine.

if TYPE_CHECKING:
    Arr = npt.NDArray[Any]


_RANGE_STEP: Final = 1 << 20  # positions added at once by _ranges (4-8 MB of temporary)


def _ranges(starts: "Arr", lens: "Arr") -> "Arr":
    """Concatenation of ``arange(s, s + l)`` for each (s, l), without a Python loop.

    int32 when every value fits (half the memory: at 100,000 memories this array is the
    largest the duplicate search makes), and the running positions are added a slice at a
    time rather than from one more array as long as the result.
    """
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lens, dtype=np.int64)
    shifts = starts - (ends - lens)
    small = total < 2**31 and int(shifts.min()) > -(2**31) and int(shifts.max()) + total < 2**31
    out: Arr = np.repeat(shifts.astype(np.int32 if small else np.int64), lens)
    for at in range(0, total, _RANGE_STEP):
        stop = min(total, at + _RANGE_STEP)
        out[at:stop] += np.arange(at, stop, dtype=out.dtype)
    return out


def _flatten(rows: Sequence[Sequence[int]]) -> tuple["Arr", "Arr"]:
    """All rows' ids in one uint32 array (4 bytes an entry), and each row's length.

    One join of the rows' buffers: the array is allocated once, at its final size.
    """
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    joined = b"".join(
        r if isinstance(r, array) and r.typecode == "I" else array("I", r) for r in rows
    )
    flat = np.frombuffer(joined, dtype=np.uint32) if joined else np.zeros(0, dtype=np.uint32)
    return flat, lengths


def _dedupe_rows(flat: "Arr", lengths: "Arr") -> tuple["Arr", "Arr"]:
    """Make every row strictly increasing (sorted, unique): ids are a set."""
    if flat.size < 2:
        return flat, lengths
    rising = flat[1:] > flat[:-1]
    starts = np.cumsum(lengths)[:-1]
    starts = starts[(starts > 0) & (starts < flat.size)]
    rising[starts - 1] = True  # a row boundary is not a fall
    if rising.all():
        return flat, lengths
    row_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    span = int(flat.max()) + 1
    keys = np.unique(row_of * span + flat.astype(np.int64))
    counts = np.bincount(keys // span, minlength=lengths.size).astype(np.int64)
    return (keys % span).astype(np.uint32), counts


def _dense_counter(
    rows: "Arr", cols: "Arr", n: int, n_cols: int, max_size: int, kernel: str
) -> "Callable[[int, int], Arr]":
    """A function giving, for rows r0..r1, the frequent words each shares with rows r0..n.

    ``popcount`` (numpy ≥ 2) ANDs 64 words at a time and counts bits: single-threaded and
    cheap per word. ``gemm`` is a float32 matrix product, exact for counts below 2**24; it is
    the fallback for older numpy, because a multi-threaded BLAS spins badly on a busy machine.
    """
    count_type = np.uint16 if max_size < 65_000 else np.uint32
    if n_cols == 0:
        return lambda r0, r1: np.zeros((r1 - r0, n - r0), dtype=count_type)
    if kernel == "popcount":
        n_chunks = (n_cols + 63) // 64
        # One contiguous row of n uint64 per 64 words (word c is bit c % 64 of row c // 64),
        # set in place: a docs × words bool matrix first would be the search's largest array.
        packed = np.zeros((n_chunks, n), dtype=np.uint64)
        cells = packed.reshape(-1)
        for at in range(0, rows.size, _RANGE_STEP):
            col = cols[at : at + _RANGE_STEP].astype(np.int64)
            bit = np.left_shift(np.uint64(1), (col & 63).astype(np.uint64))
            np.bitwise_or.at(cells, (col >> 6) * n + rows[at : at + _RANGE_STEP], bit)

        def popcount_block(r0: int, r1: int) -> "Arr":
            counts = np.zeros((r1 - r0, n - r0), dtype=count_type)
            both = np.empty(counts.shape, dtype=np.uint64)
            ones = np.empty(counts.shape, dtype=np.uint8)
            for chunk in packed:
                np.bitwise_and(chunk[r0:r1, None], chunk[None, r0:], out=both)
                counts += np.bitwise_count(both, out=ones)
            return counts

        return popcount_block
    matrix = np.zeros((n, n_cols), dtype=np.float32)
    matrix[rows, cols] = 1.0

    def gemm_block(r0: int, r1: int) -> "Arr":
        product: Arr = matrix[r0:r1] @ matrix[r0:].T
        return product

    return gemm_block


def _group_pairs_numpy(
    members: "Arr",
    rows: "Sequence[Sequence[int]]",
    low: float,
    *,
    block_cells: int = _BLOCK_CELLS,
    block_min_rows: int = _BLOCK_MIN_ROWS,
    gather_max: int = _GATHER_MAX,
    dense_fraction: float | None = None,
    dense_kernel: str | None = None,
) -> list[tuple["Arr", "Arr", "Arr"]]:
    """All qualifying pairs inside one type; ``members`` are doc indexes, none empty."""
    if dense_kernel is None:
        dense_kernel = "popcount" if hasattr(np, "bitwise_count") else "gemm"
    if dense_kernel not in ("popcount", "gemm"):
        raise ValueError(f"unknown dense kernel {dense_kernel!r}")
    if dense_fraction is None:
        popcount = dense_kernel == "popcount"
        dense_fraction = _DENSE_FRACTION_POPCOUNT if popcount else _DENSE_FRACTION_GEMM
    # Only this type's rows are flattened, and the flat copy goes once they are in size order:
    # the largest arrays of a 100,000-memory pass are made here.
    flat, lengths = _dedupe_rows(*_flatten(rows))
    order = np.lexsort((members, lengths))
    members, sizes = members[order], lengths[order]
    n = int(members.size)
    words = flat[_ranges((np.cumsum(lengths) - lengths)[order], sizes)]
    del flat, lengths, order
    n_words = int(words.max()) + 1
    if n_words > 4 * words.size + 4096:
        # Sparse id space: renumber so per-word tables stay small.
        uniq, inverse = np.unique(words, return_inverse=True)
        words, n_words = inverse.reshape(-1).astype(np.int32), int(uniq.size)
        del uniq, inverse
    df = np.bincount(words, minlength=n_words)

    # Frequent words are counted densely, a whole block of pairs at once; their posting
    # lists would cost df² scattered increments.
    cutoff = max(2, math.ceil(dense_fraction * n))
    dense_words = np.flatnonzero(df >= cutoff)
    max_cols = min(_DENSE_MAX_COLS, max(1, _DENSE_MAX_CELLS // n))
    if dense_words.size > max_cols:
        dense_words = dense_words[np.lexsort((dense_words, -df[dense_words]))[:max_cols]]
    n_dense = int(dense_words.size)
    dense_col = np.full(n_words, -1, dtype=np.int32)
    dense_col[dense_words] = np.arange(n_dense, dtype=np.int32)
    rows_local = np.repeat(np.arange(n, dtype=np.int32), sizes)
    col = dense_col[words]
    in_matrix = col >= 0
    dense_rows, dense_cols = rows_local[in_matrix], col[in_matrix]
    del col, dense_col
    dense_block = _dense_counter(dense_rows, dense_cols, n, n_dense, int(sizes[-1]), dense_kernel)
    del dense_rows, dense_cols

    # The other words held by 2+ docs: a CSC posting array, and for each entry of a row the
    # slice of the later docs that hold the same word.
    sparse = (df >= 2)[words]
    sparse &= ~in_matrix
    del in_matrix
    e_row = rows_local[sparse]
    e_word = words[sparse]
    del rows_local, words, sparse
    # In an order that keeps few entry-long arrays alive at once (the search's peak).
    by_word = np.argsort(e_word, kind="stable").astype(np.int32)
    word_end = np.cumsum(np.bincount(e_word, minlength=n_words), dtype=np.int32)
    e_len = word_end[e_word]
    del e_word, word_end
    post = e_row[by_word]
    e_lo = np.empty(by_word.size, dtype=np.int32)
    for at in range(0, by_word.size, _RANGE_STEP):
        stop = min(by_word.size, at + _RANGE_STEP)
        e_lo[by_word[at:stop]] = np.arange(at + 1, stop + 1, dtype=np.int32)
    del by_word
    e_len -= e_lo

    need = np.array(_need_table(low, int(sizes[-1])), dtype=np.int64)
    out: list[tuple[Arr, Arr, Arr]] = []
    r0 = 0
    while r0 < n - 1:
        width = n - r0
        r1 = r0 + min(width, max(block_min_rows, block_cells // width))
        inter = dense_block(r0, r1)
        s0, s1 = (int(x) for x in np.searchsorted(e_row, (r0, r1)))
        if s1 > s0:
            assert inter.flags.c_contiguous  # the flat view below must alias the block
            _scatter_counts(
                inter.reshape(-1), e_row[s0:s1], e_lo[s0:s1], e_len[s0:s1], post, r0, width,
                gather_max,
            )  # fmt: skip
        bi, ci = np.nonzero(inter >= need[sizes[r0:r1]][:, None])
        upper = ci > bi
        bi, ci = bi[upper], ci[upper]
        if bi.size:
            ov = inter[bi, ci].astype(np.float64) / sizes[r0 + bi].astype(np.float64)
            ok = ov >= low
            a, c = members[r0 + bi[ok]], members[r0 + ci[ok]]
            out.append((np.minimum(a, c), np.maximum(a, c), ov[ok]))
        r0 = r1
    return out


def _scatter_counts(
    target: "Arr",
    rows: "Arr",
    lo: "Arr",
    lens: "Arr",
    post: "Arr",
    r0: int,
    width: int,
    gather_max: int,
) -> None:
    """Add the rare-word co-occurrences of rows ``r0 + ...`` into the flat block ``target``."""
    cum = np.cumsum(lens, dtype=np.int64)
    start = 0
    while start < lens.size:
        base = int(cum[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(cum, base + gather_max, side="right")))
        chunk = slice(start, end)
        cols = post[_ranges(lo[chunk], lens[chunk])].astype(np.int64)
        if cols.size:
            cols += np.repeat((rows[chunk].astype(np.int64) - r0) * width - r0, lens[chunk])
            if cols.size * 8 < target.size:
                np.add.at(target, cols, 1)
            else:
                target += np.bincount(cols, minlength=target.size).astype(target.dtype)
        start = end


def _pairs_numpy(
    docs: Sequence[tuple[str, Sequence[int]]], low: float, **tuning: Any
) -> list[Pair]:
    groups: dict[str, list[int]] = {}
    for i, (doc_type, words) in enumerate(docs):
        if len(words):
            groups.setdefault(doc_type, []).append(i)
    parts: list[tuple[Arr, Arr, Arr]] = []
    for doc_type in sorted(groups):
        members = groups[doc_type]
        if len(members) >= 2:
            rows = [docs[i][1] for i in members]
            parts.extend(_group_pairs_numpy(np.array(members, dtype=np.int64), rows, low, **tuning))
    if not parts:
        return []
    a = np.concatenate([p[0] for p in parts])
    b = np.concatenate([p[1] for p in parts])
    ov = np.concatenate([p[2] for p in parts])
    order = np.lexsort((b, a))
    return [
        Pair(int(x), int(y), float(z))
        for x, y, z in zip(a[order].tolist(), b[order].tolist(), ov[order].tolist(), strict=True)
    ]


def _pairs_pure(docs: Sequence[tuple[str, Sequence[int]]], low: float) -> list[Pair]:
    groups: dict[str, tuple[list[int], list[array[int]]]] = {}
    for i, (doc_type, words) in enumerate(docs):
        row = array("I", sorted(set(words)))
        if row:
            members, rows = groups.setdefault(doc_type, ([], []))
            members.append(i)
            rows.append(row)
    found: list[tuple[int, int, float]] = []
    for doc_type in sorted(groups):
        found.extend(_group_pairs_pure(*groups[doc_type], low))
    found.sort()
    return [Pair(a, b, ov) for a, b, ov in found]


def find_similar_pairs(
    docs: Sequence[tuple[str, Sequence[int]]], low: float, *, use_numpy: bool | None = None
) -> list[Pair]:
    """Every pair of same-type docs whose overlap coefficient is ≥ ``low``, sorted by (a, b).

    ``docs[i]`` is (type, word ids); ids are treated as a set. Empty docs never pair. Exact.
    ``use_numpy`` None picks numpy when it is installed; both engines give the same list.
    """
    _check_low(low)
    if _resolve_numpy(use_numpy):
        return _pairs_numpy(docs, low)
    return _pairs_pure(docs, low)


# ---------------------------------------------------------------------------------------------
# One doc against an existing set.


@dataclass(frozen=True, slots=True)
class _PureTypeIndex:
    members: tuple[int, ...]
    sizes: tuple[int, ...]
    bits: dict[int, int]  # frequent word -> bitset over local positions
    postings: "dict[int, array[int]]"  # other words -> local positions
    size_steps: tuple[int, ...]  # distinct sizes, ascending
    size_at_least: tuple[int, ...]  # [t]: bitset of docs with size >= size_steps[t]; [-1] = 0


@dataclass(frozen=True, slots=True)
class _NumpyTypeIndex:
    members: "Arr"
    sizes: "Arr"
    words: "Arr"  # sorted distinct word ids
    indptr: "Arr"
    post: "Arr"  # local positions, grouped by word


class SimilarityIndex:
    """A set of docs prepared once, to score one changed doc against all of them quickly."""

    def __init__(
        self, docs: Sequence[tuple[str, Sequence[int]]], *, use_numpy: bool | None = None
    ) -> None:
        self._numpy = _resolve_numpy(use_numpy)
        self._size = len(docs)
        grouped: dict[str, tuple[list[int], list[array[int]]]] = {}
        for i, (doc_type, words) in enumerate(docs):
            row = array("I", sorted(set(words)))
            if row:
                members, rows = grouped.setdefault(doc_type, ([], []))
                members.append(i)
                rows.append(row)
        self._pure: dict[str, _PureTypeIndex] = {}
        self._np: dict[str, _NumpyTypeIndex] = {}
        for doc_type, (members, rows) in grouped.items():
            if self._numpy:
                self._np[doc_type] = self._build_numpy(members, rows)
            else:
                self._pure[doc_type] = self._build_pure(members, rows)

    def __len__(self) -> int:
        return self._size

    @staticmethod
    def _build_pure(members: list[int], rows: "list[array[int]]") -> _PureTypeIndex:
        n = len(members)
        postings: dict[int, array[int]] = {}
        for pos, row in enumerate(rows):
            for w in row:
                plist = postings.get(w)
                if plist is None:
                    plist = postings[w] = array("I")
                plist.append(pos)
        bits = {w: _bitset(p, n) for w, p in postings.items() if len(p) >= _QUERY_BITSET_MIN_DF}
        for w in bits:
            del postings[w]
        sizes = tuple(len(r) for r in rows)
        steps = tuple(sorted(set(sizes)))
        by_size: dict[int, list[int]] = {}
        for pos, size in enumerate(sizes):
            by_size.setdefault(size, []).append(pos)
        at_least = [0] * (len(steps) + 1)
        for t in range(len(steps) - 1, -1, -1):
            at_least[t] = at_least[t + 1] | _bitset(by_size[steps[t]], n)
        return _PureTypeIndex(tuple(members), sizes, bits, postings, steps, tuple(at_least))

    @staticmethod
    def _build_numpy(members: list[int], rows: "list[array[int]]") -> _NumpyTypeIndex:
        flat, sizes = _flatten(rows)
        row_of = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
        by_word = np.argsort(flat, kind="stable")
        words, counts = np.unique(flat, return_counts=True)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return _NumpyTypeIndex(
            np.array(members, dtype=np.int64), sizes, words.astype(np.int64), indptr,
            row_of[by_word],
        )  # fmt: skip

    def query(self, doc: Sequence[int], doc_type: str, low: float) -> list[tuple[int, float]]:
        """(doc index, overlap) for every indexed doc of ``doc_type`` at ``low`` or above."""
        _check_low(low)
        q = sorted(set(doc))
        if not q:
            return []
        if self._numpy:
            np_index = self._np.get(doc_type)
            return [] if np_index is None else _query_numpy(np_index, q, low)
        pure_index = self._pure.get(doc_type)
        return [] if pure_index is None else _query_pure(pure_index, q, low)


def _query_numpy(ix: _NumpyTypeIndex, q: list[int], low: float) -> list[tuple[int, float]]:
    qa = np.array(q, dtype=np.int64)
    at = np.searchsorted(ix.words, qa)
    known = at < ix.words.size
    known[known] = ix.words[at[known]] == qa[known]
    at = at[known]
    counts = np.bincount(
        ix.post[_ranges(ix.indptr[at], ix.indptr[at + 1] - ix.indptr[at])],
        minlength=ix.members.size,
    )
    hit = np.flatnonzero(counts)
    ov = counts[hit].astype(np.float64) / np.minimum(ix.sizes[hit], len(q)).astype(np.float64)
    ok = ov >= low
    return list(zip(ix.members[hit[ok]].tolist(), ov[ok].tolist(), strict=True))


def _query_pure(ix: _PureTypeIndex, q: list[int], low: float) -> list[tuple[int, float]]:
    sq = len(q)
    vectors = [ix.bits[w] for w in q if w in ix.bits]
    hits: list[int] = []
    for w in q:
        plist = ix.postings.get(w)
        if plist is not None:
            hits.extend(plist)
    slices = _bit_slices(vectors)
    # Docs at least as big as the query all need the same count; smaller ones need a count
    # that depends on their own size, so they are taken one band of sizes at a time.
    steps, at_least = ix.size_steps, ix.size_at_least
    split = bisect_left(steps, sq)
    candidates = 0
    if split < len(steps):
        candidates |= _at_least(slices, _min_shared(low, sq)) & at_least[split]
    t = 0
    while t < split:
        k = _min_shared(low, steps[t])
        t2 = t + 1
        while t2 < split and _min_shared(low, steps[t2]) == k:
            t2 += 1
        candidates |= _at_least(slices, k) & at_least[t] & ~at_least[t2]
        t = t2
    rare = Counter(hits)
    slice_bytes = [_to_bytes(s) for s in slices]
    out: list[tuple[int, float]] = []
    for pos in sorted(set(_bit_positions(candidates)).union(rare)):
        shared = rare.get(pos, 0) + sum(
            _bit_of(sb, pos) << lvl for lvl, sb in enumerate(slice_bytes)
        )
        ov = shared / min(sq, ix.sizes[pos])
        if ov >= low:
            out.append((ix.members[pos], ov))
    return out


def candidates_for(
    doc: Sequence[int], doc_type: str, index: SimilarityIndex, low: float
) -> list[tuple[int, float]]:
    """(doc index, overlap) of every doc in ``index`` of the same type with overlap ≥ ``low``.

    Sorted by doc index. A copy of ``doc`` that is itself in the index is returned too.
    """
    return index.query(doc, doc_type, low)


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


def directives(body: str) -> tuple[frozenset[str], frozenset[str]]:
    """(objects the body tells to do/use, objects it tells not to), per DESIGN §4.7.

    The object is the first significant word after the directive, skipping ``use``/``using``,
    with surrounding punctuation removed. Words between a directive and its object are not
    read as directives themselves, so "don't use X" is never also "use X".
    """
    text = body.lower()
    if "’" in text or "‘" in text:
        text = text.replace("’", "'").replace("‘", "'")
    return _directives(text.split())


def _directives(words: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    """``directives`` of a lower-cased body split on whitespace, curly quotes made straight."""
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


def opposes(a_body: str, b_body: str) -> frozenset[str]:
    """Objects that one body says to do/use and the other says not to."""
    a_pos, a_neg = directives(a_body)
    b_pos, b_neg = directives(b_body)
    return (a_pos & b_neg) | (a_neg & b_pos)
