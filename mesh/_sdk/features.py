"""Resources, resource templates, prompts and completions: what an agent offers besides tools.

Declared as simply as tools, in the shape of the MCP SDK's server decorators::

    @agent.resource("config://app", mime_type="application/json")
    def app_config() -> str:
        "The app's settings."
        return '{"debug": false}'

    @agent.resource_template("users://{user_id}/profile")
    def profile(user_id: str) -> str:
        return f"the profile of {user_id}"

    @agent.prompt()
    def review(code: str, language: str = "python") -> str:
        "Ask for a review."
        return f"Please review this {language}: {code}"

    @agent.completion()
    def complete(ref: CompletionRef, argument: CompletionArgument, context: dict[str, str]):
        return [lang for lang in ("python", "rust") if lang.startswith(argument.value)]

On the mesh's wire they are methods the agent answers, in MCP's shapes, so every
caller (the SDK, ``mesh call``, ``POST /rpc``, MCP clients through ``/mcp``) reads
the same thing: ``resources/list``, ``resources/templates/list``, ``resources/read``,
``resources/subscribe``, ``resources/unsubscribe``, ``prompts/list``, ``prompts/get``,
``completion/complete``. An agent tells whoever listed or subscribed that something
changed with :meth:`Features.resource_updated` and :meth:`Features.changed`
(notifications ``resources/updated``, ``resources/list_changed``,
``prompts/list_changed``: MCP's names without the ``notifications/`` prefix).
"""

from __future__ import annotations

import base64
import inspect
import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, get_type_hints

import msgspec

from mesh import content
from mesh._errors import InvalidParams, MeshError, ToolError
from mesh._logging import get_logger
from mesh._rpc.peer import Peer, RequestContext

__all__ = [
    "PROMPTS_CHANGED",
    "RESOURCES_CHANGED",
    "RESOURCES_UPDATED",
    "RESOURCE_NOT_FOUND",
    "CompletionArgument",
    "CompletionRef",
    "Features",
    "template_pattern",
]

log = get_logger("mesh.agent")

#: MCP's error code for a URI no resource or template answers.
RESOURCE_NOT_FOUND: Final = -32002
#: At most this many completion values are sent (MCP's own bound).
MAX_COMPLETIONS: Final = 100
#: What an agent tells those that listed or subscribed (MCP's names, no prefix).
RESOURCES_UPDATED: Final = "resources/updated"
RESOURCES_CHANGED: Final = "resources/list_changed"
PROMPTS_CHANGED: Final = "prompts/list_changed"
_TEMPLATE_PARAM: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

Handler = Callable[..., Any]


class CompletionRef(msgspec.Struct, frozen=True, kw_only=True):
    """What is being completed: a prompt (``type`` ``"ref/prompt"``, its ``name``) or a
    resource template (``"ref/resource"``, its ``uri`` template)."""

    type: str
    name: str | None = None
    uri: str | None = None


class CompletionArgument(msgspec.Struct, frozen=True, kw_only=True):
    """The argument being completed and what the user typed so far."""

    name: str
    value: str = ""


class _Ref(msgspec.Struct, frozen=True):
    uri: str


class _Get(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, str] | None = None


class _Complete(msgspec.Struct, frozen=True):
    ref: CompletionRef
    argument: CompletionArgument
    context: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Resource:
    uri: str
    name: str
    description: str
    mime_type: str | None
    function: Handler
    #: ``{param}`` names of a template, and the pattern that matches its URIs.
    params: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None

    def describe(self) -> dict[str, Any]:
        key = "uri" if self.pattern is None else "uriTemplate"
        entry: dict[str, Any] = {key: self.uri, "name": self.name}
        if self.description:
            entry["description"] = self.description
        if self.mime_type:
            entry["mimeType"] = self.mime_type
        return entry


@dataclass(frozen=True, slots=True)
class _Prompt:
    name: str
    description: str
    function: Handler
    #: Each argument's name and whether it is required.
    arguments: tuple[tuple[str, bool], ...]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "arguments": [{"name": n, "required": r} for n, r in self.arguments],
        }


