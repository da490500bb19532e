"""The bench's plan: each case once per round, pairs back to back, bounded by a budget.

The order (`bench._plan`) is pure; the round loop (`bench._harness.run_cases`) is
driven here with a stand-in for the measurement process, so the tests run in
milliseconds and assert what was measured, in which round, next to what.
"""

from __future__ import annotations

import itertools

import pytest

from bench import _harness
from bench._harness import (
    Case,
    RunOutput,
    Settings,
    plan_blocks,
    plan_cases,
    plan_groups,
    run_cases,
)
from bench._plan import plan_rounds
from bench._quiet import QuietPolicy
from bench._registry import Measurement, RunContext, Scenario
from bench._report import build_report
from bench._targets import evaluate, wanted


async def _never_run(ctx: RunContext) -> Measurement:
    raise AssertionError("the plan does not run scenarios")


MESH = Scenario("mesh-stdio", "stdio", _never_run, modes=("sequential",))
PIPE = Scenario("pipe-raw", "stdio", _never_run, modes=("sequential",))
MCP = Scenario("mcp-stdio", "stdio", _never_run, modes=("sequential",))
LONE = Scenario("lone", "stdio", _never_run, modes=("sequential",))
IDLE = Scenario("idle", "memory", _never_run, modes=("conns",), max_repeat=1)
PAIRS = [
    ((("mesh-stdio", "asyncio"), ("pipe-raw", "asyncio")), "sequential"),
    ((("mesh-stdio", "asyncio"), ("mcp-stdio", "asyncio")), "sequential"),
]


def _cases() -> list[Case]:
    return [Case(s, s.modes[0], "asyncio") for s in (PIPE, MCP, LONE, MESH, IDLE)]


def test_a_scenario_in_two_pairs_is_measured_once_next_to_each() -> None:
    cases = _cases()
    groups = plan_groups(cases, PAIRS)
    blocks = plan_blocks(cases, groups)
    labels = [[c.scenario.name for c in b.cases] for b in blocks]
    assert labels[0] in (
        ["pipe-raw", "mesh-stdio", "mcp-stdio"],
        ["mcp-stdio", "mesh-stdio", "pipe-raw"],
    )
    assert sorted(name for block in labels for name in block) == sorted(
        c.scenario.name for c in cases
    )


def test_rounds_cap_repeats_and_run_the_untargeted_once_after_two_rounds() -> None:
    cases = _cases()
    blocks = plan_blocks(cases, plan_groups(cases, PAIRS))
    lone = cases[2]
    passes = plan_rounds(blocks, 3, {c: c.scenario.max_repeat for c in cases}, once=[lone])
    names = [(index, sorted(c.scenario.name for b in bs for c in b.cases)) for index, bs in passes]
    assert names == [
        (0, ["idle", "mcp-stdio", "mesh-stdio", "pipe-raw"]),
        (1, ["mcp-stdio", "mesh-stdio", "pipe-raw"]),
        (0, ["lone"]),
        (2, ["mcp-stdio", "mesh-stdio", "pipe-raw"]),
    ]


class FakeRuns:
    """Stands in for the measurement process: mesh-stdio at 0.9x the pipe, every round."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.speed = itertools.cycle([1.0, 0.5, 0.8])  # the machine's load, round by round

    def run_once(self, case: Case, settings: Settings) -> RunOutput:
        self.made.append(case.label)
        speed = next(self.speed) if case.scenario is PIPE else self.last
        self.last = speed
        rate = {"pipe-raw": 1000.0, "mesh-stdio": 900.0, "mcp-stdio": 90.0}.get(
            case.scenario.name, 1.0
        )
        return RunOutput({"calls_per_s": rate * speed}, 1, {})

    last = 1.0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRuns:
    runs = FakeRuns()
    monkeypatch.setattr(_harness, "run_once", runs.run_once)
    monkeypatch.setattr(_harness, "cpu_probe_ms", lambda: 45.0)
    return runs


def _settings(rounds: int, budget_s: float | None) -> Settings:
    return Settings(
        duration=1.0,
        warmup=0.3,
        repeat=rounds,
        smoke=False,
        env_tweaks=True,
        quiet=QuietPolicy(max_attempts=2),
        budget_s=budget_s,
    )


def _report(cases: list[Case], settings: Settings) -> tuple[list[str], dict[str, object]]:
    groups = plan_groups(cases, PAIRS)
    results, group_results = run_cases(cases, settings, groups=groups, once=[cases[2]])
    return [], build_report(results, {"date": "x"}, group_results)


def test_each_case_runs_once_per_round_and_pairs_divide_within_the_round(fake: FakeRuns) -> None:
    cases = _cases()
    _, report = _report(cases, _settings(3, None))
    assert fake.made.count("mesh-stdio sequential asyncio") == 3  # in two pairs, once a round
    assert fake.made.count("idle conns asyncio") == 1
    assert fake.made.count("lone sequential asyncio") == 1
    # the machine's speed changed 2x between rounds; each round's ratio is still 0.9
    checks = {(c.target, c.backend): c for _, cs in evaluate(report) for c in cs}
    check = checks["stdio sequential / raw pipe", "asyncio"]
    assert check.value == pytest.approx(0.9)
    assert check.value.spread.count == 3  # type: ignore[union-attr]
    assert check.settled is True


def test_past_the_budget_later_rounds_give_way_and_the_first_runs_whole(fake: FakeRuns) -> None:
    cases = _cases()
    # spent as soon as anything ran: round one runs whole, nothing after it
    _, report = _report(cases, _settings(3, budget_s=1e-9))
    assert sorted(fake.made) == sorted(c.label for c in cases if c.scenario is not LONE)
    rows = {r["scenario"]: r for r in report["results"]}  # type: ignore[attr-defined]
    assert rows["lone"]["errors"] == []
    assert rows["lone"]["by_round"] == []  # its one run came after two rounds: left out
    assert len(rows["mesh-stdio"]["by_round"]) == 1


def test_the_long_modes_run_only_when_thorough() -> None:
    idle = Scenario("idle", "memory", _never_run, modes=("c1", "c10"), thorough_modes=("c10",))
    assert [c.mode for c in plan_cases([idle], ["asyncio"], thorough=False)] == ["c1"]
    assert [c.mode for c in plan_cases([idle], ["asyncio"])] == ["c1", "c10"]


def test_trio_against_asyncio_is_declared_as_a_pair_from_the_planned_rows() -> None:
    rows = [
        {"scenario": "mesh-stdio", "mode": "inflight64", "backend": b, "metric": "calls_per_s"}
        | {"higher_is_better": True, "figures": {}}
        for b in ("asyncio", "trio")
    ]
    pairs, read = wanted(rows)
    assert ((("mesh-stdio", "trio"), ("mesh-stdio", "asyncio")), "inflight64") in pairs
    assert ("mesh-idle", "conns1000", "trio") in read  # KiB per idle link: one figure, read
    assert wanted()[0] == [p for p in pairs if p[0][0][0] != "mesh-stdio" or p[1] != "inflight64"]
