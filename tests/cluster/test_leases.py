"""A room's lease as a reader takes it: signed by the daemon it names, live until its
``until`` plus the clock skew, and that ``until`` capped at one TTL after it was stored."""

from __future__ import annotations

from structlog.testing import capture_logs

from mesh.cluster._keys import DaemonKey, KeyRing
from mesh.cluster._rooms import CLOCK_SKEW, open_lease
from mesh.cluster._sealed import seal
from mesh.cluster._wire import ENCODER, LeaseEntry

A, B = DaemonKey.generate(), DaemonKey.generate()
RING = KeyRing()
RING.add("a", A.public)
RING.add("b", B.public)
BUCKET, TTL, STORED = "mesh-mesh-leases", 10.0, 1_000_000.0


def lease(until: float, daemon: str = "b", key: DaemonKey = B, signer: str = "b") -> bytes:
    body = ENCODER.encode(LeaseEntry(daemon=daemon, until=until))
    return seal(key, signer, BUCKET, "tea", body)


def read(value: bytes, at: float) -> LeaseEntry | None:
    """The lease as a reader sees it at ``at``, the value having been stored at STORED."""
    return open_lease(RING, BUCKET, "tea", value, age=at - STORED, ttl=TTL, now=at)


def test_a_holders_lease_counts_until_its_until_plus_the_skew() -> None:
    value = lease(STORED + TTL)  # as a holder writes it: a TTL from now
    assert read(value, STORED) == LeaseEntry(daemon="b", until=STORED + TTL)
    assert read(value, STORED + TTL + CLOCK_SKEW) is not None
    assert read(value, STORED + TTL + CLOCK_SKEW + 1) is None


def test_an_until_far_ahead_counts_only_one_ttl_and_the_skew_after_it_was_stored() -> None:
    value = lease(STORED + 365 * 86400)  # a year: one write would hold the room a year
    with capture_logs() as logs:
        held = read(value, STORED)
    assert held == LeaseEntry(daemon="b", until=STORED + TTL + CLOCK_SKEW)
    assert [entry["event"] for entry in logs] == ["cluster.lease_capped"]
    assert read(value, STORED + TTL + 2 * CLOCK_SKEW) is not None
    # read again later, the cap stays where the value was stored: it has lapsed
    assert read(value, STORED + TTL + 2 * CLOCK_SKEW + 1) is None


def test_a_clock_ahead_by_less_than_the_skew_is_not_capped() -> None:
    value = lease(STORED + TTL + CLOCK_SKEW)  # the holder's clock runs the skew ahead
    with capture_logs() as logs:
        assert read(value, STORED) == LeaseEntry(daemon="b", until=STORED + TTL + CLOCK_SKEW)
    assert logs == []


def test_a_lease_not_signed_by_the_daemon_it_names_is_nobodys() -> None:
    until = STORED + TTL
    unsigned = ENCODER.encode(LeaseEntry(daemon="b", until=until))
    with capture_logs() as logs:
        assert read(unsigned, STORED) is None
        assert read(lease(until, key=A, signer="a"), STORED) is None  # A signs B's name
        assert read(lease(until, key=A, signer="b"), STORED) is None  # A's key as B's
    assert [entry["event"] for entry in logs] == ["cluster.forged"] * 3
    assert read(lease(until, daemon="a", key=A, signer="a"), STORED) is not None  # A's own
