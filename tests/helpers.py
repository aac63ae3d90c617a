"""Helpers shared by more than one test module, in one place (fixtures live in conftest.py):
no test module imports another."""

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from memoryd.config import Config
from memoryd.daemon import housekeeping
from memoryd.discover.finder import discover
from memoryd.discover.found import MemoryDir
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.passes import run_pass, update_changed
from memoryd.indexing.read import Held, Request
from memoryd.indexing.scan import DirScan
from memoryd.model.index import Budget, Entry
from memoryd.model.index_edit import IndexEdit, IndexInput, update_index
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime, boot_clock
from memoryd.storage.audit import iter_lines
from memoryd.trash import store as trash
from tests.conftest import Env, write_memory

DAY = 86400


# --- memory dirs ---------------------------------------------------------------------------------
def memory_dir(
    path: Path, config: Config | None = None, *, repo_root: Path | None = None
) -> MemoryDir:
    """The folder as memoryd finds a dir named on its command line (`repo_root`: the code tree
    it belongs to, as `--repo-root` would say)."""
    md = discover(config if config is not None else Config(), [path])[0]
    return md if repo_root is None else replace(md, repo_root=repo_root, repo_reason="test")


def home_folder(env: Env, name: str = "mem") -> Path:
    """A new empty folder under the test's HOME, by its real path."""
    folder = env.home / name
    folder.mkdir()
    return folder.resolve()


