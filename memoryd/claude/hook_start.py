"""The session-start hook: one line for the model when something is wrong for this project
(memoryd.claude.hooks): auto memory turned off, pointer lines of MEMORY.md the agent does not
see (memoryd.model.agentview), a mass change alarm within the last day, or a damaged state
store. Claude Code read
MEMORY.md already, so the line says what is missing and what puts it right. It also drops the
pre-tool-use hook's lists of what old sessions were told.
"""

import math
import os
import time
from pathlib import Path
from typing import Any

ALARM_SHOWN = 86400.0  # as `memoryd status`
SEEN_KEPT = 7 * 86400.0  # a session's list of recalled memories is dropped after a week
INDEX_MAX_BYTES = 8 * 1024 * 1024


def _switch_line(data: dict[str, Any], auto: tuple[str, str]) -> str:
    from memoryd.config import ClaudeEnv
    from memoryd.discover.claude_env import (
        auto_memory_switch,
        project_settings,
        user_settings,
    )

    cwd = Path(str(data.get("cwd")))
    claude_home = Path(os.path.dirname(os.path.dirname(os.path.dirname(auto[0]))))
    warnings: list[str] = []
    layers = [*project_settings(cwd, Path(auto[1]), warnings), user_settings(claude_home, warnings)]
    switch = auto_memory_switch(ClaudeEnv.from_environ(), layers)
    if switch.on:
        return ""
    return (
        f"memoryd: Claude Code's auto memory is off ({switch.source}): this project's "
        "MEMORY.md is not loaded; memories are still found with `memoryd search`."
    )


def _hidden_line(folder: str) -> str:
    from memoryd.model.agentview import ViewKind, view_of_bytes
    from memoryd.paths import read_bounded

    path = os.path.join(folder, "MEMORY.md")
    try:  # never a FIFO planted as MEMORY.md: the session would wait on it
        data = read_bounded(Path(path), INDEX_MAX_BYTES, prefix=True)
    except OSError:
        return ""
    view = view_of_bytes(data, ViewKind.AUTO)
    lines = data.decode("utf-8", "replace").split("\n")
    hidden = [
        view.hidden(number)
        for number, line in enumerate(lines)
        if line.lstrip().startswith(("- [", "* [")) and "](" in line
    ]
    why = sorted({str(h) for h in hidden if h is not None})
    count = sum(h is not None for h in hidden)
    if not count:
        return ""
    return (
        f"memoryd: {count} pointer line(s) of {path} are not loaded ({', '.join(why)}); "
        f"`memoryd dirs {folder}` shows them and what to do, `memoryd search` finds them now."
    )


def _alarm_line(dirs: list[str], state: str) -> str:
    """The last day's alarm for one of `dirs`, read-only from state.sqlite (never making the
    store, nor waiting on a FIFO); or that the file is damaged, never passed over in silence
    (statedb.StateDamaged's advice is `memoryd status`'s to give: a hook's line is short)."""
    import sqlite3
    import stat
    import urllib.parse

    path = os.path.join(state, "state.sqlite")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return ""
        uri = f"file:{urllib.parse.quote(path)}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=1.0)
        try:
            sql = "SELECT dir, t, deleted, rewritten FROM versions_alarms ORDER BY seq"
            alarms = conn.execute(sql).fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as error:  # not busy, not a store without alarms yet
        from memoryd.storage.statedb import is_damage  # only when something failed

        if is_damage(error):
            return (
                f"memoryd: its state store {path} is damaged (kept versions may be in it); "
                "`memoryd status` says what to do. The memory files are not affected."
            )
        return ""
    except (OSError, sqlite3.Error):
        return ""
    now = time.time()
    wanted = set(dirs) | {os.path.realpath(d) for d in dirs}
    for folder, when, deleted, rewritten in alarms:
        if not math.isfinite(when) or now - when > ALARM_SHOWN or folder not in wanted:
            continue
        return (
            f"memoryd: ALARM: {deleted} memory files deleted and {rewritten} rewritten in "
            f"{folder} by another process today; `memoryd trash list` and `memoryd history "
            "FILE` bring them back."
        )
    return ""


def _forget_old_sessions(state: str) -> None:
    from memoryd.claude.hook_recall import SEEN_FOLDER

    folder = os.path.join(state, SEEN_FOLDER)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    cutoff = time.time() - SEEN_KEPT
    for entry in entries:
        try:
            if entry.name.endswith(".seen") and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            continue


def refresh_search(data: dict[str, Any]) -> None:
    """Bring the search index of each of the project's memory dirs up to date by stat."""
    from memoryd.claude.hook_recall import memory_dirs
    from memoryd.claude.hookio import abs_path, log_failure
    from memoryd.paths import app_paths
    from memoryd.recall.store import update_dir

    cwd = abs_path(data, "cwd")
    if cwd is None:
        return
    state = app_paths().state_dir
    for folder, _ in memory_dirs(os.path.join(cwd, "."), data):
        update_dir(
            state,
            Path(folder).resolve(),
            None,
            warn=lambda message: log_failure(REFRESH_NAME, RuntimeError(message)),
            workers=0,  # `python -m memoryd` has no __main__ guard for spawned workers
        )


REFRESH_NAME = "refresh-search"


def start_context(data: dict[str, Any], state: str) -> str:
    """The session-start hook's line ("" when all is well)."""
    from memoryd.claude.hook_recall import auto_memory_dir

    _forget_old_sessions(state)
    auto = auto_memory_dir(data)
    if auto is None:
        return ""
    return (
        _switch_line(data, auto)
        or _hidden_line(auto[0])
        or _alarm_line([auto[0], os.path.join(auto[1], ".claude", "memory")], state)
    )
