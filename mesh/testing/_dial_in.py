"""The echo agent as a process that dials in to a loopback server of ours (``--connect``)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc
import sniffio

from mesh._rpc.connect import handshake
from mesh._rpc.peer import Peer, open_peer
from mesh._rpc.session import SessionConfig
from mesh.testing._process import ECHO_MODULE, SPAWN_TIMEOUT, stop_process
from mesh.testing._recorder import NotificationRecorder
from transports import (
    HttpRequest,
    HttpResponse,
    TokenAuthenticator,
    WebSocketStream,
    open_http_server,
    websocket_upgrade_handler,
)

__all__ = ["DialInEcho", "open_dial_in_echo_agent", "spawn_dial_in_echo"]


@dataclass(frozen=True, slots=True)
class DialInEcho:
    """An echo agent process that dialled in to us, and our Peer to it."""

    peer: Peer
    process: anyio.abc.Process


@asynccontextmanager
async def spawn_dial_in_echo(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    token: str = "dial-in-secret",
) -> AsyncIterator[DialInEcho]:
    """Listen on a loopback port and let the echo agent process dial in (``--connect``)."""
    links, incoming = anyio.create_memory_object_stream[WebSocketStream](1)
    done = anyio.Event()

    async def accept(stream: WebSocketStream, agent_id: str | None) -> None:
        await links.send(stream)
        await done.wait()

    async def no_http(request: HttpRequest) -> HttpResponse:
        return HttpResponse.error(404, "only /ws here")

    upgrade = websocket_upgrade_handler(accept, authenticator=TokenAuthenticator({token: "echo"}))
    command, args = sys.executable, ["-m", ECHO_MODULE]
    async with links, incoming, open_http_server(no_http, upgrade_handler=upgrade) as server:
        args += ["--connect", f"{server.ws_url}/ws", "--token-env", "ECHO_TOKEN"]
        args += ["--backend", backend or sniffio.current_async_library()]
        env = {**os.environ, "ECHO_TOKEN": token}
        process = await anyio.open_process([command, *args], env=env, stdout=None, stderr=None)
        try:
            with anyio.fail_after(SPAWN_TIMEOUT):
                stream = await incoming.receive()
            async with open_peer(stream, handler=handler, config=config, agent="echo") as peer:
                await handshake(peer, timeout=SPAWN_TIMEOUT)
                yield DialInEcho(peer, process)
        finally:
            done.set()
            with anyio.CancelScope(shield=True):
                await stop_process(process)


@asynccontextmanager
async def open_dial_in_echo_agent(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    token: str = "dial-in-secret",
) -> AsyncIterator[Peer]:
    """Listen on a loopback port, let the echo agent process dial in, yield a Peer to it."""
    async with spawn_dial_in_echo(
        handler=handler, config=config, backend=backend, token=token
    ) as echo:
        yield echo.peer
