"""A snapshot of a repo root (files, dirs, basenames, source tokens), built once per pass."""

import functools
import os
import stat
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from memoryd.indexing.scan import TRASH_DIR
from memoryd.model.agentview import INDEX_NAME
from memoryd.model.sealed import seal, unseal
from memoryd.paths import open_regular, read_open

# Folders that hold generated or vendored trees: walking them is slow and their contents say
# nothing about whether a memory's reference to the project's own code is still true.
SKIP_DIRS: Final = frozenset(
    {
        ".git",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "dist",
        "build",
        "target",
        ".next",
        ".cache",
    }
)

# Memory dirs are left out of the snapshot: a memory's own text (or its copy in the trash, or a
# log quoting it) is no evidence that the code it cites exists. As discovery finds them: a folder
# of `.claude/` with one of these names, any folder below the root holding a MEMORY.md, `.trash/`.
CLAUDE_MEMORY_FOLDERS: Final = frozenset({"memory", "agent-memory", "agent-memory-local", "logs"})

# Files whose identifiers feed the token index (lower-case extension without the dot).
TEXT_EXTENSIONS: Final = frozenset(
    {
        "py", "pyi", "ipynb", "ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs", "vue",
        "svelte", "astro", "rs", "go", "java", "kt", "kts", "scala", "groovy", "gradle", "c",
        "h", "cc", "cpp", "cxx", "hh", "hpp", "hxx", "m", "mm", "cs", "fs", "swift", "rb",
        "php", "pl", "pm", "lua", "r", "jl", "dart", "ex", "exs", "erl", "hrl", "hs", "ml",
        "mli", "elm", "clj", "cljs", "zig", "nim", "sh", "bash", "zsh", "fish", "ps1", "bat",
        "sql", "css", "scss", "sass", "less", "html", "htm", "xml", "md", "mdx", "rst", "txt",
        "json", "jsonc", "json5", "toml", "yaml", "yml", "ini", "cfg", "conf", "env", "proto",
        "graphql", "gql", "tf", "hcl", "cmake", "mk", "properties", "lock",
    }
)  # fmt: skip
TEXT_FILENAMES: Final = frozenset(
    {"Makefile", "GNUmakefile", "Dockerfile", "Justfile", "Rakefile", "Gemfile", "Procfile"}
)

# Every byte that cannot be in an ASCII identifier becomes a space: one translate + split (in C)
# cuts a file into identifier runs (short ones and those starting with a digit go later, once).
_IDENT_BYTES: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_SPACE_OUT_NON_IDENT: Final = bytes(c if c in _IDENT_BYTES else 0x20 for c in range(256))
_MIN_TOKEN_LEN: Final = 3
_BINARY_PROBE_BYTES: Final = 8192


# Where a token is shown as found (``RepoIndex.token_file``), a person wants the code, not a page
# that mentions it: code first, then markup and data, then prose (anything else is code).
_MARKUP_EXTENSIONS: Final = frozenset(
    {
        "html", "htm", "xml", "svg", "css", "scss", "sass", "less", "json", "jsonc", "json5",
        "yaml", "yml", "toml", "ini", "cfg", "conf", "env", "properties", "lock",
    }
)  # fmt: skip
_PROSE_EXTENSIONS: Final = frozenset({"md", "mdx", "rst", "txt"})


def _evidence_rank(rel: str) -> int:
    _, dot, ext = rel.rpartition(".")
    ext = ext.lower() if dot and "/" not in ext else ""
    return 2 if ext in _PROSE_EXTENSIONS else 1 if ext in _MARKUP_EXTENSIONS else 0


def _is_memory_folder(parent: str, name: str) -> bool:
    """A folder (or a link to one) that is memory by its name alone."""
    return name == TRASH_DIR or (parent == ".claude" and name in CLAUDE_MEMORY_FOLDERS)


def _is_text_source(name: str) -> bool:
    if name in TEXT_FILENAMES:
        return True
    _, dot, ext = name.rpartition(".")
    return bool(dot) and ext.lower() in TEXT_EXTENSIONS


