"""The command line: help for every command, exit codes, `memoryd log` for a person."""

import contextlib
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli import build_parser, effect_of
from memoryd.runtime import Effect
from memoryd.storage.statedb import Schema, StateDB, forget_shared
from memoryd.versions.records import SCHEMA as VERSIONS
from tests.conftest import Env, write_memory
from tests.helpers import git, make_small_repo


def _commands() -> list[list[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    out = []
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        out.append([name])
        for action in p._actions:
            if action.dest.endswith("_command") and action.choices:
                out.extend([name, child] for child in action.choices)
    return out


@pytest.mark.parametrize("words", _commands(), ids=" ".join)
def test_every_command_has_help(cli, words: list[str]) -> None:
    """`memoryd <command> --help` describes every option and exits 0."""
    result = cli(*words, "--help")
    assert result.code == 0
    assert "usage: memoryd" in result.out


def test_usage_errors_exit_2(cli) -> None:
    """An unknown command or option is a usage error: exit 2."""
    assert cli("frobnicate").code == 2
    assert cli("index", "--bogus").code == 2


def test_missing_dir_names_the_path(cli, tmp_path: Path) -> None:
    """A DIR that does not exist is named in the error, with what to pass instead."""
    result = cli("index", tmp_path / "nope")
    assert result.code == 2  # a usage error (DESIGN §8)
    assert str(tmp_path / "nope") in result.err and "name a memory dir" in result.err


def test_log_renders_filters_and_skips_torn_lines(env: Env, cli, tmp_path: Path) -> None:
    """`memoryd log` prints readable lines, filters by event and dir, and skips a torn row."""
    folder = tmp_path / "m"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    with env.audit_path.open("a") as handle:
        handle.write('{"event": "index.upd')
    result = cli("log")
    assert result.code == 0
    assert "index.updated" in result.out and f"/{folder.name} " in result.out  # shortened
    assert str(folder) in cli("log", "--verbose").out
    assert cli("log", "--event", "dream.*").out == ""
    assert "index.updated" in cli("log", "--dir", folder).out
    assert cli("log", "--dir", tmp_path / "other").out == ""
    assert cli("log", "--dir", tmp_path).out == cli("log", "--dir", folder).out  # a parent
    rows = [json.loads(line) for line in cli("log", "--json").out.splitlines()]
    assert rows and all("ts" in r for r in rows)
    assert cli("log", "--since", "1h").out == result.out
    # A value that cannot be used is a usage error (DESIGN §8: exit 2), named in the message.
    bad = cli("log", "--since", "whenever")
    assert bad.code == 2 and "--since 'whenever'" in bad.err
    assert cli("trash", "purge", "--older-than", "soon").code == 2
    assert cli("dream", "--repo-root", tmp_path / "nowhere", folder).code == 2
    assert cli("explain", "--repo-root", tmp_path / "nowhere", folder / "a.md").code == 2
    # A row written after the torn one is whole and readable; --dir takes no sibling.
    sibling = tmp_path / "m2"  # its path starts with the first one's
    write_memory(sibling, "b.md")
    assert cli("index", sibling).code == 0
    assert str(sibling) not in cli("log", "-v", "--dir", folder).out
    assert str(sibling) in cli("log", "-v", "--dir", sibling).out


def test_console_script_runs(env: Env) -> None:
    """`python -m memoryd --version` works as an installed program would."""
    proc = subprocess.run(
        [sys.executable, "-m", "memoryd", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.startswith("memoryd ")


def test_readme_lists_every_audit_event_and_the_two_quick_start_commands() -> None:
    """The README's event table is the schema table; its quick start has the CI test command."""
    from memoryd.storage.audit import EVENTS

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    for name, spec in EVENTS.items():
        assert f"| `{name}` | {spec.level} |" in readme, f"{name} missing from README"
    test_command = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"
    assert test_command in readme
    ci = (root / ".ci" / "run").read_text()
    assert ".venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'" in ci
    assert ".venv/bin/pytest\n" in ci


def test_log_follow_survives_rotation(env: Env, tmp_path: Path) -> None:
    """`memoryd log -f` prints new rows, across a size rotation of the file."""
    import os
    import time

    from memoryd.storage.audit import AuditLog

    log = AuditLog(env.audit_path, max_bytes=4096, backups=2)
    log.write("dream.skipped", why="before")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "log", "-f"],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        raw = b""
        deadline = time.monotonic() + 10
        os.set_blocking(proc.stdout.fileno(), False)  # type: ignore[union-attr]
        while b" before\n" not in raw and time.monotonic() < deadline:  # it is following
            raw += proc.stdout.read() or b""  # type: ignore[union-attr]
            time.sleep(0.1)
        for i in range(40):
            log.write("dream.skipped", why=f"filler {i} " + "x" * 60)
        log.write("dream.skipped", why="after rotation")
        assert env.audit_path.with_name("audit.jsonl.1").exists()
        deadline = time.monotonic() + 10
        while b"after rotation" not in raw and time.monotonic() < deadline:
            raw += proc.stdout.read() or b""  # type: ignore[union-attr]
            time.sleep(0.1)
        seen = raw.decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
    assert " before\n" in seen and " after rotation\n" in seen


def test_why_a_file_is_no_memory_is_said_where_one_asks(env: Env, cli, tmp_path: Path) -> None:
    """`explain` and `dirs` say why a file is not used, and what to do, not just that."""
    folder = tmp_path / "m"
    write_memory(folder, "a.md")
    (folder / "broken.md").write_text("---\nname: [unclosed\n---\nbody\n")
    (folder / "plain.md").write_text("no frontmatter at all\n")
    os.mkfifo(folder / "pipe.md")
    (folder / "link.md").symlink_to(folder / "a.md")
    broken = cli("explain", folder / "broken.md")
    assert broken.code == 1 and "cannot use it as a memory" in broken.err
    assert "broken.md" in broken.err and "(" in broken.err  # the problem, then what to do
    assert "note, not a memory" in cli("explain", folder / "plain.md").err
    assert "not a regular file" in cli("explain", folder / "pipe.md").err
    assert "a symlink" in cli("explain", folder / "link.md").err
    listing = cli("dirs", folder).out
    assert any(line.strip().startswith("broken.md: ") for line in listing.splitlines())
    rows = json.loads(cli("dirs", "--json", folder).out)["dirs"][0]["problems"]
    assert [r["file"] for r in rows if r["file"] == "broken.md"] and all(r["hint"] for r in rows)


def test_control_characters_in_names_are_shown_escaped(env: Env, cli, tmp_path: Path) -> None:
    from memoryd.model.display import shown

    assert shown("new\nline.md") == "new\\nline.md"
    assert shown("\x1b[31mred") == "\\x1b[31mred"
    assert shown("한국어 메모.md") == "한국어 메모.md"
    folder = tmp_path / "m\x1b[2J"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    logged = cli("log").out
    assert "\x1b" not in logged and "m\\x1b[2J" in logged


SERVICE_VARS = ("INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "XPC_SERVICE_NAME")


def _run_until(env: Env, extra: dict[str, str], line: str) -> str:
    """`memoryd run` with stderr piped (as through `tee`), stopped once `line` is printed."""
    import signal
    import time

    child_env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS} | extra
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "run"],
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    try:
        for got in proc.stderr:
            seen.append(got)
            if line in got or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    return "".join(seen) + rest


def test_run_says_started_then_waiting_and_where_the_log_is(env: Env) -> None:
    """Piped through `tee`, `memoryd run` prints readable lines (JSON only under a service
    manager): "started" first, naming the audit log; then "waiting" naming the Claude home
    once. The old one printed JSON, "waiting" first, the path twice and no audit log."""
    text = _run_until(env, {}, "waiting for")
    lines = [line for line in text.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines), text
    started = next(i for i, line in enumerate(lines) if "memoryd started" in line)
    waiting = next(i for i, line in enumerate(lines) if "waiting for" in line)
    assert started < waiting, text
    assert str(env.audit_path) in lines[started]
    assert text.count(str(env.claude)) == 1, text
    under_systemd = _run_until(env, {"INVOCATION_ID": "0123"}, "waiting for")
    first = json.loads(under_systemd.splitlines()[0])
    assert first["event"] == "memoryd started" and first["audit_log"] == str(env.audit_path)


def test_service_manager_detection() -> None:
    from memoryd.logsetup import under_service_manager

    assert not under_service_manager({})
    assert under_service_manager({"INVOCATION_ID": "x"})
    assert under_service_manager({"JOURNAL_STREAM": "8:123"})
    assert under_service_manager({"XPC_SERVICE_NAME": "io.memoryd.daemon"})
    assert not under_service_manager({"XPC_SERVICE_NAME": "0"})  # a macOS terminal


HEAVY = (
    "memoryd.indexing.passes",
    "memoryd.discover.finder",  # discovery (its package holds only a docstring)
    "memoryd.indexing.scan",
    "memoryd.model.memfile",
    "memoryd.daemon.loop",
    "structlog",
    "yaml",
    "watchdog",
    "apscheduler",
)


@pytest.mark.parametrize("words", [["--help"], ["status"], ["status", "--json"], ["log"]])
def test_light_commands_import_no_heavy_module(env: Env, words: list[str]) -> None:
    """`--help`, `status` and `log` as whole processes load none of the modules that made
    start-up ~250 ms (the index machinery, YAML, structlog, the daemon's libraries): each
    handler imports what it uses. The old cli.py imported the indexer and discovery at the
    top, for every command."""
    probe = (
        "import sys\nfrom memoryd.cli import main\n"
        f"code = main({words!r})\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=os.environ.copy(),
    )
    loaded = next(line for line in proc.stdout.splitlines() if line.startswith("LOADED"))
    assert loaded == "LOADED []", (loaded, proc.stderr[-500:])


@pytest.mark.parametrize("words", _commands(), ids=" ".join)
def test_a_named_command_builds_only_its_own_parser_with_the_same_help(
    capsys: pytest.CaptureFixture[str], words: list[str]
) -> None:
    """`memoryd X ...` builds X's parser alone (start-up pays for one command's arguments),
    and what it says for `--help` is what the parser of every command says."""

    def help_of(parser: object) -> str:
        with pytest.raises(SystemExit):
            parser.parse_args([*words, "--help"])  # type: ignore[attr-defined]
        return capsys.readouterr().out

    only = build_parser(words[0])
    sub = next(a for a in only._actions if a.dest == "command")
    assert list(sub.choices) == [words[0]]  # type: ignore[arg-type]
    assert help_of(only) == help_of(build_parser())


ONLY_OWN = [
    (["--help"], set()),
    (["--version"], set()),
    (["search", "x"], {"search"}),
    (["status"], {"status"}),
    (["history", "x"], {"history", "supersession"}),  # its use case, beside it
    # As the service runs the daemon (`memoryd --config F run`): the top options first.
    (["--config", "absent.toml", "--color", "never", "status"], {"status"}),
    (["--config=absent.toml", "search", "x"], {"search"}),
]


@pytest.mark.parametrize(("words", "own"), ONLY_OWN)
def test_a_run_imports_its_own_command_module_alone(
    env: Env, words: list[str], own: set[str]
) -> None:
    """The command table imports a command's module when it runs (or when its arguments are
    parsed): `memoryd --help` imports none, `memoryd search` only search's (and the modules
    every command shares). The old cli imported five command shells to build any parser."""
    probe = (
        "import sys\nfrom memoryd.cli import main\n"
        f"main({words!r})\n"
        "names = [m.split('.')[-1].removeprefix('cmd_') for m in sys.modules\n"
        "         if m.startswith(('memoryd.cmd_', 'memoryd.commands.'))]\n"
        "print('LOADED', ' '.join(sorted(names)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=os.environ.copy(),
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LOADED"))
    shared = {"common", "resolve", "versions", "legacy"}  # legacy: every run's import check
    assert set(line.split()[1:]) - shared == own, (line, proc.stderr[-500:])


def test_a_word_that_names_no_command_builds_every_parser() -> None:
    """The usage error lists every command, so a misspelt one gets them all."""
    sub = next(a for a in build_parser("indx")._actions if a.dest == "command")
    assert {"index", "dirs", "search", "history"} <= set(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "effect"),
    [
        (["status"], Effect.LOOKS),
        (["history", "a.md"], Effect.LOOKS),
        (["trash", "list"], Effect.LOOKS),
        (["index", "--check"], Effect.DRY),
        (["dream", "--dry-run"], Effect.DRY),
        (["explain", "a.md"], Effect.DRY),
        (["index"], Effect.KEEPS),
        (["history", "a.md", "--restore", "1"], Effect.KEEPS),
        (["config", "check"], Effect.WRITES),
    ],
)
def test_what_a_command_may_change_is_decided_once(
    env: Env, argv: list[str], effect: Effect
) -> None:
    """One policy for "writes?" and "keeps versions?", decided where the command starts and
    carried by its Runtime (the index pass, the version store and discovery's cache ask it)."""
    args = build_parser(argv[0]).parse_args(argv)
    assert effect_of(args) is effect
    rt = dataclasses.replace(env.runtime(), effect=effect)
    assert rt.dry_run is not effect.writes
    assert effect.keeps_versions is (effect is Effect.KEEPS)


def test_a_command_that_writes_nothing_makes_no_state(env: Env, cli: Any) -> None:
    """The read-only commands (Effect.LOOKS), dry runs and checks (Effect.DRY) in a fresh
    state dir: nothing kept reads as nothing kept, nothing trashed as nothing trashed, and
    no state.sqlite (nor its tables, in a state file of other concerns) is made. The search
    index (`recall/`, a cache any command may write) is the one thing they may leave; a repo
    dir's trash (in the state dir) is not made either."""
    folder = env.home / "mem"
    write_memory(folder, "a.md", description="a thing to find")
    a = folder / "a.md"
    repo = make_small_repo(env.home)
    write_memory(repo / ".claude" / "memory", "r.md", description="a repo thing")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "memories")
    r = repo / ".claude" / "memory"
    runs: list[tuple[str | Path, ...]] = [
        ("trash", "list", r), ("history", r / "r.md"), ("dirs", r), ("dream", "--dry-run", r),
        ("status",), ("status", "--json"), ("log",), ("dirs", folder),
        ("history", a), ("history", "a.md", folder), ("history", a, "--json"),
        ("history", a, "--diff"), ("trash", "list"), ("trash", "list", folder, "--json"),
        ("explain", a), ("index", "--check", folder), ("dream", "--dry-run", folder),
        ("trash", "purge", "--dry-run", folder), ("forget", "--dry-run", a),
        ("search", "thing", folder), ("show", a), ("recall", "--path", "x.py", folder),
    ]  # fmt: skip
    for args in runs:
        result = cli(*args)
        assert "Traceback" not in result.err, (args, result.err)
        left = {p.relative_to(env.state).parts[0] for p in env.state.rglob("*")}
        assert left <= {"recall"}, (args, sorted(env.state.rglob("*")))
        if args[0] == "history" and "--json" in args:
            assert json.loads(result.out)["versions"]["versions"] == [], result.out
        elif args[0] == "history" and "--diff" not in args:
            assert "memoryd has kept no version of it" in result.out, result.out
        elif args[:2] == ("trash", "list") and "--json" in args:
            doc = json.loads(result.out)
            assert (doc["trash"], doc["deleted_outside"]) == ([], []), result.out
        elif args[:2] == ("trash", "list"):
            assert result.code == 0 and result.out == "The trash is empty.\n", result.out
    # A state file of other concerns (no kept versions yet) gets no tables of theirs.
    StateDB.in_state_dir(env.state).ensure(Schema("other", 1, "CREATE TABLE other (k)", ("other",)))
    forget_shared()
    for args in [("status",), ("history", a), ("trash", "list", folder)]:
        cli(*args)
    with contextlib.closing(sqlite3.connect(env.state / "state.sqlite")) as conn:
        tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert tables == {"schemas", "other"} and not tables & set(VERSIONS.tables)
