"""Rooms over the mesh: the engine's ``speak``, ``describe`` and ``presence``, through the door.

A turn is the RPC ``room/turn`` to the speaking agent, with the turn's deadline;
a member is introduced by ``room/persona`` (its name, role and awareness); and a
member is present while the registry has it ``online`` or ``stale`` (a stale
agent has missed one heartbeat, not its TTL). An agent that does not serve
``room/persona`` can still sit in a room, under its registry name, as a
``participant``, as long as it answers ``room/turn``. Both calls are made on
behalf of the room's creator (:func:`~mesh.rooms._engine.acting_for`), so the
orchestrator's door applies the creator's rights to them.

A persona that streams its reply reports each piece as a ``progress``
notification of the ``room/turn`` call (the piece in ``message``); the speaker
passes them to the room's observers as ``DELTA`` events. Progress also moves
the call's deadline, so a long reply that keeps arriving is not cut by it.

A member that asks its caller for input mid-turn (an elicitation) asks the
room's people: the call's ``on_elicit`` is the room's (:func:`question_sink`).
Sampling has no one to answer it in a room and is refused at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mesh._errors import MeshError, MethodNotFound
from mesh._orchestrator.access import DAEMON
from mesh.rooms._engine import Presence, Speak, acting_for, delta_sink, question_sink
from mesh.rooms._errors import InvalidRoomSpec
from mesh.rooms._model import Member, TurnReply, TurnRequest
from registry import AgentId, AgentStatus, Registry

if TYPE_CHECKING:
    from mesh._orchestrator.bound import Doorway

__all__ = [
    "PRESENT",
    "ROOM_PERSONA",
    "ROOM_TURN",
    "Describe",
    "PersonaInfo",
    "mesh_describer",
    "mesh_speaker",
    "registry_presence",
]

#: The method a room calls on the member whose turn it is.
ROOM_TURN: Final = "room/turn"
#: The method that tells a room who a member is.
ROOM_PERSONA: Final = "room/persona"
#: The registry statuses in which a member counts as present.
PRESENT: Final = frozenset({AgentStatus.ONLINE, AgentStatus.STALE})

#: A room's member, from an agent id: ``await describe("bob")``.
Describe = Callable[[str], Awaitable[Member]]


class PersonaInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The ``room/persona`` result (the persona agent serves it)."""

    id: str
    name: str
    role: str
    awareness: str | None = None
    provider: str = ""
    model: str = ""
    #: The persona's context budget, from its manifest (a later field: None from older ones).
    context_tokens: int | None = None


def mesh_speaker(door: Doorway) -> Speak:
    """``speak`` as a ``room/turn`` call, with the request's timeout as its deadline."""

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        params = msgspec.to_builtins(request)
        sink = delta_sink()  # taken here: progress arrives on the connection's reader task
        ask_people = question_sink()

        def progress(report: Mapping[str, Any]) -> None:
            piece = report.get("message")
            if sink is not None and isinstance(piece, str) and piece:
                sink(piece)

        result = await door.call(
            agent_id,
            ROOM_TURN,
            params,
            timeout=request.timeout,
            on_progress=progress,
            on_behalf_of=acting_for(),  # the room, for its creator: the door checks it
            on_elicit=ask_people,
        )
        return msgspec.convert(result, TurnReply)

    return speak


def mesh_describer(door: Doorway, *, timeout: float = 10.0) -> Describe:
    """``describe`` as a ``room/persona`` call, falling back to the registry's name."""

    async def describe(agent_id: str) -> Member:
        record = door.registry.get(AgentId(agent_id))
        try:
            result: Any = await door.call(
                agent_id, ROOM_PERSONA, timeout=timeout, on_behalf_of=acting_for()
            )
        except MethodNotFound:
            await _check_can_chat(door, agent_id, timeout)
            name = record.name if record is not None else agent_id
            return Member(id=AgentId(agent_id), name=name, role="participant")
        except MeshError as exc:
            raise InvalidRoomSpec(f"member {agent_id!r} is not available: {exc}") from exc
        try:
            info = msgspec.convert(result, PersonaInfo)
            return msgspec.convert(
                {
                    "id": agent_id,
                    "name": info.name,
                    "role": info.role,
                    "awareness": info.awareness,
                    "context_tokens": info.context_tokens,
                },
                Member,
            )
        except msgspec.ValidationError as exc:
            raise InvalidRoomSpec(f"member {agent_id!r} answered room/persona with {exc}") from exc

    return describe


async def _check_can_chat(door: Doorway, agent_id: str, timeout: float) -> None:
    """Refuse an agent that says what it serves (``agent/info`` ``methods``) and no ``room/turn``.

    An agent that does not say (not written with the SDK) is taken at its word: its
    first turn tells.
    """
    try:
        info: Any = await door.call(agent_id, "agent/info", timeout=timeout, on_behalf_of=DAEMON)
    except MeshError as exc:
        raise InvalidRoomSpec(f"member {agent_id!r} is not available: {exc}") from exc
    methods = info.get("methods") if isinstance(info, dict) else None
    if isinstance(methods, list) and ROOM_TURN not in methods:
        raise InvalidRoomSpec(
            f"member {agent_id!r} cannot take turns in a room: it serves no {ROOM_TURN} "
            "(a tool-only agent; a persona agent can, see docs/rooms.md)",
            agent=agent_id,
        )


def registry_presence(registry: Registry) -> Presence:
    def present(agent_id: str) -> bool:
        record = registry.get(AgentId(agent_id))
        return record is not None and record.status in PRESENT

    return present
