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

from mesh._public import publish
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


publish(globals(), __all__)
