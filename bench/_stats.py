"""Statistics and tables shared by the benches."""

import gc
import math
import time
from collections.abc import Callable, Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: p99 of 30 samples is the largest, never an interpolation."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A markdown table, the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in (header, *body)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in body)])


def timed(
    fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None
) -> list[float]:
    """Wall-clock seconds of `repeat` calls, each after a collection; `before` runs untimed
    ahead of each call."""
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        gc.collect()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out
