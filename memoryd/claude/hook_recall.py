"""The pre-tool-use hook: the memories citing the file the agent is about to touch, as a short
text for the model (memoryd.claude.hooks).

`memoryd recall --path FILE` cut down to what a hook affords on every file: the project's
memory dirs by their standard places (no discovery), their search indexes read as they are
(others keep them current), citations of the file or a folder above it only. Each memory is
said once per session, a few at most, within MAX_CHARS, secrets masked.
"""

import hashlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

from memoryd.claude.hookio import abs_path, tool_path

MAX_MEMORIES = 3
MAX_CHARS = 1200  # ~300 tokens
KEY_LINES = 2
LINE_CHARS = 160
MEMORY_MAX_BYTES = 256 * 1024  # of a memory file, read for its key lines
SEEN_FOLDER = "hook-sessions"
WALK_MAX = 64  # folders climbed to find a repo root


class Found(NamedTuple):
    path: str  # the memory file
    name: str
    description: str
    ref: str  # the reference as written
    strength: int  # 0: cites the file; n: cites the folder n levels above it


def repo_root(path: str) -> str | None:
    """The nearest folder at or above `path` with `.git` or `.claude/` (memoryd's repo)."""
    folder = path
    for _ in range(WALK_MAX):
        if os.path.lexists(os.path.join(folder, ".git")) or os.path.isdir(
            os.path.join(folder, ".claude")
        ):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    return None


def projects_dir(data: dict[str, Any]) -> str:
    """`<claude home>/projects`: where the session's transcript is, else the default home."""
    transcript = abs_path(data, "transcript_path")
    if transcript is not None:
        return os.path.dirname(os.path.dirname(transcript))
    home = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.expanduser("~/.claude")
    return os.path.join(home, "projects")


def auto_memory_dir(data: dict[str, Any]) -> tuple[str, str] | None:
    """The session's auto-memory dir and the repo root it is keyed by (Claude Code's: the
    canonical git root of the cwd, a worktree's main work tree, else the cwd)."""
    cwd, transcript = abs_path(data, "cwd"), abs_path(data, "transcript_path")
    if cwd is None:
        return None
    if transcript is not None and os.path.isdir(os.path.join(cwd, ".git")):
        return os.path.join(os.path.dirname(transcript), "memory"), cwd  # no discovery needed
    from pathlib import Path

    from memoryd.discover.look import canonical_root
    from memoryd.discover.slugs import slugify

    root = str(canonical_root(Path(cwd)))
    return os.path.join(projects_dir(data), slugify(root), "memory"), root


def memory_dirs(file: str, data: dict[str, Any]) -> list[tuple[str, str]]:
    """The project's memory dirs that exist, each with the repo root its references are
    relative to: the auto-memory dir, and the repo's `.claude/memory/` and agent memories."""
    found: list[tuple[str, str]] = []
    auto = auto_memory_dir(data)
    if auto is not None:
        found.append(auto)
    root = repo_root(os.path.dirname(file))
    if root is not None:
        claude = os.path.join(root, ".claude")
        found.append((os.path.join(claude, "memory"), root))
        for group in ("agent-memory", "agent-memory-local"):
            base = os.path.join(claude, group)
            try:
                names = sorted(os.listdir(base))
            except OSError:
                continue
            found += [(os.path.join(base, n), root) for n in names if not n.startswith(".")]
    unique: dict[str, tuple[str, str]] = {}
    for folder, base in found:
        if os.path.isdir(folder):
            unique.setdefault(os.path.realpath(folder), (folder, base))
    return list(unique.values())


def _wanted(file: str, root: str) -> list[tuple[str, int]]:
    """The reference forms that cite `file`: itself (absolute, real, relative to the repo
    root), then each folder above it inside the repo, nearest first."""
    forms = [(file, 0), (os.path.realpath(file), 0)]
    real_root = os.path.realpath(root)
    for candidate in (os.path.realpath(file), file):
        for base in (real_root, root):
            rel = os.path.relpath(candidate, base)
            if rel == "." or rel.startswith("..") or os.path.isabs(rel):
                continue
            parts = rel.replace(os.sep, "/").split("/")
            forms.append(("/".join(parts), 0))
            forms += [("/".join(parts[:n]), len(parts) - n) for n in range(len(parts) - 1, 0, -1)]
            return list(dict.fromkeys(forms))
    return list(dict.fromkeys(forms))


