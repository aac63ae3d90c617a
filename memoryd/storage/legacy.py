"""memoryd's state files from before the state store, imported into it once and then removed.

Per-dir state (`dirs/<key>.json` and the change log beside it), acknowledgements
(`dirs/<key>.acked`) and refused plans (`refused/*.json`) are imported in one transaction;
the caches (`dirs/<key>.cache|.facts|.held`, `repos/*.tokens`) are dropped, to be rebuilt from
the memory dirs. A file that cannot be read is left where it is (a person's acknowledgement
or plan is never removed unread) and said; the import is tried again at the next start.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import safejson
from memoryd.paths import read_bounded, read_problem

if TYPE_CHECKING:
    import sqlite3

    from memoryd.state import StateStore

DROPPED = (".cache", ".facts", ".held")  # caches: rebuilt, not imported
OLD_MAX_BYTES = 1 << 30  # what the old store read of one file at most


def pending(state_dir: Path) -> bool:
    """Whether any file of the old layout is in the state dir (one or two listdirs)."""
    with contextlib.suppress(OSError):
        if any(_kind(name) for name in os.listdir(state_dir / "dirs")):
            return True
    return (state_dir / "refused").is_dir() or (state_dir / "repos").is_dir()


# The old store's files of a dir: its key (state.dir_key), then what the file is. Other files
# under dirs/ (the writer lock, the readers file, restore pins, the trash days) stay.
_OLD_NAME = re.compile(r"^[0-9a-f]{20}(\.json|\.[0-9]+\.log|\.acked|\.cache|\.facts|\.held)$")


def _kind(name: str) -> str:
    found = _OLD_NAME.match(name)
    if found is None:
        return ""
    return ".log" if found[1].endswith(".log") else found[1]


def import_once(store: StateStore) -> None:
    """Import the old files into `store`'s state store, in one transaction, then remove them."""
    if not pending(store.state_dir):
        return
    from memoryd import acked
    from memoryd.dream import refused

    db = store.db()
    db.ensure(acked.SCHEMA)
    db.ensure(refused.SCHEMA)
    done: list[Path] = []
    say = store.on_damaged
    with db.transaction() as conn:
        done += _import_dirs(conn, store.root, say)
        done += _import_plans(conn, store.state_dir / "refused", say)
    for path in done:
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in ("refused", "repos"):
        with contextlib.suppress(OSError):
            os.rmdir(store.state_dir / folder)  # left when a file in it was not imported


def _read(path: Path, say: Callable[[Path, str], None]) -> Any:
    try:
        return safejson.loads(read_bounded(path, OLD_MAX_BYTES, follow=False))
    except OSError as error:
        say(path, read_problem(error))
    except ValueError as error:
        say(path, f"not memoryd's JSON ({error})")
    return None


def _import_dirs(
    conn: sqlite3.Connection, root: Path, say: Callable[[Path, str], None]
) -> list[Path]:
    done: list[Path] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return done
    for name in names:
        path = root / name
        kind = _kind(name)
        key = name.split(".", 1)[0]
        if kind in DROPPED or kind == ".log":
            done.append(path)  # a log is read with its base
        elif kind == ".json":
            data = _read(path, say)
            if isinstance(data, dict) and isinstance(data.get("path"), str):
                _import_state(conn, key, data, root)
            done.append(path)  # a cache of what the dirs say: an unreadable one is rebuilt
        elif kind == ".acked":
            rows = _read(path, say)
            if isinstance(rows, list):
                _import_acks(conn, key, rows)
                done.append(path)
    repos = root.parent / "repos"
    with contextlib.suppress(OSError):
        done += [repos / n for n in os.listdir(repos) if n.endswith(".tokens")]
    return done


def _import_state(conn: sqlite3.Connection, key: str, data: dict[str, Any], root: Path) -> None:
    from memoryd.state import DirState, put_whole

    state = DirState(path=data["path"])
    seen, own = dict(data.get("seen") or {}), dict(data.get("own") or {})
    changes = [{"set": data}]
    with contextlib.suppress(OSError):
        log = read_bounded(root / f"{key}.{data.get('_log', 0)}.log", OLD_MAX_BYTES, follow=False)
        for line in log.splitlines():
            with contextlib.suppress(ValueError):
                changes.append(safejson.loads(line))  # (a torn last line: never finished)
    for change in changes:
        if not isinstance(change, dict):
            continue
        seen.update(change.get("seen") or {})
        own.update(change.get("own") or {})
        for name, value in dict(change.get("set") or {}).items():
            # `reads` (the read-event signal) is not carried over.
            if name in state.__slots__ and name not in ("path", "seen", "own", "reads"):
                setattr(state, name, value)
    state.seen = {n: v for n, v in seen.items() if isinstance(v, list) and len(v) == 2}
    state.own = {n: v for n, v in own.items() if isinstance(v, str)}
    put_whole(conn, key, state)


def _import_acks(conn: sqlite3.Connection, key: str, rows: list[Any]) -> None:
    fields = ("file", "sha256", "refs", "time")
    good = [
        row
        for row in rows
        if isinstance(row, dict) and all(isinstance(row.get(f), str) for f in fields)
    ]
    conn.executemany(
        "INSERT OR REPLACE INTO acked VALUES (?, ?, ?, ?, ?, ?)",
        [(key, seq, *(row[f] for f in fields)) for seq, row in enumerate(good, 1)],
    )


def _import_plans(
    conn: sqlite3.Connection, folder: Path, say: Callable[[Path, str], None]
) -> list[Path]:
    from memoryd.dream.refused import StoredPlan, keep

    done: list[Path] = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            data = _read(folder / name, say) if name.endswith(".json") else None
            try:
                stored = StoredPlan(**data) if isinstance(data, dict) else None
            except TypeError:
                stored = None
            if stored is not None:
                keep(conn, stored)
                done.append(folder / name)
    return done
