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
- **known** — connections whose request carried credentials, shared fairly
  among their holders. When full, an idle keep-alive is closed (the largest
  holder's oldest first); if none is idle, the largest holder's newest stream is
  closed, as long as that holder would still hold more than the newcomer once it
  is in (a max-min share: a holder with fewer connections than the largest always
  gets in). Only when no holder holds more than the newcomer would, and none is
  idle, does the request get 503.
- **privileged** — the same, with ``reserved_connections`` more slots that only
  a privileged (admin) request may take, so an operator can always get in.

A known caller's connections are also counted per holder (whose credentials they
carried, :class:`Vouched`), at most ``per_holder`` each: one token that holds
slow requests open cannot fill the known pool and turn every other token away.
A holder at its bound makes room by closing its own oldest idle keep-alive; if
none is idle, its new request is refused. Privileged holders are not counted.

Long-lived streams (WebSockets) are never idle: they count towards their holder,
the application bounds how many one identity opens, and one is closed only to
give a smaller holder its share (its slot's ``evicted_for`` names the setting, so
the stream's layer can say why: :func:`eviction`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio

from transports._http_messages import HttpRequest
from transports._loop import Scope

__all__ = ["Admission", "Slot", "Standing", "Vouch", "Vouched", "current_slot", "eviction"]


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
Vouch = Callable[[HttpRequest], Standing | Vouched]

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
    #: The setting that closed this connection to make room for another holder's.
    evicted_for: str | None = None
    scope: Scope = field(default_factory=anyio.CancelScope)


#: The slot of the connection the current task serves (set around an upgraded stream's
#: handler), so the stream's layer can learn why it was cancelled.
current_slot: ContextVar[Slot | None] = ContextVar("current_slot", default=None)


def eviction() -> str | None:
    """The setting that closed the current task's connection to make room, or None."""
    slot = current_slot.get()
    return None if slot is None else slot.evicted_for


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

    def enter(self, new_scope: Callable[[], Scope] = anyio.CancelScope) -> Slot | None:
        """A slot for a new connection (its scope made by ``new_scope``: the loop's own,
        say), or None when the strangers' pool is full of connections being answered."""
        limit = self.stranger_limit
        full = limit is not None and len(self._strangers) >= limit
        if full and not self._evict(self._strangers):
            return None
        slot = Slot(scope=new_scope())
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
            if len(self._known) >= limit and not self._make_room(slot, counted):
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

    def _make_room(self, slot: Slot, holder: str | None) -> bool:
        """Close one known connection for ``slot`` (of ``holder``, None: uncounted):
        an idle keep-alive if any, else a stream of a holder that would still hold more
        than ``holder`` once ``slot`` is in. False if fairness allows neither."""
        share = self.held_by(holder) + 1 if holder is not None else 1
        largest_first = sorted(self._held.items(), key=lambda item: -len(item[1]))
        for held in (pool for _, pool in largest_first):
            if self._evict(held, keep=slot):
                return True
        if self._evict(self._known, keep=slot):  # an uncounted (privileged) idle one
            return True
        for _, held in largest_first:
            if len(held) <= share:
                break  # the rest hold no more than the newcomer would: no fairer that way
            for victim in reversed(held):  # newest first: the oldest watchers stay
                if victim.upgraded:
                    self._close(victim, POOL_FULL)
                    return True
        return False

    def _close(self, victim: Slot, setting: str | None = None) -> None:
        self.leave(victim)
        victim.evicted_for = setting
        victim.scope.cancel()
        self.evicted += 1

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
                self._close(victim)
                return True
        return False
