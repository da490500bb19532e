"""Reconnect, in-process: an echo agent behind a memory "server" we can refuse, stop and kill.

Backoff is 10 ms here, so every test runs in well under a second; nothing sleeps to
wait for a condition: tests wait on connection events, guarded by ``fail_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
from structlog.testing import capture_logs

from mesh import (
    CallTimeout,
    ConnectFailed,
    ConnectionEvent,
    ConnectionLost,
    Peer,
    ReconnectingPeer,
    ReconnectPolicy,
    Unauthorized,
    open_reconnecting_peer,
    serve_peer,
)
from mesh.agents.echo import agent as echo_agent
from transports import FrameStream, MemoryFrameStream, TransportClosed, memory_stream_pair

pytestmark = pytest.mark.anyio

FAST = ReconnectPolicy(base=0.01, cap=0.05)
#: Generous for in-process work; a hang fails here instead of at the suite's timeout.
GUARD = 5.0


class MemoryServer:
    """Serves the echo agent to every dial; can refuse dials, hang them, stop, and kill links."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._links: list[MemoryFrameStream] = []
        self.refuse = 0  # the next N dials fail
        self.down = False  # every dial fails until start()
        self.hang = False  # dials never complete
        self.refusal: BaseException | None = None  # every dial fails with this
        self.dials = 0

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[FrameStream]:
        self.dials += 1
        if self.hang:
            await anyio.sleep_forever()
        if self.refusal is not None:
            raise self.refusal
        if self.down or self.refuse:
            self.refuse = max(0, self.refuse - 1)
            raise TransportClosed(f"connection refused (dial {self.dials})")
        client, server = memory_stream_pair()
        self._links.append(server)
        self._tg.start_soon(serve_peer, server, echo_agent)
        try:
            yield client
        finally:
            await client.aclose()

    async def kill(self) -> None:
        """Drop every live link from the server's side, as a crashed server would."""
        links, self._links = self._links, []
        for link in links:
            await link.aclose()

    async def stop(self) -> None:
        self.down = True
        await self.kill()

    def start(self) -> None:
        self.down = False


