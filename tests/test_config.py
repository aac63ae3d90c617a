"""Configuration: defaults, every problem reported at once, the example file is complete."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.config import Config, build_config, config_as_dict, load_config, parse_duration
from memoryd.errors import ConfigError
from memoryd.paths import AppPaths

ROOT = Path(__file__).resolve().parents[1]


def test_durations_parse() -> None:
    """Durations read as "2s", "10m", "1h", "7d" (and "250ms")."""
    assert [parse_duration(x) for x in ("2s", "10m", "1h", "7d", "250ms")] == [
        2,
        600,
        3600,
        604800,
        0.25,
    ]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    """Unknown keys, wrong types, bad durations and a file-not-folder all come in one error."""
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    data = {
        "index": {"separater": " - ", "max_lines": "200", "new_file_grace": "10 seconds"},
        "paths": {"claude_home": str(a_file)},
        "dream": {"pile_up": 0},
        "bogus": {},
    }
    with pytest.raises(ConfigError) as caught:
        build_config(data, "test.toml")
    problems = "\n".join(caught.value.problems)
    for expected in (
        "index.separater: unknown key",
        "index.max_lines: expected a whole number",
        "index.new_file_grace: not a duration",
        "paths.claude_home:",
        "is a file, not a folder",
        "dream.pile_up: must be at least 1",
        "bogus: unknown section",
    ):
        assert expected in problems
    assert len(caught.value.problems) == 6


def test_dirs_section_sets_mode_and_repo_root(tmp_path: Path) -> None:
    """`[dirs."<path>"]` sets a dir's index mode and repo root; a bad mode is named."""
    cfg = build_config({"dirs": {str(tmp_path): {"mode": "off", "repo_root": str(tmp_path)}}}, "t")
    assert cfg.override_for(tmp_path).mode == "off"
    with pytest.raises(ConfigError, match=r'dirs\.".*"\.mode: expected one of auto, manage, off'):
        build_config({"dirs": {str(tmp_path): {"mode": "sometimes"}}}, "t")


def test_example_config_documents_every_key_with_its_default(tmp_path: Path) -> None:
    """config.example.toml parses, holds every key, and its values are the built-in defaults."""
    example = ROOT / "config.example.toml"
    paths = AppPaths(tmp_path / "none.toml", tmp_path, tmp_path)
    cfg = load_config(example, paths)
    ours = config_as_dict(cfg)
    defaults = config_as_dict(Config())
    for section, table in defaults.items():
        if section == "dirs":
            continue
        mine = ours[section]
        assert isinstance(table, dict) and isinstance(mine, dict)
        for key, value in table.items():
            assert f"\n{key} = " in example.read_text() or f"\n# {key} = " in example.read_text(), (
                f"{section}.{key} is not documented in config.example.toml"
            )
            if section != "paths":
                assert mine[key] == value, f"{section}.{key} differs from the default"


@pytest.mark.parametrize("value", ['"transcripts"', '"transcripts+reads"', "true", "false"])
def test_the_removed_consult_signal_key_is_refused_saying_what_replaced_it(
    cli, tmp_path: Path, value: str
) -> None:
    """`watch.consult_signal` (read events as consults) is gone: a file still naming it, with
    any value it once took, is refused as an unknown key is, and the problem says it was
    removed, what counts as consulting a memory now, and to delete the line."""
    config = tmp_path / "old.toml"
    config.write_text(f'[watch]\ndebounce = "1s"\nconsult_signal = {value}\n')
    result = cli("--config", config, "config", "check")
    assert result.code == 2
    problem = "watch.consult_signal: removed: reads of memory files no longer count as consults"
    assert problem in result.err
    assert "session transcripts" in result.err and "Delete this line" in result.err
    with pytest.raises(ConfigError) as caught:
        build_config({"watch": {"consult_signal": "transcripts"}}, "t")
    assert caught.value.problems == [
        "watch.consult_signal: removed: reads of memory files no longer count as consults; the "
        "agent's tool calls in its session transcripts and memoryd's MCP server answers always "
        "do. Delete this line"
    ]


def test_missing_default_file_means_defaults(tmp_path: Path) -> None:
    """With no --config and no user file, the built-in defaults apply."""
    cfg = load_config(None, AppPaths(tmp_path / "config.toml", tmp_path, tmp_path))
    assert cfg == Config(source="built-in defaults", paths=cfg.paths)


