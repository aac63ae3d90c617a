"""The launcher bench_daemon.py runs `memoryd run` through: the daemon in this process, with
counters around its event handler, its passes, its index passes and its garbage collections,
written to a JSON file when it shuts down. Timestamps only: nothing the daemon does is
changed. A module of its own, importing only what the daemon imports and the stdlib's json:
the bench's own modules (statistics, its helpers, compiled from source) were 3.6 MB of the
RSS its figure 2 reads.

Usage: python _daemon_shim.py COUNTS_JSON MEMORYD_ARGS...
"""

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any


def shim(counts_path: str, argv: list[str]) -> int:
    """Run `memoryd` in this process with counters around the daemon's event handler, its
    passes and its shutdown (timestamps only: nothing it does is changed)."""
    from memoryd import cli
    from memoryd.daemon import loop as dmod
    from memoryd.indexing import passes

    record: dict[str, Any] = {"signals": {}, "overflows": [], "process": [], "index": []}
    on_signal, on_overflow = dmod.Daemon.on_signal, dmod.Daemon.on_overflow
    process, shut_down = dmod.Daemon.process, dmod.Daemon.shut_down

    def patched_on_signal(self: Any, sig: Any, when: float | None = None) -> None:
        # When it arrived (the loop takes it later, with the rest of its batch).
        arrived = time.monotonic() if when is None else when
        record["signals"].setdefault(sig.kind.value, []).append(arrived)
        on_signal(self, sig, when)

    def patched_on_overflow(self: Any, detail: str) -> None:
        record["overflows"].append(time.monotonic())
        on_overflow(self, detail)

    def patched_process(self: Any, *a: Any, **kw: Any) -> None:
        start = time.monotonic()
        try:
            process(self, *a, **kw)
        finally:
            record["process"].append([start, time.monotonic() - start])

    def patched_shut_down(self: Any) -> int:
        code: int = shut_down(self)
        Path(counts_path).write_text(json.dumps(record))
        return code

    update_changed = (
        passes.update_changed
    )  # the index pass's use case for the daemon, as it imports it

    def patched_update_changed(*a: Any, **kw: Any) -> Any:
        start = time.monotonic()
        outcome = update_changed(*a, **kw)
        record["index"].append([start, time.monotonic() - start, outcome.status, False])
        return outcome

    # The daemon calls its own binding of the name: that is the one to replace.
    dmod.update_changed = patched_update_changed  # type: ignore[attr-defined]  # imported, not exported
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.monotonic()
        else:
            took = time.monotonic() - gc_started[0]
            if took >= 0.0005:  # collections that cost something: when, how long, generation
                record.setdefault("gc", []).append([gc_started[0], took, info["generation"]])

    gc.callbacks.append(on_gc)
    dmod.Daemon.on_signal = patched_on_signal  # type: ignore[method-assign]
    dmod.Daemon.on_overflow = patched_on_overflow  # type: ignore[method-assign]
    dmod.Daemon.process = patched_process  # type: ignore[method-assign]
    dmod.Daemon.shut_down = patched_shut_down  # type: ignore[method-assign]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(shim(sys.argv[1], sys.argv[2:]))
