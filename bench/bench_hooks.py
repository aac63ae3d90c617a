"""Whole-process cost of the Claude Code hooks (`memoryd hook EVENT`) at N memories, each beside
the interpreter floor (`python -c pass`) in the same rounds; the target is 4× that floor.

    python bench/bench_hooks.py              # 10,000 memories, about a minute on 2 cores
    python bench/bench_hooks.py --n 1000 --runs 5

The hooks run as Claude Code runs them: a process given the hook's JSON on stdin, in a repo
whose auto-memory dir holds N synthetic memories (bench/_synth.py) and one memory citing the
file the agent opens; its search index is built first (as the daemon or any search leaves it).
Children run without PYTHONDONTWRITEBYTECODE, after memoryd is precompiled, as an installed
memoryd runs. Everything happens in a fresh temporary folder with its own HOME and XDG dirs.
"""

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _synth
from _stats import markdown_table, percentile

import memoryd
from memoryd.discover.slugs import slugify

TARGET = 4.0


def home_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run(argv: Sequence[str], env: dict[str, str], stdin: str = "") -> float:
    started = time.perf_counter()
    subprocess.run(
        argv, input=stdin.encode(), env=env, stdout=subprocess.DEVNULL, check=False, timeout=300
    )
    return time.perf_counter() - started


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def payload(home: Path, repo: Path, event: str, session: str, **tool: object) -> str:
    slug = slugify(str(repo))
    data = {
        "session_id": session,
        "transcript_path": str(home / ".claude" / "projects" / slug / f"{session}.jsonl"),
        "cwd": str(repo),
        "hook_event_name": event,
        **tool,
    }
    return json.dumps(data)


def _wait_background(limit: float = 120.0) -> None:
    """Until no `memoryd hook` process a hook started in the background runs (Linux: /proc;
    elsewhere nothing is waited for)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        running = False
        for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"hook" in argv and (b"index-written" in argv or b"refresh-search" in argv):
                running = True
                break
        if not running:
            return
        time.sleep(0.02)


def bench(n: int, runs: int, seed: int) -> str:
    compileall.compile_dir(Path(memoryd.__file__).parent, quiet=1)
    script = Path(sys.executable).parent / "memoryd"
    mem = [str(script)] if script.exists() else [sys.executable, "-m", "memoryd"]
    with tempfile.TemporaryDirectory(prefix="memoryd-hooks-bench-") as tmp_name:
        tmp = Path(tmp_name)
        home, repo = tmp / "home", tmp / "repo"
        (repo / "src").mkdir(parents=True)
        (repo / ".git").mkdir()
        (repo / "src" / "app.py").write_text("x = 1\n")
        (repo / "README.md").write_text("readme\n")
        folder = home / ".claude" / "projects" / slugify(str(repo)) / "memory"
        _synth.make_memory_dir(folder, n, seed=seed)
        (folder / "app_rule.md").write_text(
            "---\nname: App rule\ndescription: keep x at 1\ntype: project\n---\n\n"
            "Never change src/app.py by hand.\n"
        )
        env = home_env(home)
        for _ in range(2):  # settle the index (the first pass demotes to the archive)
            run([*mem, "index", str(folder)], env)
        run([*mem, "recall", "--path", str(repo / "src" / "app.py")], env)  # the search index
        memory = min(p for p in folder.glob("*.md") if not p.name.startswith(("MEMORY", "README")))

        def read(file: str) -> dict[str, object]:
            return {"tool_name": "Read", "tool_input": {"file_path": file}}

        steps = {
            "floor": ([sys.executable, "-c", "pass"], None),
            "pre, a cited file": (["pre-tool-use"], read("src/app.py")),
            "pre, a file none cites": (["pre-tool-use"], read("README.md")),
            "post, a code file": (
                ["post-tool-use"],
                {"tool_name": "Write", "tool_input": {"file_path": str(repo / "src" / "app.py")}},
            ),
            "post, a memory written (starts its pass)": (
                ["post-tool-use"],
                {"tool_name": "Edit", "tool_input": {"file_path": str(memory)}},
            ),
            "session start": (["session-start"], {}),
            # What the post-write hook starts and does not wait for: the dir's index pass.
            "(the pass it starts: `hook index-written`)": (
                ["index-written"],
                {"tool_name": "Edit", "tool_input": {"file_path": str(memory)}},
            ),
        }
        samples: dict[str, list[float]] = {k: [] for k in steps}
        for i in range(runs + 1):
            order = list(steps) if i % 2 == 0 else list(steps)[::-1]
            for key in order:
                argv, tool = steps[key]
                if tool is None:
                    took = run(argv, env)
                else:
                    if "memory written" in key or "index-written" in argv:
                        with open(memory, "a", encoding="utf-8") as f:
                            f.write(f"edit {i}\n")
                    event = {"pre-tool-use": "PreToolUse", "post-tool-use": "PostToolUse"}
                    stdin = payload(
                        home, repo, event.get(argv[0], "SessionStart"), f"s{i}-{key[:3]}", **tool
                    )
                    took = run([*mem, "hook", *argv], env, stdin)
                _wait_background()  # one step's background pass is not another's cost
                if i:  # the first round warms the caches
                    samples[key].append(took)
    floor = percentile(samples.pop("floor"), 50)
    rows = [["`python -c pass`", ms(floor), "1.00×", ""]]
    for key, values in samples.items():
        mid = percentile(values, 50)
        met = "" if key.startswith("(") else "yes" if mid <= TARGET * floor else "NO"
        rows.append([f"`memoryd hook` {key}", ms(mid), f"{mid / floor:.2f}×", met])
    header = [f"whole process, {n:,} memories [median of {runs}]", "time", "× floor", "≤ 4×?"]
    return markdown_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(bench(args.n, args.runs, args.seed))


if __name__ == "__main__":
    main()
