"""`memoryd service install|uninstall|status`: render the unit or plist, then ask the manager.
The templates are the repo's `systemd/` and `launchd/`, in a package `<prefix>/share/memoryd/`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from xml.sax.saxutils import escape

from memoryd.commands.common import EXIT_FINDINGS, EXIT_OK
from memoryd.errors import MemorydError
from memoryd.paths import AppPaths, in_clone, program

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

UNIT_NAME = "memoryd.service"
LABEL = "io.memoryd.daemon"
PLIST_NAME = f"{LABEL}.plist"


def template(kind: str, name: str) -> str:
    """A template from the source checkout, else from the installed data files."""
    candidates = [
        Path(__file__).resolve().parents[2] / kind / name,
        Path(sysconfig.get_path("data")) / "share" / "memoryd" / kind / name,
        Path(sys.prefix) / "share" / "memoryd" / kind / name,
    ]
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise MemorydError(
        f"the {kind} template {name} is not installed (looked in "
        f"{', '.join(str(c.parent) for c in candidates)}); reinstall memoryd"
    )


# What moves Claude Code's memory or memoryd's own folders: a service started by the manager
# does not inherit the shell's environment, so install carries these into the unit.
CARRIED_ENV = (
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_REMOTE_MEMORY_DIR",
    "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
)


def carried_env(environ: os._Environ[str] | dict[str, str] | None = None) -> dict[str, str]:
    """The relocation settings of this environment the service must run with."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in CARRIED_ENV if env.get(k)}


