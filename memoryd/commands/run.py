"""`memoryd run`: the daemon in the foreground (memoryd.daemon)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser(
        "run",
        description="Watch every memory dir, keep indexes in step as files "
        "change, dream when memories pile up, write a heartbeat. Runs in the "
        "foreground; one instance per user. SIGTERM/SIGINT stop it cleanly, "
        "SIGHUP reloads the configuration.",
    )


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.daemon import loop

    return loop.run(args.config, rt.paths, rt.config, rt.versions)
