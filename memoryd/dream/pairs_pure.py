"""The pure-Python duplicate search (see memoryd.dream.similar): each frequent word is one
big-int bitset over a type's docs, a row's counts are kept bit-sliced with carry-save adders
(about five big-int operations a word), and the rare words are counted from posting lists."""

import math
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from itertools import chain
from typing import Final

_BITSET_MIN_DF: Final = 16  # words in at least this many docs get a bitset ...
_BITSET_DF_DIVISOR: Final = 256  # ... and in at least 1/256 of the type's docs


def min_shared(low: float, size: int) -> int:
    """Smallest shared-word count k with k / size >= low, exactly as the final check divides."""
    k = max(1, math.ceil(low * size) - 1)
    while k <= size and k / size < low:
        k += 1
    return k  # size + 1 when no count can reach low


def need_table(low: float, max_size: int) -> list[int]:
    return [max_size + 2] + [min_shared(low, m) for m in range(1, max_size + 1)]


def bit_slices(vectors: list[int]) -> list[int]:
    """Sum 0/1 vectors column-wise: slice ``l`` holds bit ``l`` of every count. A carry-save
    tree (full adders fold three vectors into one of that weight and one of the next): ~5n ops."""
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


def at_least(slices: list[int], k: int) -> int:
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


def bit_positions(x: int) -> list[int]:
    """Indexes of the set bits of ``x`` ≥ 0, ascending (scans in C via ``bin``)."""
    text = bin(x)[:1:-1]
    out: list[int] = []
    p = text.find("1")
    while p >= 0:
        out.append(p)
        p = text.find("1", p + 1)
    return out


def bitset(positions: Iterable[int], nbits: int) -> int:
    buf = bytearray((nbits + 7) // 8)
    for p in positions:
        buf[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def bit_of(data: bytes, pos: int) -> int:
    byte = pos >> 3
    return (data[byte] >> (pos & 7)) & 1 if byte < len(data) else 0


def to_bytes(x: int) -> bytes:
    return x.to_bytes((x.bit_length() + 7) // 8, "little")


def group_pairs(
    members: list[int], rows: "list[array[int]]", low: float
) -> list[tuple[int, int, float]]:
    """All qualifying pairs inside one type (``rows[k]`` = sorted unique ids of members[k])."""
    n = len(members)
    order = sorted(range(n), key=lambda k: (len(rows[k]), members[k]))
    members = [members[k] for k in order]
    rows = [rows[k] for k in order]
    sizes = [len(r) for r in rows]
    need = need_table(low, sizes[-1] if sizes else 0)
    bits, postings = _bits_and_postings(rows, n)
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
        slices = bit_slices(vectors)
        found = {shift + p for p in bit_positions(at_least(slices, k))}
        if hits:
            found |= _found_with_rare(Counter(hits), slices, k, shift)
        if not found:
            continue
        mine = set(row)
        for j in sorted(found):
            ov = len(mine.intersection(rows[j])) / sizes[i]
            if ov >= low:
                a, b2 = members[i], members[j]
                out.append((a, b2, ov) if a < b2 else (b2, a, ov))
    return out


def _bits_and_postings(
    rows: "list[array[int]]", n: int
) -> "tuple[dict[int, int], dict[int, array[int]]]":
    """The words held by 2+ docs: the frequent ones as bitsets over the docs, the others as
    posting lists (ascending doc positions)."""
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
    bits = {w: bitset(p, n) for w, p in postings.items() if len(p) >= bitset_min}
    for w in bits:
        del postings[w]
    return bits, postings


def _found_with_rare(rare: "Counter[int]", slices: list[int], k: int, shift: int) -> set[int]:
    """The docs that reach ``k`` shared words once their ``rare`` (posting-list) hits are
    added to their frequent ones (bit-sliced in ``slices``, columns from ``shift``)."""
    found: set[int] = set()
    for r in set(rare.values()):
        if r >= k:
            found.update(j for j, c in rare.items() if c == r)
            continue
        enough = at_least(slices, k - r)
        # Walk whichever side is smaller: the columns that qualify, or the hits.
        if enough.bit_count() * 4 < len(rare):
            found.update(shift + p for p in bit_positions(enough) if rare.get(shift + p) == r)
        elif enough:
            data = to_bytes(enough)
            found.update(j for j, c in rare.items() if c == r and bit_of(data, j - shift))
    return found
