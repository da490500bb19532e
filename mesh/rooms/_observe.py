"""What rooms tell the process's metrics: turns, their duration, why rooms stop, tokens.

Labels stay bounded: a turn's outcome (spoken or failed), a stop reason (an
enum), a member's agent id (members are agents the mesh knows) and a token type.
Room ids are never labels: there is no bound on how many rooms a daemon sees.
"""

from __future__ import annotations

from mesh._metrics import METRICS, clock
from mesh.providers._base import Usage
from mesh.rooms._model import StopReason

__all__ = ["clock", "count_stop", "count_turn", "count_usage"]


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
