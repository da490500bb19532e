"""The registry's loggers: silent until the application configures structlog.

The same rule as ``transports/_logging.py`` (kept as a copy because the registry
imports nothing from the transports): structlog's unconfigured default would
print to stdout, so events are dropped until ``structlog.configure()`` is called.
structlog is looked up in ``sys.modules``, not imported: unimported, it is unconfigured.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["get_logger"]


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


class _QuietLogger:
    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, method: str) -> Any:
        structlog = sys.modules.get("structlog")
        if structlog is None or not structlog.is_configured():
            return _drop
        if self._logger is None:
            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, method)


def get_logger(name: str) -> Any:
    """structlog's logger ``name`` once structlog is configured; silence before."""
    return _QuietLogger(name)
