"""Back to the caller, mid-call: a handler's logs, and its questions for its caller.

A handler running a call can tell its caller something (``mesh/log``, a
notification: MCP's levels, no answer) and ask it something (``mesh/ask``, a
request: ``elicit`` for input from a person, ``sample`` for a message from the
caller's model). Both travel on the link the call came in on and name the call
they belong to, so the caller's :class:`~mesh.Peer` hands them to the handlers
that call was made with (``on_log``, ``on_elicit``, ``on_sample``). Whoever
calls an agent on another's behalf passes handlers that forward to its own
caller (:func:`forward_to`), so an ask climbs back up the chain of calls.

The params and answers are MCP's shapes (``elicitation/create``'s and
``sampling/createMessage``'s), so serving MCP maps them one to one; they are
checked here with msgspec rather than the ``mcp`` package's pydantic models,
which the mesh does not depend on at run time.

An ask is bounded by the call it belongs to: when the call's deadline passes the
caller cancels it, which cancels the handler and with it the ask. A caller
serves at most :data:`MAX_ASKS_IN_FLIGHT` asks at once per link.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, Protocol, TypedDict

import msgspec

from mesh._errors import ErrorCode, InvalidParams, MeshError, MethodNotFound
from mesh._logging import get_logger
from mesh.protocol import RequestId

__all__ = [
    "ASK_METHOD",
    "LOG_LEVELS",
    "LOG_METHOD",
    "MAX_ASKS_IN_FLIGHT",
    "AskHandler",
    "AskHandlers",
    "Elicited",
    "LogCallback",
    "Sampled",
    "answer_ask",
    "check_content",
    "check_elicit_schema",
    "deliver_log",
    "elicit_params",
    "forward_to",
    "log_params",
    "refusing",
    "resolve_ask",
    "sample_params",
    "with_defaults",
]

log = get_logger("mesh.asks")

#: A handler's log line for its caller (a notification).
LOG_METHOD: Final = "mesh/log"
#: A handler's question for its caller (a request; the answer is MCP-shaped).
ASK_METHOD: Final = "mesh/ask"
#: MCP's (syslog's) levels, least severe first.
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
#: Asks a caller serves at once on one link: a person answers one question at a
#: time, a model a few; past it an ask is refused at once (UNAVAILABLE).
MAX_ASKS_IN_FLIGHT: Final = 16

Kind = Literal["elicit", "sample"]
#: Called with each ``mesh/log`` notification's params (``level``, ``data``, ``logger``).
LogCallback = Callable[[Mapping[str, Any]], None]
#: Called with an ask's MCP-shaped params; returns the MCP-shaped answer (a mapping,
#: or an :class:`Elicited` / :class:`Sampled`).
AskHandler = Callable[[dict[str, Any]], Awaitable[Any]]


class AskHandlers(TypedDict, total=False):
    """What a caller passes to hear a call's logs and answer its asks (part of
    :class:`~mesh.CallOptions`); a call made without one of them has that ask
    refused at once."""

    #: Called with each log line the handler sends (params: level, data, logger).
    on_log: LogCallback | None
    #: Answers an elicitation (params: message, requestedSchema).
    on_elicit: AskHandler | None
    #: Answers a sampling request (params: messages, maxTokens, ...).
    on_sample: AskHandler | None


_WANTS: Final = {"elicit": ("on_elicit", "elicitation"), "sample": ("on_sample", "sampling")}


# -- the answers ------------------------------------------------------------------------------


class Elicited(msgspec.Struct, frozen=True, kw_only=True):
    """The caller's answer to an elicitation: MCP's ``ElicitResult``.

    ``content`` holds the answered fields when ``action`` is ``"accept"``.
    """

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, str | int | float | bool | list[str]] | None = None


class Sampled(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The caller's model's answer: MCP's ``CreateMessageResult``.

    ``content`` is one content item (``{"type": "text", "text": ...}`` mostly).
    """

    role: Literal["user", "assistant"]
    content: dict[str, Any]
    model: str
    stop_reason: str | None = None


# -- what is asked ----------------------------------------------------------------------------


class _AskParams(msgspec.Struct, forbid_unknown_fields=True):
    call: str
    kind: Kind
    params: dict[str, Any]


_PRIMITIVES: Final = frozenset({"string", "number", "integer", "boolean"})


