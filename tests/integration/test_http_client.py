"""The HTTP client's keep-alive pool, against real loopback servers.

Connections are counted at the server: our own h11 server reports each request's
client address (one per connection), and a scripted raw h11 server below closes
or resets connections exactly when a test says so.
"""

from __future__ import annotations

import json
import os
import select
import signal
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
import h11
import pytest
import trustme

from mesh import MessageTooLarge, SessionConfig, open_agent_server, open_http_peer
from mesh.agents.echo import agent as echo_agent
from tests.faults._helpers import spawn_holding_server, wait_holding
from transports import (
    FrameRejected,
    FrameTooLarge,
    HttpClientStream,
    HttpRequest,
    HttpResponse,
    TokenAuthenticator,
    TransportClosed,
    open_http_client,
    open_http_server,
)
from transports._http_client import _Slots

pytestmark = pytest.mark.anyio

#: Generous: these tests wait on events, and this only turns a hang into a failure.
WITHIN = 10


def request_frame(request_id: str, tool: str = "echo", **arguments: Any) -> bytes:
    params = {"name": tool, "arguments": arguments or {"message": "hi"}}
    payload = {"method": "tools/call", "params": params}
    message = {"type": "request", "id": request_id, "timestamp": 1, "payload": payload}
    return json.dumps(message, separators=(",", ":")).encode()


NOTIFICATION = b'{"type":"notification","id":"n","timestamp":1,"payload":{"method":"x"}}'


@dataclass
class Recorder:
    """An echo handler for our h11 server that notes which connection carried each request."""

    clients: list[str] = field(default_factory=list)

    @property
    def connections(self) -> int:
        return len(set(self.clients))

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        self.clients.append(request.client)
        return HttpResponse(200, request.body)


async def round_trip(stream: HttpClientStream, frame: bytes) -> bytes:
    await stream.send(frame)
    with anyio.fail_after(WITHIN):
        return await stream.receive()


async def test_one_connection_carries_sequential_requests() -> None:
    recorder = Recorder()
    async with open_http_server(recorder) as server, open_http_client(server.url) as stream:
        for n in range(20):
            assert await round_trip(stream, b"frame %d" % n) == b"frame %d" % n
        assert server.connections == 1
    assert len(recorder.clients) == 20 and recorder.connections == 1


@pytest.mark.parametrize("limit", [8, 64])
async def test_64_concurrent_requests_use_at_most_max_connections(limit: int) -> None:
    clients: list[str] = []
    active = peak = 0
    full = anyio.Event()

    async def gated(request: HttpRequest) -> HttpResponse:
        # The first ``limit`` requests wait until all of them are in flight at once.
        nonlocal active, peak
        clients.append(request.client)
        active += 1
        peak = max(peak, active)
        if active == limit:
            full.set()
        await full.wait()
        active -= 1
        return HttpResponse(200, request.body)

    async with (
        open_http_server(gated) as server,
        open_http_client(server.url, max_connections=limit) as stream,
    ):
        for _round in range(2):  # the second round dials nothing new
            stream.send_nowait([b"%d" % n for n in range(64)])
            with anyio.fail_after(WITHIN):
                answers = {await stream.receive() for _ in range(64)}
            assert answers == {b"%d" % n for n in range(64)}
    assert peak == limit  # every connection was used at once, and never one more
    assert len(set(clients)) == limit and len(clients) == 128


async def test_connection_close_from_the_server_means_a_new_connection() -> None:
    clients: list[str] = []

    async def closing(request: HttpRequest) -> HttpResponse:
        clients.append(request.client)
        return HttpResponse(200, request.body, headers=[("connection", "close")])

    async with open_http_server(closing) as server, open_http_client(server.url) as stream:
        for n in range(3):
            assert await round_trip(stream, b"%d" % n) == b"%d" % n
    assert len(set(clients)) == 3


# -- a raw h11 server that closes connections when told to ---------------------------------------

Action = Literal["answer", "answer_then_close", "reset_unread", "read_then_close", "cut_short"]


