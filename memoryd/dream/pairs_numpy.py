"""The numpy duplicate search (see memoryd.dream.similar): per type, in blocks of rows, the
frequent words are 64-bit masks ANDed and popcounted (a float32 matrix product on numpy < 2),
and the rare words' co-occurrences are scattered in from a CSC posting array. numpy is
optional: without it this module imports, and nothing calls it."""

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from memoryd.dream.pairs_pure import need_table

try:
    import numpy as np
except ImportError:  # the pure-Python engine gives the same answers
    np = None  # type: ignore[assignment]

HAVE_NUMPY: Final = np is not None

if TYPE_CHECKING:
    import numpy.typing as npt

    Arr = npt.NDArray[Any]

# Tuning of the engines (they change speed and memory, never the answer).
_BLOCK_CELLS: Final = 1 << 18  # pairs scored at once by the numpy engine (1 MB float32)
_BLOCK_MIN_ROWS: Final = 32  # ... but never fewer rows than this, for the BLAS product
_GATHER_MAX: Final = 1 << 20  # posting entries expanded at once by the numpy engine
# numpy: words in at least this share of a type's docs are counted densely (per kernel).
_DENSE_FRACTION_POPCOUNT: Final = 0.05
_DENSE_FRACTION_GEMM: Final = 0.1
_DENSE_MAX_COLS: Final = 2048
_DENSE_MAX_CELLS: Final = 1 << 24  # docs × dense words, float32 (64 MB)

_RANGE_STEP: Final = 1 << 20  # positions added at once by ranges (4-8 MB of temporary)


def ranges(starts: "Arr", lens: "Arr") -> "Arr":
    """Concatenation of ``arange(s, s + l)`` for each (s, l), without a Python loop: int32
    when every value fits (at 100,000 memories the search's largest array), positions added a
    slice at a time rather than from one more array as long."""
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


def flatten(rows: Sequence[Sequence[int]]) -> tuple["Arr", "Arr"]:
    """All rows' ids in one uint32 array (one join: allocated once), and each row's length."""
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
    ``popcount`` (numpy ≥ 2) ANDs 64 words at a time and counts bits, single-threaded. ``gemm``,
    a float32 product exact below 2**24, is older numpy's (a threaded BLAS spins when busy)."""
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


@dataclass(frozen=True, slots=True)
class Tuning:
    """How the engine works: its speed and memory, never its answer (tests make it small)."""

    block_cells: int = _BLOCK_CELLS
    block_min_rows: int = _BLOCK_MIN_ROWS
    gather_max: int = _GATHER_MAX
    dense_fraction: float | None = None  # None: the dense kernel's own
    dense_kernel: str | None = None  # "popcount" | "gemm"; None: popcount where numpy has it

    def dense(self) -> tuple[str, float]:
        """The dense kernel, and the share of docs from which a word is counted densely."""
        kernel = self.dense_kernel
        if kernel is None:
            kernel = "popcount" if hasattr(np, "bitwise_count") else "gemm"
        if kernel not in ("popcount", "gemm"):
            raise ValueError(f"unknown dense kernel {kernel!r}")
        fraction = self.dense_fraction
        if fraction is None:
            popcount = kernel == "popcount"
            fraction = _DENSE_FRACTION_POPCOUNT if popcount else _DENSE_FRACTION_GEMM
        return kernel, fraction


