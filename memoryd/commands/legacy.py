"""memoryd's state files from before the state store, imported into it once and then removed.

Per-dir state (`dirs/<key>.json` and the change log beside it), acknowledgements
(`dirs/<key>.acked`), restore pins (`dirs/<key>.restored`), the trash's day folders as seen
(`dirs/<key>.trash-days.json`), refused plans (`refused/*.json`), the refused links said
(`refused-links.json`), the journals of unfinished passes (`journal/*.jsonl`, for recovery to
finish), what the MCP server answered (`consults/mcp-<key>.jsonl`) and the transcripts' consult
evidence and offsets (`consults/transcripts.json`) are imported in one transaction; the caches
(`dirs/<key>.cache|.facts|.held`, `repos/*.tokens`, `transcript-cwds.json`) are dropped, to be
rebuilt from the memory dirs and transcripts. A file that cannot be read is left where it is (a
person's acknowledgement, pin or plan is never removed unread) and said; so is a record of
refused links or restore pins of another shape. Files go only after the commit; the import runs
again at the next start while any is left. A rerun adds no pin, trash day or refused link twice;
a crash between the commit and the removals can still add the MCP served log's rows again and
put back a dir's state as the old files had it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.model import safejson
from memoryd.paths import read_bounded, read_problem

if TYPE_CHECKING:
    import sqlite3

    from memoryd.storage.state import StateStore

# caches, rebuilt, not imported; and the readers file of the read-event signal, now gone
DROPPED = (".cache", ".facts", ".held", ".readers")
DROPPED_FILES = ("transcript-cwds.json",)  # the same, in the state dir itself
LINKS = "refused-links.json"  # in the state dir: {link: its target when said}
OLD_MAX_BYTES = 1 << 30  # what the old store read of one file at most
Say = Callable[[Path, str], None]  # StateStore.on_damaged


def pending(state_dir: Path) -> bool:
    """Whether any file of the old layout is in the state dir (one or two listdirs)."""
    with contextlib.suppress(OSError):
        if any(_kind(name) for name in os.listdir(state_dir / "dirs")):
            return True
    if any(os.path.lexists(state_dir / name) for name in (*DROPPED_FILES, LINKS)):
        return True
    with contextlib.suppress(OSError):
        names = os.listdir(state_dir / "consults")
        if "transcripts.json" in names or any(_served_key(name) for name in names):
            return True
    return any((state_dir / folder).is_dir() for folder in ("refused", "repos", "journal"))


# The old store's files of a dir: its key (state.dir_key), then what the file is. The other
# file under dirs/ (the writer lock) stays.
_OLD_NAME = re.compile(
    r"^[0-9a-f]{20}(\.json|\.[0-9]+\.log|\.acked|\.restored|\.trash-days\.json|\.cache|\.facts"
    r"|\.held|\.readers)$"
)


def _kind(name: str) -> str:
    found = _OLD_NAME.match(name)
    if found is None:
        return ""
    return ".log" if found[1].endswith(".log") else found[1]


def import_once(store: StateStore) -> None:
    """Import the old files into `store`'s state store, in one transaction, then remove them."""
    if not pending(store.state_dir):
        return
    from memoryd.discover.finder import REFUSED
    from memoryd.dream import acked, consults, refused, transcripts
    from memoryd.storage import fsops
    from memoryd.trash import days, journal, restored

    db = store.db()
    for schema in (acked.SCHEMA, refused.SCHEMA, journal.SCHEMA, consults.SCHEMA,
                   transcripts.SCHEMA, restored.SCHEMA, days.SCHEMA, REFUSED):  # fmt: skip
        db.ensure(schema)
    done: list[Path] = []
    say = store.on_damaged
    with db.durable() as tx:  # a person's records and a pass's intent
        done += _import_dirs(tx, store.root, say)
        done += _import_plans(tx, store.state_dir / "refused", say)
        done += _import_journals(tx, store.state_dir / "journal", say)
        done += _import_served(tx, store.state_dir / "consults", say)
        done += _import_transcripts(tx, store.state_dir / "consults" / "transcripts.json", say)
        done += _import_links(tx, store.state_dir / LINKS, say)
    for path in [*done, *(store.state_dir / name for name in DROPPED_FILES)]:
        fsops.crash_point("legacy.removing")
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in ("refused", "repos", "journal"):
        with contextlib.suppress(OSError):
            os.rmdir(store.state_dir / folder)  # left when a file in it was not imported


