"""The OpenTelemetry SDK's in-memory exporter, and reading one trace out of what it holds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mesh._telemetry import tracing


@contextmanager
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The mesh traces into an in-memory exporter (not the process's global provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield provider, exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


def by_name(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def parent_of(spans: Sequence[ReadableSpan], child: ReadableSpan) -> ReadableSpan:
    assert child.parent is not None, f"{child.name} has no parent"
    found = [s for s in spans if s.context.span_id == child.parent.span_id]
    assert len(found) == 1, f"the parent of {child.name} is not among the spans"
    return found[0]


def one_trace(spans: Sequence[ReadableSpan]) -> int:
    """The trace id every span shares (fails if there are several traces)."""
    traces: set[int] = {s.context.trace_id for s in spans}
    assert len(traces) == 1, [(s.name, f"{s.context.trace_id:032x}") for s in spans]
    return traces.pop()