@dataclass
class Scripted:
    """What happened at the scripted server: connections accepted, bodies read, closes."""

    port: int
    closes: anyio.abc.ObjectReceiveStream[int]
    connections: int = 0
    bodies: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _read_request(conn: h11.Connection, stream: anyio.abc.SocketStream) -> bytes | None:
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                conn.receive_data(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return None
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return body
        elif isinstance(event, h11.ConnectionClosed):
            return None


@asynccontextmanager
async def scripted_server(script: Callable[[int, int], Action]) -> AsyncIterator[Scripted]:
    """``script(connection, request)`` (both counted from 0) says what to do with each request."""
    send_close, closes = anyio.create_memory_object_stream[int](100)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    scripted = Scripted(listener.extra(anyio.abc.SocketAttribute.local_port), closes)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        index = scripted.connections
        scripted.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            for n in range(1000):
                action = script(index, n)
                if action == "reset_unread":
                    # Close with the request unread, as a server timing out an idle
                    # connection just as it arrives does: the kernel answers with a reset.
                    # (A thread waits: asyncio lends no fd its transport owns to add_reader.)
                    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
                    await anyio.to_thread.run_sync(select.select, [sock], [], [], WITHIN)
                    return
                body = await _read_request(conn, stream)
                if body is None:
                    return
                scripted.bodies.append(body)
                if action == "read_then_close":
                    return
                if action == "cut_short":  # an answer that stops halfway through its body
                    head = h11.Response(status_code=200, headers=[("content-length", "100")])
                    cut = (head, h11.Data(data=b"0123456789"))
                    await stream.send(b"".join(conn.send(event) or b"" for event in cut))
                    return
                head = h11.Response(status_code=200, headers=[("content-length", str(len(body)))])
                events = (head, h11.Data(data=body), h11.EndOfMessage())
                await stream.send(b"".join(conn.send(event) or b"" for event in events))
                if action == "answer_then_close":
                    return
                conn.start_next_cycle()
        finally:
            await anyio.aclose_forcefully(stream)
            send_close.send_nowait(index)

    async with send_close, closes, listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield scripted
        tg.cancel_scope.cancel()


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    async with (
        scripted_server(lambda conn, n: "answer_then_close") as server,
        open_http_client(server.url) as stream,
    ):
        for n in range(3):
            assert await round_trip(stream, b"%d" % n) == b"%d" % n
            with anyio.fail_after(WITHIN):
                assert await server.closes.receive() == n  # closed before the next request
        assert server.connections == 3 and server.bodies == [b"0", b"1", b"2"]


async def test_a_reused_connection_reset_before_answering_is_retried_once_on_a_new_one() -> None:
    def script(conn: int, n: int) -> Action:
        return "reset_unread" if (conn, n) == (0, 1) else "answer"

    async with scripted_server(script) as server, open_http_client(server.url) as stream:
        assert await round_trip(stream, b"first") == b"first"
        assert await round_trip(stream, b"second") == b"second"  # reset, then on a new one
        assert await round_trip(stream, b"third") == b"third"  # and that one is kept
        assert server.connections == 2
        assert server.bodies == [b"first", b"second", b"third"]  # each one processed once


async def test_a_request_that_may_have_been_processed_is_never_sent_twice() -> None:
    def script(conn: int, n: int) -> Action:
        return "read_then_close" if n == 1 else "answer"

    async with scripted_server(script) as server, open_http_client(server.url) as stream:
        assert await round_trip(stream, b"first") == b"first"
        await stream.send(b"second")
        with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as closed:
            await stream.receive()
        assert server.connections == 1 and server.bodies == [b"first", b"second"]
    assert server.url in str(closed.value) and "disconnected before answering" in str(closed.value)
    with pytest.raises(TransportClosed):
        await stream.send(b"after the end")


async def test_an_answer_cut_short_ends_the_stream() -> None:
    async with (
        scripted_server(lambda conn, n: "cut_short") as server,
        open_http_client(server.url) as stream,
    ):
        await stream.send(b"tell me everything")
        with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as closed:
            await stream.receive()
        assert server.connections == 1
    assert "the server disconnected mid-answer" in str(closed.value)


async def test_no_server_is_transport_closed_naming_url_and_cause() -> None:
    async with scripted_server(lambda conn, n: "answer") as server:
        url = server.url
    async with open_http_client(url) as stream:  # the port is free again: nobody listens
        await stream.send(b"anyone?")
        with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as closed:
            await stream.receive()
    message = str(closed.value)
    assert message.startswith(f"cannot reach {url}/rpc:") and "refused" in message.lower()


# -- the server dies mid-request -----------------------------------------------------------------


async def test_server_gone_mid_request_is_transport_closed() -> None:
    holding = anyio.Event()

    async def hold(request: HttpRequest) -> HttpResponse:
        holding.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_http_server(hold) as server, open_http_client(server.url) as stream:
        await stream.send(b"wait for me")
        with anyio.fail_after(WITHIN):
            await holding.wait()
            server.close_all()
            with pytest.raises(TransportClosed) as closed:
                await stream.receive()
    assert f"lost the connection to {server.url}/rpc" in str(closed.value)
    assert "disconnected" in str(closed.value)


async def test_agent_process_killed_mid_call_is_transport_closed() -> None:
    async with spawn_holding_server() as agent, open_http_client(agent.http) as stream:
        assert b'"success":true' in await round_trip(stream, request_frame("warm-up"))
        await stream.send(request_frame("slow", "hold", seconds=60))
        with anyio.fail_after(WITHIN):
            # The agent says when the call is in its hands: only then is the POST on the
            # wire, waiting for its answer (no task switch of ours can prove that).
            await wait_holding(agent, 1)
        os.kill(agent.process.pid, signal.SIGKILL)
        with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as closed:
            await stream.receive()
    message = str(closed.value)
    assert agent.http in message and ("disconnected" in message or "cannot reach" in message)


async def test_closing_the_stream_cancels_posts_still_waiting() -> None:
    holding = anyio.Event()

    async def hold(request: HttpRequest) -> HttpResponse:
        holding.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_http_server(hold) as server:
        with anyio.fail_after(WITHIN):
            async with open_http_client(server.url) as stream:
                await stream.send(b"never answered")
                await holding.wait()
            with pytest.raises(TransportClosed):
                await stream.receive()


# -- refusals, sizes, TLS, through the agent server ----------------------------------------------


async def test_401_is_frame_rejected_with_the_servers_message_and_the_stream_carries_on() -> None:
    tokens = TokenAuthenticator({"good": "echo"})
    async with open_agent_server(echo_agent, tokens=tokens) as server:
        async with open_http_client(server.url, token="wrong") as stream:
            for request_id in ("a", "b"):
                await stream.send(request_frame(request_id))
                with anyio.fail_after(WITHIN), pytest.raises(FrameRejected) as rejected:
                    await stream.receive()
                assert rejected.value.status == 401
                assert rejected.value.message == "missing or invalid bearer token"
                assert rejected.value.head == request_frame(request_id)
        async with open_http_client(server.url, token="good") as stream:
            assert b'"success":true' in await round_trip(stream, request_frame("c"))


async def test_a_notification_answered_204_delivers_nothing() -> None:
    async with open_agent_server(echo_agent) as server, open_http_client(server.url) as stream:
        await stream.send(
            b'{"type":"notification","id":"n","timestamp":1,"payload":{"method":"x"}}'
        )
        answer = await round_trip(stream, request_frame("after"))
        assert b'"id":"after"' in answer


async def test_an_answer_over_the_limit_is_frame_too_large_and_the_stream_carries_on() -> None:
    recorder = Recorder()

    def answer(size: int) -> bytes:
        return b'{"type":"response","id":"big","pad":"' + b"x" * size + b'"}'

    async def big(request: HttpRequest) -> HttpResponse:
        await recorder(request)
        return HttpResponse(200, answer(int(request.body)))

    async with (
        open_http_server(big) as server,
        open_http_client(server.url, max_frame_size=4096) as stream,
    ):
        await stream.send(b"100000")
        with anyio.fail_after(WITHIN), pytest.raises(FrameTooLarge) as too_large:
            await stream.receive()
        assert too_large.value.limit == 4096 and too_large.value.size > 100_000
        assert too_large.value.head.startswith(b'{"type":"response","id":"big"')
        assert await round_trip(stream, b"100") == answer(100)  # still up
    assert recorder.connections == 2  # the oversized answer's connection was not kept


async def test_an_oversized_answer_fails_only_its_call() -> None:
    config = SessionConfig(max_frame_size=4096)
    async with (
        open_agent_server(echo_agent) as server,
        open_http_peer(server.url, agent="echo", config=config) as peer,
    ):
        with anyio.fail_after(WITHIN), pytest.raises(MessageTooLarge, match="4096-byte limit"):
            await peer.call_tool("blob", {"size": 10_000})
        assert await peer.call_tool("echo", {"message": "still here"}) == {"message": "still here"}


async def test_https_with_a_generated_certificate_reuses_its_connection() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    recorder = Recorder()
    async with open_http_server(recorder, ssl_context=server_context) as server:
        assert server.url.startswith("https://")
        async with open_http_client(server.url, ssl_context=client_context) as stream:
            for n in range(5):
                assert await round_trip(stream, b"tls %d" % n) == b"tls %d" % n
        assert recorder.connections == 1
        async with open_http_client(server.url) as untrusting:  # the system's CAs only
            await untrusting.send(b"hello?")
            with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as closed:
                await untrusting.receive()
        assert "cannot reach https://127.0.0.1" in str(closed.value)
        assert "CERTIFICATE_VERIFY_FAILED" in str(closed.value)


async def test_bad_endpoints_are_refused_up_front() -> None:
    for endpoint in ("ftp://example.com", "http://user:pw@example.com", "nonsense"):
        with pytest.raises(ValueError, match="endpoint"):
            async with open_http_client(endpoint):
                pass


# -- the line of POSTs waiting for a connection ---------------------------------------------------


async def test_posts_wait_in_line_and_a_cancelled_one_leaves_it() -> None:
    slots = _Slots(1)
    await slots.acquire()  # taken: the rest queue
    served: list[str] = []
    quitter = anyio.CancelScope()

    async def wait(name: str, scope: anyio.CancelScope | None = None) -> None:
        with scope or anyio.CancelScope():
            await slots.acquire()
            served.append(name)
            slots.release()

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(wait, name, quitter if name == "b" else None)
            await anyio.wait_all_tasks_blocked()
        quitter.cancel()
        await anyio.wait_all_tasks_blocked()
        slots.release()
    assert served == ["a", "c"]
    await slots.acquire()  # and the slot came back
    slots.release()


async def test_closing_a_stream_with_thousands_of_posts_in_line_is_quick() -> None:
    async def hold(request: HttpRequest) -> HttpResponse:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_http_server(hold) as server:
        # Only turns a hang into a failure: at load 20 on two cores, trio took over 10 s
        # to start and cancel 5,000 tasks.
        with anyio.fail_after(60):
            async with open_http_client(server.url, max_connections=2) as stream:
                stream.send_nowait([b"%d" % n for n in range(5000)])
                await anyio.wait_all_tasks_blocked()


# -- what an error answer says, whatever its body -------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        # Not our JSON: the status line's reason phrase, not the page.
        (
            HttpResponse(500, b"<html>oops</html>", content_type="text/html"),
            "Internal Server Error",
        ),
        # JSON whose message is not text: the reason phrase too.
        (HttpResponse.json(503, {"error": {"message": 7}}), "Service Unavailable"),
        # A mesh envelope carrying the error (an agent's own words).
        (HttpResponse.json(502, {"payload": {"error": {"message": "busy"}}}), "busy"),
        # A status with no reason phrase and no words of its own.
        (HttpResponse(599, b""), "error"),
    ],
)
async def test_an_error_answer_is_rejected_with_the_best_words_it_has(
    answer: HttpResponse, says: str
) -> None:
    async def refuse(request: HttpRequest) -> HttpResponse:
        return answer if request.body != b"fine" else HttpResponse(200, b"fine")

    async with open_http_server(refuse) as server, open_http_client(server.url) as stream:
        await stream.send(b"please")
        with anyio.fail_after(WITHIN), pytest.raises(FrameRejected) as rejected:
            await stream.receive()
        assert (rejected.value.status, rejected.value.message) == (answer.status, says)
        assert rejected.value.head == b"please"
        assert await round_trip(stream, b"fine") == b"fine"  # the stream carries on