# --- code trees: the `repo` fixture's builders (conftest.py; a module picks one with
# `pytestmark = pytest.mark.repo_tree.with_args(builder)`) ------------------------------------
def make_small_repo(tmp_path: Path) -> Path:
    """`app/`: one source file and an empty repo-scope memory dir, `.claude/memory/` (the
    `repo` fixture's default)."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


def make_planted_repo(tmp_path: Path) -> Path:
    """`app/`: a small code tree (the names the planted memories cite) with a memory dir inside
    its .claude/."""
    root = tmp_path / "app"
    for rel in ("src/app.py", "src/util.py", "docs/guide.md", "lib/deep/moved_here.py"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def handle_request():\n    return 1\nclass PaymentGateway: pass\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


def make_stale_repo(tmp_path: Path) -> Path:
    """`make_small_repo` whose memory dir holds one fully stale memory among fillers, so that
    a dream pass moves it."""
    root = make_small_repo(tmp_path)
    mem(root, "stale.md", "Lived in `src/removed.py`.")
    filler(root)
    return root


def make_subfolder_repo(tmp_path: Path) -> Path:
    """`app/`: a small code tree with a subfolder `pkg/sub/` (a session's cwd) and a memory dir
    inside its .claude/."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


def make_repo_memory_outside(tmp_path: Path) -> Path:
    """`app/`: a code tree; its memory dir, `memory/`, lies beside it, so memories add no
    tokens of their own."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src/app.py").write_text("def handle_request():\n    return 1\n")
    (tmp_path / "memory").mkdir()
    return root


# Every place a memory (or a copy of one, or a log quoting one) can sit in a repo, each holding
# a token found nowhere else (`make_repo_of_memory_places`).
MEMORY_PLACES = {
    ".claude/agent-memory/reviewer/review.md": "agent_memory_token",
    ".claude/agent-memory-local/tester/MEMORY.md": "agent_local_token",
    ".claude/memory/project.md": "repo_memory_token",
    ".claude/memory/.trash/2026-01-02/old.md": "trashed_memory_token",
    ".claude/memory/topic/MEMORY.md": "nested_memory_token",
    ".claude/logs/session.jsonl": "log_quote_token",
    "notes/team/MEMORY.md": "named_memory_token",
    "notes/team/decisions.md": "named_memory_sibling_token",
    "pkg/web/.claude/agent-memory/ui/ui.md": "subpackage_memory_token",
    "tools/.trash/2026-01-02/gone.md": "stray_trash_token",
}


def make_repo_of_memory_places(tmp_path: Path) -> Path:
    """`app/`: code, docs, a plain notes folder, settings, and a memory at every one of
    MEMORY_PLACES."""
    root = tmp_path / "app"
    write_file(root, "src/app.py", "def live_helper():\n    return load_settings()\n")
    write_file(root, "src/settings.py", "def load_settings():\n    return {}\n")
    write_file(root, "README.md", "Call live_helper() to start; docs_only_token is in the docs.\n")
    write_file(root, "docs/index.md", "The user guide.\n")
    write_file(root, "notes/plan.md", "A plain notes folder (no MEMORY.md) is part of the tree.\n")
    write_file(root, ".claude/settings.json", '{"permissions": {}}\n')
    for rel, token in MEMORY_PLACES.items():
        write_file(root, rel, f"---\nname: n\ndescription: d\ntype: project\n---\n{token}\n")
    return root


def make_git_repo_without_memory(tmp_path: Path) -> Path:
    """`repo/`: a work tree (a `.git` folder) with `src/pkg/app.py` and a README, and no
    memory dir of its own."""
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "src" / "pkg" / "app.py").write_text("x = 1\n")
    (root / "README.md").write_text("readme\n")
    return root


def make_half_stale_repo(tmp_path: Path) -> Path:
    """`app/`: a work tree whose memory dir holds six fillers and `half.md`, which cites a live
    file and two missing ones (a pass flags it for review)."""
    root = tmp_path / "app"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    for i, topic in enumerate(["anchor", "barley", "canyon", "dolphin", "ember", "fjord"]):
        mem(root, f"filler_{i}.md", f"{topic} {topic}s {topic}-like")
    mem(root, "half.md", "See `src/app.py`, `src/removed.py` and `src/later.py`.")
    return root


def memory_at(
    folder: Path, name: str, body: str, *, age: float = 40, type_: str = "project"
) -> Path:
    """A memory described `about <stem>`, its mtime `age` days ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    stem = name.removesuffix(".md")
    path.write_text(f"---\nname: {stem}\ndescription: about {stem}\ntype: {type_}\n---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))
    return path


def make_served_repo(tmp_path: Path) -> Path:
    """`app/`: a work tree whose memory dir holds one fully stale memory (it cites files that
    are gone) and fillers, so the breaker lets a pass move it, all pointed to by MEMORY.md."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    (root / ".git").mkdir()
    folder = root / ".claude" / "memory"
    memory_at(folder, "payment_flow.md", "Payments went through `src/removed_payments.py` nightly.")
    topics = ["anchor", "barley", "canyon", "dolphin", "ember", "fjord", "glacier", "harbor",
              "iris", "jasper", "kestrel", "lantern"]  # fmt: skip
    for i, topic in enumerate(topics):
        memory_at(folder, f"filler_{i}.md", f"{topic} {topic}s {topic}-like, see `src/app.py`")
    (folder / "MEMORY.md").write_text(
        "# app Memory\n\n"
        + "".join(f"- [{p.stem}]({p.name}) — about {p.stem}\n" for p in sorted(folder.glob("*.md")))
    )
    return root


# --- planted dream cases (a repo-scope memory dir in a small code tree) -------------------------


def mem(
    repo: Path, name: str, body: str, *, type_: str = "project", age: float = 40, extra: str = ""
) -> Path:
    folder = repo / ".claude" / "memory"
    path = folder / name
    title = " ".join(name[:-3].split())  # a newline in a file name must not break the YAML
    path.write_text(f"---\nname: {title}\ndescription: d\ntype: {type_}\n{extra}---\n{body}\n")
    stamp = time.time() - age * DAY
    os.utime(path, (stamp, stamp))
    return path


def dream(cli, repo: Path, *args: str) -> dict[str, Any]:
    result = cli("dream", "--json", *args, repo / ".claude" / "memory")
    assert result.code in (0, 1), result.err
    return json.loads(result.out)["dirs"][0]  # type: ignore[no-any-return]


def moved(report: dict[str, Any]) -> dict[str, str]:
    return {c["file"]: c["reason"] for c in report["changes"]}


def explain(cli, path: Path) -> dict[str, Any]:
    result = cli("explain", "--json", path)
    assert result.code == 0, result.err
    return json.loads(result.out)  # type: ignore[no-any-return]


# Unrelated words, one topic each: memories on them share nothing a duplicate or stale check sees.
TOPICS = (
    "anchor", "barley", "canyon", "dolphin", "ember", "fjord", "glacier", "harbor", "iris",
    "jasper", "kestrel", "lantern", "meadow", "nectar", "orchid", "pebble", "quartz", "raven",
    "saffron", "tundra", "umber", "violet", "willow", "yarrow",
)  # fmt: skip


def filler(repo: Path, n: int = 12) -> None:
    """Unrelated evergreen memories so the circuit breaker's 20% leaves room for one move."""
    for i, topic in enumerate(TOPICS[:n]):
        mem(repo, f"filler_{i}.md", f"{topic} {topic}s {topic}-like")


# --- the index editor as a pure function -------------------------------------------------------


NOW = 1_800_000_000.0
OLD = NOW - 60 * 86400


def entry(
    filename: str,
    name: str | None = None,
    desc: str = "d",
    type_: str = "project",
    age: float = OLD,
) -> Entry:
    return Entry(filename, name if name is not None else filename[:-3], desc, type_, age)


def run(
    main: str | None,
    memories: list[Entry],
    *,
    seen: dict[str, tuple[str, str]] | None = None,
    present: set[str] | None = None,
    archive: str | None = None,
    ready: set[str] | None = None,
    budget: Budget | None = None,
    own: dict[str, str] | None = None,
    separator: str = " — ",
) -> IndexEdit:
    mems = {e.filename: e for e in memories}
    return update_index(
        IndexInput(
            main=main,
            archive=archive,
            memories=mems,
            present=frozenset(present if present is not None else mems),
            seen=seen or {},
            ready=frozenset(ready if ready is not None else mems),
            heading="proj",
            budget=budget or Budget(),
            now=NOW,
            today=date(2026, 11, 30),
            own=own or {},
            separator=separator,
        )
    )


def many_entries(n: int) -> list[Entry]:
    return [entry(f"m{i:04d}.md", desc="x" * 60, age=OLD - (n - i) * 60) for i in range(n)]


# --- the trash -----------------------------------------------------------------------------------


def plant_day(folder: Path, day: date, moved_at: datetime, name: str = "old.md") -> Path:
    """A day folder as memoryd leaves it: a trashed file and its manifest record."""
    path = folder / ".trash" / day.isoformat()
    path.mkdir(parents=True, exist_ok=True)
    data = f"---\nname: {name}\n---\n".encode()
    (path / name).write_bytes(data)
    record = trash.TrashRecord(
        id=trash.new_id(),
        original_name=name,
        stored_name=name,
        day=day.isoformat(),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        reason="stale",
        pass_id="p",
        time=moved_at.astimezone().isoformat(timespec="seconds"),
    )
    with (path / trash.MANIFEST).open("a") as manifest:
        manifest.write(record.to_json() + "\n")
    return path


def watched_for(state_dir: Path, folder: Path, days: float) -> None:
    """Make memoryd have seen `folder`'s trash as it is now `days` days ago, by every clock: a
    rotation (purging nothing) with the wall clock and the boot clock set back that far. Its
    audit rows (a clock gone back, after a later run) go to a log of their own."""
    logs = state_dir.parent / "aging-log"
    rt = Runtime.create(Config(), AppPaths(state_dir / "none.toml", state_dir, logs))
    back, now, real = days * 86400, time.time(), boot_clock()
    rt = replace(
        rt,
        clock=lambda: now - back,
        today=lambda: date.fromtimestamp(now - back),
        boot=lambda: (real[0], real[1] - back) if real else ("aged", 0.0),
    )
    md = memory_dir(folder)
    housekeeping.rotate(rt, [md], keep_days=36500)
    if real is None:  # no boot clock here: the aged boot's own reading, a moment ago
        rt = replace(rt, clock=lambda: now, today=date.today, boot=lambda: ("aged", back))
        housekeeping.rotate(rt, [md], keep_days=36500)


# --- a real daemon process -----------------------------------------------------------------------


CONFIG = """\
[index]
new_file_grace = "{grace}"
[watch]
debounce = "200ms"
max_wait = "2s"
reconcile_every = "1h"
[dream]
pile_up = {pile_up}
quiet = "1s"
min_interval = "0s"
"""


@dataclass
class Running:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    home: Path
    config: Path

    @property
    def claude(self) -> Path:
        return self.home / ".claude"

    @property
    def state(self) -> Path:
        return self.home / ".local" / "state" / "memoryd"

    def rows(self, event: str | None = None) -> list[dict[str, Any]]:
        rows = list(iter_lines(self.state / "log" / "audit.jsonl"))
        return [r for r in rows if event is None or r["event"] == event]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memoryd", "--config", str(self.config), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def start(
    tmp_path: Path,
    *,
    grace: str = "0s",
    extra_env: dict[str, str] | None = None,
    name: str = "d",
    index_config: str = "",
    pile_up: int = 5,
    more_config: str = "",
    max_wait: str = "2s",
) -> Running:
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    config = tmp_path / f"config-{name}.toml"
    config.write_text(
        CONFIG.format(grace=grace, pile_up=pile_up)
        .replace('max_wait = "2s"\n', f'max_wait = "{max_wait}"\n')
        .replace("[index]\n", "[index]\n" + index_config)
        + more_config
    )
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        **(extra_env or {}),
    }
    log = tmp_path / f"daemon-{name}.log"
    with log.open("a") as stderr:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "--config", str(config), "run"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    running = Running(proc, env, home, config)
    wait_for(
        lambda: (running.state / "status.json").exists() or proc.poll() is not None,
        what="the first heartbeat",
    )
    assert proc.poll() is None, log.read_text()
    return running


