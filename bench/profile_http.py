"""Profile the daemon's HTTP server in one process, as ``bench.profile`` does the core.

:func:`transports.open_http_server` with a handler that answers the body it is given,
driven by raw keep-alive clients (a few socket calls each: the server's cost is what
is left), ``POST /rpc`` of a 70-byte JSON body, each client one request at a time::

    python -m bench.profile_http                     # CPU per request (both ends), both backends
    python -m bench.profile_http --cprofile --backend trio
"""

from __future__ import annotations

import argparse
import functools
import time

import anyio
import anyio.abc

from bench.profile import _start, _stop

__all__ = ["main"]

_BODY = b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"message":"hello"}}'
_REQUEST = (
    b"POST /rpc HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)
WARM_REQUESTS = 200


async def _client(port: int, requests: int) -> None:
    """``requests`` requests on one keep-alive connection, each answer read whole."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        for _ in range(requests):
            await stream.send(_REQUEST)
            await _read_answer(stream)


async def _read_answer(stream: anyio.abc.ByteStream) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += await stream.receive()


async def _requests(n: int, clients: int, profile: str | None) -> float:
    from transports import HttpRequest, HttpResponse, open_http_server

    async def echo(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, request.body)

    async with open_http_server(echo) as server:
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(_client, server.port, WARM_REQUESTS // clients + 1)
        profiler = _start(profile)
        started = time.process_time()
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(_client, server.port, n // clients)
        took = time.process_time() - started
        _stop(profile, profiler)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_http", description=__doc__)
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--requests", type=int, default=6_400)
    parser.add_argument("--clients", type=int, default=64, help="keep-alive connections")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--pyinstrument", action="store_true")
    args = parser.parse_args(argv)
    profile = "cprofile" if args.cprofile else "pyinstrument" if args.pyinstrument else None
    for backend in ["asyncio", "trio"] if args.backend == "both" else [args.backend]:
        run = functools.partial(_requests, args.requests, args.clients, profile)
        took = anyio.run(run, backend=backend)
        per = took / args.requests * 1e6
        print(f"{backend}: {per:.1f} us CPU per request, {args.clients} connections (both ends)")


if __name__ == "__main__":
    main()
