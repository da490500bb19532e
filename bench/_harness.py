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
The cases a ratio target divides (`bench._targets`) run as a *group*, back to
back in each round (`bench._plan`: each case once per round however many ratios
it is in), so each round gives one ratio. A run-wide budget bounds the time:
later rounds give way.
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
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench._children import REPO_ROOT, bench_env
from bench._cpu import cpu_probe_ms
from bench._plan import Block, estimate_s, order_blocks, plan_rounds
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
    #: Seconds the whole run may take (None: no bound): later rounds give way.
    budget_s: float | None = None
    #: Name each measurement on stderr as it starts, with its pid (what runs now).
    verbose: bool = False


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
    #: Each round's figures (None: failed, or not run in that round), for pairing by round.
    by_round: list[dict[str, float] | None] = field(default_factory=list)
    _flagged: list[Probe] = field(default_factory=list)

    def keep(
        self, output: RunOutput | str, probe: Probe, quiet: Quiet[Any], seconds: float
    ) -> None:
        """Record a kept run (the quietest of `quiet.attempts`)."""
        self.seconds += seconds
        self.probes.append(probe)
        self.repeated += quiet.attempts - 1
        self.noisy += quiet.noisy
        if quiet.noisy:
            self._flagged.append(probe)
        if isinstance(output, str):
            self.errors.append(output)
            return
        self.runs.append(output.figures)
        self.samples.append(output.samples)
        self.notes.update(output.notes)

    @property
    def flagged(self) -> list[tuple[float, float]]:
        """The kept runs whose probe moved more than the run's tolerance allows."""
        return list(self._flagged)

    def median(self) -> dict[str, float]:
        """Each figure's median over the successful repeats."""
        names = {name for run in self.runs for name in run}
        return {
            name: statistics.median(run[name] for run in self.runs if name in run)
            for name in sorted(names)
        }


def plan_cases(
    scenarios: Sequence[Scenario],
    backends: Sequence[Backend],
    *,
    smoke: bool = False,
    thorough: bool = True,
) -> list[Case]:
    """Every (scenario, backend, mode) to run.

    A scenario runs on the asked backends it supports; one that supports none
    of them (an asyncio-only server measurement) runs on its own first backend,
    so that asking for trio still measures the fan-out and memory baselines.
    With `smoke`, only each scenario's `smoke_modes` run; without `thorough`, its
    `thorough_modes` (minutes each) do not.
    """
    cases = []
    for scenario in scenarios:
        chosen = [b for b in scenario.backends if b in backends] or [scenario.backends[0]]
        modes = scenario.modes
        if smoke and scenario.smoke_modes is not None:
            modes = tuple(m for m in modes if m in scenario.smoke_modes)
        if not thorough:
            modes = tuple(m for m in modes if m not in scenario.thorough_modes)
        cases += [Case(scenario, mode, b) for b in chosen for mode in modes]
    return cases


def _command(case: Case, settings: Settings) -> list[str]:
    command = [sys.executable, "-m", "bench.run_one", case.scenario.name]
    command += ["--module", case.scenario.run.__module__]
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


#: Process groups of the runs under way; `stop_runs` kills them when the run is stopped.
_LIVE: set[int] = set()
_STOPPING = threading.Event()


