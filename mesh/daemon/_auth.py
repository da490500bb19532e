"""Who is asking, and may they: identities from bearer tokens, rights by role.

Every request but ``GET /health`` carries ``Authorization: Bearer <token>``
(on WebSocket upgrades, which browsers cannot give headers, the subprotocol
``bearer.<token>`` beside ``mesh``, or ``?token=``). A
token is either one the daemon issued (:class:`~mesh.daemon._tokens.TokenStore`:
admin, client, observer or agent) or a dial-in agent's token from its
manifest's variable. No token or an unknown one: 401 (WebSocket close 4001).
A token without the route's right: 403 (close 4003). Both bodies say which.

:class:`Identities` also remembers the live WebSocket connections of each issued
token, so revoking one closes them with 4001 at once.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Final

import anyio

from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh.daemon._tokens import Role, TokenEntry, TokenStore
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    TokenAuthenticator,
    WebSocketStream,
    bearer_challenge,
    bearer_token,
    protocol_token,
)
from transports._admission import Standing, Vouched

__all__ = ["Identities", "Identity", "Right", "refusal", "unauthorized"]

log = get_logger("mesh.daemon")

#: Closing a revoked token's connections is bounded: each close handshake is.
REVOKE_CLOSE_TIMEOUT: Final = 1.0


class Right(enum.StrEnum):
    """What a route needs; a role holds a set of these."""

    PUBLIC = "public"  # GET /health only
    READ = "read"  # list and watch agents and rooms
    CALL = "call"  # /rpc and /broadcast
    REGISTER = "register"  # register agents over HTTP (which the identity then owns)
    ROOMS = "rooms"  # create rooms, and control the ones it owns
    ADMIN = "admin"  # tokens; any agent or room regardless of owner
    DIAL = "dial"  # /ws: serve as an agent


RIGHTS: Final[dict[Role, frozenset[Right]]] = {
    Role.ADMIN: frozenset(
        {Right.PUBLIC, Right.READ, Right.CALL, Right.REGISTER, Right.ROOMS, Right.ADMIN}
    ),
    Role.CLIENT: frozenset({Right.PUBLIC, Right.READ, Right.CALL, Right.REGISTER, Right.ROOMS}),
    Role.OBSERVER: frozenset({Right.PUBLIC, Right.READ}),
    Role.AGENT: frozenset({Right.PUBLIC, Right.DIAL}),
}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request comes from. ``owner`` is the key of what it creates."""

    role: Role
    name: str  # the token's name, or the agent id of an agent token
    token_id: str | None = None  # None for a manifest's dial-in token
    agent: str | None = None  # the agent id, for agent tokens

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def owner(self) -> str:
        return f"token:{self.token_id}" if self.token_id else f"agent:{self.agent}"

    @property
    def principal(self) -> Principal:
        """Who calls made for this identity are made for, at the orchestrator's door."""
        if self.role is Role.AGENT:
            return Principal.agent(self.agent or self.name)
        return Principal.client(self.name, admin=self.admin)

    def may(self, right: Right) -> bool:
        return right in RIGHTS[self.role]

    def owns(self, owner: str | None) -> bool:
        """Whether this identity may change what ``owner`` created (admins may change all)."""
        return self.admin or (owner is not None and owner == self.owner)


def _identity(entry: TokenEntry) -> Identity:
    return Identity(role=entry.role, name=entry.name, token_id=entry.id, agent=entry.agent)


def refusal(status: int, message: str, **extra: object) -> HttpResponse:
    return HttpResponse.error(status, message, **extra)


