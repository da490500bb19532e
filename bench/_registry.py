"""The scenario registry: what can be measured, and what each figure is compared against.

A scenario is a named async function that sets up its own client (and usually a
server child process), measures for one mode on one backend, and returns a
`Measurement`. Each run happens in a fresh process (`bench.run_one`), so a
scenario may leave global state behind without contaminating the next one.

Scenarios live in the modules listed in `SCENARIO_MODULES`; importing a module
registers its scenarios with the `@scenario(...)` decorator. Modules import
their heavy dependencies (mcp, uvicorn, httpx) inside functions, so that a run
of one scenario carries no other scenario's objects (GC cost grows with them).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "BACKENDS",
    "CALL_MODES",
    "SCENARIO_MODULES",
    "Measurement",
    "RunContext",
    "Scenario",
    "all_scenarios",
    "get_scenario",
    "scenario",
]

Backend = Literal["asyncio", "trio"]
BACKENDS: tuple[Backend, ...] = ("asyncio", "trio")

#: One call at a time, and 64 concurrent callers sharing ONE connection.
CALL_MODES: tuple[str, ...] = ("sequential", "inflight64")

#: Modules whose import registers scenarios, in table order. The mesh's own
#: scenarios go in a module of their own (e.g. "bench.mesh_scenarios") added here.
SCENARIO_MODULES: tuple[str, ...] = (
    "bench.baselines.ws_echo",
    "bench.baselines.pipe_echo",
    "bench.baselines.mcp_peer",
    "bench.baselines.http_echo",
    "bench.baselines.ws_crowd",
    "bench.baselines.loop_pingpong",
    "bench.own_vs_library",
    "bench.mesh_scenarios",
    "bench.mcp_scenarios",
    "bench.a2a_scenarios",
    "bench.cluster_scenarios",
    "bench.observe_scenarios",
)


@dataclass(frozen=True, slots=True)
class RunContext:
    """What one measurement is asked to do."""

    mode: str
    backend: Backend
    duration: float  # seconds of measurement, after the warm-up
    warmup: float  # seconds run and discarded first
    smoke: bool = False  # scale populations down (fan-out, idle connections) for CI


@dataclass(slots=True)
class Measurement:
    """The figures of one run. Absent figures stay None (memory has no calls/s)."""

    calls_per_s: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    samples: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # e.g. which client implementation

    def figures(self) -> dict[str, float]:
        """Every figure by name, for ratios, medians and JSON."""
        out = {"calls_per_s": self.calls_per_s, "p50_us": self.p50_us, "p99_us": self.p99_us}
        found = {k: v for k, v in out.items() if v is not None}
        return found | self.extra


RunFn = Callable[[RunContext], Awaitable[Measurement]]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named measurement and the baseline its figures are divided by."""

    name: str
    group: str  # "stdio", "websocket", "http", "broadcast", "memory"
    run: RunFn
    #: Scenarios whose figures this one is divided by; the first fills the table's
    #: ratio columns, the others get a headline ratio each. Empty: a baseline.
    baselines: tuple[str, ...] = ()
    modes: tuple[str, ...] = CALL_MODES
    backends: tuple[Backend, ...] = BACKENDS
    #: The figure the headline ratio is taken on, and whether more of it is better.
    metric: str = "calls_per_s"
    higher_is_better: bool = True
    description: str = ""
    #: Cap on --repeat, for figures that do not vary run to run (memory).
    max_repeat: int | None = None
    #: The modes --smoke runs (None: all of them; empty: none), so CI stays in seconds.
    smoke_modes: tuple[str, ...] | None = None
    #: Seconds a run may take beyond warm-up + duration (default: the harness's).
    setup_allowance_s: float | None = None
    #: Modes only --thorough (or --mode naming them) measures: minutes each on a loaded
    #: machine (10,000 links opened), past what the default run's budget can hold.
    thorough_modes: tuple[str, ...] = ()

    @property
    def baseline(self) -> str | None:
        return self.baselines[0] if self.baselines else None


_REGISTRY: dict[str, Scenario] = {}


def scenario(
    name: str,
    *,
    group: str,
    baseline: str | tuple[str, ...] | None = None,
    modes: tuple[str, ...] = CALL_MODES,
    backends: tuple[Backend, ...] = BACKENDS,
    metric: str = "calls_per_s",
    higher_is_better: bool = True,
    description: str = "",
    max_repeat: int | None = None,
    smoke_modes: tuple[str, ...] | None = None,
    setup_allowance_s: float | None = None,
    thorough_modes: tuple[str, ...] = (),
) -> Callable[[RunFn], RunFn]:
    """Register the decorated `async def run(ctx) -> Measurement` as a scenario.

    `baseline` names the scenario (or scenarios, first one foremost) that this
    one is compared with, in the same mode; None marks a baseline. `smoke_modes`
    limits what ``--smoke`` runs of it (None: every mode).
    """

    def register(run: RunFn) -> RunFn:
        if name in _REGISTRY:
            raise ValueError(f"scenario {name!r} registered twice")
        first_doc_line = (run.__doc__ or "").strip().partition("\n")[0]
        _REGISTRY[name] = Scenario(
            name=name,
            group=group,
            run=run,
            baselines=(baseline,) if isinstance(baseline, str) else tuple(baseline or ()),
            modes=modes,
            backends=backends,
            metric=metric,
            higher_is_better=higher_is_better,
            description=description or first_doc_line,
            max_repeat=max_repeat,
            smoke_modes=smoke_modes,
            setup_allowance_s=setup_allowance_s,
            thorough_modes=thorough_modes,
        )
        return run

    return register


#: Comma-separated further modules to import (an experiment, a scenario under
#: development), inherited by every measurement's process.
EXTRA_MODULES_ENV = "BENCH_EXTRA_SCENARIOS"


def _load() -> None:
    extra = [m.strip() for m in os.environ.get(EXTRA_MODULES_ENV, "").split(",") if m.strip()]
    for module in (*SCENARIO_MODULES, *extra):
        importlib.import_module(module)


def all_scenarios() -> list[Scenario]:
    """Every registered scenario, in registration order."""
    _load()
    return list(_REGISTRY.values())


def get_scenario(name: str, module: str | None = None) -> Scenario:
    """The scenario `name`; given the `module` that registers it, only that module is
    imported (a measurement's process then carries no other scenario module)."""
    if module is not None:
        importlib.import_module(module)
        if name in _REGISTRY:
            return _REGISTRY[name]
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise KeyError(f"no scenario {name!r}; known: {known}") from None
