"""A task group for the context managers we hand to users.

anyio raises whatever leaves a task group as an ``ExceptionGroup``, even a lone
error from the body of the ``async with`` the user wrote; at our boundaries a lone
error is raised as itself, as every ``open_*`` does (see
:func:`transports.unwrap_single_error`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from transports import unwrap_single_error

__all__ = ["open_task_group"]


@asynccontextmanager
async def open_task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """``anyio.create_task_group()``, whose lone error leaves as itself."""
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            yield tg
