"""Raw `websockets` JSON echo: the practical limit for RPC over one WebSocket.

Server (``python -m bench.baselines.ws_echo``): websockets' asyncio
implementation, compression off, decoding and re-encoding each JSON text frame.
Client: websockets' asyncio implementation on asyncio and its trio
implementation (``websockets.trio``, new in 14.x and present in 17.x) on trio.
Sequential calls send and then receive directly; 64 in flight share the
connection through one reader task that wakes callers by id.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Protocol

import anyio
import msgspec

from bench._children import announce_port, die_with_parent, open_server, python_module
from bench._measure import measure_echo
from bench._registry import Measurement, RunContext, scenario

#: Messages far above our ~100-byte payload are a bug, not a benchmark.
MAX_SIZE = 1 << 20


class _Socket(Protocol):
    """What the asyncio and trio client connections have in common here."""

    async def send(self, message: bytes, *, text: bool | None = None) -> None: ...
    async def recv(self, decode: bool | None = None) -> Any: ...


async def serve_echo() -> None:
    from websockets.asyncio.server import ServerConnection, serve

    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()

    async def handle(ws: ServerConnection) -> None:
        with contextlib.suppress(Exception):
            while True:
                message = await ws.recv(decode=False)
                await ws.send(encoder.encode(decoder.decode(message)), text=True)

    async with serve(handle, "127.0.0.1", 0, compression=None, max_size=MAX_SIZE) as server:
        announce_port(server.sockets[0].getsockname()[1])
        await server.serve_forever()


@contextlib.asynccontextmanager
async def open_client(uri: str, backend: str) -> AsyncIterator[_Socket]:
    """A raw websockets client connection on the running backend."""
    if backend == "trio":
        from websockets.trio.client import connect as trio_connect

        async with trio_connect(uri, compression=None, proxy=None, max_size=MAX_SIZE) as tws:
            yield tws
    else:
        from websockets.asyncio.client import connect

        async with connect(uri, compression=None, proxy=None, max_size=MAX_SIZE) as ws:
            yield ws


async def measure_socket(ws: _Socket, ctx: RunContext) -> Measurement:
    """Echo calls over one connection: direct send/recv, or 64 callers and a reader."""
    return await measure_echo(partial(ws.send, text=True), partial(ws.recv, decode=False), ctx)


@scenario("ws-raw", group="websocket", description="raw websockets echo, no compression")
async def ws_raw(ctx: RunContext) -> Measurement:
    async with open_server(python_module(__name__)) as server:
        uri = f"ws://127.0.0.1:{server.port}/"
        async with open_client(uri, ctx.backend) as ws:
            result = await measure_socket(ws, ctx)
    impl = "websockets.trio" if ctx.backend == "trio" else "websockets.asyncio"
    result.notes["client"] = impl
    return result


def main() -> None:
    die_with_parent()
    anyio.run(serve_echo)


if __name__ == "__main__":
    main()
