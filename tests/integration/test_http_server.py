"""The HTTP side of an agent server: routes, bad input, limits, slow and idle clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import httpx
import pytest
import sniffio

from mesh import Agent, SessionConfig, open_agent_server
from mesh.agents.echo import agent as echo_agent
from transports import HttpServer, HttpServerConfig

pytestmark = pytest.mark.anyio

UPGRADE = (
    b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
    b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
)
FAST = HttpServerConfig(max_body_size=2048, request_timeout=0.3, keepalive_timeout=0.3)


@asynccontextmanager
async def server(
    agent: Agent = echo_agent, config: HttpServerConfig = FAST
) -> AsyncIterator[HttpServer]:
    async with open_agent_server(
        agent, http_config=config, config=SessionConfig(max_frame_size=2048)
    ) as srv:
        yield srv


async def test_health_rpc_and_notifications() -> None:
    async with server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        health = await http.get("/health")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "agent": "echo", "name": "Echo"}
        reply = await http.post(
            "/rpc",
            content=b'{"type":"request","id":"h1","timestamp":1,"payload":{"method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"message":"over http"}}}}',
        )
        assert reply.status_code == 200
        assert reply.json()["payload"] == {"success": True, "result": {"message": "over http"}}
        note = await http.post(
            "/rpc",
            content=b'{"type":"notification","id":"n1","timestamp":1,"payload":{"method":"x"}}',
        )
        assert note.status_code == 204 and note.content == b""


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (
            b'{"type":"request","id":"b1","timestamp":1,"payload":{"method":5}}',
            "`$.payload.method`",
        ),
        (
            b'{"type":"request","id":"b2","timestamp":"now","payload":{"method":"ping"}}',
            "`$.timestamp`",
        ),
    ],
)
async def test_bad_bodies_get_400_naming_the_problem(body: bytes, fragment: str) -> None:
    async with server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        reply = await http.post("/rpc", content=body)
        assert reply.status_code == 400
        assert fragment in reply.json()["payload"]["error"]["message"]
        assert (await http.get("/health")).status_code == 200  # still serving


async def test_wrong_routes_and_methods_and_oversized_bodies() -> None:
    async with server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        missing = await http.get("/nowhere")
        assert missing.status_code == 404 and "POST /rpc" in missing.json()["error"]["message"]
        wrong = await http.get("/rpc")
        assert wrong.status_code == 405
        huge = await http.post("/rpc", content=b"x" * 10_000)
        assert huge.status_code == 413
        assert "exceeds the 2048-byte limit" in huge.json()["error"]["message"]
        assert (await http.get("/health")).status_code == 200


async def test_a_crashing_handler_gets_500_without_a_stack_trace_and_the_server_lives() -> None:
    async def boom(request: object) -> object:
        raise RuntimeError("secret internals")

    from transports import open_http_server

    async with open_http_server(boom) as srv, httpx.AsyncClient(base_url=srv.url) as http:  # type: ignore[arg-type]
        for _ in range(3):
            reply = await http.get("/")
            assert reply.status_code == 500
            assert "secret internals" not in reply.text and "Traceback" not in reply.text


async def test_a_slow_client_gets_408_and_cannot_pin_the_server() -> None:
    async with server() as srv:
        stream = await anyio.connect_tcp("127.0.0.1", srv.port)
        async with stream:
            await stream.send(b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            with anyio.fail_after(5):
                reply = await stream.receive()
        assert reply.startswith(b"HTTP/1.1 408")
        async with httpx.AsyncClient(base_url=srv.url) as http:
            assert (await http.get("/health")).status_code == 200


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout() -> None:
    async with server() as srv:
        stream = await anyio.connect_tcp("127.0.0.1", srv.port)
        async with stream:
            with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
                await stream.receive()


async def test_garbage_instead_of_http_gets_400() -> None:
    async with server() as srv:
        stream = await anyio.connect_tcp("127.0.0.1", srv.port)
        async with stream:
            await stream.send(b"\x16\x03\x01 this is not http\r\n\r\n")
            with anyio.fail_after(5):
                reply = await stream.receive()
        assert reply.startswith(b"HTTP/1.1 400")


def _head_of(size: int) -> bytes:
    """A GET request head of exactly ``size`` bytes (padded in one header)."""
    bare = b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: \r\n\r\n"
    return bare.replace(b"x-pad: ", b"x-pad: " + b"p" * (size - len(bare)))


@pytest.mark.parametrize(("extra", "status"), [(0, 200), (1, 431)])
async def test_a_request_head_is_accepted_up_to_the_documented_limit_and_not_a_byte_more(
    extra: int, status: int
) -> None:
    limit = HttpServerConfig().max_header_size
    assert limit == 64 * 1024  # docs/transports.md: head <= 64 KiB
    async with server(config=HttpServerConfig()) as srv:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp(srv.host, srv.port) as tcp:
                await tcp.send(_head_of(limit + extra))
                answer = b""
                while b"\r\n\r\n" not in answer:
                    answer += await tcp.receive()
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:80]


async def _answers(srv: HttpServer, data: bytes, count: int) -> bytes:
    """Send ``data`` on a fresh connection; read until ``count`` answer heads came, or the end."""
    answer = b""
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(srv.host, srv.port) as tcp:
            await tcp.send(data)
            while answer.count(b"HTTP/1.1 ") < count:
                try:
                    answer += await tcp.receive()
                except anyio.EndOfStream:
                    break
    return answer


async def test_a_pipelined_request_whose_head_is_over_the_limit_gets_431() -> None:
    config = HttpServerConfig(max_header_size=256, request_timeout=5, keepalive_timeout=5)
    async with server(config=config) as srv:
        first = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
        second = b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: " + b"p" * 300 + b"\r\n\r\n"
        answer = await _answers(srv, first + second, 2)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"HTTP/1.1 431 " in answer and b"256-byte limit" in answer


async def test_a_chunked_body_over_the_limit_gets_413() -> None:
    chunk = b"x" * 1500
    body = b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2 + b"0\r\n\r\n"  # 3000 bytes > 2048
    head = b"POST /rpc HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    async with server() as srv:
        answer = await _answers(srv, head + body, 1)
    assert answer.startswith(b"HTTP/1.1 413 ") and b"2048-byte limit" in answer


async def test_an_upgrade_request_with_a_body_gets_400() -> None:
    head = (
        b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
        b"content-length: 5\r\n\r\nhello"
    )
    async with server() as srv:
        answer = await _answers(srv, head, 1)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"must not carry a body" in answer


async def test_a_streamed_body_arrives_in_pieces_and_a_crashed_one_ends_only_its_answer() -> None:
    from transports import BodyWriter, HttpRequest, HttpResponse, open_http_server

    async def handler(request: HttpRequest) -> HttpResponse:
        async def pieces(write: BodyWriter) -> None:
            for n in range(3):
                await write(b"data: %d\n\n" % n)
            if request.path == "/crash":
                raise RuntimeError("the producer broke")

        return HttpResponse(200, content_type="text/event-stream", stream=pieces)

    async with (
        open_http_server(handler, host="127.0.0.1", port=0) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        whole = await http.get("/ok")
        assert whole.headers["transfer-encoding"] == "chunked"
        assert whole.text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/crash")  # the stream stops short: no end of message
        assert (await http.get("/ok")).status_code == 200  # the server serves on


async def test_a_client_that_hangs_up_mid_stream_ends_a_producer_that_writes_nothing() -> None:
    """A streamed answer that has nothing to write yet (a tool call reporting no progress)
    still stops when its client leaves: the connection is read while it is produced."""
    from transports import BodyWriter, HttpRequest, HttpResponse, open_http_server

    started, ended = anyio.Event(), anyio.Event()

    async def handler(request: HttpRequest) -> HttpResponse:
        async def quiet(write: BodyWriter) -> None:
            started.set()
            try:
                await anyio.sleep_forever()
            finally:
                ended.set()

        return HttpResponse(200, content_type="text/event-stream", stream=quiet)

    async with open_http_server(handler, host="127.0.0.1", port=0) as srv:
        stream = await anyio.connect_tcp("127.0.0.1", srv.port)
        async with stream:
            await stream.send(b"GET /wait HTTP/1.1\r\nhost: mesh\r\n\r\n")
            with anyio.fail_after(10):
                assert (await stream.receive()).startswith(b"HTTP/1.1 200 ")
                await started.wait()
        with anyio.fail_after(10):
            await ended.wait()


async def test_a_response_header_that_would_split_the_head_gets_500_not_an_injected_header() -> (
    None
):
    """A handler that echoes a client's value into a header cannot be made to write a
    header of the client's choosing: the answer is a 500 (and the log says why)."""
    from transports import HttpRequest, HttpResponse, open_http_server

    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"{}", headers=[("x-echo", request.query_value("v") or "")])

    async with open_http_server(handler, host="127.0.0.1", port=0) as srv:
        answer = await _answers(
            srv, b"GET /?v=a%0D%0Ax-injected:%201 HTTP/1.1\r\nhost: x\r\n\r\n", 1
        )
        fine = await _answers(srv, b"GET /?v=plain HTTP/1.1\r\nhost: x\r\n\r\n", 1)
    assert answer.startswith(b"HTTP/1.1 500 "), answer[:80]
    assert b"x-injected" not in answer
    assert fine.startswith(b"HTTP/1.1 200 ") and b"x-echo: plain\r\n" in fine