def _read_runs(path: str, st: os.stat_result, max_bytes: int) -> list[bytes] | None:
    """Identifier runs of one file (`st`: the walk's lstat): none when too big or binary, None
    when unreadable (read again by the next build). Never follows a link or waits on a FIFO."""
    if st.st_size > max_bytes:
        return []
    try:
        fd, _ = open_regular(path, follow=False, looked=st)
    except OSError:
        return None
    try:
        data = read_open(fd, max_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > max_bytes or b"\0" in data[:_BINARY_PROBE_BYTES]:
        return []
    return data.translate(_SPACE_OUT_NON_IDENT).split()


# What the walk reports, in walk order (see _walk).
_TOP, _DIR, _OPAQUE, _FILE, _LINK, _SOURCE, _INCOMPLETE, _MEMORY = range(8)


def _walk(root: Path, max_files: int) -> Iterator[tuple[int, str, str, os.stat_result | None]]:
    """Walk ``root`` once, depth-first in name order (a walk cut at ``max_files`` keeps the
    same files; two walks of one tree say the same), no symlinks followed.

    Yields (what, relative path, absolute path, stat of a text source or None): each top-level
    name, folder (then ``_OPAQUE`` when not entered) and file. ``_MEMORY`` names a memory dir,
    not entered: instead of its ``_DIR``/``_LINK``, or after the ``_DIR`` of a folder found to
    hold a MEMORY.md. ``_INCOMPLETE`` ends a walk cut at ``max_files`` or of an unlistable root.
    """
    files = 0
    stack: list[tuple[str, str]] = [(os.fspath(root), "")]
    while stack:
        abs_dir, rel_dir = stack.pop()
        try:
            with os.scandir(abs_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            if not rel_dir:
                yield _INCOMPLETE, "", "", None
                return
            yield _OPAQUE, rel_dir, abs_dir, None
            continue
        if rel_dir and any(entry.name == INDEX_NAME for entry in entries):
            yield _MEMORY, rel_dir, abs_dir, None
            continue
        parent = rel_dir.rpartition("/")[2]
        subdirs: list[tuple[str, str]] = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if not rel_dir:
                yield _TOP, entry.name, entry.path, None
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if (is_dir or is_link) and _is_memory_folder(parent, entry.name):
                yield _MEMORY, rel, entry.path, None
                continue
            if is_dir:
                yield _DIR, rel, entry.path, None
                if entry.name in SKIP_DIRS:
                    yield _OPAQUE, rel, entry.path, None
                else:
                    subdirs.append((entry.path, rel))
                continue
            if files >= max_files:
                yield _INCOMPLETE, "", "", None
                return
            files += 1
            if is_link:
                # Counted by name, never entered: it may point outside the repo or loop.
                yield _LINK, rel, entry.path, None
            elif _is_text_source(entry.name):
                try:
                    st: os.stat_result | None = entry.stat(follow_symlinks=False)
                except OSError:
                    st = None
                yield _SOURCE, rel, entry.path, st
            else:
                yield _FILE, rel, entry.path, None
        stack.extend(reversed(subdirs))


def _stamp(what: int, rel: str, st: os.stat_result | None) -> tuple[object, ...]:
    if st is None:
        return (what, rel)
    return (what, rel, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


Stamp = tuple[int, int, int, int, int]  # inode, size, mtime_ns, ctime_ns, mode

# A source modified (or given its mtime) this recently may be written again within the same
# timestamp tick, so its tokens are not kept for the next build (git's "racily clean" files).
_RACY_NS: Final = 2_000_000_000
_NEVER: Final[Stamp] = (0, -1, 0, 0, 0)  # a stamp no file has: its source is read next time


@dataclass(frozen=True, slots=True)
class SourceTokens:
    """The identifier runs of every text source a build read, for the next build to reuse
    (it reads again only sources whose stamp changed; between processes: ``dump_sources``).

    ``files``: relative path -> (stat stamp, distinct runs joined by spaces: a set per file
    would hold ~25 MB for 5,000 files); ``tokens``: what the index keeps of their union.
    """

    max_bytes: int  # the size cap the runs were read under
    tokens: frozenset[str]
    files: Mapping[str, tuple[Stamp, bytes]]


_SOURCES_HEADER: Final = ("memoryd repo tokens", 1)


def dump_sources(root: Path, sources: SourceTokens) -> bytes:
    rels = tuple(sources.files)
    stamps = tuple(sources.files[r][0] for r in rels)
    runs = tuple(sources.files[r][1] for r in rels)
    payload = (os.fspath(root), sources.max_bytes, tuple(sources.tokens), rels, stamps, runs)
    return seal(_SOURCES_HEADER, payload)


def load_sources(root: Path, data: bytes | None) -> SourceTokens | None:
    """What ``dump_sources`` wrote for ``root``; None for no file, a damaged one or another root."""
    payload: Any = unseal(_SOURCES_HEADER, data) if data else None
    try:
        saved_root, max_bytes, tokens, rels, stamps, runs = payload
        if saved_root != os.fspath(root) or not isinstance(max_bytes, int):
            return None
        if not all(isinstance(t, str) for t in tokens):
            return None
        files = dict(zip(rels, zip(stamps, runs, strict=True), strict=True))
        for rel, (stamp, kept) in files.items():  # as a build makes them, or no cache at all
            if not (
                isinstance(rel, str)
                and isinstance(kept, bytes)
                and isinstance(stamp, tuple)
                and len(stamp) == 5
                and all(isinstance(v, int) for v in stamp)
            ):
                return None
        return SourceTokens(max_bytes, frozenset(tokens), files)
    except (TypeError, ValueError):
        return None


def _runs_of(
    rel: str, path: str, st: os.stat_result, max_bytes: int, previous: SourceTokens | None
) -> tuple[Stamp, "set[bytes] | bytes"]:
    """A source's stamp and distinct runs: the previous build's (joined) if unchanged, else read."""
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    if previous is not None:
        kept = previous.files.get(rel)
        if kept is not None and kept[0] == stamp:
            return stamp, kept[1]
    runs = _read_runs(path, st, max_bytes)
    if runs is None:
        return _NEVER, set()
    return stamp, set(runs)


@dataclass(frozen=True)
class RepoIndex:
    """What exists under a repo root, for checking memories' references against it.

    Paths are posix, relative to ``root``; ``by_basename``: name -> files, shortest first.
    ``opaque``: what exists but was not entered (skipped names, links, unreadable folders):
    nothing is said below it. ``complete`` is False when the walk was cut or the root unlistable.
    ``signature`` hashes the names, kinds and source stats seen (0: not built from a disk).
    Memory dirs (``memory_dirs``) are in no other field: memory is no evidence of code.
    """

    root: Path
    files: frozenset[str]
    dirs: frozenset[str]
    top_level: frozenset[str]
    by_basename: Mapping[str, tuple[str, ...]]
    tokens: frozenset[str]
    opaque: frozenset[str] = field(default=frozenset())
    complete: bool = True
    signature: int = field(default=0, compare=False)
    memory_dirs: frozenset[str] = field(default=frozenset())

    # Kept for the next build, not part of what the index says.
    sources: SourceTokens | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        root: Path,
        *,
        max_files: int = 200_000,
        max_token_file_bytes: int = 512 * 1024,
        previous: SourceTokens | None = None,
    ) -> "RepoIndex":
        """Walk ``root`` and index it, reading again only the sources of ``previous`` (an
        earlier build's) whose stamp changed. Raises NotADirectoryError or FileNotFoundError
        when ``root`` is no folder; anything unreadable below it is skipped."""
        if not root.is_dir():
            if root.exists():
                raise NotADirectoryError(f"repo root is not a folder: {root}")
            raise FileNotFoundError(f"repo root does not exist: {root}")
        if previous is not None and previous.max_bytes != max_token_file_bytes:
            previous = None
        started_ns = time.time_ns()
        # What the walk names, by kind; files are _FILE, _LINK (also opaque) and _SOURCE.
        named: dict[int, list[str]] = {k: [] for k in range(8)}
        files, opaque = named[_FILE], named[_OPAQUE]
        read: list[tuple[str, Stamp, bytes, bool]] = []  # rel, stamp, runs, read now
        words: set[bytes] = set()  # the runs of the sources read now
        stamps: list[tuple[object, ...]] = []
        for what, rel, path, st in _walk(root, max_files):
            stamps.append(_stamp(what, rel, st))
            named[_FILE if what in (_LINK, _SOURCE) else what].append(rel)
            if what == _LINK:
                opaque.append(rel)
            elif what == _SOURCE and st is not None and stat.S_ISREG(st.st_mode):
                stamp, runs = _runs_of(rel, path, st, max_token_file_bytes, previous)
                if max(st.st_mtime_ns, st.st_ctime_ns) >= started_ns - _RACY_NS:
                    stamp = _NEVER  # read again next time
                if isinstance(runs, set):  # joined now: kept as sets, +25 MB peak
                    words.update(runs)
                    read.append((rel, stamp, b" ".join(runs), True))
                else:
                    read.append((rel, stamp, runs, False))
        sources = _merge_sources(read, words, previous, max_token_file_bytes)
        excluded = frozenset(named[_MEMORY])
        return cls(
            root=root,
            files=frozenset(files),
            # A folder found to hold a MEMORY.md was listed as a folder before it was entered.
            dirs=frozenset(named[_DIR]) - excluded,
            top_level=frozenset(named[_TOP]) - excluded,
            by_basename=types.MappingProxyType(_by_basename(files)),
            tokens=sources.tokens,
            opaque=frozenset(opaque),
            complete=not named[_INCOMPLETE],
            signature=hash(tuple(stamps)),
            memory_dirs=excluded,
            sources=sources,
        )

    def has_path(self, rel: str) -> bool:
        """True when ``rel`` (relative, posix, optional ``./`` and trailing ``/``) exists."""
        norm = normalize_rel(rel)
        return norm is not None and (norm == "" or norm in self.files or norm in self.dirs)

    def under_opaque(self, rel: str) -> bool:
        """True when ``rel`` lies inside a folder the walk did not enter, or in a memory dir."""
        norm = normalize_rel(rel)
        if not norm:
            return False
        return self.in_memory_dir(norm) or _has_folder_above(norm, self.opaque)

    def in_memory_dir(self, rel: str) -> bool:
        """True when ``rel`` is or lies in a memory dir of the tree, or in a folder named as one
        (a `.claude/logs/` or `.trash/` the checkout does not hold is still no code)."""
        norm = normalize_rel(rel)
        if not norm:
            return False
        parts = norm.split("/")
        return (
            any(_is_memory_folder(parts[i - 1] if i else "", part) for i, part in enumerate(parts))
            or norm in self.memory_dirs
            or _has_folder_above(norm, self.memory_dirs)
        )

    def token_file(self, token: str) -> str | None:
        """The first source in walk order holding ``token``, code before markup before prose;
        None when none does. Searched in the kept runs when ``explain`` asks: a token-to-file
        map made by every build would cost a pass more than a tenth of its time."""
        if self.sources is None or token not in self.tokens:
            return None
        needle = token.encode("ascii")  # every token is an ASCII identifier
        best: list[str | None] = [None, None, None]  # the first of each rank
        for rel, (_, runs) in self.sources.files.items():
            rank = _evidence_rank(rel)
            if best[rank] is None and _holds_run(runs, needle):
                if rank == 0:
                    return rel
                best[rank] = rel
        return best[1] or best[2]


def _holds_run(runs: bytes, run: bytes) -> bool:
    """Whether ``run`` is one of the space-separated ``runs``."""
    at = runs.find(run)
    while at >= 0:
        end = at + len(run)
        if (at == 0 or runs[at - 1] == 0x20) and (end == len(runs) or runs[end] == 0x20):
            return True
        at = runs.find(run, end)
    return False


def _merge_sources(
    read: list[tuple[str, Stamp, bytes, bool]],
    words: set[bytes],
    previous: SourceTokens | None,
    max_bytes: int,
) -> SourceTokens:
    """The sources of one build (`words`: the runs of those read now); ``previous`` if the same."""
    if (
        previous is not None
        and not any(fresh for _, _, _, fresh in read)
        and len(read) == len(previous.files)
        and all(previous.files[rel][0] == stamp for rel, stamp, _, _ in read)
    ):
        return previous
    words.update(b" ".join([runs for _, _, runs, fresh in read if not fresh]).split())
    tokens = frozenset(
        r.decode("ascii") for r in words if len(r) >= _MIN_TOKEN_LEN and not r[:1].isdigit()
    )
    return SourceTokens(max_bytes, tokens, {rel: (stamp, runs) for rel, stamp, runs, _ in read})


def _has_folder_above(norm: str, folders: frozenset[str]) -> bool:
    """True when a folder in ``folders`` lies strictly above ``norm`` (a normalized path).
    Only prefixes up to the longest folder are looked up: all of them is quadratic in a 1 MiB
    `a/a/a/…` path a memory may hold."""
    if not folders:
        return False
    longest = _longest(folders)
    end = norm.find("/")
    while 0 < end <= longest:
        if norm[:end] in folders:
            return True
        end = norm.find("/", end + 1)
    return False


@functools.lru_cache(maxsize=8)
def _longest(folders: frozenset[str]) -> int:
    return max(map(len, folders), default=0)


def normalize_rel(rel: str) -> str | None:
    """``rel`` as a clean posix relative path ("" for the root), or None if it climbs out."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def _by_basename(files: list[str]) -> dict[str, tuple[str, ...]]:
    """Each base name's paths, shortest first."""
    grouped: dict[str, list[str]] = {}
    for rel in files:
        grouped.setdefault(rel.rpartition("/")[2], []).append(rel)
    return {
        name: tuple(sorted(paths, key=lambda p: (len(p), p)))
        for name, paths in sorted(grouped.items())
    }
