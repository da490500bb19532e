"""Who gets a connection slot: strangers, known callers and the privileged, in pools of their own.

One pool for every connection let anyone who can open sockets (no token needed)
take them all, and every other request met a 503. So the server asks its
``vouch`` function, at each request head, how far the request's credentials go
(:class:`Standing`), and keeps three pools:

- **strangers** — connections that have shown no valid credentials yet. A new
  connection starts here. When the pool is full, the oldest stranger that is not
  being answered right now (silent, idle, or still sending its head) is closed to
  make room: an honest client sends its request at once and leaves the pool, so
  a flood of silent sockets only evicts itself.
- **known** — connections whose request carried credentials. When full, the
  oldest idle keep-alive among them is closed; if none is idle, the request that
  would have joined gets 503.
- **privileged** — the same, with ``reserved_connections`` more slots that only
  a privileged (admin) request may take, so an operator can always get in.

Long-lived streams (WebSockets) are never idle: they are bounded per identity
by the application, not here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from transports._http_server import HttpRequest

__all__ = ["Admission", "Slot", "Standing", "Vouch"]


class Standing(enum.IntEnum):
    """How far a request's credentials go, as the server's ``vouch`` function says."""

    STRANGER = 0
    KNOWN = 1
    PRIVILEGED = 2


#: Tells the server, from a request's head (empty body), how far its credentials go.
Vouch = Callable[["HttpRequest"], Standing]


@dataclass(eq=False, slots=True)
class Slot:
    """One connection's place in the pools."""

    standing: Standing = Standing.STRANGER
    #: Not answering a request right now (silent, idle, or reading a head): may be evicted.
    evictable: bool = True
    #: Handed over to a WebSocket: a stream, never idle.
    upgraded: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class Admission:
    """The pools of one server (see the module docstring)."""

    def __init__(self, *, strangers: int | None, known: int, reserved: int) -> None:
        self.stranger_limit = strangers
        self.known_limit = known
        self.reserved = reserved
        self._strangers: dict[Slot, None] = {}  # oldest first
        self._known: dict[Slot, None] = {}
        #: Connections closed to make room for newer ones.
        self.evicted = 0

    @property
    def strangers(self) -> int:
        return len(self._strangers)

    @property
    def known(self) -> int:
        return len(self._known)

    def enter(self) -> Slot | None:
        """A slot for a new connection, or None when the strangers' pool is full of
        connections being answered."""
        limit = self.stranger_limit
        full = limit is not None and len(self._strangers) >= limit
        if full and not self._evict(self._strangers):
            return None
        slot = Slot()
        self._strangers[slot] = None
        return slot

    def promote(self, slot: Slot, standing: Standing) -> bool:
        """Move ``slot`` up to ``standing``; False if the pool it needs is full."""
        if standing <= slot.standing:
            return True
        if slot.standing is Standing.STRANGER:
            limit = self.known_limit + (self.reserved if standing is Standing.PRIVILEGED else 0)
            if len(self._known) >= limit and not self._evict(self._known, keep=slot):
                return False
            self._strangers.pop(slot, None)
            self._known[slot] = None
        slot.standing = standing
        return True

    def leave(self, slot: Slot) -> None:
        self._strangers.pop(slot, None)
        self._known.pop(slot, None)

    def _evict(self, pool: dict[Slot, None], keep: Slot | None = None) -> bool:
        for victim in pool:
            if victim.evictable and not victim.upgraded and victim is not keep:
                del pool[victim]
                victim.scope.cancel()
                self.evicted += 1
                return True
        return False