class Identities:
    """Who holds each token the daemon accepts: a request's token becomes an
    :class:`Identity` (or a 401/403 for a route it may not use), and each identity's
    open streams are counted and closed when its token is revoked.

    Only the route's right is checked here; whether an identity may call a given agent or
    method is the orchestrator's door (:func:`mesh._orchestrator.access.authorize`), for
    every surface alike."""

    def __init__(
        self,
        store: TokenStore,
        dial_in_tokens: TokenAuthenticator,
        *,
        max_streams_per_identity: int = 64,
    ) -> None:
        self.store = store
        self._dial_in = dial_in_tokens
        self._streams: dict[str, set[WebSocketStream]] = {}
        #: Long-lived streams open per identity (its owner key), for the per-identity cap.
        self._open: dict[str, int] = {}
        self.max_streams = max_streams_per_identity

    def vouch(self, request: HttpRequest) -> Vouched:
        """How far a request head's token goes, and whose it is, for the server's
        connection pools."""
        upgrade = (request.header("upgrade") or "").lower() == "websocket"
        identity = self.identify(request, websocket=upgrade)
        if identity is None:
            return Vouched(Standing.STRANGER)
        if identity.admin:
            return Vouched(Standing.PRIVILEGED)
        return Vouched(Standing.KNOWN, identity.owner)

    def streams_of(self, identity: Identity) -> int:
        return self._open.get(identity.owner, 0)

    def identify(self, request: HttpRequest, *, websocket: bool = False) -> Identity | None:
        query = None
        if websocket:  # browsers cannot send headers on a WebSocket: see protocol_token
            offered = request.header("sec-websocket-protocol")
            query = request.query_value("token") or protocol_token(offered)
        token = bearer_token(request.header("authorization"), query)
        if token is None:
            return None
        entry = self.store.identify(token)
        if entry is not None:
            return _identity(entry)
        agent = self._dial_in.identify(token)
        return None if agent is None else Identity(role=Role.AGENT, name=agent, agent=agent)

    def check(self, request: HttpRequest, right: Right) -> Identity | HttpResponse:
        """The identity if it has ``right``; else the 401 or 403 that says what is missing."""
        identity = self.identify(request)
        if identity is None:
            log.info("daemon.unauthorized", client=request.client, path=request.path)
            return unauthorized(request)
        if not identity.may(right):
            return forbidden(identity, right)
        return identity

    @contextmanager
    def track(self, identity: Identity, stream: WebSocketStream) -> Iterator[bool]:
        """Count a live stream of ``identity``; yields False (and counts nothing) when it
        has ``max_streams`` open already (admins are not bounded). An issued token's
        streams are remembered, so revoking it closes them."""
        owner = identity.owner
        if not identity.admin and self._open.get(owner, 0) >= self.max_streams:
            yield False
            return
        self._open[owner] = self._open.get(owner, 0) + 1
        streams = self._streams.setdefault(identity.token_id or "", set())
        if identity.token_id is not None:
            streams.add(stream)
        try:
            yield True
        finally:
            streams.discard(stream)
            if not streams:
                self._streams.pop(identity.token_id or "", None)
            self._open[owner] -= 1
            if not self._open[owner]:
                del self._open[owner]

    async def revoke(self, id_or_name: str) -> list[TokenEntry]:
        """Revoke tokens (see :meth:`TokenStore.revoke`) and close their connections (4001)."""
        revoked = self.store.revoke(id_or_name)
        async with anyio.create_task_group() as tg:
            for entry in revoked:
                for stream in self._streams.pop(entry.id, set()):
                    tg.start_soon(_close_revoked, stream)
        return revoked


def unauthorized(request: HttpRequest) -> HttpResponse:
    """401 with the ``WWW-Authenticate: Bearer`` challenge that says what was wrong."""
    why, challenge = bearer_challenge(request.header("authorization"))
    refused = refusal(401, f"{why} (see docs/security.md)", missing="token")
    return replace(refused, headers=(*refused.headers, ("www-authenticate", challenge)))


def forbidden(identity: Identity, right: Right) -> HttpResponse:
    holders = sorted(str(role) for role, rights in RIGHTS.items() if right in rights)
    return refusal(
        403,
        f"{_article(identity.role)} {identity.role} token may not do this: it needs the "
        f"{right.value!r} right (held by {', '.join(holders)})",
        missing=str(right),
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


async def _close_revoked(stream: WebSocketStream) -> None:
    with anyio.move_on_after(REVOKE_CLOSE_TIMEOUT):
        await stream.aclose(CloseCode.UNAUTHORIZED, "token revoked")


def websocket_refusal(identity: Identity | None, right: Right) -> tuple[int, str]:
    """The close code and reason for a WebSocket that may not stay open."""
    if identity is None:
        return CloseCode.UNAUTHORIZED, "missing or unknown token"
    holders = sorted(str(role) for role, rights in RIGHTS.items() if right in rights)
    return CloseCode.FORBIDDEN, (
        f"{_article(identity.role)} {identity.role} token lacks the {right.value!r} right "
        f"(held by {', '.join(holders)})"
    )