class ClosesWith:
    """A stream whose other side closes at once with a given reason (e.g. a close code)."""

    def __init__(self, inner: MemoryFrameStream, closed: TransportClosed) -> None:
        self._inner = inner
        self._closed = closed
        self.info = inner.info
        self.max_frame_size = inner.max_frame_size

    async def send(self, frame: bytes) -> None:
        await self._inner.send(frame)

    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self._inner.send_many(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        return self._inner.send_nowait(frames)

    async def receive(self) -> bytes:
        raise self._closed

    async def aclose(self) -> None:
        await self._inner.aclose()


class EventLog:
    """An ``on_event`` callback that tests can wait on."""

    def __init__(self) -> None:
        self.events: list[ConnectionEvent] = []
        self._changed = anyio.Event()

    def __call__(self, event: ConnectionEvent) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    async def wait_for(self, kind: str, count: int = 1) -> ConnectionEvent:
        while True:
            matching = [event for event in self.events if event.kind == kind]
            if len(matching) >= count:
                return matching[count - 1]
            await self._changed.wait()


@pytest.fixture
async def server() -> AsyncIterator[MemoryServer]:
    async with anyio.create_task_group() as tg:
        yield MemoryServer(tg)
        tg.cancel_scope.cancel()


def opener(server: MemoryServer, events: EventLog, **kwargs: Any) -> Callable[[], Any]:
    kwargs.setdefault("policy", FAST)
    return lambda: open_reconnecting_peer(server.connect, agent="echo", on_event=events, **kwargs)


async def echo(peer: ReconnectingPeer | Peer, message: str, **kwargs: Any) -> Any:
    result = await peer.call_tool("echo", {"message": message}, **kwargs)
    return result["message"]


async def test_server_dies_and_the_client_reconnects_by_itself(server: MemoryServer) -> None:
    events = EventLog()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            assert peer.connected and peer.state == "connected"
            assert await echo(peer, "before") == "before"
            await server.kill()
            await events.wait_for("disconnected")
            assert await echo(peer, "after") == "after"
            assert peer.connected and peer.attempt == 0
            assert peer.statistics().calls_succeeded >= 2
    assert events.kinds[:4] == ["connected", "disconnected", "reconnecting", "connected"]
    assert events.kinds[-1] == "closed"
    reason = events.events[1].error
    assert isinstance(reason, ConnectionLost) and "closed the in-memory link" in str(reason)
    assert events.events[2].delay is not None and 0 <= events.events[2].delay < 0.01


async def test_the_server_stopped_and_restarted_mid_session(server: MemoryServer) -> None:
    events = EventLog()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            await server.stop()
            await events.wait_for("reconnecting", count=3)  # it keeps trying while down
            assert not peer.connected and peer.state == "reconnecting" and peer.attempt >= 2
            server.start()
            await peer.wait_connected()
            assert await echo(peer, "back") == "back"
    connected = [event for event in events.events if event.kind == "connected"]
    assert connected[-1].attempt >= 3


async def test_on_connect_runs_on_every_connect_before_calls_are_routed(
    server: MemoryServer,
) -> None:
    events = EventLog()
    hooked: list[str] = []
    in_third_hook = anyio.Event()
    release = anyio.Event()

    async def on_connect(peer: Peer) -> None:
        # Re-registration goes over the peer it is given; the wrapper is not routing yet.
        hooked.append(await echo(peer, f"register {len(hooked) + 1}"))
        if len(hooked) == 3:
            in_third_hook.set()
            await release.wait()

    outcome: list[str] = []

    async def call() -> None:
        outcome.append(await echo(peer, "after the hook"))

    with anyio.fail_after(GUARD):
        async with opener(server, events, on_connect=on_connect)() as peer:
            await server.kill()
            await events.wait_for("connected", count=2)
            await server.kill()
            await in_third_hook.wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()
                assert not peer.connected and outcome == []  # held until the hook is done
                release.set()
            assert outcome == ["after the hook"]
    assert hooked == ["register 1", "register 2", "register 3"]
    assert events.kinds.count("connected") == 3


async def test_a_call_made_while_disconnected_waits_or_fails_at_once(
    server: MemoryServer,
) -> None:
    events = EventLog()
    order: list[str] = []

    def on_event(event: ConnectionEvent) -> None:
        events(event)
        order.append(event.kind)

    async def waiting_call() -> None:
        order.append("call started")
        order.append(await echo(peer, "waited"))

    with anyio.fail_after(GUARD):
        async with open_reconnecting_peer(
            server.connect, agent="echo", policy=FAST, on_event=on_event
        ) as peer:
            await server.stop()
            await events.wait_for("reconnecting")
            with pytest.raises(ConnectionLost, match="chose not to wait") as caught:
                await echo(peer, "now or never", wait_for_connection=False)
            assert caught.value.method == "tools/call" and caught.value.agent == "echo"
            with pytest.raises(ConnectionLost):
                peer.notify_nowait("hello")
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting_call)
                await anyio.wait_all_tasks_blocked()
                assert "waited" not in order
                server.start()
    reconnected = order.index("connected", order.index("call started"))
    assert order.index("waited") > reconnected


async def test_the_per_peer_default_can_be_fail_fast(server: MemoryServer) -> None:
    events = EventLog()
    policy = ReconnectPolicy(base=0.01, cap=0.05, wait_for_connection=False)
    with anyio.fail_after(GUARD):
        async with opener(server, events, policy=policy)() as peer:
            await server.stop()
            await events.wait_for("reconnecting")
            with pytest.raises(ConnectionLost, match="chose not to wait"):
                await peer.ping()
            server.start()
            await peer.wait_connected()
            answered = peer.statistics().calls_succeeded
            await peer.ping()  # over the new connection, without waiting: it is up
            assert peer.statistics().calls_succeeded == answered + 1
            await server.stop()
            await events.wait_for("reconnecting", count=2)
            server.start()
            # ... and a call may still choose to wait.
            assert await echo(peer, "patient", wait_for_connection=True) == "patient"


