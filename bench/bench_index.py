"""Index benchmarks (DESIGN §10): parse, restart, incremental index, reconcile, memory.

Each figure is printed beside a naive baseline measured in the same run, as a median (or p50 and
p99) over several runs, with the ratio naive / memoryd. Run `python bench/bench_index.py --help`;
bench/README.md explains the output.
"""

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _synth
from _naive import naive_load_all, naive_rebuild
from _stats import markdown_table, percentile, timed

from memoryd.config import Config, PathsConfig
from memoryd.discover.finder import discover
from memoryd.discover.found import MemoryDir
from memoryd.indexing import passes, plan, read, write
from memoryd.indexing.outcome import IndexOutcome
from memoryd.indexing.read import Held
from memoryd.indexing.scan import scan_dir
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, POINTER
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime, tune_gc
from memoryd.storage import fsops
from memoryd.storage.state import StateStore

MS = 1e-3
MB = 1024 * 1024


# --- measuring ---------------------------------------------------------------------------------
def timed_rounds(fns: Sequence[Callable[[], object]], repeat: int) -> list[list[float]]:
    """Samples for several functions taken in interleaved rounds, so a load spike on a shared
    machine lands on all of them alike instead of on whichever ran during it. The order
    alternates between rounds to cancel any effect of running first."""
    out: list[list[float]] = [[] for _ in fns]
    for round_ in range(repeat):
        order = range(len(fns)) if round_ % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            out[i] += timed(fns[i], 1)
    return out


@dataclass
class Row:
    label: str
    naive: list[float]
    memoryd: list[float]
    target: float | None  # seconds or bytes; None: no target
    unit: str = "time"  # time | bytes
    stat: str = "median"  # median | p50 | p99 | one run
    note: str = ""

    def value(self, samples: Sequence[float]) -> float:
        if self.stat == "p99":
            return percentile(samples, 99)
        if self.stat == "p50":
            return percentile(samples, 50)
        if self.stat == "one run":
            return samples[0]
        return statistics.median(samples)

    @property
    def met(self) -> str:
        if self.target is None or not self.memoryd:
            return "—"
        return "yes" if self.value(self.memoryd) <= self.target else "NO"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return f"{value / MB:.1f} MB"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.01:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1000:.1f} ms"


def render_table(rows: Sequence[Row]) -> str:
    header = ("figure", "naive baseline", "memoryd", "ratio", "target", "met?")
    body = []
    for row in rows:
        naive = row.value(row.naive) if row.naive else None
        mine = row.value(row.memoryd) if row.memoryd else None
        ratio = f"{naive / mine:.2f}×" if naive and mine else "—"
        target = "≤ " + fmt(row.target, row.unit) if row.target is not None else "—"
        label = f"{row.label} [{row.stat}]"
        body.append((label, fmt(naive, row.unit), fmt(mine, row.unit), ratio, target, row.met))
    return markdown_table(header, body)


# --- floors: what the hardware and the kernel cost, for context --------------------------------
def floor_stat(path: Path) -> None:
    with os.scandir(path) as entries:
        for entry in entries:
            entry.stat(follow_symlinks=False)


