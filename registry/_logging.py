"""The registry's loggers: silent until the application configures structlog.

The same rule as ``transports/_logging.py`` (kept as a copy because the registry
imports nothing from the transports): structlog's unconfigured default would
print to stdout, so events are dropped until ``structlog.configure()`` is called.
"""

from __future__ import annotations

from typing import Any

import structlog

__all__ = ["get_logger"]


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


class _QuietLogger:
    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = structlog.get_logger(name)

    def __getattr__(self, method: str) -> Any:
        if structlog.is_configured():
            return getattr(self._logger, method)
        return _drop


def get_logger(name: str) -> Any:
    """structlog's logger ``name`` once structlog is configured; silence before."""
    return _QuietLogger(name)
