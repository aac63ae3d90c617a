"""What `dirs` and `explain` read from disk for the memory-discipline findings: the secrets in
a dir's memories, their `[[name]]` links naming no memory, and the JSONL record stores of
known repos. Reads only, bounded (the pure rules: model.secrets and discipline.records)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.config import Config
from memoryd.discover.found import MemoryDir
from memoryd.model import secrets
from memoryd.model.agentview import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import open_regular, read_open, read_problem
from memoryd.storage import fsops

if TYPE_CHECKING:
    from memoryd.indexing.scan import DirScan
    from memoryd.model.links import Dangling
    from memoryd.runtime import Runtime


def secret_names(scan: DirScan | None) -> list[str]:
    """The files of a dir looked at for secrets: its memories, its notes (no frontmatter) and
    the index files, MEMORY.md first: what the agent loads every session."""
    names = [INDEX_NAME, ARCHIVE_NAME]
    if scan is not None:
        names += sorted(n for n, s in scan.files.items() if s.kind in ("memory", "note"))
    return names


def dir_secrets(
    rt: Runtime, md: MemoryDir, names: Iterable[str]
) -> dict[str, list[secrets.Finding]]:
    """file -> the secrets it holds (line and kind), for the named files of a dir."""
    out: dict[str, list[secrets.Finding]] = {}
    limit = rt.config.parse.max_file_bytes
    with fsops.open_dir(md.real_path) as dir_fd:
        for name in names:
            try:
                data, _ = fsops.read_regular(dir_fd, name, limit)
            except (OSError, ValueError):
                continue  # reported as unparseable elsewhere
            found = secrets.find_bytes(data)
            if found:
                out[name] = found
    return out


def dir_dangling_links(rt: Runtime, md: MemoryDir, scan: DirScan) -> list[Dangling]:
    """The `[[name]]` links of a dir's memories that no file of the dir answers to."""
    from memoryd.model import links

    found: dict[str, tuple[str, ...]] = {}
    limit = rt.config.parse.max_file_bytes
    with fsops.open_dir(md.real_path) as dir_fd:
        for name in sorted(scan.memories):
            try:
                data, _ = fsops.read_regular(dir_fd, name, limit)
            except (OSError, ValueError):
                continue  # reported as unparseable elsewhere
            if named := links.links_in(data):
                found[name] = named
    names = {name: entry.name for name, entry in scan.memories.items()}
    others = [n for n, s in scan.files.items() if n not in names]
    return links.dangling(found, names, others)


# --- record stores -----------------------------------------------------------------------------
STORE_PATH = ".agent/memory.jsonl"  # a repo's record store (memoryd.discipline.records)


@dataclass(frozen=True, slots=True)
class StoreFile:
    path: Path
    origin: str  # "repo <root>" or "paths.record_stores"


def is_store_file(path: Path) -> bool:
    """A path named on the command line that is a record store rather than a memory dir."""
    return path.suffix == ".jsonl" and not path.is_dir()


def store_files(
    config: Config, dirs: Iterable[MemoryDir], explicit: Iterable[Path] = ()
) -> list[StoreFile]:
    """The record stores to look at: `.agent/memory.jsonl` of every known repo (of the dirs,
    configured, named) and `paths.record_stores`; with `explicit` paths, only the stores named
    and those of the repos named or of the named dirs' repos."""
    explicit = list(explicit)
    roots: set[Path] = {md.repo_root for md in dirs if md.repo_root is not None}
    found: dict[Path, StoreFile] = {}
    named = [p.expanduser().absolute() for p in explicit]
    for path in named:
        if is_store_file(path):
            found.setdefault(path, StoreFile(path, "named"))
        elif (path / ".git").exists() or (path / ".claude").is_dir() or (path / ".agent").is_dir():
            roots.add(path)
    if not explicit:
        for pattern in config.paths.repos:
            for match in sorted(glob.glob(os.path.expanduser(pattern))):
                if Path(match).is_dir():
                    roots.add(Path(match).absolute())
        for path in config.paths.record_stores:
            found.setdefault(path, StoreFile(path, "paths.record_stores"))
    for root in sorted(roots):
        candidate = root / STORE_PATH
        if os.path.lexists(candidate):
            found.setdefault(candidate, StoreFile(candidate, f"repo {root}"))
    return sorted(found.values(), key=lambda s: str(s.path))


@dataclass(frozen=True, slots=True)
class StoreRead:
    file: StoreFile
    data: bytes | None  # None: not read (`problem` says why)
    cut: bool = False
    problem: str = ""


def read_store(file: StoreFile) -> StoreRead:
    """A store's bytes, at most records.MAX_STORE_BYTES (`cut` past that): never through a
    symlink found in a repo (a configured path may be one), never a FIFO or a device."""
    from memoryd.discipline.records import MAX_STORE_BYTES

    try:
        fd, _ = open_regular(file.path, follow=file.origin == "paths.record_stores")
    except FileNotFoundError:
        return StoreRead(file, None, problem="it does not exist")
    except OSError as error:
        return StoreRead(file, None, problem=read_problem(error))
    try:
        data = read_open(fd, MAX_STORE_BYTES)
    except OSError as error:
        return StoreRead(file, None, problem=read_problem(error))
    finally:
        os.close(fd)
    if len(data) > MAX_STORE_BYTES:
        # Cut at the last whole line within the limit: a record is never read in half.
        data = data[: data.rfind(b"\n", 0, MAX_STORE_BYTES) + 1]
        return StoreRead(file, data, cut=True)
    return StoreRead(file, data)
