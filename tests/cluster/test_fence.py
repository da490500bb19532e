"""Rooms across three real daemons while a fault hits them, checked as histories.

Each scenario drives a room on ``mesh serve --nats`` processes and one
nats-server while it injects its fault (a person taking part through a daemon
that does not run the room; the holder cut off from NATS through a proxy the
test controls), then reads the room's whole stream and every observer's view and
checks them with :func:`~tests.cluster._history.check_history`. The last one
calls a daemon's agent from everywhere while that daemon is stopped gracefully.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from mesh.rooms import AgentJoinedEvent, DeltaEvent, MessageEvent, ResumedEvent, decode_live_event
from mesh.testing import Daemon, EchoServer, NatsServer, spawn_echo_server, spawn_nats_server
from tests.cluster._history import (
    GUARD,
    check_history,
    observe,
    open_daemons,
    open_nats_cut,
    read_stream,
)
from tests.integration.test_daemon_auth import create_token

#: Three daemons, NATS and their personas as processes: 10-25 s each alone, more under load.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
async def nats() -> AsyncIterator[NatsServer]:
    async with spawn_nats_server() as server:
        yield server


async def post(daemon: Daemon, path: str, body: dict[str, object]) -> httpx.Response:
    async with daemon.client(timeout=GUARD) as http:
        return await http.post(path, json=body)


async def person_elsewhere(tmp_path: Path, nats: NatsServer) -> None:
    """Carol joins, passes, speaks and leaves through daemon B while daemon A runs the room."""
    urls = {d: nats.url for d in "abc"}
    agents = {"a": ["alice"], "c": ["bob"]}
    async with open_daemons(tmp_path, urls, agents) as daemons:
        a, b = daemons["a"], daemons["b"]
        await a.wait_online("alice", "bob", timeout=GUARD)
        await b.wait_online("alice", "bob", timeout=GUARD)
        spec: dict[str, object] = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
        # The room runs until the test stops it: it must still run when Carol's join reaches
        # it through B, however loaded the machine.
        spec["limits"] = {"max_turns": 400}
        # her turn moves on only when she acts; any client of A may join
        spec["people"] = {"turn_timeout": 600, "join": "clients"}
        created = await post(a, "/rooms", spec)
        guest_on_a = await create_token(a, "client", "guest")
        async with b.client() as http:
            b_admin = (await http.get("/whoami")).json()
        assert created.status_code == 201, created.text
        async with anyio.create_task_group() as tg:
            views = [await tg.start(observe, d, name, "tea") for name, d in daemons.items()]
            on_a, on_b = views[0], views[1]
            await on_a.wait_for(lambda e: isinstance(e, MessageEvent) and e.turn >= 2)
            turns: list[int] = []

            async def her_turn(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                turns.append(await wait_turn_of(a, "tea", "carol", task_status=task_status))

            async with anyio.create_task_group() as waiting:
                await waiting.start(her_turn)
                joined = await post(b, "/rooms/tea/join", {"name": "Carol"})
            [opened] = turns
            await on_b.wait_for(lambda e: isinstance(e, AgentJoinedEvent) and e.agent_id == "carol")
            # B's admin holds her seat, on A too: A's client may not speak as her.
            async with a.client(token=guest_on_a, timeout=GUARD) as http:
                posed = await http.post("/rooms/tea/say", json={"member": "carol", "text": "me"})
            assert posed.status_code == 403, posed.text
            # Her turn opened on A (an empty piece); she passes it through B, and A goes on.
            passed = await post(b, "/rooms/tea/say", {"member": "carol", "pass": True})
            assert passed.status_code == 200, passed.text
            await on_a.wait_for(
                lambda e: isinstance(e, MessageEvent) and e.seq > opened and e.agent_id != "carol"
            )
            said = await post(b, "/rooms/tea/say", {"member": "carol", "text": "milk first"})
            if said.is_success:
                await on_b.wait_for(lambda e: isinstance(e, MessageEvent) and e.agent_id == "carol")
            left = await post(b, "/rooms/tea/leave", {"member": "carol"})
            # A's admin owns the room: B's admin is an admin on B only, and A refuses its stop.
            refused = await post(b, "/rooms/tea/stop", {})
            stopped = await post(a, "/rooms/tea/stop", {})
            for view in views:
                await view.wait_stopped()
    stream = await read_stream(nats.url, "tea")
    check_history(stream, views)
    assert joined.status_code == 200, joined.text
    assert said.status_code in (200, 202), said.text
    assert left.status_code == 204, left.text
    assert refused.status_code == 403, refused.text
    assert "belongs to another daemon" in refused.text, refused.text
    assert stopped.status_code == 200, stopped.text
    assert {r.writer for r in stream} == {"a"}  # only the holder recorded
    joins = [r.event for r in stream if isinstance(r.event, AgentJoinedEvent)]
    assert joins[-1].agent_id == "carol"
    assert joins[-1].holder == f"token:{b_admin['id']}@b", joins[-1]  # an admin's seat too
    assert joins[-1].by == b_admin["name"], joins[-1]


async def wait_turn_of(
    daemon: Daemon, room_id: str, member: str, *, task_status: anyio.abc.TaskStatus[None]
) -> int:
    """The last recorded seq when ``member``'s turn opened on ``daemon`` (its empty piece),
    watched from when this task has started."""
    with anyio.fail_after(GUARD):
        async with daemon.open_events(f"/rooms/{room_id}/events?deltas=1") as watch:
            task_status.started()
            while True:
                event = decode_live_event(await watch.receive())
                if isinstance(event, DeltaEvent) and event.agent_id == member and not event.text:
                    return event.seq


async def holder_cut_off(tmp_path: Path, nats: NatsServer) -> None:
    """Daemon A runs a room waiting for a person's turn when it is cut off from NATS; its
    members, on B and C, go offline there; B or C takes the room over; A comes back."""
    async with open_nats_cut(nats.port) as proxy:
        urls = {"a": proxy.url, "b": nats.url, "c": nats.url}
        agents = {"b": ["alice"], "c": ["bob"]}
        async with open_daemons(tmp_path, urls, agents) as daemons:
            a = daemons["a"]
            await a.wait_online("alice", "bob", timeout=GUARD)
            spec: dict[str, object] = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
            spec["limits"] = {"max_turns": 8}
            created = await post(a, "/rooms", spec)
            assert created.status_code == 201, created.text
            joined = await post(a, "/rooms/tea/join", {"name": "Carol"})
            assert joined.status_code == 200, joined.text
            async with anyio.create_task_group() as tg:
                views = [await tg.start(observe, d, name, "tea") for name, d in daemons.items()]
                on_a, on_b = views[0], views[1]
                # turn 3 is Carol's: A waits for her, recording nothing, when it is cut off
                await on_a.wait_for(lambda e: isinstance(e, MessageEvent) and e.turn >= 2)
                proxy.cut()
                await on_b.wait_for(lambda e: isinstance(e, ResumedEvent))
                await on_b.wait_stopped()
                proxy.heal()
                for view in views:
                    await view.wait_stopped()
            assert a.process.returncode is None, "the cut-off daemon crashed"
            async with a.client() as http:
                assert (await http.get("/health")).status_code == 200
    stream = await read_stream(nats.url, "tea")
    check_history(stream, views)
    assert {r.writer for r in stream} >= {"a"} and len({r.writer for r in stream}) == 2


async def holder_paused(tmp_path: Path, nats: NatsServer) -> None:
    """Daemon A runs a room when it is paused (SIGSTOP) past its lease; B or C takes the
    room over and records turns; A wakes up with a turn or a renewal in flight."""
    agents = {"b": ["alice"], "c": ["bob"]}
    async with open_daemons(tmp_path, {d: nats.url for d in "abc"}, agents) as daemons:
        a = daemons["a"]
        await a.wait_online("alice", "bob", timeout=GUARD)
        spec: dict[str, object] = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
        spec["limits"] = {"max_turns": 14}
        created = await post(a, "/rooms", spec)
        assert created.status_code == 201, created.text
        async with anyio.create_task_group() as tg:
            views = [await tg.start(observe, d, name, "tea") for name, d in daemons.items()]
            on_a, on_b = views[0], views[1]
            await on_a.wait_for(lambda e: isinstance(e, MessageEvent) and e.turn >= 2)
            a.process.send_signal(signal.SIGSTOP)
            try:
                resumed = await on_b.wait_for(lambda e: isinstance(e, ResumedEvent))
                await on_b.wait_for(lambda e: e.seq > resumed.seq + 1)  # it took turns
            finally:
                a.process.send_signal(signal.SIGCONT)
            for view in views:
                await view.wait_stopped()
        assert a.process.returncode is None, "the paused daemon crashed"
    check_history(await read_stream(nats.url, "tea"), views)


async def test_a_person_joins_speaks_and_leaves_through_a_daemon_that_does_not_run_the_room(
    tmp_path: Path, nats: NatsServer
) -> None:
    await person_elsewhere(tmp_path, nats)


async def test_a_holder_cut_off_from_nats_loses_its_room_not_its_process(
    tmp_path: Path, nats: NatsServer
) -> None:
    await holder_cut_off(tmp_path, nats)


#: How often the stopping daemon is dialled while it drains: what is checked is the answer
#: each new connection gets (200 or 503, then refused), not how many fit in the drain; back
#: to back, each on a client of its own, some fifty kept a core busy for the whole drain.
PROBE_PACE = 0.05


def echo_manifest(agent_id: str, echo: EchoServer) -> str:
    return (
        f'id = "{agent_id}"\nheartbeat_interval = 1.0\nheartbeat_ttl = 3.0\n'
        f'[transport]\ntype = "http"\nendpoint = "{echo.http}"\n'
    )


async def echo_call(
    daemon: Daemon,
    tool: str = "echo",
    *,
    http: httpx.AsyncClient | None = None,
    **arguments: object,
) -> httpx.Response:
    """A call to ``echo-a`` through ``daemon``, on a connection of its own (or ``http``'s)."""
    body = {
        "agent": "echo-a",
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments or {"message": "still there?"}},
        "timeout": 20,
    }
    if http is not None:
        return await http.post("/rpc", json=body)
    return await post(daemon, "/rpc", body)


