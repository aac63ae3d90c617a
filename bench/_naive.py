"""The naive baseline the index and daemon benches measure memoryd against: python-frontmatter
on every file, and a whole MEMORY.md regenerated and written on every change."""

import os
import sys
from pathlib import Path
from typing import Any

import _synth

from memoryd.model.index import INDEX_NAME

try:
    import frontmatter
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("python-frontmatter is missing: pip install -e '.[bench]'")


def naive_names(path: Path) -> list[str]:
    return sorted(
        n for n in os.listdir(path) if n.endswith(".md") and not n.startswith(("MEMORY", "."))
    )


def naive_load_all(path: Path) -> tuple[list[Any], int]:
    """python-frontmatter on every *.md: the Posts, and how many files it could not load."""
    posts, failed = [], 0
    for name in naive_names(path):
        try:
            posts.append(frontmatter.load(path / name))
        except Exception:  # a naive tool skips what it cannot parse
            failed += 1
    return posts, failed


def naive_rebuild(path: Path, out_dir: Path) -> None:
    """Parse every file, regenerate the whole index, write it (temp, fsync, rename)."""
    lines = [f"# {path.name} Memory", ""]
    for name in naive_names(path):
        try:
            post = frontmatter.load(path / name)
        except Exception:
            continue
        label = str(post.metadata.get("name") or name.removesuffix(".md"))
        description = " ".join(str(post.metadata.get("description") or "").split())
        lines.append(f"- [{label}]({name}){_synth.SEPARATOR}{description}")
    tmp = out_dir / f".{INDEX_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, out_dir / INDEX_NAME)
    dir_fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
