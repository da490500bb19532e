"""An agent's logs and asks, mid-call, as MCP gives them to its client.

What an agent sends its caller while a call runs (:mod:`mesh._rpc.asks`) reaches
an MCP client as MCP's own messages: a log line as ``notifications/message``
(filtered by the level the client set with ``logging/setLevel``), an elicitation
as an ``elicitation/create`` request and a sampling request as
``sampling/createMessage``, sent on whatever carries the call (the ``mesh mcp``
link, or the SSE answer to a ``tools/call`` on ``/mcp``, whose reply the client
POSTs). An ask is sent only to a client that declared the matching capability in
``initialize``; anything else is refused at once, naming what is missing.
"""

from __future__ import annotations

from typing import Any, Final

from mesh._errors import InvalidParams, MethodNotFound
from mesh._rpc.asks import LOG_LEVELS, AskHandlers
from mesh._rpc.peer import RequestContext
from mesh._rpc.pending import MAX_CALL_DURATION

__all__ = ["ClientSide"]

_SEVERITY: Final = {level: rank for rank, level in enumerate(LOG_LEVELS)}
_MESSAGE: Final = "notifications/message"
#: Each ask kind: the capability the client must have declared, and MCP's method.
_ASKS: Final = {
    "elicit": ("elicitation", "elicitation/create"),
    "sample": ("sampling", "sampling/createMessage"),
}


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
