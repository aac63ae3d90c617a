"""Shared fixtures: an isolated HOME/XDG per test, corpus copies, tree hashing, CLI runner."""

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memoryd.cli import main
from memoryd.config import Config
from memoryd.discover import slugify
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime

if TYPE_CHECKING:  # tests.helpers imports this module
    from tests.helpers import Running


def _find_corpus() -> Path | None:
    """`$MEMORYD_CORPUS`, else a `shared/corpus` beside the checkout or any folder above it.

    The corpus is not part of the project: a clone of it alone has none, and the tests that
    need it skip (``needs_corpus``). `$MEMORYD_CORPUS` naming no folder is an error, reported
    before any test runs (``pytest_configure``): whoever set it meant the tests to run.
    """
    if os.environ.get("MEMORYD_CORPUS"):
        return Path(os.environ["MEMORYD_CORPUS"])
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "corpus"
        if candidate.is_dir():
            return candidate
    return None


CORPUS = _find_corpus()
CORPUS_MISSING = (
    "the real-world corpus is not here (no shared/corpus beside the checkout or above it): "
    "set MEMORYD_CORPUS to its folder to run this test"
)
# For every test that reads the corpus: skipped, with the reason, when there is none.
needs_corpus = pytest.mark.skipif(CORPUS is None, reason=CORPUS_MISSING)


def pytest_configure(config: pytest.Config) -> None:
    if CORPUS is not None and not CORPUS.is_dir():
        raise pytest.UsageError(
            f"MEMORYD_CORPUS={os.environ.get('MEMORYD_CORPUS')}: no such folder; point it at "
            "the real-world corpus (shared/corpus), or unset it to skip the tests that need it"
        )


LEVEL_ORDER = {"debug": 10, "info": 20, "warning": 30, "error": 40}


@dataclass
class Env:
    home: Path
    claude: Path
    state: Path
    logs: Path
    config_dir: Path

    @property
    def audit_path(self) -> Path:
        return self.logs / "audit.jsonl"

    def audit_rows(self) -> list[dict[str, Any]]:
        from memoryd.audit import iter_lines

        return list(iter_lines(self.audit_path))

    def runtime(self, config: Config | None = None) -> Runtime:
        paths = AppPaths(self.config_dir / "config.toml", self.state, self.logs)
        return Runtime.create(config or Config(), paths)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """A private HOME with XDG dirs so memoryd never touches the real user's files."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("MEMORYD_CRASH_AT", raising=False)
    import platformdirs

    return Env(
        home=home,
        claude=home / ".claude",
        state=Path(platformdirs.user_state_dir("memoryd", appauthor=False)),
        logs=Path(platformdirs.user_log_dir("memoryd", appauthor=False)),
        config_dir=Path(platformdirs.user_config_dir("memoryd", appauthor=False)),
    )


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(env: Env) -> Callable[..., Result]:
    """Run `memoryd <args>` in-process and capture its output and exit code."""

    def run(*args: str | Path) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = main([str(a) for a in args], out=out, err=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime_ns of every regular file under root (relative paths)."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(path.relative_to(root))] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    st.st_mtime_ns,
                )
    return out


def copy_corpus(dest: Path) -> Path:
    """A writable copy of the shared corpus (which is read-only and must never change)."""
    if CORPUS is None:
        pytest.skip(CORPUS_MISSING)
    shutil.copytree(CORPUS, dest, symlinks=True, ignore=shutil.ignore_patterns("_alt_versions"))
    for dirpath, _, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                os.chmod(path, 0o644)
    # The upstream repo's `.claude/agent-memory` is a symlink to `agent-memory-src/`; the
    # corpus stores it as a small file holding the target, so make it a link again.
    link = dest / "chalbert__web-everything" / ".claude" / "agent-memory"
    if link.is_file() and not link.is_symlink():
        target = link.read_text().strip()
        link.unlink()
        link.symlink_to(target)
    return dest


def corpus_memory_dirs(root: Path) -> list[Path]:
    """Every folder of the corpus copy that holds a MEMORY.md."""
    return sorted(p.parent for p in root.rglob("MEMORY.md") if "golden-corpus" not in str(p))


def write_memory(
    folder: Path,
    filename: str,
    *,
    name: str | None = None,
    description: str = "a memory",
    type_: str = "project",
    body: str = "Some body text.\n",
    age_days: float | None = 30,
) -> Path:
    """Write a memory file the way an agent would; optionally age its mtime."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = filename.removesuffix(".md")
    text = (
        f"---\nname: {name if name is not None else stem}\ndescription: {description}\n"
        f"type: {type_}\n---\n\n{body}"
    )
    path = folder / filename
    path.write_text(text, encoding="utf-8")
    if age_days is not None:
        import time

        old = time.time() - age_days * 86400
        os.utime(path, (old, old))
    return path


class InjectedCrash(BaseException):
    """Raised by `crash_at` (a BaseException, so no `except Exception` in memoryd swallows it)."""


def crash_at(label: str) -> Callable[[str], None]:
    """A stand-in for `fsops.crash_point` that crashes the operation at the point `label`."""

    def crash_point(at: str) -> None:
        if at == label:
            raise InjectedCrash

    return crash_point


def make_small_repo(tmp_path: Path) -> Path:
    """`app/`: one source file and an empty repo-scope memory dir, `.claude/memory/`."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`make_small_repo`; modules that need a tree of their own override this fixture."""
    return make_small_repo(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Callable[["Running", str], Path]:
    """Make a Claude project memory dir (with a transcript naming its repo) inside a HOME."""

    def make(running: "Running", name: str) -> Path:
        repo = tmp_path / "code" / name
        repo.mkdir(parents=True, exist_ok=True)
        folder = running.claude / "projects" / slugify(str(repo))
        (folder / "memory").mkdir(parents=True, exist_ok=True)
        (folder / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
        return folder / "memory"

    return make


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Path]:
    yield copy_corpus(tmp_path / "corpus")


@contextlib.contextmanager
def lock_held_elsewhere(state_dir: Path, real_path: Path) -> Iterator[None]:
    """Another process holds the dir's writer lock (StateStore.lock) until the block ends."""
    script = (
        "import sys; from pathlib import Path; from memoryd.state import StateStore\n"
        f"s = StateStore(Path({str(state_dir)!r}))\n"
        f"with s.lock(Path({str(real_path)!r})):\n"
        "    print('held', flush=True); sys.stdin.readline()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "held"
            yield
        finally:
            holder.stdin.close()
            holder.wait(timeout=10)
