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

A known caller's connections are also counted per holder (whose credentials they
carried, :class:`Vouched`), at most ``per_holder`` each: one token that holds
slow requests open cannot fill the known pool and turn every other token away.
A holder at its bound makes room by closing its own oldest idle keep-alive; if
none is idle, its new request is refused. Privileged holders are not counted.

Long-lived streams (WebSockets) are never idle, so never evicted: they count
towards their holder, and the application bounds how many one identity opens.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from transports._http_server import HttpRequest

__all__ = ["Admission", "Slot", "Standing", "Vouch", "Vouched"]


class Standing(enum.IntEnum):
    """How far a request's credentials go, as the server's ``vouch`` function says."""

    STRANGER = 0
    KNOWN = 1
    PRIVILEGED = 2


@dataclass(frozen=True, slots=True)
class Vouched:
    """How far a request's credentials go, and whose they are."""

    standing: Standing
    #: Whose credentials (a token's owner, say): a known holder's connections are
    #: counted, and bounded by ``max_connections_per_identity``. None: not counted.
    holder: str | None = None


#: Tells the server, from a request's head (empty body), how far its credentials go
#: (a bare :class:`Standing`) and whose they are (:class:`Vouched`).
Vouch = Callable[["HttpRequest"], "Standing | Vouched"]

#: The settings that refuse a request, named in the refusal.
POOL_FULL = "max_connections"
HOLDER_FULL = "max_connections_per_identity"


@dataclass(eq=False, slots=True)
class Slot:
    """One connection's place in the pools."""

    standing: Standing = Standing.STRANGER
    #: Not answering a request right now (silent, idle, or reading a head): may be evicted.
    evictable: bool = True
    #: Handed over to a WebSocket: a stream, never idle.
    upgraded: bool = False
    #: Whose credentials the connection was first vouched for by (counted per holder).
    holder: str | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class Admission:
    """The pools of one server (see the module docstring)."""

    def __init__(
        self, *, strangers: int | None, known: int, reserved: int, per_holder: int | None = None
    ) -> None:
        self.stranger_limit = strangers
        self.known_limit = known
        self.reserved = reserved
        self.holder_limit = per_holder
        self._strangers: dict[Slot, None] = {}  # oldest first
        self._known: dict[Slot, None] = {}
        self._held: dict[str, dict[Slot, None]] = {}  # per holder, oldest first
        #: Connections closed to make room for newer ones.
        self.evicted = 0

    @property
    def strangers(self) -> int:
        return len(self._strangers)

    @property
    def known(self) -> int:
        return len(self._known)

    def held_by(self, holder: str) -> int:
        return len(self._held.get(holder, ()))

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

    def promote(self, slot: Slot, vouched: Standing | Vouched) -> str | None:
        """Move ``slot`` up to what ``vouched`` says; None, or the setting that refuses it
        (:data:`POOL_FULL`, :data:`HOLDER_FULL`)."""
        if isinstance(vouched, Vouched):
            standing, holder = vouched.standing, vouched.holder
        else:
            standing, holder = vouched, None
        if standing <= slot.standing:
            return None
        if slot.standing is Standing.STRANGER:
            counted = holder if standing is Standing.KNOWN else None
            if counted is not None and not self._room_for_holder(slot, counted):
                return HOLDER_FULL
            limit = self.known_limit + (self.reserved if standing is Standing.PRIVILEGED else 0)
            if len(self._known) >= limit and not self._evict(self._known, keep=slot):
                return POOL_FULL
            self._strangers.pop(slot, None)
            self._known[slot] = None
            if counted is not None:
                slot.holder = counted
                self._held.setdefault(counted, {})[slot] = None
        elif standing is Standing.PRIVILEGED:
            self._unhold(slot)  # the privileged are not counted
        slot.standing = standing
        return None

    def leave(self, slot: Slot) -> None:
        self._strangers.pop(slot, None)
        self._known.pop(slot, None)
        self._unhold(slot)

    def _room_for_holder(self, slot: Slot, holder: str) -> bool:
        held = self._held.get(holder)
        limit = self.holder_limit
        if limit is None or held is None or len(held) < limit:
            return True
        return self._evict(held, keep=slot)

    def _unhold(self, slot: Slot) -> None:
        if slot.holder is None:
            return
        held = self._held[slot.holder]
        held.pop(slot, None)
        if not held:
            del self._held[slot.holder]
        slot.holder = None

    def _evict(self, pool: dict[Slot, None], keep: Slot | None = None) -> bool:
        for victim in pool:
            if victim.evictable and not victim.upgraded and victim is not keep:
                self.leave(victim)
                victim.scope.cancel()
                self.evicted += 1
                return True
        return False
