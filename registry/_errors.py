"""The registry's exceptions, in one tree.

::

    RegistryError                  base of everything the registry raises
    ├── UnknownAgent               (also LookupError) an id the table does not hold
    ├── InvalidAgentRecord         (also ValueError) a record or field mapping that cannot be used
    └── SubscriberOverflow         a subscriber fell a whole buffer behind and was closed

Each message names the agent (or the subscriber's buffer) and what to do next.
"""

from __future__ import annotations

__all__ = ["InvalidAgentRecord", "RegistryError", "SubscriberOverflow", "UnknownAgent"]


class RegistryError(Exception):
    """Base class of the errors the registry raises."""


class UnknownAgent(RegistryError, LookupError):
    """The table holds no agent with this id.

    It was never registered, was deregistered, or was removed after its grace
    period; an agent that is still alive should register again.
    """

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"unknown agent {agent_id!r}: it was never registered, was deregistered, "
            "or was removed after going offline (register it again)"
        )
        self.agent_id = agent_id


class InvalidAgentRecord(RegistryError, ValueError):
    """A record, or the mapping it was built from, cannot be registered.

    The message says which field and why (for mappings, msgspec's path, e.g.
    ``$.heartbeat_interval``).
    """


class SubscriberOverflow(RegistryError):
    """Raised from a subscription's iterator after it fell a whole buffer behind.

    The registry never waits for a subscriber: when one's buffer is full, the
    registry closes it instead. The subscriber still receives every event that
    was buffered (they are in order and complete up to this point), then this
    error. Recover by subscribing again and reading ``Registry.list()`` with no
    ``await`` in between, which gives a snapshot consistent with the new stream.
    """

    def __init__(self, max_buffer: int) -> None:
        super().__init__(
            f"subscriber fell more than {max_buffer} events behind and was closed; "
            "subscribe again and resync from Registry.list()"
        )
        self.max_buffer = max_buffer
