"""Operational logging to stderr via structlog: readable on a terminal, JSON under a manager."""

import logging
import sys
from typing import Any, TextIO

import structlog


def _json_default(value: object) -> str:
    return str(value)


def configure(
    level: str = "info", *, json_output: bool | None = None, file: TextIO | None = None
) -> None:
    """Log to `file` (stderr unless given: a command's own error stream)."""
    file = file or sys.stderr
    if json_output is None:
        json_output = not file.isatty()
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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "memoryd") -> Any:
    return structlog.get_logger(name)
