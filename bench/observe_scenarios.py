"""What observing the mesh costs per call: metrics, tracing off, and a sampled span per call.

Every scenario calls the echo agent through a ``MeshOrchestrator`` (where the call
path's one hook is), in this process over the memory link (``obs-memory*``) or as
a child over stdio (``obs-stdio*``):

- ``*-bare``: the hooks taken out (no tallies, no tracing check): the baseline.
- ``obs-memory`` / ``obs-stdio``: as shipped with tracing off. The bench's environment
  has ``opentelemetry-api`` installed and no tracer provider set, so this is also
  "the API but no SDK": the two are one code path (``mesh._telemetry.tracing.active`` is false).
  Metrics are always on (plain additions the daemon reads at scrape time).
- ``*-sdk``: the OpenTelemetry SDK with every call sampled (CLIENT and SERVER spans,
  a batch processor whose exporter drops them): reported, not targeted.

The per-frame counts in the session (frames and bytes) stay in the bare runs too.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING, Any

from bench._children import REPO_ROOT
from bench._measure import measure_calls
from bench._registry import Measurement, RunContext, scenario
from bench.mesh_scenarios import ARGUMENTS, echo_agent_args, quiet_logs, stdio_env

if TYPE_CHECKING:
    from mesh import MeshOrchestrator

SEQUENTIAL = ("sequential",)


def _take_hooks_out() -> None:
    import mesh._orchestrator.orchestrator as orchestrator
    import mesh._rpc.peer as peer

    # setattr: these are the modules' own names for the hooks, replaced for this process.
    setattr(orchestrator, "tracing_active", lambda: False)  # noqa: B010
    setattr(orchestrator, "call_started", lambda: 0.0)  # noqa: B010
    setattr(orchestrator, "call_done", lambda agent, method, started: None)  # noqa: B010
    setattr(orchestrator, "call_failed", lambda *_: None)  # noqa: B010
    setattr(peer, "tracing_active", lambda: False)  # noqa: B010
    setattr(peer, "outgoing", lambda: None)  # noqa: B010


def _sample_every_call() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from mesh._telemetry import tracing

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    tracing.use_tracer_provider(provider)


def prepare(variant: str) -> None:
    quiet_logs()
    """Set this process up for ``variant``: ``bare``, ``off`` (``on``) or ``sdk``."""
    if variant == "bare":
        _take_hooks_out()
    elif variant == "sdk":
        _sample_every_call()


async def _measure(mesh: MeshOrchestrator, ctx: RunContext) -> Measurement:
    from mesh import EMBEDDER  # the door refuses a call that names nobody it is made for

    first = await mesh.call_tool("echo", "echo", ARGUMENTS, on_behalf_of=EMBEDDER)
    if first != ARGUMENTS:
        raise RuntimeError(f"echo answered {first!r}")

    async def call() -> None:
        await mesh.call_tool("echo", "echo", ARGUMENTS, on_behalf_of=EMBEDDER)

    return await measure_calls(call, ctx)


@contextlib.asynccontextmanager
async def _memory_mesh() -> AsyncIterator[MeshOrchestrator]:
    from mesh import AgentSpec, MeshOrchestrator, local_connector
    from mesh.agents.echo import agent

    async with MeshOrchestrator([AgentSpec("echo", local_connector(agent))]) as mesh:
        yield mesh


@contextlib.asynccontextmanager
async def _stdio_mesh(backend: str) -> AsyncIterator[MeshOrchestrator]:
    from mesh import AgentSpec, MeshOrchestrator
    from transports import open_stdio_process

    connector = partial(
        open_stdio_process,
        sys.executable,
        echo_agent_args(backend, "--stdio"),
        env=stdio_env(),
        cwd=REPO_ROOT,
    )
    spec = AgentSpec("echo", connector, transport="stdio")
    async with MeshOrchestrator([spec]) as mesh:
        yield mesh


async def _memory(variant: str, ctx: RunContext) -> Measurement:
    prepare(variant)
    async with _memory_mesh() as mesh:
        return await _measure(mesh, ctx)


async def _stdio(variant: str, ctx: RunContext) -> Measurement:
    prepare(variant)
    async with _stdio_mesh(ctx.backend) as mesh:
        return await _measure(mesh, ctx)


def _register() -> None:
    for variant, suffix, what in (
        ("bare", "-bare", "hooks taken out"),
        ("off", "", "metrics on, tracing off (API, no SDK)"),
        ("sdk", "-sdk", "every call sampled by the SDK"),
    ):
        baseline = None if variant == "bare" else "obs-memory-bare"
        scenario(
            f"obs-memory{suffix}",
            group="observability",
            baseline=baseline,
            modes=SEQUENTIAL,
            description=f"orchestrator call, agent in-process: {what}",
        )(partial(_memory, variant))
        baseline = None if variant == "bare" else "obs-stdio-bare"
        scenario(
            f"obs-stdio{suffix}",
            group="observability",
            baseline=baseline,
            modes=SEQUENTIAL,
            description=f"orchestrator call over stdio: {what}",
        )(partial(_stdio, variant))


_register()