async def test_an_error_answer_over_the_limit_names_the_request_not_the_page() -> None:
    async def huge_error(request: HttpRequest) -> HttpResponse:
        if request.body == b"small":
            return HttpResponse(200, b"small")
        return HttpResponse(500, b"x" * 100_000, content_type="text/plain")

    async with (
        open_http_server(huge_error) as server,
        open_http_client(server.url, max_frame_size=4096) as stream,
    ):
        await stream.send(b"the request")
        with anyio.fail_after(WITHIN), pytest.raises(FrameRejected) as rejected:
            await stream.receive()
        assert rejected.value.status == 500 and rejected.value.message == "Internal Server Error"
        assert rejected.value.head == b"the request"
        assert await round_trip(stream, b"small") == b"small"


def _chunked(pieces: list[bytes]) -> HttpResponse:
    async def write(send: Callable[[bytes], Any]) -> None:
        for piece in pieces:
            await send(piece)

    return HttpResponse(200, stream=write)


async def test_a_chunked_answer_is_one_frame_and_over_the_limit_too_large() -> None:
    async def chunked(request: HttpRequest) -> HttpResponse:
        if request.body == b"big":
            return _chunked([b'{"type":"response","id":"big",'] + [b"x" * 1024] * 8)
        return _chunked([b'{"type":"response",', b'"id":"small"}'])

    async with (
        open_http_server(chunked) as server,
        open_http_client(server.url, max_frame_size=4096) as stream,
    ):
        assert await round_trip(stream, b"small") == b'{"type":"response","id":"small"}'
        await stream.send(b"big")
        with anyio.fail_after(WITHIN), pytest.raises(FrameTooLarge) as too_large:
            await stream.receive()
        assert too_large.value.limit == 4096 and too_large.value.size > 4096
        assert too_large.value.head.startswith(b'{"type":"response","id":"big",')


async def test_posts_lost_together_end_the_stream_once() -> None:
    """Two POSTs in flight on two connections the server drops: the stream ends with the
    first loss, and the second adds no second error behind it."""
    async with (
        scripted_server(lambda conn, n: "read_then_close") as server,
        open_http_client(server.url) as stream,
    ):
        await stream.send_many([b"one", b"two"])
        with anyio.fail_after(WITHIN):
            for _ in range(2):
                await server.closes.receive()  # both read, both dropped
        with anyio.fail_after(WITHIN), pytest.raises(TransportClosed) as first:
            await stream.receive()
        with pytest.raises(TransportClosed) as again:
            await stream.receive()
        assert again.value is first.value
        assert sorted(server.bodies) == [b"one", b"two"]


async def test_a_closed_stream_says_closed_to_receive_and_send() -> None:
    async with open_http_server(Recorder()) as server, open_http_client(server.url) as stream:
        await stream.aclose()
        with pytest.raises(TransportClosed, match="closed"):
            await stream.receive()
        with pytest.raises(TransportClosed, match="closed"):
            await stream.send(b"too late")


async def test_max_connections_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_connections must be at least 1, not 0"):
        async with open_http_client("http://127.0.0.1:1", max_connections=0):
            pass