async def test_a_client_that_hangs_up_cancels_the_handler_of_its_request() -> None:
    """Its caller gone, a request's work stops (a tool call can take minutes); on asyncio
    the transport says so with no task reading the connection, on trio a task reads it."""
    from transports import HttpRequest, HttpResponse, open_http_server

    started, ended = anyio.Event(), anyio.Event()

    async def handler(request: HttpRequest) -> HttpResponse:
        if request.path == "/quick":
            return HttpResponse(200, b"{}")
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()
        raise AssertionError("unreachable")

    async with open_http_server(handler, host="127.0.0.1", port=0) as srv:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", srv.port) as tcp:
                await tcp.send(b"GET /quick HTTP/1.1\r\nhost: x\r\n\r\n")
                assert (await tcp.receive()).startswith(b"HTTP/1.1 200 ")
                await tcp.send(b"GET /wait HTTP/1.1\r\nhost: x\r\n\r\n")  # same connection
                await started.wait()
            await ended.wait()
            answer = await _answers(srv, b"GET /quick HTTP/1.1\r\nhost: x\r\n\r\n", 1)
    assert answer.startswith(b"HTTP/1.1 200 ")


@contextlib.contextmanager
def tasks_started() -> Iterator[list[str]]:
    """The names of the tasks started meanwhile, on either loop."""
    started: list[str] = []
    if sniffio.current_async_library() == "trio":
        import trio

        class Spawns(trio.abc.Instrument):
            def task_spawned(self, task: trio.lowlevel.Task) -> None:
                started.append(task.name)

        spawns = Spawns()
        trio.lowlevel.add_instrument(spawns)
        try:
            yield started
        finally:
            trio.lowlevel.remove_instrument(spawns)
        return
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        started.append(getattr(coro, "__qualname__", "?"))
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)
    try:
        yield started
    finally:
        loop.set_task_factory(previous)