def agent_write(folder: Path, filename: str, description: str = "new") -> None:
    """Write like Claude Code: a temp file, then an atomic rename onto the name."""
    tmp = folder / f"{filename}.tmp.{os.getpid()}.a1b2"
    tmp.write_text(
        f"---\nname: {filename[:-3]}\ndescription: {description}\ntype: project\n---\n\nbody\n"
    )
    tmp.rename(folder / filename)


def index_text(folder: Path) -> str:
    path = folder / "MEMORY.md"
    return path.read_text() if path.exists() else ""


# --- memory-dir links out of their repo or Claude home (issue 11, item 6) -----------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under root (files, folders, links) with a file's sha256 and a link's target:
    a new MEMORY.md, `.trash/` or `.MEMORY.md.prev` anywhere shows as a difference."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


DUPLICATE = "The staging deploy runs from the release branch after the nightly build passes.\n"


def vault(tmp_path: Path) -> Path:
    """A person's notes vault: two memory-like notes a dream pass would take for duplicates."""
    notes = tmp_path / "vault" / "notes"
    write_memory(notes, "deploy.md", body=DUPLICATE, age_days=40)
    write_memory(notes, "deploy-again.md", body=DUPLICATE, age_days=30)
    (notes / "diary.md").write_text("# Private diary\n\nnot a memory\n")
    return notes


