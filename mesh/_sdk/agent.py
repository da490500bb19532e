"""The agent SDK: plain functions become tools any peer can list and call.

::

    agent = Agent("echo", description="Says things back.")

    @agent.tool
    def echo(message: str) -> dict[str, str]:
        "Return the message unchanged."
        return {"message": message}

    @agent.tool
    async def wait(seconds: float) -> dict[str, float]:
        "Sleep, then say so."
        await anyio.sleep(seconds)
        return {"slept": seconds}

A plain ``def`` runs inline on the connection's reader and its answer is queued at
once (no task: the cheapest call there is); an ``async def`` runs in a task of its
own, which the caller's cancel or deadline cancels.

Arguments are validated against the function's type hints (msgspec), and
``tools/list`` publishes a JSON Schema derived from the same hints; every
parameter needs a hint (``Any`` accepts any JSON value). A parameter annotated
:class:`~mesh.RequestContext` receives the request's context (to report
progress, or to call back). Results are checked too: against the declared
return type, and for NaN or infinity, which JSON cannot carry; a bad result is a
:class:`~mesh.ToolError` to the caller naming the tool and the path, and a log
line here. The same agent serves any transport.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Final, TypeVar, Union, get_args, get_origin, get_type_hints, overload

import anyio
import msgspec

from mesh import content
from mesh._errors import InvalidParams, MeshError, MethodNotFound, ToolError
from mesh._logging import get_logger
from mesh._rpc.peer import Peer, RequestContext, serve_peer
from mesh._rpc.session import SessionConfig
from mesh._sdk.features import (
    PROMPTS_CHANGED,
    RESOURCES_CHANGED,
    CompletionArgument,
    CompletionRef,
    Features,
)
from mesh.protocol import now_ms
from transports import FrameStream

__all__ = ["Agent", "CompletionArgument", "CompletionRef", "Tool"]

log = get_logger("mesh.agent")

F = TypeVar("F", bound=Callable[..., Any])
NotificationHandler = Callable[[Peer | None, Any], Awaitable[None] | None]

_PATH: Final = re.compile(r"at `\$")


class _ToolCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = {}


def _located(exc: msgspec.ValidationError, where: str) -> str:
    """msgspec's message with its path rooted at ``where`` (it names none at the root)."""
    text = str(exc)
    return _PATH.sub(f"at `{where}", text) if _PATH.search(text) else f"{text} - at `{where}`"


def _invalid(
    prefix: str, exc: msgspec.ValidationError, where: str, *, hint: str = ""
) -> InvalidParams:
    return InvalidParams(f"{prefix}: {_located(exc, where)}{hint}")


#: Values that are never NaN and hold nothing: skipped without a call (most of a result).
_PLAIN: Final = frozenset({str, int, bool, type(None)})
#: What tools and methods answer with most: never awaitable, so ``inspect.isawaitable``
#: (a chain of ABC checks, about a microsecond each time) is skipped for them.
_PLAIN_ANSWERS: Final = frozenset({dict, list, str, int, float, bool, type(None)})


def _non_finite(value: Any, path: str) -> str | None:
    """The path of the first NaN or infinity in ``value`` (builtins only), if any."""
    found = _non_finite_at(value)
    if found is None:
        return None
    for step in reversed(found):
        path = f"{path}.{step}" if isinstance(step, str) else f"{path}[{step!r}]"
    return path


