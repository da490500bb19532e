"""Who may call whom: reserved methods and a manifest's access section, as checks.

Methods the daemon sends itself (``room/turn``, ``room/persona``, anything in
``mesh/``) are never relayed from outside: a stranger's ``room/turn`` would
land in a room's transcript, and a ``mesh/call`` wrapped in ``mesh/call`` would
launder the caller's identity. Everything else is checked against the target's
``access.callers`` and, for agent-to-agent calls, the caller's ``access.calls``.
Each refusal is a :class:`~mesh.Forbidden` that names the rule. So is a deadline
longer than the orchestrator allows anyone but its embedder (``max_call_timeout``):
a caller may not hold an agent's call, and its slot, for as long as it likes.

:func:`authorize` is the one door: the orchestrator runs it on every call, with
the :class:`Principal` the call is made for, before any link is touched; each
surface (``/rpc``, ``/broadcast``, ``mesh/call``, a room's turns, ``/mcp``, a
call from another daemon) only says who that is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

import msgspec

from mesh._errors import Forbidden
from mesh.manifests._types import ANY_AGENT, ANY_CLIENT, AccessSection

__all__ = [
    "DAEMON",
    "EMBEDDER",
    "NOBODY",
    "READ_METHODS",
    "RESERVED_METHODS",
    "RESERVED_PREFIX",
    "Principal",
    "authorize",
    "check_agent_call",
    "check_client_call",
    "check_deadline",
    "check_named",
    "check_relayable",
    "is_reserved",
]

#: Methods only the daemon sends (rooms ask members to speak and to introduce themselves).
RESERVED_METHODS: Final = frozenset({"room/turn", "room/persona"})
#: The mesh's own namespace: ``mesh/call`` and whatever comes after it.
RESERVED_PREFIX: Final = "mesh/"


#: What a room sends its members (a room's turns may send these and nothing else).
ROOM_METHODS: Final = RESERVED_METHODS
#: What the daemon itself asks an agent to describe it (a card, a catalog, a member's
#: introduction): reads, and nothing that acts.
READ_METHODS: Final = frozenset({"tools/list", "agent/info", "ping"})

PrincipalKind = Literal["nobody", "embedder", "daemon", "client", "agent"]


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who a call is made for; the orchestrator's door checks it on every call.

    ``nobody``: what a call is made for when its caller said no one; the door
    refuses it, so forgetting to say grants nothing. ``embedder``: the program
    that runs the orchestrator in-process (trusted: it could call the links
    itself), only ever when that program says so. ``daemon``: the daemon's own
    reads (an A2A card, the MCP catalog, a room member's description), which may
    send only ``tools/list``, ``agent/info`` and ``ping``. ``client``: a daemon token, by its name
    (``admin`` tokens may call anything but reserved methods). ``agent``: an agent
    calling through ``mesh/call``. ``room`` set: a room's turns, made for the
    room's creator (whoever the rest says), which may send ``room/turn`` and
    ``room/persona`` and nothing else.
    """

    kind: PrincipalKind
    name: str = ""
    admin: bool = False
    room: str | None = None

    @classmethod
    def client(cls, name: str, *, admin: bool = False) -> Principal:
        return cls(kind="client", name=name, admin=admin)

    @classmethod
    def agent(cls, agent_id: str) -> Principal:
        return cls(kind="agent", name=agent_id)

    def in_room(self, room_id: str) -> Principal:
        """This identity acting through room ``room_id`` (its turns and introductions)."""
        return msgspec.structs.replace(self, room=room_id)

    def describe(self) -> str:
        who = {
            "nobody": "nobody",
            "embedder": "the embedding program",
            "daemon": "the daemon's own reads",
            "client": f"{'admin' if self.admin else 'client'} token {self.name!r}",
            "agent": f"agent {self.name!r}",
        }[self.kind]
        return f"room {self.room!r} of {who}" if self.room is not None else who


#: What a call names when its caller named no one: the door refuses it.
NOBODY: Final = Principal(kind="nobody")
#: The in-process program that owns the orchestrator; trusted, and only when it says so.
EMBEDDER: Final = Principal(kind="embedder")
#: The daemon describing its agents to its surfaces: reads only (:data:`READ_METHODS`).
DAEMON: Final = Principal(kind="daemon")


