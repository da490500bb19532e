"""Content items: what a tool may return besides a plain value.

A tool returns a plain JSON value as always, or content items — :class:`Text`,
:class:`Image` and :class:`Audio` (bytes and a media type), a :class:`ResourceLink`,
an :class:`EmbeddedResource` — alone or as a list, or a :class:`ToolResult` that
holds items and, for a tool that declares ``-> ToolResult[T]``, structured data of
type ``T`` (its output schema)::

    @agent.tool
    def chart(days: int) -> ToolResult[Summary]:
        "A chart of the last days, and the numbers behind it."
        return ToolResult([Text("the chart"), Image(png, "image/png")], structured=summary)

On the mesh's wire such a result is one JSON object whose items have MCP's shapes
(``{"type": "image", "data": "<base64>", "mimeType": "image/png"}``), so every
caller — the SDK, ``mesh call``, ``POST /rpc``, MCP clients — reads the same thing::

    {"$content": [{"type": "text", "text": "the chart"}, ...], "$structured": {...}}

:func:`decode` turns such an answer back into a :class:`ToolResult` (None for a plain
value), naming what is wrong with a bad one; a mounted MCP server's items travel in
this form unchanged.
"""

from __future__ import annotations

from types import UnionType
from typing import Any, Final, Generic, TypeVar, Union, get_args, get_origin

import msgspec

from mesh._errors import ToolError

__all__ = [
    "CONTENT_KEY",
    "MAX_ITEM_BYTES",
    "STRUCTURED_KEY",
    "Audio",
    "EmbeddedResource",
    "Image",
    "Item",
    "PromptMessage",
    "ResourceLink",
    "Text",
    "ToolResult",
    "decode",
]

#: The key of a content answer's items on the wire, and of its structured data.
CONTENT_KEY: Final = "$content"
STRUCTURED_KEY: Final = "$structured"
#: The largest image, audio or blob one item may carry (before base64): a bigger one
#: is refused by name rather than left to fail as an oversized frame.
MAX_ITEM_BYTES: Final = 8 * 1024 * 1024
_KINDS: Final = "text, image, audio, resource_link, resource"

T = TypeVar("T")


class _Item(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel"):
    """Fields in MCP's spelling on the wire (``mime_type`` is ``mimeType``)."""


class Text(_Item, frozen=True, tag="text"):
    text: str


class Image(_Item, frozen=True, tag="image"):
    data: bytes
    mime_type: str


class Audio(_Item, frozen=True, tag="audio"):
    data: bytes
    mime_type: str


class ResourceLink(_Item, frozen=True, tag="resource_link", omit_defaults=True):
    """A pointer to a resource the client may read (not its contents)."""

    uri: str
    name: str
    mime_type: str | None = None
    description: str | None = None
    title: str | None = None


class _Resource(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: bytes | None = None


class EmbeddedResource(_Item, frozen=True, tag="resource"):
    """A resource's contents inline: ``text``, or ``blob`` bytes."""

    resource: _Resource

    @classmethod
    def of(
        cls,
        uri: str,
        *,
        mime_type: str | None = None,
        text: str | None = None,
        blob: bytes | None = None,
    ) -> EmbeddedResource:
        if (text is None) == (blob is None):
            raise ValueError("an embedded resource holds either `text` or `blob`")
        return cls(resource=_Resource(uri=uri, mime_type=mime_type, text=text, blob=blob))


Item = Text | Image | Audio | ResourceLink | EmbeddedResource
_ITEM_TYPES: Final = (Text, Image, Audio, ResourceLink, EmbeddedResource)


class PromptMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a prompt: who says it (``"user"`` or ``"assistant"``) and one
    content item (a str is text). A prompt that returns plain items says them as the user."""

    role: str = "user"
    content: str | Item = ""


class ToolResult(msgspec.Struct, Generic[T], frozen=True, omit_defaults=True):
    """Content items, and structured data when the tool declares ``-> ToolResult[T]``."""

    content: list[Item] = msgspec.field(name=CONTENT_KEY)
    structured: T | None = msgspec.field(default=None, name=STRUCTURED_KEY)


def content_return(annotation: Any) -> tuple[bool, Any]:
    """Whether a tool's return annotation is content, and its structured type ``T``
    (``-> ToolResult[T]``; None when the tool declares no structured data)."""
    if annotation is ToolResult:
        return True, None
    if get_origin(annotation) is ToolResult:
        return True, get_args(annotation)[0]
    leaves = [annotation]
    if get_origin(annotation) in (Union, UnionType):
        leaves = list(get_args(annotation))
    elif get_origin(annotation) is list and get_args(annotation):
        leaves = list(get_args(get_args(annotation)[0])) or [get_args(annotation)[0]]
    return all(leaf in _ITEM_TYPES for leaf in leaves), None


def is_content(result: Any) -> bool:
    """Whether a tool's return value is content (an item, a list of them, a ToolResult)."""
    if isinstance(result, ToolResult | _Item):
        return True
    return (
        isinstance(result, list)
        and bool(result)
        and all(isinstance(item, _ITEM_TYPES) for item in result)
    )


def to_result(result: Any) -> ToolResult[Any]:
    """A tool's content return value as one :class:`ToolResult`, its sizes checked."""
    if isinstance(result, ToolResult):
        answer = result
    else:
        answer = ToolResult(content=[result] if isinstance(result, _ITEM_TYPES) else list(result))
    for index, item in enumerate(answer.content):
        _check_size(item, index)
    return answer


def _check_size(item: Any, index: int) -> None:
    data = item.data if isinstance(item, Image | Audio) else None
    if isinstance(item, EmbeddedResource):
        data = item.resource.blob
    if data is not None and len(data) > MAX_ITEM_BYTES:
        raise ToolError(
            f"content item {index} ({item.__struct_config__.tag}) holds {len(data)} bytes; "
            f"an item may hold at most {MAX_ITEM_BYTES} (mesh.content.MAX_ITEM_BYTES) - "
            f"at `$.{CONTENT_KEY}[{index}]`",
            data={"type": "ContentTooLarge"},
        )


def decode(answer: Any) -> ToolResult[Any] | None:
    """The :class:`ToolResult` a tool's answer holds; None for a plain value.

    Raises :class:`~mesh.ToolError` naming the rule for a content answer that is
    malformed (an item of an unknown type, a field missing, data too large)."""
    if not isinstance(answer, dict) or CONTENT_KEY not in answer:
        return None
    try:
        result = msgspec.convert(answer, ToolResult[Any], strict=False)
    except msgspec.ValidationError as exc:
        raise ToolError(
            f"a content answer is malformed: {exc} (an item's type is one of {_KINDS})",
            data={"type": "InvalidContent"},
        ) from None
    for index, item in enumerate(result.content):
        _check_size(item, index)
    return result
