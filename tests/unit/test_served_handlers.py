"""A request's handler that must wait runs in a task of its own; nothing outlives the link.

On asyncio that task is the loop's own (no task group, no cancel scope: docs/performance.md),
so these check by behaviour what the task group used to promise: a link that ends stops
and waits for its handlers, and a handler cancelled before its first step leaves nothing
behind (no entry held, no coroutine never awaited).
"""

from __future__ import annotations

import functools
import gc
import warnings

import anyio
import anyio.lowlevel
import msgspec
import pytest
from structlog.testing import capture_logs

from mesh import Agent, ConnectionLost, Peer, open_peer, serve_peer
from mesh._rpc import peer as peer_module
from mesh._rpc.session import Session, SessionConfig
from transports import memory_stream_pair

pytestmark = pytest.mark.anyio

QUIET = SessionConfig(heartbeat_interval=None)


def holding_agent() -> tuple[Agent, anyio.Event, anyio.Event, list[str]]:
    agent = Agent("holder")
    started, ended = anyio.Event(), anyio.Event()
    seen: list[str] = []

    @agent.tool
    async def hold() -> str:
        seen.append("started")
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append("ended")
            ended.set()
        return "never"

    @agent.tool
    def echo(text: str) -> str:
        return text

    return agent, started, ended, seen


async def test_a_link_that_ends_stops_its_handlers_and_waits_for_them() -> None:
    agent, started, _, seen = holding_agent()
    client, server = memory_stream_pair()
    when_served_returned: list[list[str]] = []
    failures: list[BaseException] = []

    async def serve() -> None:
        await serve_peer(server, agent, config=QUIET)
        when_served_returned.append(list(seen))

    async def call(peer: Peer) -> None:
        try:
            await peer.call_tool("hold")
        except ConnectionLost as exc:
            failures.append(exc)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            async with open_peer(client, config=QUIET) as peer:
                tg.start_soon(call, peer)
                await started.wait()
            # the client's side closed: the server's link ends with the handler running
    # serve_peer returned only once the handler's own cleanup had run
    assert when_served_returned == [["started", "ended"]]
    assert len(failures) == 1


async def test_a_handler_cancelled_before_its_first_step_leaves_nothing() -> None:
    agent, _, ended, seen = holding_agent()
    client, server = memory_stream_pair()
    caller = Session(now=0.0, config=QUIET)
    held = caller.send_request("tools/call", {"name": "hold", "arguments": {}}, now=0.0)
    caller.cancel_call(held)
    asked = caller.send_request(
        "tools/call", {"name": "echo", "arguments": {"text": "after"}}, now=0.0
    )
    # Queued before the server reads: its reader takes all three without yielding, so
    # the cancel reaches the held call's task before that task has run at all.
    assert client.send_nowait(caller.data_to_send())

    answers: list[dict[str, object]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(serve_peer, server, agent, config=QUIET))
                answers.append(msgspec.json.decode(await client.receive()))
                await ended.wait()  # the cancel stopped it, with the link still up
                await client.aclose()
        gc.collect()
    assert [answer["id"] for answer in answers] == [asked]
    assert answers[0]["payload"] == {"success": True, "result": "after"}
    # it started, and stopped at its first wait, as in a cancelled scope
    assert seen == ["started", "ended"]
    never_awaited = [w for w in caught if "never awaited" in str(w.message)]
    assert [str(w.message) for w in never_awaited] == []


async def test_a_handler_that_swallows_its_cancel_does_not_hold_the_close(
    monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    monkeypatch.setattr(peer_module, "STOP_HANDLERS_ON_CLOSE", 0.05)
    agent = Agent("stubborn")
    started, release = anyio.Event(), anyio.Event()

    @agent.tool
    async def stubborn() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except BaseException:
            # wrong, but it happens: on trio its scope cancels this wait too
            await release.wait()
        return "late"

    client, server = memory_stream_pair()
    with capture_logs() as logs, anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(serve_peer, server, agent, config=QUIET))
            async with open_peer(client, config=QUIET) as peer:
                tg.start_soon(functools.partial(peer.call_tool, "stubborn"))
                await started.wait()
                await server.aclose()  # serve_peer must return, stubborn or not
                tg.cancel_scope.cancel()
    release.set()
    ignored = [entry for entry in logs if entry["event"] == "mesh.handlers_ignored_cancel"]
    if anyio_backend == "asyncio":  # cancelled once, directly: it waits past the bound
        assert [entry["count"] for entry in ignored] == [1]
    else:
        assert ignored == []
    await anyio.lowlevel.checkpoint()  # its task, released, ends


async def test_a_link_cancelled_from_outside_leaves_as_one_cancellation() -> None:
    agent, started, _, seen = holding_agent()
    client, server = memory_stream_pair()
    caught: list[BaseException] = []

    async def serve() -> None:
        try:
            await serve_peer(server, agent, config=QUIET)
        except anyio.get_cancelled_exc_class() as exc:
            caught.append(exc)  # not a group of them: its reader, clock and handler's
            raise

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, open_peer(client, config=QUIET) as peer:
            tg.start_soon(serve)
            tg.start_soon(functools.partial(peer.call_tool, "hold"))
            await started.wait()
            tg.cancel_scope.cancel()
    assert len(caught) == 1
    assert seen == ["started", "ended"]
