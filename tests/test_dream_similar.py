"""Significant words, exact duplicate search and contradictions (§4.6-4.7)."""

import importlib
import itertools
import random
import subprocess
import sys
import textwrap
from array import array
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.dream import pairs_numpy, similar
from memoryd.dream.plan import Item, opposing
from memoryd.dream.similar import (
    HAVE_NUMPY,
    STOPWORDS,
    Pair,
    Vocabulary,
    find_similar_pairs,
    significant_words,
    words_and_directives,
)
from tests.helpers import overlap

ENGINES = [
    pytest.param(False, id="pure"),
    pytest.param(True, id="numpy", marks=pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")),
]
# Tunings of the numpy engine that force each of its code paths on small inputs: both dense
# kernels, everything in the sparse posting lists, a mix, everything dense; tiny blocks.
HAVE_POPCOUNT = HAVE_NUMPY and hasattr(importlib.import_module("numpy"), "bitwise_count")
NUMPY_TUNINGS = [
    pytest.param(
        {"dense_fraction": 2.0, "block_cells": 1, "block_min_rows": 1, "gather_max": 1},
        id="all-sparse",
    ),
    pytest.param(
        {"dense_kernel": "gemm", "dense_fraction": 0.3, "block_cells": 40, "block_min_rows": 2,
         "gather_max": 5},
        id="gemm-mixed",
    ),
    pytest.param(
        {"dense_kernel": "gemm", "dense_fraction": 0.0, "block_cells": 7, "block_min_rows": 3},
        id="gemm-all-dense",
    ),
    pytest.param(
        {"dense_kernel": "popcount", "dense_fraction": 0.3, "block_cells": 40,
         "block_min_rows": 2, "gather_max": 5},
        id="popcount-mixed",
        marks=pytest.mark.skipif(not HAVE_POPCOUNT, reason="numpy without bitwise_count"),
    ),
    pytest.param(
        {"dense_kernel": "popcount", "dense_fraction": 0.0, "block_cells": 7,
         "block_min_rows": 3},
        id="popcount-all-dense",
        marks=pytest.mark.skipif(not HAVE_POPCOUNT, reason="numpy without bitwise_count"),
    ),
]  # fmt: skip

Docs = list[tuple[str, Sequence[int]]]


def brute_pairs(docs: Docs, low: float) -> list[Pair]:
    """The definition, checked on every pair."""
    out = []
    for i, j in itertools.combinations(range(len(docs)), 2):
        (ta, wa), (tb, wb) = docs[i], docs[j]
        if ta == tb and wa and wb and overlap(wa, wb) >= low:
            out.append(Pair(i, j, overlap(wa, wb)))
    return out


def word_ids(max_id: int, max_len: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, max_id), max_size=max_len)


docs_strategy = st.integers(1, 40).flatmap(
    lambda vocab: st.lists(st.tuples(st.sampled_from("ab"), word_ids(vocab, 24)), max_size=45)
)
lows = st.sampled_from([0.4, 0.6, 0.5, 0.75, 1.0, 1 / 3])


def test_stopwords_are_the_design_list() -> None:
    """STOPWORDS is exactly the list in DESIGN §4.6."""
    design = (
        "the a an is are was were be been have has had do does did will would could should may "
        "might can shall to of in for on with at by from as into through during before after "
        "this that it not no but or and if then than so"
    )
    assert frozenset(design.split()) == STOPWORDS


def test_significant_words_follow_the_definition() -> None:
    """Lower-cased, split on whitespace only, short words and stopwords dropped."""
    body = "Always USE pnpm.\nThe CI runs\ton main; it is OK\u00a0now"
    assert significant_words(body) == {"always", "use", "pnpm.", "runs", "main;", "now"}


def test_vocabulary_gives_sorted_unique_stable_ids() -> None:
    """Ids are dense, assigned on first sight, and each word set comes back sorted and unique."""
    vocab = Vocabulary()
    assert vocab.ids(["zeta", "alpha", "zeta"]).tolist() == sorted(
        [vocab.id("zeta"), vocab.id("alpha")]
    )
    assert vocab.ids(["alpha", "new"]) == array("I", [vocab.id("alpha"), 2])
    assert len(vocab) == 3
    assert vocab.all_words()[vocab.id("new")] == "new"


def test_overlap_coefficient() -> None:
    """|A∩B| / min(|A|,|B|), with duplicates ignored and empty sets scoring 0."""
    assert overlap([1, 2, 3], [2, 3, 4, 5, 6]) == 2 / 3
    assert overlap([1, 1, 2], [2]) == 1.0
    assert overlap([], [1]) == 0.0


