"""Recall over many memory dirs: bring each dir's search index up to date, query them, rank
and merge, and turn what was found into the results the CLI and the MCP server print.

Reads only: its writes go to the search indexes in memoryd's state dir, never to a memory dir.
"""

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.discover.dirlabel import label
from memoryd.discover.found import MemoryDir
from memoryd.model.agentview import view_kind_of
from memoryd.model.secrets import mask
from memoryd.recall.opened import OpenBounded
from memoryd.recall.query import DAY, DEFAULT_LIMIT, Frame, expressions, held_words, name_keys
from memoryd.recall.store import (
    BUSY_WAIT,
    Change,
    DirIndex,
    IndexOptions,
    Row,
    Window,
    index_path,
)

Result = dict[str, Any]

# Recall by path: how strongly a memory touches the file (lower first).
EXACT, MOVED, FOLDER, INSIDE, SYMBOL, MENTION = range(6)
# The flag of a memory whose MEMORY.md pointer the agent does not see in what it loads.
HIDDEN = "hidden by the agent's view"
NO_FRAME = Frame()
DEFAULT_OPTIONS = IndexOptions()


@dataclass(slots=True)
class Hit:
    md: MemoryDir
    row: Row
    group: int  # lower ranks first: exact name, all words, some words; or recall's strengths
    why: list[str] = field(default_factory=list)


def _project_names(md: MemoryDir) -> set[str]:
    names = {md.heading.lower(), md.label.lower(), md.path.name.lower(), label(md).lower()}
    if md.repo_root is not None:
        names.add(md.repo_root.name.lower())
    return names


def matches_project(md: MemoryDir, project: str | None) -> bool:
    """Whether a dir is the project asked for: its name (the repo folder's, the agent's, the
    slug) or a path to the dir or its repo."""
    if not project:
        return True
    wanted = project.strip()
    if wanted.lower() in _project_names(md):
        return True
    path = Path(os.path.abspath(os.path.expanduser(wanted)))
    return path in {md.path, md.real_path, md.repo_root}


