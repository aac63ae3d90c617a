"""The `memoryd` command line: the table of commands and `main`. Each command's module in
memoryd.commands is imported only when it runs or its parser is needed, so each command pays
for its own imports alone."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, cast

from memoryd import __version__
from memoryd.errors import ConfigError, MemorydError, UsageError
from memoryd.model.display import shown

if TYPE_CHECKING:
    from memoryd.config import Config
    from memoryd.paths import AppPaths
    from memoryd.runtime import Effect, Runtime

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

# Every command (its module is memoryd.commands.<name>) and its line in `memoryd --help`, in
# that order. A module gives `add_parser(sub)` (its arguments) and `run(args, rt, out)`.
COMMANDS = {
    "dirs": "list memory dirs, their kind, repo root, files and budget",
    "index": "bring MEMORY.md in step with the memory files",
    "run": "run the daemon in the foreground (as a user service does)",
    "status": "is the daemon running, and how are its dirs",
    "service": "install memoryd as a user service (systemd/launchd)",
    "demo": "show memoryd at work in a throw-away sandbox",
    "dream": "run the deterministic consolidation pass",
    "explain": "show every check and rule applied to one memory",
    "trash": "list, restore or purge trashed memories",
    "log": "show the audit log for a person",
    "config": "check or show the configuration",
    "ack": "acknowledge a memory flagged for review (not listed again until it changes)",
    "forget": "move memories a person asks to forget to the trash (restorable)",
    "history": "a memory's history: what superseded it, and the versions memoryd kept",
    "search": "search memories across both tiers (MEMORY.md and the archive)",
    "recall": "memories to read before editing these files or symbols",
    "show": "one memory: frontmatter and body, and where it is indexed",
    "mcp": "serve memory search to an agent over MCP (stdio)",
    "claude": "register memoryd's hooks and MCP server in Claude Code (install, uninstall)",
}
# `memoryd hook EVENT`, dispatched before the parser (the post-write hook runs `index` through
# `main` in its own process).
HOOKS = "memoryd.claude.hooks"
READ_ONLY = frozenset({"status", "log", "dirs", "history"})  # and `trash list`
CONFIG_PROBLEMS_SHOWN = 3

if TYPE_CHECKING:
    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _Subparsers = argparse._SubParsersAction


class Command(Protocol):
    """A module of memoryd.commands, as the table names it."""

    def add_parser(self, sub: _Subparsers) -> None: ...

    def run(self, args: argparse.Namespace, rt: Runtime, out: TextIO) -> int: ...


def command(name: str) -> Command:
    """The module of a command, imported now (the table's lazy half)."""
    return cast(Command, importlib.import_module(f"memoryd.commands.{name}"))


class _Parser(argparse.ArgumentParser):
    """Options anywhere among the positionals (`forget NAME --dry-run DIR`): argparse's
    intermixed parsing, but for a parser that only picks a subcommand."""

    _mixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        nested = any(
            a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions()
        )
        if self._mixing or nested:  # the intermixed parse calls this again, twice
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


class _Commands(_Subparsers):
    """The subcommands; each one's line in `memoryd --help` is the table's."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in COMMANDS:
            kwargs.setdefault("help", COMMANDS[name])
        return super().add_parser(name, **kwargs)


def _top() -> tuple[argparse.ArgumentParser, _Subparsers]:
    from memoryd.commands.common import color_arg

    parser = _Parser(
        prog="memoryd",
        description="Keeps coding agents' memory folders healthy: deterministic, explainable, "
        "reversible maintenance of memory files and their MEMORY.md index.",
        epilog="Exit codes: 0 fine, 1 findings or a failed action, 2 usage or configuration error.",
    )
    parser.add_argument("--version", action="version", version=f"memoryd {__version__}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="configuration file (default: <user config dir>/memoryd/config.toml, else built-in "
        "defaults)",
    )
    color_arg(parser, "auto")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, action=_Commands)
    return parser, cast(_Subparsers, sub)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `only`, that command's arguments alone (a name that is no
    command builds them all, for the usage error)."""
    parser, sub = _top()
    for name in [only] if only in COMMANDS else COMMANDS:
        command(name).add_parser(sub)
    return parser


def _parser_for(words: Sequence[str]) -> argparse.ArgumentParser:
    named = _named_command(_after_top_options(words))
    if named in COMMANDS:
        return build_parser(named)
    if all(w.startswith("-") for w in words):  # `--help`, `--version`: no command's module
        parser, sub = _top()
        for name in COMMANDS:
            sub.add_parser(name)  # its line in the help (the table's)
        return parser
    return build_parser()  # a misspelling, or an option that lists them all (`--help index`)


def _named_command(words: Sequence[str]) -> str | None:
    """The command when it is the first word (an option before it, `--help index`, may ask
    for every command)."""
    return words[0] if words and not words[0].startswith("-") else None


_TOP_VALUED = ("--config", "--color")  # the top parser's options that take a value


def _after_top_options(words: Sequence[str]) -> Sequence[str]:
    """`words` after the leading `--config FILE` and `--color WHEN`: the service runs
    `memoryd --config F run`, which then builds only run's parser (every command's would
    import modules the daemon holds for weeks)."""
    at = 0
    while at < len(words) and words[at].split("=")[0] in _TOP_VALUED:
        at += 1 if "=" in words[at] else 2
    return words[at:]


@contextlib.contextmanager
def _looking_only(effect: Effect) -> Iterator[None]:
    """A command that writes nothing (read-only, a dry run, `--check`) does not save even
    discovery's cache while it runs."""
    if effect.writes:
        yield
        return
    from memoryd.discover.cwd_cache import LOOKING_ONLY

    token = LOOKING_ONLY.set(True)
    try:
        yield
    finally:
        LOOKING_ONLY.reset(token)


def _keeping_versions(
    args: argparse.Namespace, rt: Runtime
) -> contextlib.AbstractContextManager[Runtime]:
    """versions.kept.keeping for a command that keeps versions; the others (`rt` as it is) do
    not even import it."""
    if not rt.effect.keeps_versions:
        return contextlib.nullcontext(rt)
    from memoryd.versions import kept

    return kept.keeping(rt, daemon=args.command == "run")


def effect_of(args: argparse.Namespace) -> Effect:
    """What this command may change (runtime.Effect), decided here once for the whole run."""
    from memoryd.commands.common import VERSIONED
    from memoryd.runtime import Effect

    command = args.command
    if command == "history":  # `--restore` writes a version back
        return Effect.LOOKS if getattr(args, "restore", None) is None else Effect.KEEPS
    if command in READ_ONLY or (command == "trash" and args.trash_command == "list"):
        return Effect.LOOKS
    if getattr(args, "dry_run", False) or getattr(args, "check", False) or command == "explain":
        return Effect.DRY
    return Effect.KEEPS if command in VERSIONED else Effect.WRITES


def _config_warning(error: ConfigError) -> str:
    shown_problems = "; ".join(error.problems[:CONFIG_PROBLEMS_SHOWN])
    more = len(error.problems) - CONFIG_PROBLEMS_SHOWN
    if more > 0:
        shown_problems += f"; and {more} more"
    return (
        f"memoryd: warning: {error.source}: invalid configuration ({shown_problems}); this "
        "command uses the built-in defaults instead. See every problem with "
        "`memoryd config check`.\n"
    )


def _config(
    args: argparse.Namespace, effect: Effect, paths: AppPaths, err: TextIO
) -> Config | None:
    """The configuration this run uses, or None when it cannot run (said on `err`)."""
    from memoryd.config import Config, load_config
    from memoryd.runtime import Effect

    try:
        return load_config(args.config, paths)
    except ConfigError as error:
        if effect is Effect.LOOKS:
            # A daemon may still run on the configuration it read before the file broke:
            # looking at it must not need the file fixed first.
            err.write(_config_warning(error))
            return Config(source="built-in defaults (the configuration file is invalid)")
        err.write(f"memoryd: {shown(error, lines=True)}\n")
        if args.command != "config":
            err.write("Fix the file, then check it with `memoryd config check`.\n")
        if args.command == "run":  # the daemon's own log says why it did not start
            from memoryd.runtime import Runtime

            with contextlib.suppress(OSError):
                Runtime.create(Config(), paths).audit.write(
                    "config.invalid", source=error.source, problems=error.problems
                )
        return None


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    words = sys.argv[1:] if argv is None else list(argv)
    if _named_command(words) == "hook":  # Claude Code's hooks: no parser, no config, always 0
        hooks: Any = importlib.import_module(HOOKS)  # by name, as every command's module
        return int(hooks.main(words[1:], out=out))
    parser = _parser_for(words)
    try:
        # argparse prints help and usage errors itself; send them where the caller asked.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(words)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else EXIT_USAGE
    # The modules a run needs create objects that live as long as the process: no collection
    # walks them while they load (at the default thresholds, ~10% of `memoryd search`).
    gc.disable()
    try:
        from memoryd.logsetup import configure
        from memoryd.paths import app_paths
        from memoryd.runtime import Runtime, tune_gc

        tune_gc()
    finally:
        gc.enable()
    configure(file=err)  # warnings (an audit log that cannot be written) go where errors go
    paths = app_paths()
    effect = effect_of(args)
    config = _config(args, effect, paths, err)
    if config is None:
        return EXIT_USAGE
    rt = Runtime.create(config, paths, effect)
    from memoryd.commands import legacy

    legacy.import_once(rt.store)  # the state files of older versions, once
    args.stderr = err  # a handler's warnings go where this run's errors go
    try:
        return _dispatch(args, rt, out)
    except UsageError as error:
        err.write(f"memoryd: {shown(error, lines=True)}\n")
        return EXIT_USAGE
    except MemorydError as error:  # it may name a file, or quote a line, of anyone's making
        err.write(f"memoryd: {shown(error, lines=True)}\n")
        return EXIT_FINDINGS
    except BrokenPipeError:
        return EXIT_OK
    except OSError as error:
        err.write(_os_error_line(error))
        return EXIT_FINDINGS


def _dispatch(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    """The command's module, imported now, run with the version store and the pager around it."""
    from memoryd.views.pager import paged  # long output through $PAGER on a terminal

    run = command(args.command).run
    with (
        _keeping_versions(args, rt) as kept,
        _looking_only(rt.effect),
        paged(args, out) as shown_out,
    ):
        return run(args, kept, shown_out)


def _os_error_line(error: OSError) -> str:
    """An OSError no step put in words (a state file on a full disk, say): the file and what
    to do, not a traceback."""
    from memoryd.storage.fdlimit import out_of_files

    where = f"{error.filename}: " if error.filename else ""
    fix = out_of_files(error)
    if fix is not None:
        return f"memoryd: {where}{fix}.\n"
    return f"memoryd: {where}{error.strerror or error}. {_advice(error)}\n"


def _advice(error: OSError) -> str:
    """What to do, by what the system said."""
    import errno

    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # EFBIG: a size limit
        return "Free disk space there (or raise the file size limit), then rerun."
    if error.errno in (errno.EACCES, errno.EPERM):
        return "Fix the permissions there, or name folders memoryd may read, then rerun."
    if error.errno == errno.EROFS:
        return "That file system is read-only; make it writable, then rerun."
    return "Check the file system there, then rerun."


def entry() -> None:
    code = main()
    # What the command built is left to the process's end, not freed object by object by the
    # collector's last walk (~15 ms at 10,000 memories). Every write has closed its file.
    gc.freeze()
    sys.exit(code)
