"""Service files: the unit and the plist render with absolute paths and DESIGN §7's settings."""

import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from memoryd import service
from memoryd.paths import AppPaths
from tests.conftest import Env, tree_digest

PATHS = AppPaths(Path("/cfg/config.toml"), Path("/state"), Path("/logs/memoryd"))
COMMAND = ["/opt/memoryd venv/bin/memoryd"]


def test_unit_has_the_design_settings() -> None:
    """Type=notify, restart on failure, umask, nice, idle I/O, no new privileges, no ProtectHome."""
    unit = service.render_unit(COMMAND, Path("/home/me/.config/memoryd/config.toml"))
    lines = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in unit.splitlines()
             if "=" in line and not line.startswith("#")}
    assert lines["Type"] == "notify"
    assert lines["ExecStart"] == ('"/opt/memoryd venv/bin/memoryd" --config '
                                  "/home/me/.config/memoryd/config.toml run")
    for key, value in {"Restart": "on-failure", "UMask": "0077", "Nice": "10",
                       "IOSchedulingClass": "idle", "NoNewPrivileges": "yes"}.items():
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
    result = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                            check=False)
    if "Failed to initialize manager" in result.stderr:
        pytest.skip(f"systemd-analyze cannot start a manager here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # no warnings either


def test_plist_parses_and_has_the_design_keys() -> None:
    """The plist parses with plistlib and carries RunAtLoad, KeepAlive, Background, logs, Umask."""
    data = plistlib.loads(service.render_plist(COMMAND, Path("/c & d/config.toml"),
                                               PATHS).encode())
    assert data["Label"] == service.LABEL
    assert data["ProgramArguments"] == [*COMMAND, "--config", "/c & d/config.toml", "run"]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["ProcessType"] == "Background" and data["LowPriorityIO"] is True
    assert data["Umask"] == 63
    assert data["StandardOutPath"] == "/logs/memoryd/memoryd.out.log"
    assert Path(data["StandardErrorPath"]).is_absolute()


@pytest.mark.parametrize("manager", ["systemd", "launchd"])
def test_install_dry_run_prints_file_and_commands(env: Env, cli, manager: str) -> None:  # type: ignore[no-untyped-def]
    """`service install --dry-run` prints the file and the commands and writes nothing."""
    before = tree_digest(env.home)
    result = cli("service", "install", "--dry-run", "--manager", manager)
    assert result.code == 0, result.err
    assert "# would write" in result.out
    assert ("systemctl --user enable --now memoryd.service" in result.out
            if manager == "systemd" else "launchctl bootstrap gui/" in result.out)
    assert "ExecStart=/" in result.out or "<string>/" in result.out  # an absolute program
    assert tree_digest(env.home) == before


def test_missing_service_manager_names_the_manual_steps(env: Env, cli,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without systemctl on PATH, install fails with exit 1 and says what to do by hand."""
    monkeypatch.setenv("PATH", "/nonexistent")
    result = cli("service", "install", "--manager", "systemd")
    assert result.code == 1
    assert "systemctl" in result.err and "by hand" in result.err


def test_demo_runs_in_a_sandbox_and_leaves_nothing(env: Env, cli) -> None:  # type: ignore[no-untyped-def]
    """`memoryd demo` shows the index change, a dream report, the log and a restore."""
    import tempfile

    before_home = tree_digest(env.home)
    before_tmp = set(Path(tempfile.gettempdir()).glob("memoryd-demo-*"))
    result = cli("demo")
    assert result.code == 0, result.err
    for expected in ("+- [API rate limits](api_limits.md)", "Dream report", "duplicate",
                     "stale", "contradiction", "trash.moved", "restored"):
        assert expected in result.out, expected
    assert tree_digest(env.home) == before_home
    assert set(Path(tempfile.gettempdir()).glob("memoryd-demo-*")) == before_tmp