class Engine:
    """The search indexes of a set of memory dirs, for one command or one server."""

    def __init__(
        self,
        dirs: Sequence[MemoryDir],
        state_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        stale_after: float = 90 * DAY,
        options: IndexOptions = DEFAULT_OPTIONS,
        window: tuple[int, int] | None = None,
    ) -> None:
        """`options`: each dir's index's (its window is the dir's own, from `window`)."""
        self.dirs = list(dirs)
        self.state_dir = state_dir
        self.clock = clock
        self.stale_after = stale_after
        self.indexes = OpenBounded(
            {
                md.real_path: DirIndex(
                    index_path(state_dir, md.real_path),
                    md.real_path,
                    replace(options, window=_window(md, window)),
                )
                for md in self.dirs
            }
        )

    def close(self) -> None:
        self.indexes.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def refresh(self, *, wait: float = BUSY_WAIT) -> dict[Path, Change]:
        """Bring every dir's index up to date by stat."""
        out = {}
        for md in self.dirs:
            out[md.real_path] = self.indexes[md.real_path].update(wait=wait)
        return out

    def _selected(self, project: str | None) -> list[MemoryDir]:
        return [md for md in self.dirs if matches_project(md, project)]

    # --- search ---------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        type_: str | None = None,
        frame: Frame = NO_FRAME,
        project: str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[Hit]:
        """Ranked memories for a query: an exact name first, then memories holding every word,
        then any; confirmed before unconfirmed; by bm25 within."""
        now = self.clock()
        stale = now - self.stale_after
        filters: dict[str, Any] = {"type_": type_, "since": frame.since, "until": frame.until}
        hits: dict[tuple[Path, str], Hit] = {}
        selected = self._selected(project)
        # Which words each dir holds, first: a word one dir holds is no typo in another.
        held = {md.real_path: held_words(query, self.indexes[md.real_path]) for md in selected}
        elsewhere = {h.word for words in held.values() for h in words if h.held}
        for md in selected:
            index = self.indexes[md.real_path]
            named = index.named(name_keys(query), **filters)
            for row in named:
                hits.setdefault((md.real_path, row.file), Hit(md, row, 0, ["exact name"]))
            found = expressions(query, index, held=held[md.real_path], elsewhere=elsewhere)
            got = len(named)
            for group, expression in ((1, found.every), (2, found.some)):
                if not expression or (group == 2 and got):
                    # Any of the words only when no memory holds all of them: ranking every
                    # memory that holds one common word is most of a slow query's cost.
                    continue
                rows = index.match(expression, stale_before=stale, limit=limit, **filters)
                got += len(rows)
                for row in rows:
                    key = (md.real_path, row.file)
                    if key in hits:
                        if not hits[key].row.snippet:
                            hits[key].row = row  # the exact name's hit, with its snippet
                        continue
                    why = [f"{w} ~ {', '.join(c)}" for w, c in found.corrected.items()]
                    hits[key] = Hit(md, row, group, why)
        ranked = sorted(
            hits.values(),
            key=lambda h: (
                h.group != 0,
                h.row.date < stale,
                h.group,
                h.row.score,
                str(h.md.real_path),
                h.row.file,
            ),
        )
        return ranked[:limit]

    def recent(
        self,
        *,
        frame: Frame,
        type_: str | None = None,
        project: str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[Hit]:
        """Memories in a time frame, newest first."""
        hits = [
            Hit(md, row, 0)
            for md in self._selected(project)
            for row in self.indexes[md.real_path].recent(
                type_=type_, since=frame.since, until=frame.until, limit=limit
            )
        ]
        hits.sort(key=lambda h: (-h.row.date, str(h.md.real_path), h.row.file))
        return hits[:limit]

    # --- recall by path and symbol --------------------------------------------------------------
    def recall(
        self,
        paths: Sequence[str] = (),
        symbols: Sequence[str] = (),
        *,
        cwd: Path | None = None,
        project: str | None = None,
        limit: int | None = None,
    ) -> list[Hit]:
        """Memories whose references touch these files (the file itself, a folder above it, a
        file below it when it is a folder, or the file's old place when it moved here) or name
        these symbols; the strongest touch first, then confirmed, then newest."""
        where = cwd or Path.cwd()
        hits: dict[tuple[Path, str], Hit] = {}

        def add(md: MemoryDir, row: Row, group: int, why: str) -> None:
            key = (md.real_path, row.file)
            hit = hits.get(key)
            if hit is None:
                hits[key] = Hit(md, row, group, [why])
                return
            hit.group = min(hit.group, group)
            if why not in hit.why:
                hit.why.append(why)

        for md in self._selected(project):
            index = self.indexes[md.real_path]
            root = _real(md.repo_root) if md.repo_root is not None else None
            for given in paths:
                for group, row, why in _touching(index, given, where, root):
                    add(md, row, group, why)
            for symbol in symbols:
                for row, ref, _ in index.by_refs("symbol", "norm", [symbol]):
                    add(md, row, SYMBOL, f"names {ref}")
                for row, ref, _ in index.by_refs("symbol", "base", [symbol.lower()]):
                    add(md, row, SYMBOL, f"names {ref}")
                if symbol.strip():
                    for row in index.match('"' + symbol.replace('"', '""') + '"', limit=50):
                        add(md, row, MENTION, f"mentions {symbol}")
        stale = self.clock() - self.stale_after
        ranked = sorted(
            hits.values(),
            key=lambda h: (h.group, h.row.date < stale, -h.row.date, h.row.file),
        )
        return ranked if limit is None else ranked[:limit]

    # --- one memory -----------------------------------------------------------------------------
    def find(self, target: str, *, cwd: Path | None = None) -> list[Hit]:
        """The memory a FILE path or a NAME means: the file itself when it is one in these
        dirs, else every memory of that name or file name."""
        path = _target_path(target, cwd)
        for md in self.dirs:
            if _real(path.parent) == md.real_path:
                row = self.indexes[md.real_path].row(path.name)
                return [Hit(md, row, 0)] if row is not None else []
        keys = name_keys(target)
        return [
            Hit(md, row, 0) for md in self.dirs for row in self.indexes[md.real_path].named(keys)
        ]

    def show(
        self, target: str, *, cwd: Path | None = None, found: list[Hit] | None = None
    ) -> Result:
        """One memory as written, with its result fields and where it is indexed; or why
        there is none (`problem`), naming an unparseable file's problem. `found`: what
        `find(target)` gave, when the caller has it already."""
        if found is None:
            found = self.find(target, cwd=cwd)
        if not found:
            return {"target": target, "memory": None, "problem": self._not_found(target, cwd)}
        hit = found[0]
        from memoryd.storage import fsops

        try:
            with fsops.open_dir(hit.md.real_path) as dir_fd:
                data, _ = fsops.read_regular(dir_fd, hit.row.file, 64 * 1024 * 1024)
        except (OSError, ValueError) as error:
            problem = f"{target}: cannot be read ({error})"
            return {"target": target, "memory": None, "problem": problem}
        where = {
            "index": f"indexed in MEMORY.md, line {hit.row.line}",
            "archive": f"indexed in MEMORY-ARCHIVE.md, line {hit.row.line}",
        }.get(hit.row.tier, "not indexed: no pointer in MEMORY.md or MEMORY-ARCHIVE.md")
        if hit.row.hidden:
            where += f" ({HIDDEN}: {hit.row.hidden})"
        return {
            "target": target,
            "memory": self.result(hit),
            "indexed": where,
            "text": mask(data.decode("utf-8", "replace")),
            "others": [str(h.md.path / h.row.file) for h in found[1:]],
        }

    def _not_found(self, target: str, cwd: Path | None) -> str:
        path = _target_path(target, cwd)
        for md in self.dirs:
            if _real(path.parent) != md.real_path:
                continue
            for ex in self.indexes[md.real_path].excluded():
                if ex.file == path.name:
                    return f"{path}: not shown: {ex.why}"
        return f"No memory named {target!r} (looked in {len(self.dirs)} dir(s))."

    def excluded(self, project: str | None = None) -> list[Result]:
        """Files of the dirs that are not searched (unparseable, notes), each with why."""
        return [
            {
                "file": str(md.path / ex.file),
                "dir": label(md),
                "kind": ex.kind,
                "why": ex.why,
            }
            for md in self._selected(project)
            for ex in self.indexes[md.real_path].excluded()
        ]

    # --- results --------------------------------------------------------------------------------
    def result(self, hit: Hit) -> Result:
        """One hit as the CLI's `--json` and the MCP tools give it. Its texts are masked
        (memoryd.model.secrets.mask) here, where every output of a hit passes, whatever the
        index holds; `show` masks the memory's text the same way."""
        row = hit.row
        now = self.clock()
        age = max(0, int((now - row.date) // DAY))
        unconfirmed = row.date < now - self.stale_after
        flags = [f"unconfirmed {age} d"] if unconfirmed else []
        flags += list(row.flags)
        if row.hidden:
            flags.append(f"{HIDDEN} ({row.hidden})")
        out: Result = {
            "file": str(hit.md.path / row.file),
            "dir": label(hit.md),
            "dir_path": str(hit.md.path),
            "name": mask(row.name or row.file.removesuffix(".md")),
            "description": mask(row.description),
            "type": row.type,
            "tier": row.tier,
            "line": row.line,
            "date": datetime.fromtimestamp(row.date, UTC).date().isoformat(),
            "age_days": age,
            "unconfirmed": unconfirmed,
            "snippet": mask(snippet_text(row.snippet) or row.description),
            "flags": flags,
        }
        if hit.why:
            out["why"] = list(hit.why)
        return out

    def results(self, hits: Iterable[Hit]) -> list[Result]:
        return [self.result(h) for h in hits]


def _window(md: MemoryDir, sizes: tuple[int, int] | None) -> Window | None:
    """How the agent loads this dir's MEMORY.md under these sizes (index.max_lines,
    index.max_chars), as `memoryd dirs` computes it; None: the index's own default."""
    if sizes is None:
        return None
    return (view_kind_of(md.path, md.kind).value, *sizes)


def snippet_text(raw: str) -> str:
    """FTS5's snippet on one line, its matches marked **like this**."""
    return " ".join(raw.replace("\x01", "**").replace("\x02", "**").split())


def _target_path(target: str, cwd: Path | None) -> Path:
    """A FILE|NAME target as an absolute path (relative to `cwd`, else the working folder)."""
    return Path(os.path.abspath((cwd or Path.cwd()) / os.path.expanduser(target)))


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _rel_of(given: str, cwd: Path, root: Path | None) -> tuple[str | None, str]:
    """(the path relative to the repo root, or None when it is outside; the absolute path)."""
    absolute = os.path.normpath(os.path.join(cwd, os.path.expanduser(given)))
    real = str(_real(Path(absolute)))
    if root is not None:
        for candidate in (real, absolute):
            rel = os.path.relpath(candidate, root)
            if rel != ".." and not rel.startswith("../") and not os.path.isabs(rel):
                return ("" if rel == "." else rel.replace(os.sep, "/")), absolute
    return None, absolute


def _touching(
    index: DirIndex, given: str, cwd: Path, root: Path | None
) -> list[tuple[int, Row, str]]:
    """The memories of one dir whose path references touch one file or folder."""
    rel, absolute = _rel_of(given, cwd, root)
    out: list[tuple[int, Row, str]] = []
    exact = [absolute] + ([rel] if rel else [])
    for row, ref, _ in index.by_refs("path", "norm", exact):
        out.append((EXACT, row, f"cites {ref}"))
    if not rel:
        return out
    parts = rel.split("/")
    folders = ["/".join(parts[:n]) for n in range(1, len(parts))]
    for row, ref, _ in index.by_refs("path", "norm", folders):
        out.append((FOLDER, row, f"cites its folder {ref}"))
    if root is not None and os.path.isdir(os.path.join(root, rel)):
        for row, ref in index.path_refs_under([rel]):
            out.append((INSIDE, row, f"cites {ref} inside it"))
    # A memory citing a file of this name at a place where none is now: the file moved here
    # (the dream pass's MOVED; a bare file name counts as this file too).
    here = root is not None and os.path.isfile(os.path.join(root, rel))
    if here and root is not None:
        for row, ref, norm in index.by_refs("path", "base", [parts[-1]]):
            if norm in (rel, absolute):
                continue
            if "/" not in norm or not os.path.lexists(os.path.join(root, norm)):
                out.append((MOVED, row, f"cites {ref}, now at {rel}"))
    return out
