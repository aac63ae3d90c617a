"""`memoryd claude install|uninstall|plugin-path`: the arguments. The work is in
memoryd.claude.claude_install, imported when the command runs, so other commands pay nothing for
it."""

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "claude",
        description="Register memoryd in Claude Code: its MCP server (`memoryd`) and three "
        "hooks (index a memory the agent writes at once; show the memories citing a file the "
        "agent opens; say at session start what is wrong with this project's memory). User "
        "scope: $CLAUDE_CONFIG_DIR (else ~/.claude)/settings.json and the .claude.json beside "
        "the home; project scope: .claude/settings.json and .mcp.json of the repo.",
    )
    actions = p.add_subparsers(dest="claude_command", metavar="ACTION", required=True)
    for name, what in (
        ("install", "add memoryd's hooks and MCP server, keeping every other setting"),
        ("uninstall", "take them out again, giving the settings back as they were"),
    ):
        q = actions.add_parser(name, help=what)
        q.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
        q.add_argument(
            "--scope",
            choices=("user", "project"),
            default="user",
            help="user (default: every project) or project (the repo holding the cwd)",
        )
    actions.add_parser("plugin-path", help="print the Claude Code plugin folder memoryd ships")


def run(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd.claude import claude_install

    if args.claude_command == "plugin-path":
        out.write(f"{claude_install.plugin_path()}\n")
        return 0
    claude_install.run(
        args.claude_command,
        args.scope,
        dry_run=args.dry_run,
        state_dir=rt.paths.state_dir,
        cwd=Path.cwd(),
        out=out,
    )
    return 0
