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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from memoryd import housekeeping, trash
from memoryd.audit import iter_lines
from memoryd.config import Config
from memoryd.discover import MemoryDir, explicit_dirs
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.passes import run_pass, update_changed
from memoryd.indexing.read import Held, Request
from memoryd.indexing.scan import DirScan
from memoryd.model.index import Budget, Entry
from memoryd.model.index_edit import IndexEdit, IndexInput, update_index
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime, boot_clock
from tests.conftest import write_memory

# --- planted dream cases (a repo-scope memory dir in a small code tree) -------------------------


DAY = 86400


def make_planted_repo(tmp_path: Path) -> Path:
    """`app/`: a small code tree (the names the planted memories cite) with a memory dir inside
    its .claude/; the planted-case modules' `repo` fixture."""
    root = tmp_path / "app"
    for rel in ("src/app.py", "src/util.py", "docs/guide.md", "lib/deep/moved_here.py"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def handle_request():\n    return 1\nclass PaymentGateway: pass\n")
    (root / ".claude" / "memory").mkdir(parents=True)
    return root


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
    rt.clock = lambda: now - back
    rt.today = lambda: date.fromtimestamp(now - back)
    rt.boot = lambda: (real[0], real[1] - back) if real else ("aged", 0.0)
    md = explicit_dirs(folder, Config())[0]
    housekeeping.rotate(rt, [md], keep_days=36500)
    if real is None:  # no boot clock here: the aged boot's own reading, a moment ago
        rt.clock, rt.today = (lambda: now), date.today
        rt.boot = lambda: ("aged", back)
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
    reads: bool = False,
    max_wait: str = "2s",
) -> Running:
    """`reads`: watch.consult_signal = "transcripts+reads" (read events count as consults)."""
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    config = tmp_path / f"config-{name}.toml"
    watch = 'consult_signal = "transcripts+reads"\n' if reads else ""
    config.write_text(
        CONFIG.format(grace=grace, pile_up=pile_up)
        .replace('max_wait = "2s"\n', f'max_wait = "{max_wait}"\n')
        .replace("[index]\n", "[index]\n" + index_config)
        .replace("[watch]\n", "[watch]\n" + watch)
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
