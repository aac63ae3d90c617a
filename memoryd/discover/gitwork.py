"""What git knows of a memory dir: whether it lies in a work tree, which of its files git
tracks, and whether files that vanished or changed hold a recent commit's bytes (a checkout,
merge, rebase, stash or pull did it, not a person or an agent).

Read-only (GIT_OPTIONAL_LOCKS=0), none of the repo's hooks or fsmonitor, every call timed
out. Where git cannot answer, a dir holding markdown may be tracked and is left alone; no
change is git's unless git says its bytes are a commit's."""

import contextlib
import fnmatch
import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memoryd.paths import read_bounded

GIT_TIMEOUT = 5.0
# How long a pass waits for a git operation's index.lock to go (the index is written last).
LOCK_WAIT = 3.0
# How many of HEAD's and the stash's last reflog entries count as "a recent commit".
REFLOG_RECENT = 20

TRACKED = "tracked by git"  # how the reason starts (see hands_off_reason)
OPT_IN = "`memoryd dirs DIR` says how to have it written"

# Settings that keep a read of someone's repo from running anything of theirs or writing.
# A folder's name is a path, never a pattern (`--literal-pathspecs`).
_SAFE = ("--literal-pathspecs", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
# A commit id as git writes them in HEAD files and reflogs (SHA-1 or SHA-256): the only ones asked.
_OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
# Variables that would point git at another repo than the one asked about.
_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


GIT_FILE_BYTES = 4096  # a worktree's `.git` file and its `commondir`: one line each


def gitdir_of(folder: Path, *, follow: bool = True) -> Path | None:
    """The git dir a `.git` file names (`gitdir: <path>`), made absolute; None when it names
    none. `follow`: read through a symlink. OSError when there is no such file."""
    head = read_bounded(folder / ".git", GIT_FILE_BYTES, follow=follow, prefix=True)
    line = head.decode("utf-8", "replace").strip()
    if not line.startswith("gitdir:"):
        return None
    target = Path(line.removeprefix("gitdir:").strip())
    return target if target.is_absolute() else folder / target


@dataclass(frozen=True, slots=True)
class WorkTree:
    top: Path  # the work tree's root
    git_dir: Path  # its git dir (a linked worktree's own, under the main repo's .git)


# work_tree's answers for a moment: a pass asks it several times of one dir (~0.1 ms each).
WORK_TREE_TTL = 2.0
_work_trees: dict[Path, tuple[float, WorkTree | None]] = {}


def work_tree(path: Path) -> WorkTree | None:
    """The git work tree holding `path` (a folder), by its `.git` entry (a git dir holds a
    HEAD: an empty `.git` folder is none); None: in none. Remembered for WORK_TREE_TTL."""
    now = time.monotonic()
    hit = _work_trees.get(path)
    if hit is not None and now - hit[0] < WORK_TREE_TTL:
        return hit[1]
    found = _find_work_tree(path)
    if len(_work_trees) > 4096:
        _work_trees.clear()
    _work_trees[path] = (now, found)
    return found


def _find_work_tree(path: Path) -> WorkTree | None:
    for folder in (path, *path.parents):
        dot = folder / ".git"
        try:
            if dot.is_dir():
                return WorkTree(folder, dot) if (dot / "HEAD").is_file() else None
            if dot.is_file():  # a linked worktree or a submodule: "gitdir: <path>"
                target = gitdir_of(folder)
                return WorkTree(folder, target) if target and (target / "HEAD").is_file() else None
        except OSError:
            return None
        if folder.name == ".git":
            return None  # inside a git dir itself: no work tree
    return None


def _run(tree: WorkTree, args: Sequence[str], stdin: bytes | None = None) -> bytes | None:
    """git's output, or None: no git binary, not a repo git accepts, an error or a timeout."""
    import subprocess  # here: a pass outside any work tree (most) never loads it (~2 ms)

    exe = shutil.which("git")
    if exe is None:
        return None
    env = {k: v for k, v in os.environ.items() if k not in _GIT_VARS}
    env.update(GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run(
            [exe, *_SAFE, "-C", str(tree.top), *args],
            input=stdin,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _rel(tree: WorkTree, folder: Path) -> str | None:
    try:
        rel = folder.relative_to(tree.top).as_posix()
    except ValueError:
        return None
    return "" if rel == "." else rel


def _index_stamp(tree: WorkTree) -> tuple[int, int, int] | None:
    try:
        st = os.stat(tree.git_dir / "index")
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


UNMERGED = "unmerged"  # tracked()'s value for a file a merge left in conflict
# The commits _recent_commits listed lately, by work tree: a `git stash pop` drops its entry
# from the stash's reflog, but the commit is still there to compare the bytes it put back with.
REMEMBERED = 64
_remembered: dict[Path, list[str]] = {}
_tracked_cache: dict[tuple[Path, str], tuple[tuple[int, int, int] | None, dict[str, str]]] = {}
_cache_lock = threading.Lock()


def tracked(folder: Path, tree: WorkTree | None = None) -> dict[str, str] | None:
    """The files directly in `folder` that git's index holds, with their blob ids; None: not
    in a work tree, or git cannot tell. Cached by the index file's identity."""
    tree = tree if tree is not None else work_tree(folder)
    if tree is None:
        return None
    rel = _rel(tree, folder)
    if rel is None:
        return None
    stamp = _index_stamp(tree)
    key = (tree.top, rel)
    with _cache_lock:
        hit = _tracked_cache.get(key)
    if hit is not None and stamp is not None and hit[0] == stamp:
        return hit[1]
    out = _run(tree, ["ls-files", "-s", "-z", "--", f"{rel}/" if rel else "."])
    if out is None:
        return None
    prefix = f"{rel}/" if rel else ""
    found: dict[str, str] = {}
    for entry in out.split(b"\0"):
        meta, _, path_b = entry.partition(b"\t")
        path = path_b.decode("utf-8", "surrogateescape")
        name = path[len(prefix) :]
        if not path.startswith(prefix) or "/" in name or not name:
            continue
        fields = meta.split()
        if len(fields) >= 3:
            unmerged = fields[2] != b"0"  # stages 1-3: a merge left it in conflict
            found[name] = UNMERGED if unmerged else fields[1].decode("ascii", "replace")
    with _cache_lock:
        _tracked_cache[key] = (stamp, found)
    return found


def tracked_memory(folder: Path) -> tuple[WorkTree, list[str] | None] | None:
    """The work tree and the markdown files of `folder` git tracks; None when it tracks none.
    The names are None when git cannot say and the folder holds markdown."""
    tree = work_tree(folder)
    if tree is None:
        return None
    names = tracked(folder, tree)
    if names is None:
        try:
            holds_md = any(n.endswith(".md") for n in os.listdir(folder))
        except OSError:
            holds_md = False
        return (tree, None) if holds_md else None
    md = sorted(n for n in names if n.endswith(".md"))
    return (tree, md) if md else None


def named_here(folder: Path, named: Iterable[Path], tree: WorkTree) -> bool:
    """Whether a path named on the command line asks for `folder`: the folder itself, or a
    folder above it inside its work tree (the repo, its `.claude/`)."""
    for path in named:
        with contextlib.suppress(OSError):
            asked = path.expanduser().resolve()
            if asked == folder or (folder.is_relative_to(asked) and asked.is_relative_to(tree.top)):
                return True
    return False


def hands_off_reason(
    folder: Path, named: Iterable[Path] = (), manage_repos: Sequence[str] = ()
) -> str:
    """Why memoryd leaves a dir's files alone because git tracks them; "" when it does not,
    or the dir was named on the command line, or its repo matches `manage_repos` (globs)."""
    found = tracked_memory(folder)
    if found is None:
        return ""
    tree, names = found
    if named_here(folder, named, tree) or _matches(tree.top, manage_repos):
        return ""
    if names is None:
        shown = "git could not say which files it tracks: no `git` on PATH, or it failed"
    else:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{TRACKED}{'' if names else ', maybe'} (in {tree.top}: {shown}): memoryd reads and "
        f"reports it but writes nothing there. `memoryd index {folder}` writes once; "
        "`<!-- memoryd: manage -->` in the committed MEMORY.md lets memoryd manage it for "
        "everyone who clones the repo; "
        f'`paths.manage_repos = ["{tree.top}"]` (or `[dirs."{folder}"] mode = "manage"`) in '
        "your config, for you alone"
    )


def _matches(top: Path, patterns: Sequence[str]) -> bool:
    forms = {str(top), os.path.realpath(top)}
    return any(
        fnmatch.fnmatchcase(form, os.path.expanduser(p).rstrip("/") or "/")
        for p in patterns
        for form in forms
    )


# --- what a git operation changed --------------------------------------------------------------
def blob_ids(data: bytes) -> tuple[str, str]:
    """The object id git gives these bytes as a blob, in SHA-1 and in SHA-256 repos."""
    head = b"blob %d\0" % len(data)
    return hashlib.sha1(head + data).hexdigest(), hashlib.sha256(head + data).hexdigest()  # noqa: S324


def _recent_commits(tree: WorkTree) -> list[str]:
    """HEAD, the heads a merge, rebase or pull leaves, and the last reflog entries of HEAD
    and of the stash: the commits whose files a git operation may just have put in place."""
    commits: list[str] = ["HEAD"]
    common = _common_dir(tree)
    for name in ("ORIG_HEAD", "MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD", "AUTO_MERGE"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = (tree.git_dir / name).read_text("ascii").split()
            if text:
                commits.append(text[0])
    for log in (tree.git_dir / "logs" / "HEAD", common / "logs" / "refs" / "stash"):
        for line in _tail_lines(log, REFLOG_RECENT):
            fields = line.split(" ", 2)
            if len(fields) >= 2:
                commits.extend(fields[:2])
    seen: dict[str, None] = {}
    with _cache_lock:
        before = _remembered.get(tree.top, [])
    for c in (*commits, *before):
        if c == "HEAD" or (_OBJECT_ID.fullmatch(c) and set(c) != {"0"}):
            seen.setdefault(c, None)
    listed = list(seen)
    with _cache_lock:
        _remembered[tree.top] = [c for c in listed if c != "HEAD"][:REMEMBERED]
    return listed


def _common_dir(tree: WorkTree) -> Path:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = (tree.git_dir / "commondir").read_text("utf-8").strip()
        if text:
            path = Path(text)
            return path if path.is_absolute() else tree.git_dir / path
    return tree.git_dir


def _tail_lines(path: Path, count: int) -> list[str]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            raw = handle.read()
    except OSError:
        return []
    return raw.decode("utf-8", "replace").splitlines()[-count:]


def where(tree: WorkTree) -> str:
    """The branch checked out, else the commit (detached HEAD); "" when unreadable."""
    try:
        head = (tree.git_dir / "HEAD").read_text("utf-8", "replace").strip()
    except OSError:
        return ""
    at = head[4:].strip().removeprefix("refs/heads/") if head.startswith("ref:") else head[:12]
    return f"{at} (merging)" if (tree.git_dir / "MERGE_HEAD").exists() else at


def _wait_unlocked(tree: WorkTree, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + LOCK_WAIT
    while (tree.git_dir / "index.lock").exists() and time.monotonic() < deadline:
        sleep(0.05)


@dataclass(frozen=True, slots=True)
class Change:
    """A memory file that vanished (`new` None) or changed, with the bytes memoryd kept."""

    name: str
    old: bytes | None
    new: bytes | None
    deleted: bool


def git_made(
    folder: Path,
    changes: Sequence[Change],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[set[str], str]:
    """The names among `changes` a git operation made, and the branch or commit checked out.
    A vanished file is git's when its last bytes are a recent commit's and the index no
    longer holds it (one a person deleted still is); a changed one when its old and new bytes
    are each a recent commit's or the index's."""
    tree = work_tree(folder)
    if tree is None or not changes:
        return set(), ""
    rel = _rel(tree, folder)
    if rel is None:
        return set(), ""
    _wait_unlocked(tree, sleep)
    prefix = f"{rel}/" if rel else ""
    commits = _recent_commits(tree)
    names = sorted({c.name for c in changes if "\n" not in c.name})
    query = "".join(f"{c}:{prefix}{n}\n" for n in names for c in commits)
    out = _run(tree, ["cat-file", "--batch-check=%(objectname) %(objecttype)"], query.encode())
    if out is None:
        return set(), ""
    answers = out.decode("ascii", "replace").splitlines()
    if len(answers) != len(names) * len(commits):
        return set(), ""
    known: dict[str, set[str]] = {n: set() for n in names}
    for i, answer in enumerate(answers):
        fields = answer.split()
        if len(fields) == 2 and fields[1] == "blob":
            known[names[i // len(commits)]].add(fields[0])
    index = tracked(folder, tree) or {}
    for name, blob in index.items():
        if name in known and blob != UNMERGED:
            known[name].add(blob)
    made: set[str] = set()
    for c in changes:
        if not c.deleted and index.get(c.name) == UNMERGED:
            made.add(c.name)  # a merge wrote both sides into it (conflict markers)
            continue
        blobs = known.get(c.name, set())
        if c.old is None or blobs.isdisjoint(blob_ids(c.old)):
            continue
        if c.deleted:
            if c.name not in index:
                made.add(c.name)
        elif c.new is not None and not blobs.isdisjoint(blob_ids(c.new)):
            made.add(c.name)
    return made, where(tree)