# --- source trees --------------------------------------------------------------------------------


def write_file(root: Path, rel: str, text: str | bytes = "") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --- the Claude Code binary's view of MEMORY.md ---------------------------------------------------


# (id, MEMORY.md, what the binary loaded): how it lexes HTML comments and frontmatter.
OBSERVED = [
    ("a_1space", "A\n <!--\nX\n-->\nB\n", "A\n <!--\nX\n-->\nB"),
    ("a_3space", "A\n   <!--\nX\n-->\nB\n", "A\n   <!--\nX\n-->\nB"),
    ("b_list_indented", "- A\n  <!--\n  X\n  -->\n- B\n", "- A\n  <!--\n  X\n  -->\n- B"),
    ("b_list_1space", "- A\n <!--\nX\n-->\n- B\n", "- A\n- B"),
    ("c_blank", "A\n\n<!-- c -->\n\nB\n", "A\n\nB"),
    ("d_fence", "```\n<!--\nX\n-->\n```\nB\n", "```\n<!--\nX\n-->\n```\nB"),
    ("e_residue", "<!-- a --> tail\nB\n", "tail\nB"),
    ("f_unclosed_after", "<!-- a -->\n<!-- open\nB\n<!-- z -->\nC\n", "C"),
    ("g_div", "<div>\n<!--\nX\n-->\n</div>\nB\n", "<div>\n<!--\nX\n-->\n</div>\nB"),
    ("h_quote", "> q\n<!--\nX\n-->\nB\n", "> q\nB"),
    ("i_short", "<!-->\nX\n<!-- y -->\nB\n", "<!-->\nX\nB"),
    ("j_lazy4", "A\n    <!--\nX\n-->\nB\n", "A\n    <!--\nX\n-->\nB"),
    ("k_list_blank", "- A\n\n<!--\nX\n-->\n- B\n", "- A\n\n- B"),
    ("l_fm_midline", "---\nx: a---b\n- [A](a.md)\n", "b\n- [A](a.md)"),
    ("m_heading", "# H\n<!--\nX\n-->\nB\n", "# H\nB"),
    ("n_list_star4", "*   A\n  <!--\nX\n-->\n- B\n", "*   A\n- B"),
    ("o_midcomment_end", "<!--\nX\n--> after\n- [B](b.md)\n", "after\n- [B](b.md)"),
    ("p_space_blank", "<!-- c -->\n  \nB\n", "B"),
    ("q_crlf_comment", "A\r\n<!--\r\nX\r\n-->\r\nB\r\n", "A\nB"),
    ("r_tab", "A\n\t<!--\nX\n-->\nB\n", "A\n\t<!--\nX\n-->\nB"),
    ("s_list_lazy_then", "- A\ncont\n<!--\nX\n-->\nB\n", "- A\ncont\nB"),
    ("t_fm_ws", "---  \n\nx: 1\n---  \n\n  B\n", "B"),
    ("p0_para0", "A\n<!--\nX\n-->\nB\n", "A\nB"),
    ("p1_start1", "A\n\n <!--\nX\n-->\nB\n", "A\n\nB"),
    ("p2_start3", "A\n\n   <!--\nX\n-->\nB\n", "A\n\nB"),
    ("p3_start4", "A\n\n    <!--\nX\n-->\nB\n", "A\n\n    <!--\nX\n-->\nB"),
    ("p4_list3", "- A\n   <!--\nX\n-->\n- B\n", "- A\n   <!--\nX\n-->\n- B"),
    ("p5_list_blank2", "- A\n\n  <!--\nX\n-->\n- B\n", "- A\n\n  <!--\nX\n-->\n- B"),
    ("p6_ordered2", "1. A\n  <!--\nX\n-->\nB\n", "1. A\nB"),
    ("p7_head1", "# H\n <!--\nX\n-->\nB\n", "# H\nB"),
    ("p8_trailsp", "<!-- a -->  \nB\n", "B"),
    ("p9_nested", "- A\n  - B\n<!--\nX\n-->\nC\n", "- A\n  - B\nC"),
    ("pa_para_residue", "A\n<!-- x --> B\nC\n", "A\n B\nC"),
    ("pb_first1", " <!--\nX\n-->\nB\n", "B"),
    ("pc_lonecr_inline", "A <!-- x -->\rB\rC\r", "A <!-- x -->\nB\nC"),
    ("pd_quote_lazy", "> q\nlazy\n<!--\nX\n-->\nB\n", "> q\nlazy\nB"),
    ("pe_code_then", "    code\n<!--\nX\n-->\nB\n", "code\nB"),
    ("pf_fm_then_comment", "---\nx: 1\n---\n<!--\nX\n-->\nB\n", "B"),
    ("pg_list_then_1sp_para", "- A\n\n <!--\nX\n-->\nB\n", "- A\n\nB"),
    ("ph_html_inline_tag", "A\n<span>\n<!--\nX\n-->\nB\n", "A\n<span>\nB"),
    ("pi_fence_tilde_unclosed", "~~~\n<!--\nX\n-->\n", "~~~\n<!--\nX\n-->"),
    ("pj_two_on_line", "<!-- a --><!-- b -->\nB\n", "B"),
]


