"""structlog set-up for the applications (``mesh serve``, the CLI, agent programs).

Library code logs through :func:`get_logger` (``transports._logging``), whose
loggers stay silent until structlog is configured: the library never writes to
stdout and emits nothing the application did not ask for. Configuring output is
the application's choice, made once here: JSON lines when the stream is not a
terminal, readable colour when it is.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from transports._logging import get_logger

__all__ = ["configure_logging", "get_logger"]


def configure_logging(
    *, level: str = "info", stream: TextIO | None = None, json: bool | None = None
) -> None:
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
