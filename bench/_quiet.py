"""Figures the machine's load did not move: noisy runs repeated, ratios from back-to-back pairs.

The pure core of the harness (no process, no clock of its own, so its tests
pass a fake clock and fake probes):

- `probe_move`: how much the machine's speed changed across a run, from the CPU
  probe taken before and after it (`bench._cpu.cpu_probe_ms`).
- `run_quietly`: run an *attempt* (one measurement, or one round of a pair's
  measurements made back to back); while the probe says load changed during
  it, run it again, at most `QuietPolicy.max_attempts` times and within the
  run's shared `RepeatBudget` of seconds; keep the quietest attempt.
- `calibrate_tolerance`: how far the probe moves on its own on this machine right
  now (readings taken back to back at the start, nothing measured between them);
  a run is called noisy only when its probe moved more than that, so a quiet
  shared machine reads quiet and a loaded one is not repeated without end.
- `Spread` / `paired_values`: a ratio target's value is the median of one ratio
  per round (A B, A B, ...), printed with the lowest and highest, rather than
  one median divided by another measured minutes apart.
- `settled`: whether a verdict is decided, i.e. its bound lies outside its spread
  widened by a margin that shrinks with the rounds it rests on (`verdict_margin`);
  one that is not is printed as unsettled.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = [
    "Attempt",
    "Quiet",
    "QuietPolicy",
    "RepeatBudget",
    "Spread",
    "calibrate_tolerance",
    "paired_values",
    "probe_move",
    "run_quietly",
    "settled",
    "verdict_margin",
]

T = TypeVar("T")

#: A run whose CPU probe after differs from the one before by more than this
#: fraction (of the smaller) had other work land inside it: the same code
#: measured twice on a quiet shared machine differs by up to ~25 %.
PROBE_TOLERANCE = 0.25
#: Attempts of one measurement before the quietest is kept anyway.
MAX_ATTEMPTS = 4
#: The share of the probe's own moves at rest a run's move must exceed to be noisy.
CALIBRATION_QUANTILE = 0.9
#: A verdict is settled only if its bound lies outside its spread widened by this
#: fraction each way, by the number of rounds it rests on: one figure is good to
#: ~25 % on this shared machine (the same code measured twice), two rounds' range
#: may both sit on one side by chance, so 10 %; three or more, 5 %. A figure that
#: load does not move (memory per idle link) is `STEADY_MARGIN` whatever its count.
VERDICT_MARGIN = {1: 0.25, 2: 0.10}
MANY_ROUNDS_MARGIN = 0.05
STEADY_MARGIN = 0.05


def verdict_margin(count: int, *, steady: bool = False) -> float:
    """How far beyond its spread a bound must lie for a verdict resting on `count` rounds."""
    if steady:
        return STEADY_MARGIN
    return VERDICT_MARGIN.get(max(1, count), MANY_ROUNDS_MARGIN)


def probe_move(before: float, after: float) -> float:
    """How far the CPU probe moved across a run, as a fraction of the smaller reading."""
    low = min(before, after)
    return abs(after - before) / low if low > 0 else 0.0


def calibrate_tolerance(readings: Sequence[float], floor: float = PROBE_TOLERANCE) -> float:
    """The tolerance for this run: the larger of `floor` and the `CALIBRATION_QUANTILE`
    of the moves between consecutive `readings` (probes taken back to back at rest)."""
    moves = sorted(probe_move(a, b) for a, b in itertools.pairwise(readings))
    if not moves:
        return floor
    index = min(len(moves) - 1, int(CALIBRATION_QUANTILE * len(moves)))
    return max(floor, moves[index])


@dataclass(frozen=True, slots=True)
class QuietPolicy:
    tolerance: float = PROBE_TOLERANCE
    max_attempts: int = MAX_ATTEMPTS


@dataclass(slots=True)
class RepeatBudget:
    """Seconds the whole run may spend repeating noisy measurements (shared by all)."""

    seconds: float
    spent: float = 0.0

    def left(self) -> float:
        return self.seconds - self.spent


@dataclass(frozen=True, slots=True)
class Attempt(Generic[T]):
    """What one attempt measured, and the largest probe move among its runs (0: a failure,
    which no repeat would mend)."""

    value: T
    noise: float


@dataclass(frozen=True, slots=True)
class Quiet(Generic[T]):
    """The attempt kept (the quietest), how many were made, and whether even it was noisy."""

    kept: T
    noise: float
    attempts: int
    noisy: bool


def run_quietly(
    attempt: Callable[[], Attempt[T]],
    *,
    policy: QuietPolicy,
    budget: RepeatBudget,
    clock: Callable[[], float],
) -> Quiet[T]:
    """Run `attempt` until one is quiet, attempts run out or the budget does; keep the quietest.

    Only repeats are charged to `budget`: the first attempt is the run's own work.
    """
    best = attempt()
    made = 1
    while best.noise > policy.tolerance and made < policy.max_attempts and budget.left() > 0:
        started = clock()
        again = attempt()
        budget.spent += clock() - started
        made += 1
        if again.noise < best.noise:
            best = again
    return Quiet(best.value, best.noise, made, best.noise > policy.tolerance)


@dataclass(frozen=True, slots=True)
class Spread:
    """A value with the lowest and highest of what it is the median of."""

    median: float
    low: float
    high: float
    count: int = field(default=1)

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread of no values")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def relative(self) -> float:
        """Half the range as a fraction of the median: ±this."""
        return (self.high - self.low) / 2 / self.median if self.median else 0.0


def settled(low: float, high: float, bound: float, margin: float = MANY_ROUNDS_MARGIN) -> bool:
    """True if `bound` lies outside [low, high] widened by `margin` (a fraction) each way:
    every round, and a little more, falls on the same side of it."""
    return bound < low * (1 - margin) or bound > high * (1 + margin)


def paired_values(
    rounds: Sequence[Sequence[Mapping[str, float] | None]],
    figure: str,
    combine: Callable[..., float],
) -> list[float]:
    """`combine` of `figure` across each round's members (A / B for a ratio), one per round.

    A round where a member failed or lacks the figure (or has it 0) gives nothing.
    """
    values = []
    for members in rounds:
        figures = [m.get(figure) if m is not None else None for m in members]
        if all(figures):
            values.append(combine(*figures))
    return values
