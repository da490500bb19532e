"""An agent's logs and asks, mid-call, as MCP gives them to its client, and a mounted
MCP server's, as the mesh gives them to whoever called its tool.

What an agent sends its caller while a call runs (:mod:`mesh._rpc.asks`) reaches
an MCP client as MCP's own messages: a log line as ``notifications/message``
(filtered by the level the client set with ``logging/setLevel``), an elicitation
as an ``elicitation/create`` request and a sampling request as
``sampling/createMessage``, sent on whatever carries the call (the ``mesh mcp``
link, or the SSE answer to a ``tools/call`` on ``/mcp``, whose reply the client
POSTs). An ask is sent only to a client that declared the matching capability in
``initialize``; anything else is refused at once, naming what is missing.

The other way, a mounted server's ``notifications/message``, ``elicitation/create``
and ``sampling/createMessage`` go to the caller of the tool call they came during
(:class:`CallsInFlight`). Over stdio such a request names no call, so it is passed on
only while exactly one of the server's tool calls is in flight: with two, sending it
to either caller could show one caller's question to another, so it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from mesh._errors import InvalidParams, MethodNotFound
from mesh._rpc.asks import LOG_LEVELS, AskHandlers, Kind
from mesh._rpc.peer import RequestContext
from mesh._rpc.pending import MAX_CALL_DURATION

__all__ = ["ASKABLE", "ASKED", "CallsInFlight", "ClientSide"]

_SEVERITY: Final = {level: rank for rank, level in enumerate(LOG_LEVELS)}
_MESSAGE: Final = "notifications/message"
#: Each ask kind: the capability the client must have declared, and MCP's method.
_ASKS: Final = {
    "elicit": ("elicitation", "elicitation/create"),
    "sample": ("sampling", "sampling/createMessage"),
}
#: A mounted server's requests the mesh passes to the caller, by MCP's method.
ASKED: Final[dict[str, Kind]] = {"elicitation/create": "elicit", "sampling/createMessage": "sample"}
#: What the mount declares in ``initialize``: its callers may be asked both.
ASKABLE: Final[dict[str, dict[str, Any]]] = {"elicitation": {}, "sampling": {}}


class ClientSide:
    """What one MCP client said of itself (its capabilities, its log level), and the
    handlers a call made for it passes the agent's logs and asks to."""

    __slots__ = ("capabilities", "level")

    def __init__(self) -> None:
        #: The client's ``initialize`` capabilities (None: it made no handshake).
        self.capabilities: dict[str, Any] | None = None
        #: The least severe level the client wants (None: it set none, so every one).
        self.level: str | None = None

    def initialized(self, params: Any) -> None:
        """Keep the capabilities an ``initialize`` declares."""
        capabilities = params.get("capabilities") if isinstance(params, dict) else None
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}

    def set_level(self, params: Any) -> dict[str, Any]:
        """``logging/setLevel``: only log lines at least this severe are sent."""
        level = params.get("level") if isinstance(params, dict) else None
        if level not in _SEVERITY:
            raise InvalidParams(
                f"unknown log level {level!r}; MCP's levels: {', '.join(LOG_LEVELS)}"
                " - at `$.params.level`"
            )
        self.level = level
        return {}

    @property
    def hears_mid_call(self) -> bool:
        """Whether this client may be sent something while a call runs (it set a log
        level, or can be asked): its ``tools/call`` is then answered with a stream."""
        declared = self.capabilities or {}
        return self.level is not None or any(cap in declared for cap, _ in _ASKS.values())

    def handlers(self, ctx: RequestContext) -> AskHandlers:
        """A call's handlers, sending to the client of ``ctx``'s request."""

        def on_log(params: Any) -> None:
            level = params.get("level")
            if self.level is not None and _SEVERITY.get(level, 0) < _SEVERITY[self.level]:
                return
            message = {"level": level, "data": params.get("data")}
            if isinstance(params.get("logger"), str):
                message["logger"] = params["logger"]
            ctx.notify_nowait(_MESSAGE, message)

        async def on_elicit(params: dict[str, Any]) -> Any:
            return await self._ask(ctx, "elicit", params)

        async def on_sample(params: dict[str, Any]) -> Any:
            return await self._ask(ctx, "sample", params)

        return {"on_log": on_log, "on_elicit": on_elicit, "on_sample": on_sample}

    async def _ask(self, ctx: RequestContext, kind: str, params: dict[str, Any]) -> Any:
        capability, method = _ASKS[kind]
        if self.capabilities is None:
            raise MethodNotFound(
                f"this MCP client made no initialize handshake (a 2026-07-28 request), so"
                f" the agent's {method} cannot reach it: asks mid-call reach clients that"
                " initialize and declare the capability"
            )
        if capability not in self.capabilities:
            raise MethodNotFound(
                f"the MCP client declared no {capability} capability in initialize,"
                f" so the agent's {method} cannot reach it"
            )
        # The call's own deadline bounds the wait: when it passes the call is cancelled.
        return await ctx.call_back(method, params, timeout=MAX_CALL_DURATION)


class CallsInFlight:
    """A mounted server's tool calls in flight, each by the context of the mesh request
    it serves: where the server's logs and asks during a call go (see the module)."""

    __slots__ = ("_agent", "_calls")

    def __init__(self, agent: str) -> None:
        self._agent = agent
        self._calls: list[RequestContext] = []

    @contextmanager
    def serving(self, ctx: RequestContext) -> Iterator[None]:
        self._calls.append(ctx)
        try:
            yield
        finally:
            self._calls.remove(ctx)

    def log(self, params: dict[str, Any]) -> None:
        """A server's log line, to the one caller (with more, it only goes to our log)."""
        if len(self._calls) == 1:
            self._calls[0].log_raw(params)

    async def forward(self, kind: Kind, method: str, params: Any) -> Any:
        """A server's ask, to the one caller it can belong to, or refused saying why."""
        if len(self._calls) != 1:
            raise MethodNotFound(
                f"{method} from MCP server {self._agent!r} names no call, and"
                f" {len(self._calls)} of its tool calls are in flight: it is passed to a"
                " caller only while exactly one is"
            )
        return await self._calls[0].ask(kind, params if isinstance(params, dict) else {})
