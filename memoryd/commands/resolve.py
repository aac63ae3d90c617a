"""The one resolver of a memory named on the command line (`show`, `history`, `explain`, `ack`,
`forget`, `trash restore`).

A key with a `/` or `~` is a path; else a file name (`.md` optional) or a frontmatter `name:`,
looked for in tiers, nearest first: the working folder's memory dir, its repo's, then every
dir. The first tier holding it answers; two candidates there are a usage error listing them."""

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memoryd.discover.finder import discover, memory_dir_at
from memoryd.discover.found import MemoryDir
from memoryd.discover.look import is_repo
from memoryd.errors import MemorydError, UsageError
from memoryd.model.display import shown
from memoryd.runtime import Runtime

HEAD_BYTES = 64 * 1024  # a memory's frontmatter is read from its head only
CANDIDATES_SHOWN = 10


@dataclass(frozen=True)
class Target:
    """A memory file by its dir and name; `md` is None when the folder is gone."""

    folder: Path
    name: str
    md: MemoryDir | None

    @property
    def path(self) -> Path:
        return self.folder / self.name


def is_path(key: str) -> bool:
    """A key naming a path rather than a name: with a folder in it, or a file here."""
    return "/" in key or key.startswith("~") or os.path.isfile(key)


def resolve(
    rt: Runtime,
    key: str,
    dirs: Sequence[Path] = (),
    *,
    cwd: Path | None = None,
    gone: bool = False,
    trashed: bool = False,
) -> Target:
    """The one memory `key` names; MemorydError when none, UsageError when ambiguous. With
    `gone`, names the trash or the version store know count too (and dirs deleted whole);
    with `trashed`, only the names of files to restore."""
    here = Path(os.path.abspath(cwd or Path.cwd()))
    if is_path(key):
        return _at_path(rt, Path(here, os.path.expanduser(key)))
    looked = 0
    for tier in _tiers(rt, dirs, here, gone or trashed):
        looked += len(tier)
        found = _restorable(rt, tier, key) if trashed else _matches(rt, tier, key, gone)
        if len(found) == 1:
            return found[0]
        if found:
            listed = "\n".join(f"  {shown(t.path)}" for t in found[:CANDIDATES_SHOWN])
            more = len(found) - CANDIDATES_SHOWN
            listed += f"\n  and {more} more" if more > 0 else ""
            raise UsageError(
                f"{key}: {len(found)} memories have that name; name one by its path "
                f"(or the dir to look in):\n{listed}"
            )
    raise MemorydError(
        f"{key}: no memory of that file name or name in the {looked} dir(s) looked in; "
        "name its path, or the dir to look in"
    )


def _at_path(rt: Runtime, path: Path) -> Target:
    """A path's folder (a memory dir when it is one) and file (`.md` added to a path to
    nothing)."""
    path = Path(os.path.normpath(path))
    if not path.name.endswith(".md") and not os.path.lexists(path):
        path = path.with_name(f"{path.name}.md")  # a memory is a `.md` file: a gone one too
    folder = path.parent
    if os.path.isdir(folder):
        folder = Path(os.path.realpath(folder))
        try:
            return Target(folder, path.name, memory_dir_at(folder, rt.config))
        except MemorydError:
            return Target(folder, path.name, None)
    return Target(folder, path.name, None)


