"""Run every measurement in a fresh process, bounded in time, and keep what came back.

A *case* is one scenario in one mode on one backend. Each run of a case is
``python -m bench.run_one ...`` in its own session, so that on timeout the
whole process group (servers included) is SIGKILLed; children also die with
their parent (see `bench._children`). Repeats are interleaved (every case once,
then every case again) so a noisy minute on a shared machine spreads over all
cases instead of landing on one, and each figure is the median of its repeats.

Each run is bracketed by a CPU probe (`bench._cpu.cpu_probe_ms`, wall time of a
fixed loop): a run whose probe moved by more than `PROBE_TOLERANCE` had other
work land inside it, so it is made again (bounded: `bench._quiet`) and the
quietest kept; one that stayed noisy is flagged in the table and the JSON.
The cases a ratio target divides (`bench._targets`) run as a *group*: one run
of each, back to back, per round, so each round gives one ratio.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench._children import REPO_ROOT, bench_env
from bench._cpu import cpu_probe_ms
from bench._quiet import (
    PROBE_TOLERANCE,
    Attempt,
    Quiet,
    QuietPolicy,
    RepeatBudget,
    probe_move,
    run_quietly,
)
from bench._registry import Backend, Scenario
from bench.run_one import RESULT_PREFIX

__all__ = [
    "PROBE_TOLERANCE",
    "Case",
    "CaseResult",
    "Group",
    "GroupResult",
    "PairKey",
    "Settings",
    "plan_cases",
    "plan_groups",
    "run_cases",
]

#: Start-up and set-up allowed on top of warm-up + duration: opening 10,000
#: WebSocket connections takes ~30 s on a shared 2-core machine.
SETUP_ALLOWANCE_S = 150.0
#: Lines of a failed run's stderr kept to explain it.
STDERR_TAIL = 12
#: Probe readings before and after a run, in ms.
Probe = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Settings:
    duration: float
    warmup: float
    repeat: int
    smoke: bool
    env_tweaks: bool
    jobs: int = 1
    quiet: QuietPolicy = field(default_factory=QuietPolicy)
    #: Seconds the whole run may spend repeating noisy measurements.
    repeat_budget_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Case:
    scenario: Scenario
    mode: str
    backend: Backend

    @property
    def label(self) -> str:
        return f"{self.scenario.name} {self.mode} {self.backend}"


@dataclass(slots=True)
class CaseResult:
    case: Case
    runs: list[dict[str, float]] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Each kept run's CPU probe before and after, in ms (see PROBE_TOLERANCE).
    probes: list[Probe] = field(default_factory=list)
    #: Runs made again because load changed inside them, and kept runs still noisy.
    repeated: int = 0
    noisy: int = 0

    def keep(
        self, output: RunOutput | str, probe: Probe, quiet: Quiet[Any], seconds: float
    ) -> None:
        """Record a kept run (the quietest of `quiet.attempts`)."""
        self.seconds += seconds
        self.probes.append(probe)
        self.repeated += quiet.attempts - 1
        self.noisy += probe_moved(*probe)
        if isinstance(output, str):
            self.errors.append(output)
            return
        self.runs.append(output.figures)
        self.samples.append(output.samples)
        self.notes.update(output.notes)

    @property
    def flagged(self) -> list[tuple[float, float]]:
        """The runs whose probe moved more than `PROBE_TOLERANCE` allows."""
        return [p for p in self.probes if probe_moved(*p)]

    def median(self) -> dict[str, float]:
        """Each figure's median over the successful repeats."""
        names = {name for run in self.runs for name in run}
        return {
            name: statistics.median(run[name] for run in self.runs if name in run)
            for name in sorted(names)
        }


def probe_moved(before: float, after: float) -> bool:
    """True if the machine's speed changed during a run more than `PROBE_TOLERANCE`."""
    return probe_move(before, after) > PROBE_TOLERANCE


def plan_cases(
    scenarios: Sequence[Scenario], backends: Sequence[Backend], *, smoke: bool = False
) -> list[Case]:
    """Every (scenario, backend, mode) to run.

    A scenario runs on the asked backends it supports; one that supports none
    of them (an asyncio-only server measurement) runs on its own first backend,
    so that asking for trio still measures the fan-out and memory baselines.
    With `smoke`, only each scenario's `smoke_modes` run.
    """
    cases = []
    for scenario in scenarios:
        chosen = [b for b in scenario.backends if b in backends] or [scenario.backends[0]]
        modes = scenario.modes
        if smoke and scenario.smoke_modes is not None:
            modes = tuple(m for m in modes if m in scenario.smoke_modes)
        cases += [Case(scenario, mode, b) for b in chosen for mode in modes]
    return cases


def _command(case: Case, settings: Settings) -> list[str]:
    command = [sys.executable, "-m", "bench.run_one", case.scenario.name]
    command += ["--mode", case.mode, "--backend", case.backend]
    command += ["--duration", str(settings.duration), "--warmup", str(settings.warmup)]
    return [*command, "--smoke"] if settings.smoke else command


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-STDERR_TAIL:])


@dataclass(frozen=True, slots=True)
class RunOutput:
    figures: dict[str, float]
    samples: int
    notes: dict[str, str]

    @classmethod
    def parse(cls, line: str) -> RunOutput:
        data = json.loads(line.removeprefix(RESULT_PREFIX))
        figures = {str(k): float(v) for k, v in data["figures"].items()}
        notes = {str(k): str(v) for k, v in data.get("notes", {}).items()}
        return cls(figures, int(data.get("samples", 0)), notes)


