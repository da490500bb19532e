"""The heartbeat-TTL table of agents.

Agents register, beat, advertise capabilities, and expire when they go quiet:
ONLINE → STALE (one interval without a heartbeat) → OFFLINE (past the TTL) →
REMOVED (after the grace period). Every change is a `StatusChange`, delivered to
sync listeners and to async subscribers. The table is pure: callers pass the
time, and `run_expiry` is the small async driver that calls ``expire`` on time.
This package imports nothing from ``mesh`` or ``transports``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from registry._driver import run_expiry
    from registry._errors import InvalidAgentRecord, RegistryError, SubscriberOverflow, UnknownAgent
    from registry._events import DEFAULT_SUBSCRIBER_BUFFER, Listener, Subscription
    from registry._table import Registry
    from registry._types import (
        DEFAULT_GRACE,
        DEFAULT_INTERVAL,
        TTL_FACTOR,
        AgentId,
        AgentRecord,
        AgentStatus,
        ChangeKind,
        RegistryStatistics,
        StatusChange,
    )

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_INTERVAL",
    "DEFAULT_SUBSCRIBER_BUFFER",
    "TTL_FACTOR",
    "AgentId",
    "AgentRecord",
    "AgentStatus",
    "ChangeKind",
    "InvalidAgentRecord",
    "Listener",
    "Registry",
    "RegistryError",
    "RegistryStatistics",
    "StatusChange",
    "SubscriberOverflow",
    "Subscription",
    "UnknownAgent",
    "run_expiry",
]


#: Where each public name lives, loaded on first use: a process that reads the registry's
#: types (a room client decoding a room's members) does not load its table, its event
#: streams and the async driver, with anyio.
_WHERE: dict[str, str] = {
    "run_expiry": "registry._driver",
    "InvalidAgentRecord": "registry._errors",
    "RegistryError": "registry._errors",
    "SubscriberOverflow": "registry._errors",
    "UnknownAgent": "registry._errors",
    "DEFAULT_SUBSCRIBER_BUFFER": "registry._events",
    "Listener": "registry._events",
    "Subscription": "registry._events",
    "Registry": "registry._table",
    "DEFAULT_GRACE": "registry._types",
    "DEFAULT_INTERVAL": "registry._types",
    "TTL_FACTOR": "registry._types",
    "AgentId": "registry._types",
    "AgentRecord": "registry._types",
    "AgentStatus": "registry._types",
    "ChangeKind": "registry._types",
    "RegistryStatistics": "registry._types",
    "StatusChange": "registry._types",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    # Reprs and tracebacks name the public package, not the private module (as httpx does).
    if "._" in getattr(value, "__module__", ""):
        value.__module__ = __name__
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
