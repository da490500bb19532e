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
the trees it verified (:class:`Roots`) checks each signature once per batch, and each
further leaf of a batch only up to the first node a verified path already went through.
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
    below_root = list(enumerate(levels[:-1]))
    sealed = []
    for index, (_, body) in enumerate(entries):
        siblings = b"".join([level[(index >> depth) ^ 1] for depth, level in below_root])
        path = base64.urlsafe_b64encode(siblings).decode("ascii")
        entry = _Sealed(daemon=daemon, sig=signature, body=msgspec.Raw(body), leaf=index, path=path)
        sealed.append(_ENCODER.encode(entry))
    return sealed


def _leaf(bucket: str, kv_key: str, body: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + signed_bytes(bucket, kv_key, body)).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _siblings(index: int, path: str) -> bytes | None:
    """A leaf's sibling hashes from its path; None if the path is not one for ``index``."""
    try:
        siblings = base64.urlsafe_b64decode(path)
    except (binascii.Error, ValueError):
        return None
    depth, rest = divmod(len(siblings), _HASH)
    if rest or depth > _MAX_DEPTH or index >= 1 << depth:
        return None
    return siblings


def _climb(leaf: bytes, index: int, siblings: bytes) -> list[bytes]:
    """The nodes from a leaf up to its root: ``[leaf, parent, …, root]``."""
    nodes = [leaf]
    node = leaf
    for level in range(len(siblings) // _HASH):
        sibling = siblings[level * _HASH : (level + 1) * _HASH]
        node = _node(sibling, node) if index >> level & 1 else _node(node, sibling)
        nodes.append(node)
    return nodes


class _Tree:
    """The nodes of one batch's tree that hash up to its verified root, by (level, index).

    Each path that opened adds its nodes and their siblings, so a later leaf of the batch
    climbs only until it meets one: a batch of 64 read in order costs about two digests
    a leaf, not seven.
    """

    __slots__ = ("depth", "nodes", "path_length")

    def __init__(self, depth: int, path_length: int) -> None:
        self.depth = depth
        #: The length of every path of the batch (base64 of ``depth`` hashes): a leaf held
        #: already needs no sibling from its own path, but a path of another shape is
        #: refused here as it is in full.
        self.path_length = path_length
        self.nodes: dict[tuple[int, int], bytes] = {}

    def learn(self, index: int, siblings: bytes, climbed: list[bytes]) -> None:
        """Keep what a proven climb went through: its nodes and the siblings it hashed with.

        Only those: a path's siblings above where its climb stopped were never hashed, so
        they are whatever the entry says, and a tree holds nothing it has not proven."""
        nodes = self.nodes
        top = len(climbed) - 1
        for level, node in enumerate(climbed):
            nodes[level, index >> level] = node
            if level < top:
                nodes[level, (index >> level) ^ 1] = siblings[level * _HASH : (level + 1) * _HASH]

    def holds(self, leaf: bytes, index: int, path: str) -> bool:
        """Whether the leaf at ``index`` hashes up to the node this tree holds at a place
        of its climb (the root at the latest)."""
        if not 0 <= index < 1 << self.depth or len(path) != self.path_length:
            return False
        known = self.nodes.get((0, index))
        if known is not None:
            return known == leaf  # a sibling an earlier path carried: no digest beyond the leaf
        siblings = _siblings(index, path)
        if siblings is None or len(siblings) != self.depth * _HASH:
            return False
        node, climbed = leaf, [leaf]
        for level in range(self.depth):
            sibling = siblings[level * _HASH : (level + 1) * _HASH]
            node = _node(sibling, node) if index >> level & 1 else _node(node, sibling)
            climbed.append(node)
            known = self.nodes.get((level + 1, index >> (level + 1)))
            if known is not None:
                if known != node:
                    return False
                self.learn(index, siblings, climbed)
                return True
        return False  # not reached: the root is always held


class Roots:
    """Batch trees whose root's signature verified, so each batch costs a reader one check
    and each of its leaves a digest or two.

    Kept by writer, by the writer's key as published and by the batch's signature: a
    daemon whose key the ring no longer holds, or holds anew, has its batches checked
    again. A leaf that does not hash up to its batch's tree as held is checked in full
    (its path to a root, and that root's signature), so a forged one is refused as before.
    """

    __slots__ = ("_kept", "_trees")

    #: A tree of 64 leaves holds up to 127 nodes (about 20 KiB with the dict's keys): 256
    #: of them are ~5 MiB at most, and a batch's entries come together in the bucket's order.
    def __init__(self, kept: int = 256) -> None:
        self._trees: dict[tuple[str, str, str], _Tree] = {}
        self._kept = kept

    def opens(
        self, ring: KeyRing, daemon: str, leaf: bytes, index: int, path: str, signature: str
    ) -> bool:
        """Whether ``leaf``, at ``index`` with sibling hashes ``path``, is in a batch whose
        root ``daemon`` signed (``signature``)."""
        public = ring.public(daemon)
        if public is None:
            return False
        batch = (daemon, public, signature)
        tree = self._trees.get(batch)
        if tree is not None and tree.holds(leaf, index, path):
            return True
        siblings = _siblings(index, path)
        if siblings is None:
            return False
        climbed = _climb(leaf, index, siblings)
        if not ring.verify(daemon, signed_bytes(_BATCH_TAG, climbed[-1]), signature):
            return False
        if tree is None or tree.depth != len(climbed) - 1:
            if len(self._trees) >= self._kept:
                self._trees.clear()  # a batch's entries come together: the old ones are done
            tree = self._trees[batch] = _Tree(len(climbed) - 1, len(path))
        tree.learn(index, siblings, climbed)
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
    leaf = _leaf(bucket, kv_key, body)
    return roots.opens(ring, sealed.daemon, leaf, sealed.leaf, sealed.path, sealed.sig)