async def test_the_requests_of_a_keep_alive_connection_start_no_task_each() -> None:
    """A request is answered in its connection's own task, watched for its client leaving
    without a task of its own (asyncio's transport tells; on trio a task per connection
    reads it all along): a task per request was a large share of a served request."""
    from transports import HttpRequest, HttpResponse, open_http_server

    async def handler(request: HttpRequest) -> HttpResponse:
        await anyio.lowlevel.checkpoint()  # a handler that waits, as a call to an agent does
        return HttpResponse(200, request.body)

    request = b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
    async with open_http_server(handler, host="127.0.0.1", port=0) as srv:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", srv.port) as tcp:
                await tcp.send(request)  # the connection's first: its tasks start
                assert (await tcp.receive()).startswith(b"HTTP/1.1 200 ")
                with tasks_started() as started:
                    for _ in range(20):
                        await tcp.send(request)
                        answer = b""
                        while not answer.endswith(b"{}"):
                            answer += await tcp.receive()
                        assert answer.startswith(b"HTTP/1.1 200 ")
    assert started == []


async def test_a_connection_that_upgrades_at_once_starts_no_task_to_read_it() -> None:
    """A WebSocket link's first request is its upgrade: no request is answered on it, so
    nothing needs watching, and its handler reads the socket itself."""
    from transports import HttpRequest, HttpResponse, open_http_server

    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"{}")

    async def upgraded(stream: anyio.abc.ByteStream, request: HttpRequest, first: bytes) -> None:
        await stream.send(b"upgraded")

    async with open_http_server(handler, upgrade_handler=upgraded, port=0) as srv:
        with anyio.fail_after(10), tasks_started() as started:
            async with await anyio.connect_tcp("127.0.0.1", srv.port) as tcp:
                await tcp.send(UPGRADE)
                assert await tcp.receive() == b"upgraded"
    assert "http.read_ahead" not in started


