"""A memory another program is still writing (`tool > a.md`: opened, truncated, written, more
written a moment later) is never swapped out or moved away under it: `history --restore`
and `forget` refuse it, naming the program, and every byte the program writes lands in the
memory file."""

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env
from tests.conftest import write_lesson as _mem
from tests.helpers import wait_for

HEAD = b"---\nname: a\ndescription: the tool's lesson\ntype: project\n---\n\nfirst part\n"
TAIL = b"the part written a moment later\n"


@pytest.fixture
def folder(env: Env, cli: Any) -> Path:
    """A memory dir whose index memoryd keeps, with a.md in two versions memoryd saw."""
    path = env.home / "mem"
    path.mkdir()
    path = path.resolve()
    _mem(path, "a.md", "the first text")
    _mem(path, "b.md", "another lesson")
    assert cli("index", path).code == 0
    _mem(path, "a.md", "the second text")
    assert cli("index", path).code == 0
    return path


class Tool:
    """`tool > a.md` in another process: the shell opens and truncates a.md, the tool writes
    HEAD, then TAIL once `finish` lets it."""

    def __init__(self, target: Path) -> None:
        script = 'exec > "$1"; printf "%s" "$2"; read go; printf "%s" "$3"'
        self.target = target
        self.proc = subprocess.Popen(
            ["sh", "-c", script, "sh", str(target), HEAD.decode(), TAIL.decode()],
            stdin=subprocess.PIPE,
        )
        wait_for(lambda: target.read_bytes() == HEAD, what="the tool's first part")

    def finish(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def tool(folder: Path) -> Iterator[Tool]:
    running = Tool(folder / "a.md")
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


def test_a_restore_never_swaps_out_a_memory_a_program_is_still_writing(
    folder: Path, tool: Tool, cli: Any
) -> None:
    """`history a.md --restore 1` while the tool writes: the old code swapped a.md out and
    unlinked it, and the tool's later bytes landed nowhere. Refused, naming the program;
    once the tool is done its whole output is a.md, and the restore then works and keeps it
    in the history."""
    refused = cli("history", folder / "a.md", "--restore", "1")
    assert refused.code != 0
    assert str(folder / "a.md") in refused.err and f"PID {tool.proc.pid} (sh)" in refused.err
    tool.finish()
    assert (folder / "a.md").read_bytes() == HEAD + TAIL
    done = cli("history", folder / "a.md", "--restore", "1")
    assert done.code == 0, done.err
    assert b"the first text" in (folder / "a.md").read_bytes()
    listed = cli("history", folder / "a.md")
    assert hashlib.sha256(HEAD + TAIL).hexdigest()[:12] in listed.out, listed.out


def test_forget_never_moves_a_memory_a_program_is_still_writing(
    env: Env, folder: Path, tool: Tool, cli: Any
) -> None:
    """`forget a.md` while the tool writes: the old code moved it to the trash, the tool's
    later bytes landed in the trashed file, and `trash restore` refused it (not the bytes
    forgotten). Not forgotten, the program named; nothing in the trash; the tool's output
    whole in a.md; forgotten and restored whole once the tool is done."""
    refused = cli("forget", folder / "a.md", "--yes")
    assert refused.code != 0
    assert f"open for writing by PID {tool.proc.pid} (sh)" in refused.out, refused.out
    assert (folder / "a.md").exists()
    assert json.loads(cli("trash", "list", folder, "--json").out)["trash"] == []
    tool.finish()
    assert (folder / "a.md").read_bytes() == HEAD + TAIL
    done = cli("forget", folder / "a.md", "--yes")
    assert done.code == 0, done.out + done.err
    back = cli("trash", "restore", "a.md", folder)
    assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == HEAD + TAIL
