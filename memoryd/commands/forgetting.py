"""Forget on a person's request, thoroughly and undoably (`memoryd forget`).

Every matching memory (by name, description and body words, or the files named) is listed,
confirmed (`--yes` for scripts), moved to the trash as a dream pass moves (journalled,
restorable), and its pointer lines leave the index as after a dream pass. A query matching
over a quarter of a dir is refused; so is a dir whose index memoryd does not manage.
"""

import argparse
import contextlib
import re
import secrets
import sqlite3
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.discover.finder import discover, memory_dir_of
from memoryd.discover.found import MemoryDir
from memoryd.errors import MemorydError, UsageError
from memoryd.indexing.scan import scan_dir
from memoryd.model.display import shown
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.model.memfile import Memory, parse_memory
from memoryd.runtime import Runtime
from memoryd.storage import fsops
from memoryd.trash import journal
from memoryd.trash import store as trash
from memoryd.trash.store import TrashRecord

if TYPE_CHECKING:
    from memoryd.versions.purge import Purged

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
REASON = "forgotten"
MAX_SHARE = 0.25  # a query matching more of a dir than this is refused unless files are named


_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    """Lower-cased word characters runs: what a query word must equal."""
    return set(_WORD.findall(text.lower()))


def matches(query: list[str], memory: Memory) -> bool:
    """Whether every query word is a word of the memory's name, description or body. (The
    one place the matcher lives: a search engine may take its place.)"""
    wanted = words(" ".join(query))
    if not wanted:
        return False
    return wanted <= words(f"{memory.display_name} {memory.description} {memory.body}")


@dataclass(slots=True)
class Target:
    md: MemoryDir
    name: str
    sha256: str
    description: str


@dataclass(slots=True)
class Selection:
    targets: list[Target] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def _split(terms: list[str]) -> tuple[list[str], list[Path], list[Path]]:
    """(query words, files, dirs) of the arguments: an existing folder is a dir, an existing
    file or a name ending in .md a file, anything else a query word."""
    query: list[str] = []
    files: list[Path] = []
    dirs: list[Path] = []
    for term in terms:
        path = Path(term).expanduser()
        if path.is_dir():
            dirs.append(path)
        elif path.is_file() or term.endswith(".md"):
            files.append(path)
        else:
            query.append(term)
    return query, files, dirs


def _memories(rt: Runtime, md: MemoryDir) -> dict[str, Memory]:
    limits = rt.config.parse.max_file_bytes, rt.config.parse.max_frontmatter_bytes
    # No versions kept: without the writer lock (before a prompt), another process's move
    # could be seen between the rename and its log line, as a deletion by others.
    scan = scan_dir(md.real_path, {}, max_file_bytes=limits[0], max_frontmatter_bytes=limits[1])
    out: dict[str, Memory] = {}
    with fsops.open_dir(md.real_path) as dir_fd:
        for name in sorted(scan.memories):
            try:
                data, _ = fsops.read_regular(dir_fd, name, limits[0])
            except (OSError, ValueError):
                continue
            parsed = parse_memory(
                name, data, max_file_bytes=limits[0], max_frontmatter_bytes=limits[1]
            )
            if isinstance(parsed, Memory):
                out[name] = parsed
    return out


def _target(md: MemoryDir, memory: Memory) -> Target:
    return Target(md, memory.filename, memory.sha256, memory.description)


def select(rt: Runtime, query: list[str], files: list[Path], dirs: list[MemoryDir]) -> Selection:
    """What the arguments name: the files (each must be a memory), or every memory matching the
    query in `dirs` (a dir where it matches more than MAX_SHARE is a refusal)."""
    chosen = Selection()
    if files:
        for path in files:
            name = path.name
            if "/" in str(path) or path.exists():
                found = [memory_dir_of(path.absolute(), rt.config)]
            else:
                found = [md for md in dirs if (md.real_path / name).exists()]
            if not found:
                raise MemorydError(f"{path}: no memory of that name in the dirs looked in")
            if len(found) > 1:
                where = ", ".join(str(md.path / name) for md in found)
                raise MemorydError(f"{name}: in several dirs ({where}); name it by its path")
            md = found[0]
            memory = _memories(rt, md).get(name)
            if memory is None:
                raise MemorydError(
                    f"{md.path / name}: not a memory memoryd can read (see `memoryd dirs "
                    f"{md.path}`); nothing was forgotten"
                )
            chosen.targets.append(_target(md, memory))
        return chosen
    for md in dirs:
        memories = _memories(rt, md)
        hits = [m for m in memories.values() if matches(query, m)]
        if hits and len(hits) > MAX_SHARE * len(memories):
            chosen.refusals.append(
                f"{md.path}: the query matches {len(hits)} of its {len(memories)} memories, "
                f"more than a quarter; name the files to forget instead"
            )
            continue
        chosen.targets += [_target(md, m) for m in hits]
    return chosen


