"""Operational logging to stderr via structlog: readable on a terminal, JSON under a manager.

structlog is imported at the first message, not at start-up: most commands never log one, and
importing it is a fifth of a short command's run.
"""

import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

_settings: tuple[str, bool, TextIO] | None = None  # configure()'s, until the first message
_applied = False


def _json_default(value: object) -> str:
    return str(value)


def _escape_for_terminal(_logger: object, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Readable lines go to a terminal: every text in them `shown` (a path or name with an
    escape sequence in it is printed as its escape). JSON lines escape it themselves."""
    from memoryd.model.display import shown

    return {
        k: shown(v, lines=k == "exception") if isinstance(v, str) else v for k, v in event.items()
    }


def under_service_manager(env: Mapping[str, str]) -> bool:
    """Whether a service manager started us and keeps our stderr (journald, launchd): systemd
    sets INVOCATION_ID (and JOURNAL_STREAM, NOTIFY_SOCKET for a notify unit); launchd names
    the job in XPC_SERVICE_NAME ("0" in a terminal session on macOS)."""
    if env.get("INVOCATION_ID") or env.get("JOURNAL_STREAM") or env.get("NOTIFY_SOCKET"):
        return True
    return env.get("XPC_SERVICE_NAME", "0") not in ("", "0")


def configure(
    level: str = "info", *, json_output: bool | None = None, file: TextIO | None = None
) -> None:
    """Log to `file` (stderr unless given: a command's own error stream): JSON lines under a
    service manager, readable lines otherwise (a terminal, or piped through `tee`). Takes
    effect at the first message."""
    global _settings, _applied
    file = file or sys.stderr
    if json_output is None:
        json_output = under_service_manager(os.environ)
    _settings, _applied = (level, json_output, file), False
    if "structlog" in sys.modules:  # loggers may be held already: they follow it at once
        _apply(*_settings)
        _applied = True


def _apply(level: str, json_output: bool, file: TextIO) -> None:
    import logging

    import structlog

    renderer: Any
    if json_output:
        renderer = structlog.processors.JSONRenderer(default=_json_default)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # Tracebacks without local variables: locals would carry memory text.
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
            if json_output
            else structlog.processors.format_exc_info,
            *(() if json_output else (_escape_for_terminal,)),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "memoryd") -> Any:
    """A bound logger; the one configure() set up (applied now if it was not yet)."""
    global _applied
    import structlog

    if _settings is not None and not _applied:
        _apply(*_settings)
        _applied = True
    return structlog.get_logger(name)
