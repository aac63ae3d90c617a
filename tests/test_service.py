"""Service files: the unit and the plist render with absolute paths and DESIGN §7's settings."""

import os
import plistlib
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from memoryd import paths
from memoryd.commands import service
from memoryd.paths import AppPaths
from tests.conftest import Env, tree_digest

PATHS = AppPaths(Path("/cfg/config.toml"), Path("/state"), Path("/logs/memoryd"))
COMMAND = ["/opt/memoryd venv/bin/memoryd"]


def test_unit_has_the_design_settings() -> None:
    """Type=notify, restart on failure, umask, nice, idle I/O, no new privileges, no ProtectHome."""
    unit = service.render_unit(COMMAND, Path("/home/me/.config/memoryd/config.toml"))
    lines = {
        line.split("=", 1)[0]: line.split("=", 1)[1]
        for line in unit.splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert lines["Type"] == "notify"
    assert lines["ExecStart"] == (
        '"/opt/memoryd venv/bin/memoryd" --config /home/me/.config/memoryd/config.toml run'
    )
    for key, value in {
        "Restart": "on-failure",
        "UMask": "0077",
        "Nice": "10",
        "IOSchedulingClass": "idle",
        "NoNewPrivileges": "yes",
    }.items():
        assert lines[key] == value
    assert "WatchdogSec" in lines
    assert "ProtectHome" not in lines
    assert "@" + "EXEC@" not in unit


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the rendered unit, where the tool exists."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    exe = tmp_path / "memoryd"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    unit = tmp_path / "memoryd.service"
    unit.write_text(service.render_unit([str(exe)], None))
    # Verified in system scope: `--user` needs a running user manager, which CI lacks; the
    # unit's directives are the same in both scopes.
    result = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, check=False
    )
    if "Failed to initialize manager" in result.stderr:
        pytest.skip(f"systemd-analyze cannot start a manager here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # no warnings either


def test_plist_parses_and_has_the_design_keys() -> None:
    """The plist parses with plistlib and carries RunAtLoad, KeepAlive, Background, logs, Umask."""
    data = plistlib.loads(service.render_plist(COMMAND, Path("/c & d/config.toml"), PATHS).encode())
    assert data["Label"] == service.LABEL
    assert data["ProgramArguments"] == [*COMMAND, "--config", "/c & d/config.toml", "run"]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["ProcessType"] == "Background" and data["LowPriorityIO"] is True
    assert data["Umask"] == 63
    assert data["StandardOutPath"] == "/logs/memoryd/memoryd.out.log"
    assert Path(data["StandardErrorPath"]).is_absolute()


@pytest.mark.parametrize("manager", ["systemd", "launchd"])
def test_install_dry_run_prints_file_and_commands(env: Env, cli, manager: str) -> None:
    """`service install --dry-run` prints the file and the commands and writes nothing."""
    before = tree_digest(env.home)
    result = cli("service", "install", "--dry-run", "--manager", manager)
    assert result.code == 0, result.err
    assert "# would write" in result.out
    assert (
        "systemctl --user enable --now memoryd.service" in result.out
        if manager == "systemd"
        else "launchctl bootstrap gui/" in result.out
    )
    assert "ExecStart=/" in result.out or "<string>/" in result.out  # an absolute program
    assert tree_digest(env.home) == before


def test_missing_service_manager_names_the_manual_steps(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without systemctl on PATH, install fails with exit 1 and says what to do by hand."""
    monkeypatch.setenv("PATH", "/nonexistent")
    result = cli("service", "install", "--manager", "systemd")
    assert result.code == 1
    assert "systemctl" in result.err and "by hand" in result.err


def test_demo_runs_in_a_sandbox_and_leaves_nothing(env: Env, cli) -> None:
    """`memoryd demo` shows the index change, a dream report, the log and a restore."""
    import tempfile

    before_home = tree_digest(env.home)
    before_tmp = set(Path(tempfile.gettempdir()).glob("memoryd-demo-*"))
    result = cli("demo")
    assert result.code == 0, result.err
    for expected in (
        "+- [API rate limits](api_limits.md)",
        "Dream report",
        "duplicate",
        "stale",
        "contradiction",
        "trash.moved",
        "restored",
    ):
        assert expected in result.out, expected
    assert tree_digest(env.home) == before_home
    assert set(Path(tempfile.gettempdir()).glob("memoryd-demo-*")) == before_tmp


FAKE_MANAGER = """#!/bin/sh
# A stand-in service manager: records its arguments, fails where FAKE_FAIL matches them.
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$*" in
  *"$FAKE_FAIL"*) echo "$FAKE_SAYS" >&2; exit "${FAKE_CODE:-1}" ;;
esac
echo "ok"
"""


@pytest.fixture
def fake_manager(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """systemctl and launchctl scripts first on PATH; their calls go to the returned file."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for tool in ("systemctl", "launchctl"):
        script = bin_dir / tool
        script.write_text(FAKE_MANAGER)
        script.chmod(0o755)
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(calls))
    monkeypatch.setenv("FAKE_FAIL", "no call matches this")
    monkeypatch.setenv("FAKE_SAYS", "")
    return calls


