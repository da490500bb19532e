"""Rooms over a real MeshOrchestrator: persona agents served in process, turns as RPC."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    InvalidParams,
    MeshOrchestrator,
    ReconnectPolicy,
    RequestContext,
    local_connector,
)
from mesh.agents.echo import agent as echo_agent
from mesh.agents.persona import PersonaAgent
from mesh.demo.fixtures import DEMO_TOPIC, demo_chat
from mesh.rooms import (
    AgentLeftEvent,
    ErrorEvent,
    ExitRules,
    InvalidRoomSpec,
    Limits,
    RoomManager,
    RoomSpec,
    StoppedEvent,
    StopReason,
    TurnRequest,
    perspective_messages,
)
from mesh.testing import KillableConnector
from registry import AgentId

from ._helpers import GUARD, assert_log_and_db_agree, seat_agent

pytestmark = pytest.mark.anyio


def personas() -> tuple[PersonaAgent, PersonaAgent]:
    alice, bob = demo_chat()
    return seat_agent(alice), seat_agent(bob)


async def test_a_room_through_the_orchestrator_with_persona_agents(tmp_path: Path) -> None:
    alice, bob = personas()
    specs = [AgentSpec(a.id, local_connector(a), name=a.id) for a in (alice, bob)]
    async with (
        MeshOrchestrator(specs) as mesh,
        RoomManager.for_orchestrator(mesh, tmp_path, creator=EMBEDDER) as rooms,
    ):
        created = await rooms.create(RoomSpec(topic=DEMO_TOPIC, members=("alice", "bob")))
        # names and roles came from the agents themselves (room/persona)
        assert [(m.name, m.role, m.awareness) for m in created.room.members] == [
            ("Alice", "architect", "intermediate"),
            ("Bob", "critic", "intermediate"),
        ]
        with anyio.fail_after(GUARD):
            snapshot = await rooms.wait(created.id)
        transcript = await rooms.transcript(created.id)
        room = snapshot.room

        # Inject a duplicate of the last turn and a stale one, as a retried or
        # delayed RPC would: neither speaks again.
        calls_before = len(bob.provider.calls)  # type: ignore[attr-defined]
        last = TurnRequest(
            room_id=room.id,
            epoch=str(room.created_at),  # this room's, as the room sends it
            turn=12,
            agent_id=AgentId("bob"),
            system="",
            messages=perspective_messages(room, transcript[:11], "bob"),
        )
        duplicate = await mesh.call(
            "bob", "room/turn", msgspec.to_builtins(last), on_behalf_of=EMBEDDER
        )
        stale = msgspec.structs.replace(last, turn=10)
        dropped = await mesh.call(
            "bob", "room/turn", msgspec.to_builtins(stale), on_behalf_of=EMBEDDER
        )
        assert len(bob.provider.calls) == calls_before  # type: ignore[attr-defined]
    assert (snapshot.stop_reason, snapshot.current_turn) == (StopReason.GOODBYE, 12)
    assert [m.agent_id for m in transcript] == ["alice", "bob"] * 6
    assert (duplicate["status"], duplicate["text"]) == ("replayed", transcript[-1].text)
    assert dropped["status"] == "dropped" and "stale" in dropped["reason"]
    # what Bob's model was shown at his last turn: his own words as assistant, Alice's as user
    shown = bob.provider.calls[-1].messages  # type: ignore[attr-defined]
    assert [m.role for m in shown] == ["user"] + ["user", "assistant"] * 5 + ["user"]
    assert all(m.name == "Alice" for m in shown[1:] if m.role == "user")
    assert_log_and_db_agree(tmp_path, created.id)


async def test_a_member_that_goes_offline_leaves_and_is_lost(tmp_path: Path) -> None:
    alice, bob = personas()
    bob_link = KillableConnector(bob)
    specs = [
        AgentSpec("alice", local_connector(alice)),
        AgentSpec("bob", bob_link),
    ]
    policy = ReconnectPolicy(base=0.01, max_attempts=1)
    room_spec = RoomSpec(
        topic=DEMO_TOPIC,
        members=("alice", "bob"),
        limits=Limits(retry_delay=0),
        rules=ExitRules(agent_grace=0.2),
    )
    async with (
        MeshOrchestrator(specs, policy=policy) as mesh,
        RoomManager.for_orchestrator(mesh, tmp_path, creator=EMBEDDER) as rooms,
    ):
        room = await rooms.create(room_spec)
        with anyio.fail_after(GUARD):
            async with rooms.subscribe(room.id) as events:
                async for event in events:
                    if getattr(event, "turn", 0) == 3:
                        bob_link.kill()
                    if isinstance(event, StoppedEvent):
                        break
        snapshot = await rooms.get(room.id)
        recorded = await rooms.events(room.id)
    assert snapshot.stop_reason is StopReason.AGENT_LOST
    assert snapshot.detail == "Bob stayed offline for 0.2 s"
    left = [e for e in recorded if isinstance(e, AgentLeftEvent)]
    assert [(e.agent_id, e.name, e.role) for e in left] == [("bob", "Bob", "critic")]
    # at most the one attempt that raced the registry's news counts as an error
    assert len([e for e in recorded if isinstance(e, ErrorEvent)]) <= 1


async def test_a_tool_only_agent_is_refused_and_a_permanent_error_is_not_retried(
    tmp_path: Path,
) -> None:
    alice, _ = personas()
    refuser = Agent("refuser")

    @refuser.method("room/turn")
    async def turn(ctx: RequestContext, params: object) -> None:
        raise InvalidParams("this agent takes no turns today")

    specs = [
        AgentSpec("alice", local_connector(alice)),
        AgentSpec("echo", local_connector(echo_agent), name="Echo"),
        AgentSpec("refuser", local_connector(refuser)),
    ]
    limits = Limits(retry_delay=0)
    async with (
        MeshOrchestrator(specs) as mesh,
        RoomManager.for_orchestrator(mesh, tmp_path, creator=EMBEDDER) as rooms,
    ):
        # The echo agent lists its methods (agent/info) and room/turn is not among them.
        refused = "member 'echo' cannot take turns in a room: it serves no room/turn"
        with pytest.raises(InvalidRoomSpec, match=refused):
            await rooms.create(RoomSpec(topic="anything", members=("alice", "echo")))
        with pytest.raises(InvalidRoomSpec, match="member 'ghost': no agent 'ghost' is registered"):
            await rooms.create(RoomSpec(topic="t", members=("alice", "ghost")))
        assert await rooms.list() == []

        # An agent that serves room/turn and rejects every request: one ERROR, no retries.
        room = await rooms.create(RoomSpec(topic="t", members=("alice", "refuser"), limits=limits))
        with anyio.fail_after(GUARD):
            snapshot = await rooms.wait(room.id)
        events = await rooms.events(room.id)
    assert snapshot.stop_reason is StopReason.ERROR
    assert snapshot.detail.startswith("turn 2 failed, and would fail again: InvalidParams")
    assert len([e for e in events if isinstance(e, ErrorEvent)]) == 1
    assert snapshot.current_turn == 1
