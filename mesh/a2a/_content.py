"""A tool's result as A2A artifacts, and how a tool says no.

A plain value is one artifact, ``result``: a string as a text part, anything else
as a data part. A content answer (``mesh.content``: a tool returned items) keeps
what each item is:

==========================  ==================================================
 ``Text``                    a text part, in ``result``
 ``Image``, ``Audio``        a file part: ``raw`` (base64) and ``mediaType``, in
                             ``result``
 structured data             a data part, in ``result``
 ``ResourceLink``            an artifact of its own, named by the link's
                             ``name``: one ``url`` part (``mediaType``,
                             ``filename``) — the file stays where it is
 ``EmbeddedResource``        an artifact of its own, named by its ``uri``: its
                             ``text`` as a text part, or its ``blob`` as ``raw``
==========================  ==================================================

So a tool that returns a report and two files gives the client three artifacts.

A tool refuses a task (A2A's ``REJECTED``, not ``FAILED``: the agent will not do
it, rather than could not) by raising ``ToolError(..., data={"type": "Rejected"})``,
and answers with a ``Message`` instead of a task's artifacts by returning
``{"$message": value}`` (``value`` as any result: its parts are the message's).

A tool that declares an argument named ``a2a`` is given the request's context in
it (:func:`request_context`): the message's id, context id, task id, the ids of
tasks it refers to, both metadata objects, and the message's file parts as content
items (``mesh.content``'s wire shapes: a ``url`` a resource link, ``raw`` bytes an
embedded resource). The server fills it, so a client
cannot pass one of its own making.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from mesh import content
from mesh._errors import MeshError

__all__ = [
    "CONTEXT_ARGUMENT",
    "MESSAGE_KEY",
    "REJECTED",
    "message_reply",
    "rejected",
    "request_context",
    "result_artifacts",
    "wants_context",
]

#: The ``data.type`` of a tool error that rejects the task.
REJECTED: Final = "Rejected"
#: A result ``{MESSAGE_KEY: value}`` answers with a Message, not a task's artifacts.
MESSAGE_KEY: Final = "$message"
#: The argument a tool declares to be given the request's A2A context.
CONTEXT_ARGUMENT: Final = "a2a"


def wants_context(tools: list[Any], name: str) -> bool:
    """Whether tool ``name`` declares the ``a2a`` argument (its input schema says)."""
    tool = next((t for t in tools if isinstance(t, dict) and t.get("name") == name), None)
    schema = tool.get("inputSchema") if tool is not None else None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(properties, dict) and CONTEXT_ARGUMENT in properties


def request_context(message: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """What a tool is told of the request it serves (see the module)."""
    return {
        "messageId": message.get("messageId", ""),
        "contextId": message.get("contextId", ""),
        "taskId": message.get("taskId", ""),
        "referenceTaskIds": list(message.get("referenceTaskIds") or []),
        "metadata": dict(message.get("metadata") or {}),
        "requestMetadata": dict(metadata),
        "files": [_item(p, i) for i, p in enumerate(message.get("parts") or ()) if _is_file(p)],
    }


def _is_file(part: Any) -> bool:
    return isinstance(part, dict) and ("raw" in part or "url" in part)


def _item(part: dict[str, Any], index: int) -> dict[str, Any]:
    """A file part as a content item on the mesh's wire (``mesh.content``): a ``url`` is a
    resource link, ``raw`` bytes an embedded resource (base64 both ways)."""
    name = str(part.get("filename") or f"part-{index}")
    media = part.get("mediaType")
    if "url" in part:
        link = {"type": "resource_link", "uri": str(part["url"]), "name": name}
        return link | ({"mimeType": media} if media else {})
    resource = {"uri": f"a2a:part/{index}/{name}", "blob": part["raw"]}
    return {"type": "resource", "resource": resource | ({"mimeType": media} if media else {})}


def message_reply(result: Any) -> list[dict[str, Any]] | None:
    """The parts of the Message a result asks to be answered with (None: it asks not)."""
    if not isinstance(result, dict) or set(result) != {MESSAGE_KEY}:
        return None
    return [part for _, parts in result_artifacts(result[MESSAGE_KEY]) for part in parts]


def rejected(exc: MeshError) -> bool:
    """Whether a failed call was the tool declining the task (see the module)."""
    data = getattr(exc, "data", None)
    return isinstance(data, dict) and data.get("type") == REJECTED


def result_artifacts(result: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(name, parts)`` of each artifact a tool's result becomes (see the module)."""
    answer = content.decode(result)
    if answer is None:
        return [("result", [{"text": result} if isinstance(result, str) else {"data": result}])]
    main: list[dict[str, Any]] = []
    others: list[tuple[str, list[dict[str, Any]]]] = []
    for item in answer.content:
        if isinstance(item, content.ResourceLink):
            others.append((item.name, [_link(item)]))
        elif isinstance(item, content.EmbeddedResource):
            others.append((item.resource.uri, [_embedded(item)]))
        else:
            main.append(_inline(item))
    if answer.structured is not None:
        main.append({"data": answer.structured})
    return ([("result", main)] if main else []) + others


def _inline(item: content.Text | content.Image | content.Audio) -> dict[str, Any]:
    if isinstance(item, content.Text):
        return {"text": item.text}
    return {"raw": _b64(item.data), "mediaType": item.mime_type}


def _link(item: content.ResourceLink) -> dict[str, Any]:
    part: dict[str, Any] = {"url": item.uri, "filename": item.name}
    if item.mime_type:
        part["mediaType"] = item.mime_type
    return part


def _embedded(item: content.EmbeddedResource) -> dict[str, Any]:
    resource = item.resource
    part: dict[str, Any]
    if resource.blob is not None:
        part = {"raw": _b64(resource.blob)}
    else:
        part = {"text": resource.text or ""}
    name = resource.uri.rstrip("/").rsplit("/", 1)[-1]
    if name:
        part["filename"] = name
    if resource.mime_type:
        part["mediaType"] = resource.mime_type
    return part


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
