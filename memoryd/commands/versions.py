"""The version store's part in the commands: `history`'s versions, `--diff` and `--restore N`,
and files deleted outside memoryd in `trash list|restore` (`cli` keeps versions while a
command runs)."""

import argparse
import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.errors import MemorydError, UsageError
from memoryd.model.display import shown
from memoryd.runtime import Runtime
from memoryd.versions import kept, listing, records, scanned

if TYPE_CHECKING:
    from memoryd.storage.fsops import FileIdentity
    from memoryd.trash.restored import Pin

EXIT_OK, EXIT_FINDINGS = 0, 1


def diff_or_restore(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`history FILE --diff [A[..B]]` or `--restore N`, on `args.target`."""
    store = rt.versions or kept.for_runtime(rt)
    folder, name = args.target.folder, args.target.name
    found = listing.versions_of(store, folder, name)
    if args.restore is not None:
        return _restore(rt, store, folder, name, found, args.restore, out)
    out.write(shown(_diff(store, folder, name, found, args.diff), lines=True))
    return EXIT_OK


def versions_json(folder: Path, name: str, found: Sequence[records.Version]) -> dict[str, object]:
    rows = [
        {
            "version": v.number,
            "sha256": v.sha256,
            "size": v.size,
            "seen": v.seen,
            "until": v.until,
            "by": v.by,
            "ended_by": v.ended_by or None,
            "restorable": v.stored,
        }
        for v in found
    ]
    return {"dir": str(folder), "file": name, "versions": rows}


def _current(folder: Path, name: str) -> bytes | None:
    from memoryd.storage import fsops

    try:
        with fsops.open_dir(folder) as fd:
            return fsops.read_regular(fd, name, records.OBJECT_MAX)[0]
    except (OSError, ValueError):
        return None


def _pick(found: Sequence[records.Version], number: int) -> records.Version:
    for v in found:
        if v.number == number:
            return v
    raise UsageError(f"no version {number}: `memoryd history` lists versions 1 to {len(found)}")


def _diff(
    store: kept.VersionStore,
    folder: Path,
    name: str,
    found: Sequence[records.Version],
    spec: str,
) -> str:
    """`history --diff`, its secrets masked as in any memory text shown."""
    from memoryd.model.secrets import mask

    return mask(_diff_text(store, folder, name, found, spec))


def _diff_text(
    store: kept.VersionStore,
    folder: Path,
    name: str,
    found: Sequence[records.Version],
    spec: str,
) -> str:
    if not found:
        return f"{folder / name}: no version kept\n"
    # A memory deleted since is compared with nothing: not "bytes no longer kept".
    gone = not os.path.lexists(folder / name)
    if not spec:
        if len(found) < 2:
            return listing.diff(store, name, found[-1], None, _current(folder, name), gone=gone)
        return listing.diff(store, name, found[-2], found[-1], None)
    a, _, b = spec.partition("..")
    try:
        older = _pick(found, int(a))
        newer = _pick(found, int(b)) if b else None
    except ValueError as error:
        raise UsageError(f"--diff {spec}: give version numbers, A or A..B") from error
    now = _current(folder, name) if newer is None else None
    return listing.diff(store, name, older, newer, now, gone=gone)


def _restore(
    rt: Runtime,
    store: kept.VersionStore,
    folder: Path,
    name: str,
    found: Sequence[records.Version],
    number: int,
    out: TextIO,
) -> int:
    from memoryd.storage import fsops
    from memoryd.trash import restored

    version = _pick(found, number)
    _still_real(folder)
    if not folder.is_dir():
        raise MemorydError(
            f"{folder}: no such folder (deleted?); nothing was written. `memoryd trash list` "
            "lists its files, and `memoryd trash restore ID` makes it again"
        )
    with rt.store.lock(folder), fsops.open_dir(folder) as fd:
        now = _current_of(folder, fd, name)
        if now is not None and now[1].sha256 == version.sha256:  # kept bytes or not
            out.write(f"{shown(folder / name)} already holds version {number}; nothing to do\n")
            return EXIT_OK
        data = store.read_object(version.sha256)
        if data is None:
            raise MemorydError(
                f"{folder / name}: the bytes of version {number} are no longer kept (pruned "
                "past versions.keep_days or the store's cap); nothing was written"
            )
        if now is not None:  # what it replaces stays in the history, read by no scan or not
            store.keep_current(folder, name, now[0], now[1].sha256)
        pins = restored.load(rt.store, folder)
        if name not in scanned.INDEX_FILES:  # a person chose these bytes, as a trash restore
            when = restored.now_iso(rt.clock())
            # Its id names the file too: a pin replaces any of the same id, and another file
            # written back to the same bytes at the same version number must keep its own.
            pin_id = f"{name}@v{number}:{version.sha256[:12]}"
            pin = restored.Pin(name, version.sha256, when, pin_id)
            restored.record(rt.store, folder, pin)
        # The check-and-swap writer: if someone writes the file meanwhile, nothing of
        # theirs is lost and nothing is written (rerun to restore over their version).
        replacing = now[1] if now is not None else None
        _write_back(rt, store, folder, name, (data, version.sha256), replacing, pins)
    rt.audit.write(  # a version written back, not a file out of the trash
        "version.restored", dir=folder, file=name, version=number, sha256=version.sha256
    )
    out.write(
        f"restored version {number} of {shown(folder / name)} ({version.size} bytes, "
        f"{version.sha256[:12]}); the version it replaced stays in its history\n"
    )
    return EXIT_OK


def _current_of(folder: Path, dir_fd: int, name: str) -> "tuple[bytes, FileIdentity] | None":
    """What `history --restore` would replace; MemorydError for a file no version of could be
    kept (a link, a FIFO, a folder, one over the store's limit)."""
    from memoryd.storage import fsops

    try:
        return fsops.identity_of(dir_fd, name, records.OBJECT_MAX)
    except ValueError:
        why = f"over {records.OBJECT_MAX >> 20} MiB, more than memoryd keeps a version of"
    except OSError as error:
        why = "a symbolic link" if error.errno == errno.ELOOP else (error.strerror or str(error))
    raise MemorydError(
        f"{folder / name}: {why}; memoryd writes a version back only over a regular file it "
        "can keep, and wrote nothing. Move it aside, then rerun"
    )


def _write_back(
    rt: Runtime,
    store: kept.VersionStore,
    folder: Path,
    name: str,
    version: tuple[bytes, str],
    replacing: "FileIdentity | None",
    pins: "Sequence[Pin] | None",
) -> None:
    """Write a kept version (bytes, sha256) back as `name` over `replacing` (None: no file),
    announced to the store first so a scan takes the bytes for memoryd's. A failed write puts
    back the pins as they were (`pins`; None: it made none) and the log's record of what the
    dir holds."""
    from memoryd.storage import fsops
    from memoryd.trash import restored

    data, sha = version
    try:
        store.intend_restore(folder, name, data)
        fsops.replace_file(folder, name, data, replacing, versions=rt.versions, refuse_held=True)
    except (MemorydError, OSError):
        # Neither may hide the error that brought us here (both write the state store).
        with contextlib.suppress(OSError, MemorydError, sqlite3.Error):
            if pins is not None:
                restored.reset(rt.store, folder, pins)
        with contextlib.suppress(OSError, MemorydError, sqlite3.Error):
            current = (replacing.sha256, replacing.size) if replacing is not None else None
            store.restore_failed(folder, name, sha, len(data), current)
        raise
    store.restore_done(folder, name, sha, len(data))


def _still_real(folder: Path) -> None:
    """Refuse a dir that became (or lies under) a symbolic link since its versions were kept:
    it may lead out of its repo or Claude home, where discovery does not follow."""
    # realpath resolves the part of the path that still exists: a gone dir under a folder
    # made a link since resolves elsewhere too, and would be made again there.
    real = Path(os.path.realpath(folder))
    if real != folder:
        what = "now a symbolic link" if os.path.islink(folder) else "now under a symbolic link"
        raise MemorydError(
            f"{folder}: {what} (to {real}), not the folder memoryd kept these versions of; "
            "nothing was written. Put the folder back in its place, then rerun"
        )


def _make_again(store: kept.VersionStore, folder: Path) -> None:
    """Make a deleted memory dir again (0700) when its parent is there, after recording its
    files gone under the ids `trash list` gave them."""
    _still_real(folder)  # again, just before the folder is made (a link since the first look)
    if not folder.parent.is_dir():
        raise MemorydError(
            f"{folder}: the memory dir is gone, and so is the folder it was in; make it "
            f"again (`mkdir -p {shown(folder)}`), then rerun"
        )
    store.vanished(folder, [d for d in listing.deleted(store, folder) if d.vanished])
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        if not folder.is_dir():
            raise MemorydError(
                f"{folder}: the memory dir is gone and something else has its name; move "
                "that aside, then rerun"
            ) from None
    except OSError as error:
        raise MemorydError(
            f"{folder}: the memory dir is gone and could not be made again "
            f"({error.strerror}); make it (`mkdir {shown(folder)}`), then rerun"
        ) from error


def _indexes_back(rt: Runtime, store: kept.VersionStore, folder: Path) -> None:
    """A memory dir made again gets its MEMORY.md and archive as last kept (the person's
    sections with them); pointers of memories not restored yet go at the next pass."""
    for name in scanned.INDEX_FILES:
        found = listing.versions_of(store, folder, name)
        if not found or os.path.lexists(folder / name):
            continue
        data = store.read_object(found[-1].sha256)
        if data is None:  # pruned: the index pass writes one anew
            continue
        _write_back(rt, store, folder, name, (data, found[-1].sha256), None, None)


def _why(error: BaseException) -> str:
    """The system's reason for a failed write (the message when there is none)."""
    cause = error if isinstance(error, OSError) else error.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        # The file when it is not the one being restored (the version store's, say).
        return f"{cause.strerror}: {cause.filename}" if error is cause else cause.strerror
    return str(error)


# --- trash list / restore: files deleted outside memoryd -------------------------------------
def split_gone(rt: Runtime, dirs: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """The DIRs named to `trash list|restore` split into those there (or unknown) and those
    deleted whole whose versions the store keeps."""
    if not dirs:
        return [], []
    known = set(kept.for_runtime(rt).known_dirs())
    gone = [d for d in dirs if not os.path.isdir(d) and Path(d).absolute() in known]
    return [d for d in dirs if d not in gone], gone


def within(store: kept.VersionStore, dirs: Sequence[Path]) -> list[Path]:
    """The dirs the store keeps versions of that are, or lie inside, one of `dirs` (all when
    none is named)."""
    known = store.known_dirs()
    if not dirs:
        return known
    wanted = [d.expanduser().resolve() for d in dirs]
    return [p for p in known if any(p == w or p.is_relative_to(w) for w in wanted)]


def deleted_rows(rt: Runtime, dirs: Sequence[Path]) -> list[listing.Deleted]:
    store = rt.versions or kept.for_runtime(rt)
    return [d for path in within(store, dirs) for d in listing.deleted(store, path)]


def render_deleted(items: Sequence[listing.Deleted]) -> str:
    from memoryd.model.humanize import ago

    now = time.time()
    return "".join(
        f"{d.id}  {'':10}  deleted outside memoryd, {ago(d.when, now)}  {shown(d.dir / d.name)}\n"
        if not d.vanished
        else f"{d.id}  {'':10}  its folder deleted outside memoryd, last seen "
        f"{ago(d.when, now)}  {shown(d.dir / d.name)}\n"
        for d in items
    )


def restore_deleted(rt: Runtime, key: str, dirs: Sequence[Path], out: TextIO) -> bool:
    """`trash restore ID` for a file deleted outside memoryd: False when `key` names none."""
    from memoryd.discover.finder import memory_dir_at
    from memoryd.indexing.passes import restore_pointers
    from memoryd.model.index import INDEX_NAME, pointer_lines, pointer_places
    from memoryd.trash import manifest as trash
    from memoryd.trash import restored

    store = rt.versions or kept.for_runtime(rt)
    item = listing.find_deleted(store, within(store, dirs), key)
    if item is None:
        return False
    data = store.read_object(item.sha256)
    if data is None:
        raise MemorydError(f"{item.dir / item.name}: its kept version is damaged or gone")
    _still_real(item.dir)
    if item.vanished or not item.dir.is_dir():
        with rt.store.lock(item.dir):
            _make_again(store, item.dir)
            _indexes_back(rt, store, item.dir)
    md = memory_dir_at(item.dir, rt.config)
    with rt.store.lock(item.dir):
        if listing.find_deleted(store, [item.dir], item.id) is None:  # restored meanwhile
            raise MemorydError(
                f"{item.id} ({item.dir / item.name}) was restored by another memoryd command "
                "while this one waited; nothing was done (`memoryd trash list` shows what is "
                "still restorable)"
            )
        name = trash.restore_name(item.dir, item.name)
        when = restored.now_iso(rt.clock())
        pins = restored.load(rt.store, item.dir)
        # Never over a file (a new name instead). Its bytes back in the dir under `name` (the
        # pin just recorded): no longer listed as deleted. Nothing is said of `item.name`,
        # which another file may hold now.
        try:
            restored.record(rt.store, item.dir, restored.Pin(name, item.sha256, when, item.id))
            _write_back(rt, store, item.dir, name, (data, item.sha256), None, pins)
        except (MemorydError, OSError) as error:
            raise MemorydError(
                f"{item.dir / name}: could not be written ({_why(error)}); nothing was "
                f"restored, and the deletion of {item.name} stays listed by `memoryd trash "
                f"list`. Free disk space or fix the folder's permissions, then rerun `memoryd "
                f"trash restore {item.id}`"
            ) from error
        rt.audit.write("trash.restored", dir=item.dir, file=item.name, id=item.id, **{"as": name})
        # Its pointer line, as the newest kept MEMORY.md that had one held it, where it sat.
        preferred: dict[str, str] = {}
        placements = {}
        for v in reversed(listing.versions_of(store, item.dir, INDEX_NAME)[-20:]):
            text = (store.read_object(v.sha256) or b"").decode("utf-8", "replace")
            lines = [p.content for p in pointer_lines(text) if p.target == item.name]
            if lines:
                if name == item.name:
                    preferred[name] = lines[0]
                placements = pointer_places(text.removeprefix("\ufeff"), {item.name})
                break
        place = placements.get(item.name)
        restore_pointers(rt, md, preferred, {name: place} if place else {})
    out.write(f"restored {shown(item.name)} as {shown(item.dir / name)}\n")
    return True
