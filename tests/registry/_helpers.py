"""Shared builders for the registry tests."""

from __future__ import annotations

from typing import Any

from registry import AgentId, AgentRecord, StatusChange


def record(agent_id: str, **fields: Any) -> AgentRecord:
    """A record with a readable default name and the given overrides."""
    fields.setdefault("name", agent_id.title())
    return AgentRecord(id=AgentId(agent_id), **fields)


def summary(changes: list[StatusChange]) -> list[tuple[str, str, str | None, str, float]]:
    """(kind, id, old, new, time) tuples: easy to compare and to read in a diff."""
    return [(c.kind, c.agent_id, c.old, c.new, c.time) for c in changes]