def _unit(env: Env) -> Path:
    return env.home / ".config" / "systemd" / "user" / service.UNIT_NAME


def test_install_writes_a_0644_unit_and_uninstall_removes_it(
    env: Env, cli, fake_manager: Path
) -> None:
    """install writes the unit 0644 whatever the umask (it holds no secret; the manager reads
    it), then reloads and enables; uninstall disables and removes it."""
    old = os.umask(0o077)
    try:
        result = cli("service", "install", "--manager", "systemd")
    finally:
        os.umask(old)
    assert result.code == 0, result.err
    assert stat.S_IMODE(_unit(env).stat().st_mode) == 0o644
    assert "systemctl --user enable --now memoryd.service" in fake_manager.read_text()
    result = cli("service", "uninstall", "--manager", "systemd")
    assert result.code == 0, result.err
    assert not _unit(env).exists() and "removed" in result.out


def test_a_failed_install_leaves_no_unit(
    env: Env, cli, fake_manager: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """enable fails (no user bus): exit 1, the unit is removed again and the message names
    the reason and the steps by hand; a unit there before is put back as it was. The old
    code left the new unit written."""
    monkeypatch.setenv("FAKE_FAIL", "enable")
    monkeypatch.setenv("FAKE_SAYS", "Failed to connect to bus: No medium found")
    result = cli("service", "install", "--manager", "systemd")
    assert result.code == 1
    assert not _unit(env).exists()
    assert "no systemd user manager can be reached" in result.err and "By hand" in result.err
    _unit(env).write_text("# the unit a person wrote\n")
    assert cli("service", "install", "--manager", "systemd").code == 1
    assert _unit(env).read_text() == "# the unit a person wrote\n"


def test_a_failed_uninstall_says_what_is_left_not_the_install_steps(
    env: Env, cli, fake_manager: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """disable fails: exit 1; the unit and its enable link are removed so the manager cannot
    start memoryd again, and the message says how to stop one still running, never the
    install steps (the old message told the person to write the unit and enable it)."""
    assert cli("service", "install", "--manager", "systemd").code == 0
    wants = _unit(env).parent / "default.target.wants"
    wants.mkdir()
    (wants / service.UNIT_NAME).symlink_to(_unit(env))
    monkeypatch.setenv("FAKE_FAIL", "disable")
    monkeypatch.setenv("FAKE_SAYS", "Failed to connect to bus: No medium found")
    result = cli("service", "uninstall", "--manager", "systemd")
    assert result.code == 1
    assert "write the unit" not in result.err and "enable --now" not in result.err
    assert "memoryd status" in result.err and "systemctl --user stop" in result.err
    assert not _unit(env).exists() and not os.path.lexists(wants / service.UNIT_NAME)


@pytest.mark.parametrize(
    ("says", "code"),
    [
        ("Failed to connect to bus: No medium found", 1),
        ("Unit memoryd.service could not be found.", 4),
        ("", 3),  # inactive
    ],
)
def test_service_status_exits_non_zero_when_the_manager_says_so(
    env: Env, cli, fake_manager: Path, monkeypatch: pytest.MonkeyPatch, says: str, code: int
) -> None:
    """`service status` exits 1 when systemctl fails (the old code exited 0 after `Failed to
    connect to bus`); without a bus it says why."""
    monkeypatch.setenv("FAKE_FAIL", "status")
    monkeypatch.setenv("FAKE_SAYS", says)
    monkeypatch.setenv("FAKE_CODE", str(code))
    result = cli("service", "status", "--manager", "systemd")
    assert result.code == 1
    if "bus" in says:
        assert "no systemd user manager can be reached" in result.err
    monkeypatch.setenv("FAKE_FAIL", "no call matches this")
    assert cli("service", "status", "--manager", "systemd").code == 0


def test_launchd_install_and_a_failed_bootstrap(
    env: Env, cli, fake_manager: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launchd: the plist is written 0644 and bootstrapped; a failed bootstrap removes it."""
    plist = env.home / "Library" / "LaunchAgents" / service.PLIST_NAME
    assert cli("service", "install", "--manager", "launchd").code == 0
    assert stat.S_IMODE(plist.stat().st_mode) == 0o644
    assert "launchctl bootstrap gui/" in fake_manager.read_text()
    plist.unlink()
    monkeypatch.setenv("FAKE_FAIL", "bootstrap")
    monkeypatch.setenv("FAKE_SAYS", "Bootstrap failed: 5: Input/output error")
    result = cli("service", "install", "--manager", "launchd")
    assert result.code == 1 and not plist.exists()


@pytest.mark.parametrize("manager", ["systemd", "launchd"])
def test_install_carries_claude_config_dir_and_the_relocation_settings(
    env: Env, cli, manager: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A service started by the manager gets none of the shell's environment: the settings
    that move Claude Code's memory or memoryd's folders go into the unit or the plist."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude home"))
    monkeypatch.setenv("CLAUDE_CODE_REMOTE_MEMORY_DIR", "/mnt/remote")
    monkeypatch.delenv("CLAUDE_COWORK_MEMORY_PATH_OVERRIDE", raising=False)
    result = cli("service", "install", "--dry-run", "--manager", manager)
    assert result.code == 0, result.err
    content = result.out.split(":\n", 1)[1].rsplit("\n$ ", 1)[0]
    if manager == "systemd":
        env_lines = [line for line in content.splitlines() if line.startswith("Environment=")]
        assert f'Environment="CLAUDE_CONFIG_DIR={tmp_path / "claude home"}"' in env_lines
        assert "Environment=CLAUDE_CODE_REMOTE_MEMORY_DIR=/mnt/remote" in env_lines
        assert f"Environment=XDG_STATE_HOME={env.home / '.local' / 'state'}" in env_lines
        assert not any("COWORK" in line for line in env_lines)
    else:
        data = plistlib.loads(content.encode())
        assert data["EnvironmentVariables"]["CLAUDE_CONFIG_DIR"] == str(tmp_path / "claude home")
        assert data["EnvironmentVariables"]["CLAUDE_CODE_REMOTE_MEMORY_DIR"] == "/mnt/remote"


def test_the_unit_runs_the_memoryd_on_path_not_the_venv_it_links_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool install puts `~/.local/bin/memoryd`, a link into a venv an upgrade replaces:
    the unit names the link, the command a person runs."""
    venv = tmp_path / "tools" / "memoryd" / "bin"
    venv.mkdir(parents=True)
    script = venv / "memoryd"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    bin_dir = tmp_path / "home" / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "memoryd").symlink_to(script)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin")
    monkeypatch.setattr("sys.argv", [str(script), "service", "install"])
    assert paths.program() == [str(bin_dir / "memoryd")]
    unit = service.render_unit(paths.program(), None)
    assert f"ExecStart={bin_dir / 'memoryd'} run" in unit


def test_a_memoryd_in_a_source_checkout_is_said(tmp_path: Path) -> None:
    clone = tmp_path / "memoryd-clone"
    (clone / "memoryd").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("")
    assert paths.in_clone([str(clone / ".venv" / "bin" / "memoryd")]) == clone
    assert paths.in_clone([str(tmp_path / "home" / ".local" / "bin" / "memoryd")]) is None