def _read(path: Path, say: Say) -> Any:
    try:
        return safejson.loads(read_bounded(path, OLD_MAX_BYTES, follow=False))
    except OSError as error:
        say(path, read_problem(error))
    except ValueError as error:
        say(path, f"not memoryd's JSON ({error})")
    return None


def _import_dirs(conn: sqlite3.Connection, root: Path, say: Say) -> list[Path]:
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
        elif kind == ".restored":
            rows = _read(path, say)
            if _import_pins(conn, key, rows):
                done.append(path)
            elif rows is not None:
                say(path, "not restore pins memoryd wrote; left where it is for a person to see")
        elif kind == ".trash-days.json":
            _import_days(conn, key, _read(path, say))
            done.append(path)  # what an unreadable one held is seen again, and ages again
    repos = root.parent / "repos"
    with contextlib.suppress(OSError):
        done += [repos / n for n in os.listdir(repos) if n.endswith(".tokens")]
    return done


def _import_state(conn: sqlite3.Connection, key: str, data: dict[str, Any], root: Path) -> None:
    from memoryd.storage.state import DirState, put_whole

    state = DirState(path=data["path"])
    seen, own = dict(_mapping(data.get("seen"))), dict(_mapping(data.get("own")))
    changes = [{"set": data}]
    with contextlib.suppress(OSError):
        log = read_bounded(root / f"{key}.{data.get('_log', 0)}.log", OLD_MAX_BYTES, follow=False)
        for line in log.splitlines():
            with contextlib.suppress(ValueError):
                changes.append(safejson.loads(line))  # (a torn last line: never finished)
    for change in changes:
        if not isinstance(change, dict):
            continue
        seen.update(_mapping(change.get("seen")))
        own.update(_mapping(change.get("own")))
        for name, value in _mapping(change.get("set")).items():
            # `reads` (the read-event signal) is not carried over.
            if name in state.__slots__ and name not in ("path", "seen", "own"):
                setattr(state, name, value)
    state.seen = {
        n: v
        for n, v in seen.items()
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
    }
    state.own = {n: v for n, v in own.items() if isinstance(v, str)}
    put_whole(conn, key, state)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _rows(rows: list[Any], fields: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The rows that hold a string for each of `fields`, as those strings."""
    ok = [r for r in rows if isinstance(r, dict) and all(isinstance(r.get(f), str) for f in fields)]
    return [tuple(r[f] for f in fields) for r in ok]


def _import_acks(conn: sqlite3.Connection, key: str, rows: list[Any]) -> None:
    good = _rows(rows, ("file", "sha256", "refs", "time"))
    conn.executemany(
        "INSERT OR REPLACE INTO acked VALUES (?, ?, ?, ?, ?, ?)",
        [(key, seq, *row) for seq, row in enumerate(good, 1)],
    )


def _import_pins(conn: sqlite3.Connection, key: str, rows: Any) -> bool:
    """Old pins (a JSON list, oldest first), each one older than any pin in the table: a pin
    for a name or trash id the table has is not added (the table's is the same or newer)."""
    good = _rows(rows, ("file", "sha256", "time", "id")) if isinstance(rows, list) else None
    if good is None or len(good) != len(rows):
        return False
    (low,) = conn.execute("SELECT coalesce(min(seq), 1) FROM pins WHERE dir = ?", (key,))
    conn.executemany(
        "INSERT OR IGNORE INTO pins VALUES (?, ?, ?, ?, ?, ?)",
        [(key, low[0] - n, *row) for n, row in enumerate(good[::-1], 1)],
    )
    return True


def _import_days(conn: sqlite3.Connection, key: str, data: Any) -> None:
    """An old record: {"days": {day: {"identity": [int, ...], "since": n}}, "reported":
    {day: problem}}; a day of another shape is left out (memoryd sees it as new)."""
    said = _mapping(_mapping(data).get("reported"))
    rows = []
    for day, value in _mapping(_mapping(data).get("days")).items():
        identity, since = _mapping(value).get("identity", ()), _mapping(value).get("since", 0)
        numbers = isinstance(identity, list) and all(type(n) is int for n in identity)
        if numbers and type(since) in (int, float) and 0 < since < math.inf:
            problem = str(said.get(day) or "")
            rows.append((key, str(day), " ".join(map(str, identity)), since, problem))
    conn.executemany("INSERT OR IGNORE INTO trash_day VALUES (?, ?, ?, ?, ?)", rows)


def _import_links(conn: sqlite3.Connection, path: Path, say: Say) -> list[Path]:
    """A link the table has is not replaced: its row is the same or newer."""
    data = _read(path, say) if os.path.lexists(path) else None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        if data is not None:
            say(path, "not a record of refused links memoryd wrote; left where it is")
        return []
    conn.executemany("INSERT OR IGNORE INTO refused_link VALUES (?, ?)", data.items())
    return [path]


def _import_plans(conn: sqlite3.Connection, folder: Path, say: Say) -> list[Path]:
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


def _import_journals(conn: sqlite3.Connection, folder: Path, say: Say) -> list[Path]:
    """Old journals: an intent line (pass id, dir, moves), then a line per move made and a
    commit line; a committed one is dropped. One whose intent does not parse is left."""
    done: list[Path] = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            path = folder / name
            if not name.endswith(".jsonl"):
                continue
            try:
                lines = read_bounded(path, OLD_MAX_BYTES, follow=False).split(b"\n")
                intent = safejson.loads(lines[0])
                pass_id, memory_dir, moves = intent["intent"], intent["dir"], intent["moves"]
            except OSError as error:
                say(path, read_problem(error))
                continue
            except (ValueError, KeyError, TypeError, IndexError):
                say(path, "not a journal memoryd wrote; left for a person to look at")
                continue
            rows = []
            for raw in lines[1:]:
                with contextlib.suppress(ValueError):
                    rows.append(safejson.loads(raw))  # (a torn last line: skipped)
            marks = [r for r in rows if isinstance(r, dict)]
            if not any("commit" in r for r in marks):
                conn.execute(
                    "INSERT OR REPLACE INTO journal_pass VALUES (?, ?, ?)",
                    (str(pass_id), str(memory_dir), json.dumps(moves, ensure_ascii=True)),
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO journal_done VALUES (?, ?)",
                    [(str(pass_id), str(r["done"])) for r in marks if "done" in r],
                )
            done.append(path)
    return done


def _served_key(name: str) -> str:
    """The dir key of an old MCP served log's name (`mcp-<key>.jsonl`), or ""."""
    found = re.fullmatch(r"mcp-([0-9a-f]{20})\.jsonl", name)
    return found[1] if found else ""


def _import_served(conn: sqlite3.Connection, folder: Path, say: Say) -> list[Path]:
    """Old served logs: a JSON row a line (`ts`, `tool`, `names`, `query`); a torn or
    foreign line is skipped, as the consult guard skipped it."""
    done: list[Path] = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            key = _served_key(name)
            if not key:
                continue
            try:
                data = read_bounded(folder / name, OLD_MAX_BYTES, follow=False)
            except OSError as error:
                say(folder / name, read_problem(error))
                continue
            rows = []
            for raw in data.split(b"\n"):
                with contextlib.suppress(ValueError):
                    row = safejson.loads(raw)
                    if isinstance(row, dict) and isinstance(row.get("ts"), str):
                        names = row.get("names") if isinstance(row.get("names"), list) else []
                        query = row.get("query") if isinstance(row.get("query"), str) else ""
                        tool = str(row.get("tool") or "")
                        rows.append((key, row["ts"], tool, json.dumps(names), query))
            sql = "INSERT INTO consult_served(dir, ts, tool, names, query) VALUES (?, ?, ?, ?, ?)"
            conn.executemany(sql, rows)
            done.append(folder / name)
    return done


def _import_transcripts(conn: sqlite3.Connection, path: Path, say: Say) -> list[Path]:
    """The old scan state: {"files": {name: [device, inode, size, offset, skipping]},
    "dirs": {dir: {file: [when, session, tool, transcript]}}}; an entry of another shape is
    dropped (its transcript is read again from 0)."""
    from memoryd.dream.consult import Seen

    if not os.path.lexists(path):
        return []
    data = _mapping(_read(path, say))
    files, dirs = _mapping(data.get("files")), _mapping(data.get("dirs"))
    conn.executemany(
        "INSERT OR REPLACE INTO consult_transcript VALUES (?, ?, ?, ?, ?, ?)",
        [
            (str(name), *entry)
            for name, entry in files.items()
            if isinstance(entry, list) and len(entry) == 5
            and all(type(v) is int for v in entry)
        ],
    )  # fmt: skip
    rows = []
    for folder, seen in dirs.items():
        for file, value in seen.items() if isinstance(seen, dict) else ():
            found = Seen.of(value)
            if found is not None:
                rows.append((str(folder), str(file), *found.row()))
    conn.executemany("INSERT OR REPLACE INTO consult_seen VALUES (?, ?, ?, ?, ?, ?)", rows)
    return [path]  # a scan state that did not parse: the transcripts are read again