@dataclass(slots=True)
class Forgotten:
    moved: list[TrashRecord] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # file, why
    pointers_removed: list[str] = field(default_factory=list)
    problem: str = ""


def forget_in(rt: Runtime, md: MemoryDir, targets: list[Target]) -> Forgotten:
    """Move the targets of one dir to the trash (each only if it still holds the bytes that
    were listed), journalled like a dream pass's moves, then update the index."""
    from memoryd.dream.read import probe_index
    from memoryd.dream.write import index_lines
    from memoryd.indexing.passes import index_after_dream

    result = Forgotten()
    pass_id = "forget-" + datetime.now().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    with rt.store.lock(md.real_path):
        ownership = probe_index(rt, md).ownership
        if not (ownership and ownership.managed):
            why = ownership.reason if ownership else "the index could not be read"
            result.problem = (
                f"{md.path / INDEX_NAME} is not memoryd's to edit ({why}), so the pointer lines "
                "would stay: nothing was forgotten here. Remove the files and their lines by "
                "hand, or add `<!-- memoryd: manage -->` to MEMORY.md and rerun"
            )
            return result
        names = {t.name for t in targets}
        lines, places = index_lines(md, names, versions=rt.versions)
        with trash.Mover(md.real_path, rt.today(), versions=rt.versions, refuse_held=True) as mover:
            records = []
            taken: set[str] = set()
            for t in targets:
                stored = trash.free_name(mover.folder, t.name, taken)  # as the dream pass
                taken.add(stored)
                place = places.get(t.name)
                records.append(
                    TrashRecord(
                        id=trash.new_id(),
                        original_name=t.name,
                        stored_name=stored,
                        day=mover.folder.name,
                        sha256=t.sha256,
                        size=0,
                        reason=REASON,
                        pass_id=pass_id,
                        time=datetime.now().astimezone().isoformat(timespec="seconds"),
                        index_line=lines.get(t.name),
                        index_place=place.to_json() if place and t.name in lines else None,
                        details={"detail": "a person asked memoryd to forget it"},
                    )
                )
            entry = journal.begin(rt.paths.state_dir, pass_id, md.real_path, records)
            for record in records:
                outcome = mover.move(record)
                if isinstance(outcome, trash.Unmoved):
                    why = {
                        trash.MODIFIED: "changed since it was listed",
                        trash.HELD: f"open for writing by {outcome.held_by}: rerun once it is done",
                    }.get(outcome.why, "gone")
                    result.skipped.append((record.original_name, why))
                    continue
                journal.mark_done(entry, record.id)
                result.moved.append(outcome)
                for event in ("trash.moved", "memory.forgotten"):
                    rt.audit.write(
                        event,
                        dir=md.path,
                        file=record.original_name,
                        id=record.id,
                        reason=REASON,
                        sha256=record.sha256,
                    )
        moved = frozenset(r.original_name for r in result.moved)
        index = index_after_dream(rt, md, moved, None)
        if index.write_failed or index.status in ("error", "conflict", "settling"):
            result.problem = (
                f"{md.path / INDEX_NAME} could not be updated ({index.message}); the pointer "
                "lines of the forgotten files go at the next `memoryd index` that can write it"
            )
        else:
            journal.commit(entry)
        if index.edit is not None:
            result.pointers_removed = sorted(set(index.edit.removed) & moved)
    return result


def purge_memories(rt: Runtime, md: MemoryDir, names: Iterable[str]) -> "Purged":
    """`forget --purge` after the files left for the trash: their kept versions, their rows
    in the search index (its segments merged, its WAL truncated) and the dir's dream facts
    cache (derived again by the next pass) go. The trash copy stays: it is the person's."""
    from memoryd.recall.store import DirIndex, index_path
    from memoryd.versions import kept
    from memoryd.versions.purge import purge_versions_of

    names = sorted(set(names))
    store = rt.versions or kept.for_runtime(rt)
    result = purge_versions_of(store, md.real_path, names, rt.audit.write)
    with DirIndex(index_path(rt.paths.state_dir, md.real_path), md.real_path) as index:
        index.update(names)
        index.scrub()
    with contextlib.suppress(FileNotFoundError):
        rt.store.drop_facts(md.real_path)
    return result


