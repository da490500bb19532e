"""The daemon's MCP face: ``/mcp`` over HTTP, and over WebSocket for ``mesh mcp``.

Every agent's tools (see :class:`~mesh.mcp.ToolCatalog`), plus three room tools:
``mesh_start_room`` (the body of ``POST /rooms``), ``mesh_room_transcript`` and
``mesh_list_rooms``. ``mesh mcp`` relays an MCP host's stdio onto the WebSocket
``/mcp``, where a link is a stream: changes arrive as they happen.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from mesh._errors import InvalidParams
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh.mcp import ExtraTool, ToolCatalog, serve_mcp
from mesh.mcp._http_server import McpHttpEndpoint
from mesh.rooms import RoomError, RoomManager, RoomSpec, decode_room_spec
from transports import HttpRequest, HttpResponse, WebSocketStream

__all__ = ["MCP_PATH", "DaemonMcp", "room_tools"]

MCP_PATH: Final = "/mcp"


def _schema(tp: Any) -> dict[str, Any]:
    """A self-contained object schema: the top-level ``$ref`` inlined, ``$defs`` kept."""
    schema = msgspec.json.schema(tp)
    ref = schema.get("$ref")
    defs: dict[str, Any] = schema.get("$defs", {})
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        top = dict(defs.pop(ref.removeprefix("#/$defs/")))
        if defs:
            top["$defs"] = defs
        return top
    return schema


def _room_id(arguments: dict[str, Any]) -> str:
    room_id = arguments.get("room_id")
    if not isinstance(room_id, str) or not room_id:
        raise InvalidParams("`room_id` must be a room's id - at `$.params.arguments.room_id`")
    return room_id


def room_tools(rooms: RoomManager) -> list[ExtraTool]:
    """Starting a room and reading it, as tools an MCP client can call."""

    async def start(arguments: dict[str, Any]) -> Any:
        try:
            spec = decode_room_spec(arguments)
            return msgspec.to_builtins(await rooms.create(spec))
        except RoomError as exc:
            raise InvalidParams(str(exc)) from None

    async def transcript(arguments: dict[str, Any]) -> Any:
        room_id = _room_id(arguments)
        try:
            snapshot = await rooms.get(room_id)
            messages = await rooms.transcript(room_id)
        except RoomError as exc:
            raise InvalidParams(str(exc)) from None
        return {"room": msgspec.to_builtins(snapshot), "transcript": msgspec.to_builtins(messages)}

    async def listing(arguments: dict[str, Any]) -> Any:
        return {"rooms": msgspec.to_builtins(await rooms.list())}

    by_id = {
        "type": "object",
        "properties": {"room_id": {"type": "string", "description": "the room's id"}},
        "required": ["room_id"],
    }
    return [
        ExtraTool(
            "mesh_start_room",
            "Start a conversation room: agents take turns on a topic (members are agent ids).",
            _schema(RoomSpec),
            start,
        ),
        ExtraTool(
            "mesh_room_transcript",
            "A room's status and its messages so far, in turn order.",
            by_id,
            transcript,
        ),
        ExtraTool(
            "mesh_list_rooms", "Every room and where it stands.", {"type": "object"}, listing
        ),
    ]


class DaemonMcp:
    """What the daemon's routes call for ``/mcp``; follows the registry while attached."""

    def __init__(self, orchestrator: MeshOrchestrator, rooms: RoomManager | None) -> None:
        extra = room_tools(rooms) if rooms is not None else []
        self.catalog = ToolCatalog(orchestrator, extra=extra)
        self.http = McpHttpEndpoint(self.catalog)

    def attach(self) -> None:
        self.catalog.attach()

    def detach(self) -> None:
        self.catalog.detach()

    async def handle(self, request: HttpRequest) -> HttpResponse:
        return await self.http.handle(request)

    async def serve_websocket(self, stream: WebSocketStream, _: str | None) -> None:
        await serve_mcp(stream, self.catalog)
