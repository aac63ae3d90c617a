"""A memory dir's file as its search index holds it: read, parsed, its references made rows.

`record` reads one file through the dir's fd; a first build of many files reads them in
worker processes (`records_in_workers`) with the same result. Nothing here touches SQLite.
"""

import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.paths import file_kind
from memoryd.storage import fsops

if TYPE_CHECKING:
    from memoryd.dream.refs import Refs
    from memoryd.model.memfile import Memory

# A file changed this close before it was read may change again within the same mtime tick
# (file times are taken from a coarse clock): it is read again next time (mtime_ns -1).
RACY_NS = 2_000_000_000
# Up to PARALLEL_WORKERS worker processes read a first build (see store.PARALLEL_MIN),
# READ_CHUNK files a task.
PARALLEL_WORKERS = 2
READ_CHUNK = 500

RefRow = tuple[str, str, str, str]  # kind, ref (as written), norm, base


def worker_count() -> int:
    """The worker processes memoryd's own entry points give a first build: one a CPU but
    this one's, at most PARALLEL_WORKERS (0 on one CPU)."""
    return max(0, min(PARALLEL_WORKERS, (os.cpu_count() or 1) - 1))


class DirReplaced(OSError):
    """A worker found another dir at the memory dir's path than the one the build listed."""


def _flags(memory: "Memory") -> list[str]:
    """Flags a memory's own frontmatter sets: `acknowledged`, `supersedes …`."""
    out = []
    fm = memory.frontmatter
    ack = fm.get("acknowledged")
    if ack not in (None, "", "false", "False", "no", "0", [], {}):
        out.append("acknowledged")
    sup = fm.get("supersedes")
    names = [sup] if isinstance(sup, str) else sup if isinstance(sup, list) else []
    names = [" ".join(str(n).split()) for n in names if isinstance(n, str) and n.strip()]
    if names:
        out.append("supersedes " + ", ".join(names))
    return out


def path_refs_of(refs: "Refs") -> list[RefRow]:
    """(kind, ref, norm, base) rows of a body's references (the dream pass's extraction)."""
    return [row for row in map(path_row, refs.paths) if row is not None] + [
        symbol_row(symbol) for symbol in refs.symbols
    ]


def symbol_row(symbol: str) -> RefRow:
    return ("symbol", symbol, symbol, symbol.lower())


def path_row(ref: str) -> RefRow | None:
    """A path reference's row; None for one no repo path can be."""
    from memoryd.dream.refs import _outside_repo
    from memoryd.dream.repo import normalize_rel

    if ref.startswith("/"):
        norm = os.path.normpath(ref)
    elif _outside_repo(ref):
        return None  # ~, $HOME, URLs, globs: nothing a repo path can be
    else:
        norm = normalize_rel(ref) or ""
        if not norm:
            return None
    norm = norm.rstrip("/")
    return ("path", ref, norm, norm.rpartition("/")[2])


def read_record(
    dir_fd: int, name: str, st: os.stat_result | None, limits: tuple[int, int], now_ns: int
) -> dict[str, Any] | None:
    """One file of the dir as the index holds it (its `files` columns, and a memory's body
    and references); None when it vanished. `st`: its lstat, when the listing has it."""
    if st is None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
    record: dict[str, Any] = {"kind": "problem"}
    fst = st
    if stat.S_ISLNK(st.st_mode):
        record["problem"] = "it is a symlink; memoryd never follows links in a memory dir"
        record["hint"] = "replace it with the file itself"
    elif not stat.S_ISREG(st.st_mode):
        record["problem"] = f"it is {file_kind(st.st_mode)}, not a regular file"
        record["hint"] = "memoryd never opens these; remove it from the memory dir"
    else:
        try:
            data, fst = fsops.read_regular(dir_fd, name, limits[0], stable=True)
        except FileNotFoundError:
            return None
        except fsops.ChangedWhileReading as moving:
            fst = moving.st
            record["problem"] = "it changed while it was being read"
            record["hint"] = "it is read again next time"
            record["mtime_ns"] = -1
        except ValueError:
            record["problem"] = f"it is over the {limits[0]}-byte limit"
            record["hint"] = "split it into smaller memories or raise parse.max_file_bytes"
        except OSError as error:
            record["problem"] = f"it cannot be read ({error.strerror or error})"
            record["hint"] = "check the file's permissions"
        else:
            record = _parsed(name, data, fst, limits)
    mtime_ns = record.pop("mtime_ns", fst.st_mtime_ns)
    if mtime_ns >= now_ns - RACY_NS:
        mtime_ns = -1  # may change again within the same tick: read it again next time
    return {
        "file": name,
        "ino": fst.st_ino,
        "size": fst.st_size,
        "mtime_ns": mtime_ns,
        "date": fst.st_mtime_ns / 1e9,
        **record,
    }