def _tiers(rt: Runtime, dirs: Sequence[Path], here: Path, gone: bool) -> list[list[Target]]:
    """The dirs to look in, nearest first, each tier without those before (names empty)."""
    if dirs:
        there = [d.expanduser() for d in dirs if os.path.lexists(d.expanduser())]
        every = discover(rt.config, there) if there else []  # a gone one: its versions
        wanted = {Path(os.path.realpath(d.expanduser())) for d in dirs}
    else:
        from memoryd.daemon.housekeeping import known_dirs

        every = [*discover(rt.config), *known_dirs(rt)]
        wanted = set()
    real_here = Path(os.path.realpath(here))
    mine = [md for md in every if md.real_path == real_here]
    if not mine and not dirs and (here / "MEMORY.md").is_file():
        mine = [memory_dir_at(real_here, rt.config)]
    repo = repo_of(real_here)
    near: list[MemoryDir] = []
    if repo is not None and not dirs:
        near = [*discover(rt.config, [repo]), *(md for md in every if md.repo_root == repo)]
    out: list[list[Target]] = []
    seen: set[Path] = set()
    for group in (mine, near, every):
        tier = [Target(md.real_path, "", md) for md in _unique(group, seen)]
        if tier:
            out.append(tier)
    if gone:  # dirs deleted whole (or no longer discovered) whose versions are kept
        from memoryd.versions import kept as kept_store

        kept = [
            Target(folder, "", None)
            for folder in (rt.versions or kept_store.for_runtime(rt)).known_dirs()
            if folder not in seen
            and (not wanted or any(folder == w or folder.is_relative_to(w) for w in wanted))
        ]
        if kept:
            out[-1:] = [[*(out[-1] if out else []), *kept]]
    return out


def _unique(group: Iterable[MemoryDir], seen: set[Path]) -> list[MemoryDir]:
    out = []
    for md in group:
        if md.real_path not in seen:
            seen.add(md.real_path)
            out.append(md)
    return out


def repo_of(folder: Path) -> Path | None:
    """The innermost repo (a folder with `.git` or `.claude/`) at or above `folder`."""
    for candidate in (folder, *folder.parents):
        if is_repo(candidate):
            return candidate
    return None


def _matches(rt: Runtime, tier: list[Target], key: str, gone: bool) -> list[Target]:
    """The files of the tier's dirs `key` names: by file name first, by `name:` else."""
    names = [key] if key.endswith(".md") else [f"{key}.md", key]
    by_file: list[Target] = []
    for t in tier:
        known = _gone_names(rt, t) if gone else set()
        for name in names:
            if _is_file(t.folder / name) or name in known:
                by_file.append(Target(t.folder, name, t.md))
                break
    if by_file:
        return by_file
    wanted = key.strip().casefold()
    return [
        Target(t.folder, name, t.md)
        for t in tier
        if t.md is not None
        for name in _named(t.folder, lambda n: n.casefold() == wanted)
    ]


def _restorable(rt: Runtime, tier: list[Target], key: str) -> list[Target]:
    """The files of the tier's dirs `key` names that `trash restore` could bring back."""

    from memoryd.trash import manifest as trash
    from memoryd.versions import kept, listing

    store = rt.versions or kept.for_runtime(rt)
    names = [key] if key.endswith(".md") else [f"{key}.md", key]
    out = []
    for t in tier:
        known = {d.name for d in listing.deleted(store, t.folder)}
        if t.md is not None:
            try:
                found = trash.contents(t.folder).entries
            except MemorydError:
                found = []
            known |= {e.record.original_name for e in found if not e.restored_as}
        first = next((name for name in names if name in known), None)
        if first is not None:
            out.append(Target(t.folder, first, t.md))
    return out


def _gone_names(rt: Runtime, t: Target) -> set[str]:
    """Names the dir's trash manifests or kept versions know (files gone from it now)."""
    from memoryd.trash import lineage
    from memoryd.trash import manifest as trash
    from memoryd.versions import kept

    out: set[str] = set()
    if t.md is not None:
        with contextlib.suppress(MemorydError):
            out |= lineage.names_in(trash.contents(t.folder).entries)
    store = rt.versions or kept.for_runtime(rt)
    out |= {rec.f for rec in store.records(t.folder)}
    return out


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _named(folder: Path, fits: Callable[[str], bool]) -> list[str]:
    """The memory files of the folder whose frontmatter `name:` fits."""
    from memoryd.model.memfile import Summary, parse_summary

    out = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".md"))
    except OSError:
        return []
    for name in names:
        head = _head(folder / name)
        if head is None:
            continue
        found = parse_summary(name, head, max_file_bytes=len(head) + 1)
        if isinstance(found, Summary) and found.name and fits(found.name):
            out.append(name)
    return out


def _head(path: Path) -> bytes | None:
    """The first bytes of a regular file (never a link, FIFO or device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, HEAD_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
