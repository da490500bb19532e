"""The rooms part of ``make demo``: two offline rooms, printed as they happen.

A chat between two scripted personas (Alice and Bob; 12 messages, ends when one
says goodbye) and the review loop (architect proposes, builder implements,
architect critiques and verifies; converges). Deterministic and offline: the
personas use the scripted provider, served in-process over the memory transport.
"""

from __future__ import annotations

import sys
import tempfile

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, local_connector
from mesh.agents.persona import PersonaAgent
from mesh.demo.fixtures import DEMO_TOPIC, REVIEW_TASK, ScriptedSeat, demo_chat, demo_review
from mesh.rooms import RoomManager, RoomSpec, StopReason, format_event


async def _room(title: str, seats: tuple[ScriptedSeat, ...], spec: RoomSpec) -> StopReason | None:
    print(f"\n== {title} ==", flush=True)
    agents = [PersonaAgent(seat.id, seat.persona, name=seat.name) for seat in seats]
    specs = [
        AgentSpec(agent.id, local_connector(agent), capabilities=frozenset({"chat"}))
        for agent in agents
    ]
    color = sys.stdout.isatty()
    with tempfile.TemporaryDirectory() as data_dir:
        async with (
            MeshOrchestrator(specs) as mesh,
            RoomManager.for_orchestrator(mesh, data_dir, creator=EMBEDDER) as rooms,
        ):
            room = await rooms.create(spec)
            async with rooms.subscribe(room.id) as events:
                async for event in events:
                    for line in format_event(event, room=room.room, color=color).splitlines():
                        print(f"  {line}", flush=True)
            done = await rooms.get(room.id)
    print(f"  -> stop reason {done.stop_reason} after {done.current_turn} messages", flush=True)
    return done.stop_reason


async def rooms_tour() -> None:
    chat = demo_chat()
    reason = await _room(
        "a room: two scripted personas, offline",
        chat,
        RoomSpec(topic=DEMO_TOPIC, members=tuple(seat.id for seat in chat)),
    )
    if reason is not StopReason.GOODBYE:
        raise SystemExit(f"the chat stopped for {reason}, not GOODBYE")
    review = demo_review()
    reason = await _room(
        "the review loop: architect and builder",
        review,
        RoomSpec(topic=REVIEW_TASK, members=tuple(seat.id for seat in review), mode="review"),
    )
    if reason is not StopReason.CONVERGED:
        raise SystemExit(f"the review stopped for {reason}, not CONVERGED")
