"""Daemon keys: signing and verifying, what a signature covers, and the key file's rules."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mesh.cluster import ClusterError
from mesh.cluster._keys import DaemonKey, KeyRing, signed_bytes


def test_a_signature_verifies_against_its_daemon_only() -> None:
    a, b = DaemonKey.generate(), DaemonKey.generate()
    ring = KeyRing()
    assert ring.add("a", a.public) and ring.add("b", b.public)
    data = signed_bytes("mesh.C.calls.b", "_INBOX_mesh_a.x.1", b'{"agent":"x"}')
    signature = a.sign(data)
    assert ring.verify("a", data, signature)
    assert not ring.verify("b", data, signature)  # the wrong key
    assert not ring.verify("c", data, signature)  # an unknown daemon
    assert not ring.verify("a", data + b" ", signature)  # tampered data
    assert not ring.verify("a", data, None)  # unsigned
    assert not ring.verify("a", data, "")
    assert not ring.verify("a", data, "not base64 !!")  # never raises
    assert not ring.verify("a", data, signature[:-4] + "AAAA")


def test_signed_bytes_cannot_be_shifted_between_parts() -> None:
    assert signed_bytes("ab", "c") != signed_bytes("a", "bc")
    assert signed_bytes("a", b"") != signed_bytes("a")
    assert signed_bytes("x", b"y") == signed_bytes(b"x", "y")


def test_a_ring_refuses_what_is_not_a_key() -> None:
    ring = KeyRing()
    assert not ring.add("a", "short")
    assert not ring.add("a", "!!!")
    assert "a" not in ring and len(ring) == 0
    key = DaemonKey.generate()
    ring.add("a", key.public)
    assert ring.public("a") == key.public
    ring.remove("a")
    assert not ring.verify("a", b"x", key.sign(b"x"))


def test_the_key_file_is_made_0600_and_read_again(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    first = DaemonKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_bytes()) == 32
    again = DaemonKey.load_or_create(path)
    assert again.public == first.public
    ring = KeyRing()
    ring.add("d", first.public)
    assert ring.verify("d", b"m", again.sign(b"m"))


def test_a_key_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    DaemonKey.load_or_create(path)
    os.chmod(path, 0o644)
    with pytest.raises(ClusterError, match=r"may be read by others \(mode 644\).*chmod 600"):
        DaemonKey.load_or_create(path)


def test_a_key_file_that_is_not_a_seed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    path.write_bytes(b"nope")
    os.chmod(path, 0o600)
    with pytest.raises(ClusterError, match="not a 32-byte Ed25519 seed"):
        DaemonKey.load_or_create(path)
