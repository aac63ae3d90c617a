"""Whole-process start-up bench (issue 14): `memoryd --help`, `memoryd status`, `memoryd index`
(first, nothing changed, after one change), `memoryd search QUERY` and `memoryd mcp` until it
answers `initialize` (issue 30) on a synthetic home of N memories, each beside a naive
baseline process in the same run: `python -c pass` (the
interpreter floor), a python-frontmatter script that parses every file and writes the index,
and `grep -ril`. The first index is also set beside FLOOR_INDEX, the least any first index
does (with and without the version store's part), timed in the same rounds.

    python bench/bench_startup.py              # 10,000 memories, about 2 minutes on 2 cores
    python bench/bench_startup.py --n 1000 --runs 5

Every child runs without PYTHONDONTWRITEBYTECODE (set in some environments, it would make each
start recompile memoryd), after memoryd's package is precompiled (compileall), as an installed
memoryd runs. Everything happens in a fresh temporary folder with its own HOME and XDG dirs.
"""

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _synth
from _stats import markdown_table, percentile

import memoryd

# The naive `index`: python-frontmatter on every memory file, the whole index regenerated and
# written (temp file, fsync, rename), in a process of its own. It imports nothing of memoryd's.
NAIVE_INDEX = """\
import os, sys
from pathlib import Path
import frontmatter
path = Path(sys.argv[1]); out = Path(sys.argv[2])
lines = [f"# {path.name} Memory", ""]
for name in sorted(os.listdir(path)):
    if not name.endswith(".md") or name.startswith(("MEMORY", ".")):
        continue
    try:
        post = frontmatter.load(path / name)
    except Exception:
        continue
    label = str(post.metadata.get("name") or name[:-3])
    description = " ".join(str(post.metadata.get("description") or "").split())
    lines.append(f"- [{label}]({name}) — {description}")
tmp = out / ".MEMORY.md.tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.write("\\n".join(lines) + "\\n"); f.flush(); os.fsync(f.fileno())
os.replace(tmp, out / "MEMORY.md")
"""


# The least any first `index` must do, in plain Python, with none of memoryd's checks (no
# secrets, problems, ownership, caches, archive or verification): list the dir, read each file,
# sha256 it, split its frontmatter for name and description, write the index (temp, fsync,
# rename). With argv[3] (a state folder), also what the version store adds at a first start:
# every file's bytes a row of one SQLite table (WAL), committed once. It shows where the target
# falls against what reading and storing 10,000 files costs on this machine.
FLOOR_INDEX = """\
import hashlib, os, sqlite3, sys
src = sys.argv[1]; state = sys.argv[2] if len(sys.argv) > 2 else None
fd = os.open(src, os.O_RDONLY)
lines, rows = [], []
for name in sorted(os.listdir(src)):
    if not name.endswith(".md") or name.startswith(("MEMORY", ".")):
        continue
    f = os.open(name, os.O_RDONLY, dir_fd=fd); data = os.read(f, 1 << 20); os.close(f)
    sha = hashlib.sha256(data).hexdigest()
    text = data.decode("utf-8", "replace"); title = desc = ""
    if text.startswith("---\\n"):
        for line in text[4 : text.find("\\n---", 4)].split("\\n"):
            key, _, value = line.partition(":")
            if key == "name": title = value.strip()
            elif key == "description": desc = value.strip()
    lines.append(f"- [{title or name[:-3]}]({name}) — {desc}")
    rows.append((sha, name, data))
if state:
    os.makedirs(state, exist_ok=True)
    db = sqlite3.connect(os.path.join(state, "floor.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS kept(sha TEXT, name TEXT, data BLOB)")
    db.execute("BEGIN"); db.executemany("INSERT INTO kept VALUES (?, ?, ?)", rows)
    db.execute("COMMIT"); db.close()
tmp = os.path.join(src, ".MEMORY.md.tmp")
w = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(w, ("\\n".join(lines) + "\\n").encode()); os.fsync(w); os.close(w)
os.replace(tmp, os.path.join(src, "MEMORY.md"))
"""


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


CPU = False  # `--cpu`: a child's user + system time, not its wall time


