"""Bearer tokens for WebSocket links: each token maps to exactly one agent id.

Tokens are kept only as SHA-256 digests and matched by digest, never compared
as secrets; they are never logged. A revoked token is simply no longer known.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "WS_PROTOCOL",
    "TokenAuthenticator",
    "bearer_challenge",
    "bearer_token",
    "protocol_token",
]

_BEARER: Final = "bearer "


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenAuthenticator:
    """Maps presented tokens to agent ids."""

    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        """``tokens`` maps *token* to *agent id*."""
        self._by_digest: dict[bytes, str] = {}
        for token, agent_id in (tokens or {}).items():
            self.add(token, agent_id)

    def add(self, token: str, agent_id: str) -> None:
        if not token:
            raise ValueError("a token must not be empty")
        self._by_digest[_digest(token)] = agent_id

    def revoke(self, token: str) -> bool:
        """Forget a token; True if it was known."""
        return self._by_digest.pop(_digest(token), None) is not None

    def revoke_agent(self, agent_id: str) -> int:
        """Forget every token of an agent; returns how many."""
        doomed = [d for d, a in self._by_digest.items() if a == agent_id]
        for digest in doomed:
            del self._by_digest[digest]
        return len(doomed)

    def identify(self, token: str | None) -> str | None:
        """The agent id a token belongs to, or None for a missing or unknown token."""
        if not token:
            return None
        # Lookup is by SHA-256 digest, so no comparison ever touches a stored
        # token: any timing difference concerns the digest of what the caller
        # sent, which tells an attacker nothing about a valid token. (A linear
        # scan with hmac.compare_digest would add nothing but O(n) per connect.)
        return self._by_digest.get(_digest(token))

    def agents(self) -> Iterable[str]:
        return set(self._by_digest.values())

    def __len__(self) -> int:
        return len(self._by_digest)


#: The subprotocol a browser's WebSocket selects (see :func:`protocol_token`).
WS_PROTOCOL: Final = "mesh"
_PROTOCOL_BEARER: Final = "bearer."


def bearer_token(authorization: str | None, query_token: str | None) -> str | None:
    """The token from ``Authorization: Bearer …`` (preferred) or ``?token=`` (for browsers)."""
    if authorization and authorization[: len(_BEARER)].lower() == _BEARER:
        return authorization[len(_BEARER) :].strip() or None
    return query_token or None


def protocol_token(offered: str | None) -> str | None:
    """The token a browser offers as the WebSocket subprotocol ``bearer.<token>``.

    A browser's WebSocket cannot send headers, and a token in the URL is shown in
    its console and logs; so the page offers two subprotocols, ``mesh`` (which
    the server selects) and ``bearer.<token>`` (which it reads and never echoes).
    """
    for value in (offered or "").split(","):
        value = value.strip()
        if value.startswith(_PROTOCOL_BEARER):
            return value[len(_PROTOCOL_BEARER) :] or None
    return None


def bearer_challenge(authorization: str | None, *, realm: str = "mesh") -> tuple[str, str]:
    """Why a request was refused with 401, and its ``WWW-Authenticate`` value (RFC 6750).

    Says whether the token was missing, refused, or sent with another scheme
    (``Basic``: use Bearer); never repeats what was sent.
    """
    scheme = (authorization or "").strip().partition(" ")[0]
    if not scheme:
        why, error = "missing token: send `Authorization: Bearer <token>`", ""
        description = "missing token"
    elif scheme.lower() != _BEARER.strip():
        shown = scheme[:16] if scheme.isalnum() else "another"
        why = f"the {shown} scheme is not accepted: send `Authorization: Bearer <token>`"
        error, description = "invalid_request", "use the Bearer scheme"
    else:
        why = "this token is not valid (unknown or revoked)"
        error, description = "invalid_token", "the token is unknown or revoked"
    challenge = f'Bearer realm="{realm}"'
    if error:
        challenge += f', error="{error}"'
    return why, f'{challenge}, error_description="{description}"'
