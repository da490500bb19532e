"""Who may call whom: reserved methods and a manifest's access section, as checks.

Methods the daemon sends itself (``room/turn``, ``room/persona``, anything in
``mesh/``) are never relayed from outside: a stranger's ``room/turn`` would
land in a room's transcript, and a ``mesh/call`` wrapped in ``mesh/call`` would
launder the caller's identity. Everything else is checked against the target's
``access.callers`` and, for agent-to-agent calls, the caller's ``access.calls``.
Each refusal is a :class:`~mesh.Forbidden` that names the rule.
"""

from __future__ import annotations

from typing import Final

from mesh._errors import Forbidden
from mesh.manifests._types import ANY_AGENT, ANY_CLIENT, AccessSection

__all__ = [
    "RESERVED_METHODS",
    "RESERVED_PREFIX",
    "check_agent_call",
    "check_client_call",
    "check_relayable",
    "is_reserved",
]

#: Methods only the daemon sends (rooms ask members to speak and to introduce themselves).
RESERVED_METHODS: Final = frozenset({"room/turn", "room/persona"})
#: The mesh's own namespace: ``mesh/call`` and whatever comes after it.
RESERVED_PREFIX: Final = "mesh/"


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
