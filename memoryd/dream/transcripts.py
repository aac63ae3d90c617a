"""Consult evidence from Claude Code's session transcripts: the agent's own file tool calls.

Every `<claude_home>/projects/<slug>/*.jsonl` (and a session's `subagents/*.jsonl`) records a
session's tool calls, one JSON object a line. A `Read`, `Edit`, `MultiEdit` or `Write` of a
memory file, a `Grep` or `Glob` naming one file, or a `cat`/`head`/`tail`/`less`/`more`/`bat` of
one in a `Bash` command is the agent consulting that memory (a search over the dir names none;
Claude Code's own frontmatter scan at session start is no tool call).

Every project folder's transcripts are read: a session in a subfolder writes under its own slug.
A call's path (relative ones against the line's `cwd`) is matched by its folder's real path.

Reading is incremental: per transcript the (device, inode, size seen, offset) read to is kept
(`consult_transcript`); a scan reads what was appended since, whole lines only (a torn last
line is read again once finished), from 0 when the file was replaced or shrank, never a file
last written before the consult window, and at most `SCAN_BYTES` (the rest next time; until
then "unsure means kept"). Evidence is kept per memory dir, bounded (`consult_seen`).
"""

import contextlib
import fcntl
import os
import shlex
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.dream.consult import Seen, row_time
from memoryd.model import safejson
from memoryd.paths import ensure_private_dir, open_regular
from memoryd.storage.statedb import Schema, StateDB

FOLDER = "consults"  # in the state dir: the scanners' lock
SCHEMA = Schema(
    "consult_transcripts",
    1,
    """CREATE TABLE consult_transcript (name TEXT PRIMARY KEY, device INTEGER, inode INTEGER,
                                        size INTEGER, offset INTEGER, skipping INTEGER)
                                        WITHOUT ROWID;
       CREATE TABLE consult_seen (dir TEXT NOT NULL, file TEXT NOT NULL, at REAL NOT NULL,
                                  session TEXT NOT NULL, tool TEXT NOT NULL,
                                  source TEXT NOT NULL, PRIMARY KEY (dir, file)) WITHOUT ROWID""",
    ("consult_transcript", "consult_seen"),
)
SCAN_BYTES = 256 * 1024 * 1024  # read per scan at most (the rest is read by the next)
CHUNK_BYTES = 8 * 1024 * 1024  # one read; a line longer than this is skipped, unread
MAX_DIRS = 512  # memory dirs with evidence kept (those consulted longest ago go first)
MAX_FILES_PER_DIR = 20_000  # memories with evidence kept per dir (the oldest go first)

FILE_TOOLS = ("Read", "Edit", "MultiEdit", "Write")
READER_COMMANDS = frozenset({"cat", "head", "tail", "less", "more", "bat"})
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})
_GLOB_CHARS = frozenset("*?[{")


@dataclass(slots=True)
class Harvest:
    """What a scan leaves: evidence per memory dir (real path), and what it could not read."""

    dirs: dict[str, dict[str, Seen]] = field(default_factory=dict)
    # transcript -> [device, inode, size seen, offset read to, 1 if inside a skipped line]
    files: dict[str, list[int]] = field(default_factory=dict)
    bytes_read: int = 0  # by this scan
    unread: dict[str, int] = field(default_factory=dict)  # transcript -> bytes left in the window

    def evidence_for(self, real_dir: Path) -> Mapping[str, Seen]:
        return self.dirs.get(str(real_dir), {})


def load(state_dir: Path) -> Harvest:
    """The saved scan state; none yet is a fresh start (read from 0). A dry run makes none."""
    out = Harvest()
    conn = StateDB.in_state_dir(state_dir).reader(SCHEMA)
    if conn is None:
        return out  # never saved
    files = conn.execute("SELECT * FROM consult_transcript").fetchall()
    rows = conn.execute("SELECT dir, file, at, session, tool, source FROM consult_seen").fetchall()
    for name, *entry in files:
        if all(isinstance(v, int) for v in entry):
            out.files[name] = entry
    for folder, file, *row in rows:
        found = Seen.of(row)
        if found is not None:
            out.dirs.setdefault(folder, {})[file] = found
    return out


def _save(state_dir: Path, harvest: Harvest) -> None:
    """Write the scan state whole, in one transaction."""
    db = StateDB.in_state_dir(state_dir)
    db.ensure(SCHEMA)
    with db.transaction() as conn:
        conn.execute("DELETE FROM consult_transcript")
        conn.execute("DELETE FROM consult_seen")
        conn.executemany(
            "INSERT INTO consult_transcript VALUES (?, ?, ?, ?, ?, ?)",
            [(name, *entry) for name, entry in harvest.files.items()],
        )
        conn.executemany(
            "INSERT INTO consult_seen VALUES (?, ?, ?, ?, ?, ?)",
            [(d, f, *s.row()) for d, seen in harvest.dirs.items() for f, s in seen.items()],
        )


