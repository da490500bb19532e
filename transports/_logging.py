"""Loggers that stay silent until the application configures structlog.

structlog's unconfigured default prints every event, debug included, to stdout.
For a library that is wrong twice over: stdout may be the stdio transport, and
the application never asked for output. ``get_logger(name)`` hands out a logger
that forwards to structlog's once ``structlog.configure()`` has been called (by
``mesh serve``, the ``mesh`` CLI, ``run_agent`` or the application itself) and
drops every event before that. ``structlog.testing.capture_logs()`` configures
structlog too, so tests see every event.

structlog is looked up, never imported here: a process that has not imported it
cannot have configured it, and a client or an agent that logs nothing does not pay
for its import (with rich installed, a third of a second of CPU per process).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["QuietLogger", "get_logger"]


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


class QuietLogger:
    """structlog's lazy logger named ``name``, or silence while structlog is unconfigured."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, method: str) -> Any:
        # Checked per call, not once: the application may configure after import.
        structlog = sys.modules.get("structlog")
        if structlog is None or not structlog.is_configured():
            return _drop
        if self._logger is None:
            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, method)


def get_logger(name: str) -> Any:
    """A logger for library code (see the module docstring); typed ``Any`` as structlog's is."""
    return QuietLogger(name)
