"""Conversation rooms: persona agents take turns on a topic until a rule, or a person, stops them.

A room has a topic, two or more members (agents of the mesh, and people), a turn policy,
limits and exit rules. Each turn is a ``room/turn`` call to the speaking member
carrying the room from its perspective (its own messages as ``assistant``, the
others' as named ``user`` messages); the reply becomes a ``MESSAGE`` event with a
convergence score. Every event goes to an append-only JSONL log and to SQLite
before observers see it, so a room stopped or killed mid-turn resumes where it
was, each turn recorded once. See ``docs/rooms.md``.

What users need is here: :class:`RoomManager` (what the daemon holds) and the
types it takes and gives (specs, snapshots, events, errors), the ``room/turn``
contract and the perspective functions a persona agent may use
(:class:`~mesh.agents.persona.PersonaAgent` is one), and the renderers. The
engine, the store and the pure policy and rule functions are internals; the
scripted demo personas are in :mod:`mesh.demo.fixtures`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh._public import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from mesh.rooms._engine import Presence, Speak, report_delta
    from mesh.rooms._errors import (
        InvalidRoomSpec,
        ObserverTooSlow,
        RoomConflict,
        RoomError,
        RoomNotFound,
    )
    from mesh.rooms._events import (
        EVENT_TYPES,
        AgentJoinedEvent,
        AgentLeftEvent,
        AnswerEvent,
        DeltaEvent,
        ErrorEvent,
        LiveEvent,
        MessageEvent,
        PointEvent,
        QuestionEvent,
        ResumedEvent,
        RoomEvent,
        StoppedEvent,
        WelcomeEvent,
        decode_event,
        decode_live_event,
        encode_event,
    )
    from mesh.rooms._manager import RoomManager
    from mesh.rooms._mesh import ROOM_PERSONA, ROOM_TURN, Describe, PersonaInfo
    from mesh.rooms._model import (
        DEFAULT_MAX_TURNS,
        Awareness,
        ExitRules,
        Limits,
        Member,
        MemberKind,
        Mode,
        People,
        Room,
        RoomId,
        RoomSnapshot,
        RoomSpec,
        RoomStatus,
        Step,
        StopReason,
        TurnReply,
        TurnRequest,
        decode_room_spec,
    )
    from mesh.rooms._observers import DEFAULT_OBSERVER_BUFFER, RoomEvents
    from mesh.rooms._perspective import build_turn_request, perspective_messages, system_prompt
    from mesh.rooms._render import format_event, transcript_markdown
    from mesh.rooms._roles import ROLE_PROMPTS, role_persona

__all__ = [
    "DEFAULT_MAX_TURNS",
    "DEFAULT_OBSERVER_BUFFER",
    "EVENT_TYPES",
    "ROLE_PROMPTS",
    "ROOM_PERSONA",
    "ROOM_TURN",
    "AgentJoinedEvent",
    "AgentLeftEvent",
    "AnswerEvent",
    "Awareness",
    "DeltaEvent",
    "Describe",
    "ErrorEvent",
    "ExitRules",
    "InvalidRoomSpec",
    "Limits",
    "LiveEvent",
    "Member",
    "MemberKind",
    "MessageEvent",
    "Mode",
    "ObserverTooSlow",
    "People",
    "PersonaInfo",
    "PointEvent",
    "Presence",
    "QuestionEvent",
    "ResumedEvent",
    "Room",
    "RoomConflict",
    "RoomError",
    "RoomEvent",
    "RoomEvents",
    "RoomId",
    "RoomManager",
    "RoomNotFound",
    "RoomSnapshot",
    "RoomSpec",
    "RoomStatus",
    "Speak",
    "Step",
    "StopReason",
    "StoppedEvent",
    "TurnReply",
    "TurnRequest",
    "WelcomeEvent",
    "build_turn_request",
    "decode_event",
    "decode_live_event",
    "decode_room_spec",
    "encode_event",
    "format_event",
    "perspective_messages",
    "report_delta",
    "role_persona",
    "system_prompt",
    "transcript_markdown",
]

#: Where each public name lives: imported on first use (``mesh._public.lazy_names``).
_WHERE: dict[str, str] = {
    "Presence": "mesh.rooms._engine",
    "Speak": "mesh.rooms._engine",
    "report_delta": "mesh.rooms._engine",
    "InvalidRoomSpec": "mesh.rooms._errors",
    "ObserverTooSlow": "mesh.rooms._errors",
    "RoomConflict": "mesh.rooms._errors",
    "RoomError": "mesh.rooms._errors",
    "RoomNotFound": "mesh.rooms._errors",
    "EVENT_TYPES": "mesh.rooms._events",
    "AgentJoinedEvent": "mesh.rooms._events",
    "AgentLeftEvent": "mesh.rooms._events",
    "AnswerEvent": "mesh.rooms._events",
    "QuestionEvent": "mesh.rooms._events",
    "DeltaEvent": "mesh.rooms._events",
    "ErrorEvent": "mesh.rooms._events",
    "LiveEvent": "mesh.rooms._events",
    "MessageEvent": "mesh.rooms._events",
    "PointEvent": "mesh.rooms._events",
    "ResumedEvent": "mesh.rooms._events",
    "RoomEvent": "mesh.rooms._events",
    "StoppedEvent": "mesh.rooms._events",
    "WelcomeEvent": "mesh.rooms._events",
    "decode_event": "mesh.rooms._events",
    "decode_live_event": "mesh.rooms._events",
    "encode_event": "mesh.rooms._events",
    "RoomManager": "mesh.rooms._manager",
    "ROOM_PERSONA": "mesh.rooms._mesh",
    "ROOM_TURN": "mesh.rooms._mesh",
    "Describe": "mesh.rooms._mesh",
    "PersonaInfo": "mesh.rooms._mesh",
    "DEFAULT_MAX_TURNS": "mesh.rooms._model",
    "Awareness": "mesh.rooms._model",
    "ExitRules": "mesh.rooms._model",
    "Limits": "mesh.rooms._model",
    "Member": "mesh.rooms._model",
    "MemberKind": "mesh.rooms._model",
    "Mode": "mesh.rooms._model",
    "People": "mesh.rooms._model",
    "Room": "mesh.rooms._model",
    "RoomId": "mesh.rooms._model",
    "RoomSnapshot": "mesh.rooms._model",
    "RoomSpec": "mesh.rooms._model",
    "RoomStatus": "mesh.rooms._model",
    "Step": "mesh.rooms._model",
    "StopReason": "mesh.rooms._model",
    "TurnReply": "mesh.rooms._model",
    "TurnRequest": "mesh.rooms._model",
    "decode_room_spec": "mesh.rooms._model",
    "DEFAULT_OBSERVER_BUFFER": "mesh.rooms._observers",
    "RoomEvents": "mesh.rooms._observers",
    "build_turn_request": "mesh.rooms._perspective",
    "perspective_messages": "mesh.rooms._perspective",
    "system_prompt": "mesh.rooms._perspective",
    "format_event": "mesh.rooms._render",
    "transcript_markdown": "mesh.rooms._render",
    "ROLE_PROMPTS": "mesh.rooms._roles",
    "role_persona": "mesh.rooms._roles",
}
__getattr__, __dir__ = lazy_names(globals(), _WHERE)