def _doc(function: Handler, description: str | None) -> str:
    return inspect.cleandoc(description or function.__doc__ or "")


def template_pattern(template: str) -> tuple[tuple[str, ...], re.Pattern[str]]:
    """A template's parameters, and a pattern matching its URIs (each ``{param}`` one
    path segment: RFC 6570's simple expansion, which is what resource templates use)."""
    params = tuple(_TEMPLATE_PARAM.findall(template))
    pieces = _TEMPLATE_PARAM.split(template)
    regex = "".join(
        f"(?P<{piece}>[^/?#]+)" if index % 2 else re.escape(piece)
        for index, piece in enumerate(pieces)
    )
    return params, re.compile(regex)


def _parameters(function: Handler) -> list[inspect.Parameter]:
    """A handler's parameters, but for one annotated :class:`~mesh.RequestContext`."""
    hints = get_type_hints(function)
    return [
        p
        for p in inspect.signature(function).parameters.values()
        if hints.get(p.name) is not RequestContext
    ]


def _with_context(function: Handler, ctx: RequestContext, kwargs: dict[str, Any]) -> Any:
    hints = get_type_hints(function)
    for name, hint in hints.items():
        if hint is RequestContext:
            kwargs[name] = ctx
    return function(**kwargs)


async def _run(what: str, function: Handler, ctx: RequestContext, kwargs: dict[str, Any]) -> Any:
    """Call a handler (``def`` or ``async def``); its failure is the caller's ToolError."""
    try:
        result = _with_context(function, ctx, kwargs)
        if inspect.isawaitable(result):
            result = await result
    except MeshError:
        raise
    except Exception as exc:
        log.warning("agent.feature_failed", what=what, error=repr(exc), exc_info=exc)
        raise ToolError(f"{what} failed: {exc or type(exc).__name__}") from exc
    return result


def _contents(uri: str, mime_type: str | None, result: Any) -> list[dict[str, Any]]:
    """A resource handler's answer as MCP's ``contents``: text, bytes or content items."""
    items = result if isinstance(result, list) else [result]
    return [_one_content(uri, mime_type, item, index) for index, item in enumerate(items)]


def _one_content(uri: str, mime_type: str | None, item: Any, index: int) -> dict[str, Any]:
    if isinstance(item, content.EmbeddedResource):
        return msgspec.to_builtins(item.resource)  # type: ignore[no-any-return]
    if isinstance(item, content.Text):
        item = item.text
    elif isinstance(item, content.Image | content.Audio):
        mime_type, item = item.mime_type, item.data
    if isinstance(item, str):
        return {"uri": uri, "mimeType": mime_type or "text/plain", "text": item}
    if isinstance(item, bytes | bytearray):
        if len(item) > content.MAX_ITEM_BYTES:
            raise ToolError(
                f"resource {uri!r} holds {len(item)} bytes; a resource may hold at most "
                f"{content.MAX_ITEM_BYTES} (mesh.content.MAX_ITEM_BYTES)"
                f" - at `$.contents[{index}]`",
                data={"type": "ContentTooLarge"},
            )
        blob = base64.b64encode(bytes(item)).decode()
        return {"uri": uri, "mimeType": mime_type or "application/octet-stream", "blob": blob}
    raise ToolError(
        f"resource {uri!r} answered a {type(item).__name__}; a resource answers text, bytes,"
        f" or mesh.content items - at `$.contents[{index}]`"
    )


_MESSAGE_ITEMS: Final = (
    content.Text,
    content.Image,
    content.Audio,
    content.ResourceLink,
    content.EmbeddedResource,
)