def git(cwd: Path, *args: str) -> None:
    """git in `cwd` with a throw-away identity and `main` as the first branch."""
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def home_env(env: Any) -> dict[str, str]:
    """This process's environment for a child memoryd with the test's HOME and XDG folders
    (`env`: the conftest fixture's Env), and no CLAUDE_CONFIG_DIR of the outer one."""
    child_env = {
        **os.environ,
        "HOME": str(env.home),
        "XDG_CONFIG_HOME": str(env.home / ".config"),
        "XDG_STATE_HOME": str(env.home / ".local" / "state"),
        "XDG_CACHE_HOME": str(env.home / ".cache"),
    }
    child_env.pop("CLAUDE_CONFIG_DIR", None)
    return child_env


def memoryd_child(
    env: Any, *args: str | Path, timeout: float = 60, crash_at: str = ""
) -> subprocess.CompletedProcess[str]:
    """`memoryd ARGS` in a child process with the test's HOME and XDG folders (`env`: the
    conftest fixture's Env). A reader that blocks on a FIFO hangs the child, and the timeout
    (a run takes a second or two) fails the test instead of the suite. `crash_at`: "K:point"
    kills the child at the K-th step, counting that crash point only (fsops.crash_point)."""
    child_env = home_env(env)
    if crash_at:
        child_env["MEMORYD_CRASH_AT"], _, child_env["MEMORYD_CRASH_ONLY"] = crash_at.partition(":")
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *map(str, args)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- the MCP server driven by the SDK's own client (the `mcp` extra: imported when used) -------
def mcp_server(env: Env, *dirs: Path) -> Any:
    """`memoryd mcp DIRS` as the SDK's stdio client starts it, in the test's HOME."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", *map(str, dirs)],
        env={
            "HOME": str(env.home),
            "XDG_CONFIG_HOME": str(env.home / ".config"),
            "XDG_STATE_HOME": str(env.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(env.home / ".cache"),
        },
    )


def mcp_structured(result: Any) -> Any:
    """A tool call's result as data (the SDK wraps a non-object result; a dict comes as is)."""
    assert not result.is_error, result.content
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return data.get("result", data) if isinstance(data, dict) else data


