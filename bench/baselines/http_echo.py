"""httpx -> uvicorn JSON echo: the HTTP stack a user would reach for instead.

Server (``python -m bench.baselines.http_echo``): a bare ASGI app that decodes
and re-encodes the POSTed JSON body, under uvicorn (h11, asyncio loop, one
worker, no access log) on a socket bound to port 0. Client: one
`httpx.AsyncClient` with keep-alive; with 64 in flight HTTP/1.1 needs 64
connections, so the pool keeps 64 alive (httpx's default keeps only 20 and
would reconnect for the rest).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
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
from bench._measure import INFLIGHT, decode_reply, encode_request, measure_calls
from bench._registry import Measurement, RunContext, scenario

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_HEADERS = [(b"content-type", b"application/json")]


def make_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        out = encoder.encode(decoder.decode(body))
        headers = [*_HEADERS, (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


async def serve_echo() -> None:
    import uvicorn

    sock = listen_socket()
    config = uvicorn.Config(
        make_app(),
        http="h11",
        loop="asyncio",
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    announce_port(sock.getsockname()[1])
    await uvicorn.Server(config).serve(sockets=[sock])


@scenario("httpx-uvicorn", group="http", description="httpx -> uvicorn (h11) JSON echo")
async def httpx_uvicorn(ctx: RunContext) -> Measurement:
    import httpx

    limits = httpx.Limits(max_connections=INFLIGHT, max_keepalive_connections=INFLIGHT)
    async with (
        open_server(python_module(__name__)) as server,
        httpx.AsyncClient(limits=limits, trust_env=False) as client,
    ):
        url = f"http://127.0.0.1:{server.port}/echo"
        headers = {"content-type": "application/json"}

        async def call() -> None:
            response = await client.post(url, content=encode_request(0), headers=headers)
            response.raise_for_status()
            decode_reply(response.content)

        return await measure_calls(call, ctx)


def main() -> None:
    die_with_parent()
    anyio.run(serve_echo)


if __name__ == "__main__":
    main()
