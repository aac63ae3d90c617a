"""A synthetic Claude home for the discovery bench: many project folders whose session
transcripts record cwds in real git repos (roots, subfolders, worktrees), plain folders and
folders that are gone, a few memory dirs, and settings files.

Everything is derived from a seeded `random.Random`; only the mtimes and the git objects
follow the clock.
"""

import json
import os
import random
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from memoryd.discover.slugs import slugify

DAY = 86400.0


def child_env(home: Path) -> dict[str, str]:
    """The environment of a `memoryd` child that sees only `home` (and nothing of the
    caller's but PATH): its state, config and cache folders below it."""
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C.UTF-8",
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


@dataclass(frozen=True, slots=True)
class ClaudeHome:
    root: Path  # HOME
    claude: Path  # <HOME>/.claude
    projects: int
    transcripts: int
    transcript_bytes: int
    memory_dirs: int
    repos: int

    @property
    def env(self) -> dict[str, str]:
        """The environment of a `memoryd` child that sees only this home."""
        return child_env(self.root)

    @property
    def state(self) -> Path:
        return self.root / ".local" / "state" / "memoryd"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@x", *args],
        check=True,
        capture_output=True,
    )


def _row(kind: str, cwd: str, session: str, rng: random.Random, pad: int) -> dict[str, object]:
    return {
        "parentUuid": str(uuid.UUID(int=rng.getrandbits(128))),
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session,
        "version": "2.1.332",
        "gitBranch": "main",
        "type": kind,
        "message": {"role": kind, "content": [{"type": "text", "text": "x" * pad}]},
        "uuid": str(uuid.UUID(int=rng.getrandbits(128))),
        "timestamp": "2026-11-30T10:00:00.000Z",
    }


def _transcript(path: Path, cwd: str, rng: random.Random, size: int) -> int:
    """A session transcript of about `size` bytes: sometimes a summary or a file-history
    snapshot row first (no cwd), then user and assistant rows that each carry the cwd."""
    session = str(uuid.UUID(int=rng.getrandbits(128)))
    lines: list[str] = []
    lead = rng.random()
    if lead < 0.3:
        lines.append(
            json.dumps(
                {
                    "type": "summary",
                    "summary": "Fix the deploy script",
                    "leafUuid": str(uuid.UUID(int=rng.getrandbits(128))),
                }
            )
        )
    elif lead < 0.5:
        snapshot = {
            f"src/file_{i}.py": {"backupFileName": None, "version": 1}
            for i in range(rng.randint(1, 60))
        }
        lines.append(
            json.dumps(
                {
                    "type": "file-history-snapshot",
                    "messageId": session,
                    "snapshot": {"trackedFileBackups": snapshot},
                }
            )
        )
    written = sum(len(line) + 1 for line in lines)
    kind = "user"
    while written < size:
        # Rows are mostly a few hundred bytes; a tool result is now and then tens of KB.
        pad = rng.choice((80, 200, 400, 900)) if rng.random() < 0.9 else rng.randint(5_000, 60_000)
        line = json.dumps(_row(kind, cwd, session, rng, pad))
        lines.append(line)
        written += len(line) + 1
        kind = "assistant" if kind == "user" else "user"
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    return len(data)


def make_claude_home(
    tmp: Path, *, projects: int = 300, memory_dirs: int = 30, repos: int = 40, seed: int = 0
) -> ClaudeHome:
    """`projects` project folders (a few transcripts each, 4 KB to ~2 MB, median ~40 KB);
    their cwds: repo roots, subfolders and worktrees of `repos` git repos, plain folders,
    and folders that are gone. `memory_dirs` memory dirs: most `projects/<slug>/memory/`,
    the rest repo-scope `.claude/memory/` and `.claude/agent-memory/<agent>/`."""
    rng = random.Random(seed)
    root = tmp / "home"
    claude = root / ".claude"
    code = root / "code"
    (claude / "projects").mkdir(parents=True)
    (claude / "settings.json").write_text(json.dumps({"model": "opus", "theme": "dark"}))
    repo_paths: list[Path] = []
    for i in range(repos):
        repo = code / f"repo-{i:02d}"
        for sub in ("src/app", "pkg/core", "docs"):
            (repo / sub).mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q")
        if i % 5 == 0:
            (repo / ".claude").mkdir()
            (repo / ".claude" / "settings.json").write_text(json.dumps({"permissions": {}}))
            (repo / ".claude" / "settings.local.json").write_text("{}")
        repo_paths.append(repo)
    worktrees: list[Path] = []
    for repo in repo_paths[:8]:
        (repo / "f").write_text("x")
        _git(repo, "add", "f")
        _git(repo, "commit", "-qm", "init")
        tree = code / f"{repo.name}-feature"
        _git(repo, "worktree", "add", "-q", str(tree), "-b", "feature")
        worktrees.append(tree)
    plain = [code / "scratch" / f"notes-{i}" for i in range(30)]
    for folder in plain:
        folder.mkdir(parents=True)
    gone = [code / "old" / f"gone-{i}" for i in range(50)]
    cwds: list[Path] = [*repo_paths, *worktrees, *plain, *gone]
    while len(cwds) < projects:
        repo = rng.choice(repo_paths)
        cwds.append(repo / rng.choice(("src", "src/app", "pkg", "pkg/core", "docs")))
        cwds = list(dict.fromkeys(cwds))
        if len(cwds) >= len(repo_paths) * 5 + len(worktrees) + len(plain) + len(gone):
            break  # every subfolder taken: the rest are more plain folders
    n = 0
    while len(cwds) < projects:
        extra = code / "misc" / f"dir-{n}"
        extra.mkdir(parents=True)
        cwds.append(extra)
        n += 1
    cwds = cwds[:projects]
    total = count = 0
    now = 1_780_000_000.0
    for cwd in cwds:
        folder = claude / "projects" / slugify(str(cwd))
        folder.mkdir(exist_ok=True)
        for _ in range(rng.choice((1, 2, 3, 4, 4, 6, 8, 12))):
            size = int(min(2_000_000, max(4_000, rng.lognormvariate(10.6, 1.2))))
            path = folder / f"{uuid.UUID(int=rng.getrandbits(128))}.jsonl"
            total += _transcript(path, str(cwd), rng, size)
            when = now - rng.uniform(0, 90) * DAY
            os.utime(path, (when, when))
            count += 1
    made = 0
    # Repo-scope memory in a few repos; the rest are auto-memory dirs of repo roots and folders.
    for repo in repo_paths[:3]:
        _memory(repo / ".claude" / "memory", rng)
        made += 1
    for repo in repo_paths[3:5]:
        _memory(repo / ".claude" / "agent-memory" / "reviewer", rng)
        made += 1
    for cwd in [*repo_paths, *plain, *gone]:
        if made >= memory_dirs:
            break
        _memory(claude / "projects" / slugify(str(cwd)) / "memory", rng)
        made += 1
    return ClaudeHome(root, claude, len(cwds), count, total, made, repos)


def _memory(folder: Path, rng: random.Random) -> None:
    folder.mkdir(parents=True)
    lines = ["# Memory", ""]
    for i in range(rng.randint(2, 8)):
        name = f"note_{i}.md"
        (folder / name).write_text(
            f"---\nname: note {i}\ndescription: a note\ntype: project\n---\n\nBody {i}.\n"
        )
        lines.append(f"- [note {i}]({name}) — a note")
    (folder / "MEMORY.md").write_text("\n".join(lines) + "\n")
