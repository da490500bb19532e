"""The bench's noise handling and pairing: pure logic, driven by a fake clock and fake probes."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import pytest

from bench._harness import Case, plan_cases, plan_groups
from bench._quiet import (
    Attempt,
    QuietPolicy,
    RepeatBudget,
    Spread,
    calibrate_tolerance,
    paired_values,
    probe_move,
    run_quietly,
    settled,
    verdict_margin,
)
from bench._registry import Measurement, RunContext, Scenario
from bench._targets import Check, Measured, evaluate, format_targets, wanted_pairs


class FakeMachine:
    """Attempts whose probe moves as scripted; each takes `seconds` on a fake clock."""

    def __init__(self, noises: list[float], seconds: float = 5.0) -> None:
        self._noises: Iterator[float] = iter(noises)
        self.seconds = seconds
        self.now = 0.0
        self.made = 0

    def clock(self) -> float:
        return self.now

    def attempt(self) -> Attempt[int]:
        self.made += 1
        self.now += self.seconds
        return Attempt(self.made, next(self._noises))


def _quiet(machine: FakeMachine, budget: float = 1_000.0, attempts: int = 4) -> Any:
    return run_quietly(
        machine.attempt,
        policy=QuietPolicy(tolerance=0.25, max_attempts=attempts),
        budget=RepeatBudget(budget),
        clock=machine.clock,
    )


def test_probe_move_is_relative_to_the_faster_reading() -> None:
    assert probe_move(100.0, 150.0) == pytest.approx(0.5)
    assert probe_move(150.0, 100.0) == pytest.approx(0.5)
    assert probe_move(100.0, 100.0) == 0.0


def test_a_quiet_run_is_made_once() -> None:
    machine = FakeMachine([0.1])
    quiet = _quiet(machine)
    assert (quiet.kept, quiet.attempts, quiet.noisy) == (1, 1, False)


def test_a_noisy_run_is_made_again_until_quiet() -> None:
    machine = FakeMachine([0.6, 0.4, 0.05, 0.0])
    quiet = _quiet(machine)
    assert (quiet.kept, quiet.attempts, quiet.noisy) == (3, 3, False)


def test_attempts_are_bounded_and_the_quietest_is_kept() -> None:
    machine = FakeMachine([0.9, 0.4, 0.7, 0.5, 0.01])
    quiet = _quiet(machine, attempts=4)
    assert machine.made == 4
    assert (quiet.kept, quiet.noise, quiet.noisy) == (2, 0.4, True)


def test_repeats_stop_when_the_run_wide_budget_is_spent() -> None:
    budget = RepeatBudget(8.0)
    machine = FakeMachine([0.9, 0.8, 0.7, 0.6] * 2, seconds=5.0)
    policy = QuietPolicy(tolerance=0.25, max_attempts=4)
    first = run_quietly(machine.attempt, policy=policy, budget=budget, clock=machine.clock)
    # 5 s of repeat, 3 left: one more repeat, then none
    assert first.attempts == 3
    assert budget.left() < 0
    second = run_quietly(machine.attempt, policy=policy, budget=budget, clock=machine.clock)
    assert (second.attempts, second.noisy) == (1, True)


def test_a_failure_is_not_repeated() -> None:
    machine = FakeMachine([0.0, 0.9])
    assert _quiet(machine).attempts == 1


def test_ratios_are_taken_per_round_and_skip_failed_rounds() -> None:
    rounds: list[list[dict[str, float] | None]] = [
        [{"calls_per_s": 800.0}, {"calls_per_s": 1000.0}],
        [None, {"calls_per_s": 1000.0}],
        [{"calls_per_s": 450.0}, {"calls_per_s": 500.0}],
        [{"calls_per_s": 700.0}, {"calls_per_s": 1000.0}],
    ]
    values = paired_values(rounds, "calls_per_s", operator.truediv)
    assert values == pytest.approx([0.8, 0.9, 0.7])
    spread = Spread.of(values)
    assert (spread.median, spread.low, spread.high, spread.count) == pytest.approx(
        (0.8, 0.7, 0.9, 3)
    )


def test_a_paired_ratio_holds_on_its_median_whatever_the_absolute_figures() -> None:
    # The machine slowed 2x between rounds: the ratio of medians would be 0.6 / 0.9 of
    # different minutes, the per-round ratio is what each round measured side by side.
    rounds = [
        [{"calls_per_s": 8_000.0}, {"calls_per_s": 9_000.0}],
        [{"calls_per_s": 3_900.0}, {"calls_per_s": 4_500.0}],
        [{"calls_per_s": 4_400.0}, {"calls_per_s": 5_000.0}],
    ]
    report = {
        "results": [],
        "pairs": [
            {
                "members": [["mesh-stdio", "asyncio"], ["pipe-raw", "asyncio"]],
                "mode": "sequential",
                "rounds": rounds,
            }
        ],
    }
    checks = {(c.target, c.backend): c for _, cs in evaluate(report) for c in cs}
    check = checks["stdio sequential / raw pipe", "asyncio"]
    assert check.value == pytest.approx(0.88, abs=1e-3)
    assert check.holds is True
    assert check.settled is True  # 0.867 .. 0.889, less 5 %, still above 0.8
    assert isinstance(check.value, Measured)
    assert check.value.spread is not None
    assert check.value.spread.count == 3
    text = format_targets(report)
    assert "n=3" in text
    assert "holds, unsettled" not in text
    assert "  holds\n" in text
    # one round far below: the median still holds, the verdict is not settled
    rounds.append([{"calls_per_s": 3_000.0}, {"calls_per_s": 5_000.0}])
    assert "  holds, unsettled\n" in format_targets(report)


def test_a_verdict_within_the_margin_of_its_bound_is_unsettled() -> None:
    assert settled(0.85, 0.95, 0.8) is True
    assert settled(0.83, 0.95, 0.8) is False  # 0.83 less 5 % reaches 0.8
    assert settled(1.0, 1.1, 1.2) is True
    assert settled(1.0, 1.15, 1.2) is False
    # the margin shrinks with the rounds a verdict rests on
    assert [verdict_margin(n) for n in (1, 2, 3, 5)] == [0.25, 0.10, 0.05, 0.05]
    three = Check("x", "asyncio", Measured.of([0.86, 0.9, 0.95]), 0.8, True, "x")
    two = Check("x", "asyncio", Measured.of([0.86, 0.95]), 0.8, True, "x")
    assert (three.settled, two.settled) == (True, False)  # 0.86 less 10 % reaches 0.8
    # one figure: itself and 25 %, unless load does not move it (memory): 5 %
    assert Check("ratio", "trio", 0.95, 0.8, True, "x").verdict == "holds, unsettled"
    assert Check("ratio", "trio", 1.2, 0.8, True, "x").verdict == "holds"
    assert Check("KiB", "trio", 19.6, 20.0, False, "KiB", True).verdict == "holds, unsettled"
    assert Check("KiB", "trio", 18.0, 20.0, False, "KiB", True).settled is True
    missed = Check("x", "asyncio", Measured.of([0.5, 0.55, 0.6]), 0.8, True, "x")
    assert (missed.holds, missed.settled, missed.verdict) == (False, True, "MISSED")


def test_the_tolerance_is_what_the_probe_moves_at_rest() -> None:
    # a quiet machine: the probe barely moves, the floor (25 %) applies
    assert calibrate_tolerance([45.0, 46.0, 44.0, 45.5, 45.0]) == 0.25
    # a loaded one: the probe moves 2-80 % at rest (the 90th percentile of its
    # ten moves: 80 %); a run is noisy only past that
    loaded = [100.0, 180.0, 110.0, 150.0, 100.0, 120.0, 105.0, 170.0, 100.0, 110.0, 108.0]
    assert calibrate_tolerance(loaded) == pytest.approx(0.8)
    assert calibrate_tolerance([]) == 0.25


def test_verdicts() -> None:
    assert Check("t", "asyncio", Measured(0.81), 0.8, True, "x").holds is True
    assert Check("t", "asyncio", 0.79, 0.8, True, "x").holds is False
    assert Check("t", "asyncio", 1.1, 1.2, False, "x").holds is True
    assert Check("t", "asyncio", None, 1.2, False, "x").holds is None


async def _never_run(ctx: RunContext) -> Measurement:
    raise AssertionError("planning does not run scenarios")


def test_the_targets_declare_their_pairs_and_the_plan_finds_the_planned_ones() -> None:
    wanted = wanted_pairs()
    stdio = ((("mesh-stdio", "trio"), ("pipe-raw", "trio")), "sequential")
    assert stdio in wanted
    mesh = Scenario("mesh-stdio", "stdio", _never_run, baselines=("pipe-raw",))
    pipe = Scenario("pipe-raw", "stdio", _never_run)
    fanout = Scenario("ws-fanout", "broadcast", _never_run, backends=("asyncio",))
    crowd = Scenario("mesh-broadcast", "broadcast", _never_run, baselines=("ws-fanout",))
    cases = plan_cases([mesh, pipe], ["asyncio", "trio"])
    cases += plan_cases([fanout, crowd], ["trio"])
    by_key = {g.key: g for g in plan_groups(cases, wanted)}
    assert [c.label for c in by_key[stdio].cases] == [
        "mesh-stdio sequential trio",
        "pipe-raw sequential trio",
    ]
    # a baseline that runs on asyncio only stands in for trio's pair
    fan_key = ((("mesh-broadcast", "trio"), ("ws-fanout", "trio")), "clients1000")
    assert fan_key in wanted
    assert fan_key not in by_key  # no clients1000 planned for mesh-broadcast
    fan_cases = [
        Case(crowd, "clients1000", "trio"),
        Case(fanout, "clients1000", "asyncio"),
    ]
    (group,) = plan_groups(fan_cases, [fan_key])
    assert [c.label for c in group.cases] == [
        "mesh-broadcast clients1000 trio",
        "ws-fanout clients1000 asyncio",
    ]
    # the first member never stands in from another backend
    assert plan_groups([Case(crowd, "clients1000", "asyncio"), *fan_cases[1:]], [fan_key]) == []