def run_once(case: Case, settings: Settings) -> RunOutput | str:
    """One fresh-process run: its output, or why it failed."""
    allowance = case.scenario.setup_allowance_s or SETUP_ALLOWANCE_S
    timeout = settings.warmup + settings.duration + allowance
    process = subprocess.Popen(
        _command(case, settings),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=bench_env(tweaks=settings.env_tweaks),
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return f"timed out after {timeout:.0f} s; stderr: {_tail(err)}"
    finally:
        # The run is over either way: nothing it started may outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return RunOutput.parse(line)
    return f"exit code {process.returncode}, no result; stderr: {_tail(err)}"


#: A ratio's members, as a target asks for them: ((scenario, backend), ...) and the mode.
PairKey = tuple[tuple[tuple[str, str], ...], str]


@dataclass(frozen=True, slots=True)
class Group:
    """Cases measured back to back, one run of each per round: the A and B of a ratio."""

    key: PairKey
    cases: tuple[Case, ...]


@dataclass(slots=True)
class GroupResult:
    group: Group
    #: Per kept round, each member's figures in order (None: that run failed).
    rounds: list[list[dict[str, float] | None]] = field(default_factory=list)


def plan_groups(cases: Sequence[Case], wanted: Iterable[PairKey]) -> list[Group]:
    """The pairs (or larger groups) the targets ask for whose members this run measures.

    A member runs on the backend asked if its scenario runs there; a later member
    (a baseline) that runs on one backend only (the fan-out server, bare NATS)
    stands in from its own. A group with a member not planned is left out: its
    target falls back to the medians, or is not measured.
    """
    groups: list[Group] = []
    for members, mode in dict.fromkeys(wanted):
        found = []
        for index, (name, backend) in enumerate(members):
            same = [c for c in cases if c.scenario.name == name and c.mode == mode]
            exact = [c for c in same if c.backend == backend]
            pick = exact or (same if index else [])
            if not pick:
                break
            found.append(pick[0])
        else:
            groups.append(Group((members, mode), tuple(found)))
    return groups


def run_cases(
    cases: Sequence[Case],
    settings: Settings,
    progress: Callable[[str], None] = lambda line: None,
    groups: Sequence[Group] = (),
) -> tuple[list[CaseResult], list[GroupResult]]:
    """Run every case `settings.repeat` times; never raises for a failed run.

    A case in a group runs in that group's rounds (members back to back); the
    others run alone. Rounds and lone runs are interleaved (every one once, then
    again), and each is repeated while its CPU probe says load changed inside it
    (`bench._quiet.run_quietly`), the quietest kept. With ``settings.jobs > 1``
    runs overlap: only for --smoke, whose figures mean nothing.
    """
    results = {case: CaseResult(case) for case in cases}
    group_results = [GroupResult(g) for g in groups]
    grouped = {case for g in groups for case in g.cases}
    units: list[tuple[tuple[Case, ...], GroupResult | None]] = [
        *((g.group.cases, g) for g in group_results),
        *(((case,), None) for case in cases if case not in grouped),
    ]

    def repeats(members: tuple[Case, ...]) -> int:
        caps = [c.scenario.max_repeat for c in members if c.scenario.max_repeat]
        return min([settings.repeat, *caps])

    queue = [unit for r in range(settings.repeat) for unit in units if r < repeats(unit[0])]
    budget = RepeatBudget(settings.repeat_budget_s)
    lock = threading.Lock()
    done = 0

    def attempt(members: tuple[Case, ...]) -> Attempt[list[tuple[RunOutput | str, Probe]]]:
        runs = []
        for case in members:
            before = cpu_probe_ms()
            output = run_once(case, settings)
            runs.append((output, (round(before, 1), round(cpu_probe_ms(), 1))))
            line = output if isinstance(output, str) else _brief(output.figures)
            progress(f"  {case.label}: {line} [probe {runs[-1][1][0]}->{runs[-1][1][1]} ms]")
        failed = any(isinstance(output, str) for output, _ in runs)
        return Attempt(runs, 0.0 if failed else max(probe_move(*p) for _, p in runs))

    def run(unit: tuple[tuple[Case, ...], GroupResult | None]) -> None:
        nonlocal done
        members, group = unit
        started = time.monotonic()
        quiet = run_quietly(
            lambda: attempt(members), policy=settings.quiet, budget=budget, clock=time.monotonic
        )
        with lock:
            done += 1
            took = time.monotonic() - started
            for case, (output, probe) in zip(members, quiet.kept, strict=True):
                results[case].keep(output, probe, quiet, took / len(members))
            if group is not None:
                group.rounds.append(
                    [None if isinstance(o, str) else o.figures for o, _ in quiet.kept]
                )
            labels = " | ".join(c.label for c in members)
            state = "quiet" if not quiet.noisy else f"STILL NOISY ({quiet.noise:.0%})"
            again = f", {quiet.attempts - 1} repeat(s)" if quiet.attempts > 1 else ""
            progress(f"[{done}/{len(queue)}] {labels}: {state}{again}")

    with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
        list(pool.map(run, queue))
    return list(results.values()), group_results


def _brief(figures: dict[str, float]) -> str:
    parts = [f"{name}={value:,.1f}" for name, value in figures.items()]
    return ", ".join(parts)