def check_named(principal: Principal, *, agent: str, method: str) -> None:
    """Refuse a call made for nobody: a caller that forgot to say gets nothing."""
    if principal.kind == "nobody":
        raise Forbidden(
            "the call names nobody it is made for, and the door refuses such a call: pass "
            "on_behalf_of= (a Principal; mesh.EMBEDDER for your own program's calls)",
            agent=agent,
            method=method,
        )


def authorize(
    principal: Principal, agent: str, method: str, access_of: Callable[[str], AccessSection]
) -> None:
    """Raise :class:`~mesh.Forbidden` unless ``principal`` may send ``method`` to ``agent``.

    The rules, in order: a call made for nobody is refused; a room may send only
    what rooms send, and only to agents its creator may call; the daemon's own
    reads only read; reserved methods come from the daemon alone (an embedder, or
    a room); then the target's ``access.callers`` (an admin token passes) and, for
    an agent, its own ``access.calls``.
    """
    check_named(principal, agent=agent, method=method)
    if principal.room is not None:
        if method not in ROOM_METHODS:
            raise Forbidden(
                f"room {principal.room!r} may send only {sorted(ROOM_METHODS)}, not {method!r}",
                agent=agent,
                method=method,
            )
    elif principal.kind == "daemon":
        if method not in READ_METHODS:
            raise Forbidden(
                f"the daemon's own reads may send only {sorted(READ_METHODS)}, not {method!r}",
                agent=agent,
                method=method,
            )
    elif principal.kind != "embedder":
        check_relayable(method, agent=agent, via=principal.describe())
    if principal.kind == "client":
        check_client_call(
            access_of(agent),
            client=principal.name,
            admin=principal.admin,
            agent=agent,
            method=method,
        )
    elif principal.kind == "agent":
        check_agent_call(
            access_of(principal.name),
            access_of(agent),
            caller_id=principal.name,
            agent=agent,
            method=method,
        )


def check_deadline(
    principal: Principal, timeout: float | None, limit: float | None, *, agent: str, method: str
) -> None:
    """Refuse a deadline outside (0, ``limit``] seconds from anyone but the embedder.

    ``None`` (the agent's own ``call_timeout``, which the operator set) always passes.
    """
    if limit is None or timeout is None or principal.kind == "embedder":
        return
    if not 0 < timeout <= limit:  # NaN fails this too
        raise Forbidden(
            f"a deadline of {timeout:g} s is outside (0, {limit:g}] s, the longest this mesh "
            f"allows {principal.describe()} (max_call_timeout)",
            agent=agent,
            method=method,
            data={"limit": "max_call_timeout", "max": limit},
        )


def is_reserved(method: str) -> bool:
    return method in RESERVED_METHODS or method.startswith(RESERVED_PREFIX)


def check_relayable(method: str, *, agent: str, via: str) -> None:
    """Refuse a reserved method arriving from outside (``via``: /rpc, /broadcast, mesh/call)."""
    if is_reserved(method):
        raise Forbidden(
            f"{method!r} is reserved to the daemon and cannot be sent through {via}",
            agent=agent,
            method=method,
        )


def check_client_call(
    access: AccessSection, *, client: str, admin: bool, agent: str, method: str
) -> None:
    """May the client token named ``client`` call ``agent``? An admin always may."""
    if admin or ANY_CLIENT in access.callers or f"client:{client}" in access.callers:
        return
    raise Forbidden(
        f"agent {agent!r} does not accept calls from client token {client!r} "
        f"(its access.callers is {list(access.callers)})",
        agent=agent,
        method=method,
    )


def check_agent_call(
    caller: AccessSection,
    target: AccessSection,
    *,
    caller_id: str,
    agent: str,
    method: str,
) -> None:
    """May agent ``caller_id`` call ``agent`` through ``mesh/call``? Both sides must agree."""
    if "*" not in caller.calls and agent not in caller.calls:
        raise Forbidden(
            f"agent {caller_id!r} may not call {agent!r} "
            f"(its access.calls is {list(caller.calls)})",
            agent=agent,
            method=method,
        )
    if ANY_AGENT not in target.callers and f"agent:{caller_id}" not in target.callers:
        raise Forbidden(
            f"agent {agent!r} does not accept calls from agent {caller_id!r} "
            f"(its access.callers is {list(target.callers)})",
            agent=agent,
            method=method,
        )
