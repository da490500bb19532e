"""What a room is: its configuration, its members, its status, and the turn messages.

A :class:`RoomSpec` is what a caller asks for (the body of ``POST /rooms``): a
topic, two or more member agent ids, a mode, limits and exit rules. The manager
resolves it into a :class:`Room` (members with names and roles, limits with
their mode defaults, an id) that never changes afterwards and is recorded in the
room's first event. :class:`TurnRequest` and :class:`TurnReply` are the
``room/turn`` RPC between a room and the member whose turn it is. Everything is
a frozen msgspec Struct, so the daemon puts it on the wire with no second schema.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NewType, TypeAlias

import msgspec

from mesh._input import UNREADABLE_JSON, why_unreadable
from mesh._orchestrator.access import NOBODY, Principal
from mesh.providers._base import ChatMessage, Usage
from registry import AgentId

__all__ = [
    "DEFAULT_MAX_TURNS",
    "MAX_AGENDA_POINTS",
    "MAX_LABEL_CHARS",
    "MAX_POINT_CHARS",
    "RESUMABLE",
    "Awareness",
    "ExitRules",
    "Limits",
    "Member",
    "MemberKind",
    "Mode",
    "People",
    "Room",
    "RoomId",
    "RoomSnapshot",
    "RoomSpec",
    "RoomStatus",
    "Step",
    "StopReason",
    "TurnPolicy",
    "TurnPromptIn",
    "TurnReply",
    "TurnRequest",
    "decode_room_spec",
    "valid_room_id",
]

RoomId = NewType("RoomId", str)

Awareness: TypeAlias = Literal["basic", "intermediate", "high"]
Mode: TypeAlias = Literal["chat", "review"]
TurnPolicy: TypeAlias = Literal["round-robin"]
#: Where a chat turn's prompt goes: the end of the system prompt, or the end of the last
#: message the member is shown (a small model heeds the words it answers far more).
TurnPromptIn: TypeAlias = Literal["system", "message"]
Step: TypeAlias = Literal["propose", "implement", "critique", "verify"]
#: An agent of the mesh (its turn is a ``room/turn`` call) or a person (its turn
#: waits for their message, from the page or ``mesh room join``).
MemberKind: TypeAlias = Literal["agent", "human"]

#: ``max_turns`` when the spec leaves it out. A chat counts messages: 40 is twenty
#: each for two agents (``max_messages_per_agent``'s default). A review counts rounds
#: (implement, critique, verify) and stops after three (docs/rooms.md).
DEFAULT_MAX_TURNS: Final = {"chat": 40, "review": 3}

#: An agenda's bounds: a few points a conversation can get through, each a line.
MAX_AGENDA_POINTS: Final = 12
MAX_POINT_CHARS: Final = 200
#: A spec's member names and roles, and its goodbye word and verified prefix: each is in
#: every turn's prompt, so a creator cannot make every model read a megabyte a turn.
MAX_LABEL_CHARS: Final = 200
#: At most this many draws again of one turn: each is a whole reply's worth of model time.
MAX_REDRAWS: Final = 8

_Point = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_POINT_CHARS)]
_Agenda = Annotated[tuple[_Point, ...], msgspec.Meta(max_length=MAX_AGENDA_POINTS)]

# Room ids become file names (``<id>.jsonl``), so they are as strict as agent ids.
_ROOM_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Count = Annotated[int, msgspec.Meta(ge=1)]
#: Token names a room's owner lets join (a token's name is 1-64 characters).
_TokenNames = Annotated[
    tuple[Annotated[str, msgspec.Meta(min_length=1, max_length=64)], ...],
    msgspec.Meta(max_length=64),
]


def check_agenda(agenda: tuple[str, ...], mode: Mode) -> None:
    """Raise ``ValueError`` for an agenda past its bounds (JSON is checked on decoding too)."""
    if not agenda:
        return
    if mode != "chat":
        raise ValueError("an agenda is for a chat; a review has its own steps")
    if len(agenda) > MAX_AGENDA_POINTS:
        raise ValueError(f"an agenda has at most {MAX_AGENDA_POINTS} points, got {len(agenda)}")
    for number, point in enumerate(agenda, 1):
        if not point.strip():
            raise ValueError(f"agenda point {number} is empty")
        if len(point) > MAX_POINT_CHARS:
            raise ValueError(
                f"agenda point {number} has {len(point)} characters; at most {MAX_POINT_CHARS}"
            )


def valid_room_id(room_id: str) -> bool:
    """True for lowercase letters, digits, ``.``, ``_``, ``-`` (64 at most, alnum first)."""
    return _ROOM_ID.fullmatch(room_id) is not None


class StopReason(enum.StrEnum):
    """Why a room stopped talking; always recorded with the room."""

    CONVERGED = "CONVERGED"  # "Verified…" from the verifier, or the score passed the threshold
    NO_IMPROVEMENT = "NO_IMPROVEMENT"  # an agent repeated its previous output
    MAX_TURNS = (
        "MAX_TURNS"  # the turn limit, or no one but the last speaker under the message limit
    )
    GOODBYE = "GOODBYE"  # an agent said goodbye
    PAUSED = "PAUSED"  # someone paused it; resume continues at the next turn
    AGENT_LOST = "AGENT_LOST"  # a member stayed offline past the grace period
    ERROR = "ERROR"  # turns kept failing (provider down, agent erroring, timeouts)
    STOPPED = "STOPPED"  # someone stopped it for good

    @property
    def resumable(self) -> bool:
        """Whether ``resume`` may continue a room that stopped for this reason."""
        return self in RESUMABLE


#: Reasons that say "not now" rather than "done": the room can be resumed after them.
RESUMABLE: Final = frozenset({StopReason.PAUSED, StopReason.AGENT_LOST, StopReason.ERROR})


class RoomStatus(enum.StrEnum):
    RUNNING = "running"  # turns are being taken (or it waits for a member to come back)
    PAUSED = "paused"
    STOPPED = "stopped"  # see the stop reason; AGENT_LOST and ERROR rooms can be resumed


class Member(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One agent or person in a room. In a spec an agent's ``name`` and ``role`` may
    be left empty: the manager asks the agent (``room/persona``). ``awareness`` is
    the persona's own level, used when the room sets none. A ``human`` member is
    a seat for a person: nobody is called, their turn waits for their message."""

    id: AgentId
    name: str = ""
    role: str = ""
    awareness: Awareness | None = None
    kind: MemberKind = "agent"
    #: This member's own budgets (None: the room's ``limits``): tokens per reply, and
    #: tokens of transcript shown to it. In a spec, or from the persona's manifest.
    reply_tokens: _Count | None = None
    context_tokens: _Count | None = None

    @property
    def human(self) -> bool:
        return self.kind == "human"


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How long a room may go on, and how patient it is with each turn.

    ``max_turns`` counts messages in a chat and rounds in a review (``None``:
    :data:`DEFAULT_MAX_TURNS`). ``context_messages`` caps how many past messages a
    member is shown (``None``: all; set it for small-context models), and
    ``context_tokens`` how many tokens of them (estimated; what falls out is
    summarised in a line). ``reply_tokens`` is each reply's budget: the smaller
    of it and the persona's ``max_tokens`` is asked of the model, and a reply cut
    by it ends at its last full sentence (or says it was cut). A member's own
    ``reply_tokens``/``context_tokens`` win over these.
    ``turn_timeout`` is one attempt's deadline; a failed attempt is retried after
    ``retry_delay`` seconds, doubling each time. ``turns_per_point`` (a room with an
    agenda) moves the room to the next point after that many messages on one, and
    ends it (``MAX_TURNS``) after that many on the last (None: only the loop guard
    moves it on). ``redraws`` is how many times a reply with a fault (it recites its
    instructions, addresses itself, talks about its reply, repeats a message, ignores
    the message it answers, narrates, or speaks as an assistant; see ``docs/rooms.md``)
    is asked for again, with the next seed, before the room keeps the draw whose
    faults weigh least, less any label of a member's name ("Ben: …") it
    opens with (0: every reply is kept as it comes).
    """

    max_turns: _Count | None = None
    max_messages_per_agent: _Count = 20
    turn_timeout: _Seconds = 120.0
    retry_delay: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    context_messages: _Count | None = None
    context_tokens: _Count | None = None
    reply_tokens: _Count | None = None
    turns_per_point: _Count | None = None
    redraws: Annotated[int, msgspec.Meta(ge=0, le=MAX_REDRAWS)] = 0


class ExitRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When a room ends on its own; see ``docs/rooms.md`` for each rule's exact test.

    ``verifier`` (a member id) converges a chat by starting a message with
    ``verified_prefix``; in a review the architect is always the verifier.
    ``convergence_threshold`` is off by default: the score is a lexical measure,
    recorded on every message, and stopping a real conversation on it is a choice.
    ``goodbye`` is the word that, as a message's first or last word, ends the
    room (``None`` turns the rule off). ``agent_grace`` is how long a member may
    be offline before the room stops with ``AGENT_LOST``; ``max_failures`` how
    many failed attempts in a row at one turn stop it with ``ERROR``.
    ``repetition_threshold`` is the loop guard: ``NO_IMPROVEMENT`` when a message is
    at least this similar to its speaker's previous one, or the convergence score
    reaches it on two messages running (``None`` turns it off).
    """

    verifier: AgentId | None = None
    verified_prefix: Annotated[str, msgspec.Meta(min_length=1)] = "Verified"
    convergence_threshold: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    no_improvement: bool = True
    repetition_threshold: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    goodbye: Annotated[str, msgspec.Meta(min_length=1)] | None = "goodbye"
    agent_grace: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    max_failures: _Count = 3