def _purged(rt: Runtime, md: MemoryDir, done: Forgotten, out: TextIO) -> int:
    """`--purge`: what memoryd keeps of the forgotten files goes (`purge_memories`)."""
    names = [r.original_name for r in done.moved]
    try:
        purged = purge_memories(rt, md, names)
    except (OSError, sqlite3.Error) as error:
        out.write(
            f"{shown(md.path)}: the kept copies could not all be removed ({error}); the kept "
            "versions go with versions.keep_days, the index entries at its next update\n"
        )
        return EXIT_FAILED
    if purged.busy:
        out.write(
            "the version store stayed busy (a daemon pass was writing it): the search index "
            "entries and facts cache went, the kept versions stay until versions.keep_days "
            "drops them (or stop the daemon and forget with --purge next time)\n"
        )
        return EXIT_FAILED
    out.write(
        f"  purged: {len(purged.versions)} kept version(s), the search index entries and "
        "the dream facts cache; the trash copy stays (yours to delete)\n"
    )
    return EXIT_OK


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """`memoryd forget` as the command line gives it (parsed by memoryd.commands.forget)."""
    query, files, dir_args = _split(args.terms)
    if files and query:
        raise UsageError(
            f"name files or give a query, not both (files: {', '.join(map(str, files))}; "
            f"query: {' '.join(query)})"
        )
    if not args.dry_run:
        from memoryd.trash.recovery import recover

        recover(rt)
    from memoryd.commands.resolve import is_path, resolve

    # A file by its name alone: the one resolver's (nearest dirs first; ambiguous: exit 2).
    files = [f if is_path(str(f)) else resolve(rt, str(f), dir_args).path for f in files]
    rt_dirs = discover(rt.config, dir_args)
    chosen = select(rt, query, files, rt_dirs)
    if chosen.refusals:
        for why in chosen.refusals:
            out.write(f"refused: {shown(why)}\n")
        out.write("Nothing was forgotten.\n")
        return EXIT_FAILED
    if not chosen.targets:
        out.write(f"No memory matches {' '.join(query)!r}; nothing was forgotten.\n")
        return EXIT_FAILED
    head = "[DRY RUN] Would forget" if args.dry_run else "To forget"
    out.write(f"{head} ({len(chosen.targets)}):\n")
    for t in chosen.targets:
        out.write(f"  {shown(t.md.path / t.name)} — {shown(t.description)}\n")
    if args.dry_run:
        return EXIT_OK
    if not args.yes and not _confirmed(out, len(chosen.targets), args.purge):
        return EXIT_FAILED
    code = EXIT_OK
    by_dir: dict[Path, list[Target]] = {}
    for t in chosen.targets:
        by_dir.setdefault(t.md.real_path, []).append(t)
    for targets in by_dir.values():
        code = max(code, _forget_dir(rt, targets, args.purge, out))
    return code


def _confirmed(out: TextIO, count: int, purge: bool) -> bool:
    """The person's yes on a terminal; a no, or no terminal to ask on, is said."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        out.write(
            "Not on a terminal, and --yes was not given: nothing was forgotten. Rerun with "
            "--yes to forget these.\n"
        )
        return False
    what = "this memory" if count == 1 else f"these {count} memories"
    if purge:
        what += " and every copy memoryd keeps (its kept versions cannot be restored after)"
    out.write(f"Forget {what}? [y/N] ")
    out.flush()
    if stdin.readline().strip().lower() in ("y", "yes"):
        return True
    out.write("Nothing was forgotten.\n")
    return False


def _forget_dir(rt: Runtime, targets: list[Target], purge: bool, out: TextIO) -> int:
    """Forget one dir's targets and say what became of each; the exit code."""
    code = EXIT_OK
    md = targets[0].md
    done = forget_in(rt, md, targets)
    for r in done.moved:
        out.write(
            f"forgot {shown(md.path / r.original_name)}: moved to "
            f".trash/{r.day}/{shown(r.stored_name)} (restore: memoryd trash restore {r.id})\n"
        )
    for name in done.pointers_removed:
        out.write(f"  pointer lines removed ({INDEX_NAME}, {ARCHIVE_NAME}): {shown(name)}\n")
    if purge and done.moved:
        code = max(code, _purged(rt, md, done, out))
    for name, why in done.skipped:
        out.write(f"not forgotten: {shown(md.path / name)} — {why}; nothing of it moved\n")
        code = EXIT_FAILED
    if done.problem:
        out.write(f"{shown(done.problem)}\n")
        code = EXIT_FAILED
    return code
