"""Run every measurement in a fresh process, bounded in time, and keep what came back.

A *case* is one scenario in one mode on one backend. Each run of a case is
``python -m bench.run_one ...`` in its own session, so that on timeout the
whole process group (servers included) is SIGKILLed; children also die with
their parent (see `bench._children`). Repeats are interleaved (every case once,
then every case again) so a noisy minute on a shared machine spreads over all
cases instead of landing on one, and each figure is the median of its repeats.

Each run is bracketed by a CPU probe (`bench._cpu.cpu_probe_ms`, wall time of a
fixed loop): a run whose probe moved by more than `PROBE_TOLERANCE` had other
work land inside it, and is flagged in the table and the JSON.
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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench._children import REPO_ROOT, bench_env
from bench._cpu import cpu_probe_ms
from bench._registry import Backend, Scenario
from bench.run_one import RESULT_PREFIX

__all__ = ["Case", "CaseResult", "Settings", "plan_cases", "run_cases"]

#: Start-up and set-up allowed on top of warm-up + duration: opening 10,000
#: WebSocket connections takes ~30 s on a shared 2-core machine.
SETUP_ALLOWANCE_S = 150.0
#: Lines of a failed run's stderr kept to explain it.
STDERR_TAIL = 12
#: A run is flagged when its CPU probe after differs from the one before by more
#: than this fraction (of the smaller): the same code measured twice on a quiet
#: shared machine differs by up to ~25 %, so a probe that moved more says load changed.
PROBE_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Settings:
    duration: float
    warmup: float
    repeat: int
    smoke: bool
    env_tweaks: bool
    jobs: int = 1


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
    #: Each run's CPU probe before and after, in ms (see PROBE_TOLERANCE).
    probes: list[tuple[float, float]] = field(default_factory=list)

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
    return abs(after - before) > PROBE_TOLERANCE * min(before, after)


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


def run_cases(
    cases: Sequence[Case],
    settings: Settings,
    progress: Callable[[str], None] = lambda line: None,
) -> list[CaseResult]:
    """Run every case `settings.repeat` times, interleaved; never raises for a failed run.

    With ``settings.jobs > 1`` runs overlap: only for --smoke, whose figures
    mean nothing, since two runs on two cores measure each other.
    """
    results = [CaseResult(case) for case in cases]
    queue = [
        result
        for repeat in range(settings.repeat)
        for result in results
        if repeat < (result.case.scenario.max_repeat or settings.repeat)
    ]
    lock = threading.Lock()
    done = 0

    def run(result: CaseResult) -> None:
        nonlocal done
        started = time.monotonic()
        before = cpu_probe_ms()
        output = run_once(result.case, settings)
        probe = (round(before, 1), round(cpu_probe_ms(), 1))
        with lock:
            done += 1
            result.seconds += time.monotonic() - started
            result.probes.append(probe)
            moved = " [PROBE MOVED {} -> {} ms]".format(*probe) if probe_moved(*probe) else ""
            if isinstance(output, str):
                result.errors.append(output)
                progress(f"[{done}/{len(queue)}] {result.case.label}: FAILED {output}{moved}")
                return
            result.runs.append(output.figures)
            result.samples.append(output.samples)
            result.notes.update(output.notes)
            progress(f"[{done}/{len(queue)}] {result.case.label}: {_brief(output.figures)}{moved}")

    with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
        list(pool.map(run, queue))
    return results


def _brief(figures: dict[str, float]) -> str:
    parts = [f"{name}={value:,.1f}" for name, value in figures.items()]
    return ", ".join(parts)
