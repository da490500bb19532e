"""OpenTelemetry traces, when the process has a tracer provider; nothing at all otherwise.

Only ``opentelemetry-api`` is needed (the ``tracing`` extra); the SDK and its
exporters are the user's. Tracing is **on** when a tracer provider is set: the
application's own (``opentelemetry.trace.set_tracer_provider``), one
:func:`configure_from_environment` made from the standard ``OTEL_*`` variables,
or one given to :func:`use_tracer_provider`. Off, every hook here is one check
and the wire carries nothing new.

On, each call is a CLIENT span where it is made and a SERVER span where it is
answered, following OpenTelemetry's RPC conventions (``rpc.system.name``,
``rpc.method``, ``rpc.response.status_code``, ``error.type``, ``server.address``:
the agent) and never an argument. The W3C ``traceparent``/``tracestate`` travel
in each message (docs/observability.md), so one trace follows a call through
every hop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mesh._errors import MeshError
from mesh._telemetry.metrics import status_of
from mesh._telemetry.requested import tracing_requested

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "MESH_ID_ENV",
    "TraceContext",
    "active",
    "adopt_mesh_id",
    "calling",
    "client_span",
    "configure_from_environment",
    "current_ids",
    "end",
    "environment",
    "headers_for",
    "operation",
    "outgoing",
    "parent_from_environment",
    "server_identity",
    "server_span",
    "serving",
    "span",
    "tool_of",
    "trace_from",
    "tracer",
    "use_tracer_provider",
]

T = TypeVar("T")

#: (traceparent, tracestate) as W3C Trace Context spells them.
TraceContext = tuple[str, str | None]

#: Set by a daemon for each stdio agent it spawns: the agent's id in the mesh (its
#: manifest's), which the agent's spans name as the server, not the id it declares.
MESH_ID_ENV: Final = "MESH_AGENT_ID"
#: The mesh id this process serves as, once :func:`adopt_mesh_id` read it.
_served_as: list[str | None] = [None]

#: ``rpc.system.name``: the mesh's own envelope (MCP calls say "jsonrpc").
SYSTEM: Final = "agent_mesh"
INSTRUMENTATION: Final = "agent-mesh"

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace import ProxyTracerProvider, SpanKind, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the tracing extra is not installed: tracing stays off
    _API = False
else:
    _API = True
    _PROPAGATOR: Final = TraceContextTextMapPropagator()

_override: TracerProvider | None = None
#: The last provider asked and its tracer. The provider itself is held, not its ``id()``: a
#: provider shut down and freed leaves its id to the next one made, which then got the dead
#: one's tracer, and every span went to a processor that had shut down.
_last: tuple[object, Tracer] | None = None


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Trace into ``provider`` instead of the global one (tests, demos); None undoes it."""
    global _override
    _override = provider


def active() -> bool:
    """Whether spans are made: the API is installed and some tracer provider is set.

    Asked on every call, so it reads the API's own global rather than calling
    ``get_tracer_provider()`` (which looks the environment up each time: several
    times the cost of the rest of this hook).
    """
    return _override is not None or (_API and _trace._TRACER_PROVIDER is not None)


def tracer() -> Tracer:
    global _last
    provider = _override if _override is not None else _trace.get_tracer_provider()
    last = _last
    if last is not None and last[0] is provider:
        return last[1]
    found = provider.get_tracer(INSTRUMENTATION)
    _last = (provider, found)
    return found


def outgoing() -> TraceContext | None:
    """The current span as (traceparent, tracestate), for the next message; None if none."""
    if not active():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    parent = carrier.get("traceparent")
    return None if parent is None else (parent, carrier.get("tracestate"))


def _parent(trace: TraceContext | None) -> Any:
    if trace is None:
        return None
    carrier = {"traceparent": trace[0]}
    if trace[1]:
        carrier["tracestate"] = trace[1]
    return _PROPAGATOR.extract(carrier)


def trace_from(headers: Mapping[str, str]) -> TraceContext | None:
    """(traceparent, tracestate) from HTTP or NATS headers (any case), if there is one."""
    parent = headers.get("traceparent")
    if not isinstance(parent, str) or not parent:
        return None
    state = headers.get("tracestate")
    return parent[:128], state[:512] if isinstance(state, str) and state else None