def cited(folder: str, root: str, file: str, state: str) -> Iterator[Found]:
    """The memories of one dir whose path references cite `file` or a folder above it, read
    from the dir's search index as it is (none when there is no index yet)."""
    import sqlite3

    real = os.path.realpath(folder)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    db = os.path.join(state, "recall", f"{key}.sqlite")
    if not os.path.isfile(db):
        return
    forms = dict(_wanted(file, root))
    marks = ", ".join("?" for _ in forms)
    # The store's own indexes, named: the planner has no statistics, and a scan of `cites`
    # at 10,000 memories is most of a hook's time.
    sql = (
        "SELECT f.file, f.name, f.description, r.ref, r.norm "  # noqa: S608
        "FROM refs r INDEXED BY refs_norm JOIN cites c INDEXED BY cites_rid ON c.rid = r.rid "
        "JOIN files f ON f.id = c.id "
        f"WHERE r.norm IN ({marks}) AND r.kind = 'path' AND f.kind = 'memory'"
    )
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
    try:
        rows = conn.execute(sql, list(forms)).fetchall()
    finally:
        conn.close()
    for name, title, description, ref, norm in rows:
        yield Found(os.path.join(folder, name), title or name[:-3], description, ref, forms[norm])


def _seen_file(data: dict[str, Any], state: str) -> str | None:
    session = data.get("session_id")
    if not isinstance(session, str) or not session or len(session) > 128:
        return None
    if not all(c.isalnum() or c in "-_" for c in session):
        return None
    return os.path.join(state, SEEN_FOLDER, f"{session}.seen")


def _read_seen(path: str | None) -> set[str]:
    if path is None:
        return set()
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return set(f.read(4 * 1024 * 1024).splitlines())
    except OSError:
        return set()


def _note_seen(path: str | None, files: list[str]) -> None:
    if path is None or not files:
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, "".join(f + "\n" for f in files).encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)


def key_lines(path: str, file: str) -> list[str]:
    """The body's lines naming `file`, else its first lines, cut to LINE_CHARS after secrets
    are masked (a cut value no longer looks like one); none for a link or special file."""
    import stat

    from memoryd.model.secrets import mask

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with os.fdopen(fd, "rb", closefd=False) as f:
            text = mask(f.read(MEMORY_MAX_BYTES).decode("utf-8", "replace"))
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = text.removeprefix("\ufeff").splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        lines = lines[end + 1 :] if end else lines
    body = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    base = os.path.basename(file)
    naming = [line for line in body if base in line]
    chosen = (naming or body)[:KEY_LINES]
    return [line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…" for line in chosen]


def render(file: str, found: list[Found], more: int) -> tuple[str, list[str]]:
    """The text for the model, within MAX_CHARS, and the memories it shows."""
    from memoryd.model.display import shown as one_line  # a name with a newline stays one line

    head = f"memoryd: memories that cite {one_line(file)} (read before changing it):"
    parts = [head]
    shown: list[str] = []
    for hit in found:
        title = hit.name + (f" — {hit.description}" if hit.description else "")
        block = [
            f"- {one_line(title)}",
            f"  file: {one_line(hit.path)} (cites {one_line(hit.ref)})",
        ]
        block += [f"  > {one_line(line)}" for line in key_lines(hit.path, file)]
        text = "\n".join(block)
        if len("\n".join(parts)) + len(text) + 1 > MAX_CHARS:
            more += 1
            continue
        parts.append(text)
        shown.append(hit.path)
    if more:
        parts.append(f"({more} more: `memoryd recall --path {file}`)")
    return ("\n".join(parts) if shown else ""), shown


def recall_context(data: dict[str, Any], state: str) -> str:
    """The pre-tool-use hook's text: the memories citing the tool's file not yet said in this
    session ("" when there are none)."""
    file = tool_path(data)
    if file is None or f"{os.sep}.claude{os.sep}" in file:
        return ""  # a memory or a setting itself: its own memories are not recalled
    if file.startswith(projects_dir(data) + os.sep):
        return ""
    hits: dict[str, Found] = {}
    for folder, root in memory_dirs(file, data):
        for hit in cited(folder, root, file, state):
            if hit.path not in hits or hit.strength < hits[hit.path].strength:
                hits[hit.path] = hit
    seen_path = _seen_file(data, state)
    seen = _read_seen(seen_path)
    fresh = sorted(
        (h for h in hits.values() if h.path not in seen), key=lambda h: (h.strength, h.path)
    )
    if not fresh:
        return ""
    picked = fresh[:MAX_MEMORIES]
    text, shown = render(file, picked, len(fresh) - len(picked))
    if not text:
        return ""
    _note_seen(seen_path, shown)
    from memoryd.model.secrets import mask

    return mask(text)