def test_config_check_cli_exit_codes(env, cli, tmp_path: Path) -> None:
    """`config check` exits 0 on a valid file and 2 listing every problem on a bad one."""
    good = tmp_path / "good.toml"
    good.write_text('[watch]\ndebounce = "1s"\n')
    assert cli("--config", good, "config", "check").code == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[watch]\ndebounce = 3\nmax_wiat = "1s"\n')
    result = cli("--config", bad, "config", "check")
    assert result.code == 2
    assert "watch.debounce" in result.err and "watch.max_wiat: unknown key" in result.err
    assert str(bad) in result.err
    broken = tmp_path / "broken.toml"
    broken.write_text("[watch\n")
    assert cli("--config", broken, "config", "check").code == 2
    shown = cli("--config", good, "config", "show")
    assert shown.code == 0 and 'debounce = "1s"' in shown.out
    # Only the daemon logs config.invalid (issue 12): a command says it on stderr.
    assert not env.audit_path.exists() or not [
        r for r in env.audit_rows() if r["event"] == "config.invalid"
    ]


def test_a_bad_config_leaves_read_only_commands_usable(env, cli, tmp_path: Path) -> None:
    """With the user's config file broken (while a daemon may run on the old one), `status`,
    `log`, `trash list` and `dirs` run on the built-in defaults, warning on stderr with the
    file, its first problems and `memoryd config check`; commands that write still refuse
    (exit 2); none writes config.invalid, which only the daemon (`run`) logs."""
    from tests.conftest import write_memory

    write_memory(env.claude / "agent-memory" / "reviewer", "style.md")
    env.config_dir.mkdir(parents=True)
    bad = env.config_dir / "config.toml"
    bad.write_text('[watch]\ndebounce = 3\nmax_wiat = "1s"\n')
    for command, code in ((("status",), 1), (("log",), 0), (("trash", "list"), 0), (("dirs",), 0)):
        result = cli(*command)
        assert result.code == code, (command, result.err)
        assert f"warning: {bad}: invalid configuration" in result.err, command
        assert "watch.debounce" in result.err and "watch.max_wiat" in result.err
        assert "memoryd config check" in result.err
    assert "reviewer" in cli("dirs").out  # found on the default Claude home
    for writer in (
        ("index",),
        ("dream",),
        ("trash", "purge"),
        ("trash", "restore", "x"),
        ("config", "check"),
    ):
        result = cli(*writer)
        assert result.code == 2, (writer, result.err)
        assert "invalid configuration" in result.err and "warning" not in result.err
    assert not env.audit_path.exists() or not [
        r for r in env.audit_rows() if r["event"] == "config.invalid"
    ]
    assert not (env.claude / "agent-memory" / "reviewer" / "MEMORY.md").exists()
    assert cli("run").code == 2
    [row] = [r for r in env.audit_rows() if r["event"] == "config.invalid"]
    assert row["level"] == "error" and row["source"] == str(bad)


def _config_check(config: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`memoryd --config FILE config check` in a child with its address space capped at 1 GiB:
    a reader without bound dies there of MemoryError (exit 1), not of the OOM killer."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), "config", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=cap,
    )


def test_a_config_linked_to_dev_zero_is_refused_unread(tmp_path: Path) -> None:
    """A config symlinked to /dev/zero is refused as a device, naming the file (exit 2); the old
    code read it without end (24 GB before the OOM killer; MemoryError under the cap here)."""
    link = tmp_path / "config.toml"
    link.symlink_to("/dev/zero")
    done = _config_check(link, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert str(link) in done.stderr and "character device" in done.stderr


def test_an_oversized_config_is_refused(tmp_path: Path) -> None:
    """A config over 1 MiB (valid TOML: a long comment) is refused with its size, never parsed."""
    limit = 1024 * 1024  # the documented limit (config.CONFIG_MAX_BYTES)
    big = tmp_path / "config.toml"
    big.write_text('[watch]\ndebounce = "1s"\n# ' + "x" * limit + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(big, AppPaths(tmp_path / "none.toml", tmp_path, tmp_path))
    assert caught.value.source == str(big)
    assert f"over {limit} bytes" in caught.value.problems[0]
    exact = tmp_path / "exact.toml"  # at the limit: still read
    head = '[watch]\ndebounce = "1s"\n# '
    exact.write_text(head + "x" * (limit - len(head) - 1) + "\n")
    assert load_config(exact, AppPaths(tmp_path / "n.toml", tmp_path, tmp_path)).watch.debounce == 1


def test_special_files_as_config(tmp_path: Path) -> None:
    """A FIFO (at --config or the default path) is refused without blocking, a folder too;
    /dev/null still reads as an empty configuration; a symlink to a regular file is followed."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    paths = AppPaths(fifo, tmp_path, tmp_path)
    for explicit in (fifo, None):
        with pytest.raises(ConfigError, match="FIFO"):
            load_config(explicit, paths)
    with pytest.raises(ConfigError, match="a folder"):
        load_config(tmp_path, paths)
    assert load_config(Path("/dev/null"), paths).source == "/dev/null"
    real = tmp_path / "dotfiles" / "memoryd.toml"
    real.parent.mkdir()
    real.write_text('[watch]\ndebounce = "3s"\n')
    link = tmp_path / "linked.toml"
    link.symlink_to(real)
    assert load_config(link, paths).watch.debounce == 3