def check_elicit_schema(schema: Any) -> None:
    """Raise :class:`~mesh.InvalidParams` unless ``schema`` is what MCP lets an
    elicitation ask for: an object of primitive properties (string, number, integer,
    boolean; a string may be an enum, an array only a list of enum strings)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise InvalidParams('an elicitation schema is an object schema ({"type": "object", ...})')
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise InvalidParams("an elicitation schema's `properties` is an object")
    for name, prop in properties.items():
        _check_property(str(name), prop)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in properties for r in required):
        raise InvalidParams("an elicitation schema's `required` lists names of its properties")


def _check_property(name: str, prop: Any) -> None:
    where = f"elicitation schema property {name!r}"
    if not isinstance(prop, Mapping):
        raise InvalidParams(f"{where} is not a schema object")
    kind = prop.get("type")
    if kind in _PRIMITIVES:
        return
    if kind == "array":
        items = prop.get("items")
        if isinstance(items, Mapping) and ("enum" in items or "anyOf" in items):
            return
        raise InvalidParams(f"{where}: an array may only be a list of enum strings (`items.enum`)")
    raise InvalidParams(
        f"{where} has type {kind!r}; an elicitation asks only for string, number, integer,"
        " boolean or a list of enum strings (no nested objects)"
    )


_FITS: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}


def check_content(content: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise :class:`~mesh.InvalidParams` unless ``content`` is what an elicitation of
    ``schema`` asks for: only its fields, its required ones all there, each of its type
    (and enum). For whoever takes an answer from a person, not from an MCP client."""
    properties = dict(schema.get("properties") or {})
    unknown = sorted(set(content) - set(properties))
    if unknown:
        raise InvalidParams(
            f"no field {unknown[0]!r} in the question; it asks for {_names(properties)}"
        )
    missing = [r for r in schema.get("required") or () if r not in content]
    if missing:
        raise InvalidParams(f"the answer needs the field {missing[0]!r} (the question requires it)")
    for name, value in content.items():
        _check_field(name, value, properties[name])


def _check_field(name: str, value: Any, prop: Mapping[str, Any]) -> None:
    kind = str(prop.get("type"))
    fits = isinstance(value, _FITS.get(kind, ())) and not (
        isinstance(value, bool) and kind != "boolean"
    )
    if not fits:
        raise InvalidParams(f"field {name!r} must be {kind}, not {type(value).__name__}")
    items = value if kind == "array" else [value]
    allowed = (prop.get("items") or {}).get("enum") if kind == "array" else prop.get("enum")
    wrong = [v for v in items if not isinstance(v, str)] if kind == "array" else []
    if allowed is not None:
        wrong += [v for v in items if v not in allowed]
    if wrong:
        raise InvalidParams(f"field {name!r}: {wrong[0]!r} is none of {allowed or 'the strings'}")


def _names(properties: Mapping[str, Any]) -> str:
    return ", ".join(repr(k) for k in properties) or "no fields"


