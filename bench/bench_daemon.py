"""Daemon benchmarks (DESIGN §10): event-to-index latency, idle CPU and RSS, a git-checkout storm.

Runs the real `python -m memoryd run` as a subprocess against a temporary HOME and prints each
figure beside a naive baseline measured in the same run, as medians or percentiles, with the
ratio naive / memoryd. Run `python bench/bench_daemon.py --help`.

1. One memory changed (an agent's atomic rename) or added among N → MEMORY.md replaced: the time
   from the rename to the index file changing on disk, minus the configured debounce; p50 and
   p99. Baseline: a naive full rebuild (python-frontmatter on every file, regenerate, write)
   timed in this process on a byte-identical copy of the folder.
2. Idle CPU of the daemon watching N files (utime + stime from /proc/<pid>/stat, and the
   nanosecond run time from /proc/<pid>/task/*/schedstat), in windows of equal length, as % of
   one core; its VmRSS. Baselines: watchdog's PollingObserver on a copy of the folder, measured
   the same way in the same windows; a fresh interpreter holding every file parsed by
   python-frontmatter (VmRSS).
3. A git checkout that changes N files in a watched memory dir (the dir is the work tree): files
   lost from the index (missing, or a stale description) and how long after `git checkout`
   exited the index was consistent. Baseline: watchdog with its default event mask, counting
   how many of the changed files it reported at all.

The daemon runs through a small launcher (`_daemon_shim.py`) that timestamps its event handler,
passes, index passes and garbage collections into a JSON file read after it stops; it changes
nothing the daemon does, and imports nothing of the bench's (python-frontmatter and PyYAML
would be ~4 MB of the daemon's RSS; this file's own imports, compiled from source, were 3.6 MB).
"""

import argparse
import contextlib
import gc
import itertools
import json
import logging
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _synth
from _claude_home import child_env
from _stats import markdown_table, percentile

from memoryd.config import parse_duration
from memoryd.discover.slugs import slugify
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME, POINTER
from memoryd.storage.audit import iter_lines

MS = 1e-3
MB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
MARK_B = "Checkout B revision"
SETTLE_WINDOW = 0.15  # after an index file changes, how long to look for its sibling's write
POLL = 0.001
GIT = ["git", "-c", "user.email=a@b", "-c", "user.name=x", "-c", "advice.detachedHead=false"]

CONFIG = """\
[index]
new_file_grace = "0s"
[watch]
debounce = "{debounce}"
max_wait = "{max_wait}"
reconcile_every = "1h"
"""


# --- statistics and the table ------------------------------------------------------------------
@dataclass
class Row:
    label: str
    naive: list[float]
    memoryd: list[float]
    target: float | None
    unit: str = "time"  # time | bytes | percent | count
    stat: str = "median"  # median | p50 | p99 | max | total
    naive_stat: str = ""  # when the baseline's statistic differs from memoryd's

    def value(self, samples: Sequence[float], stat: str) -> float:
        if stat == "p99":
            return percentile(samples, 99)
        if stat == "p50":
            return percentile(samples, 50)
        if stat == "max":
            return max(samples)
        return statistics.median(samples)

    @property
    def mine(self) -> float | None:
        return self.value(self.memoryd, self.stat) if self.memoryd else None

    @property
    def base(self) -> float | None:
        return self.value(self.naive, self.naive_stat or self.stat) if self.naive else None

    @property
    def met(self) -> str:
        if self.target is None or self.mine is None:
            return "—"
        return "yes" if self.mine <= self.target else "NO"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "never"
    if unit == "bytes":
        return f"{value / MB:.1f} MB"
    if unit == "percent":
        return f"{value:.3f} %"
    if unit == "count":
        return f"{value:,.0f}"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value >= 1:
        return f"{sign}{value:.2f} s"
    if value >= 0.01:
        return f"{sign}{value * 1000:.0f} ms"
    return f"{sign}{value * 1000:.1f} ms"


def ratio(naive: float | None, mine: float | None) -> str:
    if naive is None or mine is None or math.isinf(naive) or math.isinf(mine):
        return "—"
    if mine <= 0:
        return "∞" if naive > 0 else "—"
    return f"{naive / mine:.2f}×"


def render_table(rows: Sequence[Row]) -> str:
    header = ("figure", "naive baseline", "memoryd", "ratio", "target", "met?")
    body = []
    for row in rows:
        stat = row.stat if not row.naive_stat else f"{row.stat}; naive {row.naive_stat}"
        n = f"n={len(row.memoryd)}" if row.memoryd else "n=0"
        target = "≤ " + fmt(row.target, row.unit) if row.target is not None else "—"
        body.append(
            (
                f"{row.label} [{stat}, {n}]",
                fmt(row.base, row.unit),
                fmt(row.mine, row.unit),
                ratio(row.base, row.mine),
                target,
                row.met,
            )
        )
    return markdown_table(header, body)


