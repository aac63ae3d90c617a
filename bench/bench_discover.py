"""Discovery benchmark: `discover_all` over a Claude home of many project folders, in-process
and as a whole `memoryd dirs` process, with the transcripts' cwds cached and uncached.

Run `python bench/bench_discover.py --help`; bench/README.md explains the output.
"""

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from _claude_home import ClaudeHome, make_claude_home
from _stats import markdown_table, timed

from memoryd.config import ClaudeEnv, Config, PathsConfig
from memoryd.discover.cwd_cache import CwdCache
from memoryd.discover.finder import discover_all
from memoryd.discover.found import Discovery
from memoryd.runtime import tune_gc
from memoryd.storage.statedb import StateDB

MS = 1e-3


def fmt(seconds: float) -> str:
    return f"{seconds / MS:.1f} ms"


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


def config_for(home: ClaudeHome) -> Config:
    return Config(paths=PathsConfig(claude_home=home.claude), claude_env=ClaudeEnv(home=home.root))


def drop_cache(home: ClaudeHome) -> None:
    if not (home.state / "state.sqlite").exists():
        return
    db = StateDB.in_state_dir(home.state)
    with contextlib.suppress(sqlite3.OperationalError), db.transaction() as conn:
        conn.execute("DELETE FROM cache_cwd")  # (no such table: nothing kept yet)


def counted(home: ClaudeHome, fn: Callable[[], object]) -> dict[str, int]:
    """How many transcripts one call opens, and how many subprocesses it starts."""
    counts = {"transcript opens": 0, "subprocesses": 0}
    real_open, real_popen = os.open, subprocess.Popen.__init__

    def opening(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".jsonl"):
            counts["transcript opens"] += 1
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def popen(self: Any, *args: Any, **kwargs: Any) -> None:  # Popen's own overloads
        counts["subprocesses"] += 1
        real_popen(self, *args, **kwargs)

    os.open = opening
    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
    try:
        fn()
    finally:
        os.open = real_open
        subprocess.Popen.__init__ = real_popen  # type: ignore[method-assign]
    return counts


def whole_process(
    home: ClaudeHome, args: Sequence[str], repeat: int, before: Callable[[], object] | None = None
) -> list[float]:
    def run() -> None:
        subprocess.run(
            args, env=home.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    return timed(run, repeat, before)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--memory-dirs", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=11, help="timed runs per figure (11)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also cProfile one discovery")
    args = parser.parse_args(argv)
    tune_gc()
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-discover-") as tmp:
        home = make_claude_home(
            Path(tmp), projects=args.projects, memory_dirs=args.memory_dirs, seed=args.seed
        )
        print(
            f"Claude home: {home.projects} project folders, {home.transcripts} transcripts "
            f"({home.transcript_bytes / 1e6:.0f} MB), {home.memory_dirs} memory dirs, "
            f"{home.repos} git repos (8 with a worktree)"
        )
        config = config_for(home)
        home.state.mkdir(parents=True, mode=0o700)  # as the daemon or any write leaves it
        with environ(home.env):
            found = discover_all(config)  # warms the page cache, saves the cache
            print(f"discovered: {len(found.dirs)} dirs, {len(found.refused)} refused\n")
            cold = timed(lambda: discover_all(config), args.repeat, lambda: drop_cache(home))
            plain = timed(lambda: _uncached(config), args.repeat)
            discover_all(config)
            warm = timed(lambda: discover_all(config), args.repeat)
            assert discover_all(config) == _uncached(config), "the cache changed a result"
            steps = {
                "no cache": counted(home, lambda: _uncached(config)),
                "cache saved": counted(home, lambda: discover_all(config)),
            }
        memoryd = [sys.executable, "-m", "memoryd", "dirs"]
        floor = whole_process(home, [sys.executable, "-c", "import memoryd.cli"], args.repeat)
        proc_cold = whole_process(home, memoryd, args.repeat, lambda: drop_cache(home))
        whole_process(home, memoryd, 1)
        proc_warm = whole_process(home, memoryd, args.repeat)
        rows = [
            ("discover_all, no cache (the uncached read)", plain),
            ("discover_all, first run (reads all, saves the cache)", cold),
            ("discover_all, cache saved, nothing changed", warm),
            ("`memoryd dirs` process, no cache file", proc_cold),
            ("`memoryd dirs` process, cache saved", proc_warm),
            ("floor: `python -c 'import memoryd.cli'`", floor),
        ]
        print(
            markdown_table(
                (f"figure [median of {args.repeat}]", "median", "min", "max"),
                [(name, fmt(statistics.median(s)), fmt(min(s)), fmt(max(s))) for name, s in rows],
            )
        )
        print()
        for name, c in steps.items():
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
        if args.profile:
            with environ(home.env):
                for label, fn in (
                    ("no cache", lambda: _uncached(config)),
                    ("cache saved", lambda: discover_all(config)),
                ):
                    profiler = cProfile.Profile()
                    profiler.runcall(fn)
                    text = io.StringIO()
                    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
                    print(f"\n--- profile, {label} (by own time) ---")
                    print(text.getvalue().split("\n\n", 1)[-1])
    return 0


def _uncached(config: Config) -> Discovery:
    return discover_all(config, cache=CwdCache.off())


if __name__ == "__main__":
    sys.exit(main())