def group_pairs(
    doc_ids: Sequence[int], rows: "Sequence[Sequence[int]]", low: float, tuning: Tuning
) -> list[tuple[int, int, float]]:
    """All qualifying pairs (a, b, overlap) inside one type of docs, none empty. Arrays go once
    used (`del`): entry-long ones are the peak, and the order keeps few alive at once."""
    kernel, fraction = tuning.dense()
    members, sizes, words, n_words = _sorted_rows(np.array(doc_ids, dtype=np.int64), rows)
    n = int(members.size)
    df = np.bincount(words, minlength=n_words)
    rows_local = np.repeat(np.arange(n, dtype=np.int32), sizes)
    dense_block, in_matrix = _dense_part(words, rows_local, df, sizes, fraction, kernel)
    # The other words held by 2+ docs: a CSC posting array, and for each entry of a row the
    # slice of the later docs that hold the same word.
    sparse = (df >= 2)[words]
    sparse &= ~in_matrix
    del in_matrix
    e_row = rows_local[sparse]
    e_word = words[sparse]
    del rows_local, words, sparse
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
    rare = _Rare(e_row, e_lo, e_len, post)
    need = np.array(need_table(low, int(sizes[-1])), dtype=np.int64)
    out: list[tuple[int, int, float]] = []
    r0 = 0
    while r0 < n - 1:
        width = n - r0
        r1 = r0 + min(width, max(tuning.block_min_rows, tuning.block_cells // width))
        inter = dense_block(r0, r1)
        _scatter_counts(inter, rare, r0, r1, tuning.gather_max)
        bi, ci = np.nonzero(inter >= need[sizes[r0:r1]][:, None])
        upper = ci > bi
        bi, ci = bi[upper], ci[upper]
        if bi.size:
            ov = inter[bi, ci].astype(np.float64) / sizes[r0 + bi].astype(np.float64)
            ok = ov >= low
            a, c = members[r0 + bi[ok]], members[r0 + ci[ok]]
            lists = np.minimum(a, c).tolist(), np.maximum(a, c).tolist(), ov[ok].tolist()
            out.extend(zip(*lists, strict=True))
        r0 = r1
    return out


def _sorted_rows(
    members: "Arr", rows: "Sequence[Sequence[int]]"
) -> tuple["Arr", "Arr", "Arr", int]:
    """The members and their sizes in size order, all their word ids in one array in that
    order, and how many word ids there are (renumbered when the id space is sparse). Only this
    type's rows are flattened: the largest arrays of a 100,000-memory pass are made here."""
    flat, lengths = _dedupe_rows(*flatten(rows))
    order = np.lexsort((members, lengths))
    members, sizes = members[order], lengths[order]
    words = flat[ranges((np.cumsum(lengths) - lengths)[order], sizes)]
    del flat, lengths, order
    n_words = int(words.max()) + 1
    if n_words > 4 * words.size + 4096:
        # Sparse id space: renumber so per-word tables stay small.
        uniq, inverse = np.unique(words, return_inverse=True)
        words, n_words = inverse.reshape(-1).astype(np.int32), int(uniq.size)
    return members, sizes, words, n_words


def _dense_part(
    words: "Arr", rows_local: "Arr", df: "Arr", sizes: "Arr", fraction: float, kernel: str
) -> tuple["Callable[[int, int], Arr]", "Arr"]:
    """The dense counter of the frequent words (posting lists would cost df² increments), and
    which entries it counts."""
    n = int(sizes.size)
    cutoff = max(2, math.ceil(fraction * n))
    dense_words = np.flatnonzero(df >= cutoff)
    max_cols = min(_DENSE_MAX_COLS, max(1, _DENSE_MAX_CELLS // n))
    if dense_words.size > max_cols:
        dense_words = dense_words[np.lexsort((dense_words, -df[dense_words]))[:max_cols]]
    n_dense = int(dense_words.size)
    dense_col = np.full(df.size, -1, dtype=np.int32)
    dense_col[dense_words] = np.arange(n_dense, dtype=np.int32)
    col = dense_col[words]
    in_matrix = col >= 0
    del dense_col
    counter = _dense_counter(
        rows_local[in_matrix], col[in_matrix], n, n_dense, int(sizes[-1]), kernel
    )
    return counter, in_matrix


@dataclass(frozen=True, slots=True)
class _Rare:
    """The rare words' postings: per entry its row, and the slice ``post[lo:lo + len]`` of
    the later rows that hold its word."""

    rows: "Arr"
    lo: "Arr"
    lens: "Arr"
    post: "Arr"


def _scatter_counts(inter: "Arr", rare: _Rare, r0: int, r1: int, gather_max: int) -> None:
    """Add the rare-word co-occurrences of rows ``r0..r1`` into their block ``inter``."""
    s0, s1 = (int(x) for x in np.searchsorted(rare.rows, (r0, r1)))
    if s1 <= s0:
        return
    assert inter.flags.c_contiguous  # the flat view below must alias the block
    target, width = inter.reshape(-1), inter.shape[1]
    rows, lo, lens = rare.rows[s0:s1], rare.lo[s0:s1], rare.lens[s0:s1]
    cum = np.cumsum(lens, dtype=np.int64)
    start = 0
    while start < lens.size:
        base = int(cum[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(cum, base + gather_max, side="right")))
        chunk = slice(start, end)
        cols = rare.post[ranges(lo[chunk], lens[chunk])].astype(np.int64)
        if cols.size:
            cols += np.repeat((rows[chunk].astype(np.int64) - r0) * width - r0, lens[chunk])
            if cols.size * 8 < target.size:
                np.add.at(target, cols, 1)
            else:
                target += np.bincount(cols, minlength=target.size).astype(target.dtype)
        start = end
