"""The heartbeat-TTL table of agents.

Agents register, beat, advertise capabilities, and expire when they go quiet:
ONLINE → STALE (one interval without a heartbeat) → OFFLINE (past the TTL) →
REMOVED (after the grace period). Every change is a `StatusChange`, delivered to
sync listeners and to async subscribers. The table is pure: callers pass the
time, and `run_expiry` is the small async driver that calls ``expire`` on time.
This package imports nothing from ``mesh`` or ``transports``.
"""

from __future__ import annotations

from ._driver import run_expiry
from ._errors import InvalidAgentRecord, RegistryError, SubscriberOverflow, UnknownAgent
from ._events import DEFAULT_SUBSCRIBER_BUFFER, Listener, Subscription
from ._table import Registry
from ._types import (
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


# Reprs and tracebacks name the public package, not the private module (as httpx does).
for _name in __all__:
    _obj = globals()[_name]
    if "._" in getattr(_obj, "__module__", ""):
        _obj.__module__ = __name__
del _name, _obj
