"""A small client of a running daemon's HTTP API, for tests and scripts.

``mesh serve`` answers ``POST /rpc`` with ``{"result": …}`` or an error body that
carries the mesh error code; :class:`DaemonClient` turns those back into the
same :class:`~mesh.MeshError` subclasses a :class:`~mesh.Peer` raises, so a test
written against a peer reads the same against the daemon::

    async with open_daemon_client(url, token=token) as daemon:
        await daemon.call_tool("echo-stdio", "echo", {"message": "hi"})

``http`` is the underlying ``httpx.AsyncClient`` (base URL and token set) for
every other route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx

from mesh._errors import MeshError, error_from_code
from mesh._input import MalformedToken, bearer_token

__all__ = ["DaemonClient", "open_daemon_client"]

#: The HTTP client's patience beyond a call's own timeout: the daemon answers a
#: timed-out call with 504 itself, and that answer should win.
HTTP_SLACK: Final = 5.0
#: The daemon's own default deadline for a call (its orchestrator's), plus slack.
DEFAULT_TIMEOUT: Final = 30.0


class DaemonClient:
    """Calls through a daemon: ``call``, ``call_tool``, ``agents``; ``http`` for the rest."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def call(
        self, agent: str, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Call ``method`` on ``agent`` through ``POST /rpc``; its result, or its MeshError."""
        body = {"agent": agent, "method": method, "params": params, "timeout": timeout}
        wait = (timeout or DEFAULT_TIMEOUT) + HTTP_SLACK
        response = await self.http.post("/rpc", json=body, timeout=wait)
        payload = _json(response)
        if response.status_code >= 400:
            raise _error(response.status_code, payload, agent=agent, method=method)
        return payload["result"]

    async def call_tool(
        self,
        agent: str,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Call ``agent``'s tool ``name`` with ``arguments`` (the orchestrator's shape)."""
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.call(agent, "tools/call", params, timeout=timeout)

    async def agents(self) -> list[dict[str, Any]]:
        """Every agent the daemon knows, as ``GET /agents`` shows them, in the order of
        their ids: one request per page of them (1,000), each page after the last."""
        agents: list[dict[str, Any]] = []
        after: str | None = None
        while True:  # ends: each page starts past the last one, or this raises
            params = {} if after is None else {"after": after}
            response = await self.http.get("/agents", params=params)
            payload = _json(response)
            if response.status_code >= 400:
                raise _error(response.status_code, payload, agent=None, method="GET /agents")
            agents += payload["agents"]
            following = payload.get("next")
            if following is None:
                return agents
            if not isinstance(following, str) or (after is not None and following <= after):
                raise MeshError(
                    f"GET /agents answered a next page that does not follow: {following!r}"
                )
            after = following


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise MeshError(
            f"the daemon answered HTTP {response.status_code} without JSON: {response.text[:200]!r}"
        ) from None


def _error(status: int, payload: Any, *, agent: str | None, method: str) -> MeshError:
    error = payload.get("error", {}) if isinstance(payload, dict) else {}
    message = str(error.get("message", f"HTTP {status}"))
    code = error.get("code")
    if isinstance(code, int):
        # The daemon is a router: a timeout or lost link is its verdict on the agent's link.
        return error_from_code(code, message, data=error.get("data"), relayed=True)
    return MeshError(f"the daemon refused {method} (HTTP {status}): {message}", agent=agent)


@asynccontextmanager
async def open_daemon_client(
    url: str, *, token: str | None = None, verify: Any = True
) -> AsyncIterator[DaemonClient]:
    """A :class:`DaemonClient` on the daemon at ``url``, presenting ``token`` if given
    (without surrounding whitespace; a malformed one is a MeshError that never shows it)."""
    try:
        headers = {"Authorization": f"Bearer {bearer_token(token, 'token=')}"} if token else {}
    except MalformedToken as exc:
        raise MeshError(str(exc)) from None
    async with httpx.AsyncClient(base_url=url, headers=headers, verify=verify) as http:
        yield DaemonClient(http)
