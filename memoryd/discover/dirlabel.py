"""The one label a person knows a memory dir by, in every command: the project's repo for Claude's
per-project memory, the repo (and agent) for a repo's `.claude/` dirs, `agent/<name>` for the
user's agents, `<repo>/<path>` for a dir named inside a repo, else the path with `~`."""

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.model.display import shown
from memoryd.model.humanize import short_path

if TYPE_CHECKING:
    from memoryd.config import Config
    from memoryd.discover.found import MemoryDir

_NOT_SLUG = re.compile(r"[^A-Za-z0-9]")


def _project_slug(parts: tuple[str, ...]) -> str | None:
    """The slug of Claude's per-project memory dir `<home>/projects/<slug>/memory`."""
    if len(parts) >= 3 and parts[-1] == "memory" and parts[-3] == "projects":
        return parts[-2]
    return None


def dir_label(path: str, home: str | None, root: str | Path | None = None) -> str:
    """A memory dir as a person names it; `root`: the repo root discovery found for it (a
    per-project dir's slug spells the path only lossily)."""
    parts = Path(path).parts
    slug = _project_slug(parts)
    if slug is not None:
        if root is not None and Path(root).name:
            return shown(Path(root).name)
        # The slug is lossy (every `/`, `.`, `-` is `-`): cut only what the home folder, or a
        # folder above it, spells, the longest first.
        for base in [Path(home), *Path(home).parents][:-1] if home else []:
            prefix = _NOT_SLUG.sub("-", str(base)) + "-"
            if slug.startswith(prefix) and len(slug) > len(prefix):
                return shown(slug[len(prefix) :])
        return shown(slug)
    if ".claude" in parts:
        at = len(parts) - 1 - parts[::-1].index(".claude")
        owner, rest = Path(*parts[:at]), parts[at + 1 :]
        user_level = home is not None and str(owner) == str(home).rstrip("/")
        if len(rest) == 2 and rest[0] in ("agent-memory", "agent-memory-local"):
            return shown(f"agent/{rest[1]}" if user_level else f"{owner.name}/{rest[1]}")
        if rest == ("memory",) and not user_level:
            return shown(owner.name)
        if rest and not user_level:
            return shown("/".join((owner.name, *rest)))
    if root is None and len(parts) >= 2 and parts[-2] == "agent-memory":
        return shown(f"agent/{parts[-1]}")  # a Claude home elsewhere (CLAUDE_CONFIG_DIR)
    if root is not None and Path(path).is_relative_to(root) and Path(root).name:
        inside = Path(path).relative_to(root)  # a dir of the repo named on its own
        return shown("/".join((Path(root).name, *inside.parts)))
    short = short_path(path, home)
    if short.startswith("~") or len(parts) <= 4:
        return short
    return shown("…/" + "/".join(parts[-2:]))  # a folder of its own: its name and its parent's


def label(md: "MemoryDir", home: str | None = None) -> str:
    """A MemoryDir's label (the home folder: the user's, unless given)."""
    home = home if home is not None else str(Path.home())
    if md.kind == "agent":
        return shown(f"agent/{md.label}")
    return dir_label(str(md.path), home, md.repo_root)


def roots(paths: Iterable[str], config: "Config") -> dict[str, str]:
    """The repo root of each existing dir among `paths` as discovery finds it, for labels of
    paths only (audit rows, the heartbeat); a repo's `.claude/` dirs need none."""
    out: dict[str, str] = {}
    for path in set(paths):
        parts = Path(path).parts
        if (_project_slug(parts) is None and ".claude" in parts) or not os.path.isdir(path):
            continue
        from memoryd.discover.finder import (
            memory_dir_at,  # only with such a dir: `status` stays light
        )
        from memoryd.errors import MemorydError

        try:
            md = memory_dir_at(Path(path), config)
        except MemorydError:
            continue
        if md.repo_root is not None:
            out[path] = str(md.repo_root)
    return out
