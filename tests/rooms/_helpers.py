"""What the room tests share: rooms built by hand, speakers in process, a recording journal."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.lowlevel
import msgspec

from mesh.agents.persona import PersonaAgent
from mesh.demo.fixtures import ScriptedSeat
from mesh.providers import ProviderConfig
from mesh.rooms import (
    ExitRules,
    Limits,
    Member,
    MessageEvent,
    Room,
    RoomEvent,
    RoomId,
    TurnReply,
    TurnRequest,
    decode_event,
    role_persona,
)
from mesh.rooms._engine import Journal
from mesh.rooms._policy import review_step
from mesh.rooms._state import RoomState
from mesh.rooms._store import RoomStore
from registry import AgentId

#: Every wait in these tests is bounded by this (seconds).
GUARD: Final = 10.0

Speak = Callable[[str, TurnRequest], Awaitable[TurnReply]]


def member(agent_id: str, role: str = "participant") -> Member:
    return Member(id=AgentId(agent_id), name=agent_id.capitalize(), role=role)


def make_room(
    *ids: str,
    topic: str = "tabs or spaces",
    mode: str = "chat",
    room_id: str = "r1",
    limits: Limits | None = None,
    rules: ExitRules | None = None,
    awareness: str | None = None,
    agenda: tuple[str, ...] = (),
) -> Room:
    members = tuple(member(agent_id) for agent_id in (ids or ("alice", "bob")))
    return msgspec.convert(
        {
            "id": room_id,
            "topic": topic,
            "members": [msgspec.to_builtins(m) for m in members],
            "mode": mode,
            "awareness": awareness,
            "limits": msgspec.to_builtins(limits or Limits(retry_delay=0)),
            "rules": msgspec.to_builtins(rules or ExitRules()),
            "agenda": agenda,
        },
        Room,
    )


def said(room: Room, *texts: str) -> list[MessageEvent]:
    """A transcript of ``texts`` from turn 1: round-robin, or the review schedule."""
    transcript = []
    for turn, text in enumerate(texts, start=1):
        step = None
        speaker = room.members[(turn - 1) % len(room.members)]
        if room.mode == "review":
            step, who, _ = review_step(turn)
            speaker = room.members[who]
        transcript.append(
            MessageEvent(
                room_id=room.id,
                seq=turn,
                agent_id=speaker.id,
                name=speaker.name,
                role=speaker.role,
                turn=turn,
                text=text,
                step=step,
            )
        )
    return transcript


def clock() -> Callable[[], int]:
    """Epoch milliseconds that tick by one per event, for reproducible logs."""
    ticks = itertools.count(1_767_772_800_000)
    return lambda: next(ticks)


class Recorder:
    """A journal's record/publish pair that keeps the events and can be waited on."""

    def __init__(self) -> None:
        self.events: list[RoomEvent] = []
        self._changed = anyio.Event()

    async def record(self, event: RoomEvent) -> None:
        await anyio.lowlevel.checkpoint()
        self.events.append(event)

    def publish(self, event: RoomEvent) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[RoomEvent], bool]) -> RoomEvent:
        with anyio.fail_after(GUARD):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                await self._changed.wait()

    def types(self) -> list[str]:
        return [str(event.__struct_config__.tag) for event in self.events]

    def messages(self) -> list[MessageEvent]:
        return [event for event in self.events if isinstance(event, MessageEvent)]


def journal(room: Room) -> tuple[Journal, Recorder]:
    recorder = Recorder()
    return Journal(RoomState(room=room), recorder.record, recorder.publish, clock=clock()), recorder


def lines(text: str, count: int, prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix} {n}: {text}" for n in range(1, count + 1))


def persona_agent(agent_id: str, *script: str, role: str = "participant") -> PersonaAgent:
    persona = role_persona(role, ProviderConfig(provider="scripted", script=script))
    return PersonaAgent(agent_id, persona, name=agent_id.capitalize())


def seat_agent(seat: ScriptedSeat) -> PersonaAgent:
    return PersonaAgent(seat.id, seat.persona, name=seat.name)


def direct_speaker(agents: Iterable[PersonaAgent]) -> Speak:
    """``speak`` that hands the request straight to in-process persona agents."""
    by_id = {agent.id: agent for agent in agents}

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        return await by_id[agent_id].take_turn(request)

    return speak


def direct_describer(agents: Iterable[PersonaAgent]) -> Callable[[str], Awaitable[Member]]:
    """``describe`` reading in-process persona agents, as ``room/persona`` would."""
    by_id = {agent.id: agent for agent in agents}

    async def describe(agent_id: str) -> Member:
        agent = by_id[agent_id]
        persona = agent.persona
        return Member(
            id=AgentId(agent_id), name=agent.name, role=persona.role, awareness=persona.awareness
        )

    return describe


def scripted_speaker(scripts: Mapping[str, Iterable[str]]) -> Speak:
    """``speak`` answering each agent's turns from its own list, in order."""
    queues = {agent: iter(texts) for agent, texts in scripts.items()}

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        await anyio.lowlevel.checkpoint()
        return TurnReply(room_id=request.room_id, turn=request.turn, text=next(queues[agent_id]))

    return speak


def read_log(path: Path) -> list[RoomEvent]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line]


def read_db(data_dir: Path, room_id: str) -> dict[str, Any]:
    """The room's rows, read with plain sqlite3 (not through the store)."""
    db = sqlite3.connect(data_dir / "rooms.sqlite3")
    try:
        room = db.execute(
            "SELECT status, stop_reason, current_turn, last_seq FROM rooms WHERE id = ?",
            (room_id,),
        ).fetchone()
        messages = db.execute(
            "SELECT turn, seq, agent_id, text, score FROM messages WHERE room_id = ? ORDER BY turn",
            (room_id,),
        ).fetchall()
        members = db.execute(
            "SELECT agent_id, name, role FROM members WHERE room_id = ? ORDER BY position",
            (room_id,),
        ).fetchall()
    finally:
        db.close()
    return {"room": room, "messages": messages, "members": members}


def assert_log_and_db_agree(data_dir: Path, room_id: str) -> list[MessageEvent]:
    """The JSONL log and the SQLite rows tell the same story; returns the log's messages."""
    events = read_log(data_dir / "rooms" / f"{room_id}.jsonl")
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq must be 1, 2, 3..."
    state = RoomState.from_events(events)
    db = read_db(data_dir, room_id)
    logged = [(m.turn, m.seq, m.agent_id, m.text, m.score) for m in state.transcript]
    assert logged == [tuple(row) for row in db["messages"]]
    status, reason, current_turn, last_seq = db["room"]
    assert (status, reason, current_turn, last_seq) == (
        str(state.status),
        None if state.stop_reason is None else str(state.stop_reason),
        state.current_turn,
        state.last_seq,
    )
    turns = [m.turn for m in state.transcript]
    assert turns == list(range(1, len(turns) + 1)), f"each turn exactly once: {turns}"
    return state.transcript


def store_state(data_dir: Path, room_id: str) -> RoomState:
    with RoomStore(data_dir) as store:
        state = store.load(room_id)
    assert state is not None
    return state


def dump(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


ROOM: Final = RoomId("r1")