def floor_read(path: Path) -> None:
    with fsops.open_dir(path) as dir_fd, os.scandir(dir_fd) as entries:
        for entry in entries:
            if not entry.name.endswith(".md") or entry.name.startswith("MEMORY"):
                continue
            fd = os.open(entry.name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.read(fd, os.fstat(fd).st_size + 1)
            finally:
                os.close(fd)


# --- peak RSS in a fresh process ---------------------------------------------------------------
def peak_rss_bytes() -> int:
    """This process's peak RSS. Linux: VmHWM, since ru_maxrss survives exec and would start at
    the parent's peak; elsewhere ru_maxrss (bytes on macOS, KiB on other systems)."""
    with contextlib.suppress(OSError), open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def child_memory(mode: str, path: Path, traced: bool) -> dict[str, int]:
    """Run in a fresh interpreter: load every file and hold the result; report what it cost."""
    load: Callable[[], object] = (
        (lambda: scan_dir(path, {})) if mode == "memoryd" else (lambda: naive_load_all(path))
    )
    gc.collect()
    if traced:
        tracemalloc.start()
    before = peak_rss_bytes()
    held = load()
    gc.collect()
    out = {"rss_delta": peak_rss_bytes() - before}
    if traced:
        current, peak = tracemalloc.get_traced_memory()
        out |= {"traced_current": current, "traced_peak": peak}
    assert held is not None  # held until here on purpose
    return out


def measure_memory(mode: str, path: Path, traced: bool) -> dict[str, int]:
    args = [sys.executable, str(Path(__file__).resolve()), "--_child", mode, str(path)]
    if traced:
        args.append("--_traced")
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- figure 3 helpers --------------------------------------------------------------------------
def make_runtime(tmp: Path) -> Runtime:
    paths = AppPaths(config_file=tmp / "c.toml", state_dir=tmp / "state", log_dir=tmp / "log")
    # A Claude home of the bench's own: the consult scan must not read this user's transcripts.
    return Runtime.create(Config(paths=PathsConfig(claude_home=tmp / "claude")), paths)


def pointer_targets(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        match = POINTER.match(line)
        if match and match.group(2).endswith(".md") and match.group(2) != ARCHIVE_NAME:
            out.append(match.group(2))
    return out


@dataclass
class IndexRun:
    samples: list[float] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # outcomes other than "updated"


def run_index(
    rt: Runtime,
    md: MemoryDir,
    change: Callable[[int], set[str]],
    reps: int,
    between: Callable[[], object] | None = None,
    daemon: bool = False,
) -> IndexRun:
    """Time an index pass after each of `reps` changes; `between` runs untimed after each.

    `daemon`: the daemon's path after its debounce (`passes.update_changed`): it holds what
    its last pass left and the names the file events reported. Otherwise a one-shot
    `memoryd index` (`passes.update`).
    """
    run = IndexRun()
    held = daemon_pass(rt, md, None, None).held if daemon else None
    for k in range(reps):
        if between is not None and k:
            between()
        names = change(k)
        gc.collect()
        start = time.perf_counter()
        if daemon:
            outcome = daemon_pass(rt, md, held, names)
            held = outcome.held
        else:
            outcome = passes.update(rt, md)
        run.samples.append(time.perf_counter() - start)
        if outcome.status != "updated":
            run.bad.append(f"{outcome.status}: {outcome.message or outcome.problems[:2]}")
    return run


def daemon_pass(
    rt: Runtime, md: MemoryDir, held: Held | None, names: set[str] | None
) -> IndexOutcome:
    """The daemon's pass (no grace: the bench's new files are indexed at once)."""
    return passes.update_changed(
        rt,
        md,
        grace=0.0,
        settle=0.0,
        previous=held.scan if held else None,
        changed=names,
        held=held,
    )


def pick_file(path: Path, index_name: str, files: dict[str, _synth.SynthFile]) -> str:
    """A non-`user` memory whose pointer sits in the given index file."""
    text = (path / index_name).read_text(encoding="utf-8")
    for target in pointer_targets(text):
        if target in files and files[target].type != "user":
            return target
    raise RuntimeError(f"no memory pointer in {index_name}")


@contextlib.contextmanager
def phase_timer() -> Iterator[dict[str, list[float]]]:
    """Time what an index pass spends in each collaborator (wrapping the public names it
    calls; bench-only: what the private steps between them take shows as "the rest").

    Times are exclusive: a wrapped call inside another (the index reads inside verify_on_disk)
    counts once, under the inner label.
    """
    spent: dict[str, list[float]] = {}
    patched: list[tuple[object, str, object]] = []
    nested: list[float] = []  # time taken by wrapped calls inside the running one

    def wrap(owner: object, attr: str, label: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return

        def timed_call(*args: object, **kwargs: object) -> object:
            nested.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                took = time.perf_counter() - start
                inner = nested.pop()
                spent.setdefault(label, []).append(took - inner)
                if nested:
                    nested[-1] += took

        patched.append((owner, attr, original))
        setattr(owner, attr, timed_call)

    for attr, label in (
        ("scan_dir", "scan_dir (stat all, re-read changed)"),
        ("read_index_file", "read MEMORY.md + archive"),
        ("decide_ownership", "decide_ownership"),
        ("update_index", "update_index"),
        ("verify_on_disk", "verify_on_disk"),
    ):
        for module in (read, plan, write, passes):  # wherever the pass calls it by its own name
            if hasattr(module, attr):
                wrap(module, attr, label)
    wrap(fsops, "replace_file", "fsops.replace_file (write, fsync, swap)")
    wrap(StateStore, "load", "StateStore.load (sqlite)")
    wrap(StateStore, "load_cache", "StateStore.load_cache (sqlite, marshal)")
    wrap(StateStore, "save", "StateStore.save (sqlite)")
    wrap(StateStore, "save_cache", "StateStore.save_cache (sqlite, marshal)")
    try:
        yield spent
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)


def profile_top(fn: Callable[[], object], limit: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    return re.sub(r"\n{3,}", "\n\n", out.getvalue())


# --- one size ----------------------------------------------------------------------------------
def bench_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    repeat = args.repeat
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-") as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "memory"
        built = time.perf_counter()
        synth = _synth.make_memory_dir(path, n, seed=args.seed, mix=_synth.MIXES[args.mix])
        files = {f.filename: f for f in synth}
        print(
            f"\n== {n:,} memory files, mix={args.mix}, {_synth.tree_bytes(path) / MB:.1f} MB, "
            f"built in {time.perf_counter() - built:.1f} s; repeat={repeat}, "
            f"index reps={args.index_reps}; load average {os.getloadavg()[0]:.1f} ==",
            flush=True,
        )
        rows: list[Row] = []

        # Warm the page cache and check that both readers see the same folder.
        scan = scan_dir(path, {})
        posts, naive_failed = naive_load_all(path)
        parsed = len(scan.memories)
        assert parsed == n, f"memoryd parsed {parsed} of {n} memory files"
        del posts

        # 1, 2 and 4, with the baseline and the floors, sampled in interleaved rounds.
        restart_state = tmp / "restart-state"
        StateStore(restart_state).save_cache(path, scan.files)  # 2: the cache a restart finds
        cache = scan.files  # 4: the cache a running daemon holds

        def restart() -> None:
            # A fresh store, as a new process has: one that saved the cache would hand back the
            # copy it holds in memory and never read the file.
            result = scan_dir(path, StateStore(restart_state).load_cache(path))
            assert result.reread == 0, result.reread

        def reconcile_once() -> None:
            result = scan_dir(path, cache)
            assert result.reread == 0, result.reread

        naive_cold, cold, restarted, reconciled, stat_floor, read_floor = timed_rounds(
            [
                lambda: naive_load_all(path),
                lambda: scan_dir(path, {}),
                restart,
                reconcile_once,
                lambda: floor_stat(path),
                lambda: floor_read(path),
            ],
            repeat,
        )
        rows.append(Row(f"1. cold start: scan + parse {n:,} files", naive_cold, cold, 0.25))
        rows.append(
            Row("2. restart: load_cache + scan_dir (stat only)", naive_cold, restarted, 60 * MS)
        )
        rows_4 = Row("4. reconcile, nothing changed (stat only)", naive_cold, reconciled, 80 * MS)
        floors = {
            "lstat every entry (scandir)": stat_floor,
            "open + fstat + read every *.md": read_floor,
        }

        # 3. One change among n -> MEMORY.md replaced, with state warm from earlier passes.
        rt = make_runtime(tmp)
        md = discover(Config(), [path])[0]
        first = time.perf_counter()
        outcome = passes.update(rt, md)
        first_pass = time.perf_counter() - first
        demoted = len(outcome.edit.demoted) if outcome.edit else 0
        settle = [passes.update(rt, md).status for _ in range(2)]
        if settle[-1] != "unchanged":
            print(f"warning: the index did not settle after the first pass: {settle}")
        idle = timed(lambda: passes.update(rt, md), min(repeat, 5))
        settled = f"MEMORY.md {len((path / INDEX_NAME).read_bytes().splitlines())} lines"
        if (path / ARCHIVE_NAME).exists():
            settled += f", archive {(path / ARCHIVE_NAME).stat().st_size / MB:.1f} MB"
        in_main = pick_file(path, INDEX_NAME, files)
        has_archive = (path / ARCHIVE_NAME).exists()
        in_archive = pick_file(path, ARCHIVE_NAME, files) if has_archive else None
        naive_out = tmp / "naive-out"
        naive_out.mkdir()
        naive_index: list[float] = []
        since_naive = 0

        def naive_between() -> None:
            # The baseline's runs are spread over figure 3's, one every `every` changes.
            nonlocal since_naive
            since_naive += 1
            if since_naive >= every:
                since_naive = 0
                naive_index.extend(timed(lambda: naive_rebuild(path, naive_out), 1))

        def describe(name: str) -> Callable[[int], set[str]]:
            def change(k: int) -> set[str]:
                _synth.set_description(path / name, f"Revised note {k} for {name} " + "x" * (k % 3))
                return {name}

            return change

        def add(k: int) -> set[str]:
            return {_synth.new_file(path, n + 100_000 + k, seed=args.seed).filename}

        def add_later(k: int) -> set[str]:
            return add(args.index_reps + k)

        main_change = describe(in_main)
        changes = [("description changed, pointer in MEMORY.md", main_change, main_change)]
        if in_archive is not None:
            changes.append(
                (
                    "description changed, pointer in archive",
                    describe(in_archive),
                    describe(in_archive),
                )
            )
        changes.append(("one new file", add, add_later))
        every = max(1, 2 * len(changes) * args.index_reps // repeat)
        naive_index += timed(lambda: naive_rebuild(path, naive_out), 1)
        index_runs: dict[str, IndexRun] = {}
        for label, change, one_shot_change in changes:
            run = run_index(rt, md, change, args.index_reps, naive_between, daemon=True)
            index_runs[label] = run
            for stat in ("p50", "p99"):
                rows.append(Row(f"3. {label}", naive_index, run.samples, 15 * MS, stat=stat))
            once = run_index(rt, md, one_shot_change, args.index_reps, naive_between)
            index_runs[f"{label} (one-shot)"] = once
            rows.append(
                Row(
                    f"3. {label}: one-shot `memoryd index`",
                    naive_index,
                    once.samples,
                    None,
                    stat="p50",
                )
            )
        rows.append(rows_4)

        # 5. Memory: fresh interpreters, peak RSS growth while holding every file's parse.
        mem_reps = min(repeat, 3)
        rss: dict[str, list[float]] = {
            m: [measure_memory(m, path, False)["rss_delta"] for _ in range(mem_reps)]
            for m in ("naive", "memoryd")
        }
        traced = {m: measure_memory(m, path, True) for m in ("naive", "memoryd")}
        rows.append(
            Row(
                f"5. peak RSS growth holding {n:,} parsed",
                rss["naive"],
                rss["memoryd"],
                60 * MB,
                unit="bytes",
            )
        )
        rows.append(
            Row(
                "5. tracemalloc: retained after loading",
                [traced["naive"]["traced_current"]],
                [traced["memoryd"]["traced_current"]],
                None,
                unit="bytes",
                stat="one run",
            )
        )

        print(render_table(rows))
        print(f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
        print()
        print("Floors measured in the same run (median): ", end="")
        print("; ".join(f"{k}: {fmt(statistics.median(v), 'time')}" for k, v in floors.items()))
        print(
            f"Index: first pass {fmt(first_pass, 'time')}, demoting {demoted:,} entries to "
            f"{ARCHIVE_NAME}; steady state {settled}; a pass with nothing changed: "
            f"{fmt(statistics.median(idle), 'time')} (median)."
        )
        print(
            f"python-frontmatter could not load {naive_failed} of {n:,} files (strict YAML); "
            "memoryd parsed all of them."
        )
        for label, run in index_runs.items():
            if run.bad:
                print(f"warning: {label}: {len(run.bad)} passes did not update: {run.bad[:2]}")

        if args.profile:
            print(f"\n-- cProfile, figure 1 (one cold scan_dir of {n:,} files) --")
            print(profile_top(lambda: scan_dir(path, {}), args.profile_lines))
            change = describe(in_main)
            held = daemon_pass(rt, md, None, None).held
            names = change(10_000)
            print("-- cProfile, figure 3 (the daemon's pass after a description change) --")
            print(profile_top(lambda: daemon_pass(rt, md, held, names), args.profile_lines))
            n_passes = 10
            with phase_timer() as spent:
                total = run_index(
                    rt, md, lambda k: change(20_000 + k), n_passes, daemon=True
                ).samples
            print(
                f"-- figure 3, where the time goes (mean of {n_passes} passes after a description "
                "change; exclusive times) --"
            )
            mean_total = statistics.fmean(total)
            rest = mean_total
            for label, values in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
                per_pass = sum(values) / n_passes
                rest -= per_pass
                calls = len(values) / n_passes
                print(f"  {fmt(per_pass, 'time'):>9}  {label} ({calls:g} call(s) a pass)")
            print(f"  {fmt(rest, 'time'):>9}  the rest of the pass")
            median_total = fmt(statistics.median(total), "time")
            print(f"  {fmt(mean_total, 'time'):>9}  total (median {median_total})")

        return {
            "n": n,
            "mix": args.mix,
            "rows": [
                {
                    "label": r.label,
                    "stat": r.stat,
                    "unit": r.unit,
                    "naive": r.naive,
                    "memoryd": r.memoryd,
                    "target": r.target,
                }
                for r in rows
            ],
            "floors": floors,
            "first_pass": first_pass,
            "idle_pass": idle,
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, nargs="+", default=[10_000], help="memory files per dir (default 10000)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per figure (default 5)")
    parser.add_argument(
        "--index-reps", type=int, default=30, help="changes timed for figure 3 (default 30)"
    )
    parser.add_argument(
        "--mix",
        choices=sorted(_synth.MIXES),
        default="realistic",
        help="frontmatter shapes: realistic (as in real folders, mostly nested metadata:) or flat",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also cProfile figures 1 and 3")
    parser.add_argument("--profile-lines", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument("--_child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--_traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._child:
        mode, path = args._child
        print(json.dumps(child_memory(mode, Path(path), args._traced)))
        return 0

    # As every memoryd process does (cli.main): both sides then collect on the same schedule.
    tune_gc()
    print(
        f"memoryd index bench — Python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs; times are wall clock, warm page cache; "
        f"gc thresholds {gc.get_threshold()} (memoryd's, for both sides)"
    )
    results = [bench_size(n, args) for n in args.n]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