async def wait_call_in_flight(daemon: Daemon) -> None:
    with anyio.fail_after(GUARD):
        async with daemon.client() as http:
            while not (await http.get("/health")).json()["calls_in_flight"]:
                pass  # each look is a round trip to the daemon


async def test_sigterm_withdraws_and_answers_503_before_the_port_closes(
    tmp_path: Path, nats: NatsServer
) -> None:
    """A stops while a slow call runs on it: C's calls to A's agent keep working until C
    sees the agent gone (404), and new connections to A get 503 until its port closes."""
    slow: list[httpx.Response] = []
    through_c: list[httpx.Response] = []
    to_a: list[str] = []
    async with spawn_echo_server() as echo:
        files = {"a": {"echo-a.toml": echo_manifest("echo-a", echo)}}
        async with open_daemons(tmp_path, {"a": nats.url, "c": nats.url}, files=files) as daemons:
            a, c = daemons["a"], daemons["c"]
            await c.wait_online("echo-a", timeout=GUARD)

            async def slow_call() -> None:  # A drains it before it closes its port
                slow.append(await echo_call(a, "sleep", seconds=3))

            async def call_through_c() -> None:  # until C no longer knows the agent
                while not through_c or through_c[-1].status_code != 404:
                    through_c.append(await echo_call(c))

            async def call_a() -> None:  # new connections to A, until it stops listening
                # One client that keeps no connection: each call is a new connection to A.
                fresh = httpx.Limits(max_keepalive_connections=0)
                async with httpx.AsyncClient(
                    base_url=a.http, headers=a.headers, timeout=GUARD, limits=fresh
                ) as http:
                    while True:
                        next_call = anyio.current_time() + PROBE_PACE
                        try:
                            to_a.append(str((await echo_call(a, http=http)).status_code))
                        except httpx.ConnectError:
                            to_a.append("refused")
                            return
                        except httpx.TransportError as exc:
                            to_a.append(f"cut: {exc!r}")
                            return
                        await anyio.sleep_until(next_call)

            with anyio.fail_after(GUARD):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow_call)
                    await wait_call_in_flight(a)
                    a.process.send_signal(signal.SIGTERM)
                    tg.start_soon(call_through_c)
                    tg.start_soon(call_a)
                await a.process.wait()
            assert a.process.returncode == 0
    assert slow[0].status_code == 200, slow[0].text
    failed = [r.text for r in through_c if r.status_code not in (200, 404)]
    assert not failed, f"calls through C failed while A stopped: {failed}"
    assert through_c[-1].status_code == 404
    # every new connection was answered, 503 while A drained, until its port closed (one
    # that reached the kernel's backlog just then is reset: no process can answer it)
    assert "503" in to_a and set(to_a[:-1]) <= {"200", "503"}, to_a
    assert to_a[-1] == "refused" or to_a[-1].startswith("cut"), to_a


async def test_a_holder_paused_past_its_lease_records_nothing_over_the_new_holder(
    tmp_path: Path, nats: NatsServer
) -> None:
    await holder_paused(tmp_path, nats)
