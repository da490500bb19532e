"""Our hand-written transport pieces against the libraries they replace, in the same run.

The mesh drives websockets' sans-I/O core over anyio (`transports._websocket`),
runs its own h11 HTTP server (`transports._http_server`) and its own h11 client
pool (`transports._http_client`). Each is measured here as a bare JSON echo (no
RPC, no mesh), next to the library a user would take instead:

- ``ws-client-ours`` (`transports.open_websocket`) against ``ws-raw`` (websockets'
  own asyncio / trio client); both dial the websockets asyncio echo server.
- ``ws-server-ours`` (`open_http_server` + `websocket_upgrade_handler`) against
  ``ws-server-hypercorn`` (an ASGI app under hypercorn); websockets' client drives both.
- ``http-client-ours`` (`transports.open_http_client`) against
  ``http-client-httpcore`` (httpcore's pool, httpx's engine); both POST to uvicorn.
- ``http-server-ours`` (`open_http_server`) against ``http-server-hypercorn`` (the
  same ASGI app); our h11 client drives both.

Both servers (``python -m bench.own_vs_library ours|hypercorn BACKEND``) serve
``POST /rpc`` and ``/ws`` on one port, on the run's backend, as the daemon does.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import msgspec

from bench._children import (
    announce_port,
    die_with_parent,
    listen_socket,
    open_server,
    python_module,
)
from bench._measure import INFLIGHT, decode_reply, encode_request, measure_calls, measure_echo
from bench._registry import Measurement, RunContext, scenario
from bench.baselines import http_echo, ws_echo
from bench.baselines.http_echo import Receive, Scope, Send

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def echo(body: bytes | str) -> bytes:
    """Decode and re-encode, as every echo server in bench/ does."""
    return _encoder.encode(_decoder.decode(body))


# -- the two servers ---------------------------------------------------------------------------


async def serve_ours() -> None:
    from transports import (
        HttpRequest,
        HttpResponse,
        TransportClosed,
        WebSocketStream,
        open_http_server,
        websocket_upgrade_handler,
    )

    async def rpc(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, echo(request.body))

    async def ws(stream: WebSocketStream, agent: str | None) -> None:
        try:
            while True:
                await stream.send(echo(await stream.receive()))
        except TransportClosed:
            return

    upgrade = websocket_upgrade_handler(ws, authenticator=None)
    async with open_http_server(rpc, upgrade_handler=upgrade) as server:
        announce_port(server.port)
        await anyio.sleep_forever()


async def asgi_echo(scope: Scope, receive: Receive, send: Send) -> None:
    """``POST /rpc`` and ``/ws`` as one ASGI app: echo each body, echo each message."""
    if scope["type"] == "lifespan":  # hypercorn on trio insists on the lifespan protocol
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text") or message.get("bytes") or b""
            await send({"type": "websocket.send", "text": echo(data).decode()})
    if scope["type"] == "http":
        await http_echo.make_app()(scope, receive, send)


async def serve_hypercorn(backend: str) -> None:
    from hypercorn.config import Config

    sock = listen_socket()
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = None
    config.errorlog = None
    config.loglevel = "WARNING"
    announce_port(sock.getsockname()[1])
    if backend == "trio":
        from hypercorn.trio import serve as trio_serve

        await trio_serve(asgi_echo, config)  # type: ignore[arg-type]
    else:
        from hypercorn.asyncio import serve as asyncio_serve

        await asyncio_serve(asgi_echo, config)  # type: ignore[arg-type]


# -- measuring a frame stream (ours) and httpcore's pool ----------------------------------------


async def measure_frames(stream: Any, ctx: RunContext) -> Measurement:
    """Echo over one of our frame streams: send then receive, or 64 callers and a reader."""
    return await measure_echo(stream.send, stream.receive, ctx)


async def measure_frames_to(command: list[str], ctx: RunContext) -> Measurement:
    """Our h11 client pool against the server ``command`` starts."""
    from transports import open_http_client

    async with (
        open_server(command) as server,
        open_http_client(f"http://127.0.0.1:{server.port}") as stream,
    ):
        return await measure_frames(stream, ctx)


async def measure_ws_server(which: str, ctx: RunContext) -> Measurement:
    """websockets' client against one of the two servers' ``/ws``."""
    async with open_server(_server(which, ctx.backend)) as server:
        uri = f"ws://127.0.0.1:{server.port}/ws"
        async with ws_echo.open_client(uri, ctx.backend) as ws:
            return await ws_echo.measure_socket(ws, ctx)


def _server(which: str, backend: str) -> list[str]:
    return python_module(__name__, which, backend)


@scenario(
    "ws-client-ours",
    group="websocket",
    baseline="ws-raw",
    description="our WebSocket driver (websockets sans-I/O over anyio) -> websockets server",
    smoke_modes=("sequential",),
)
async def ws_client_ours(ctx: RunContext) -> Measurement:
    from transports import open_websocket

    async with (
        open_server(python_module(ws_echo.__name__)) as server,
        open_websocket(f"ws://127.0.0.1:{server.port}/") as stream,
    ):
        return await measure_frames(stream, ctx)


@scenario(
    "ws-server-hypercorn",
    group="websocket",
    description="websockets client -> hypercorn ASGI /ws echo on the run's backend",
    smoke_modes=("sequential",),
)
async def ws_server_hypercorn(ctx: RunContext) -> Measurement:
    return await measure_ws_server("hypercorn", ctx)


@scenario(
    "ws-server-ours",
    group="websocket",
    baseline=("ws-server-hypercorn", "ws-raw"),
    description="websockets client -> our h11 + WebSocket server /ws echo on the run's backend",
    smoke_modes=("sequential",),
)
async def ws_server_ours(ctx: RunContext) -> Measurement:
    return await measure_ws_server("ours", ctx)


@scenario(
    "http-client-httpcore",
    group="http",
    description="httpcore's connection pool (httpx's engine) -> uvicorn echo",
    smoke_modes=("sequential",),
)
async def http_client_httpcore(ctx: RunContext) -> Measurement:
    import httpcore

    headers = [(b"content-type", b"application/json")]
    async with (
        open_server(python_module(http_echo.__name__)) as server,
        httpcore.AsyncConnectionPool(max_connections=INFLIGHT) as pool,
    ):
        url = f"http://127.0.0.1:{server.port}/rpc"

        async def call() -> None:
            response = await pool.request("POST", url, content=encode_request(0), headers=headers)
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")
            decode_reply(response.content)

        return await measure_calls(call, ctx)


@scenario(
    "http-client-ours",
    group="http",
    baseline="http-client-httpcore",
    description="our h11 client pool -> uvicorn echo",
    smoke_modes=("sequential",),
)
async def http_client_ours(ctx: RunContext) -> Measurement:
    return await measure_frames_to(python_module(http_echo.__name__), ctx)


@scenario(
    "http-server-hypercorn",
    group="http",
    description="our h11 client -> hypercorn ASGI POST /rpc echo on the run's backend",
    smoke_modes=("sequential",),
)
async def http_server_hypercorn(ctx: RunContext) -> Measurement:
    return await measure_frames_to(_server("hypercorn", ctx.backend), ctx)


@scenario(
    "http-server-ours",
    group="http",
    baseline="http-server-hypercorn",
    description="our h11 client -> our h11 server POST /rpc echo on the run's backend",
    smoke_modes=("sequential",),
)
async def http_server_ours(ctx: RunContext) -> Measurement:
    return await measure_frames_to(_server("ours", ctx.backend), ctx)


def main() -> None:
    die_with_parent()
    which, backend = sys.argv[1:3]
    if which == "ours":
        anyio.run(serve_ours, backend=backend)
    else:
        anyio.run(serve_hypercorn, backend, backend=backend)


if __name__ == "__main__":
    main()
