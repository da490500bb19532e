"""An OTLP/HTTP trace receiver on loopback: what real processes export, read back as spans.

The processes of a test (``mesh serve``, ``mesh call``, agents) are configured with
the standard ``OTEL_*`` variables and export with the SDK's own OTLP exporter;
this collects what arrives and wakes whoever waits for a span.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from transports import HttpRequest, HttpResponse, HttpServerConfig, open_http_server

#: Spans reach the receiver within this on a loaded machine (the exporters batch for 100 ms).
ARRIVAL_TIMEOUT = 60.0
#: What the test processes need to export here quickly (their batch delay in ms).
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_TRACES_SAMPLER": "always_on"}


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    service: str
    name: str
    kind: str  # SERVER, CLIENT, INTERNAL
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    duration_ms: float


@dataclass
class Receiver:
    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    def environment(self, service: str) -> dict[str, str]:
        """The ``OTEL_*`` variables that make a mesh process trace to this receiver."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service,
            **QUICK_EXPORT,
        }

    async def wait_for(self, done: Callable[[list[ReceivedSpan]], bool]) -> list[ReceivedSpan]:
        """Until ``done(spans)`` holds for what has arrived (woken by each export)."""
        with anyio.fail_after(ARRIVAL_TIMEOUT):
            while not done(self.spans):
                await self._arrived.wait()
        return list(self.spans)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path != "/v1/traces":
            return HttpResponse.error(404, "only POST /v1/traces")
        export = ExportTraceServiceRequest()
        export.ParseFromString(request.body)
        self.spans.extend(_spans(export))
        self._arrived.set()
        self._arrived = anyio.Event()
        body = ExportTraceServiceResponse().SerializeToString()
        return HttpResponse(200, body, content_type="application/x-protobuf")


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _span(service: str, span: Any) -> ReceivedSpan:
    return ReceivedSpan(
        service=service,
        name=span.name,
        kind=_KINDS.get(span.kind, str(span.kind)),
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        attributes={a.key: _value(a.value) for a in span.attributes},
        duration_ms=(span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
    )


def _spans(export: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found: list[ReceivedSpan] = []
    for resource_spans in export.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            found.extend(_span(service, span) for span in scope_spans.spans)
    return found


@asynccontextmanager
async def open_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    config = HttpServerConfig(max_body_size=16 << 20)
    async with open_http_server(receiver.handle, config=config) as server:
        receiver.url = server.url
        yield receiver


def chain(spans: list[ReceivedSpan], leaf: ReceivedSpan, outside: str = "") -> list[ReceivedSpan]:
    """``leaf`` and its ancestors up to the root, root first (fails on a missing parent).

    ``outside`` is a span id known elsewhere (the test's own root): the chain stops there.
    """
    by_id = {s.span_id: s for s in spans}
    path = [leaf]
    while path[-1].parent_id and path[-1].parent_id != outside:
        parent = by_id.get(path[-1].parent_id)
        assert parent is not None, f"the parent of {path[-1].name} never arrived"
        path.append(parent)
    return path[::-1]


def has_chain(
    spans: list[ReceivedSpan], leaf: Callable[[ReceivedSpan], bool], outside: str
) -> bool:
    """Whether a span ``leaf`` accepts has arrived with every ancestor up to ``outside``."""
    by_id = {s.span_id: s for s in spans}
    for span in filter(leaf, spans):
        while span.parent_id and span.parent_id != outside:
            parent = by_id.get(span.parent_id)
            if parent is None:
                break
            span = parent
        else:
            return True
    return False
