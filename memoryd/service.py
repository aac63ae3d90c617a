"""`memoryd service install|uninstall|status`: render the unit or plist, then ask the manager.

The templates live in the repo's `systemd/` and `launchd/` folders; a built package carries them
under `<prefix>/share/memoryd/`.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from memoryd.errors import MemorydError
from memoryd.paths import AppPaths

UNIT_NAME = "memoryd.service"
LABEL = "io.memoryd.daemon"
PLIST_NAME = f"{LABEL}.plist"


def template(kind: str, name: str) -> str:
    """A template from the source checkout, else from the installed data files."""
    candidates = [
        Path(__file__).resolve().parents[1] / kind / name,
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


def program() -> list[str]:
    """The absolute command that runs this memoryd: its console script, else python -m."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "memoryd" and argv0.exists():
        return [str(argv0.resolve())]
    found = shutil.which("memoryd")
    if found and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return [str(Path(found).resolve())]
    return [str(Path(sys.executable).absolute()), "-m", "memoryd"]


def _quote_systemd(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+=:@%" for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(command: list[str], config: Path | None) -> str:
    config_args = f" --config {_quote_systemd(str(config))}" if config else ""
    exec_line = " ".join(_quote_systemd(a) for a in command)
    text = template("systemd", UNIT_NAME)
    # `run` sits after @EXEC@ in the template; --config is a global option, so it goes first.
    return text.replace("@EXEC@ run@CONFIG_ARGS@", f"{exec_line}{config_args} run")


def render_plist(command: list[str], config: Path | None, paths: AppPaths) -> str:
    args = [*command, *(["--config", str(config)] if config else []), "run"]
    lines = "\n".join(f"        <string>{escape(a)}</string>" for a in args)
    return (
        template("launchd", PLIST_NAME)
        .replace("@PROGRAM_ARGUMENTS@", lines)
        .replace("@STDOUT@", escape(str(paths.log_dir / "memoryd.out.log")))
        .replace("@STDERR@", escape(str(paths.log_dir / "memoryd.err.log")))
    )


@dataclass(frozen=True, slots=True)
class Plan:
    manager: str  # systemd | launchd
    file: Path
    content: str
    commands: list[list[str]]
    manual: str  # what to do by hand when the manager cannot be reached


def default_manager() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def plan(action: str, manager: str, config: Path | None, paths: AppPaths) -> Plan:
    command = program()
    if manager == "systemd":
        file = unit_dir() / UNIT_NAME
        content = render_unit(command, config) if action == "install" else ""
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
    else:
        uid = os.getuid()
        file = Path.home() / "Library" / "LaunchAgents" / PLIST_NAME
        content = render_plist(command, config, paths) if action == "install" else ""
        commands = {
            "install": [["launchctl", "bootstrap", f"gui/{uid}", str(file)]],
            "uninstall": [["launchctl", "bootout", f"gui/{uid}/{LABEL}"]],
            "status": [["launchctl", "print", f"gui/{uid}/{LABEL}"]],
        }[action]
        manual = f"write the plist to {file}, then run `launchctl bootstrap gui/{uid} {file}`"
    return Plan(manager, file, content, commands, manual)


def execute(p: Plan, action: str) -> list[str]:
    """Carry out a plan; raise MemorydError naming the manual steps when the manager fails."""
    tool = p.commands[0][0]
    if shutil.which(tool) is None:
        raise MemorydError(f"`{tool}` is not available on this machine; by hand: {p.manual}")
    output: list[str] = []
    if action == "install":
        p.file.parent.mkdir(parents=True, exist_ok=True)
        p.file.write_text(p.content, encoding="utf-8")
        output.append(f"wrote {p.file}")
    for cmd in p.commands:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
        output.append(f"$ {' '.join(cmd)}\n{result.stdout}{result.stderr}".rstrip())
        if result.returncode != 0 and action != "status":
            raise MemorydError(
                f"`{' '.join(cmd)}` failed ({(result.stderr or result.stdout).strip()}); "
                f"by hand: {p.manual}"
            )
    if action == "uninstall":
        if p.file.exists():
            p.file.unlink()
            output.append(f"removed {p.file}")
        if p.manager == "systemd":
            subprocess.run(
                ["systemctl", "--user", "daemon-reload"],
                capture_output=True,
                check=False,
                timeout=60,
            )
    return output
