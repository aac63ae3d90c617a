"""The version store's costs (issue 18), each beside the same work without the store, in one run.

1. First start ever at N memories: `indexing.passes.update` (scan every file, write the index) on a
   fresh copy of the dir and an empty state dir, in process, with the collector tuned as in
   every memoryd process; with the store every file is stored once. Target: at most 10 % more
   than without. Also as CPU time, which the disk's writeback does not blur.
2. The daemon's first start: `memoryd run` from spawn to its first `index.updated` row, on a
   fresh copy and an empty state dir (a real process; without the store through this file's
   `--_child nostore` launcher, which turns `versions.kept.keeping` off).
3. The daemon's RSS once settled (VmRSS, the same processes as 2). Target: unchanged.
4. A one-shot `memoryd index DIR` with nothing changed, whole process (the store loads, finds
   nothing to do). The whole process's own target is 150 ms (bench_startup); the store's
   share is the difference.

The samples of each figure are interleaved (store, no store, then reversed every other round);
each fresh copy is synced to disk before it is timed (a first start does not follow a copy
of 10,000 files, and the copy's dirty pages would otherwise throttle whichever side writes).
Everything happens in a fresh temp dir: your own memory folders, config and state are never
touched.
"""

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import _synth
from _claude_home import child_env
from _stats import markdown_table

from memoryd.discover.slugs import slugify
from memoryd.storage.audit import iter_lines

MB = 1024 * 1024
T = TypeVar("T")
CONFIG = '[index]\nnew_file_grace = "0s"\n[watch]\ndebounce = "100ms"\nreconcile_every = "1h"\n'


@contextlib.contextmanager
def keeping_none(rt: Any, *, daemon: bool = False) -> Iterator[Any]:
    """`versions.kept.keeping` with the store off (the baseline's processes)."""
    yield rt


def child(argv: list[str]) -> int:
    """`--_child store|nostore ARGS`: memoryd's CLI, with or without the version store."""
    if argv[0] == "nostore":
        from memoryd.versions import kept

        kept.keeping = keeping_none
    from memoryd.cli import main

    return main(argv[1:])