async def test_a_call_that_waits_past_its_deadline_times_out(server: MemoryServer) -> None:
    events = EventLog()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            await server.stop()
            await events.wait_for("disconnected")
            # The message says which wait ended it; GUARD (5 s), far below the default
            # 30 s call timeout, stands in for the "it did not wait longer" bound.
            with pytest.raises(CallTimeout, match=r"not connected within the call's 0\.05 s"):
                await echo(peer, "too late", timeout=0.05)
            assert not peer.closed  # the call gave up; the connection did not


async def test_giving_up_fails_waiters_and_new_calls_and_says_so(server: MemoryServer) -> None:
    events = EventLog()
    policy = ReconnectPolicy(base=0.01, cap=0.05, max_attempts=3)
    failures: list[BaseException] = []

    async def waiter() -> None:
        try:
            await echo(peer, "never", timeout=30)
        except ConnectionLost as exc:
            failures.append(exc)

    with capture_logs() as logs, anyio.fail_after(GUARD):
        async with opener(server, events, policy=policy)() as peer:
            await server.stop()
            await events.wait_for("disconnected")
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await events.wait_for("gave_up")
            assert peer.closed and peer.state == "gave_up" and not peer.connected
            await peer.wait_closed()  # returns at once: it will never connect again
            with pytest.raises(ConnectionLost, match="gave up reconnecting") as new_call:
                await echo(peer, "still there?")
            with pytest.raises(ConnectionLost, match="gave up reconnecting"):
                await peer.wait_connected()
    expected = "gave up reconnecting to agent 'echo' after 3 attempts: connection refused (dial 4)"
    assert [str(exc) for exc in failures] == [expected + " (method 'tools/call')"]
    assert new_call.value.message == expected
    # The transport's error is translated (mesh._rpc.boundary) and chained, not lost.
    assert isinstance(new_call.value.__cause__, ConnectFailed)
    assert isinstance(new_call.value.__cause__.__cause__, TransportClosed)
    gave_up = await events.wait_for("gave_up")
    assert gave_up.attempt == 3 and isinstance(gave_up.error, ConnectionLost)
    assert server.dials == 4  # the first connection, then three failed attempts
    assert events.kinds.count("reconnecting") == 3
    [line] = [entry for entry in logs if entry["event"] == "mesh.connection_gave_up"]
    assert line["log_level"] == "warning" and line["agent"] == "echo" and line["attempt"] == 3
    assert "connection refused" in line["error"]


async def test_the_first_connect_retries_per_policy(server: MemoryServer) -> None:
    events = EventLog()
    server.refuse = 2
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            assert peer.connected
    assert events.kinds[:3] == ["reconnecting", "reconnecting", "connected"]
    assert events.events[2].attempt == 3 and server.dials == 3


async def test_without_initial_retries_the_open_raises_at_once(server: MemoryServer) -> None:
    events = EventLog()
    server.refuse = 1
    policy = ReconnectPolicy(base=0.01, retry_initial_connect=False)
    with anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with opener(server, events, policy=policy)():
            pytest.fail("should not connect")
    assert str(caught.value) == (
        "gave up connecting to agent 'echo' after 1 attempt: connection refused (dial 1)"
    )
    assert events.kinds == ["gave_up", "closed"] and server.dials == 1


