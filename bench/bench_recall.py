"""Recall benchmarks (issue 15): first build, warm queries, one-file updates, `memoryd search`
as a whole process, and the MCP server's memory, each beside a baseline in the same run:
`grep -ril` over the dir, and a naive full parse and score of every file per query.

    python bench/bench_recall.py                  # 10,000 memories
    python bench/bench_recall.py --n 1000 10000   # one table per size
    python bench/bench_recall.py --n 100000 --queries 100 --naive 1

Everything happens in a fresh temporary folder with its own HOME and XDG dirs.
"""

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import _synth
from _naive import naive_load_all
from _stats import markdown_table, percentile

from memoryd.config import Config
from memoryd.discover.finder import memory_dir_at
from memoryd.recall.engine import Engine
from memoryd.recall.store import RACY_NS, DirIndex, IndexOptions, index_path, worker_count
from memoryd.runtime import tune_gc

_WORD = re.compile(r"[a-z]{4,}")
HWM = "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def queries_for(folder: Path, count: int, seed: int) -> list[str]:
    """Queries as an agent types them: a memory's name, two words of a description, a body
    word with a typo (a letter dropped), a word with an ending."""
    rng = random.Random(seed)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".md") and n[0] != "M")
    out: list[str] = []
    while len(out) < count:
        text = (folder / rng.choice(names)).read_text(encoding="utf-8", errors="replace")
        words = _WORD.findall(text.lower()) or ["deploy"]
        kind = len(out) % 4
        if kind == 0:
            line = next((x for x in text.splitlines() if x.startswith("name: ")), "name: x")
            out.append(line[6:].strip().strip('"'))
        elif kind == 1:
            out.append(" ".join(rng.sample(words, min(2, len(words)))))
        elif kind == 2:
            word = rng.choice(words)
            cut = rng.randrange(1, len(word) - 1)
            out.append(word[:cut] + word[cut + 1 :])
        else:
            out.append(rng.choice(words) + "s")
    return out


def make_corpus_dir(folder: Path, n: int, corpus: Path, seed: int) -> None:
    """n memories made of the real corpus's memory files (cycled; each copy gets its own file
    name, a number in its name and an mtime 1-400 days ago): real text, so each word is in as
    many memories as it would be in real dirs, unlike the synthetic dir's small vocabulary."""
    rng = random.Random(seed)
    sources = sorted(
        p
        for p in corpus.rglob("*.md")
        if "memory" in str(p.relative_to(corpus)) and not p.name.startswith("MEMORY")
        and "_alt_versions" not in p.parts and p.read_bytes().startswith(b"---")
    )  # fmt: skip
    if not sources:
        sys.exit(f"{corpus}: no memory files found")
    folder.mkdir(parents=True)
    now = time.time()
    for i in range(n):
        source = sources[i % len(sources)]
        text = source.read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"^name: (.*)$", rf"name: \1 {i}", text, count=1, flags=re.M)
        path = folder / f"{source.stem}_{i:06d}.md"
        path.write_text(text, encoding="utf-8")
        when = now - rng.uniform(1, 400) * 86400
        os.utime(path, (when, when))
    (folder / "MEMORY.md").write_text("# Memory\n")


def naive_search(folder: Path, query: str) -> list[str]:
    """The baseline: parse every file (python-frontmatter) and count the query's words."""
    posts, _ = naive_load_all(folder)
    wanted = query.lower().split()
    scored = []
    for post in posts:
        text = (str(post.get("name", "")) + " " + str(post.get("description", ""))).lower()
        text += " " + post.content.lower()
        score = sum(text.count(w) for w in wanted)
        if score:
            scored.append((-score, str(post.get("name", ""))))
    return [name for _, name in sorted(scored)[:10]]


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def cpu_seconds() -> float:
    """User + system CPU time of this process and its waited-for children."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_process(argv: Sequence[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def server_rss(folder: Path, env: dict[str, str], queries: Sequence[str]) -> tuple[int, int, int]:
    """(RSS, peak RSS, RSS after initialize) in KB of the real `memoryd mcp` process, driven
    by the SDK's own client over stdio: each query a `search_memories` call, then one
    `recall_for_paths`; read from the server's /proc status (VmRSS, VmHWM)."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    def status(pid: int) -> dict[str, int]:
        out = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    def server_pid() -> int:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid() and b"mcp" in argv:
                return int(entry.name)
        raise RuntimeError("the memoryd mcp process was not found")

    async def drive() -> tuple[int, int, int]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "memoryd", "mcp", str(folder)], env=env
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            pid = server_pid()
            started = status(pid)["VmRSS"]
            for query in queries:
                await session.call_tool("search_memories", {"query": query})
            await session.call_tool("recall_for_paths", {"paths": [str(folder / "x.py")]})
            now = status(pid)
            return now["VmRSS"], now["VmHWM"], started

    return asyncio.run(drive())


