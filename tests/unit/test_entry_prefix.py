"""A daemon tells its own agent entries from the others' by their first bytes. Pure."""

from __future__ import annotations

import pytest

from mesh.cluster._wire import AGENT_ENTRY, ENCODER, AgentEntry, entry_prefix
from registry import AgentId, AgentRecord


def encoded(daemon: str) -> bytes:
    record = AgentRecord(id=AgentId("x"), name="X", metadata={"daemon": "elsewhere"})
    return ENCODER.encode(AgentEntry.of(record, daemon, 5.0, {"callers": ["agents"]}))


@pytest.mark.parametrize("daemon", ["a", "daemon-1", 'quote"d', "back\\slash", "ünï", "x" * 200])
def test_every_entry_a_daemon_writes_starts_with_its_prefix(daemon: str) -> None:
    value = encoded(daemon)
    assert value.startswith(entry_prefix(daemon))
    assert AGENT_ENTRY.decode(value).daemon == daemon


def test_no_other_daemon_s_entry_starts_with_it() -> None:
    # A name that starts another name, and the same name in a field further on.
    for daemon, other in [("a", "ab"), ("ab", "a"), ("a", "A"), ("a", 'a",')]:
        assert not encoded(other).startswith(entry_prefix(daemon))
    assert not ENCODER.encode({"id": "a", "daemon": "a"}).startswith(entry_prefix("a"))
    assert not b"".startswith(entry_prefix("a"))  # a delete or an expiry has no value