@pytest.mark.parametrize("use_numpy", ENGINES)
@settings(max_examples=100, deadline=None)
@given(docs=docs_strategy, low=lows)
def test_pairs_match_brute_force(use_numpy: bool, docs: Docs, low: float) -> None:
    """Both engines return exactly the pairs (and overlaps) of the all-pairs definition."""
    assert find_similar_pairs(docs, low, use_numpy=use_numpy) == brute_pairs(docs, low)


@pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")
@pytest.mark.parametrize("tuning", NUMPY_TUNINGS)
@settings(max_examples=60, deadline=None)
@given(docs=docs_strategy, low=lows)
def test_numpy_engine_paths_match_brute_force(
    tuning: dict[str, Any], docs: Docs, low: float
) -> None:
    """The numpy engine is exact whichever split of dense and sparse words and block size."""
    assert similar._pairs_numpy(docs, low, **tuning) == brute_pairs(docs, low)


@pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")
@pytest.mark.parametrize("kernel", ["gemm", "popcount"])
def test_dense_kernels_with_hundreds_of_dense_words(kernel: str) -> None:
    """With several 64-word chunks of dense words, each kernel still gives the exact pairs."""
    if kernel == "popcount" and not HAVE_POPCOUNT:
        pytest.skip("numpy without bitwise_count")
    rng = random.Random(11)
    docs: Docs = [
        (rng.choice("ab"), rng.sample(range(320), rng.randint(5, 200))) for _ in range(90)
    ]
    docs += [(t, words[: len(words) * 3 // 4]) for t, words in docs[:15]]
    got = similar._pairs_numpy(docs, 0.4, dense_kernel=kernel, dense_fraction=0.0)
    assert got == brute_pairs(docs, 0.4)
    assert len(got) >= 15


@pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")
def test_numpy_engine_in_small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays filled a slice at a time (to bound temporaries) give the same exact pairs."""
    rng = random.Random(5)
    docs: Docs = [(rng.choice("ab"), rng.sample(range(90), rng.randint(1, 40))) for _ in range(60)]
    docs += [(t, words[: len(words) * 3 // 4 + 1]) for t, words in docs[:10]]
    expected = brute_pairs(docs, 0.4)
    assert len(expected) >= 10
    monkeypatch.setattr(pairs_numpy, "_RANGE_STEP", 3)
    for kernel in ("gemm", "popcount") if HAVE_POPCOUNT else ("gemm",):
        for fraction in (0.0, 0.2):
            tuning = {"dense_kernel": kernel, "dense_fraction": fraction}
            assert similar._pairs_numpy(docs, 0.4, **tuning) == expected


@pytest.mark.parametrize("use_numpy", ENGINES)
def test_unsorted_input_is_read_as_a_set(use_numpy: bool) -> None:
    """Word ids out of order or repeated count once, as in a set."""
    docs: Docs = [("a", [5, 1, 3, 3, 1]), ("a", [3, 1, 5]), ("a", [9, 8])]
    assert find_similar_pairs(docs, 0.6, use_numpy=use_numpy) == [Pair(0, 1, 1.0)]


@pytest.mark.parametrize("use_numpy", ENGINES)
@pytest.mark.parametrize(
    ("low", "small", "big", "shared", "is_pair"),
    [
        (0.6, 5, 8, 3, True),  # 3/5 is exactly 0.6
        (0.6, 15, 20, 9, True),
        (0.6, 10, 10, 6, True),
        (0.6, 10, 10, 5, False),
        (0.6, 100, 120, 59, False),  # 0.59, just below
        (0.6, 100, 120, 60, True),
        (0.6, 100_000, 100_001, 59_999, False),  # 0.59999, just below
        (0.55, 100, 120, 55, True),  # 55/100 == 0.55, though 0.55 * 100 == 55.00000000000001
        (0.55, 100, 120, 54, False),
    ],
)
def test_threshold_boundary(
    use_numpy: bool, low: float, small: int, big: int, shared: int, is_pair: bool
) -> None:
    """An overlap exactly at the threshold is a duplicate; anything below is not."""
    a = list(range(small))
    b = list(range(small - shared, small - shared + big))
    pairs = find_similar_pairs([("a", a), ("a", b)], low, use_numpy=use_numpy)
    assert pairs == ([Pair(0, 1, shared / small)] if is_pair else [])


@pytest.mark.parametrize("use_numpy", ENGINES)
def test_types_and_empty_sets_never_pair(use_numpy: bool) -> None:
    """Identical word sets of different types do not pair, and empty sets pair with nothing."""
    docs: Docs = [("project", [1, 2, 3]), ("feedback", [1, 2, 3]), ("project", []), ("user", [])]
    assert find_similar_pairs(docs, 0.6, use_numpy=use_numpy) == []


@pytest.mark.parametrize("low", [0.0, -0.5, float("nan"), float("inf")])
def test_threshold_must_be_positive_and_finite(low: float) -> None:
    """A threshold of 0 or below (or not a number) is refused."""
    with pytest.raises(ValueError, match="threshold"):
        find_similar_pairs([("a", [1])], low)


def test_engines_agree_on_a_zipf_corpus() -> None:
    """On a few hundred Zipf-like docs with planted duplicates, both engines give one answer."""
    rng = random.Random(5)
    docs: Docs = []
    for _ in range(500):
        if docs and rng.random() < 0.05:
            doc_type, words = docs[rng.randrange(len(docs))]
            docs.append((doc_type, sorted(set(words[3:]) | {rng.randrange(3000)})))
        else:
            drawn = {int(rng.paretovariate(0.8)) % 3000 for _ in range(rng.randint(20, 90))}
            docs.append((rng.choice(("project", "feedback", "user")), sorted(drawn)))
    expected = find_similar_pairs(docs, 0.4, use_numpy=False)
    assert len([p for p in expected if p.overlap >= 0.6]) >= 10
    if HAVE_NUMPY:
        assert find_similar_pairs(docs, 0.4, use_numpy=True) == expected
    assert expected == brute_pairs(docs, 0.4)


def test_works_without_numpy(tmp_path: Path) -> None:
    """With numpy unimportable the module loads, picks the pure engine and refuses numpy."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["numpy"] = None
        from memoryd.dream.similar import HAVE_NUMPY, find_similar_pairs
        assert not HAVE_NUMPY
        docs = [("a", [1, 2, 3]), ("a", [1, 2, 3, 4]), ("b", [1, 2, 3])]
        assert [(p.a, p.b) for p in find_similar_pairs(docs, 0.6)] == [(0, 1)]
        try:
            find_similar_pairs(docs, 0.6, use_numpy=True)
        except RuntimeError:
            print("refused")
        """
    )
    root = Path(similar.__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


@pytest.mark.parametrize(
    ("a", "b", "objects"),
    [
        ("Always use pnpm for installs.", "Never use pnpm here.", {"pnpm"}),
        ("Always use pnpm.", "Never use yarn.", set()),
        ("Prefer ruff over flake8", "Avoid ruff; it breaks CI", {"ruff"}),
        ("Use bun to install", "Stop using bun: it is slow", {"bun"}),
        ("Use `poetry` for locks", "Don’t use poetry", {"poetry"}),
        ("Do squash merges", "Do not squash merges", {"squash"}),
        ("USE DOCKER", "dont use docker.", {"docker"}),
        ("Don't use npm", "Don't use npm either", set()),
        ("Never do rebase on main", "Do rebase before merging", {"rebase"}),
    ],
)
def test_opposes_examples(a: str, b: str, objects: set[str]) -> None:
    """Opposite directives about the same object oppose, in either order, and nothing else."""

    def read(body: str) -> Item:
        positives, negatives = words_and_directives(body)[1]
        return cast(Item, SimpleNamespace(positives=positives, negatives=negatives))

    assert opposing(read(a), read(b)) == objects
    assert opposing(read(b), read(a)) == objects


@pytest.mark.parametrize(
    ("body", "positive", "negative"),
    [
        ("do not commit secrets", set(), {"commit"}),
        ("don't use yarn", set(), {"yarn"}),
        ("never do rebases; use merges", {"merges"}, {"rebases"}),
        ("always prefer small diffs", {"prefer", "small"}, set()),
        ("avoid using mocks.", set(), {"mocks"}),
        ("use", set(), set()),
    ],
)
def test_directives(body: str, positive: set[str], negative: set[str]) -> None:
    """The object is the first significant word after a directive, skipping use/using."""
    assert words_and_directives(body)[1] == (frozenset(positive), frozenset(negative))


@pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")
@pytest.mark.parametrize("step", [1, 2, 1 << 20])
def test_ranges_are_exact_in_int32_and_past_it(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """The position ranges the numpy engine gathers with: int32 while every value fits."""
    import numpy as np

    monkeypatch.setattr(pairs_numpy, "_RANGE_STEP", step)
    small = pairs_numpy.ranges(np.array([5, 0, 40]), np.array([3, 0, 2]))
    assert small.dtype == np.int32 and small.tolist() == [5, 6, 7, 40, 41]
    top = 2**31 - 2
    big = pairs_numpy.ranges(np.array([7, top]), np.array([1, 4]))
    assert big.dtype == np.int64 and big.tolist() == [7, top, top + 1, top + 2, top + 3]