def bare_rss(env: dict[str, str]) -> int:
    """Peak RSS (KB) of a bare interpreter, for scale."""
    done = subprocess.run(
        [sys.executable, "-c", HWM], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


def bench(n: int, args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="memoryd-recall-bench-") as tmp_name:
        tmp = Path(tmp_name)
        home = tmp / "home"
        home.mkdir()
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        }
        # A whole process is measured as an installed memoryd runs: from compiled bytecode.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        import compileall

        import memoryd

        compileall.compile_dir(Path(memoryd.__file__).parent, quiet=1)
        state = home / ".local" / "state" / "memoryd"
        folder = tmp / "mem"
        if args.source == "corpus":
            make_corpus_dir(folder, n, args.corpus, args.seed)
        else:
            _synth.make_memory_dir(folder, n, seed=args.seed)
        os.sync()  # the new files' dirty pages written out: a first build does not follow them
        real = folder.resolve()
        queries = queries_for(folder, args.queries, args.seed)
        rows: list[list[str]] = []

        # 1. first build, and its CPU time (user + sys) with its worker processes
        with DirIndex(index_path(state, real), real, IndexOptions(workers=worker_count())) as index:
            before = cpu_seconds()
            build = timed(index.update)
            cpu = cpu_seconds() - before
            workers = f", {index.spawned} worker processes" if index.spawned else ""
        rows.append([f"first build, {n:,} memories", "—", f"{ms(build)} (CPU {ms(cpu)}{workers})",
                     "≤ 20 s (100,000)"])  # fmt: skip

        # 2. warm queries in-process (the MCP server between its stat refreshes)
        md = memory_dir_at(folder, Config())
        with Engine([md], state) as engine:
            engine.refresh()
            for q in queries[:10]:
                engine.search(q)  # warm the page cache and the vocabulary
            samples = [timed(lambda q=q: engine.search(q)) for q in queries]  # type: ignore[misc]
            typo = [timed(lambda q=q: engine.search(q)) for q in queries[2::4]]  # type: ignore[misc]
            refresh = [timed(engine.refresh) for _ in range(args.repeat)]
        naive = [timed(lambda q=q: naive_search(folder, q)) for q in queries[: args.naive]]  # type: ignore[misc]
        target = "≤ 10 ms" if n <= 10_000 else "≤ 50 ms"
        rows.append(
            [
                f"warm query p50 / p99 ({len(samples)} queries)",
                f"{ms(percentile(naive, 50))} (naive, {len(naive)} q)",
                f"{ms(percentile(samples, 50))} / {ms(percentile(samples, 99))}",
                f"p99 {target}",
            ]
        )
        rows.append(
            [
                "  of which typo queries p50 / p99",
                "—",
                f"{ms(percentile(typo, 50))} / {ms(percentile(typo, 99))}",
                "",
            ]
        )
        rows.append(
            [
                "stat refresh, nothing changed [median]",
                "—",
                ms(percentile(refresh, 50)),
                "(once per command; MCP ≤ every 2 s)",
            ]
        )

        # 3. one changed file
        rng = random.Random(args.seed)
        names = sorted(
            p.name
            for p in folder.glob("*.md")
            if not p.name.startswith("MEMORY") and p.name != "README.md"
        )
        hooked, by_stat = [], []
        # Measured as if a few seconds after each edit: within RACY_NS of its mtime, a file is
        # read again by the next update as well (it may change again within the same tick),
        # which would time the edits before it too.
        later = lambda: time.time_ns() + 10 * RACY_NS  # noqa: E731
        with DirIndex(index_path(state, real), real, IndexOptions(clock_ns=later)) as index:
            index.update()
            for i in range(args.repeat * 4):
                name = rng.choice(names)
                _synth.set_description(folder / name, f"changed description number {i}")
                if i % 2:
                    hooked.append(timed(lambda name=name: index.update([name])))  # type: ignore[misc]
                else:
                    by_stat.append(timed(index.update))
        rows.append(
            [
                "one changed file: daemon hook update([name]) p50 / p99",
                "—",
                f"{ms(percentile(hooked, 50))} / {ms(percentile(hooked, 99))}",
                "≤ 5 ms",
            ]
        )
        rows.append(
            [
                "one changed file: a command's update by stat p50",
                "—",
                ms(percentile(by_stat, 50)),
                "",
            ]
        )

        # 4. whole processes
        time.sleep(2.5)  # past the racy window: the index is up to date for the runs below
        memoryd_cmd = [sys.executable, "-m", "memoryd"]
        run_process([*memoryd_cmd, "search", "warmup", str(folder)], env)
        word = queries[1].split()[0]
        search_runs, grep_runs, bare_runs = [], [], []
        for i in range(args.repeat):
            order = [0, 1, 2] if i % 2 == 0 else [2, 1, 0]
            for which in order:
                if which == 0:
                    query = queries[i % len(queries)]
                    search = [*memoryd_cmd, "search", query, str(folder)]
                    search_runs.append(run_process(search, env))
                elif which == 1:
                    grep_runs.append(run_process(["grep", "-ril", word, str(folder)], env))
                else:
                    bare_runs.append(run_process([sys.executable, "-c", "pass"], env))
        rows.append(
            [
                "`memoryd search` whole process [median]",
                f"grep -ril {ms(percentile(grep_runs, 50))}",
                ms(percentile(search_runs, 50)),
                "≤ 150 ms",
            ]
        )
        rows.append(["  bare `python -c pass` [median]", "—", ms(percentile(bare_runs, 50)), ""])

        # 5. the MCP server's memory: the real `memoryd mcp`, after its queries
        if not args.skip_rss:
            try:
                rss, peak, started = server_rss(folder, env, queries[:20])
                rows.append(
                    [
                        "`memoryd mcp` RSS / peak after 20 searches + 1 recall",
                        f"bare python {bare_rss(env) // 1024} MB; "
                        f"server after initialize {started // 1024} MB",
                        f"{rss // 1024} MB / {peak // 1024} MB",
                        "≤ 80 MB (100,000)",
                    ]
                )
            except (ImportError, RuntimeError, OSError) as error:
                rows.append(["`memoryd mcp` RSS", "—", f"failed: {error}", ""])
        size = sum(p.stat().st_size for p in (state / "recall").iterdir())
        rows.append(["index size on disk", f"dir {_synth.tree_bytes(folder) >> 20} MB",
                     f"{size >> 20} MB", ""])  # fmt: skip
    return markdown_table(["figure", "baseline", "memoryd", "target"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=400, help="warm queries timed")
    parser.add_argument("--naive", type=int, default=3, help="queries of the naive baseline")
    parser.add_argument("--repeat", type=int, default=10, help="runs of the other figures")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--source",
        choices=["synthetic", "corpus"],
        default="synthetic",
        help="synthetic: bench/_synth.py's dir (a small vocabulary: most words are in most "
        "memories, the worst case for ranking); corpus: copies of the real corpus's memories",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(
            os.environ.get("MEMORYD_CORPUS", Path(__file__).resolve().parents[3] / "shared")
        )
        / ("" if os.environ.get("MEMORYD_CORPUS") else "corpus"),
        help="the corpus folder for --source corpus (default: $MEMORYD_CORPUS or shared/corpus)",
    )
    parser.add_argument("--skip-rss", action="store_true", help="skip the MCP server's RSS")
    args = parser.parse_args()
    tune_gc()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    for n in args.n:
        print(f"\n### {n:,} memories ({args.source})\n")
        print(bench(n, args))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"\npeak RSS of this bench: {peak} MB")


if __name__ == "__main__":
    main()