def _non_finite_at(value: Any) -> list[Any] | None:
    """The keys and indices down to the first NaN or infinity, innermost first; None if
    there is none. Runs on every result, so no path is built unless one is found."""
    if isinstance(value, float):
        return None if math.isfinite(value) else []
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if type(item) in _PLAIN:
            continue
        if (found := _non_finite_at(item)) is not None:
            found.append(key)
            return found
    return None


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: its function, argument struct and published schema."""

    name: str
    description: str
    function: Callable[..., Any]
    arguments_type: type[msgspec.Struct]
    context_parameter: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    fields: tuple[str, ...] = field(default=())
    #: The declared return type results are checked against (``None``: not declared).
    result_type: Any = None
    #: ``T`` of a tool declared ``-> ToolResult[T]``: its structured data is checked against it.
    structured_type: Any = None

    def describe(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.output_schema is not None:
            entry["outputSchema"] = self.output_schema
        return entry

    def start(self, ctx: RequestContext, arguments: Any) -> Any:
        """Validate ``arguments`` and call the function: its result if it has one now
        (a plain ``def``), else an awaitable of it (an ``async def``)."""
        try:
            args = msgspec.convert(arguments, self.arguments_type, strict=True)
        except msgspec.ValidationError as exc:
            # Paths are relative to the arguments (`$.days`), as the tool's author sees them.
            message = f"invalid arguments for tool {self.name!r}"
            raise _invalid(message, exc, "$", hint=self._suggestion(arguments)) from None
        kwargs = msgspec.structs.asdict(args)  # its fields are the function's parameters
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = ctx
        try:
            result = self.function(**kwargs)
        except MeshError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        if type(result) not in _PLAIN_ANSWERS and inspect.isawaitable(result):
            return self._finish(result)
        return self._checked(result)

    def _suggestion(self, arguments: Any) -> str:
        """``; did you mean `seconds`?`` for a misspelt argument name, else ``""``."""
        if not isinstance(arguments, dict):
            return ""
        for name in arguments:
            if isinstance(name, str) and name not in self.fields:
                close = difflib.get_close_matches(name, self.fields, n=1)
                if close:
                    return f"; did you mean `{close[0]}` for `{name}`?"
        return ""

    async def _finish(self, pending: Awaitable[Any]) -> Any:
        try:
            result = await pending
        except MeshError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._checked(result)

    def _checked(self, result: Any) -> Any:
        """``result`` if it can be sent as JSON and fits the declared return type."""
        if type(result) not in _PLAIN and content.is_content(result):
            return self._content(result)
        try:
            data = msgspec.to_builtins(result)
        except TypeError as exc:
            raise self._bad_result(f"it cannot be sent as JSON: {exc}", "$") from None
        if (path := _non_finite(data, "$")) is not None:
            raise self._bad_result("NaN and infinity cannot be sent as JSON", path)
        if self.result_type is not None:
            try:
                msgspec.convert(data, self.result_type, strict=True)
            except msgspec.ValidationError as exc:
                raise self._bad_result(_located(exc, "$"), None) from None
        return result

    def _content(self, result: Any) -> Any:
        """Content items in their wire form (``mesh.content``), structured data checked."""
        answer = msgspec.to_builtins(content.to_result(result))
        structured = answer.get(content.STRUCTURED_KEY)
        if self.structured_type is not None:
            try:
                msgspec.convert(structured, self.structured_type, strict=True)
            except msgspec.ValidationError as exc:
                raise self._bad_result(_located(exc, f"$.{content.STRUCTURED_KEY}"), None) from None
        if (path := _non_finite(structured, f"$.{content.STRUCTURED_KEY}")) is not None:
            raise self._bad_result("NaN and infinity cannot be sent as JSON", path)
        return answer

    def _bad_result(self, reason: str, path: str | None) -> ToolError:
        text = reason if path is None else f"{reason} - at `{path}`"
        message = f"tool {self.name!r} returned an invalid result: {text}"
        log.warning("agent.result_invalid", tool=self.name, error=text)
        return ToolError(message, data={"type": "InvalidResult"})

    def _failed(self, exc: Exception) -> ToolError:
        # With the traceback: the caller sees only the message, the author needs the line.
        log.warning("agent.tool_failed", tool=self.name, error=repr(exc), exc_info=exc)
        return ToolError(str(exc) or type(exc).__name__, data={"type": type(exc).__name__})


def _schema_of(tp: Any) -> dict[str, Any]:
    """A self-contained JSON Schema: the top-level $ref inlined, $defs kept for nesting."""
    schema = msgspec.json.schema(tp)
    ref = schema.get("$ref")
    defs: dict[str, Any] = schema.get("$defs", {})
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        top = dict(defs.pop(name))
        top.pop("title", None)
        if defs:
            top["$defs"] = defs
        return top
    return schema


def _answer_type(returns: Any) -> Any:
    """``T`` for a plain ``def`` annotated ``T | Awaitable[T]`` (it answers now or later)."""
    if get_origin(returns) not in (Union, UnionType):
        return returns
    now = [arm for arm in get_args(returns) if get_origin(arm) not in (Awaitable, Coroutine)]
    return Union[tuple(now)] if now else Any  # noqa: UP007 - built from a runtime tuple


def _outputs(tool_name: str, returns: Any) -> tuple[dict[str, Any] | None, Any, Any]:
    """The output schema, the type results are checked against, and the structured type
    of a tool returning content (``-> ToolResult[T]``), from its return annotation."""
    is_content, structured_type = content.content_return(returns)
    if is_content:
        schema = None if structured_type is None else _schema_of(structured_type)
        return schema, None, structured_type
    if returns is None or returns is type(None):
        return None, type(None), None
    if returns in (Any, object):
        return None, None, None
    try:
        return _schema_of(returns), returns, None
    except TypeError:
        log.debug("agent.no_output_schema", tool=tool_name, type=repr(returns))
        return None, None, None


def build_tool(function: Callable[..., Any], *, name: str | None, description: str | None) -> Tool:
    tool_name = name or function.__name__
    hints = get_type_hints(function, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context_parameter = None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name not in hints:
            raise TypeError(
                f"tool {tool_name!r}: parameter {parameter.name!r} has no type hint, so its "
                f"arguments cannot be checked nor its schema published; annotate it, e.g. "
                f"`{parameter.name}: str`, or `{parameter.name}: Any` to accept any JSON value"
            )
        annotation = hints[parameter.name]
        if annotation is RequestContext:
            context_parameter = parameter.name
            continue
        if parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
            parameter.POSITIONAL_ONLY,
        ):
            raise TypeError(
                f"tool {tool_name!r}: parameter {parameter.name!r} must be a plain keyword"
            )
        if parameter.default is parameter.empty:
            fields.append((parameter.name, annotation))
        else:
            fields.append((parameter.name, annotation, parameter.default))
    arguments_type = msgspec.defstruct(
        f"{tool_name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
    )
    try:
        input_schema = _schema_of(arguments_type)
    except TypeError as exc:
        raise TypeError(f"tool {tool_name!r}: a parameter type has no JSON Schema: {exc}") from None
    output_schema, result_type, structured_type = _outputs(
        tool_name, _answer_type(hints.get("return", Any))
    )
    return Tool(
        name=tool_name,
        description=inspect.cleandoc(description or function.__doc__ or ""),
        function=function,
        arguments_type=arguments_type,
        context_parameter=context_parameter,
        input_schema=input_schema,
        output_schema=output_schema,
        fields=tuple(f[0] for f in fields),
        result_type=result_type,
        structured_type=structured_type,
    )


class Agent:
    """A set of tools, methods and notification handlers served over any transport.

    Built-in methods: ``ping``, ``tools/list``, ``tools/call``, ``agent/info``.
    """

    def __init__(
        self,
        id: str,
        *,
        name: str | None = None,
        description: str = "",
        version: str = "0.1.0",
        capabilities: Iterable[str] = (),
        text_entry: str | None = None,
    ) -> None:
        """``text_entry`` names the tool that plain text goes to, for clients that send
        only text (an A2A client such as ADK's); see docs/a2a.md."""
        self.id = id
        self.text_entry = text_entry
        self.name = name or id
        self.description = description
        self.version = version
        self.capabilities = frozenset(capabilities)
        self._tools: dict[str, Tool] = {}
        self._methods: dict[str, Callable[[RequestContext, Any], Any]] = {
            "ping": self._ping,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "agent/info": self._info,
        }
        self._features = Features(id)
        self._methods.update(self._features.methods)
        self._notification_handlers: dict[str, NotificationHandler] = {}
        # Requests being answered by a task (async handlers), for draining at shutdown.
        self._running = 0
        self._idle: anyio.Event | None = None

    # -- declaring -------------------------------------------------------------------------

    @overload
    def tool(self, function: F, /) -> F: ...

    @overload
    def tool(
        self,
        function: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        function: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> F | Callable[[F], F]:
        """Register a function as a tool (usable bare or with ``name=``/``description=``)."""

        def register(fn: F) -> F:
            built = build_tool(fn, name=name, description=description)
            if built.name in self._tools:
                raise ValueError(f"agent {self.id!r} already has a tool named {built.name!r}")
            self._tools[built.name] = built
            return fn

        return register(function) if function is not None else register

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[F], F]:
        """Offer what the function returns as the resource at ``uri``: text (a ``str``),
        bytes, or :mod:`mesh.content` items. A URI with ``{params}`` is a template
        (see :meth:`resource_template`)."""

        def register(fn: F) -> F:
            self._features.add_resource(
                uri, fn, name=name, description=description, mime_type=mime_type
            )
            return fn

        return register

    def resource_template(
        self,
        uri_template: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[F], F]:
        """Offer resources whose URIs match ``uri_template`` (``users://{id}/profile``):
        the function's parameters are the template's ``{params}``, each one path segment."""

        def register(fn: F) -> F:
            self._features.add_template(
                uri_template, fn, name=name, description=description, mime_type=mime_type
            )
            return fn

        return register

    def prompt(
        self, name: str | None = None, *, description: str | None = None
    ) -> Callable[[F], F]:
        """Offer the function as a prompt: its parameters are the prompt's arguments
        (strings; those without a default required), and it returns the messages —
        a ``str``, content items, :class:`mesh.content.PromptMessage`, or a list of them."""

        def register(fn: F) -> F:
            self._features.add_prompt(fn, name=name, description=description)
            return fn

        return register

    def completion(self) -> Callable[[F], F]:
        """Complete prompt arguments and template parameters: the function takes
        ``ref`` (:class:`CompletionRef`), ``argument`` (:class:`CompletionArgument`) and
        ``context`` (the arguments already given) and returns the values that fit."""

        def register(fn: F) -> F:
            self._features.completion = fn
            return fn

        return register

    def resource_updated(self, uri: str) -> None:
        """Tell whoever subscribed to ``uri`` that it changed."""
        self._features.resource_updated(uri)

    def resources_changed(self) -> None:
        """Tell whoever listed this agent's resources that the list changed."""
        self._features.changed(RESOURCES_CHANGED)

    def prompts_changed(self) -> None:
        """Tell whoever listed this agent's prompts that the list changed."""
        self._features.changed(PROMPTS_CHANGED)

    def method(self, name: str) -> Callable[[F], F]:
        """Register ``handler(ctx, params)`` for a custom method: a plain ``def`` answers
        inline on the connection's reader, an ``async def`` in a task of its own."""

        def register(fn: F) -> F:
            if name in self._methods:
                raise ValueError(f"agent {self.id!r} already handles {name!r}")
            self._methods[name] = fn
            return fn

        return register

    def on_notification(self, method: str) -> Callable[[F], F]:
        """Register ``handler(peer, params)`` for a notification (``def`` or ``async def``)."""

        def register(fn: F) -> F:
            self._notification_handlers[method] = fn
            return fn

        return register

    @property
    def tools(self) -> dict[str, Tool]:
        return dict(self._tools)

    # -- serving ----------------------------------------------------------------------------

    async def serve(self, stream: FrameStream, *, config: SessionConfig | None = None) -> None:
        """Serve this agent on one stream until it closes."""
        await serve_peer(stream, self, config=config)

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        """The answer to one request, or an awaitable of it (see :class:`mesh.RequestHandler`)."""
        handler = self._methods.get(method)
        if handler is None:
            raise MethodNotFound(f"agent {self.id!r} has no method {method!r}")
        answer = handler(ctx, params)
        if type(answer) in _PLAIN_ANSWERS or not inspect.isawaitable(answer):
            return answer
        return self._counted(answer)

    async def _counted(self, pending: Awaitable[Any]) -> Any:
        self._running += 1
        try:
            return await pending
        finally:
            self._running -= 1
            if not self._running and self._idle is not None:
                self._idle.set()

    @property
    def requests_running(self) -> int:
        """Requests whose (async) handlers are still running, over every connection."""
        return self._running

    async def wait_idle(self) -> None:
        """Until no request is being handled; bound it with a deadline (see ``run_agent``)."""
        while self._running:
            self._idle = anyio.Event()
            await self._idle.wait()

    def handle_notification(
        self, peer: Peer | None, method: str, params: Any
    ) -> Awaitable[None] | None:
        handler = self._notification_handlers.get(method)
        if handler is None:
            log.debug("agent.notification_ignored", method=method)
            return None
        return handler(peer, params)

    # -- built-in methods --------------------------------------------------------------------

    def _ping(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        return {"agent": self.id, "timestamp": now_ms()}

    def _list_tools(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        return {"tools": [tool.describe() for tool in self._tools.values()]}

    def _info(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "capabilities": sorted(self.capabilities),
            "tools": list(self._tools),
            # Every method it serves, so a room can tell a tool-only agent before its turn.
            "methods": sorted(self._methods),
            **({"text_entry": self.text_entry} if self.text_entry else {}),
        }

    def _call_tool(self, ctx: RequestContext, params: Any) -> Any:
        try:
            call = msgspec.convert(params, _ToolCall, strict=True)
        except msgspec.ValidationError as exc:
            raise _invalid("invalid tools/call params", exc, "$.payload.params") from None
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise MethodNotFound(
                f"agent {self.id!r} has no tool named {call.name!r} (tools: {known})"
            )
        return tool.start(ctx, call.arguments)
