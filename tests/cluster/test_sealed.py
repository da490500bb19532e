"""Signed key-value entries: a reader takes an entry only with its claimed writer's signature."""

from __future__ import annotations

from structlog.testing import capture_logs

from mesh.cluster._keys import DaemonKey, KeyRing
from mesh.cluster._sealed import Opened, seal, unseal
from mesh.cluster._wire import entry_prefix

A, B = DaemonKey.generate(), DaemonKey.generate()
RING = KeyRing()
RING.add("a", A.public)
RING.add("b", B.public)
BODY = b'{"daemon":"b","id":"bob"}'


def test_an_entry_sealed_by_its_writer_opens() -> None:
    value = seal(B, "b", "mesh-mesh-agents", "agent.b.bob", BODY)
    assert value.startswith(entry_prefix("b"))  # a watch still skips its own echoes
    assert unseal(RING, "mesh-mesh-agents", "agent.b.bob", value) == Opened("b", BODY)


def test_an_entry_a_wrote_in_bs_name_or_moved_elsewhere_is_refused_and_logged() -> None:
    forged = seal(A, "b", "mesh-mesh-leases", "tea", b'{"daemon":"b"}')  # a's key, b's name
    moved = seal(B, "b", "mesh-mesh-leases", "tea", b'{"daemon":"b"}')
    stranger = seal(DaemonKey.generate(), "z", "mesh-mesh-leases", "tea", b"{}")
    with capture_logs() as logs:
        assert unseal(RING, "mesh-mesh-leases", "tea", forged) is None
        assert unseal(RING, "mesh-mesh-leases", "coffee", moved) is None  # another key
        assert unseal(RING, "mesh-mesh-leases", "tea", stranger) is None  # an unknown daemon
        assert unseal(RING, "mesh-mesh-leases", "tea", b'{"daemon":"b"}') is None  # unsigned
        assert unseal(RING, "mesh-mesh-leases", "tea", b"not json") is None
    assert [entry["event"] for entry in logs] == ["cluster.forged"] * 5
    assert [entry["claimed"] for entry in logs] == ["b", "b", "z", "b", ""]
    assert all("daemon" not in entry["subject"] for entry in logs)  # never the value