# --- /proc --------------------------------------------------------------------------------------
def cpu_ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def sched_ns(pid: int) -> int:
    """Nanoseconds on a CPU, summed over the live threads (finer than the tick counts)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as handle:
            total += int(handle.read().split()[0])
    return total


def proc_status(pid: int, key: str) -> int:
    """A `VmRSS`-like field of /proc/<pid>/status, in bytes."""
    with open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            if line.startswith(key.encode() + b":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


# --- a temporary HOME with one Claude project memory dir ----------------------------------------
@dataclass
class Home:
    root: Path
    config: Path
    memory: Path

    @property
    def env(self) -> dict[str, str]:
        return child_env(self.root)

    @property
    def state(self) -> Path:
        return self.root / ".local" / "state" / "memoryd"

    def audit(self, event: str | None = None) -> list[dict[str, Any]]:
        rows = iter_lines(self.state / "log" / "audit.jsonl")
        return [r for r in rows if event is None or r["event"] == event]


def write_config(config: Path, debounce: str, manage: Path | None = None) -> None:
    """The daemon's config; `manage`: a git work tree whose tracked memories memoryd is to
    index all the same (paths.manage_repos: else it reads such a dir and writes nothing)."""
    max_wait = debounce if parse_duration(debounce) > 30 else "30s"
    text = CONFIG.format(debounce=debounce, max_wait=max_wait)
    if manage is not None:
        text += f"[paths]\nmanage_repos = [{json.dumps(str(manage))}]\n"
    config.write_text(text)


def make_home(tmp: Path, name: str, debounce: str) -> Home:
    root = tmp / f"home-{name}"
    repo = root / "code" / "app"
    repo.mkdir(parents=True)
    project = root / ".claude" / "projects" / slugify(str(repo))
    (project / "memory").mkdir(parents=True)
    (project / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
    config = root / "memoryd.toml"
    write_config(config, debounce)
    return Home(root, config, project / "memory")


class DaemonProc:
    """`memoryd run` as a child process, through the _daemon_shim launcher when `counts` is
    given (it records what the daemon's handler and worker did into that file)."""

    def __init__(self, home: Home, log: Path, counts: Path | None = None) -> None:
        self.home = home
        if counts is None:
            args = [sys.executable, "-m", "memoryd", "--config", str(home.config), "run"]
        else:
            args = [
                sys.executable,
                str(Path(__file__).resolve().with_name("_daemon_shim.py")),
                str(counts),
                "--config",
                str(home.config),
                "run",
            ]
        with log.open("a") as stderr:
            self.proc = subprocess.Popen(
                args, env=home.env, stdout=subprocess.DEVNULL, stderr=stderr
            )
        self.log = log
        deadline = time.monotonic() + 300
        while not home.audit("daemon.started"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memoryd did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def settle(self, quiet: float, timeout: float = 300.0) -> float:
        """Wait until the index files have not changed for `quiet` s and the daemon is idle."""
        started = time.monotonic()
        last = idents(self.home.memory)
        last_change = started
        ticks = cpu_ticks(self.pid)
        tick_at = started
        while True:
            time.sleep(0.1)
            now = time.monotonic()
            current = idents(self.home.memory)
            if current != last:
                last, last_change = current, now
            if now - tick_at >= 1.0:
                busy = cpu_ticks(self.pid) - ticks
                ticks, tick_at = cpu_ticks(self.pid), now
                if busy > 0.02 * CLK_TCK:  # above 2 % of a core: still working
                    last_change = max(last_change, now - 0.5)
            if now - last_change >= quiet:
                return now - started
            if now - started > timeout:
                raise RuntimeError("the daemon did not settle")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# --- index files --------------------------------------------------------------------------------
def idents(folder: Path) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for name in (INDEX_NAME, ARCHIVE_NAME):
        try:
            st = os.stat(folder / name)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def pointer_lines(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        match = POINTER.match(line)
        if match and match.group(2).endswith(".md") and not match.group(2).startswith("MEMORY"):
            out.append((match.group(2), line))
    return out


# --- writes as an agent makes them --------------------------------------------------------------
def atomic_write(folder: Path, filename: str, data: bytes) -> None:
    """A temp file, then a rename onto the name (what Claude Code does)."""
    tmp = folder / f"{filename}.tmp.{os.getpid()}.{random.getrandbits(32):08x}"
    tmp.write_bytes(data)
    os.rename(tmp, folder / filename)


def with_description(text: str, description: str) -> bytes:
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("description:"):
            lines[i] = f"description: {description}"
            return "\n".join(lines).encode("utf-8")
    raise ValueError("no description line")


# --- naive baselines ----------------------------------------------------------------------------
def timed_naive(path: Path, out_dir: Path) -> float:
    from _naive import naive_rebuild

    gc.collect()
    start = time.perf_counter()
    naive_rebuild(path, out_dir)
    return time.perf_counter() - start


# --- child processes ----------------------------------------------------------------------------
def child(mode: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--_child", mode, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def child_poll(path: str) -> None:
    """Baseline of figure 2: watchdog's PollingObserver on the folder, until stdin closes."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers.polling import PollingObserver

    observer = PollingObserver()
    observer.schedule(FileSystemEventHandler(), path, recursive=False)
    observer.start()
    print("ready", flush=True)
    sys.stdin.read()
    observer.stop()
    observer.join()


def child_hold(path: str) -> None:
    """Baseline of the RSS row: a fresh interpreter holding every file's python-frontmatter Post."""
    from _naive import naive_load_all

    posts, _ = naive_load_all(Path(path))
    gc.collect()
    print(json.dumps({"rss": proc_status(os.getpid(), "VmRSS"), "posts": len(posts)}), flush=True)


def child_watch(path: str) -> None:
    """Baseline of figure 3: watchdog, default event mask; on each `report` line from stdin, wait
    for 2 s without events and print which names it reported since the last report."""
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    lock = threading.Lock()
    seen: set[str] = set()
    counts = {"events": 0, "overflows": 0}
    last = [time.monotonic()]

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            names = [os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", ""))]
            with lock:
                counts["events"] += 1
                seen.update(os.path.basename(n) for n in names if n)
                last[0] = time.monotonic()

    class Overflow(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "overflow" in record.getMessage().lower():
                with lock:
                    counts["overflows"] += 1

    logging.getLogger("watchdog.observers.inotify_c").addHandler(Overflow(logging.WARNING))
    observer = Observer()
    observer.schedule(Handler(), path, recursive=False)  # no event_filter: the default mask
    observer.start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "report":
            break
        deadline = time.monotonic() + 120
        while time.monotonic() - last[0] < 2.0 and time.monotonic() < deadline:
            time.sleep(0.1)
        with lock:
            print(json.dumps({**counts, "names": sorted(seen)}), flush=True)
            seen.clear()
            counts.update(events=0, overflows=0)
    observer.stop()
    observer.join()


# --- figure 1: event-to-index latency ------------------------------------------------------------
@dataclass
class Latency:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    window: tuple[float, float] = (0.0, 0.0)  # monotonic: first change, last index change
    naive: list[float] = field(default_factory=list)


def wait_index_change(
    folder: Path, before: tuple[Any, ...], t0: float, timeout: float
) -> float | None:
    """Seconds from t0 until the last index file written by the pass has changed."""
    current, first, last = before, None, None
    while True:
        now_ident = idents(folder)
        now = time.monotonic()
        if now_ident != current:
            current, last = now_ident, now
            first = first or now
        if first is not None and now - first > SETTLE_WINDOW:
            return (last or now) - t0
        if now - t0 > timeout:
            return None
        time.sleep(POLL)


def bench_latency(
    home: Home,
    daemon: DaemonProc,
    twin: Path,
    n: int,
    files: dict[str, Any],
    args: argparse.Namespace,
    tmp: Path,
) -> Latency:
    folder, debounce = home.memory, args.debounce_s
    out = Latency()
    naive_out = tmp / f"naive-out-{n}"
    naive_out.mkdir(exist_ok=True)
    naive: list[float] = [timed_naive(twin, naive_out)]
    naive_every = 1 if n <= 2000 else 3
    kinds = ["description changed, pointer in MEMORY.md"]
    if (folder / ARCHIVE_NAME).exists():
        kinds.append("description changed, pointer in archive")
    kinds.append("one new file (atomic rename)")
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    raw: list[float] = []
    bad: list[str] = []
    used: set[str] = set()
    rng = random.Random(args.seed + n)

    def pick(index_name: str) -> str:
        for target, _ in pointer_lines(read_text(folder / index_name)):
            info = files.get(target)
            if info is not None and info.type != "user" and target not in used:
                return target
        raise RuntimeError(f"no memory pointer left in {index_name}")

    main_file = pick(INDEX_NAME)
    window_start = time.monotonic()
    for k in range(args.reps):
        kind = kinds[k % len(kinds)]
        before = idents(folder)
        if kind.startswith("one new file"):
            info, text = _synth.render_file(rng, n + 100_000 + k, "project", "nested")
            files[info.filename] = info
            expect = f"({info.filename})"
            atomic_write(folder, info.filename, text.encode("utf-8"))
        else:
            name = main_file if "MEMORY.md" in kind else pick(ARCHIVE_NAME)
            used.add(name)
            expect = f"Revised note {k} for {name.removesuffix('.md')}"
            atomic_write(folder, name, with_description((folder / name).read_text("utf-8"), expect))
        t0 = time.monotonic()
        took = wait_index_change(folder, before, t0, debounce + 60)
        if took is None:
            bad.append(f"{kind}: no index change within {debounce + 60:.0f} s")
            continue
        raw.append(took)
        samples[kind].append(took - debounce)
        if expect not in read_text(folder / INDEX_NAME) + read_text(folder / ARCHIVE_NAME):
            bad.append(f"{kind}: the change is not in the index")
        # Write again soon: the event of the daemon's own index write (which memoryd does not
        # always recognise as its own) then falls into the same quiet period as this change,
        # instead of a pass of its own that the next change would queue behind.
        time.sleep(0.05 + rng.random() * 0.05)
        if k % naive_every == naive_every - 1:  # the baseline, spread among the changes
            naive.append(timed_naive(twin, naive_out))
    out.window = (window_start, time.monotonic())
    out.naive = naive
    every = [s for v in samples.values() for s in v]
    for stat in ("p50", "p99"):
        for kind in kinds:
            out.rows.append(
                Row(f"1. {n:,}: {kind}, after debounce", naive, samples[kind], 15 * MS, stat=stat)
            )
        out.rows.append(
            Row(f"1. {n:,}: all changes, after debounce", naive, every, 15 * MS, stat=stat)
        )
    if raw:
        early = sum(1 for r in raw if r < debounce)
        out.notes.append(
            f"{n:,}: write → index change, debounce included: min {fmt(min(raw), 'time')}, "
            f"median {fmt(statistics.median(raw), 'time')}, max {fmt(max(raw), 'time')} "
            f"(debounce {fmt(debounce, 'time')}; {early} change(s) indexed before the debounce "
            "ran out, i.e. by a pass something else had scheduled)"
        )
    out.notes.append(f"{n:,}: naive full rebuild timed {len(naive)}× on a byte-identical copy")
    if bad:
        out.notes.append(f"{n:,}: WARNING {len(bad)} change(s) misbehaved: {bad[:3]}")
    return out


def pass_note(n: int, record: dict[str, Any], window: tuple[float, float], reps: int) -> str:
    """What the daemon's worker did while figure 1 ran: passes, their outcome and duration."""
    passes = [
        (d, status)
        for s, d, status, check in record.get("index", [])
        if window[0] <= s <= window[1] and not check
    ]
    updated = [d for d, status in passes if status == "updated"]
    others: dict[str, int] = {}
    for _, status in passes:
        if status != "updated":
            others[status] = others.get(status, 0) + 1
    spent = ""
    if updated:
        spent = (
            f"; an updating index pass took p50 {fmt(percentile(updated, 50), 'time')}, "
            f"p99 {fmt(percentile(updated, 99), 'time')} inside the daemon (the whole pass: "
            "scan, write, verify, state and cache saved)"
        )
    collections = [(d, g) for s, d, g in record.get("gc", []) if window[0] <= s <= window[1]]
    full = [d for d, g in collections if g == 2]
    gc_note = (
        f"; garbage collections of ≥ 0.5 ms in that time: {len(collections)}, "
        f"{sum(d for d, _ in collections) * 1000:.0f} ms in all, of which {len(full)} "
        f"full (gen 2) taking {fmt(max(full), 'time') if full else '—'} at most"
    )
    return (
        f"{n:,}: during the {reps} changes the worker ran {len(passes)} index passes: "
        f"{len(updated)} updated, {others or 'no others'}{spent}{gc_note}"
    )


# --- figure 2: idle CPU and RSS -----------------------------------------------------------------
def bench_idle(
    daemon: DaemonProc, twin: Path, n: int, args: argparse.Namespace
) -> tuple[list[Row], list[str]]:
    poller = child("poll", str(twin))
    assert poller.stdout is not None and poller.stdin is not None
    poller.stdout.readline()
    time.sleep(3.0)  # its first snapshots of the folder
    daemon.settle(args.debounce_s + 0.5)
    windows = args.idle_windows
    length = args.idle / windows
    pids = {"memoryd": daemon.pid, "poll": poller.pid}
    ticks = {k: [cpu_ticks(p)] for k, p in pids.items()}
    sched = {k: [sched_ns(p)] for k, p in pids.items()}
    stamps = [time.monotonic()]
    rss: list[float] = []
    for _ in range(windows):
        time.sleep(max(0.0, stamps[0] + length * (len(stamps)) - time.monotonic()))
        stamps.append(time.monotonic())
        for k, p in pids.items():
            ticks[k].append(cpu_ticks(p))
            sched[k].append(sched_ns(p))
        rss.append(proc_status(daemon.pid, "VmRSS"))
    poller.stdin.close()
    poller.wait(timeout=30)
    spans = [b - a for a, b in itertools.pairwise(stamps)]
    whole = stamps[-1] - stamps[0]

    def pct_ticks(k: str) -> list[float]:
        t = ticks[k]
        return [100 * (b - a) / CLK_TCK / s for a, b, s in zip(t, t[1:], spans, strict=False)]

    def pct_sched(k: str) -> list[float]:
        t = sched[k]
        return [100 * (b - a) / 1e9 / s for a, b, s in zip(t, t[1:], spans, strict=False)]

    held = []
    for _ in range(3):
        holder = child("hold", str(twin))
        stdout, _ = holder.communicate(timeout=300)
        held.append(float(json.loads(stdout.strip().splitlines()[-1])["rss"]))
    label = f"{windows}×{length:.0f} s windows"
    rows = [
        Row(
            f"2. idle CPU, {n:,} files watched, % of a core (/proc stat; {label})",
            pct_ticks("poll"),
            pct_ticks("memoryd"),
            0.05,
            unit="percent",
        ),
        Row(
            f"2. idle CPU, {n:,} files watched, % of a core (schedstat ns; {label})",
            pct_sched("poll"),
            pct_sched("memoryd"),
            0.05,
            unit="percent",
        ),
        Row(
            f"2. idle CPU, {n:,} files watched, % of a core (schedstat ns; {label})",
            pct_sched("poll"),
            pct_sched("memoryd"),
            None,
            unit="percent",
            stat="max",
        ),
        Row(
            f"2. RSS with {n:,} memories loaded (VmRSS; naive: frontmatter Posts held)",
            held,
            rss,
            60 * MB,
            unit="bytes",
        ),
    ]
    total_ticks = ticks["memoryd"][-1] - ticks["memoryd"][0]
    total_ns = sched["memoryd"][-1] - sched["memoryd"][0]
    notes = [
        f"idle: memoryd used {total_ticks} tick(s) of 1/{CLK_TCK} s and "
        f"{total_ns / 1e6:.1f} ms on a CPU in {whole:.1f} s = "
        f"{100 * total_ns / 1e9 / whole:.4f} % of a core (schedstat); the polling observer "
        f"{100 * (sched['poll'][-1] - sched['poll'][0]) / 1e9 / whole:.2f} %; the baseline "
        "polls a byte-identical copy, so its scandir/stat calls never wake memoryd's watch",
        f"RSS: memoryd VmRSS {fmt(min(rss), 'bytes')}–{fmt(max(rss), 'bytes')} over the windows,"
        f" VmHWM (its peak since start) {fmt(proc_status(daemon.pid, 'VmHWM'), 'bytes')}; compare"
        " the RSS right after start-up above: the growth is what the changes of figure 1 left",
    ]
    return rows, notes


# --- figure 3: a git checkout storm -------------------------------------------------------------
def git(folder: Path, *args: str) -> None:
    subprocess.run(
        [*GIT, *args], cwd=folder, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


@dataclass
class Tree:
    memory: Path
    a_files: set[str]
    b_files: set[str]
    modified: set[str]
    index_bytes: bytes
    mtimes: dict[str, float]

    @property
    def changed(self) -> set[str]:
        return self.modified | (self.a_files ^ self.b_files)


def build_tree(memory: Path, files: dict[str, Any], seed: int) -> Tree:
    """Make the memory dir a git work tree: branch A holds it as built, branch B differs in every
    file (60 % descriptions changed, 20 % deleted, 20 % new memories)."""
    rng = random.Random(seed + 7)
    names = sorted(files)
    mtimes = {n: os.stat(memory / n).st_mtime for n in names}
    index_bytes = (memory / INDEX_NAME).read_bytes()
    git(memory, "init", "-q", "-b", "A")
    git(memory, "config", "core.checkStat", "minimal")
    git(memory, "config", "core.trustctime", "false")
    (memory / ".git" / "info" / "exclude").write_text(
        "MEMORY*.md\n.MEMORY.md.prev\n.trash/\n*.tmp\n*.tmp.*\n"
    )
    git(memory, "add", "-A")
    git(memory, "commit", "-q", "-m", "A")
    git(memory, "checkout", "-q", "-b", "B")
    shuffled = names[:]
    rng.shuffle(shuffled)
    cut1, cut2 = int(len(names) * 0.6), int(len(names) * 0.8)
    modified, deleted = set(shuffled[:cut1]), set(shuffled[cut1:cut2])
    for i, name in enumerate(sorted(modified)):
        path = memory / name
        path.write_bytes(
            with_description(path.read_text("utf-8"), f"{MARK_B} {i} of {name.removesuffix('.md')}")
        )
    for name in deleted:
        (memory / name).unlink()
    added = set()
    for i in range(len(deleted)):
        info, text = _synth.render_file(rng, len(names) + 200_000 + i, "project", "nested")
        (memory / info.filename).write_bytes(text.encode("utf-8"))
        added.add(info.filename)
    git(memory, "add", "-A")
    git(memory, "commit", "-q", "-m", "B")
    git(memory, "checkout", "-q", "A")
    b_files = (set(names) - deleted) | added
    return Tree(memory, set(names), b_files, modified, index_bytes, mtimes)


def reset_tree(tree: Tree) -> None:
    """Back to branch A as first built, old mtimes, the synthetic MEMORY.md, no archive."""
    git(tree.memory, "checkout", "-q", "-f", "A")
    for name in (ARCHIVE_NAME, ".MEMORY.md.prev"):
        with contextlib.suppress(FileNotFoundError):
            (tree.memory / name).unlink()
    shutil.rmtree(tree.memory / ".trash", ignore_errors=True)
    (tree.memory / INDEX_NAME).write_bytes(tree.index_bytes)
    for name, mtime in tree.mtimes.items():
        os.utime(tree.memory / name, (mtime, mtime))
    git(tree.memory, "update-index", "-q", "--refresh")


@dataclass
class Check:
    missing: int = 0  # present on disk, no pointer anywhere
    stale: int = 0  # a pointer, but the description of the other branch
    duplicate: int = 0  # extra pointers to one file across MEMORY.md + archive
    dangling: int = 0  # pointers to files not present

    @property
    def lost(self) -> int:
        return self.missing + self.stale

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.duplicate or self.dangling)


def check_index(tree: Tree, on_b: bool) -> Check:
    expected = tree.b_files if on_b else tree.a_files
    found: dict[str, list[str]] = {}
    for name in (INDEX_NAME, ARCHIVE_NAME):
        for target, line in pointer_lines(read_text(tree.memory / name)):
            found.setdefault(target, []).append(line)
    out = Check()
    for name in expected:
        lines = found.get(name)
        if not lines:
            out.missing += 1
            continue
        out.duplicate += len(lines) - 1
        if name in tree.modified and (MARK_B in lines[0]) != on_b:
            out.stale += 1
    out.dangling = sum(len(v) for k, v in found.items() if k not in expected)
    return out


def checkout(tree: Tree, branch: str) -> tuple[float, float]:
    start = time.monotonic()
    git(tree.memory, "checkout", "-q", branch)
    return start, time.monotonic()


@dataclass
class StormRun:
    took: list[float] = field(default_factory=list)  # checkout exit → index consistent
    lost: list[float] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    checkout_s: list[float] = field(default_factory=list)
    audit: dict[str, int] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    # per checkout: events the daemon's handler got, by kind; how long after `git checkout`
    # exited the last file event before the first pass reached the handler; the passes run
    events: list[dict[str, int]] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    passes: list[list[tuple[float, str]]] = field(default_factory=list)


def storm_daemon(home: Home, tree: Tree, args: argparse.Namespace, tmp: Path) -> StormRun:
    reset_tree(tree)
    shutil.rmtree(home.root / ".local" / "state", ignore_errors=True)
    write_config(home.config, args.debounce, manage=tree.memory)  # a work tree, tracked
    counts = tmp / "storm.json"
    daemon = DaemonProc(home, tmp / "daemon-storm.log", counts)
    run = StormRun()
    spans: list[tuple[float, float]] = []
    try:
        daemon.settle(args.debounce_s + 0.5)
        for rep in range(args.storm_reps):
            on_b = rep % 2 == 0
            start, done = checkout(tree, "B" if on_b else "A")
            spans.append((start, done))
            run.checkout_s.append(done - start)
            last = idents(tree.memory)
            took = math.inf
            deadline = done + 120
            while time.monotonic() < deadline:
                current = idents(tree.memory)
                seen_at = time.monotonic()
                if current != last:
                    last = current
                    if check_index(tree, on_b).ok:
                        took = seen_at - done
                        break
                time.sleep(0.005)
            run.took.append(took)
            daemon.settle(args.debounce_s + 0.5)
            final = check_index(tree, on_b)
            run.checks.append(final)
            run.lost.append(final.lost)
    finally:
        daemon.stop()
    for event in (
        "watch.overflow",
        "watch.rescanned",
        "index.updated",
        "index.verify_failed",
        "index.conflict",
    ):
        run.audit[event] = len(home.audit(event))
    with contextlib.suppress(OSError, ValueError):
        run.record = json.loads(counts.read_text())
    signals: dict[str, list[float]] = run.record.get("signals", {})
    passes_all = [
        (s, d, status) for s, d, status, check in run.record.get("index", []) if not check
    ]
    for i, (start, done) in enumerate(spans):
        until = spans[i + 1][0] if i + 1 < len(spans) else math.inf
        run.events.append({k: sum(1 for t in v if start <= t < until) for k, v in signals.items()})
        passes = [(s, d, status) for s, d, status in passes_all if done <= s < until]
        run.passes.append([(d, status) for _, d, status in passes])
        first = passes[0][0] if passes else until
        dirty = [t for t in signals.get("dirty", []) if start <= t < first]
        run.lag.append(max(dirty) - done if dirty else math.nan)
    return run


def storm_watchdog(tree: Tree, reps: int) -> tuple[list[float], list[dict[str, Any]]]:
    reset_tree(tree)
    watcher = child("watch", str(tree.memory))
    assert watcher.stdin is not None and watcher.stdout is not None
    watcher.stdout.readline()
    lost: list[float] = []
    reports: list[dict[str, Any]] = []
    changed = tree.changed
    try:
        for rep in range(reps):
            checkout(tree, "B" if rep % 2 == 0 else "A")
            watcher.stdin.write("report\n")
            watcher.stdin.flush()
            report = json.loads(watcher.stdout.readline())
            reported = changed & set(report["names"])
            lost.append(len(changed) - len(reported))
            reports.append({k: v for k, v in report.items() if k != "names"})
    finally:
        watcher.stdin.close()
        watcher.wait(timeout=30)
    return lost, reports


def bench_storm(
    home: Home, tree: Tree, args: argparse.Namespace, tmp: Path, naive_rebuild_s: list[float]
) -> tuple[list[Row], list[str]]:
    n_changed = len(tree.changed)
    run = storm_daemon(home, tree, args, tmp)
    base_lost, reports = storm_watchdog(tree, args.storm_reps)
    target = args.debounce_s + 0.0 + 1.0  # debounce + grace (0 s here) + 1 s
    naive_time = [args.debounce_s + s for s in naive_rebuild_s]
    rows, notes = [], []
    rows.append(
        Row(
            f"3. checkout of {n_changed:,} changed files: lost",
            base_lost,
            run.lost,
            0,
            unit="count",
            stat="max",
        )
    )
    rows.append(
        Row(
            "3. checkout exit → index consistent (naive: debounce + full rebuild)",
            naive_time,
            run.took,
            target,
            stat="max",
            naive_stat="median",
        )
    )
    notes.append(
        f"watchdog, default mask: reported {[n_changed - x for x in base_lost]} of "
        f"{n_changed:,} changed files per checkout; events {[r['events'] for r in reports]}; "
        f"queue overflow warnings {[r['overflows'] for r in reports]}"
    )
    events = "; ".join(
        ", ".join(f"{k} {v:,}" for k, v in sorted(e.items())) or "none" for e in run.events
    )
    passes = "; ".join(
        ", ".join(f"{fmt(d, 'time')} {st}" for d, st in p) or "none" for p in run.passes
    )
    notes.append(
        f"checkouts took {', '.join(fmt(s, 'time') for s in run.checkout_s)}; consistent after "
        f"{', '.join(fmt(s, 'time') for s in run.took)}; final "
        f"{[vars(c) for c in run.checks]}; the daemon's handler got, per checkout: {events}; "
        f"overflow callbacks {len(run.record.get('overflows', []))}; audit rows {run.audit};"
        f" the last file event before the first pass reached the handler "
        f"{', '.join(fmt(x, 'time') for x in run.lag)} after `git checkout` exited; "
        f"index passes after each checkout: {passes}"
    )
    return rows, notes


def memoryd_version() -> str:
    import memoryd

    root = Path(memoryd.__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"memoryd {memoryd.__version__}"
    return f"memoryd {memoryd.__version__} at {head}{' + local changes' if dirty else ''}"


# --- one run ------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_child"]:
        {"poll": child_poll, "hold": child_hold, "watch": child_watch}[argv[1]](argv[2])
        return 0
    import _naive  # noqa: F401  # the baselines' python-frontmatter: said now if it is missing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n",
        type=int,
        nargs="+",
        default=[1_000, 10_000],
        help="memory files in the dir (default 1000 10000); figures 2 and 3 use the largest",
    )
    parser.add_argument("--quick", action="store_true", help="1,000 files only, a 20 s idle window")
    parser.add_argument("--debounce", default="2s", help='watch.debounce (default "2s")')
    parser.add_argument("--reps", type=int, default=30, help="changes timed per size (30)")
    parser.add_argument("--idle", type=float, help="idle window in seconds (default 60)")
    parser.add_argument("--idle-windows", type=int, default=4)
    parser.add_argument(
        "--storm-reps",
        type=int,
        default=2,
        help="checkouts per storm run, alternating A→B and B→A (default 2)",
    )
    parser.add_argument("--figures", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp dir (its path is printed)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n = [1_000]
    if args.idle is None:
        args.idle = 20.0 if args.quick else 60.0
    args.debounce_s = parse_duration(args.debounce)
    sizes = sorted(set(args.n))
    with open("/proc/sys/fs/inotify/max_queued_events") as handle:
        queue = handle.read().strip()
    print(
        f"memoryd daemon bench ({memoryd_version()}) — Python {platform.python_version()} on "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; debounce "
        f"{args.debounce}, grace 0 s; inotify max_queued_events {queue}; load average "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    # mkdtemp, not TemporaryDirectory: the latter's finalizer would remove a --keep dir at exit.
    tmp = Path(tempfile.mkdtemp(prefix="memoryd-bench-daemon-"))
    rows: list[Row] = []
    notes: list[str] = []
    started = time.monotonic()
    try:
        storm_home = make_home(tmp, "storm", args.debounce)
        naive_at_max: list[float] = []
        storm_files: dict[str, Any] = {}
        for n in sizes:
            t = time.monotonic()
            home = make_home(tmp, f"n{n}", args.debounce)
            files = {f.filename: f for f in _synth.make_memory_dir(home.memory, n, seed=args.seed)}
            # A byte-identical twin for the baselines (the largest one is the storm's dir).
            twin = storm_home.memory if n == sizes[-1] else tmp / f"twin-{n}"
            twin.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", str(home.memory) + "/.", str(twin)], check=True)
            if n == sizes[-1]:
                storm_files = dict(files)
            print(
                f"\n== {n:,} memories, {_synth.tree_bytes(home.memory) / MB:.1f} MB, built in "
                f"{time.monotonic() - t:.1f} s ==",
                flush=True,
            )
            if not {1, 2} & set(args.figures):
                naive_at_max = [timed_naive(twin, tmp) for _ in range(3)]
                continue
            t = time.monotonic()
            counts = tmp / f"daemon-{n}.json"
            daemon = DaemonProc(home, tmp / f"daemon-{n}.log", counts)
            settled = daemon.settle(args.debounce_s + 0.5)
            notes.append(
                f"{n:,}: daemon started and settled in {time.monotonic() - t:.1f} s "
                f"(quiet for {settled:.1f} s of that); RSS then "
                f"{fmt(proc_status(daemon.pid, 'VmRSS'), 'bytes')}; index "
                f"{len(read_text(home.memory / INDEX_NAME).splitlines())} lines in "
                f"MEMORY.md, archive "
                f"{'present' if (home.memory / ARCHIVE_NAME).exists() else 'absent'}"
            )
            lat: Latency | None = None
            try:
                if 1 in args.figures:
                    lat = bench_latency(home, daemon, twin, n, files, args, tmp)
                    rows += lat.rows
                    notes += lat.notes
                    if n == sizes[-1]:
                        naive_at_max = lat.naive
                    print(render_table(lat.rows), flush=True)
                else:
                    naive_at_max = [timed_naive(twin, tmp) for _ in range(3)]
                if 2 in args.figures and n == sizes[-1]:
                    idle_rows, idle_notes = bench_idle(daemon, twin, n, args)
                    rows += idle_rows
                    notes += idle_notes
                    print(render_table(idle_rows), flush=True)
            finally:
                code = daemon.stop()
                if code:
                    notes.append(f"{n:,}: WARNING the daemon exited {code}")
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(counts.read_text())
                if lat is not None:
                    notes.append(pass_note(n, record, lat.window, args.reps))
            shutil.rmtree(home.root, ignore_errors=True)
        if 3 in args.figures:
            t = time.monotonic()
            tree = build_tree(storm_home.memory, storm_files, args.seed)
            print(
                f"\n== storm: git work tree of {len(tree.a_files):,} memories, "
                f"{len(tree.changed):,} files differ between A and B; built in "
                f"{time.monotonic() - t:.1f} s ==",
                flush=True,
            )
            storm_rows, storm_notes = bench_storm(storm_home, tree, args, tmp, naive_at_max)
            rows += storm_rows
            notes += storm_notes
            print(render_table(storm_rows), flush=True)
        print("\n== all figures ==")
        print(render_table(rows))
        print(
            f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
            f"total {time.monotonic() - started:.0f} s)"
        )
        for note in notes:
            print(f"- {note}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