def stop_runs() -> None:
    """Stop the run: no further measurement starts, and those under way are killed with
    their process groups (each runs in a session of its own, out of reach of the
    terminal's Ctrl-C)."""
    _STOPPING.set()
    for group in list(_LIVE):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def run_once(case: Case, settings: Settings) -> RunOutput | str:
    """One fresh-process run: its output, or why it failed."""
    if _STOPPING.is_set():
        return "stopped"
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
    _LIVE.add(process.pid)
    if settings.verbose:
        print(f"  started {case.label} (pid {process.pid})", file=sys.stderr, flush=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return f"timed out after {timeout:.0f} s; stderr: {_tail(err)}"
    finally:
        # The run is over either way: nothing it started may outlive it.
        _LIVE.discard(process.pid)
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


@dataclass(slots=True)
class Clock:
    """The run's wall clock against its budget (None: no budget)."""

    budget_s: float | None
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def fits(self, seconds: float) -> bool:
        return self.budget_s is None or self.elapsed() + seconds <= self.budget_s


@dataclass(slots=True)
class _Progress:
    """What the run has done, for its progress lines and its time estimates."""

    planned: int
    rounds: int
    done: int = 0
    skipped: int = 0
    took: dict[Case, float] = field(default_factory=dict)

    def estimate(self, case: Case, settings: Settings) -> float:
        took = self.took.get(case)
        return estimate_s(case.scenario.name, settings.warmup, settings.duration, took)


def plan_blocks(cases: Sequence[Case], groups: Sequence[Group]) -> list[Block[Case]]:
    """The run's blocks (`bench._plan`): each group's members back to back, each case once."""
    twin = {case: (case.scenario.name, case.mode) for case in cases}
    return order_blocks(cases, [g.cases for g in groups], twin)


def estimate_plan_s(
    cases: Sequence[Case], settings: Settings, once: Collection[Case] = ()
) -> float:
    """Seconds the planned rounds take at the estimates of `bench._plan`, before repeats."""
    total = 0.0
    for case in cases:
        runs = (
            1 if case in once else min(settings.repeat, case.scenario.max_repeat or settings.repeat)
        )
        total += runs * estimate_s(case.scenario.name, settings.warmup, settings.duration)
    return total


def run_cases(
    cases: Sequence[Case],
    settings: Settings,
    progress: Callable[[str], None] = lambda line: None,
    groups: Sequence[Group] = (),
    once: Collection[Case] = (),
) -> tuple[list[CaseResult], list[GroupResult]]:
    """Measure every case once per round, `settings.repeat` rounds (the cases in `once`:
    in one, after two rounds of the rest); never raises for a failed run.

    Each round runs the blocks of `plan_blocks` in order: a group's members back
    to back, each case once however many ratios it is in. A run whose CPU probe
    says load changed inside it is made again at once (`bench._quiet.run_quietly`),
    the quietest kept. With `settings.budget_s`, a block of a later round that
    would end past the budget is left out (the first round always runs whole), so
    the run ends in bounded time with fewer rounds where the machine was slow.
    With ``settings.jobs > 1`` blocks overlap: only for --smoke, whose figures
    mean nothing.
    """
    results = {case: CaseResult(case) for case in cases}
    caps = {case: case.scenario.max_repeat for case in cases}
    passes = plan_rounds(plan_blocks(cases, groups), settings.repeat, caps, once)
    by_round: dict[Case, list[dict[str, float] | None]] = {case: [] for case in cases}
    budget = RepeatBudget(settings.repeat_budget_s)
    clock = Clock(settings.budget_s)
    planned = sum(len(b.cases) for _, blocks in passes for b in blocks)
    state = _Progress(planned=planned, rounds=settings.repeat)
    lock = threading.Lock()

    def measure(case: Case, index: int) -> None:
        started = time.monotonic()
        quiet = run_quietly(
            lambda: _attempt(case, settings, progress),
            policy=settings.quiet,
            budget=budget,
            clock=time.monotonic,
        )
        output, probe = quiet.kept
        took = time.monotonic() - started
        with lock:
            state.done += 1
            state.took[case] = took / quiet.attempts
            results[case].keep(output, probe, quiet, took)
            slots = by_round[case]
            slots += [None] * (index + 1 - len(slots))
            slots[index] = None if isinstance(output, str) else output.figures
            verdict = "quiet" if not quiet.noisy else f"STILL NOISY ({quiet.noise:.0%})"
            again = f", {quiet.attempts - 1} repeat(s)" if quiet.attempts > 1 else ""
            progress(
                f"[{state.done}/{state.planned - state.skipped} round {index + 1}/{state.rounds},"
                f" {clock.elapsed() / 60:.1f} min] {case.label}: {verdict}{again}"
            )

    def run_block(block: Block[Case], index: int, must: bool) -> None:
        if _STOPPING.is_set():
            return
        members = list(block.cases)
        if not must and not clock.fits(sum(state.estimate(c, settings) for c in members)):
            with lock:
                state.skipped += len(members)
            progress(f"  round {index + 1}: over budget, left out {_labels(members)}")
            return
        for case in members:
            measure(case, index)

    with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
        try:
            for number, (index, blocks) in enumerate(passes):
                must = [number == 0] * len(blocks)
                list(pool.map(run_block, blocks, [index] * len(blocks), must))
        except BaseException:  # Ctrl-C, or SIGTERM (see bench.__main__): stop at once
            stop_runs()
            raise
    group_results = []
    for group in groups:
        slots = [by_round[case] for case in group.cases]
        count = max((len(s) for s in slots), default=0)
        measured = [[s[i] if i < len(s) else None for s in slots] for i in range(count)]
        group_results.append(GroupResult(group, [r for r in measured if any(r)]))
    for case, result in results.items():
        result.by_round = by_round[case]
    return list(results.values()), group_results


def _attempt(
    case: Case, settings: Settings, progress: Callable[[str], None]
) -> Attempt[tuple[RunOutput | str, Probe]]:
    """One run of `case`, bracketed by the CPU probe."""
    before = cpu_probe_ms()
    output = run_once(case, settings)
    probe = (round(before, 1), round(cpu_probe_ms(), 1))
    line = output if isinstance(output, str) else _brief(output.figures)
    progress(f"  {case.label}: {line} [probe {probe[0]}->{probe[1]} ms]")
    noise = 0.0 if isinstance(output, str) else probe_move(*probe)
    return Attempt((output, probe), noise)


def _labels(cases: Sequence[Case]) -> str:
    return ", ".join(c.label for c in cases)


def _brief(figures: dict[str, float]) -> str:
    parts = [f"{name}={value:,.1f}" for name, value in figures.items()]
    return ", ".join(parts)
