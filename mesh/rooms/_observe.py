"""What rooms tell the process's metrics (turns, their duration, why rooms stop, tokens)
and, with tracing on, its spans (a turn is an ``invoke_agent`` span, GenAI conventions).

Labels stay bounded: a turn's outcome (spoken or failed), a stop reason (an
enum), a member's agent id (members are agents the mesh knows) and a token type.
Room ids are never labels: there is no bound on how many rooms a daemon sees.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from mesh._telemetry.metrics import METRICS, clock
from mesh._telemetry.tracing import operation
from mesh.providers._base import Usage
from mesh.rooms._model import Member, StopReason

__all__ = ["clock", "count_stop", "count_turn", "count_usage", "turn_span"]


def turn_span(room_id: str, member: Member, turn: int) -> AbstractContextManager[Any]:
    """``invoke_agent {name}``: one turn, the room id as the conversation's id."""
    return operation(
        f"invoke_agent {member.name}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": member.id,
            "gen_ai.agent.name": member.name,
            "gen_ai.conversation.id": room_id,
            "mesh.room.turn": turn,
        },
    )


def count_turn(started: float, spoken: bool) -> None:
    METRICS.turn_seconds.observe(("spoken" if spoken else "failed",), clock() - started)


def count_stop(reason: StopReason) -> None:
    METRICS.room_stops.add((str(reason),))


def count_usage(agent: str, usage: Usage | None) -> None:
    if usage is None:
        return
    if usage.input_tokens:
        METRICS.tokens.add((agent, "input"), usage.input_tokens)
    if usage.output_tokens:
        METRICS.tokens.add((agent, "output"), usage.output_tokens)
