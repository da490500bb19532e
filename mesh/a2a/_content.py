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
it, rather than could not) by raising ``ToolError(..., data={"type": "Rejected"})``.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from mesh import content
from mesh._errors import MeshError

__all__ = ["REJECTED", "rejected", "result_artifacts"]

#: The ``data.type`` of a tool error that rejects the task.
REJECTED: Final = "Rejected"


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