def run(argv: Sequence[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    usage = os.wait4(child.pid, 0)[2]
    child.returncode = 0  # reaped above
    return usage.ru_utime + usage.ru_stime if CPU else time.perf_counter() - started


INITIALIZE = (
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
    b'"2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}\n'
)


def handshake(argv: Sequence[str], env: dict[str, str]) -> float:
    """From spawning `memoryd mcp` to its answer to `initialize` (the client's wait before
    it can list the tools)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE)
    proc.stdin.flush()
    answer = proc.stdout.readline()
    took = time.perf_counter() - started
    proc.stdin.close()
    proc.wait()
    if b'"result"' not in answer:
        raise RuntimeError(f"memoryd mcp did not answer initialize: {answer[:200]!r}")
    return took


def memoryd_argv(given: str | None) -> list[str]:
    """`--memoryd` split into words; else the console script beside this interpreter, as a user
    runs it; else `python -m memoryd`."""
    if given:
        return given.split()
    script = Path(sys.executable).parent / "memoryd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "memoryd"]


def home_env(home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def append_line(folder: Path, name: str, i: int) -> None:
    """One change, as an agent appending to a memory's body."""
    with open(folder / name, "a", encoding="utf-8") as f:
        f.write(f"edit {i}\n")


def bench(n: int, args: argparse.Namespace) -> str:
    compileall.compile_dir(Path(memoryd.__file__).parent, quiet=1)
    mem = memoryd_argv(args.memoryd)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="memoryd-startup-bench-") as tmp_name:
        tmp = Path(tmp_name)
        pristine = tmp / "pristine"
        # `--bulk`: a bulk import, every memory written in the hour before the run (all
        # inside the keep-recent guard); else an aged dir, 30 to 400 days old.
        ages = (0.0, 1 / 24) if args.bulk else (30.0, 400.0)
        _synth.make_memory_dir(
            pristine, n, seed=args.seed, min_age_days=ages[0], max_age_days=ages[1]
        )
        out = tmp / "naive-out"
        out.mkdir()
        naive_index = [py, "-c", NAIVE_INDEX, str(pristine), str(out)]

        # The first `index`: a fresh home and a fresh copy of the dir each run (untimed copy);
        # with `--old`, the other memoryd's first index too, in the same rounds.
        old = args.old.split() if args.old else None
        first: list[float] = []
        first_naive: list[float] = []
        first_old: list[float] = []
        first_floor: list[float] = []  # FLOOR_INDEX, without and with the store's part
        first_floor_store: list[float] = []
        for i in range(args.first_runs):
            home = tmp / f"first{i}"
            folder = home / ".claude" / "projects" / "-tmp-bench" / "memory"
            env = home_env(home)
            if i == 0:  # the interpreter's own caches and the page cache, warm for both
                shutil.copytree(pristine, folder)
                run(naive_index, env)
                run([*mem, "--help"], env)
                if old is not None:
                    run([*old, "--help"], env)
                shutil.rmtree(home)
            kinds = [0, 1, 3, 4, 2] if old is not None else [0, 1, 3, 4]
            for which in kinds if i % 2 == 0 else kinds[::-1]:
                shutil.copytree(pristine, folder)  # copy2: the mtimes are kept
                if which == 0:
                    first.append(run([*mem, "index", str(folder)], env))
                elif which == 1:
                    first_naive.append(run(naive_index, env))
                elif which == 3:
                    first_floor.append(run([py, "-c", FLOOR_INDEX, str(folder)], env))
                elif which == 4:
                    state = str(home / "floor-state")
                    first_floor_store.append(run([py, "-c", FLOOR_INDEX, str(folder), state], env))
                elif old is not None:
                    first_old.append(run([*old, "index", str(folder)], env))
                shutil.rmtree(home)

        home = tmp / "home"
        folder = home / ".claude" / "projects" / "-tmp-bench" / "memory"
        shutil.copytree(pristine, folder)
        env = home_env(home)
        for _ in range(2):  # settle: the first pass demotes, the second changes nothing
            run([*mem, "index", str(folder)], env)
        run([*mem, "search", "warmup", str(folder)], env)  # builds the search index
        # `--old`: the other memoryd in a home and a dir of its own, timed in the same rounds.
        old_home = tmp / "home-old"
        old_folder = old_home / ".claude" / "projects" / "-tmp-bench" / "memory"
        old_env = home_env(old_home)
        if old is not None:
            shutil.copytree(pristine, old_folder)
            for _ in range(2):
                run([*old, "index", str(old_folder)], old_env)
            run([*old, "search", "warmup", str(old_folder)], old_env)
        time.sleep(2.5)  # past any racy-mtime window: "nothing changed" is nothing changed
        # A memory's body, not the README note (the first name in an `ls`).
        name = sorted(
            p.name
            for p in folder.glob("*.md")
            if not p.name.startswith("MEMORY") and p.name != "README.md"
        )[0]
        word = "session"
        steps = {
            "floor": [py, "-c", "pass"],
            "help": [*mem, "--help"],
            "status": [*mem, "status"],
            "index": [*mem, "index", str(folder)],
            "naive_index": naive_index,
            "search": [*mem, "search", "session cache", str(folder)],
            "grep": ["grep", "-ril", word, str(folder)],
            "mcp": [*mem, "mcp", str(folder)],
        }
        extra = ["index_old", "changed_old", "search_old", "mcp_old"] if old is not None else []
        samples: dict[str, list[float]] = {
            k: [] for k in [*steps, "changed", "changed_naive", *extra]
        }
        for i in range(args.runs):
            order = [*steps, "changed", *extra]
            if i % 2:
                order.reverse()
            for key in order:
                if key == "changed":
                    append_line(folder, name, i)
                    samples["changed"].append(run(steps["index"], env))
                    append_line(folder, name, 1000 + i)
                    samples["changed_naive"].append(run(naive_index, env))
                    run(steps["index"], env)  # back to nothing changed, untimed
                elif key == "index_old" and old is not None:
                    samples[key].append(run([*old, "index", str(old_folder)], old_env))
                elif key == "changed_old" and old is not None:
                    append_line(old_folder, name, i)
                    samples[key].append(run([*old, "index", str(old_folder)], old_env))
                    run([*old, "index", str(old_folder)], old_env)  # untimed, as above
                elif key == "search_old" and old is not None:
                    argv = [*old, "search", "session cache", str(old_folder)]
                    samples[key].append(run(argv, old_env))
                elif key == "mcp_old" and old is not None:
                    samples[key].append(handshake([*old, "mcp", str(old_folder)], old_env))
                elif key == "mcp":
                    samples[key].append(handshake(steps[key], env))
                else:
                    samples[key].append(run(steps[key], env))

    med = {k: percentile(v, 50) for k, v in samples.items()}
    floor = med["floor"]

    def row(label: str, base_label: str, base: float, mine: float, target: str) -> list[str]:
        ratio = f"{base / mine:.2f}×" if mine else "—"
        return [label, f"{base_label} {ms(base)}", ms(mine), ratio, target]

    rows = [
        row("`memoryd --help`", "python -c pass", floor, med["help"], ""),
        row("`memoryd status`", "python -c pass", floor, med["status"], ""),
        row(
            f"`memoryd index`, first ({n:,} memories)",
            "naive",
            percentile(first_naive, 50),
            percentile(first, 50),
            "≤ 1.2× naive (ratio ≥ 0.83)",
        ),
        row(
            "  not memoryd: FLOOR_INDEX, the least any first index does",
            "naive",
            percentile(first_naive, 50),
            percentile(first_floor, 50),
            "",
        ),
        row(
            "  not memoryd: FLOOR_INDEX with a row of SQLite a file",
            "naive",
            percentile(first_naive, 50),
            percentile(first_floor_store, 50),
            "",
        ),
        row(
            "`memoryd index`, nothing changed",
            "naive",
            med["naive_index"],
            med["index"],
            "≤ 0.3× naive (ratio ≥ 3.3)",
        ),
        row(
            "`memoryd index`, one change",
            "naive",
            med["changed_naive"],
            med["changed"],
            "≤ 0.4× naive (ratio ≥ 2.5)",
        ),
        row("`memoryd search QUERY`", "grep -ril", med["grep"], med["search"], "≤ 150 ms"),
        row(
            "`memoryd search QUERY`", "python -c pass", floor, med["search"], "≤ 4× (ratio ≥ 0.25)"
        ),
        row("`memoryd mcp`, initialize answered", "python -c pass", floor, med["mcp"], "≤ 500 ms"),
    ]
    if args.old:
        first_old_med = percentile(first_old, 50)
        rows += [
            row("`index`, first: old ÷ this", "old", first_old_med, percentile(first, 50), ""),
            row("`index`, nothing changed: old ÷ this", "old", med["index_old"], med["index"], ""),
            row("`index`, one change: old ÷ this", "old", med["changed_old"], med["changed"], ""),
            row("old `index`, first", "naive", percentile(first_naive, 50), first_old_med, ""),
            row("old `index`, nothing changed", "naive", med["naive_index"], med["index_old"], ""),
            row("old `index`, one change", "naive", med["changed_naive"], med["changed_old"], ""),
            row("`search QUERY`: old ÷ this", "old", med["search_old"], med["search"], ""),
            row("`mcp`, initialize: old ÷ this", "old", med["mcp_old"], med["mcp"], ""),
        ]
    table = markdown_table(["figure [median]", "baseline", "memoryd", "ratio", "target"], rows)
    return (
        f"{table}\n\nruns: {args.runs} each ({args.first_runs} for the first index); "
        f"ratio = baseline ÷ memoryd; interpreter floor (`python -c pass`) {ms(floor)}; "
        "children run without PYTHONDONTWRITEBYTECODE, memoryd precompiled"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--runs", type=int, default=11, help="runs of each figure")
    parser.add_argument("--first-runs", type=int, default=5, help="runs of the first index")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bulk",
        action="store_true",
        help="a bulk import: every memory written in the last hour (default: 30 to 400 days old)",
    )
    parser.add_argument(
        "--memoryd",
        metavar="COMMAND",
        help="the command to run as memoryd, split at blanks (default: the console script "
        "beside this interpreter), e.g. another checkout's, to compare in one machine state",
    )
    parser.add_argument(
        "--old",
        metavar="COMMAND",
        help="another memoryd (split at blanks), whose `index` nothing changed and after one "
        "change is timed in the same rounds, in a home of its own: old and new in one run",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time each child's CPU (user + system) rather than its wall time: steadier on a "
        "machine others load (`mcp` is still timed to its answer)",
    )
    args = parser.parse_args()
    global CPU
    CPU = args.cpu
    kind = ("bulk import" if args.bulk else "aged dir") + (", CPU time" if args.cpu else "")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.2f}, {kind}")  # fmt: skip
    for n in args.n:
        print(f"\n### {n:,} memories\n")
        print(bench(n, args))


if __name__ == "__main__":
    main()
