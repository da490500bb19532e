"""Signed key-value entries: what a daemon writes to a bucket, sealed with its key.

nats-py writes KV values without headers, so the signature travels inside the
value: ``{"daemon": D, "sig": S, "body": …}``, where ``S`` is daemon D's signature
of the bucket, the key and the body's exact bytes (so an entry cannot be copied
to another key or bucket). ``daemon`` comes first, so a watch still tells its own
entries' echoes by their first bytes (:func:`~mesh.cluster._wire.entry_prefix`).
A reader takes the body only if D's published key verifies it.
"""

from __future__ import annotations

from typing import Final, Protocol

import msgspec

from mesh._logging import get_logger
from mesh.cluster._keys import DaemonKey, KeyRing, signed_bytes

__all__ = ["Opened", "Signing", "claimed", "seal", "unseal"]

log = get_logger("mesh.cluster")


class _Sealed(msgspec.Struct, frozen=True, kw_only=True):
    daemon: str
    sig: str = ""
    body: msgspec.Raw = msgspec.Raw(b"null")


_DECODER: Final = msgspec.json.Decoder(_Sealed)
_ENCODER: Final = msgspec.json.Encoder()


class Signing(Protocol):
    """This daemon's key and everyone's public keys (what the key directory keeps)."""

    @property
    def key(self) -> DaemonKey: ...

    @property
    def ring(self) -> KeyRing: ...


class Opened(msgspec.Struct, frozen=True):
    """A sealed entry whose signature verified: who wrote it, and what."""

    daemon: str
    body: bytes


def seal(key: DaemonKey, daemon: str, bucket: str, kv_key: str, body: bytes) -> bytes:
    """``body`` (JSON) sealed as ``daemon``'s entry at ``bucket``/``kv_key``."""
    signature = key.sign(signed_bytes(bucket, kv_key, body))
    return _ENCODER.encode(_Sealed(daemon=daemon, sig=signature, body=msgspec.Raw(body)))


def claimed(value: bytes) -> str:
    """The daemon a sealed value says wrote it (unchecked: only to learn whose key to
    read before :func:`unseal`); "" if the value is not sealed."""
    try:
        return _DECODER.decode(value).daemon
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


def unseal(ring: KeyRing, bucket: str, kv_key: str, value: bytes) -> Opened | None:
    """The entry if its claimed writer signed it for this key; else None, logged
    ``cluster.forged`` with the claimed daemon and the key (never the value)."""
    try:
        sealed = _DECODER.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.warning("cluster.forged", claimed="", subject=f"{bucket}/{kv_key}", what="unsigned")
        return None
    body = bytes(sealed.body)
    if not ring.verify(sealed.daemon, signed_bytes(bucket, kv_key, body), sealed.sig):
        subject = f"{bucket}/{kv_key}"
        log.warning("cluster.forged", claimed=sealed.daemon, subject=subject, what="entry")
        return None
    return Opened(sealed.daemon, body)
