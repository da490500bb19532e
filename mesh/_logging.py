"""structlog set-up for the applications (``mesh serve``, the CLI, agent programs).

Library code logs through :func:`get_logger` (``transports._logging``), whose
loggers stay silent until structlog is configured: the library never writes to
stdout and emits nothing the application did not ask for. Configuring output is
the application's choice, made once here: JSON lines when the stream is not a
terminal, readable colour when it is.

structlog is imported by :func:`configure_logging`, not with this module: library code
imports :func:`get_logger` from here, and a process that never configures logging (a
``mesh`` client command) does not pay for structlog.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO

from transports._logging import get_logger

if TYPE_CHECKING:
    import structlog

__all__ = ["add_trace_ids", "configure_logging", "get_logger"]


def add_trace_ids(
    logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """``trace_id`` and ``span_id`` (hex, as trace back ends show them) when a span is current,
    so a log line can be found from its trace and the trace from its line."""
    # A span can be current only in a process that imported opentelemetry's trace API
    # (the mesh's tracing does): one that never did (``mesh mcp``) does not load it here.
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            event.setdefault("trace_id", f"{context.trace_id:032x}")
            event.setdefault("span_id", f"{context.span_id:016x}")
    return event


def _load_structlog() -> None:
    """Import structlog without rich, unless rich is already loaded.

    structlog imports rich, when it is installed, for its console's pretty tracebacks
    alone: a quarter of a second of CPU in every agent, daemon and command that logs.
    Exceptions reach the renderer already formatted (``format_exc_info``), and the console
    renders them plain, so rich would buy nothing. ``sys.modules["rich"] = None`` makes
    that one import fail as if rich were absent; a later ``import rich`` works as usual.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def configure_logging(
    *, level: str = "info", stream: TextIO | None = None, json: bool | None = None
) -> None:
    _load_structlog()
    import structlog

    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            add_trace_ids,
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
