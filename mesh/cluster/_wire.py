"""What daemons tell each other over NATS: registry entries, calls, room control.

All JSON, encoded and decoded by msgspec with one encoder and decoder per type,
so a daemon of a later version with extra fields is read by an older one
(unknown fields are ignored) and bad bytes are an error naming the path.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from mesh._orchestrator.access import Principal
from mesh.rooms import DeltaEvent
from registry import AgentId, AgentRecord

__all__ = [
    "AgentEntry",
    "CallRequest",
    "DaemonEntry",
    "LeaseEntry",
    "LivePieces",
    "RoomControl",
    "RoomControlReply",
]


class AgentEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One agent in the agents bucket: its record as its holder sees it, and the holder."""

    daemon: str
    id: str
    name: str
    status: str
    transport: str = "memory"
    endpoint: str | None = None
    capabilities: tuple[str, ...] = ()
    metadata: dict[str, Any] = {}
    heartbeat_interval: float = 10.0
    heartbeat_ttl: float = 30.0
    grace: float = 60.0
    #: The holder's default deadline for calls to it, so a remote caller waits as long.
    call_timeout: float | None = None
    #: Its manifest's access section (who may call it, whom it may call), so that the
    #: daemon a call enters checks it as the holder would; None: the defaults.
    access: dict[str, Any] | None = None
    #: When the holder first published it (epoch ms): of two daemons holding one id, the
    #: others call the earliest registered.
    registered: int = 0

    @classmethod
    def of(
        cls,
        record: AgentRecord,
        daemon: str,
        call_timeout: float | None,
        access: dict[str, Any] | None = None,
        registered: int = 0,
    ) -> AgentEntry:
        return cls(
            daemon=daemon,
            id=record.id,
            name=record.name,
            status=str(record.status),
            transport=record.transport,
            endpoint=record.endpoint,
            capabilities=tuple(sorted(record.capabilities)),
            metadata=dict(record.metadata),
            heartbeat_interval=record.heartbeat_interval,
            heartbeat_ttl=record.heartbeat_ttl,
            grace=record.grace,
            call_timeout=call_timeout,
            access=access,
            registered=registered,
        )

    def record(self, metadata: dict[str, Any]) -> AgentRecord:
        """The registry record a mirror keeps (``metadata`` says which daemon holds it)."""
        return AgentRecord(
            id=AgentId(self.id),
            name=self.name,
            transport=self.transport,
            endpoint=self.endpoint,
            capabilities=frozenset(self.capabilities),
            metadata={**self.metadata, **metadata},
            heartbeat_interval=self.heartbeat_interval,
            heartbeat_ttl=self.heartbeat_ttl,
            grace=self.grace,
        )


class DaemonEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A live daemon: its id and where its HTTP API answers."""

    id: str
    url: str = ""
    started: int = 0  # epoch ms


class LeaseEntry(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a room (a key of the leases bucket that expires unless renewed).

    ``until`` (epoch seconds, by the holder's clock) is when it lapses unless renewed:
    the bucket's TTL drops a lease its holder wrote, but a copy of an old signed lease
    put back without a TTL would otherwise name its holder for ever."""

    daemon: str
    until: float = 0.0


class CallRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A call to an agent the receiving daemon holds: the params of ``mesh/call`` on the
    link between two daemons (its answer, progress and cancel are the link's own)."""

    agent: str
    method: str
    params: Any = None
    timeout: float | None = None
    #: The daemon the call came from, and who the call is made for there: the holder
    #: checks it at its own orchestrator's door (a call without one is refused).
    origin: str = ""
    caller: Principal | None = None
    #: The caller's span, if traced: the holder's span of the call is its child.
    traceparent: str | None = None
    tracestate: str | None = None


class RoomControl(msgspec.Struct, frozen=True, kw_only=True):
    """Pause, stop or resume a room its holder runs, or a person's join, leave, say or pass there
    (asked by another daemon, which only the holder may record)."""

    room: str
    op: Literal["pause", "stop", "resume", "join", "leave", "say", "pass", "answer"]
    #: A person's operation: who (their name to join, their member id otherwise), what
    #: they said, the identity that holds their seat (qualified by its daemon), and
    #: their token as that daemon checked it (its name is the seat's ``by``; an admin
    #: may act for any seat).
    name: str = ""
    member: str = ""
    text: str = ""
    #: A person's answer to the question a member put to the room's people.
    question: str = ""
    action: str = ""
    content: dict[str, Any] | None = None
    holder: str | None = None
    person: Principal | None = None


class RoomControlReply(msgspec.Struct, frozen=True, kw_only=True):
    """The room's snapshot after the op (as JSON builtins), a person's op's result, or why
    not."""

    snapshot: Any = None
    result: Any = None
    error: str | None = None
    kind: Literal["not_found", "conflict", "forbidden", "invalid", "other"] | None = None


class LivePieces(msgspec.Struct, frozen=True, kw_only=True):
    """Pieces of replies being written in rooms its publisher runs, in the order written."""

    pieces: tuple[DeltaEvent, ...]


ENCODER: Final = msgspec.json.Encoder()


def entry_prefix(daemon: str) -> bytes:
    """The first bytes of every :class:`AgentEntry` that ``daemon`` writes.

    msgspec writes a struct's fields in the order they are declared, and ``daemon``
    is the first, so a watch can tell its own entries from the others' by these
    bytes alone, without a header or a decode.
    """
    return b'{"daemon":' + ENCODER.encode(daemon) + b","


AGENT_ENTRY: Final = msgspec.json.Decoder(AgentEntry)
DAEMON_ENTRY: Final = msgspec.json.Decoder(DaemonEntry)
LEASE_ENTRY: Final = msgspec.json.Decoder(LeaseEntry)
LIVE_PIECES: Final = msgspec.json.Decoder(LivePieces)
