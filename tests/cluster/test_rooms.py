"""Rooms shared by members of a cluster, in one process: any member reads, one runs, handover."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from mesh import AgentSpec, local_connector
from mesh.agents.persona import PersonaAgent
from mesh.cluster import ClusterError
from mesh.providers import ProviderConfig
from mesh.rooms import (
    Limits,
    MessageEvent,
    RoomId,
    RoomNotFound,
    RoomSpec,
    RoomStatus,
    StoppedEvent,
    role_persona,
)
from mesh.rooms._replica import RoomLeaseLost
from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster._helpers import SPREAD_TIMEOUT, open_member, wait_status

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nats() -> NatsServer:  # type: ignore[misc]
    async with spawn_nats_server() as server:
        yield server


def persona(agent_id: str, delay: float = 0.0) -> AgentSpec:
    lines = (f"{agent_id} says {{turn}}",)
    config = ProviderConfig(provider="scripted", script=lines, delay=delay)
    agent = PersonaAgent(agent_id, role_persona("participant", config), name=agent_id.title())
    return AgentSpec(agent_id, local_connector(agent), name=agent_id)


async def test_a_room_moves_to_another_member_when_its_holder_leaves(
    nats: NatsServer, tmp_path: Path
) -> None:
    spec = RoomSpec(id="tea", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=12))
    async with (
        open_member(nats.url, "a", [persona("alice", 0.05)], data_dir=tmp_path) as a,
        open_member(nats.url, "c", [persona("bob", 0.05)], data_dir=tmp_path) as c,
    ):
        assert a.rooms is not None and c.rooms is not None
        async with open_member(nats.url, "b", data_dir=tmp_path) as b:
            assert b.rooms is not None
            await wait_status(b.mesh.registry, "alice")
            await wait_status(b.mesh.registry, "bob")
            await b.rooms.create(spec)
            async with a.rooms.subscribe("tea") as events:  # a reads what b records
                with anyio.fail_after(SPREAD_TIMEOUT):
                    async for event in events:
                        if isinstance(event, MessageEvent) and event.turn >= 3:
                            break
        # b left (gracefully): a or c takes the room over and finishes it
        async with a.rooms.subscribe("tea", since=0) as events:
            with anyio.fail_after(SPREAD_TIMEOUT * 2):
                seen = [event async for event in events]
        assert isinstance(seen[-1], StoppedEvent), seen[-1]
        assert seen[-1].reason == "MAX_TURNS"
        turns = [e.turn for e in seen if isinstance(e, MessageEvent)]
        assert turns == list(range(1, 13))
        assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
        for member in (a, c):
            assert member.rooms is not None
            # Each member learns of the stop from the stream in its own time: wait until
            # its own observers have seen it (their subscription ends there), then look.
            async with member.rooms.subscribe("tea", since=len(seen) - 1) as tail:
                with anyio.fail_after(SPREAD_TIMEOUT):
                    assert [type(event) async for event in tail] == [StoppedEvent]
            snapshot = await member.rooms.get("tea")
            assert snapshot.status is RoomStatus.STOPPED
            transcript = await member.rooms.transcript("tea")
            assert [m.turn for m in transcript] == list(range(1, 13))
        texts = [msgspec.to_builtins(e)["type"] for e in seen]
        assert texts.count("RESUMED") == 1


async def test_pause_stop_and_resume_reach_the_daemon_that_runs_the_room(
    nats: NatsServer, tmp_path: Path
) -> None:
    # 400 turns of 0.05 s: the room must still run when c pauses it, however loaded the machine.
    spec = RoomSpec(id="long", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=400))
    async with (
        open_member(nats.url, "a", [persona("alice", 0.05)], data_dir=tmp_path) as a,
        open_member(nats.url, "b", [persona("bob", 0.05)], data_dir=tmp_path) as b,
        open_member(nats.url, "c", data_dir=tmp_path) as c,
    ):
        assert a.rooms is not None and b.rooms is not None and c.rooms is not None
        await wait_status(a.mesh.registry, "bob")
        await wait_status(b.mesh.registry, "alice")
        await a.rooms.create(spec)
        async with c.rooms.subscribe("long") as events:
            with anyio.fail_after(SPREAD_TIMEOUT):
                async for event in events:
                    if isinstance(event, MessageEvent) and event.turn >= 2:
                        break
        paused = await c.rooms.pause("long")  # c does not run it: a does, and pauses it
        assert paused.status is RoomStatus.PAUSED
        assert a.rooms.running_here() == [] and a.cluster.rooms is not None
        assert a.cluster.rooms.held() == []  # a paused room is nobody's
        resumed = await b.rooms.resume("long")  # any daemon may resume it: b runs it now
        assert resumed.status is RoomStatus.RUNNING and b.rooms.running_here() == ["long"]
        stopped = await c.rooms.stop("long")  # forwarded to b
        assert stopped.status is RoomStatus.STOPPED
        transcript = await a.rooms.transcript("long")
    turns = [m.turn for m in transcript]
    assert turns == list(range(1, len(turns) + 1)) and len(turns) >= 2


async def test_a_room_created_paused_is_nobodys_until_a_daemon_resumes_it(
    nats: NatsServer, tmp_path: Path
) -> None:
    spec = RoomSpec(
        id="tea", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=4), paused=True
    )
    async with (
        open_member(nats.url, "a", [persona("alice")], data_dir=tmp_path) as a,
        open_member(nats.url, "b", [persona("bob")], data_dir=tmp_path) as b,
    ):
        assert a.rooms is not None and b.rooms is not None and a.cluster.rooms is not None
        await wait_status(a.mesh.registry, "bob")
        await wait_status(b.mesh.registry, "alice")
        created = await a.rooms.create(spec)
        assert (created.status, created.current_turn) == (RoomStatus.PAUSED, 0)
        assert a.rooms.running_here() == [] and a.cluster.rooms.held() == []
        resumed = await b.rooms.resume("tea")  # not a's: any daemon may start it
        assert resumed.status is RoomStatus.RUNNING
        finished = await b.rooms.wait("tea")
        transcript = await b.rooms.transcript("tea")
    assert finished.stop_reason == "MAX_TURNS"
    assert [m.turn for m in transcript] == [1, 2, 3, 4]


async def test_a_room_deleted_on_one_daemon_is_gone_from_every_daemon_for_good(
    nats: NatsServer, tmp_path: Path
) -> None:
    spec = RoomSpec(id="tea", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=4))
    async with (
        open_member(nats.url, "a", [persona("alice")], data_dir=tmp_path) as a,
        open_member(nats.url, "b", [persona("bob")], data_dir=tmp_path) as b,
    ):
        assert a.rooms is not None and b.rooms is not None
        assert a.cluster.rooms is not None and b.cluster.rooms is not None
        await wait_status(a.mesh.registry, "bob")
        await a.rooms.create(spec)
        with anyio.fail_after(SPREAD_TIMEOUT):
            await a.rooms.wait("tea")
            await b.cluster.rooms.wait_absorbed()
        async with open_member(nats.url, "away", data_dir=tmp_path) as away:
            assert away.rooms is not None and away.cluster.rooms is not None
            with anyio.fail_after(SPREAD_TIMEOUT):
                await away.cluster.rooms.wait_absorbed()
            assert (await away.rooms.get("tea")).status is RoomStatus.STOPPED  # on its disk
        await b.rooms.delete("tea")  # on b, while "away" is away: a forgets its copy too
        with anyio.fail_after(SPREAD_TIMEOUT):
            await a.cluster.rooms.wait_absorbed()
        for rooms in (a.rooms, b.rooms):
            with pytest.raises(RoomNotFound):
                await rooms.get("tea")
            assert await rooms.list() == []
        # A daemon that comes back reads the tombstone and drops the copy on its disk;
        # one that is new reads only the tombstone.
        async with (
            open_member(nats.url, "away", data_dir=tmp_path) as back,
            open_member(nats.url, "new", data_dir=tmp_path) as new,
        ):
            for member in (back, new):
                assert member.rooms is not None and member.cluster.rooms is not None
                with anyio.fail_after(SPREAD_TIMEOUT):
                    await member.cluster.rooms.wait_absorbed()
                with pytest.raises(RoomNotFound):
                    await member.rooms.get("tea")
            # The id is free again: a new room of that name follows the tombstone.
            assert new.rooms is not None
            again = RoomSpec(id="tea", topic="More tea?", members=("alice", "bob"))
            created = await new.rooms.create(again)
            assert created.room.topic == "More tea?"


async def test_only_the_holder_records_and_a_duplicate_is_never_a_write(
    nats: NatsServer, tmp_path: Path
) -> None:
    spec = RoomSpec(id="tea", topic="Tea?", members=("alice", "bob"))
    async with (
        open_member(nats.url, "a", [persona("alice", 0.2)], data_dir=tmp_path) as a,
        open_member(nats.url, "b", [persona("bob", 0.2)], data_dir=tmp_path) as b,
    ):
        assert a.rooms is not None and b.rooms is not None
        assert a.cluster.rooms is not None and b.cluster.rooms is not None
        await wait_status(a.mesh.registry, "bob")
        await a.rooms.create(spec)
        with anyio.fail_after(SPREAD_TIMEOUT):
            await b.cluster.rooms.wait_absorbed()  # b knows the room (a loaded machine lags)
        async with b.rooms.subscribe("tea") as events:  # b has read a's first turn
            with anyio.fail_after(SPREAD_TIMEOUT):
                async for event in events:
                    if isinstance(event, MessageEvent):
                        break
        # b does not hold the room: whatever it knows of the stream, it records nothing
        last = (await b.rooms.get("tea")).last_seq
        said = MessageEvent(
            room_id=RoomId("tea"), seq=last + 1, agent_id="bob", turn=9, text="mine"
        )
        with pytest.raises(RoomLeaseLost, match="only its holder records"):
            await b.cluster.rooms.record(said)
        await a.rooms.stop("tea")
        # a message id NATS has seen is refused, never taken for this write
        link, subject = b.cluster.link, "mesh.mesh.rooms.elsewhere"
        assert await link.js_publish(subject, b"{}", msg_id="elsewhere/1") is not None
        with pytest.raises(ClusterError, match="duplicate"):
            await link.js_publish(subject, b"{}", msg_id="elsewhere/1")


async def test_a_room_control_answer_the_holder_did_not_sign_is_dropped_and_its_own_taken(
    nats: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking a room's holder rides the link between the two daemons: an answer the
    holder did not sign is dropped (a forger cannot fail the request), and the holder's
    own answer, coming after it, is the one taken."""
    from typing import Any

    from mesh.cluster import _calls
    from mesh.cluster._link import NatsMessage
    from mesh.cluster._wire import RoomControlReply
    from mesh.protocol import Request
    from tests.cluster._raw import link_frames, link_response

    spec = RoomSpec(id="long", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=400))
    dropped, release = anyio.Event(), anyio.Event()
    forged_answers: list[str] = []

    def note_forged(claimed: str | None, subject: str, what: str) -> None:
        forged_answers.append(what)
        dropped.set()

    monkeypatch.setattr(_calls, "forged", note_forged)
    async with (
        open_member(
            nats.url, "a", [persona("alice", 0.05), persona("bob", 0.05)], data_dir=tmp_path
        ) as a,
        open_member(nats.url, "c", data_dir=tmp_path) as c,
    ):
        assert a.rooms is not None and c.rooms is not None and a.cluster.rooms is not None
        await wait_status(c.mesh.registry, "bob")
        await a.rooms.create(spec)
        answer_for_real = a.cluster.calls.room_control
        assert answer_for_real is not None

        async def answer_once_forged(params: Any, signer: str) -> Any:
            await release.wait()  # the holder answers only after the forgery was dropped
            return await answer_for_real(params, signer)

        monkeypatch.setattr(a.cluster.calls, "room_control", answer_once_forged)
        forgery = msgspec.to_builtins(RoomControlReply(error="forged: no such thing"))
        link = c.cluster.link

        def forge(message: NatsMessage) -> None:
            for asked in link_frames(message.data):
                if isinstance(asked, Request) and asked.payload.method == "mesh/room-control":
                    frame = link_response(asked.id, forgery)
                    headers = {"Mesh-Daemon": "a", "Mesh-Sig": "AA"}  # a's name, not its key
                    publish = partial(link.publish, "mesh.mesh.call.c", frame, headers=headers)
                    tasks.start_soon(publish)

        with anyio.fail_after(SPREAD_TIMEOUT):
            async with anyio.create_task_group() as tasks:
                watch = await link.subscribe("mesh.mesh.call.a", forge)
                await link.run("flush", link.nc.flush)  # the server has the subscription
                paused: list[RoomStatus] = []

                rooms = c.rooms

                async def pause() -> None:
                    paused.append((await rooms.pause("long")).status)

                tasks.start_soon(pause)
                await dropped.wait()
                release.set()
            await watch.stop()
    assert paused == [RoomStatus.PAUSED]
    assert forged_answers == ["daemon link frame"]