async def test_an_upgraded_connection_gets_every_byte_sent_after_its_head() -> None:
    """A connection that served a request first, then upgrades: the bytes that came with
    the upgrade's head and those that come after reach the upgrade's handler, in order."""
    from transports import HttpRequest, HttpResponse, open_http_server
    from transports._sockets import socket_io

    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"{}")

    async def upgraded(stream: anyio.abc.ByteStream, request: HttpRequest, first: bytes) -> None:
        io = socket_io(stream)
        io.write(b"upgraded:" + first)
        while data := await io.receive():
            io.write(data)
            await io.drain()

    async with open_http_server(handler, upgrade_handler=upgraded, port=0) as srv:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", srv.port) as tcp:
                await tcp.send(b"GET /first HTTP/1.1\r\nhost: x\r\n\r\n")
                assert (await tcp.receive()).startswith(b"HTTP/1.1 200 ")
                await tcp.send(UPGRADE + b"one,")
                await tcp.send(b"two,")
                await tcp.send(b"three")
                echoed = b""
                while not echoed.endswith(b"three"):
                    echoed += await tcp.receive()
    assert echoed == b"upgraded:one,two,three"


async def test_the_listening_socket_stays_registered_while_connections_come_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # anyio's accept loop registers the listening socket with asyncio's selector for
    # each connection it waits for and unregisters it once one came (two epoll_ctl a
    # connection); the server keeps it registered and takes what waits per wake-up.
    registered: list[int] = []
    async with server() as srv:
        listening = srv.listener.extra(anyio.abc.SocketAttribute.raw_socket).fileno()
        if sniffio.current_async_library() == "asyncio":
            loop = asyncio.get_running_loop()
            add_reader = loop._add_reader  # type: ignore[attr-defined]

            def counting(fd: int, *args: Any) -> Any:
                if fd == listening:
                    registered.append(fd)
                return add_reader(fd, *args)

            monkeypatch.setattr(loop, "_add_reader", counting)
        with anyio.fail_after(10):
            for _ in range(5):  # a new connection each, served before the next one comes
                async with httpx.AsyncClient(base_url=srv.url) as http:
                    assert (await http.get("/health")).status_code == 200
    if sniffio.current_async_library() == "asyncio":
        assert len(registered) <= 1  # at most once, if it was not already before the count


async def test_connections_waiting_in_the_backlog_are_all_served() -> None:
    # Connected before the server has taken any: it takes them in one wake-up (or a few).
    request = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    async with server() as srv, contextlib.AsyncExitStack() as stack:
        with anyio.fail_after(10):
            clients = [
                await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", srv.port))
                for _ in range(30)
            ]
            for client in clients:
                await client.send(request)
            for client in clients:
                reply = b""
                with contextlib.suppress(anyio.EndOfStream):
                    while True:
                        reply += await client.receive()
                assert reply.startswith(b"HTTP/1.1 200 ")
