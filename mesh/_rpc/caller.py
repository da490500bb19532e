"""The one interface of everything that calls an agent, and the call methods written once.

:class:`Caller` is what :class:`~mesh.Peer` (one connection) and
:class:`~mesh.ReconnectingPeer` (a connection that redials) both satisfy, so code
that calls an agent — the orchestrator first — holds a ``Caller`` and never asks
which it has. :class:`CallMethods` builds ``call_tool``, ``list_tools`` and
``ping`` on a class's own ``call``: the shape of those three lives here and
nowhere else (a reconnecting peer forwards them to the connection it waited for).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, Unpack, runtime_checkable

import anyio

from mesh._rpc.asks import AskHandlers
from mesh._rpc.session import SessionStatistics

__all__ = ["CallMethods", "CallOptions", "Caller", "ProgressCallback"]

#: Called with each ``progress`` notification's params while a call is in flight.
ProgressCallback = Callable[[Mapping[str, Any]], None]


class CallOptions(AskHandlers, total=False):
    """The options of every call, as keywords: ``call(method, params, **options)``.

    Written once here; every caller's ``call`` and ``call_tool`` take
    ``**options: Unpack[CallOptions]`` (a reconnecting peer adds
    ``wait_for_connection``). ``on_log``, ``on_elicit`` and ``on_sample`` (from
    :class:`~mesh._rpc.asks.AskHandlers`) hear the handler's logs and answer its asks.
    """

    #: Seconds until the call fails with :class:`~mesh.CallTimeout` (progress pushes it
    #: out, up to a cap); None or left out: the session's ``call_timeout``.
    timeout: float | None
    #: Called with each ``progress`` notification's params while the call is in flight.
    on_progress: ProgressCallback | None


@runtime_checkable
class Caller(Protocol):
    """Calls one agent: requests, tools, notifications, and where the link stands.

    ``connected`` says whether a call made now goes out at once; ``closed`` that
    none ever will again (a peer's link ended; a reconnecting peer was closed or
    gave up), and ``wait_closed()`` waits for that.
    """

    @property
    def agent(self) -> str | None: ...

    @property
    def connected(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    def statistics(self) -> SessionStatistics: ...

    async def call(
        self,
        method: str,
        params: Any = None,
        **options: Unpack[CallOptions],
    ) -> Any:
        """Call ``method`` and return its result (or raise the :class:`~mesh.MeshError`)."""
        ...

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        **options: Unpack[CallOptions],
    ) -> Any:
        """Call the tool ``name`` with ``arguments`` (``tools/call``) and return its result."""
        ...

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The agent's tools: name, description and JSON Schema of the arguments."""
        ...

    async def ping(self, *, timeout: float | None = None) -> float:
        """Round-trip a ``ping``; returns the seconds it took."""
        ...

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer comes back)."""
        ...

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Send a notification without waiting."""
        ...

    def fail_pending(self, reason: str) -> int:
        """Fail every call in flight now with ``AgentUnavailable`` ``reason``; keep the link.

        For an agent known to be gone although its link is not (no heartbeat for its
        TTL). Returns how many calls failed.
        """
        ...

    async def wait_closed(self) -> None:
        """Wait until ``closed`` is true."""
        ...

    async def aclose(self) -> None:
        """Close the link (and stop redialling); bounded, and safe to call twice."""
        ...


class CallMethods:
    """``call_tool``, ``list_tools`` and ``ping``, built on the class's own ``call``."""

    __slots__ = ()

    async def call(
        self,
        method: str,
        params: Any = None,
        **options: Unpack[CallOptions],
    ) -> Any:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        **options: Unpack[CallOptions],
    ) -> Any:
        """Call one of the agent's tools (``tools/call``) and return its result.

        ``arguments`` go to the tool as they are; the call's own options are
        keywords, so a tool argument named ``timeout`` never sets the deadline.
        """
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.call("tools/call", params, **options)

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The agent's tools: name, description and JSON Schema of the arguments."""
        result = await self.call("tools/list", timeout=timeout)
        return list(result["tools"])

    async def ping(self, *, timeout: float | None = None) -> float:
        """Round-trip a ``ping``; returns the seconds it took."""
        started = anyio.current_time()
        await self.call("ping", timeout=timeout)
        return anyio.current_time() - started
