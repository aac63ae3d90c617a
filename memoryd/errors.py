"""The one base class of memoryd's fatal errors, so callers can catch them together."""


class MemorydError(Exception):
    """An error that stops one command; its message names the file and what to do."""


class ConfigError(MemorydError):
    """The configuration is invalid; `problems` lists every one with its dotted key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: invalid configuration:\n{lines}")


class UsageError(MemorydError):
    """A command-line value that cannot be used (exit 2, as argparse's own errors)."""


class WriteConflict(MemorydError):
    """Someone changed a file between our read and our swap; retry from their version."""


class UnsafeFilesystemOperation(MemorydError):
    """An operation would cross filesystems, follow a link out, or overwrite: refused."""
