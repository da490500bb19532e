"""A2A's client side: the card, a message sent (streamed or not), a cancel.

Over the card's JSON-RPC interface of A2A 1.0, or, when it offers none, its
HTTP+JSON one (``POST {url}/message:send``, ``/message:stream``,
``/tasks/{id}:cancel``; results and events with no envelope, errors as AIP-193
whose ``ErrorInfo`` reason names the A2A error).

httpx, as the MCP mount uses: this is an HTTP wire with server-sent events, not
a frame stream. Every request carries ``A2A-Version: 1.0`` and, when the
manifest names one, the bearer token. A connection that breaks (the agent died)
raises :class:`~mesh.ConnectionLost` at once, naming the agent and why; an A2A
error raises the mesh error that matches it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Final
from urllib.parse import quote

import httpx
import msgspec

from mesh._errors import ConnectionLost, MeshError, MethodNotFound, ProtocolError, RemoteError
from mesh.a2a._jsonrpc import REASONS

__all__ = ["A2aClient"]

#: The bindings a mount speaks, the first the card offers of these (JSON-RPC first).
_BINDINGS: Final = ("JSONRPC", "HTTP+JSON")
_REST_PATHS: Final = {"SendMessage": "/message:send", "SendStreamingMessage": "/message:stream"}
#: Each A2A error's code by the reason its ErrorInfo names.
_CODES: Final = {reason: code for code, reason in REASONS.items() if code != -32700}

#: Fetching the card (connecting, and each liveness check) must answer this fast.
CARD_TIMEOUT: Final = 10.0
_CARD_PATH: Final = "/.well-known/agent-card.json"
#: Idle connections kept to the agent (64 calls in flight reuse theirs).
MAX_IDLE: Final = 64


class A2aClient:
    """Talks to one remote A2A agent (see the module docstring)."""

    def __init__(self, agent: str, endpoint: str, *, token: str | None = None) -> None:
        self.agent = agent
        self.card_url = (
            endpoint if endpoint.endswith(".json") else endpoint.rstrip("/") + _CARD_PATH
        )
        headers = {"A2A-Version": "1.0"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # No read timeout: a stream may be quiet for long; the mesh's deadline bounds each call.
        timeout = httpx.Timeout(CARD_TIMEOUT, read=None)
        # Calls in flight each hold a connection (a stream); keep as many alive for the next.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=MAX_IDLE)
        self.http = httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits)
        self.card: dict[str, Any] = {}
        self.url = ""
        #: The binding the card offers that is spoken: JSONRPC, else HTTP+JSON.
        self.binding = "JSONRPC"
        self._etag = ""

    async def aclose(self) -> None:
        await self.http.aclose()

    def _lost(self, exc: Exception, doing: str) -> ConnectionLost:
        return ConnectionLost(
            f"A2A agent at {self.url or self.card_url}: {doing}: {exc}", agent=self.agent
        )

    async def fetch_card(self) -> dict[str, Any]:
        """The card (revalidated by its ETag); the JSON-RPC URL from its 1.0 interface."""
        headers = {"if-none-match": self._etag} if self._etag else {}
        try:
            response = await self.http.get(self.card_url, headers=headers, timeout=CARD_TIMEOUT)
        except httpx.HTTPError as exc:
            raise self._lost(exc, "fetching its card") from exc
        if response.status_code == 304 and self.card:
            return self.card
        if response.status_code != 200:
            raise ConnectionLost(
                f"A2A agent card at {self.card_url} answered HTTP {response.status_code}",
                agent=self.agent,
            )
        try:
            card = msgspec.json.decode(response.content)
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"the card at {self.card_url} is not JSON: {exc}") from None
        if not isinstance(card, dict):
            raise ProtocolError(f"the card at {self.card_url} is not a JSON object")
        self.binding, self.url = _interface(card, self.card_url)
        self.card, self._etag = card, response.headers.get("etag", "")
        return self.card

    def _request(self, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The URL and body of ``method`` in the binding spoken."""
        if self.binding == "JSONRPC":
            body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
            return self.url, body
        base = self.url.rstrip("/")
        if method == "CancelTask":
            return f"{base}/tasks/{quote(str(params.get('id', '')), safe='')}:cancel", {}
        return base + _REST_PATHS[method], params

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        url, body = self._request(method, params)
        try:
            response = await self.http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise self._lost(exc, method) from exc
        return self._result(response.status_code, response.content, method)

    async def stream(self, method: str, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Each event's result, until the agent ends the stream (read to the end, always)."""
        url, body = self._request(method, params)
        headers = {"accept": "text/event-stream"}
        try:
            async with self.http.stream("POST", url, json=body, headers=headers) as response:
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    yield self._result(response.status_code, await response.aread(), method)
                    return
                buffer = b""
                chunks = response.aiter_raw()
                async with aclosing(chunks):  # type: ignore[type-var]
                    async for chunk in chunks:
                        buffer += chunk.replace(b"\r\n", b"\n")
                        while b"\n\n" in buffer:
                            event, buffer = buffer.split(b"\n\n", 1)
                            data = b"\n".join(
                                line[5:].lstrip()
                                for line in event.split(b"\n")
                                if line.startswith(b"data:")
                            )
                            if data:
                                yield self._result(200, data, method)
        except httpx.HTTPError as exc:
            raise self._lost(exc, method) from exc

    def _result(self, status: int, content: bytes, method: str) -> Any:
        try:
            answer = msgspec.json.decode(content)
        except msgspec.DecodeError:
            raise ProtocolError(
                f"A2A agent {self.agent!r} answered {method} with HTTP {status}, not"
                f" {self.binding}",
                agent=self.agent,
            ) from None
        if not isinstance(answer, dict):
            raise ProtocolError(f"A2A agent {self.agent!r} answered {method} with {answer!r}")
        if self.binding != "JSONRPC":
            if status >= 400 or isinstance(answer.get("error"), dict):
                raise _error(_rest_error(answer, status), self.agent, method)
            return answer
        error = answer.get("error")
        if isinstance(error, dict):
            raise _error(error, self.agent, method)
        if "result" not in answer:
            raise ProtocolError(
                f"A2A agent {self.agent!r} answered {method} with neither result nor error"
            )
        return answer["result"]


def _interface(card: Any, card_url: str) -> tuple[str, str]:
    """The binding to speak and its URL: the card's JSON-RPC interface of A2A 1.0, else
    its HTTP+JSON one."""
    interfaces = card.get("supportedInterfaces") if isinstance(card, dict) else None
    offered = {
        str(i.get("protocolBinding")): str(i.get("url"))
        for i in reversed(interfaces or ())
        if isinstance(i, dict)
        and str(i.get("protocolVersion", "")).startswith("1")
        and isinstance(i.get("url"), str)
    }
    for binding in _BINDINGS:
        if binding in offered:
            return binding, offered[binding]
    raise ProtocolError(
        f"the card at {card_url} offers no interface of A2A 1.0 the mesh speaks"
        f" ({' or '.join(_BINDINGS)})"
    )


def _rest_error(answer: dict[str, Any], status: int) -> dict[str, Any]:
    """An AIP-193 error as JSON-RPC's ``{code, message}``: the code its ErrorInfo's reason
    names, else the HTTP status's."""
    error = answer.get("error")
    error = error if isinstance(error, dict) else {}
    details = error.get("details")
    reasons = [d.get("reason") for d in details or () if isinstance(d, dict)]
    code = next((_CODES[r] for r in reasons if r in _CODES), None)
    if code is None:
        code = -32601 if status == 404 and not reasons else -32603
    return {"code": code, "message": error.get("message") or f"HTTP {status}"}


def _error(error: dict[str, Any], agent: str, method: str) -> MeshError:
    code, message = error.get("code"), str(error.get("message") or "no message")
    text = f"A2A agent {agent!r} refused {method}: {message} (A2A error {code})"
    if code == -32601:
        return MethodNotFound(text, agent=agent, method=method)
    return RemoteError(text, agent=agent, method=method, data={"a2a_code": code})