def _parsed(name: str, data: bytes, fst: os.stat_result, limits: tuple[int, int]) -> dict[str, Any]:
    from memoryd.model.memfile import Memory, NotMemory, parse_date, parse_memory

    parsed = parse_memory(name, data, max_file_bytes=limits[0], max_frontmatter_bytes=limits[1])
    if isinstance(parsed, NotMemory):
        return {
            "kind": "note",
            "problem": "it has no frontmatter, so it is not a memory",
            "hint": "add name/description/type frontmatter to make it one",
        }
    if not isinstance(parsed, Memory):
        return {"kind": "problem", "problem": parsed.message, "hint": parsed.hint}
    from memoryd.dream.refs import extract_refs
    from memoryd.model.secrets import find, mask, summary

    # The index holds every text field masked: its snippets are shown, and the file is kept
    # in the state dir. A secret is a flag of the memory's result, by line and kind.
    found = find(data.decode("utf-8", "replace"))
    kept = mask if found else str
    body = kept(parsed.body)
    flags = _flags(parsed) + ([f"holds a secret ({summary(found)})"] if found else [])
    refs = extract_refs(body)
    return {
        "kind": "memory",
        "name": kept(parsed.name),
        "key": kept(parsed.display_name).lower(),
        "stem": name.removesuffix(".md").lower(),
        "description": kept(parsed.description),
        "type": parsed.type,
        "date": max(fst.st_mtime_ns / 1e9, parse_date(parsed.modified)),
        "flags": json.dumps(flags),
        "body": body,
        "refs": refs,
    }


def _read_files(
    memory_dir: str,
    listed: tuple[int, int],
    names: Sequence[str],
    limits: tuple[int, int],
    now_ns: int,
) -> list[tuple[str, dict[str, Any] | None]]:
    """A worker process's part of a first build: these files' records, in order. It opens
    the dir by path, so it reads only when that is still the dir listed (`listed`: its
    st_dev and st_ino); else DirReplaced."""
    with fsops.open_dir(Path(memory_dir)) as dir_fd:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != listed:
            raise DirReplaced(
                f"{memory_dir}: another dir is at this path than the one listed for the first "
                "build (replaced since); the building process reads its files instead"
            )
        return [(name, read_record(dir_fd, name, None, limits, now_ns)) for name in names]


def records_in_workers(
    memory_dir: Path,
    dir_fd: int,
    names: Sequence[str],
    limits: tuple[int, int],
    now_ns: int,
    workers: int,
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The records of `names` in the dir `dir_fd` (open on `memory_dir`), in order, read
    and parsed by `workers` processes (started fresh, never forked: the daemon has threads),
    READ_CHUNK files a task and at most two tasks a worker ahead of the caller (the records
    not yet put in are what is held). A pool that breaks, or a worker that finds another dir
    at the path (DirReplaced), leaves the rest to be read here, through `dir_fd`."""
    import multiprocessing
    import pickle
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    chunks = [names[i : i + READ_CHUNK] for i in range(0, len(names), READ_CHUNK)]
    st = os.fstat(dir_fd)
    listed = (st.st_dev, st.st_ino)
    done = 0  # records given
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        ahead: deque[Future[list[tuple[str, dict[str, Any] | None]]]] = deque()
        for chunk in chunks:
            ahead.append(pool.submit(_read_files, str(memory_dir), listed, chunk, limits, now_ns))
            if len(ahead) >= 2 * workers:
                for record in ahead.popleft().result():
                    yield record
                    done += 1
        while ahead:
            for record in ahead.popleft().result():
                yield record
                done += 1
    except (OSError, RuntimeError, EOFError, pickle.PickleError):  # BrokenProcessPool too
        for name in names[done:]:
            yield name, read_record(dir_fd, name, None, limits, now_ns)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def stem_words(filename: str) -> str:
    return filename.removesuffix(".md").replace("_", " ").replace("-", " ")