async def test_a_refused_dial_is_never_retried(server: MemoryServer) -> None:
    events = EventLog()
    refusal = Unauthorized("token refused")
    refusal.close_code = 4001
    server.refusal = refusal
    with anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with opener(server, events)():  # the policy would retry for ever
            pytest.fail("should not connect")
    assert server.dials == 1 and events.kinds == ["gave_up", "closed"]
    assert str(caught.value).startswith(
        "gave up connecting to agent 'echo' after 1 attempt, refused: "
    )
    assert caught.value.__cause__ is refusal


async def test_a_link_closed_with_a_refusal_code_is_not_redialled() -> None:
    dials = 0

    @asynccontextmanager
    async def closed_with_4003() -> AsyncIterator[FrameStream]:
        nonlocal dials
        dials += 1
        client, server = memory_stream_pair()
        closed = TransportClosed("closed with code 4003: impostor", close_code=4003)
        try:
            yield ClosesWith(client, closed)
        finally:
            await server.aclose()

    events = EventLog()
    connect = open_reconnecting_peer(closed_with_4003, agent="echo", on_event=events, policy=FAST)
    with anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with connect:
            pytest.fail("should not connect")
    assert dials == 1 and events.kinds == ["gave_up", "closed"]
    assert "refused" in str(caught.value) and "4003" in str(caught.value)


async def test_a_dial_that_hangs_is_bounded_by_the_connect_timeout(server: MemoryServer) -> None:
    events = EventLog()
    server.hang = True
    policy = ReconnectPolicy(base=0.01, max_attempts=2)
    with (
        anyio.fail_after(GUARD),
        pytest.raises(ConnectionLost, match=r"not connected within 0\.05 s"),
    ):
        async with opener(server, events, policy=policy, connect_timeout=0.05)():
            pytest.fail("should not connect")
    assert server.dials == 2


async def test_aclose_during_backoff_returns_promptly(server: MemoryServer) -> None:
    events = EventLog()
    slow = ReconnectPolicy(base=60.0, cap=60.0, random=lambda: 0.999)
    with anyio.fail_after(GUARD):
        async with opener(server, events, policy=slow)() as peer:
            await server.kill()
            backing_off = await events.wait_for("reconnecting")
            assert backing_off.delay is not None and backing_off.delay > 50
            await peer.aclose()  # within GUARD (5 s): it did not sit out the 50 s delay
            assert peer.closed and peer.state == "closed"
            with pytest.raises(ConnectionLost, match="closed locally"):
                await echo(peer, "gone")
            await peer.aclose()  # twice is fine
    assert events.kinds[-1] == "closed" and events.kinds.count("closed") == 1


async def test_leaving_the_block_while_connected_ends_everything(server: MemoryServer) -> None:
    events = EventLog()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            assert await echo(peer, "x") == "x"
    assert peer.closed and not peer.connected
    assert events.kinds == ["connected", "closed"]  # no "disconnected" for a local close


async def test_calls_in_flight_when_the_link_drops_fail_at_once_and_are_not_resent(
    server: MemoryServer,
) -> None:
    events = EventLog()
    busy = anyio.Event()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:

            async def kill_when_busy() -> None:
                await busy.wait()
                await server.kill()

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_when_busy)
                with pytest.raises(ConnectionLost, match="closed the in-memory link") as caught:
                    await peer.call_tool(
                        "sleep",
                        {"seconds": 60, "progress_every": 0.01},
                        on_progress=lambda _: busy.set(),
                    )
            assert caught.value.method is not None and "sleep" in caught.value.method
            await peer.wait_connected()
            # Two handshakes and the one sleep: the sleep was not sent again.
            stats = peer.statistics()
            assert (stats.calls_started, stats.calls_failed, stats.calls_in_flight) == (3, 1, 0)


async def test_an_observer_that_raises_does_not_break_the_connection(
    server: MemoryServer,
) -> None:
    events = EventLog()

    def broken(event: ConnectionEvent) -> None:
        events(event)
        raise RuntimeError("observer bug")

    with capture_logs() as logs, anyio.fail_after(GUARD):
        async with open_reconnecting_peer(
            server.connect, agent="echo", policy=FAST, on_event=broken
        ) as peer:
            await server.kill()
            await events.wait_for("disconnected")
            assert await echo(peer, "fine") == "fine"
    assert any(entry["event"] == "mesh.connection_event_handler_crashed" for entry in logs)


