"""`memoryd demo`: the index, the dream pass and the log at work in a throw-away sandbox (its
own HOME, Claude home, state and log), so nothing of the user's is read or written."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.discover.slugs import slugify
from memoryd.model import safejson

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

DAY = 86400
CONFIG = """\
[index]
new_file_grace = "1s"
[watch]
debounce = "500ms"
max_wait = "5s"
"""

# The planted cases: near-duplicate deploy notes, a stale reference (legacy_cart) and a
# contradiction (the package manager rules share all but their first word and tail).
_DEPLOY = (
    "Deploy staging by running the release script with the canary flag enabled first, then "
    "promote production after the smoke checks pass"
)
_PNPM = "use pnpm for installing packages across the monorepo workspace lockfile registry cache"
MEMORIES = {
    "deploy_steps.md": ("Deploy steps", "how to ship to staging", "project", 60, f"{_DEPLOY}."),
    "deploy_howto.md": (
        "Deploy how-to",
        "shipping to staging",
        "project",
        20,
        f"{_DEPLOY} cleanly.",
    ),
    "legacy_cart.md": (
        "Legacy cart",
        "where the old cart lived",
        "project",
        45,
        "The cart totals were computed in `src/cart_legacy.py` and `src/totals_old.py`.",
    ),
    "checkout_flow.md": (
        "Checkout flow",
        "entry point of checkout",
        "project",
        30,
        "Checkout starts in `src/checkout.py` and calls `apply_discounts()`.",
    ),
    "pkg_manager_old.md": (
        "Package manager",
        "which installer to use",
        "feedback",
        50,
        f"Always {_PNPM} offline mirror alpha bravo charlie delta echo foxtrot golf hotel india",
    ),
    "pkg_manager_new.md": (
        "Package manager (new)",
        "which installer to use now",
        "feedback",
        5,
        f"Never {_PNPM} offline mirror juliet kilo lima mike november oscar papa quebec romeo",
    ),
    "user_role.md": (
        "Role",
        "who I am",
        "user",
        90,
        "Backend engineer; prefers small reviewed pull requests.",
    ),
}
FILLER = ["anchor", "barley", "canyon", "dolphin", "ember", "fjord", "glacier", "harbor"]


def _write(path: Path, name: str, description: str, type_: str, age_days: float, body: str) -> None:
    path.write_text(
        f"---\nname: {name}\ndescription: {description}\ntype: {type_}\n---\n\n{body}\n",
        encoding="utf-8",
    )
    stamp = time.time() - age_days * DAY
    os.utime(path, (stamp, stamp))


def build(root: Path) -> tuple[Path, Path, dict[str, str]]:
    """The sandbox: a small repo, its project memory dir with planted cases, an isolated env."""
    home = root / "home"
    repo = root / "code" / "shop"
    (repo / "src").mkdir(parents=True)
    for name in ("checkout.py", "cart.py"):
        (repo / "src" / name).write_text("def apply_discounts():\n    return 0\n")
    project = home / ".claude" / "projects" / slugify(str(repo))
    memory = project / "memory"
    memory.mkdir(parents=True)
    (project / "session.jsonl").write_text(json.dumps({"cwd": str(repo), "type": "user"}) + "\n")
    for filename, (name, description, type_, age, body) in MEMORIES.items():
        _write(memory / filename, name, description, type_, age, body)
    for i, word in enumerate(FILLER):
        _write(
            memory / f"topic_{word}.md",
            word.title(),
            f"notes on {word}",
            "reference",
            40 + i,
            f"{word} {word}s {word}-like",
        )
    lines = ["# shop Memory", "", "Hand-written notes stay exactly as they are.", ""]
    lines += [f"- [{MEMORIES[f][0]}]({f}) — {MEMORIES[f][1]}" for f in sorted(MEMORIES)]
    lines += [f"- [{w.title()}](topic_{w}.md) — notes on {w}" for w in FILLER]
    lines += ["", "## Links", "- [Team wiki](https://example.com/wiki)", ""]
    (memory / "MEMORY.md").write_text("\n".join(lines), encoding="utf-8")
    config = root / "config.toml"
    config.write_text(CONFIG)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    return memory, config, env


def _memoryd(env: dict[str, str], config: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr


def _wait_for(predicate: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def show(out: TextIO, keep: bool = False) -> int:
    root = Path(tempfile.mkdtemp(prefix="memoryd-demo-"))
    try:
        memory, config, env = build(root)
        say = out.write
        say(
            f"A sandbox at {root}: a repo `shop`, its Claude project memory with a duplicate, a "
            "stale reference, a contradiction and a hand-written index.\n\n"
        )
        say("== 1. The daemon starts and watches the memory dir\n")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "--config", str(config), "run"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            status_file = Path(env["XDG_STATE_HOME"]) / "memoryd" / "status.json"
            started = _wait_for(status_file.exists)
            say(_started_text(started, daemon.pid, memory, env))
            say("== 2. An agent saves a new memory (temp file, then rename, as Claude Code does)\n")
            before = (memory / "MEMORY.md").read_text()
            tmp = memory / "api_limits.md.tmp.4242.beef"
            tmp.write_text(
                "---\nname: API rate limits\ndescription: 100 requests a minute per "
                "key\ntype: reference\n---\n\nThe public API allows 100 requests a "
                "minute per key.\n"
            )
            tmp.rename(memory / "api_limits.md")
            _wait_for(lambda: "api_limits.md" in (memory / "MEMORY.md").read_text())
            after = (memory / "MEMORY.md").read_text()
            say(
                "".join(
                    difflib.unified_diff(
                        before.splitlines(True),
                        after.splitlines(True),
                        "MEMORY.md (before)",
                        "MEMORY.md (after)",
                    )
                )
            )
            say(
                "\n== 3. A dream pass: deterministic checks, moves into the trash, an "
                "explained report\n"
            )
            say(_memoryd(env, config, "dream", str(memory)))
            say("\n== 4. The audit log (`memoryd log`; `tail -F` works on the file too)\n")
            say(_memoryd({**env, "COLUMNS": str(LOG_WIDTH)}, config, "log"))
            say("\n== 5. Nothing is lost: the trash, and how to restore\n")
            say(_memoryd(env, config, "trash", "list", str(memory)))
            listed = safejson.loads(_memoryd(env, config, "trash", "list", "--json", str(memory)))
            if listed["trash"]:
                first = listed["trash"][0]
                say(f"$ memoryd trash restore {first['id']}\n")
                before = (memory / "MEMORY.md").read_text()
                say(_memoryd(env, config, "trash", "restore", first["id"], str(memory)))
                back = [
                    line[2:]
                    for line in difflib.ndiff(
                        before.splitlines(), (memory / "MEMORY.md").read_text().splitlines()
                    )
                    if line.startswith("+ ")
                ]
                say("Its pointer is back in MEMORY.md, where it sat:\n")
                say("".join(f"  +{line}\n" for line in back) or "  (no pointer line came back)\n")
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        say(f"\nThe daemon stopped cleanly (exit {daemon.returncode}).\n")
        if keep:
            say(_keep_text(root, config, env))
        return 0
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


LOG_WIDTH = 100  # a log row on one line of a 100-column terminal


def _started_text(started: bool, pid: int, memory: Path, env: dict[str, str]) -> str:
    log = Path(env["XDG_STATE_HOME"]) / "memoryd" / "log" / "audit.jsonl"
    if not started:
        return f"The daemon (pid {pid}) did not write its heartbeat in time; going on.\n"
    return (
        f"`memoryd run` (pid {pid}) watches 1 memory dir (paths from here on are in the "
        "sandbox; ~ is its HOME):\n"
        f"  {_short(memory, env)}\n"
        f"and writes its audit log to {_short(log, env)}\n"
    )


def _short(path: Path, env: dict[str, str]) -> str:
    from memoryd.model.humanize import short_path

    return short_path(path, env.get("HOME"))


def _keep_text(root: Path, config: Path, env: dict[str, str]) -> str:
    """Where the sandbox is, and how to run memoryd in it (its HOME, XDG dirs and config)."""
    names = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
    assigned = " \\\n      ".join(f"{name}={shlex.quote(env[name])}" for name in names)
    memoryd = shutil.which("memoryd") or f"{shlex.quote(sys.executable)} -m memoryd"
    run = f"{memoryd} --config {shlex.quote(str(config))}"
    return (
        f"The sandbox is kept at {root}.\n"
        "To run memoryd in it (never on your own files), start a shell with its environment:\n"
        f'  env {assigned} \\\n      "$SHELL"\n'
        "and in that shell give each command the sandbox's configuration:\n"
        f"  {run} status\n"
        f"  {run} dirs\n"
        f"  {run} log\n"
        f"Remove it with: rm -rf {shlex.quote(str(root))}\n"
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        description="Build a sandbox (its own HOME, Claude home, repo and "
        "memories with a duplicate, a stale reference, a contradiction and a "
        "hand-written index), run the daemon against it, write a memory as an "
        "agent would, and show the index change, a dream report, the log and a "
        "restore. Nothing outside the sandbox is touched.",
    )
    p.add_argument("--keep", action="store_true", help="keep the sandbox folder afterwards")


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    return show(out, keep=args.keep)
