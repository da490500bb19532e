"""Signed key-value entries: what a daemon writes to a bucket, sealed with its key.

nats-py writes KV values without headers, so the signature travels inside the
value: ``{"daemon": D, "sig": S, "body": …}``, where ``S`` is daemon D's signature
of the bucket, the key and the body's exact bytes (so an entry cannot be copied
to another key or bucket). ``daemon`` comes first, so a watch still tells its own
entries' echoes by their first bytes (:func:`~mesh.cluster._wire.entry_prefix`).
A reader takes the body only if D's published key verifies it.

**Sealed together.** An Ed25519 signature costs more CPU than the rest of an entry's
way through a daemon, so entries written together (a burst of registrations, a resync)
are sealed by :func:`seal_many` under one signature: of the root of a hash tree
(RFC 6962's, with domain-separated leaves and nodes) whose leaves are what a lone seal
signs. Each entry carries its leaf's place and the sibling hashes up to the root, so it
still opens on its own, to a reader that saw none of the others; a reader that keeps
the roots it verified (:class:`Roots`) checks each signature once per batch.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from mesh._logging import get_logger
from mesh.cluster._keys import DaemonKey, KeyRing, signed_bytes

__all__ = ["Opened", "Roots", "Signing", "claimed", "seal", "seal_many", "unseal"]

log = get_logger("mesh.cluster")


class _Sealed(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    daemon: str
    sig: str = ""
    body: msgspec.Raw = msgspec.Raw(b"null")
    #: Sealed together: the leaf's place in its batch's tree (-1: sealed alone, ``sig``
    #: signs this entry), and the sibling hashes from the leaf up (urlsafe base64).
    leaf: int = -1
    path: str = ""


_DECODER: Final = msgspec.json.Decoder(_Sealed)
_ENCODER: Final = msgspec.json.Encoder()
#: What a batch's signature covers besides its root: never the bytes of a lone seal.
_BATCH_TAG: Final = "mesh/sealed-batch"
#: Entries sealed under one signature at most: 64 leaves are 6 sibling hashes (256 bytes
#: of base64) in each entry, and a signature costs each of them a 64th.
SEAL_GROUP: Final = 64
_HASH: Final = 32
#: Deeper trees than this are refused (2**16 leaves; a batch has at most SEAL_GROUP).
_MAX_DEPTH: Final = 16
#: The hash that fills a tree's missing leaves: no leaf or node hashes to it.
_EMPTY: Final = hashlib.sha256(b"\x02").digest()


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


def seal_many(
    key: DaemonKey, daemon: str, bucket: str, entries: Sequence[tuple[str, bytes]]
) -> list[bytes]:
    """Each (key, body) sealed as ``daemon``'s at ``bucket``, one signature per
    :data:`SEAL_GROUP` of them (see the module docstring); one entry is sealed alone."""
    if len(entries) == 1:
        kv_key, body = entries[0]
        return [seal(key, daemon, bucket, kv_key, body)]
    sealed: list[bytes] = []
    for start in range(0, len(entries), SEAL_GROUP):
        sealed += _seal_group(key, daemon, bucket, entries[start : start + SEAL_GROUP])
    return sealed


def _seal_group(
    key: DaemonKey, daemon: str, bucket: str, entries: Sequence[tuple[str, bytes]]
) -> list[bytes]:
    levels = [[_leaf(bucket, kv_key, body) for kv_key, body in entries]]
    while len(levels[-1]) > 1:
        below = levels[-1]
        if len(below) % 2:
            below.append(_EMPTY)
        levels.append([_node(below[i], below[i + 1]) for i in range(0, len(below), 2)])
    signature = key.sign(signed_bytes(_BATCH_TAG, levels[-1][0]))
    sealed = []
    for index, (_, body) in enumerate(entries):
        siblings = b"".join(level[(index >> depth) ^ 1] for depth, level in enumerate(levels[:-1]))
        path = base64.urlsafe_b64encode(siblings).decode("ascii")
        entry = _Sealed(daemon=daemon, sig=signature, body=msgspec.Raw(body), leaf=index, path=path)
        sealed.append(_ENCODER.encode(entry))
    return sealed


def _leaf(bucket: str, kv_key: str, body: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + signed_bytes(bucket, kv_key, body)).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root(leaf: bytes, index: int, path: str) -> bytes | None:
    """The root a leaf's path leads to; None if the path is not one."""
    try:
        siblings = base64.urlsafe_b64decode(path)
    except (binascii.Error, ValueError):
        return None
    depth, rest = divmod(len(siblings), _HASH)
    if rest or depth > _MAX_DEPTH or index >= 1 << depth:
        return None
    node = leaf
    for level in range(depth):
        sibling = siblings[level * _HASH : (level + 1) * _HASH]
        node = _node(sibling, node) if index >> level & 1 else _node(node, sibling)
    return node


class Roots:
    """Batch roots whose signature verified, so each batch costs a reader one check.

    Kept by writer and by the writer's key as published: a daemon whose key the ring
    no longer holds, or holds anew, has its roots checked again.
    """

    __slots__ = ("_kept", "_known")

    def __init__(self, kept: int = 4096) -> None:
        self._known: dict[tuple[str, str, bytes], None] = {}
        self._kept = kept

    def signed(self, ring: KeyRing, daemon: str, root: bytes, signature: str) -> bool:
        """Whether ``daemon`` signed the batch of root ``root``."""
        public = ring.public(daemon)
        if public is None:
            return False
        known = (daemon, public, root)
        if known in self._known:
            return True
        if not ring.verify(daemon, signed_bytes(_BATCH_TAG, root), signature):
            return False
        if len(self._known) >= self._kept:
            self._known.clear()  # a batch's entries come together: the old roots are done
        self._known[known] = None
        return True


def claimed(value: bytes) -> str:
    """The daemon a sealed value says wrote it (unchecked: only to learn whose key to
    read before :func:`unseal`); "" if the value is not sealed."""
    try:
        return _DECODER.decode(value).daemon
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


def unseal(
    ring: KeyRing, bucket: str, kv_key: str, value: bytes, roots: Roots | None = None
) -> Opened | None:
    """The entry if its claimed writer signed it for this key (alone or in a batch, whose
    root ``roots`` may know verified); else None, logged ``cluster.forged`` with the
    claimed daemon and the key (never the value)."""
    try:
        sealed = _DECODER.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.warning("cluster.forged", claimed="", subject=f"{bucket}/{kv_key}", what="unsigned")
        return None
    body = bytes(sealed.body)
    if not _signed(ring, roots or Roots(), sealed, bucket, kv_key, body):
        subject = f"{bucket}/{kv_key}"
        log.warning("cluster.forged", claimed=sealed.daemon, subject=subject, what="entry")
        return None
    return Opened(sealed.daemon, body)


def _signed(
    ring: KeyRing, roots: Roots, sealed: _Sealed, bucket: str, kv_key: str, body: bytes
) -> bool:
    if sealed.leaf < 0:
        return ring.verify(sealed.daemon, signed_bytes(bucket, kv_key, body), sealed.sig)
    root = _root(_leaf(bucket, kv_key, body), sealed.leaf, sealed.path)
    return root is not None and roots.signed(ring, sealed.daemon, root, sealed.sig)
