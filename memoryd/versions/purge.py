"""Kept versions that hold a secret no current file of their dir holds any more: removed.

A person told of a secret (`memory.secret_found`) takes it out of the memory by hand; the
version store still holds the versions before that, byte-exact, and `history --restore`
would write the secret back. Once no current file of the dir (memory, note, MEMORY.md, the
archive) holds a secret's value, every kept version holding it goes: its loose object is
deleted (its bytes zeroed in the file: secure_delete), and one `versions.purged`
row says the file, version number and kind (never the value). The version stays listed in
`history`, as not restorable. A version that is the current one of any file in any dir is
never removed (its bytes are that file's), and neither is anything in the memory dir's trash
(the person's own).

What else memoryd keeps of a memory's text (the search index, the dream facts cache, the parse
cache) is taken from the masked text (memoryd.model.secrets.mask), so holds no value to purge.
Values are compared as sha256 digests (memoryd.model.secrets.fingerprints): none is held here.
"""

import contextlib
import os
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.model import secrets
from memoryd.model.index import PREV_NAME
from memoryd.storage import fsops
from memoryd.versions.kept import VersionStore
from memoryd.versions.prune import histories
from memoryd.versions.records import Version, versions

if TYPE_CHECKING:
    pass

Audit = Callable[..., Any]  # AuditLog.write's signature: (event, *, dir=..., **fields)
MAX_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Purged:
    """What one purge removed: (file, version number, kinds) for each version, and the
    objects (sha256) whose bytes went."""

    versions: list[tuple[str, int, str]] = field(default_factory=list)
    objects: set[str] = field(default_factory=set)
    # Nothing was removed as the store stayed busy past SQLite's wait (statedb.BUSY_WAIT).
    busy: bool = False


def current_fingerprints(
    path: Path, limit: int = MAX_BYTES, only: Set[str] | None = None
) -> set[str]:
    """The fingerprints of every secret the regular files of the dir hold now (of the files
    `only` names, when the caller knows the others hold none). memoryd's own copy of
    MEMORY.md before its last rewrite (`.MEMORY.md.prev`) is none of the person's files: a
    secret only it holds counts as gone."""
    out: set[str] = set()
    with fsops.open_dir(path) as dir_fd:
        for name in os.listdir(dir_fd) if only is None else sorted(only):
            if name == PREV_NAME:
                continue
            with contextlib.suppress(OSError, ValueError):
                data, _ = fsops.read_regular(dir_fd, name, limit)
                text = data.decode("utf-8", "replace")
                if not secrets.holds_no_hint(text):
                    out.update(secrets.fingerprints(text))
    return out


def _histories(store: VersionStore, path: Path, stored: Set[str]) -> dict[str, list[Version]]:
    """Each file's versions in the dir at `path` (what `versions_of` gives one name), its
    rows read once. `stored`: the objects the store holds (`object_sizes`, looked up once)."""
    return {
        name: versions(recs, stored.__contains__) for name, recs in histories(store, path).items()
    }


def _current_shas(store: VersionStore, stored: Set[str]) -> set[str]:
    """The objects that are some file's current version, in any dir the store knows."""
    out: set[str] = set()
    for path in store.known_dirs():
        for found in _histories(store, path, stored).values():
            if found and found[-1].until is None:
                out.add(found[-1].sha256)
    return out


def _doomed(
    store: VersionStore,
    histories: dict[str, list[Version]],
    present: set[str],
    clean: set[str],
) -> tuple[dict[str, str], list[tuple[str, int, str, str]]]:
    """The objects of the dir's kept versions holding a secret not in `present` (sha ->
    kinds), and each such version (file, number, kinds, sha). `clean`: objects known to hold
    no secret (not read); those read and found so are added."""
    kinds_of: dict[str, str] = {}
    rows: list[tuple[str, int, str, str]] = []
    for name, history in sorted(histories.items()):
        for version in history:
            sha = version.sha256
            if sha in clean or not version.stored:
                continue
            if sha not in kinds_of:
                data = store.read_object(sha)
                found = secrets.fingerprints(
                    "" if data is None else data.decode("utf-8", "replace")
                )
                if not found:
                    clean.add(sha)
                    continue
                kinds_of[sha] = ", ".join(sorted({k for d, k in found.items() if d not in present}))
            if kinds_of[sha]:
                rows.append((name, version.number, kinds_of[sha], sha))
    return {sha: kinds for sha, kinds in kinds_of.items() if kinds}, rows


def _said(
    path: Path, rows: list[tuple[str, int, str, str]], removed: set[str], audit: Audit | None
) -> Purged:
    result = Purged(objects=removed)
    result.versions = [row[:3] for row in rows if row[3] in removed]
    for name, number, kind in result.versions:
        if audit is not None:
            audit("versions.purged", dir=path, file=name, version=number, kind=kind)
    return result


def purge_gone_secrets(
    store: VersionStore,
    path: Path,
    audit: Audit | None = None,
    *,
    clean: set[str] | None = None,
    holding: Set[str] | None = None,
) -> Purged:
    """Remove the kept versions of the dir at `path` that hold a secret no current file of
    it holds (see the module docstring); a `versions.purged` row for each. `clean`: objects
    known to hold no secret, kept by the caller across calls (the dream memo's). `holding`:
    the only files that may hold one now, when the caller has looked (the dream pass: no
    file is read twice); else every file is read. One transaction (a writer's waits)."""
    clean = set() if clean is None else clean
    present = current_fingerprints(path, only=holding)
    with store.db.transaction():
        stored = store.object_sizes().keys()
        doomed, rows = _doomed(store, _histories(store, path, stored), present, clean)
        if doomed:  # never some file's current version, in any dir (its bytes are the file's)
            keep = _current_shas(store, stored)
            doomed = {sha: kinds for sha, kinds in doomed.items() if sha not in keep}
        removed = store.drop_objects(set(doomed))
    store.checkpoint()
    return _said(path, rows, removed, audit)


def purge_versions_of(
    store: VersionStore,
    path: Path,
    names: Iterable[str],
    audit: Audit | None = None,
) -> Purged:
    """Remove every kept version of these files of the dir at `path` (`forget --purge`; the
    kind in each `versions.purged` row is `forgotten`), but one that is some file's current
    version (its bytes are that file's). One transaction: a writer's waits for it."""
    with store.db.transaction():
        stored = store.object_sizes().keys()
        keep = _current_shas(store, stored)
        histories = _histories(store, path, stored)
        rows = [
            (name, v.number, "forgotten", v.sha256)
            for name in sorted(set(names))
            for v in histories.get(name, [])
            if v.stored and v.sha256 not in keep
        ]
        removed = store.drop_objects({row[3] for row in rows})
    store.checkpoint()
    return _said(path, rows, removed, audit)