def elicit_params(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``elicitation/create``'s params, the schema checked first."""
    if not isinstance(message, str) or not message:
        raise InvalidParams("an elicitation needs a message for the person who answers")
    check_elicit_schema(schema)
    return {"message": message, "requestedSchema": dict(schema)}


def sample_params(messages: Any, *, max_tokens: int, **optional: Any) -> dict[str, Any]:
    """``sampling/createMessage``'s params: a plain string is one user text message;
    keywords in snake case become MCP's camel case, None ones left out."""
    if isinstance(messages, str):
        messages = [messages]
    if not isinstance(messages, list) or not messages:
        raise InvalidParams("sampling needs at least one message")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidParams(f"sampling needs max_tokens >= 1, not {max_tokens!r}")
    params: dict[str, Any] = {"messages": [_message(m) for m in messages], "maxTokens": max_tokens}
    for key, value in optional.items():
        if value is not None:
            params[_camel(key)] = value
    return params


def _message(message: Any) -> Any:
    if isinstance(message, str):
        return {"role": "user", "content": {"type": "text", "text": message}}
    if isinstance(message, Mapping) and message.get("role") in ("user", "assistant"):
        return dict(message)
    raise InvalidParams(
        "a sampling message is a string or {role: user|assistant, content: {...}},"
        f" not {message!r:.80}"
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def log_params(call: str, level: str, data: Any, logger: str | None) -> dict[str, Any]:
    """``mesh/log``'s params; an unknown level is refused (MCP's eight only)."""
    if level not in LOG_LEVELS:
        raise InvalidParams(f"unknown log level {level!r}; MCP's levels: {', '.join(LOG_LEVELS)}")
    params: dict[str, Any] = {"call": call, "level": level, "data": data}
    if logger is not None:
        params["logger"] = logger
    return params


# -- the caller's side ------------------------------------------------------------------------


def resolve_ask(
    params: Any, handlers: Mapping[RequestId, AskHandlers], in_flight: int
) -> tuple[AskHandler, Kind, dict[str, Any]]:
    """The handler that answers one ``mesh/ask``, or the MeshError that refuses it.

    ``handlers`` holds the calls this link has in flight (those made with none too,
    as empty entries); ``in_flight`` counts the asks being answered already.
    """
    try:
        ask = msgspec.convert(params, _AskParams)
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"invalid {ASK_METHOD} params: {exc}") from None
    own = handlers.get(RequestId(ask.call))
    if own is None:
        raise InvalidParams(
            f"{ASK_METHOD} names call {ask.call!r}, which this caller has not in flight"
            " on this link (it ended, or was never made here)"
        )
    key, what = _WANTS[ask.kind]
    handler = own.get("on_elicit") if ask.kind == "elicit" else own.get("on_sample")
    if handler is None:
        raise MethodNotFound(f"the caller of this call takes no {what} (it passed no {key})")
    if in_flight >= MAX_ASKS_IN_FLIGHT:
        raise MeshError(
            f"{MAX_ASKS_IN_FLIGHT} asks are in flight on this link (MAX_ASKS_IN_FLIGHT):"
            " answer one, then ask again",
            code=ErrorCode.UNAVAILABLE,
            data={"limit": "MAX_ASKS_IN_FLIGHT"},
        )
    return handler, ask.kind, ask.params


_ANSWERS: Final[dict[str, type[Elicited] | type[Sampled]]] = {
    "elicit": Elicited,
    "sample": Sampled,
}


async def answer_ask(handler: AskHandler, kind: Kind, params: dict[str, Any]) -> Any:
    """Run the caller's handler and check its answer has the shape MCP gives it."""
    answer = await handler(params)
    if isinstance(answer, Elicited | Sampled):
        answer = msgspec.to_builtins(answer)
    try:
        msgspec.convert(answer, _ANSWERS[kind])
    except msgspec.ValidationError as exc:
        what = "ElicitResult" if kind == "elicit" else "CreateMessageResult"
        raise InvalidParams(f"the caller's {kind} handler answered no {what}: {exc}") from None
    answer = dict(answer)  # checked, and passed on whole (its `_meta` too)
    if kind == "elicit" and answer.get("action") == "accept":
        answer["content"] = with_defaults(params.get("requestedSchema"), answer.get("content"))
    return answer


def with_defaults(schema: Any, content: Any) -> dict[str, Any]:
    """An accepted elicitation's content, each field it leaves out that the schema gives a
    ``default`` filled with that default (as MCP asks of a client: the asker then gets
    every field it offered a value for, whoever answered)."""
    filled = dict(content) if isinstance(content, dict) else {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, spec in properties.items():
            if name not in filled and isinstance(spec, dict) and "default" in spec:
                filled[name] = spec["default"]
    return filled


def deliver_log(handlers: AskHandlers | None, params: Any) -> None:
    """Hand one ``mesh/log`` to its call's ``on_log`` (none: dropped, as MCP allows)."""
    on_log = handlers.get("on_log") if handlers is not None else None
    if on_log is None or not isinstance(params, dict):
        return
    try:
        on_log(params)
    except Exception:
        log.exception("mesh.on_log_failed", call=params.get("call"))


# -- relays -----------------------------------------------------------------------------------


class _Forwards(Protocol):
    def log_raw(self, params: Mapping[str, Any]) -> None: ...

    async def ask(self, kind: Kind, params: dict[str, Any]) -> Any: ...


def forward_to(ctx: _Forwards) -> AskHandlers:
    """Handlers that pass a call's logs and asks on to ``ctx``'s own caller: what
    whoever calls an agent on another's behalf gives the call it makes."""

    async def elicit(params: dict[str, Any]) -> Any:
        return await ctx.ask("elicit", params)

    async def sample(params: dict[str, Any]) -> Any:
        return await ctx.ask("sample", params)

    return {"on_log": ctx.log_raw, "on_elicit": elicit, "on_sample": sample}


def refusing(why: str) -> AskHandlers:
    """Handlers that refuse every ask with ``why``: for a caller that has nowhere to
    take one (the answer comes at once, never a hang); logs are dropped."""

    async def refuse(params: dict[str, Any]) -> Any:
        raise MethodNotFound(why)

    return {"on_elicit": refuse, "on_sample": refuse}