def headers_for(trace: TraceContext | None) -> dict[str, str]:
    if trace is None:
        return {}
    return {"traceparent": trace[0], **({"tracestate": trace[1]} if trace[1] else {})}


#: The longest tool name put on a span (a name is what the caller sent, unchecked yet).
_TOOL_NAME_MAX: Final = 256


def tool_of(method: str, params: Any) -> str | None:
    """The tool a ``tools/call`` names, for its spans' ``gen_ai.tool.name`` (every call's
    method is ``tools/call``: the tool is what tells one slow call from another)."""
    if method != "tools/call" or not isinstance(params, Mapping):
        return None
    name = params.get("name")
    return name if isinstance(name, str) and len(name) <= _TOOL_NAME_MAX else None


def adopt_mesh_id(environ: MutableMapping[str, str]) -> None:
    """Serve as the mesh id a spawning daemon passed in ``environ``, taken out of it so
    the processes this one spawns do not inherit it."""
    _served_as[0] = environ.pop(MESH_ID_ENV, None) or None


def server_identity(declared: str | None) -> tuple[str | None, dict[str, Any]]:
    """The agent a SERVER span names (``server.address``): its mesh id when a daemon
    passed one, with the id it declares kept as ``mesh.agent.declared_id``."""
    mesh_id = _served_as[0]
    if declared is None or mesh_id is None or mesh_id == declared:
        return declared, {}
    return mesh_id, {"mesh.agent.declared_id": declared}


def _rpc_attributes(
    method: str, agent: str | None, system: str, tool: str | None = None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"rpc.system.name": system, "rpc.method": method}
    if agent:
        attributes["server.address"] = agent
    if tool:
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool
    return attributes


