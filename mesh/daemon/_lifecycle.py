"""Where the daemon is in its life, and what that means for a request arriving now.

The daemon binds its port before it starts any agent (so a busy port fails
before a child is spawned), which leaves a moment when requests can arrive
before the agents are linked: they wait for :meth:`Lifecycle.start_serving`
(``GET /health`` and the probes answer at once). Once shutting down, new requests that would
start work are refused with 503, and at the drain deadline the requests still
running are cut: each gets a 503 JSON answer naming the shutdown rather than a
dropped connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import msgspec

from transports import HttpRequest, HttpResponse

__all__ = ["Lifecycle"]

_JSON: Final = msgspec.json.Encoder()
_CLOSE: Final = (("connection", "close"),)
#: What answers before the agents are linked: the probes say how the start is going.
_ANSWERED_WHILE_STARTING: Final = frozenset({"/health", "/healthz", "/readyz"})


def _unavailable(message: str) -> HttpResponse:
    body = {"error": {"status": 503, "message": message}}
    return HttpResponse(503, _JSON.encode(body), headers=_CLOSE)


class Lifecycle:
    """Starting, serving, draining: the gate every API request passes."""

    def __init__(self) -> None:
        self._serving = anyio.Event()
        self.draining = False
        self._running: set[anyio.CancelScope] = set()
        self._cut_reason = ""

    @property
    def starting(self) -> bool:
        return not self._serving.is_set()

    @property
    def phase(self) -> str:
        """What ``GET /health`` says: ``starting``, ``ok`` or ``draining``."""
        return "starting" if self.starting else "draining" if self.draining else "ok"

    def start_serving(self) -> None:
        self._serving.set()

    async def wait_serving(self) -> None:
        """Until the agents are linked (start-up is bounded by the connect timeout)."""
        await self._serving.wait()

    def start_draining(self) -> None:
        self.draining = True

    def cut(self, reason: str) -> None:
        """Answer every request still running with 503 ``reason``, now."""
        self._cut_reason = reason
        for scope in self._running:
            scope.cancel()

    async def run(
        self, request: HttpRequest, route: Callable[[HttpRequest], Awaitable[HttpResponse]]
    ) -> HttpResponse:
        """``route(request)``, unless the daemon's state says otherwise."""
        if self.starting and request.path.rstrip("/") not in _ANSWERED_WHILE_STARTING:
            await self._serving.wait()
        if self.draining and request.method != "GET":
            return _unavailable("the daemon is shutting down; it takes no new work")
        scope = anyio.CancelScope()
        self._running.add(scope)
        response: HttpResponse | None = None
        try:
            with scope:
                response = await route(request)
        finally:
            self._running.discard(scope)
        if response is None:  # cut by the drain deadline
            return _unavailable(self._cut_reason)
        return response
