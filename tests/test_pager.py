"""Long output through `$PAGER` on a terminal, never when piped (memoryd.views.pager): memoryd run
with its stdout on a pseudo-terminal, the pager a script recording what it was given."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.views.pager import wanted
from tests.conftest import Env, write_memory

MEMORYD = Path(sys.executable).parent / "memoryd"


@pytest.fixture
def pager(tmp_path: Path) -> Path:
    script = tmp_path / "pager.sh"
    script.write_text('#!/bin/sh\n{ echo "LESS=$LESS"; cat; } > "$PAGED_TO"\n')
    script.chmod(0o755)
    return script


def on_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run memoryd with stdout on a pty; what reached the terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(MEMORYD), *args], stdout=slave, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=60) in (0, 1)
    return seen.decode("utf-8", "replace")


@pytest.fixture
def memories(env: Env) -> Path:
    folder = env.claude / "projects" / "-x" / "memory"
    write_memory(folder, "deploy.md", name="Deploy flow", description="staging deploys")
    return folder


def test_search_on_a_terminal_goes_through_the_pager_with_less_frx(
    env: Env, memories: Path, pager: Path, tmp_path: Path
) -> None:
    paged = tmp_path / "paged.txt"
    run_env = {**os.environ, "PAGER": str(pager), "PAGED_TO": str(paged)}
    run_env.pop("LESS", None)
    run_env.pop("MEMORYD_PAGER", None)
    seen = on_terminal(["search", "deploys", str(memories)], run_env)
    text = paged.read_text()
    assert text.startswith("LESS=FRX\n")
    assert "Deploy flow — staging deploys" in text
    assert "Deploy flow" not in seen


@pytest.mark.parametrize("args", [["dirs"], ["history", "deploy.md"]], ids=["dirs", "history"])
def test_short_output_is_not_paged(
    env: Env, memories: Path, pager: Path, tmp_path: Path, args: list[str]
) -> None:
    paged = tmp_path / "paged.txt"
    run_env = {**os.environ, "PAGER": str(pager), "PAGED_TO": str(paged)}
    on_terminal([*args, str(memories)], run_env)
    assert not paged.exists()


def test_which_commands_page() -> None:
    """`log -f` follows live: never paged; `history` only with --diff; `trash list` only."""
    from memoryd.cli import build_parser

    def pages(*argv: str) -> bool:
        return wanted(build_parser(argv[0]).parse_args(argv))

    assert pages("log") and not pages("log", "-f")
    assert pages("search", "x") and pages("dream", "--dry-run")
    assert pages("history", "f.md", "--diff") and not pages("history", "f.md")
    assert pages("trash", "list") and not pages("trash", "purge")
    assert not pages("dirs") and not pages("status")


@pytest.mark.parametrize("given", ["", "cat"])
def test_an_empty_pager_or_cat_is_none(
    env: Env, memories: Path, tmp_path: Path, given: str
) -> None:
    run_env = {**os.environ, "PAGER": given}
    run_env.pop("MEMORYD_PAGER", None)
    seen = on_terminal(["search", "deploys", str(memories)], run_env)
    assert "Deploy flow — staging deploys" in seen


def test_output_piped_is_never_paged(env: Env, memories: Path, pager: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    done = subprocess.run(
        [str(MEMORYD), "search", "deploys", str(memories)],
        env={**os.environ, "PAGER": str(pager), "PAGED_TO": str(paged)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Deploy flow — staging deploys" in done.stdout
    assert not paged.exists()


def test_search_hits_are_coloured_on_a_terminal_and_marked_when_piped(
    env: Env, memories: Path
) -> None:
    """On a terminal (paged or not) a hit is in the match colour, not `**…**`; NO_COLOR and
    a pipe keep the marks."""
    write_memory(memories, "cache.md", name="Cache", description="about the cache",
                 body="The session cache expires hourly.\n")  # fmt: skip
    run_env = {**os.environ, "PAGER": "cat"}
    run_env.pop("NO_COLOR", None)
    run_env.pop("MEMORYD_PAGER", None)
    run_env["TERM"] = "xterm"
    seen = on_terminal(["search", "expires", str(memories)], run_env)
    assert "\x1b[1;31mexpires\x1b[0m" in seen and "**expires**" not in seen
    plain = on_terminal(["search", "expires", str(memories)], {**run_env, "NO_COLOR": "1"})
    assert "**expires**" in plain and "\x1b[" not in plain
    piped = subprocess.run(
        [str(MEMORYD), "search", "expires", str(memories)], env=run_env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "**expires**" in piped.stdout and "\x1b[" not in piped.stdout