def _mcp_naming(method: str, params: Any) -> tuple[str, str, dict[str, Any]]:
    """An MCP request's span name (``tools/call shout``), system and attributes, as the
    MCP SDK names its own (the tool's name, never its arguments)."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    target = params.get("name") if isinstance(params, dict) else None
    if not isinstance(target, str) or len(target) > 256:
        return method, "jsonrpc", attributes
    if method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = target
    return f"{method} {target}", "jsonrpc", attributes


def end(span: Span, exc: BaseException | None) -> None:
    """Record how the call ended (status code, error type; never the message) and end it."""
    status = status_of(exc)
    span.set_attribute("rpc.response.status_code", status)
    if exc is not None:
        span.set_attribute(
            "error.type", status if isinstance(exc, MeshError) else type(exc).__name__
        )
        span.set_status(StatusCode.ERROR, status)
    span.end()


class client_span:  # a context manager, named like the function it reads as
    """A CLIENT span around one call, current while the call runs (so the request carries it)."""

    __slots__ = ("_span", "_token")

    def __init__(
        self, method: str, agent: str | None, system: str = SYSTEM, *, tool: str | None = None
    ) -> None:
        attributes = _rpc_attributes(method, agent, system, tool)
        self._span = tracer().start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
        self._token: Any = None

    def __enter__(self) -> Span:
        self._token = _context.attach(_trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            _context.detach(self._token)
        end(self._span, exc)


class server_span:
    """A SERVER span for one request answered here, child of the caller's ``trace``.

    ``current()`` makes it the current span (the handler's own spans are its children);
    :meth:`finish` ends it, or :meth:`wrap` ends it when an awaited answer is ready.
    """

    __slots__ = ("_context", "_token", "span")

    def __init__(
        self,
        method: str,
        trace: TraceContext | None,
        *,
        agent: str | None = None,
        system: str = SYSTEM,
        attributes: Mapping[str, Any] | None = None,
        mcp_params: Any = None,
        tool: str | None = None,
    ) -> None:
        name = method
        if mcp_params is not None:  # an MCP request: MCP's own conventions on top
            name, system, mcp = _mcp_naming(method, mcp_params)
            attributes = {**mcp, **(attributes or {})}
        attrs = _rpc_attributes(method, agent, system, tool)
        if attributes:
            attrs.update(attributes)
        self.span = tracer().start_span(
            name, context=_parent(trace), kind=SpanKind.SERVER, attributes=attrs
        )
        self._context = _trace.set_span_in_context(self.span)
        self._token: Any = None

    @contextmanager
    def current(self) -> Iterator[Span]:
        token = _context.attach(self._context)
        try:
            yield self.span
        finally:
            _context.detach(token)

    def finish(self, exc: BaseException | None = None) -> None:
        end(self.span, exc)

    async def wrap(self, pending: Awaitable[T]) -> T:
        """Await ``pending`` with this span current; end the span with its outcome."""
        token = _context.attach(self._context)
        try:
            result = await pending
        except BaseException as exc:
            self.finish(exc)
            raise
        finally:
            _context.detach(token)
        self.finish()
        return result

    def __enter__(self) -> Span:
        self._token = _context.attach(self._context)
        return self.span

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        _context.detach(self._token)
        self.finish(exc)


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Span | None]:
    """An INTERNAL span, current inside; ``None`` (and nothing made) when tracing is off."""
    if not active():
        yield None
        return
    with tracer().start_as_current_span(name, attributes=dict(attributes or {})) as made:
        yield made


def current_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) in hex of the current span, if one is recording."""
    if not _API:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def configure_from_environment(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Set a global SDK tracer provider from ``OTEL_*`` when one is asked for; True if set.

    Asked for: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``) or an OTLP endpoint
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and
    ``OTEL_SDK_DISABLED`` not true. Nothing is done when the application set a
    provider already, or when the SDK (or the OTLP exporter) is not installed. The
    sampler (``OTEL_TRACES_SAMPLER``), the service name (``OTEL_SERVICE_NAME``,
    else ``service_name``) and the exporter's own settings are the SDK's, from the
    same variables. Console spans go to stderr: stdout is a stdio agent's wire.
    """
    env = os.environ if environ is None else environ
    if not tracing_requested(env):
        return False
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not _API or not isinstance(_trace.get_tracer_provider(), ProxyTracerProvider):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        return False
    exporter: Any
    if exporter_name == "console":
        # One line per span, as the process's log is one event per line: the SDK's
        # indented JSON interleaved with the log, and a stdio agent's spans reached its
        # daemon as one stderr event per line of JSON.
        exporter = ConsoleSpanExporter(out=sys.stderr, formatter=_one_line)
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            return False
        exporter = OTLPSpanExporter()
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": service_name})
    provider = SdkProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _trace.set_tracer_provider(provider)
    return True


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + os.linesep


def serving(
    method: str,
    trace: TraceContext | None,
    *,
    agent: str | None = None,
    system: str = SYSTEM,
    attributes: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> AbstractContextManager[Span | None]:
    """``with serving(...)``: a SERVER span while tracing is on, nothing otherwise."""
    if not active():
        return nullcontext()
    return server_span(method, trace, agent=agent, system=system, attributes=attributes, tool=tool)


def calling(
    method: str, agent: str | None, *, tool: str | None = None
) -> AbstractContextManager[Span | None]:
    """``with calling(...)``: a CLIENT span while tracing is on, nothing otherwise."""
    if not active():
        return nullcontext()
    return client_span(method, agent, tool=tool)


def environment() -> dict[str, str]:
    """``TRACEPARENT``/``TRACESTATE`` for a child process, from the current span (or none)."""
    trace = outgoing()
    if trace is None:
        return {}
    return {"TRACEPARENT": trace[0], **({"TRACESTATE": trace[1]} if trace[1] else {})}


@contextmanager
def parent_from_environment(environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """With ``TRACEPARENT`` set (a spawned agent), make it the process's current parent, so
    the agent's work that no caller's trace covers joins the trace that spawned it."""
    env = os.environ if environ is None else environ
    parent = env.get("TRACEPARENT")
    if not parent or not active():
        yield
        return
    token = _context.attach(_parent((parent[:128], env.get("TRACESTATE", "")[:512] or None)))
    try:
        yield
    finally:
        _context.detach(token)


@contextmanager
def operation(
    name: str, attributes: Mapping[str, Any], *, client: bool = True
) -> Iterator[Span | None]:
    """A span for a GenAI operation (``invoke_agent``, ``chat``), current inside; ``None``
    when tracing is off. An exception ends it as an error, by its type only."""
    if not active():
        yield None
        return
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    made = tracer().start_span(name, kind=kind, attributes=dict(attributes))
    token = _context.attach(_trace.set_span_in_context(made))
    try:
        yield made
    except BaseException as exc:
        made.set_attribute("error.type", type(exc).__name__)
        made.set_status(StatusCode.ERROR, type(exc).__name__)
        raise
    finally:
        _context.detach(token)
        made.end()