class People(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a room treats the people in it (members of kind ``human``).

    A person's turn waits ``turn_timeout`` seconds for their message; then
    ``at_timeout`` decides: ``skip`` (they are marked away, with an
    ``AGENT_LEFT``, and the others go on until they speak or join again) or
    ``pause`` (the room pauses, to be resumed when they are back). With
    ``interject`` a person present may also speak between others' turns; the
    message is recorded after the turn in flight. ``max_people`` bounds how many
    may join.

    ``join`` is the owner's choice of who may take a seat through the daemon:
    ``owner`` (the owner alone, the default), ``clients`` (any client token) or a
    list of token names. Admins always may; and every joiner's token must be
    allowed to call every agent of the room (a person's words reach them all).
    """

    turn_timeout: _Seconds = 300.0
    at_timeout: Literal["skip", "pause"] = "skip"
    interject: bool = True
    max_people: Annotated[int, msgspec.Meta(ge=0, le=64)] = 8
    join: Literal["owner", "clients"] | _TokenNames = "owner"


class RoomSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A room to create: ``members`` are agent ids (or partial :class:`Member` objects).

    Invalid specs raise ``ValueError`` (``msgspec.ValidationError`` with the
    field's path when decoded from JSON). A review needs exactly two members:
    the architect first, the builder second.
    """

    topic: Annotated[str, msgspec.Meta(min_length=1)]
    members: tuple[str | Member, ...]
    mode: Mode = "chat"
    policy: TurnPolicy = "round-robin"
    awareness: Awareness | None = None
    limits: Limits = Limits()
    rules: ExitRules = ExitRules()
    people: People = People()
    id: str | None = None
    #: The sampling seed of the run: turn *n* asks its model with ``seed + n`` (None:
    #: unseeded, each run differs). Printed by the demo, settable to replay one.
    seed: Annotated[int, msgspec.Meta(ge=0, lt=2**31)] | None = None
    #: The points to get through under the topic, in order (a chat only): each turn
    #: names the current one, and when the members go round on it (what would end the
    #: room ``NO_IMPROVEMENT``) the room moves to the next; see docs/rooms.md.
    agenda: _Agenda = ()
    #: Where each chat turn's prompt goes (see :data:`TurnPromptIn`).
    turn_prompt: TurnPromptIn = "system"
    #: Start paused: recorded as paused at turn 0, exactly as if paused before its first
    #: turn, so people can join (and anyone look) before anyone speaks; resume starts it.
    paused: bool = False

    def __post_init__(self) -> None:
        check_agenda(self.agenda, self.mode)
        if self.limits.redraws and self.mode != "chat":
            # The checks judge conversation; a review's code and critiques are other texts.
            raise ValueError("redraws are for a chat; a review's verifier judges its replies")
        ids = self.member_ids()
        self._check_members(ids)
        self._check_people()
        if self.rules.verifier is not None and self.rules.verifier not in ids:
            raise ValueError(f"the verifier {self.rules.verifier!r} is not a member")
        self._check_labels()
        if self.id is not None and not valid_room_id(self.id):
            raise ValueError(
                f"room id {self.id!r}: expected lowercase letters, digits, '.', '_' or '-' "
                "(at most 64, starting with a letter or digit)"
            )

    def _check_members(self, ids: tuple[AgentId, ...]) -> None:
        if len(ids) < 2:
            raise ValueError("a room needs at least two members")
        if len(set(ids)) != len(ids):
            raise ValueError(f"members must be distinct, got {list(ids)}")
        if self.mode == "review" and len(ids) != 2:
            raise ValueError("a review room has exactly two members: architect, then builder")

    def _check_people(self) -> None:
        people = [m for m in self.members if isinstance(m, Member) and m.human]
        if self.mode == "review" and people:
            raise ValueError("a review room is between two agents; people can join chats")
        if len(people) > self.people.max_people:
            raise ValueError(f"at most {self.people.max_people} people (people.max_people)")

    def _check_labels(self) -> None:
        """The rules' labels and every member's name and role fit in ``MAX_LABEL_CHARS``."""
        labels = [("rules.goodbye", self.rules.goodbye)]
        labels.append(("rules.verified_prefix", self.rules.verified_prefix))
        for index, member in enumerate(self.members):
            if isinstance(member, Member):
                labels += [(f"members[{index}].name", member.name)]
                labels += [(f"members[{index}].role", member.role)]
        for where, label in labels:
            if label is not None and len(label) > MAX_LABEL_CHARS:
                raise ValueError(f"{where} has {len(label)} characters, at most {MAX_LABEL_CHARS}")

    def member_ids(self) -> tuple[AgentId, ...]:
        return tuple(AgentId(m) if isinstance(m, str) else m.id for m in self.members)


class Room(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A resolved room: fixed at creation, recorded in its ``WELCOME`` event.

    Only ``members`` grows afterwards: a person who joins a running room gets a
    seat at the end (recorded by their ``AGENT_JOINED``)."""

    id: RoomId
    topic: str
    members: tuple[Member, ...]
    mode: Mode = "chat"
    policy: TurnPolicy = "round-robin"
    awareness: Awareness | None = None
    limits: Limits = Limits()
    rules: ExitRules = ExitRules()
    people: People = People()
    seed: int | None = None  # see RoomSpec.seed
    agenda: tuple[str, ...] = ()  # see RoomSpec.agenda
    turn_prompt: TurnPromptIn = "system"  # see RoomSpec.turn_prompt
    created_at: int = 0  # epoch milliseconds
    #: Who created it through the daemon (``token:<id>``); None: the operator's. Only the
    #: owner or an admin may pause, resume, stop or delete it over HTTP.
    owner: str | None = None
    #: Who its turns are made for (its creator; None: nobody, so the door refuses its
    #: calls), kept with the room so a resumed room calls with the same rights.
    creator: Principal | None = None

    def principal(self) -> Principal:
        """Who this room's calls are made for, at the orchestrator's door."""
        return (self.creator or NOBODY).in_room(self.id)

    @property
    def max_turns(self) -> int:
        return self.limits.max_turns or DEFAULT_MAX_TURNS[self.mode]

    def member(self, agent_id: str) -> Member:
        for member in self.members:
            if member.id == agent_id:
                return member
        raise KeyError(agent_id)

    def verifier(self) -> AgentId | None:
        """Whose ``Verified…`` converges the room: the architect in a review."""
        return self.members[0].id if self.mode == "review" else self.rules.verifier


class RoomSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A room and where it is: what ``GET /rooms/{id}`` shows, without the transcript."""

    room: Room
    status: RoomStatus
    current_turn: int = 0  # the last turn whose message is recorded
    stop_reason: StopReason | None = None
    detail: str = ""  # why it stopped, in words
    last_seq: int = 0  # the last event's sequence number
    updated_at: int = 0  # epoch milliseconds

    @property
    def id(self) -> RoomId:
        return self.room.id


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The ``room/turn`` params: speak at ``turn`` of ``room_id``, as ``agent_id``.

    ``system`` and ``messages`` are the room from this member's perspective (its
    own messages as ``assistant``, the others' as named ``user`` messages); the
    persona puts its own system prompt before ``system``. ``timeout`` is the
    seconds the room waits for this attempt.
    """

    room_id: RoomId
    turn: int
    agent_id: AgentId
    system: str
    messages: tuple[ChatMessage, ...]
    step: Step | None = None
    timeout: float = 120.0
    #: The room's budget for this reply, in tokens (the persona's own may be smaller),
    #: and the sampling seed of this turn (None: the persona's own settings).
    max_tokens: int | None = None
    seed: int | None = None
    #: Which life of ``room_id`` this is: a room made again under a deleted room's id (or
    #: a new A2A conversation under a context id already used) starts again at turn 1,
    #: and must not look stale to an agent that took turn 3 of the old one.
    epoch: str = ""
    #: Which draw of this turn this is: the room asks a turn again (``Limits.redraws``)
    #: when a reply has a fault, and a later draw is a new reply, not a duplicate.
    draw: int = 0


class TurnReply(msgspec.Struct, frozen=True, kw_only=True):
    """The ``room/turn`` result.

    ``status`` is ``spoken`` (the model answered now), ``replayed`` (a duplicate
    of the turn this agent already answered: the same text again, the model not
    asked twice) or ``dropped`` (a stale or concurrent duplicate; ``reason`` says
    which, ``text`` is empty).
    """

    room_id: RoomId
    turn: int
    text: str = ""
    status: Literal["spoken", "replayed", "dropped"] = "spoken"
    reason: str = ""
    #: Tokens the agent's provider reported for this turn (a later field: older agents
    #: send none, older daemons ignore it).
    usage: Usage | None = None


def decode_room_spec(data: bytes | str | Mapping[str, Any]) -> RoomSpec:
    """A spec from JSON (or decoded JSON); raises :class:`InvalidRoomSpec` naming the field."""
    from mesh.rooms._errors import invalid_spec

    try:
        if isinstance(data, bytes | str):
            return msgspec.json.decode(data, type=RoomSpec)
        return msgspec.convert(data, RoomSpec)
    except UNREADABLE_JSON as exc:
        raise invalid_spec(ValueError(why_unreadable(exc))) from None
    except ValueError as exc:
        raise invalid_spec(exc) from None
