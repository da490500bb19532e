"""``mesh``'s ``main()`` run inside a test's own process, without leaving its logging behind."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import structlog


@contextmanager
def logging_of_its_own() -> Iterator[None]:
    """``main()`` configures structlog for the process, as a CLI should; in this test's
    process that set-up must end with the run. Loggers cached on first use would keep
    writing to this run's captured stderr in every later test (and past ``capture_logs``),
    so the run's configuration does not cache, and the one before it comes back after."""
    saved = structlog.get_config()
    configure = structlog.configure

    def uncached(**settings: Any) -> None:
        configure(**{**settings, "cache_logger_on_first_use": False})

    try:
        with mock.patch.object(structlog, "configure", uncached):
            yield
    finally:
        structlog.reset_defaults()
        configure(**saved)