def _message(item: Any, index: int) -> dict[str, Any]:
    """One prompt message in MCP's shape (a str is a user's text)."""
    role = "user"
    if isinstance(item, content.PromptMessage):
        role, item = item.role, item.content
    if isinstance(item, str):
        item = content.Text(text=item)
    if not isinstance(item, _MESSAGE_ITEMS):
        raise ToolError(
            f"a prompt message is text, a content item or a PromptMessage, not a "
            f"{type(item).__name__} - at `$.messages[{index}]`"
        )
    content.to_result(item)  # the size bounds of tool results hold here too
    return {"role": role, "content": msgspec.to_builtins(item)}


class Features:
    """An agent's resources, templates, prompts and completion (see the module docstring)."""

    def __init__(self, agent_id: str) -> None:
        self._agent = agent_id
        self.resources: dict[str, _Resource] = {}
        self.templates: dict[str, _Resource] = {}
        self.prompts: dict[str, _Prompt] = {}
        self.completion: Handler | None = None
        #: Who listed (and so is told of changes), and each subscriber's URIs.
        self._listeners: weakref.WeakSet[Peer] = weakref.WeakSet()
        self._subscribed: weakref.WeakKeyDictionary[Peer, set[str]] = weakref.WeakKeyDictionary()

    # -- declaring -----------------------------------------------------------------------

    def add_resource(
        self,
        uri: str,
        function: Handler,
        *,
        name: str | None,
        description: str | None,
        mime_type: str | None,
    ) -> None:
        if _TEMPLATE_PARAM.search(uri):
            return self.add_template(
                uri, function, name=name, description=description, mime_type=mime_type
            )
        if _parameters(function):
            raise TypeError(f"resource {uri!r}: a fixed URI's function takes no arguments")
        if uri in self.resources:
            raise ValueError(f"agent {self._agent!r} already has a resource {uri!r}")
        self.resources[uri] = _Resource(
            uri, name or function.__name__, _doc(function, description), mime_type, function
        )
        return None

    def add_template(
        self,
        template: str,
        function: Handler,
        *,
        name: str | None,
        description: str | None,
        mime_type: str | None,
    ) -> None:
        params, pattern = template_pattern(template)
        taken = {p.name for p in _parameters(function)}
        if not params or taken != set(params):
            raise TypeError(
                f"resource template {template!r}: the function's parameters {sorted(taken)}"
                f" must be the template's {{params}} {list(params)}"
            )
        if template in self.templates:
            raise ValueError(f"agent {self._agent!r} already has a template {template!r}")
        self.templates[template] = _Resource(
            template,
            name or function.__name__,
            _doc(function, description),
            mime_type,
            function,
            params,
            pattern,
        )

    def add_prompt(self, function: Handler, *, name: str | None, description: str | None) -> None:
        prompt_name = name or function.__name__
        arguments = tuple((p.name, p.default is p.empty) for p in _parameters(function))
        if prompt_name in self.prompts:
            raise ValueError(f"agent {self._agent!r} already has a prompt {prompt_name!r}")
        self.prompts[prompt_name] = _Prompt(
            prompt_name, _doc(function, description), function, arguments
        )

    @property
    def methods(self) -> dict[str, Callable[[RequestContext, Any], Any]]:
        """The mesh methods these features answer, for the agent's method table."""
        return {
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._read,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "prompts/list": self._list_prompts,
            "prompts/get": self._get_prompt,
            "completion/complete": self._complete,
        }

    # -- telling of changes --------------------------------------------------------------

    def resource_updated(self, uri: str) -> None:
        """Tell each peer subscribed to ``uri`` that it changed (no wait)."""
        for peer, uris in list(self._subscribed.items()):
            if uri in uris and not peer.closed:
                peer.notify_nowait(RESOURCES_UPDATED, {"uri": uri})

    def changed(self, method: str) -> None:
        """Tell every peer that listed that a list changed (no wait)."""
        for peer in list(self._listeners):
            if not peer.closed:
                peer.notify_nowait(method)

    def _heard_from(self, ctx: RequestContext) -> None:
        if ctx.peer is not None:
            self._listeners.add(ctx.peer)

    # -- answering -----------------------------------------------------------------------

    def _list_resources(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        self._heard_from(ctx)
        return {"resources": [r.describe() for r in self.resources.values()]}

    def _list_templates(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        self._heard_from(ctx)
        return {"resourceTemplates": [t.describe() for t in self.templates.values()]}

    def _list_prompts(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        self._heard_from(ctx)
        return {"prompts": [p.describe() for p in self.prompts.values()]}

    def _uri(self, method: str, params: Any) -> str:
        try:
            return msgspec.convert(params, _Ref).uri
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid {method} params: {exc} - at `$.params`") from None

    def find(self, uri: str) -> tuple[_Resource, dict[str, str]]:
        """The resource or template answering ``uri``, and the template's parameters."""
        found = self.resources.get(uri)
        if found is not None:
            return found, {}
        for template in self.templates.values():
            assert template.pattern is not None
            match = template.pattern.fullmatch(uri)
            if match is not None:
                return template, match.groupdict()
        raise MeshError(
            f"agent {self._agent!r} has no resource {uri[:200]!r} (resources/list and "
            "resources/templates/list name them)",
            code=RESOURCE_NOT_FOUND,
            data={"uri": uri[:200]},
        )

    async def _read(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        uri = self._uri("resources/read", params)
        resource, kwargs = self.find(uri)
        result = await _run(f"resource {uri!r}", resource.function, ctx, kwargs)
        return {"contents": _contents(uri, resource.mime_type, result)}

    def _subscribe(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        uri = self._uri("resources/subscribe", params)
        self.find(uri)  # an unknown URI is refused now, not silently never updated
        if ctx.peer is not None:
            self._subscribed.setdefault(ctx.peer, set()).add(uri)
        return {}

    def _unsubscribe(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        uri = self._uri("resources/unsubscribe", params)
        if ctx.peer is not None:
            self._subscribed.get(ctx.peer, set()).discard(uri)
        return {}

    async def _get_prompt(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        try:
            get = msgspec.convert(params, _Get)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid prompts/get params: {exc} - at `$.params`") from None
        prompt = self.prompts.get(get.name)
        if prompt is None:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise InvalidParams(
                f"agent {self._agent!r} has no prompt {get.name[:200]!r} (prompts: {known})"
            )
        given = get.arguments or {}
        names = {n for n, _ in prompt.arguments}
        missing = [n for n, required in prompt.arguments if required and n not in given]
        unknown = sorted(set(given) - names)
        if missing or unknown:
            why = f"missing {missing}" if missing else f"unknown {unknown[:5]}"
            raise InvalidParams(
                f"prompt {get.name!r} takes arguments {sorted(names)}: {why}"
                " - at `$.params.arguments`"
            )
        result = await _run(f"prompt {get.name!r}", prompt.function, ctx, dict(given))
        items = result if isinstance(result, list) else [result]
        answer: dict[str, Any] = {"messages": [_message(m, i) for i, m in enumerate(items)]}
        if prompt.description:
            answer["description"] = prompt.description
        return answer

    async def _complete(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        try:
            asked = msgspec.convert(params, _Complete)
        except msgspec.ValidationError as exc:
            raise InvalidParams(
                f"invalid completion/complete params: {exc} - at `$.params`"
            ) from None
        values: list[str] = []
        if self.completion is not None:
            kwargs = {
                "ref": asked.ref,
                "argument": asked.argument,
                "context": dict((asked.context or {}).get("arguments") or {}),
            }
            found = await _run("completion", self.completion, ctx, kwargs)
            values = [str(v) for v in _iterable(found)]
        return {
            "completion": {
                "values": values[:MAX_COMPLETIONS],
                "total": len(values),
                "hasMore": len(values) > MAX_COMPLETIONS,
            }
        }


def _iterable(found: Any) -> Iterable[Any]:
    if found is None:
        return ()
    if isinstance(found, str):
        return (found,)
    return found  # type: ignore[no-any-return]