async def mcp_drive(params: Any, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """initialize, list_tools, then each call in turn: (init, tools, answers)."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        answers = [await session.call_tool(name, args) for name, args in calls]
        return init, tools, answers


def state_rows(state_dir: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """Rows of a query on the state store in `state_dir` ([] before it or the table exists),
    read as another process would (a connection of its own)."""
    import sqlite3

    path = state_dir / "state.sqlite"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return []
        raise
    finally:
        conn.close()


@dataclass(frozen=True)
class SavedBlob:
    """One cache entry in the state store (StateStore's cache_blob table), read and written as
    another process would: tests damage one, or look whether a pass wrote it again."""

    state_dir: Path
    kind: str
    key: str

    def _conn(self) -> Any:
        import sqlite3

        return sqlite3.connect(self.state_dir / "state.sqlite")

    def read_bytes(self) -> bytes:
        [(data,)] = state_rows(self.state_dir, self._where("data"), self.kind, self.key)
        return bytes(data)

    def write_bytes(self, data: bytes) -> None:
        conn = self._conn()
        with conn:
            conn.execute(
                "UPDATE cache_blob SET data = ?, stamp = stamp + 1 WHERE kind = ? AND key = ?",
                (data, self.kind, self.key),
            )
        conn.close()

    def stamp(self) -> int:
        [(stamp,)] = state_rows(self.state_dir, self._where("stamp"), self.kind, self.key)
        return int(stamp)

    def _where(self, column: str) -> str:
        return f"SELECT {column} FROM cache_blob WHERE kind = ? AND key = ?"


def saved_blobs(state_dir: Path, kind: str) -> list[SavedBlob]:
    """The cache entries of one kind (`scan`, `facts`, `held`, `tokens`) in the state store."""
    rows = state_rows(state_dir, "SELECT key FROM cache_blob WHERE kind = ? ORDER BY key", kind)
    return [SavedBlob(state_dir, kind, key) for (key,) in rows]


# --- the daemon's loop driven by a script on a fake clock ---------------------------------------
Step = list[Any] | Callable[[], list[Any]]  # events, or what the test does then (and its events)


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Scripted:
    """An event source (memoryd.daemon.events.EventSource) for tests: batches at given times
    of a fake clock, which it moves to the next step or to the loop's next deadline, whichever
    comes first (so every debounce and timer in between fires as it would). A step may be a
    function: the test acts then (writes a file, asserts) and returns the events. What the
    daemon puts itself (an overflow warning, a stop) comes in the next batch. When the script
    ends, the loop is stopped."""

    clock: FakeClock
    script: list[tuple[float, Step]]
    put_events: list[Any] = dataclass_field(default_factory=list)

    def put(self, event: Any) -> None:
        self.put_events.append(event)

    def batches(self, timeout: Callable[[], float | None]) -> Any:
        from memoryd.daemon.events import Control

        steps = sorted(self.script, key=lambda step: step[0])
        while True:
            if self.put_events:
                taken, self.put_events = self.put_events, []
                yield [(self.clock.now, event) for event in taken]
                continue
            wait = timeout()
            if not steps:
                yield [(self.clock.now, Control.STOP)]
                continue
            at, step = steps[0]
            if wait is not None and self.clock.now + wait < at:
                self.clock.now += wait
                yield []
                continue
            steps.pop(0)
            self.clock.now = max(self.clock.now, at)
            events = step() if callable(step) else step
            yield [(self.clock.now, event) for event in events]


class NoEvents:
    """A watch backend that arms nothing: the script is the only source of events."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def schedule(self, *_args: Any) -> object:
        return object()

    def unschedule(self, _watch: Any) -> None:
        pass

    def unschedule_all(self) -> None:
        pass


def scripted_daemon(rt: Runtime, clock: FakeClock, script: list[tuple[float, Step]]) -> Any:
    """A Daemon whose events come from `script` on `clock`, its watches armed nowhere."""
    from memoryd.daemon.loop import Daemon
    from memoryd.daemon.watch import Watcher

    class Unwatched(Watcher):
        def start(self) -> None:
            self.observer = NoEvents()

    return Daemon(
        None,
        rt.paths,
        rt,
        mono=clock,
        source=Scripted(clock, script),
        make_watcher=Unwatched,
    )


def settled(folder: Path) -> None:
    """Wait until a running daemon has taken in every change made to `folder` so far: a new
    memory written now is indexed by a pass that comes after (events of a dir come in order)."""
    probe = f"settled-{time.monotonic_ns()}.md"
    agent_write(folder, probe, "a change the daemon must have seen")
    wait_for(lambda: probe in index_text(folder), what="a pass after every change so far")


def daemon_pass(
    rt: Runtime,
    md: MemoryDir,
    *,
    changed: set[str] | None = None,
    held: Held | None = None,
    previous: DirScan | None = None,
) -> IndexOutcome:
    """The daemon's pass (update_changed) with no grace: `changed` and `held` as its session
    would pass them after an earlier pass. An index file just written (by the test) is
    "settling": as the daemon does, the pass looks again once it is due, on a clock moved on
    to then rather than after a sleep."""
    outcome = update_changed(
        rt, md, grace=0.0, settle=0.0, previous=previous, changed=changed, held=held
    )
    due = outcome.retry_after
    if outcome.status is IndexStatus.SETTLING and due is not None:
        later = dataclasses.replace(rt, clock=lambda: max(rt.clock(), due))
        outcome = update_changed(
            later, md, grace=0.0, settle=0.0, previous=previous, changed=changed, held=held
        )
    return outcome


def index_pass(rt: Runtime, md: MemoryDir, **asked: object) -> IndexOutcome:
    """One full index pass asked for with Request's fields (e.g. the dream probe's `mode`),
    where a test must compare the full view with a use case's held one."""
    return run_pass(rt, md, Request(**asked))  # type: ignore[arg-type]


def overlap(a: Sequence[int], b: Sequence[int]) -> float:
    """The overlap coefficient by its definition, |A∩B| / min(|A|,|B|) (0.0 when either is
    empty): what the duplicate engines must give, to the last bit."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / min(len(sa), len(sb))
