"""Long output through a pager on a terminal, as git does: `$MEMORYD_PAGER`, else `$PAGER`, else
`less` with `LESS=FRX` when LESS is unset; an empty pager or `cat` means none, and one that
cannot start is no error. The command still sees a terminal (the pipe's `isatty()` is true),
so its colours are a terminal's.
"""

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import TextIO

# shlex, shutil and subprocess are imported when a pager is started: every command passes
# through `paged`, and most never page.

DEFAULT = "less"
DEFAULT_LESS = "FRX"


def wanted(args: argparse.Namespace) -> bool:
    """Whether this command's output is the long kind a pager is for."""
    command = getattr(args, "command", None)
    if command == "log":
        return not getattr(args, "follow", False)
    if command in ("search", "dream"):
        return True
    if command == "history":
        return getattr(args, "diff", None) is not None
    if command == "trash":
        return getattr(args, "trash_command", None) == "list"
    return False


class _Terminal(io.TextIOWrapper):
    """The pager's stdin, seen by the command as the terminal it stands for."""

    def isatty(self) -> bool:
        return True


def command(environ: "os._Environ[str] | dict[str, str]") -> list[str] | None:
    """The pager's argv, or None for none."""
    import shlex
    import shutil

    given = environ.get("MEMORYD_PAGER", environ.get("PAGER", DEFAULT))
    try:
        argv = shlex.split(given)
    except ValueError:
        return None
    if not argv or argv == ["cat"] or shutil.which(argv[0]) is None:
        return None
    return argv


@contextlib.contextmanager
def paged(args: argparse.Namespace, out: TextIO) -> Iterator[TextIO]:
    """`out`, or the stdin of a pager waited for when `out` is this process's terminal and the
    output is long."""
    isatty = getattr(out, "isatty", None)
    if out is not sys.stdout or not (isatty and isatty()) or not wanted(args):
        yield out
        return
    argv = command(os.environ)
    if argv is None:
        yield out
        return
    import subprocess

    env = dict(os.environ)
    env.setdefault("LESS", DEFAULT_LESS)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
    except OSError:
        yield out
        return
    assert proc.stdin is not None
    stream = _Terminal(proc.stdin, encoding="utf-8", errors="replace")
    try:
        yield stream
    finally:
        with contextlib.suppress(BrokenPipeError, OSError):
            stream.close()
        proc.wait()
