"""Conversation rooms: persona agents take turns on a topic until a rule, or a person, stops them.

A room has a topic, two or more members (agents of the mesh, and people), a turn policy,
limits and exit rules. Each turn is a ``room/turn`` call to the speaking member
carrying the room from its perspective (its own messages as ``assistant``, the
others' as named ``user`` messages); the reply becomes a ``MESSAGE`` event with a
convergence score. Every event goes to an append-only JSONL log and to SQLite
before observers see it, so a room stopped or killed mid-turn resumes where it
was, each turn recorded once. See ``docs/rooms.md``.

Building blocks: :class:`RoomManager` (what the daemon holds), :class:`RoomRunner`
(one room's engine), :class:`RoomStore` (the log and SQLite), the pure
perspective, policy and rule functions, and :class:`~mesh.agents.persona.PersonaAgent`
on the other side of ``room/turn``.
"""

from mesh._public import publish
from mesh.rooms._engine import Journal, Presence, RoomRunner, Speak, delta_sink, report_delta
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
    DeltaEvent,
    ErrorEvent,
    LiveEvent,
    MessageEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
    decode_event,
    decode_live_event,
    encode_event,
)
from mesh.rooms._fixtures import (
    DEMO_TOPIC,
    REVIEW_TASK,
    ScriptedSeat,
    demo_chat,
    demo_review,
)
from mesh.rooms._manager import RoomManager
from mesh.rooms._mesh import (
    ROOM_PERSONA,
    ROOM_TURN,
    Describe,
    PersonaInfo,
    mesh_describer,
    mesh_speaker,
    registry_presence,
)
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
from mesh.rooms._perspective import (
    build_turn_request,
    opening,
    perspective_messages,
    system_prompt,
)
from mesh.rooms._policy import TurnPlan, next_turn, review_step
from mesh.rooms._render import format_event, transcript_markdown
from mesh.rooms._roles import ROLE_PROMPTS, role_persona
from mesh.rooms._rules import (
    Verdict,
    after_message,
    before_turn,
    convergence_score,
    is_verified,
    says_goodbye,
    similarity,
)
from mesh.rooms._state import RoomState
from mesh.rooms._store import RoomStore

__all__ = [
    "DEFAULT_MAX_TURNS",
    "DEFAULT_OBSERVER_BUFFER",
    "DEMO_TOPIC",
    "EVENT_TYPES",
    "REVIEW_TASK",
    "ROLE_PROMPTS",
    "ROOM_PERSONA",
    "ROOM_TURN",
    "AgentJoinedEvent",
    "AgentLeftEvent",
    "Awareness",
    "DeltaEvent",
    "Describe",
    "ErrorEvent",
    "ExitRules",
    "InvalidRoomSpec",
    "Journal",
    "Limits",
    "LiveEvent",
    "Member",
    "MemberKind",
    "MessageEvent",
    "Mode",
    "ObserverTooSlow",
    "People",
    "PersonaInfo",
    "Presence",
    "ResumedEvent",
    "Room",
    "RoomConflict",
    "RoomError",
    "RoomEvent",
    "RoomEvents",
    "RoomId",
    "RoomManager",
    "RoomNotFound",
    "RoomRunner",
    "RoomSnapshot",
    "RoomSpec",
    "RoomState",
    "RoomStatus",
    "RoomStore",
    "ScriptedSeat",
    "Speak",
    "Step",
    "StopReason",
    "StoppedEvent",
    "TurnPlan",
    "TurnReply",
    "TurnRequest",
    "Verdict",
    "WelcomeEvent",
    "after_message",
    "before_turn",
    "build_turn_request",
    "convergence_score",
    "decode_event",
    "decode_live_event",
    "decode_room_spec",
    "delta_sink",
    "demo_chat",
    "demo_review",
    "encode_event",
    "format_event",
    "is_verified",
    "mesh_describer",
    "mesh_speaker",
    "next_turn",
    "opening",
    "perspective_messages",
    "registry_presence",
    "report_delta",
    "review_step",
    "role_persona",
    "says_goodbye",
    "similarity",
    "system_prompt",
    "transcript_markdown",
]


publish(globals(), __all__)