def _quote_systemd(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+=:@%" for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(command: list[str], config: Path | None, env: dict[str, str] | None = None) -> str:
    config_args = f" --config {_quote_systemd(str(config))}" if config else ""
    exec_line = " ".join(_quote_systemd(a) for a in command)
    text = template("systemd", UNIT_NAME)
    # `run` sits after @EXEC@ in the template; --config is a global option, so it goes first.
    text = text.replace("@EXEC@ run@CONFIG_ARGS@", f"{exec_line}{config_args} run")
    lines = "".join(
        f"Environment={_quote_systemd(f'{k}={v}')}\n" for k, v in sorted((env or {}).items())
    )
    return text.replace("ExecStart=", lines + "ExecStart=", 1) if lines else text


def render_plist(
    command: list[str], config: Path | None, paths: AppPaths, env: dict[str, str] | None = None
) -> str:
    args = [*command, *(["--config", str(config)] if config else []), "run"]
    lines = "\n".join(f"        <string>{escape(a)}</string>" for a in args)
    text = (
        template("launchd", PLIST_NAME)
        .replace("@PROGRAM_ARGUMENTS@", lines)
        .replace("@STDOUT@", escape(str(paths.log_dir / "memoryd.out.log")))
        .replace("@STDERR@", escape(str(paths.log_dir / "memoryd.err.log")))
    )
    if not env:
        return text
    pairs = "".join(
        f"        <key>{escape(k)}</key>\n        <string>{escape(v)}</string>\n"
        for k, v in sorted(env.items())
    )
    block = f"    <key>EnvironmentVariables</key>\n    <dict>\n{pairs}    </dict>\n"
    return text.replace("    <key>RunAtLoad</key>", block + "    <key>RunAtLoad</key>", 1)


@dataclass(frozen=True, slots=True)
class Plan:
    manager: str  # systemd | launchd
    file: Path
    content: str
    commands: list[list[str]]
    manual: str  # how to install by hand when the manager cannot be reached
    undo: str = ""  # what is left to do by hand after a failed uninstall
    note: str = ""  # said before an install: the command lives in a clone's venv


def plan(action: str, manager: str, config: Path | None, paths: AppPaths) -> Plan:
    command = program()
    if manager == "systemd":
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        file = Path(base) / "systemd" / "user" / UNIT_NAME
        content = render_unit(command, config, carried_env()) if action == "install" else ""
        commands = {
            "install": [
                ["systemctl", "--user", "daemon-reload"],
                ["systemctl", "--user", "enable", "--now", UNIT_NAME],
            ],
            "uninstall": [["systemctl", "--user", "disable", "--now", UNIT_NAME]],
            "status": [["systemctl", "--user", "status", "--no-pager", UNIT_NAME]],
        }[action]
        manual = (
            f"write the unit to {file}, then run `systemctl --user daemon-reload && "
            f"systemctl --user enable --now {UNIT_NAME}`; without a user manager, run "
            f"`{' '.join(command)} run` from your session's start-up instead"
        )
        undo = (
            f"A memoryd the manager started may still run: `memoryd status` names its pid; stop "
            f"it with `systemctl --user stop {UNIT_NAME}` once the manager can be reached, or "
            "kill that pid"
        )
    else:
        uid = os.getuid()
        file = Path.home() / "Library" / "LaunchAgents" / PLIST_NAME
        content = render_plist(command, config, paths, carried_env()) if action == "install" else ""
        commands = {
            "install": [["launchctl", "bootstrap", f"gui/{uid}", str(file)]],
            "uninstall": [["launchctl", "bootout", f"gui/{uid}/{LABEL}"]],
            "status": [["launchctl", "print", f"gui/{uid}/{LABEL}"]],
        }[action]
        manual = f"write the plist to {file}, then run `launchctl bootstrap gui/{uid} {file}`"
        undo = (
            f"If the agent is still loaded (`launchctl print gui/{uid}/{LABEL}`), stop it with "
            f"`launchctl bootout gui/{uid}/{LABEL}`"
        )
    clone = in_clone(command) if action == "install" else None
    note = (
        f"note: {command[0]} is in the source checkout {clone}: the service stops working if "
        "it goes. Install memoryd as a tool (`uv tool install '.[mcp]'`, or `pipx install "
        "'.[mcp]'`) and run `memoryd service install` again from there."
        if clone
        else ""
    )
    return Plan(manager, file, content, commands, manual, undo, note)


# A unit file or a plist holds no secret (the program's path, the config's path) and is read
# by the service manager: 0644, as systemd's and launchd's own files are, whatever the umask.
SERVICE_FILE_MODE = 0o644
# What `systemctl --user` says when no user manager can be reached (a container, an ssh
# session without lingering, a `su` shell): no command of it can work, so say what to do.
NO_BUS = "Failed to connect to bus"


@dataclass(frozen=True, slots=True)
class Done:
    lines: list[str]
    ok: bool  # for `status`: whether the manager says the service is there and running


def _write_service_file(path: Path, content: str) -> None:
    """Write the file whole (a temp file renamed over it), mode SERVICE_FILE_MODE."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, SERVICE_FILE_MODE)
    try:
        os.fchmod(fd, SERVICE_FILE_MODE)  # the umask narrowed the mode given to open
        os.write(fd, content.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(temp, path)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)


def _unreachable(p: Plan, output: str) -> str:
    if p.manager == "systemd" and NO_BUS in output:
        return (
            "no systemd user manager can be reached from this session (no user bus: a "
            "container, an ssh or su session without `loginctl enable-linger`)"
        )
    return ""


def execute(p: Plan, action: str) -> Done:
    """Carry out a plan; MemorydError when the manager cannot be asked or refuses. A failed
    install leaves the service file as it was; a failed uninstall still removes it."""
    tool = p.commands[0][0]
    if shutil.which(tool) is None:
        raise MemorydError(f"`{tool}` is not available on this machine; by hand: {p.manual}")
    output: list[str] = []
    previous: str | None = None
    if action == "install":
        with contextlib.suppress(OSError):
            previous = p.file.read_text(encoding="utf-8")
        _write_service_file(p.file, p.content)
        output.append(f"wrote {p.file}")
    for cmd in p.commands:
        result = _run(cmd)
        said = f"{result.stdout}{result.stderr}"
        output.append(f"$ {' '.join(cmd)}\n{said}".rstrip())
        if result.returncode == 0:
            continue
        why = (result.stderr or result.stdout).strip()
        unreachable = _unreachable(p, said)
        if action == "status":
            if unreachable:
                raise MemorydError(f"`{' '.join(cmd)}` failed ({why}): {unreachable}")
            return Done(output, ok=False)
        if action == "install":
            _roll_back(p, previous)
            raise MemorydError(
                f"`{' '.join(cmd)}` failed ({why}){': ' + unreachable if unreachable else ''}; "
                f"{'put back the previous' if previous is not None else 'removed'} {p.file}. "
                f"By hand: {p.manual}"
            )
        # Uninstall: the file goes anyway, so the manager cannot start memoryd again; what
        # the manager still runs is for the person to stop, said plainly.
        removed = _remove_service_file(p)
        raise MemorydError(
            f"`{' '.join(cmd)}` failed ({why}){': ' + unreachable if unreachable else ''}; "
            f"{'removed ' + ', '.join(removed) if removed else 'no service file was there'}, "
            f"so it does not start again. {p.undo}"
        )
    if action == "uninstall":
        output.extend(f"removed {name}" for name in _remove_service_file(p))
        if p.manager == "systemd":
            _run(["systemctl", "--user", "daemon-reload"])
    return Done(output, ok=True)


def _remove_service_file(p: Plan) -> list[str]:
    """Remove the service file and the link `systemctl enable` made; what was removed."""
    removed = []
    candidates = [p.file]
    if p.manager == "systemd":
        candidates.append(p.file.parent / "default.target.wants" / p.file.name)
    for path in candidates:
        if path != p.file and not path.is_symlink():
            continue  # not the link `enable` makes: not ours to remove
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(str(path))
    return removed


def _roll_back(p: Plan, previous: str | None) -> None:
    """Leave the service file as it was before a failed install."""
    with contextlib.suppress(OSError):
        if previous is None:
            p.file.unlink()
        else:
            _write_service_file(p.file, previous)
    if p.manager == "systemd":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run(["systemctl", "--user", "daemon-reload"])


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "service",
        description="Render the systemd user unit or the launchd agent with the "
        "absolute path of this memoryd, write it, and enable and start it.",
    )
    p.add_argument("action", choices=["install", "uninstall", "status"], help="what to do")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the file and the commands instead of running them",
    )
    p.add_argument(
        "--manager",
        choices=["systemd", "launchd"],
        default=None,
        help="which service manager (default: launchd on macOS, else systemd)",
    )


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    manager = args.manager or ("launchd" if sys.platform == "darwin" else "systemd")
    config = args.config.expanduser().absolute() if args.config else None
    planned = plan(args.action, manager, config, rt.paths)
    if planned.note:
        args.stderr.write(planned.note + "\n")
    if args.dry_run:
        if planned.content:
            out.write(f"# would write {planned.file}:\n{planned.content}\n")
        for cmd in planned.commands:
            out.write(f"$ {' '.join(cmd)}\n")
        return EXIT_OK
    done = execute(planned, args.action)
    for line in done.lines:
        out.write(line + "\n")
    return EXIT_OK if done.ok else EXIT_FINDINGS