def transcripts(claude_home: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(name under `projects/`, lstat) of each transcript, a regular file, in name order."""
    root = claude_home / "projects"
    for project in _entries(root):
        if not project.is_dir(follow_symlinks=False):
            continue
        base = Path(project.path)
        for entry in _entries(base):
            if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False):
                yield f"{project.name}/{entry.name}", entry.stat(follow_symlinks=False)
            elif entry.is_dir(follow_symlinks=False):
                for sub in _entries(base / entry.name / "subagents"):
                    if sub.name.endswith(".jsonl") and sub.is_file(follow_symlinks=False):
                        name = f"{project.name}/{entry.name}/subagents/{sub.name}"
                        yield name, sub.stat(follow_symlinks=False)


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as found:
            return sorted(found, key=lambda e: e.name)
    except OSError:
        return []


def looks_like_memory_dir(folder: str) -> bool:
    """A folder at one of the layouts memory dirs have (or under one: a nested dir)."""
    parts = folder.split(os.sep)
    for i, part in enumerate(parts):
        if part in ("agent-memory", "agent-memory-local"):
            return True
        if part == "memory" and i >= 1 and parts[i - 1] == ".claude":
            return True
        if part == "memory" and i >= 2 and parts[i - 2] == "projects":
            return True
    return False


def harvest(
    claude_home: Path,
    state_dir: Path,
    *,
    since: float,
    known: Set[Path] = frozenset(),
    save: bool = True,
    scan_bytes: int = SCAN_BYTES,
    chunk_bytes: int = CHUNK_BYTES,
) -> Harvest:
    """Read what the transcripts gained since the last scan; keep consults of memories.

    `known`: real paths of memory dirs besides those at a memory-dir layout (configured ones).
    `since`: the consult window's start. `save`: write the state back (never for a dry run).
    """
    with contextlib.ExitStack() as held:
        if save:
            try:
                held.enter_context(_locked(state_dir))
            except OSError:
                save = False  # a state dir it cannot write: read as a dry run does
        result = load(state_dir)
        scan = _Scan(result, since, {str(k) for k in known}, scan_bytes, chunk_bytes)
        listed: set[str] = set()
        for name, st in transcripts(claude_home):
            listed.add(name)
            scan.transcript(claude_home / "projects" / name, name, st)
        for gone in set(result.files) - listed:
            del result.files[gone]
            scan.changed = True
        _prune(result, since)
        if save and scan.changed:
            _save(state_dir, result)
    return result


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One scanning process at a time (a daemon and a command would both advance offsets)."""
    folder = ensure_private_dir(state_dir / FOLDER)
    fd = os.open(folder / "transcripts.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _prune(result: Harvest, since: float) -> None:
    """Drop evidence older than `since`; keep the newest of each dir and the newest dirs."""
    kept: dict[str, dict[str, Seen]] = {}
    for folder, files in result.dirs.items():
        seen = {f: s for f, s in files.items() if s.when >= since}
        if len(seen) > MAX_FILES_PER_DIR:
            newest = sorted(seen.items(), key=lambda kv: (-kv[1].when, kv[0]))
            seen = dict(newest[:MAX_FILES_PER_DIR])
        if seen:
            kept[folder] = seen
    if len(kept) > MAX_DIRS:
        newest_dirs = sorted(kept, key=lambda d: (-max(s.when for s in kept[d].values()), d))
        kept = {d: kept[d] for d in newest_dirs[:MAX_DIRS]}
    result.dirs = kept


@dataclass(slots=True)
class _Scan:
    result: Harvest
    since: float
    known: set[str]
    budget: int
    chunk: int
    changed: bool = False
    real: dict[str, str] = field(default_factory=dict)  # folder as written -> its real path

    def transcript(self, path: Path, name: str, st: os.stat_result) -> None:
        entry = self.result.files.get(name)
        if entry is None or entry[0] != st.st_dev or entry[1] != st.st_ino or st.st_size < entry[3]:
            entry = [st.st_dev, st.st_ino, 0, 0, 0]  # new, replaced or truncated: from 0
            self.result.files[name] = entry
            self.changed = True
        if entry[2] != st.st_size:
            entry[2] = st.st_size
            self.changed = True
        if entry[3] >= st.st_size:
            return
        if st.st_mtime < self.since:
            entry[3], entry[4] = st.st_size, 0  # last written before the window: nothing in it
            self.changed = True
            return
        with contextlib.suppress(OSError):  # gone or unreadable since the listing: next time
            self._read(path, name, entry, st)
        if entry[3] < st.st_size:
            self.result.unread[name] = st.st_size - entry[3]

    def _read(self, path: Path, name: str, entry: list[int], st: os.stat_result) -> None:
        fd, now = open_regular(path, follow=False, looked=st)  # never a FIFO or a link
        try:
            if now.st_ino != st.st_ino:
                return  # swapped for another file since the listing
            while entry[3] < st.st_size and self.budget > 0:
                want = min(self.chunk, st.st_size - entry[3], self.budget)
                data = os.pread(fd, want, entry[3])
                if not data:
                    return
                self.budget -= len(data)
                self.result.bytes_read += len(data)
                more = entry[3] + len(data) < st.st_size
                if not self._take(data, name, entry, more=more, mtime=st.st_mtime):
                    return
        finally:
            os.close(fd)

    def _take(self, data: bytes, name: str, entry: list[int], *, more: bool, mtime: float) -> bool:
        """Consume the whole lines of `data` (read at the entry's offset). False when a torn
        last line is left: read again next time, but taken now if only its newline is missing."""
        start = 0
        if entry[4]:  # inside a line too long to read: drop up to its end
            end = data.find(b"\n")
            if end < 0:
                entry[3] += len(data)
                self.changed = True
                return True
            start, entry[4] = end + 1, 0
        last = data.rfind(b"\n")
        if last >= start:
            for line in data[start:last].split(b"\n"):
                self._line(line, name, mtime)
            start = last + 1
        entry[3] += start
        self.changed = self.changed or start > 0
        tail = data[start:]
        if not tail:
            return True
        if not more:
            self._line(tail, name, mtime)
            return False
        if start == 0 and len(data) >= self.chunk:  # one line longer than a read: skipped
            entry[3] += len(data)
            entry[4] = 1
            self.changed = True
        return True  # the tail is read again at the start of the next read

    def _line(self, line: bytes, name: str, mtime: float) -> None:
        # Most lines (tool results, attachments, request blobs) are told apart without a parse.
        if b'"tool_use"' not in line or b'"assistant"' not in line or b".md" not in line:
            return
        try:
            row = safejson.loads(line)
        except ValueError:
            return  # torn or foreign
        if not isinstance(row, dict) or row.get("type") != "assistant":
            return
        message = row.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return
        cwd = row.get("cwd") if isinstance(row.get("cwd"), str) else ""
        session = row.get("sessionId") if isinstance(row.get("sessionId"), str) else ""
        when = row_time(row)
        if when is None:
            when = mtime  # written no later than the file's last change
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            tool, args = block.get("name"), block.get("input")
            if not isinstance(tool, str) or not isinstance(args, dict):
                continue
            for target in tool_targets(tool, args):
                self._record(target, str(cwd), tool, Seen(when, str(session), tool, name))

    def _record(self, target: str, cwd: str, tool: str, seen: Seen) -> None:
        target = os.path.expanduser(target)
        if not os.path.isabs(target):
            if not cwd:
                return
            target = os.path.join(cwd, target)
        target = os.path.normpath(target)
        folder, filename = os.path.split(target)
        if not filename.endswith(".md"):
            return
        real = self.real.get(folder)
        if real is None:
            real = self.real[folder] = os.path.realpath(folder)
        if not (
            looks_like_memory_dir(real)
            or looks_like_memory_dir(folder)
            or any(str(p) in self.known for p in (Path(real), *Path(real).parents))
        ):
            return
        kept = self.result.dirs.setdefault(real, {})
        held = kept.get(filename)
        if held is None or held.when < seen.when:
            kept[filename] = seen
            self.changed = True


def tool_targets(tool: str, args: Mapping[str, Any]) -> Iterable[str]:
    """The files a tool call reads or writes by name (none for a search over a folder)."""
    if tool in FILE_TOOLS:
        path = args.get("file_path")
        return [path] if isinstance(path, str) else []
    if tool == "Grep":
        path = args.get("path")  # a search of one named file reads it; of a folder, none
        return [path] if isinstance(path, str) and path.endswith(".md") else []
    if tool == "Glob":
        pattern, path = args.get("pattern"), args.get("path")
        if not isinstance(pattern, str) or _GLOB_CHARS & set(pattern):
            return []
        return [os.path.join(path, pattern) if isinstance(path, str) else pattern]
    if tool == "Bash":
        command = args.get("command")
        return bash_targets(command) if isinstance(command, str) else []
    return []


def bash_targets(command: str) -> list[str]:
    """The `*.md` files a shell command shows by a reader (`cat`, `head`, `less`...)."""
    if ".md" not in command:
        return []
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []  # unbalanced quotes: nothing certain
    out: list[str] = []
    reader = False
    first = True
    for word in words:
        if word in _SEPARATORS:
            reader, first = False, True
            continue
        if first:
            reader, first = os.path.basename(word) in READER_COMMANDS, False
            continue
        if reader and not word.startswith("-") and word.endswith(".md"):
            out.append(word)
    return out