async def test_list_tools_and_notify_go_through_the_current_connection(
    server: MemoryServer,
) -> None:
    events = EventLog()
    with anyio.fail_after(GUARD):
        async with opener(server, events)() as peer:
            await server.kill()
            await events.wait_for("disconnected")
            await peer.notify("echo/hello", {"n": 1})  # waits for the connection, then sends
            assert peer.connected
            names = {tool["name"] for tool in await peer.list_tools()}
            assert {"echo", "sleep"} <= names
            assert peer.agent == "echo"


async def test_closing_from_the_hook_stops_the_loop_without_hanging(server: MemoryServer) -> None:
    events = EventLog()
    opened: list[ReconnectingPeer] = []

    async def on_connect(peer: Peer) -> None:
        if opened:  # on the reconnection only
            await opened[0].aclose()

    with anyio.fail_after(GUARD):
        async with opener(server, events, on_connect=on_connect)() as peer:
            opened.append(peer)
            await server.kill()
            await events.wait_for("closed")
            assert peer.closed and peer.state == "closed" and not peer.connected
            with pytest.raises(ConnectionLost, match="closed locally"):
                await peer.wait_connected()
    assert events.kinds == ["connected", "disconnected", "reconnecting", "closed"]


async def test_peers_sharing_an_admission_limiter_take_turns_to_connect() -> None:
    """A hundred agents started at once must not each miss a deadline any one would meet."""
    gate = anyio.Event()
    first_dial = anyio.Event()
    dials: list[int] = []
    limiter = anyio.CapacityLimiter(1)
    answered: list[float] = []
    async with anyio.create_task_group() as tg:

        @asynccontextmanager
        async def connector() -> AsyncIterator[FrameStream]:
            dials.append(len(dials))
            first_dial.set()
            await gate.wait()  # a slow start: the process is still importing
            client, server = memory_stream_pair()
            tg.start_soon(serve_peer, server, echo_agent)
            yield client
            await client.aclose()

        async def one() -> None:
            async with open_reconnecting_peer(
                connector, agent="slow", policy=FAST, admission=limiter, connect_timeout=GUARD
            ) as peer:
                answered.append(await peer.ping())

        with anyio.fail_after(GUARD):
            tg.start_soon(one)
            await first_dial.wait()
            tg.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            assert dials == [0], "the second waits for admission; it has not dialled"
            assert limiter.statistics().tasks_waiting == 1
            gate.set()
    assert dials == [0, 1] and len(answered) == 2


# -- what is worth another attempt (ReconnectPolicy.process_exception) ------------------------


async def test_a_hook_with_a_bug_gives_up_at_once_and_names_the_bug(server: MemoryServer) -> None:
    events = EventLog()

    async def on_connect(peer: Peer) -> None:
        raise TypeError("register() missing 1 required positional argument: 'peer'")

    with capture_logs() as logs, anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with opener(server, events, on_connect=on_connect)():  # would retry for ever
            pytest.fail("should not connect")
    assert server.dials == 1 and events.kinds == ["gave_up", "closed"]
    assert str(caught.value) == (
        "gave up connecting to agent 'echo' after 1 attempt, not a network error: "
        "TypeError: register() missing 1 required positional argument: 'peer'"
    )
    assert type(caught.value.__cause__) is TypeError  # the bug itself, not a group around it
    [line] = [entry for entry in logs if entry["event"] == "mesh.connection_gave_up"]
    assert "TypeError: register() missing" in line["error"]
    assert not [entry for entry in logs if "ExceptionGroup" in str(entry)]


