"""Each daemon's Ed25519 key, and the ring of every daemon's public key.

A daemon signs what it writes to NATS (calls, their answers, room control,
registry entries, leases, room events) with its own key, kept in its data
directory as ``cluster.key`` (the raw 32-byte seed, mode 0600, refused when
others may read it, as tokens are). Every reader verifies a message against the
public key of the daemon it claims to come from, so one daemon's stolen NATS
credentials speak in that daemon's name only. The public keys are published in
the mesh's keys bucket (one key per daemon id, each writable only by its
daemon) and mirrored into a :class:`KeyRing`.

What a signature covers is built by :func:`signed_bytes`: length-prefixed parts,
always including the subject or key the message is written to, so a signed
message cannot be replayed under another subject or key.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError

__all__ = [
    "DAEMON_HEADER",
    "KEY_FILE",
    "SIGNATURE_HEADER",
    "DaemonKey",
    "KeyRing",
    "Keys",
    "forged",
    "parse_public",
    "signed_bytes",
]

log = get_logger("mesh.cluster")

#: The headers of a signed NATS message: who signed it, and the signature.
DAEMON_HEADER: Final = "Mesh-Daemon"
SIGNATURE_HEADER: Final = "Mesh-Sig"

#: The daemon's key file in its data directory.
KEY_FILE: Final = "cluster.key"
_SEED_SIZE: Final = 32
_LENGTH: Final = struct.Struct(">Q").pack


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))


def signed_bytes(*parts: bytes | str) -> bytes:
    """The bytes a signature covers: each part length-prefixed (8 bytes, big-endian), so
    no two different sequences of parts give the same bytes (``("ab", "c")`` is not
    ``("a", "bc")``)."""
    # Joined once: every entry of the registry and every frame between daemons builds one.
    out: list[bytes] = []
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        out.append(_LENGTH(len(data)))
        out.append(data)
    return b"".join(out)


class DaemonKey:
    """This daemon's private key: it signs; its :attr:`public` half goes in the keys bucket."""

    __slots__ = ("_private", "public")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public: str = _b64(private.public_key().public_bytes_raw())

    @classmethod
    def generate(cls) -> DaemonKey:
        """A fresh key held in memory only (tests, and a daemon with no data directory)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> DaemonKey:
        """The key in ``path`` (a raw 32-byte seed), created 0600 if there is none.

        A file that others may read is refused: whoever reads it speaks for this
        daemon in the whole mesh."""
        path = Path(path)
        try:
            return cls._load(path)
        except FileNotFoundError:
            pass
        key = Ed25519PrivateKey.generate()
        _create_private(path, key.private_bytes_raw())
        return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> DaemonKey:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            seed = path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ClusterError(f"cannot read the daemon's key {path}: {exc.strerror}") from None
        if mode & 0o077:
            raise ClusterError(
                f"the daemon's key {path} may be read by others (mode {mode:o}); whoever "
                f"reads it speaks for this daemon in the mesh: chmod 600 {path}"
            )
        if len(seed) != _SEED_SIZE:
            raise ClusterError(
                f"the daemon's key {path} is not a 32-byte Ed25519 seed ({len(seed)} bytes); "
                "remove it to have a new key made (and its old entry in the keys bucket)"
            )
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def sign(self, data: bytes) -> str:
        """The signature of ``data`` (urlsafe base64)."""
        return _b64(self._private.sign(data))

    def __repr__(self) -> str:
        return f"DaemonKey(public={self.public!r})"


def _create_private(path: Path, seed: bytes) -> None:
    """Write ``seed`` to a new ``path``, 0600; another process that made it first wins."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ClusterError(f"cannot create the daemon's key {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as file:
        file.write(seed)
        file.flush()
        os.fsync(file.fileno())


def parse_public(public: str) -> Ed25519PublicKey | None:
    """A public key from its urlsafe base64 text; None if it is not one."""
    try:
        raw = _unb64(public)
        if len(raw) != _SEED_SIZE:
            return None
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


class KeyRing:
    """Every daemon's public key, by daemon id (mirrored from the keys bucket)."""

    __slots__ = ("_keys", "_text")

    def __init__(self) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._text: dict[str, str] = {}

    def add(self, daemon: str, public: str) -> bool:
        """Know ``daemon``'s key; False (and nothing known) if ``public`` is not a key."""
        key = parse_public(public)
        if key is None:
            return False
        self._keys[daemon] = key
        self._text[daemon] = public
        return True

    def remove(self, daemon: str) -> None:
        self._keys.pop(daemon, None)
        self._text.pop(daemon, None)

    def public(self, daemon: str) -> str | None:
        """``daemon``'s public key as published, if known."""
        return self._text.get(daemon)

    def __contains__(self, daemon: object) -> bool:
        return daemon in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def verify(self, daemon: str, data: bytes, signature: str | None) -> bool:
        """Whether ``daemon`` signed ``data``: False for an unknown daemon, a missing or
        malformed signature, or one that does not match. Never raises."""
        key = self._keys.get(daemon)
        if key is None or not signature:
            return False
        try:
            key.verify(_unb64(signature), data)
        except (InvalidSignature, binascii.Error, ValueError, UnicodeEncodeError):
            return False
        return True


class Keys:
    """This daemon's key and the ring: signs what this daemon sends, checks what it reads."""

    __slots__ = ("daemon", "key", "ring")

    def __init__(self, daemon: str, key: DaemonKey, ring: KeyRing | None = None) -> None:
        self.daemon = daemon
        self.key = key
        self.ring = ring if ring is not None else KeyRing()
        self.ring.add(daemon, key.public)

    def headers(self, *parts: bytes | str) -> dict[str, str]:
        """The headers that sign ``parts`` as this daemon's."""
        signature = self.key.sign(signed_bytes(*parts))
        return {DAEMON_HEADER: self.daemon, SIGNATURE_HEADER: signature}

    def signer(self, headers: Mapping[str, str], *parts: bytes | str) -> str | None:
        """The daemon whose valid signature of ``parts`` ``headers`` carry; None if none
        does (unsigned, an unknown daemon, or a signature that does not match)."""
        daemon = headers.get(DAEMON_HEADER)
        if daemon and self.ring.verify(daemon, signed_bytes(*parts), headers.get(SIGNATURE_HEADER)):
            return daemon
        return None


def forged(claimed: str | None, subject: str, what: str) -> None:
    """Say that a message failed verification (never its payload: it may be anything)."""
    log.warning("cluster.forged", claimed=claimed or "", subject=subject, what=what)