class Home:
    """A temporary HOME with one Claude project whose memory dir is a copy of `template`."""

    def __init__(self, root: Path, template: Path) -> None:
        self.root = root
        repo = root / "code" / "app"
        repo.mkdir(parents=True)
        project = root / ".claude" / "projects" / slugify(str(repo))
        project.mkdir(parents=True)
        (project / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
        self.memory = project / "memory"
        subprocess.run(["cp", "-a", str(template), str(self.memory)], check=True)
        os.sync()  # the copy's dirty pages written out: neither side pays for them
        self.config = root / "memoryd.toml"
        self.config.write_text(CONFIG)
        self.env = child_env(root)
        if "PYTHONPATH" in os.environ:  # another memoryd tree than the installed one
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        self.audit = root / ".local" / "state" / "memoryd" / "log" / "audit.jsonl"

    def run(self, mode: str, *args: str) -> subprocess.Popen[bytes]:
        env = dict(self.env)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        argv = [sys.executable, str(Path(__file__).resolve()), "--_child", mode]
        argv += ["--config", str(self.config), *args]
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def events(self, name: str) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [r for r in iter_lines(self.audit) if r.get("event") == name]


def vm(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            if line.startswith(key.encode() + b":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def daemon_start(
    tmp: Path, template: Path, mode: str, k: int, idle: float = 3.0
) -> tuple[float, int]:
    """Seconds from spawn to the first index.updated, and VmRSS once the daemon has been idle
    `idle` seconds."""
    home = Home(tmp / f"home-{mode}-{k}", template)
    start = time.monotonic()
    proc = home.run(mode, "run")
    try:
        while not home.events("index.updated"):
            if proc.poll() is not None or time.monotonic() - start > 600:
                raise RuntimeError(f"the daemon did not index: {proc.stderr}")
            time.sleep(0.02)
        took = time.monotonic() - start
        quiet_since, ticks = time.monotonic(), cpu_ticks(proc.pid)
        while time.monotonic() - quiet_since < idle:  # idle: the start-up work is done
            time.sleep(min(0.5, idle))
            now_ticks = cpu_ticks(proc.pid)
            if now_ticks - ticks > 1:
                quiet_since = time.monotonic()
            ticks = now_ticks
        rss = vm(proc.pid, "VmRSS")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    shutil.rmtree(home.root, ignore_errors=True)
    return took, rss


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def first_index(tmp: Path, template: Path, store: bool, k: int) -> tuple[float, float]:
    """In process: `indexing.passes.update` over a fresh copy and an empty state dir, with the
    collector tuned as in every memoryd process (cli.main, the daemon): wall seconds, and the
    CPU seconds of this process meanwhile (the store's work, without the disk's moods)."""

    from memoryd.config import Config, PathsConfig
    from memoryd.discover.finder import memory_dir_at
    from memoryd.indexing.passes import update
    from memoryd.paths import AppPaths
    from memoryd.runtime import Runtime, tune_gc
    from memoryd.versions import kept

    root = tmp / f"first-{int(store)}-{k}"
    folder = root / "memory"
    root.mkdir()
    subprocess.run(["cp", "-a", str(template), str(folder)], check=True, capture_output=True)
    os.sync()  # as in Home: a first start does not follow a copy of 10,000 files
    paths = AppPaths(config_file=root / "c.toml", state_dir=root / "state", log_dir=root / "log")
    rt = Runtime.create(Config(paths=PathsConfig(claude_home=root / "claude")), paths)
    md = memory_dir_at(folder, rt.config)
    tune_gc()
    t, cpu = time.perf_counter(), cpu_seconds()
    if store:
        with kept.using(kept.for_runtime(rt)) as keeper:
            update(replace(rt, versions=keeper), md)
    else:
        update(rt, md)
    took, used = time.perf_counter() - t, cpu_seconds() - cpu
    shutil.rmtree(root, ignore_errors=True)
    return took, used


def oneshot(home: Home, mode: str) -> float:
    t = time.perf_counter()
    proc = home.run(mode, "index", str(home.memory))
    _, err = proc.communicate(timeout=120)
    if proc.returncode not in (0, 1):
        raise RuntimeError(err.decode())
    return time.perf_counter() - t


def interleaved(fn: Callable[[bool, int], T], rounds: int) -> tuple[list[T], list[T]]:
    with_store: list[T] = []
    without: list[T] = []
    for k in range(rounds):
        order = (True, False) if k % 2 == 0 else (False, True)
        for store in order:
            (with_store if store else without).append(fn(store, k))
    return with_store, without


def fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / MB:.1f} MB"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.2f} s"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="memories in the dir (10000)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of figures 1-3 (5)")
    parser.add_argument("--oneshot", type=int, default=11, help="rounds of figure 4 (11)")
    parser.add_argument("--figures", type=int, nargs="+", default=[1, 2, 4], choices=[1, 2, 4])
    parser.add_argument(
        "--idle", type=float, default=3.0, help="seconds a daemon is idle before its RSS (3)"
    )
    args = parser.parse_args(argv)
    print(
        f"memoryd version store bench — Python {platform.python_version()}, {os.cpu_count()} "
        f"CPUs, load {os.getloadavg()[0]:.1f}; {args.n:,} memories",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="memoryd-bench-versions-"))
    rows: list[list[str]] = []

    def row(label: str, mine: Sequence[float], base: Sequence[float], unit: str, target: str,
            met: bool) -> None:  # fmt: skip
        m, b = statistics.median(mine), statistics.median(base)
        extra = f"{(m - b) / MB:+.1f} MB" if unit == "bytes" else f"{(m / b - 1) * 100:+.0f} %"
        rows.append([label, fmt(b, unit), fmt(m, unit), extra, target, "yes" if met else "NO"])
        print(markdown_table(["figure", "no store", "store", "extra", "target", "met?"],
                             rows[-1:]), flush=True)  # fmt: skip

    try:
        template = tmp / "template"
        _synth.make_memory_dir(template, args.n, seed=0)
        if 1 in args.figures:
            pairs, pairs_base = interleaved(
                lambda s, k: first_index(tmp, template, s, k), args.repeat
            )
            mine, base = [w for w, _ in pairs], [w for w, _ in pairs_base]
            ok = statistics.median(mine) <= 1.10 * statistics.median(base)
            row("1. first start ever, in process [median]", mine, base, "time", "≤ +10 %", ok)
            mine, base = [c for _, c in pairs], [c for _, c in pairs_base]
            ok = statistics.median(mine) <= 1.10 * statistics.median(base)
            row("1. the same, CPU time [median]", mine, base, "time", "≤ +10 %", ok)
        if 2 in args.figures:
            runs: dict[bool, list[tuple[float, int]]] = {True: [], False: []}
            for k in range(args.repeat):
                for store in (True, False) if k % 2 == 0 else (False, True):
                    runs[store].append(
                        daemon_start(tmp, template, "store" if store else "nostore", k, args.idle)
                    )
            mine_t, base_t = [t for t, _ in runs[True]], [t for t, _ in runs[False]]
            ok = statistics.median(mine_t) <= 1.10 * statistics.median(base_t)
            row("2. daemon's first start to its index [median]", mine_t, base_t, "time", "≤ +10 %",
                ok)  # fmt: skip
            mine_r, base_r = [float(r) for _, r in runs[True]], [float(r) for _, r in runs[False]]
            ok = statistics.median(mine_r) <= statistics.median(base_r) + 0.25 * MB
            row("3. daemon's RSS, settled [median]", mine_r, base_r, "bytes", "unchanged", ok)
        if 4 in args.figures:
            home = Home(tmp / "home-oneshot", template)
            for mode in ("store", "nostore", "store"):  # the first start, then settled
                oneshot(home, mode)
            mine, base = interleaved(
                lambda s, k: oneshot(home, "store" if s else "nostore"), args.oneshot
            )
            extra = statistics.median(mine) - statistics.median(base)
            row("4. one-shot `memoryd index`, nothing changed [median]", mine, base, "time",
                "store ≤ a few ms", extra <= 0.005)  # fmt: skip
        print("\n== all figures ==")
        print(markdown_table(["figure", "no store", "store", "extra", "target", "met?"], rows))
        print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
