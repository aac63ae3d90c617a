"""A snapshot of a repo root (files, dirs, basenames, source tokens), built once per pass."""

import os
import stat
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

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

# Every byte that cannot be part of an ASCII identifier becomes a space, so that one
# translate + split (both in C) cuts a file into identifier runs; short runs and runs that
# start with a digit are dropped once, from the set of distinct runs.
_IDENT_BYTES: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_SPACE_OUT_NON_IDENT: Final = bytes(c if c in _IDENT_BYTES else 0x20 for c in range(256))
_MIN_TOKEN_LEN: Final = 3
_BINARY_PROBE_BYTES: Final = 8192


def _is_text_source(name: str) -> bool:
    if name in TEXT_FILENAMES:
        return True
    _, dot, ext = name.rpartition(".")
    return bool(dot) and ext.lower() in TEXT_EXTENSIONS


def _read_runs(path: str, size: int, max_bytes: int) -> list[bytes]:
    """Identifier runs of one file, or none when it is too big, binary or unreadable."""
    if size > max_bytes:
        return []
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        return []
    if len(data) > max_bytes or b"\0" in data[:_BINARY_PROBE_BYTES]:
        return []
    return data.translate(_SPACE_OUT_NON_IDENT).split()


@dataclass(frozen=True)
class RepoIndex:
    """What exists under a repo root, for checking memories' references against it.

    ``files`` and ``dirs`` are posix paths relative to ``root``. ``by_basename`` maps a file
    name to every file with that name, shortest path first, then lexicographic. ``opaque``
    holds the folders that exist but were not looked inside (skipped names, symlinks to
    folders or anything else, unreadable folders): nothing can be said about paths below them.
    ``complete`` is False when the walk stopped at ``max_files`` or the root could not be
    listed, so a path not seen may still exist.
    """

    root: Path
    files: frozenset[str]
    dirs: frozenset[str]
    top_level: frozenset[str]
    by_basename: Mapping[str, tuple[str, ...]]
    tokens: frozenset[str]
    opaque: frozenset[str] = field(default=frozenset())
    complete: bool = True

    @classmethod
    def build(
        cls, root: Path, *, max_files: int = 200_000, max_token_file_bytes: int = 512 * 1024
    ) -> "RepoIndex":
        """Walk ``root`` once (no symlinks followed) and index it.

        Raises ``NotADirectoryError`` or ``FileNotFoundError`` when ``root`` is not a folder;
        anything unreadable below it is skipped.
        """
        if not root.is_dir():
            if root.exists():
                raise NotADirectoryError(f"repo root is not a folder: {root}")
            raise FileNotFoundError(f"repo root does not exist: {root}")
        files: list[str] = []
        dirs: list[str] = []
        top_level: list[str] = []
        opaque: list[str] = []
        runs: set[bytes] = set()
        complete = True
        # Depth-first with sorted entries, so that a walk cut short by max_files always
        # keeps the same files.
        stack: list[tuple[str, str]] = [(os.fspath(root), "")]
        while stack and complete:
            abs_dir, rel_dir = stack.pop()
            try:
                with os.scandir(abs_dir) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                if rel_dir:
                    opaque.append(rel_dir)
                else:
                    complete = False
                continue
            subdirs: list[tuple[str, str]] = []
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if not rel_dir:
                    top_level.append(entry.name)
                try:
                    is_link = entry.is_symlink()
                    is_dir = not is_link and entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    dirs.append(rel)
                    if entry.name in SKIP_DIRS:
                        opaque.append(rel)
                    else:
                        subdirs.append((entry.path, rel))
                    continue
                if len(files) >= max_files:
                    complete = False
                    break
                files.append(rel)
                if is_link:
                    # Counted by name, never entered: it may point outside the repo or loop.
                    opaque.append(rel)
                    continue
                if _is_text_source(entry.name):
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        runs.update(_read_runs(entry.path, st.st_size, max_token_file_bytes))
            stack.extend(reversed(subdirs))

        grouped: dict[str, list[str]] = {}
        for rel in files:
            grouped.setdefault(rel.rpartition("/")[2], []).append(rel)
        by_basename = {
            name: tuple(sorted(paths, key=lambda p: (len(p), p)))
            for name, paths in sorted(grouped.items())
        }
        return cls(
            root=root,
            files=frozenset(files),
            dirs=frozenset(dirs),
            top_level=frozenset(top_level),
            by_basename=types.MappingProxyType(by_basename),
            tokens=frozenset(
                r.decode("ascii") for r in runs if len(r) >= _MIN_TOKEN_LEN and not r[:1].isdigit()
            ),
            opaque=frozenset(opaque),
            complete=complete,
        )

    def has_path(self, rel: str) -> bool:
        """True when ``rel`` (relative, posix, optional ``./`` and trailing ``/``) exists."""
        norm = normalize_rel(rel)
        return norm is not None and (norm == "" or norm in self.files or norm in self.dirs)

    def under_opaque(self, rel: str) -> bool:
        """True when ``rel`` lies strictly inside a folder the walk did not enter."""
        norm = normalize_rel(rel)
        if not norm:
            return False
        parts = norm.split("/")
        return any("/".join(parts[:i]) in self.opaque for i in range(1, len(parts)))


def normalize_rel(rel: str) -> str | None:
    """``rel`` as a clean posix relative path ("" for the root), or None if it climbs out."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)