async def test_a_bug_wrapped_in_a_task_group_is_seen_for_what_it_is() -> None:
    dials = 0

    @asynccontextmanager
    async def connector() -> AsyncIterator[FrameStream]:
        nonlocal dials
        dials += 1
        async with anyio.create_task_group():  # a connector of its own: anyio wraps the error
            raise KeyError("token")
        yield memory_stream_pair()[0]  # pragma: no cover - never reached

    events = EventLog()
    opening = open_reconnecting_peer(connector, agent="echo", on_event=events, policy=FAST)
    with anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with opening:
            pytest.fail("should not connect")
    assert dials == 1 and "not a network error: KeyError: 'token'" in str(caught.value)
    assert type(caught.value.__cause__) is KeyError


async def test_a_hook_that_breaks_on_a_reconnect_stops_there(server: MemoryServer) -> None:
    events = EventLog()
    hooked = 0

    async def on_connect(peer: Peer) -> None:
        nonlocal hooked
        hooked += 1
        if hooked == 2:
            raise AttributeError("'NoneType' object has no attribute 'register'")

    with anyio.fail_after(GUARD):
        async with opener(server, events, on_connect=on_connect)() as peer:
            await server.kill()
            gave_up = await events.wait_for("gave_up")
            with pytest.raises(ConnectionLost, match="not a network error: AttributeError"):
                await echo(peer, "still there?")
    assert hooked == 2 and server.dials == 2
    assert events.kinds == ["connected", "disconnected", "reconnecting", "gave_up", "closed"]
    assert "gave up reconnecting" in str(gave_up.error)


async def test_a_network_error_in_a_task_group_is_still_retried() -> None:
    dials = 0

    @asynccontextmanager
    async def connector() -> AsyncIterator[FrameStream]:
        nonlocal dials
        dials += 1
        if dials == 1:
            async with anyio.create_task_group():
                raise ConnectionResetError("reset by peer")
        client, server = memory_stream_pair()
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, server, echo_agent)
            yield client
            await client.aclose()

    events = EventLog()
    with anyio.fail_after(GUARD):
        async with open_reconnecting_peer(
            connector, agent="echo", on_event=events, policy=FAST
        ) as peer:
            assert await echo(peer, "hi") == "hi"
    assert dials == 2 and events.kinds[:2] == ["reconnecting", "connected"]
    assert "reset by peer" in str(events.events[0].error)


async def test_the_policy_can_say_what_is_final(server: MemoryServer) -> None:
    events = EventLog()
    server.refuse = 1

    def process_exception(exc: Exception) -> Exception | None:
        return exc if isinstance(exc, ConnectFailed) else None  # this server never comes back

    policy = ReconnectPolicy(base=0.01, process_exception=process_exception)
    with anyio.fail_after(GUARD), pytest.raises(ConnectionLost) as caught:
        async with opener(server, events, policy=policy)():
            pytest.fail("should not connect")
    assert server.dials == 1 and isinstance(caught.value.__cause__, ConnectFailed)


def test_the_default_classifier_retries_the_network_and_stops_on_bugs_and_refusals() -> None:
    classify = ReconnectPolicy().classify
    for transient in (
        ConnectFailed("refused"),
        ConnectionLost("dropped"),
        CallTimeout("slow"),
        ConnectionResetError("reset"),
        TransportClosed("closed"),
        anyio.BrokenResourceError(),
        ExceptionGroup("two", [OSError("a"), ConnectFailed("b")]),
    ):
        assert classify(transient) is None, transient
    for final in (TypeError("bug"), KeyError("k"), Unauthorized("no"), RuntimeError("x")):
        assert classify(final) is final
    lost = ConnectionLost("closed with 4003")
    lost.close_code = 4003
    assert classify(lost) is lost
    bug = TypeError("bug")
    assert classify(ExceptionGroup("one", [ExceptionGroup("inner", [bug])])) is bug
    assert classify(ExceptionGroup("mixed", [OSError("net"), bug])) is bug
