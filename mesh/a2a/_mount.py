"""Mounting a remote A2A agent as a mesh agent.

:func:`a2a_connector` is a connector like any other: each connection fetches the
agent's card (a dead agent fails the connect, and the orchestrator retries with
backoff), then serves an :class:`A2aMount` on one end of an in-memory link whose
other end the orchestrator talks over. While it is up, the card is fetched again
every ``liveness`` seconds (cheaply: its ETag); a card that cannot be fetched
ends the link, so calls in flight fail at once and the agent goes offline.

What the mesh asks and what the A2A agent is asked:

==============  ==========================================================================
``agent/info``  - (from the card: name, description, version, skills)
``ping``        ``GET`` the card
``tools/list``  - (each skill is a tool named by its id, taking ``text`` and any fields;
                a card with no skills has one tool, ``message``)
``tools/call``  ``SendStreamingMessage`` (``SendMessage`` if the card says no streaming);
                ``text`` is a text part and the other arguments one data part, and the
                skill's id rides in the message's ``metadata.skill``; a name that is
                no tool of the card's is refused (``MethodNotFound``), not sent
``room/turn``   the room's new lines as one text message, in one ``contextId`` per room;
                the reply streams back as the room's deltas
==============  ==========================================================================

A ``WORKING`` status with a message is progress (and moves the call's deadline);
appended artifact text is a chat reply's delta. The result is the artifacts'
one text (or one data value), else ``{"artifacts": [...]}``; ``FAILED`` or
``REJECTED`` raise :class:`~mesh.ToolError` with the agent's words. When the mesh
call ends early (its deadline, the caller's cancel), the task gets ``CancelTask``.

A task that rests in ``INPUT_REQUIRED`` asks the mesh caller (``ctx.elicit``: the
status message's text, and its schema where a data part of media type
``application/schema+json`` holds one, else one text field); the answer is the next
message of that task (a text part for the text field, else a data part of the
fields), and the call goes on. A question asked as a long-running function call (Google
ADK's way: a data part marked ``adk_type: function_call``) is asked by its string
arguments, and answered as that function's response. A caller that declines, cancels or
cannot be asked gets the task cancelled (``CancelTask``) and a ``ToolError`` saying so.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import anyio

from mesh._errors import MeshError, MethodNotFound, ProtocolError, ToolError
from mesh._logging import get_logger
from mesh._rpc.asks import check_elicit_schema
from mesh._rpc.peer import Peer, RequestContext, open_peer
from mesh._rpc.session import SessionConfig
from mesh.a2a._asking import SCHEMA_MEDIA
from mesh.a2a._client import A2aClient
from mesh.a2a._mapping import ROOM_TURN
from mesh.a2a._wire import INTERRUPTED, TERMINAL
from transports import Connector, FrameStream, memory_stream_pair

__all__ = ["A2aMount", "a2a_connector", "open_a2a_mount"]

log = get_logger("mesh.a2a")

#: ``CancelTask`` after a mesh call ends early: bounded, it is a courtesy to the agent.
CANCEL_TIMEOUT: Final = 5.0
#: How often the card is fetched to know the agent is alive.
DEFAULT_LIVENESS: Final = 10.0
#: The one tool of an agent whose card lists no skills: what it is sent is its message.
ENTRY: Final = "message"
#: The agent's question as the mesh caller is asked it when it names no schema: its text.
_TEXT_ANSWER: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "your answer"}},
    "required": ["text"],
}
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
#: The part metadata by which Google ADK tells a function call or response from other data.
_ADK_TYPE: Final = "adk_type"
_SCHEMA: Final = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "the message, as text"}},
    "additionalProperties": True,
}


def _texts(parts: Any) -> list[str]:
    return [
        p["text"] for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


class _Call:
    """What one task said, as it streams in."""

    def __init__(self, on_piece: Callable[[str], None] | None, ctx: RequestContext) -> None:
        self.task_id = ""
        self.context_id = ""
        self.state = "TASK_STATE_SUBMITTED"
        self.message: dict[str, Any] | None = None
        self.artifacts: dict[str, dict[str, Any]] = {}
        self._on_piece = on_piece
        self._ctx = ctx
        self._reports = 0

    def take(self, result: Any) -> None:
        if not isinstance(result, dict):
            raise ProtocolError(f"an A2A event must be an object, not {result!r}")
        if "task" in result:
            task = result["task"]
            self.task_id = str(task.get("id", ""))
            self.context_id = str(task.get("contextId", ""))
            for artifact in task.get("artifacts") or ():
                self.artifacts[artifact["artifactId"]] = artifact
            self._status(task.get("status") or {})
        elif "message" in result:
            self.message, self.state = result["message"], "TASK_STATE_COMPLETED"
        elif "statusUpdate" in result:
            update = result["statusUpdate"]
            self.task_id = self.task_id or str(update.get("taskId", ""))
            self.context_id = self.context_id or str(update.get("contextId", ""))
            self._status(result["statusUpdate"].get("status") or {})
        elif "artifactUpdate" in result:
            self._artifact(result["artifactUpdate"])

    def _status(self, status: dict[str, Any]) -> None:
        self.state = str(status.get("state", self.state))
        self.message = status.get("message") or self.message
        text = " ".join(_texts((status.get("message") or {}).get("parts")))
        if self.state == "TASK_STATE_WORKING" and text:
            self._reports += 1
            self._ctx.report_progress(self._reports, message=text)

    def _artifact(self, update: dict[str, Any]) -> None:
        artifact = update.get("artifact") or {}
        key = str(artifact.get("artifactId", ""))
        kept = self.artifacts.get(key)
        if update.get("append") and kept is not None:
            kept["parts"] = list(kept.get("parts") or ()) + list(artifact.get("parts") or ())
        else:
            self.artifacts[key] = dict(artifact)
        if update.get("append") or not update.get("lastChunk", True):
            for piece in _texts(artifact.get("parts")):
                if self._on_piece is not None:
                    self._on_piece(piece)

    def result(self, agent: str, name: str) -> Any:
        said = " ".join(_texts((self.message or {}).get("parts"))) or self.state
        if self.state in ("TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"):
            raise ToolError(f"A2A agent {agent!r}: {name} ended {self.state}: {said}")
        if self.state in INTERRUPTED:
            raise ToolError(
                f"A2A agent {agent!r} asked for more ({self.state}: {said}),"
                " which the mesh does not bridge (it bridges INPUT_REQUIRED only)"
            )
        parts = [p for a in self.artifacts.values() for p in a.get("parts") or ()]
        if not parts and self.message is not None:
            parts = list(self.message.get("parts") or ())
        texts = _texts(parts)
        if parts and len(texts) == len(parts):
            return "".join(texts)
        if len(parts) == 1 and "data" in parts[0]:
            return parts[0]["data"]
        return {"artifacts": list(self.artifacts.values())}


class A2aMount:
    """Serves the mesh's side of one A2A agent (see the module docstring)."""

    def __init__(self, client: A2aClient) -> None:
        self.client = client
        self.agent = client.agent

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method == "agent/info":
            return self._info()
        if method == "ping":
            return self._ping()
        if method == "tools/list":
            return {"tools": self._tools()}
        if method == "tools/call":
            return self._call_tool(ctx, params)
        if method == ROOM_TURN:
            return self._turn(ctx, params)
        raise MethodNotFound(f"A2A agent {self.agent!r} does not serve {method!r}")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        log.debug("a2a.mesh_notification_ignored", agent=self.agent, method=method)

    def _info(self) -> dict[str, Any]:
        card = self.client.card
        return {
            "id": self.agent,
            "name": str(card.get("name") or self.agent),
            "description": str(card.get("description") or ""),
            "version": str(card.get("version") or ""),
            "capabilities": [],
            "tools": [t["name"] for t in self._tools()],
            "protocol": "a2a",
            "url": self.client.url,
        }

    async def _ping(self) -> dict[str, Any]:
        await self.client.fetch_card()
        return {"agent": self.agent}

    def _tools(self) -> list[dict[str, Any]]:
        skills = [s for s in self.client.card.get("skills") or () if isinstance(s, dict)]
        tools = [
            {
                "name": str(s["id"]),
                "description": str(s.get("description") or ""),
                "inputSchema": _SCHEMA,
            }
            for s in skills
            if s.get("id")
        ]
        if not tools:
            about = "A message to the agent: `text`, and any other fields as data."
            tools = [{"name": ENTRY, "description": about, "inputSchema": _SCHEMA}]
        return tools

    async def _call_tool(self, ctx: RequestContext, params: Any) -> Any:
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            raise ProtocolError("tools/call needs a tool `name` - at `$.payload.params.name`")
        known = [t["name"] for t in self._tools()]
        if name not in known:
            raise MethodNotFound(
                f"A2A agent {self.agent!r} has no skill {name!r}"
                f" (its card lists: {', '.join(known)})"
            )
        arguments = params.get("arguments") if isinstance(params, dict) else None
        message = _message(_parts(arguments), metadata={"skill": name})
        call = await self._send(ctx, message, None)
        return call.result(self.agent, name)

    async def _turn(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        if not isinstance(params, Mapping) or not isinstance(params.get("room_id"), str):
            raise ProtocolError("room/turn needs a `room_id`")
        room = params["room_id"]
        text = _new_lines(params.get("messages") or ())
        written = 0

        def piece(text: str) -> None:
            nonlocal written
            written += len(text)
            ctx.report_progress(written, message=text)

        message = _message([{"text": text or "(your turn)"}], context_id=f"room-{room}")
        call = await self._send(ctx, message, piece)
        reply = call.result(self.agent, ROOM_TURN)
        return {
            "room_id": room,
            "turn": params.get("turn", 0),
            "text": reply if isinstance(reply, str) else str(reply),
        }

    async def _send(
        self, ctx: RequestContext, message: dict[str, Any], piece: Callable[[str], None] | None
    ) -> _Call:
        """Send ``message``, and answer each question the task asks by asking the mesh
        caller, until the task ends (or rests for what the mesh does not bridge)."""
        call = _Call(piece, ctx)
        try:
            await self._exchange(call, message)
            while call.state == INPUT_REQUIRED:
                parts = await self._ask_caller(ctx, call)
                answer = _message(parts, context_id=call.context_id)
                await self._exchange(call, dict(answer, taskId=call.task_id))
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
                await self._cancel(call)
            raise
        return call

    async def _exchange(self, call: _Call, message: dict[str, Any]) -> None:
        """One message sent, and what the task said until it rested."""
        params = {"message": message}
        if (self.client.card.get("capabilities") or {}).get("streaming"):
            async for result in self.client.stream("SendStreamingMessage", params):
                call.take(result)
        else:
            call.take(await self.client.call("SendMessage", params))
        if call.state not in TERMINAL and call.state not in INTERRUPTED:
            raise ProtocolError(
                f"A2A agent {self.agent!r} ended its stream with the task {call.state}"
            )

    async def _ask_caller(self, ctx: RequestContext, call: _Call) -> list[dict[str, Any]]:
        """The task's question, as an elicitation of the mesh caller: the answer's parts
        for the next message. A caller that declines, cancels or cannot be asked gets the
        task cancelled and a :class:`~mesh.ToolError` saying so."""
        question, schema = _question(call.message)
        try:
            answer = await ctx.elicit(question, schema)
        except MeshError as exc:
            await self._cancel(call)
            raise ToolError(
                f"A2A agent {self.agent!r} asked for input ({question!r}) and the mesh"
                f" caller cannot be asked: {exc.message}; its task was cancelled"
            ) from None
        if answer.action != "accept":
            await self._cancel(call)
            raise ToolError(
                f"A2A agent {self.agent!r} asked for input ({question!r}) and the caller"
                f" answered {answer.action!r}; its task was cancelled"
            )
        content = dict(answer.content or {})
        asked_by_call = _function_call(call.message)
        if asked_by_call is not None:
            return [_function_response(asked_by_call, content)]
        if schema is _TEXT_ANSWER:
            return [{"text": str(content.get("text", ""))}]
        return [{"data": content}]

    async def _cancel(self, call: _Call) -> None:
        if not call.task_id or call.state in TERMINAL:
            return
        try:
            await self.client.call("CancelTask", {"id": call.task_id})
        except MeshError as exc:
            log.info("a2a.cancel_failed", agent=self.agent, task=call.task_id, error=str(exc))


def _question(message: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """What an ``INPUT_REQUIRED`` status asks: its text, and the schema a data part of
    media type ``application/schema+json`` holds (a mesh agent's question served over
    A2A carries one), else one text field."""
    parts = (message or {}).get("parts") or ()
    text = " ".join(_texts(parts)) or _call_question(_function_call(message))
    for part in parts:
        if isinstance(part, dict) and part.get("mediaType") == SCHEMA_MEDIA:
            try:
                check_elicit_schema(part.get("data"))
            except MeshError:
                break  # a schema MCP cannot ask with: the question is asked as text
            return text, dict(part["data"])
    return text, _TEXT_ANSWER


def _function_call(message: dict[str, Any] | None) -> dict[str, Any] | None:
    """The function call a question is asked as, if it is one: Google ADK asks for input
    as a long-running function call, a data part ``{"id", "name", "args"}`` its metadata
    marks ``adk_type: function_call``, and takes as the answer only that function's
    response (anything else, it asks again)."""
    for part in (message or {}).get("parts") or ():
        if not isinstance(part, dict) or not isinstance(part.get("data"), dict):
            continue
        if (part.get("metadata") or {}).get(_ADK_TYPE) == "function_call":
            return dict(part["data"])
    return None


def _call_question(call: dict[str, Any] | None) -> str:
    """A function call's question as a person reads it: its string arguments, else its name."""
    args = (call or {}).get("args")
    said = [v for v in args.values() if isinstance(v, str)] if isinstance(args, dict) else []
    if said:
        return " ".join(said)
    return f"the agent asks for input ({call['name']})" if call else "the agent asks for input"


def _function_response(call: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    """The caller's answer as the response to the function call that asked (ADK's shape)."""
    response = {"id": call.get("id"), "name": call.get("name"), "response": content}
    return {"data": response, "metadata": {_ADK_TYPE: "function_response"}}


def _parts(arguments: Any) -> list[dict[str, Any]]:
    """A tool's arguments as a message's parts: ``text`` (a string) as a text part, the
    rest as one data part; an empty call as an empty data part, so no message is bare."""
    rest = dict(arguments) if isinstance(arguments, dict) else {}
    text = rest.pop("text", None) if isinstance(rest.get("text"), str) else None
    parts: list[dict[str, Any]] = [{"text": text}] if text is not None else []
    if rest or not parts:
        parts.append({"data": rest})
    return parts


def _message(
    parts: list[dict[str, Any]], *, metadata: dict[str, Any] | None = None, context_id: str = ""
) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    if metadata:
        message["metadata"] = metadata
    if context_id:
        message["contextId"] = context_id
    return message


def _new_lines(messages: Any) -> str:
    """The room's messages since this member last spoke, as ``Name: text`` lines."""
    lines: list[str] = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        if m.get("role") == "assistant":
            lines = []
            continue
        content = str(m.get("content") or "")
        lines.append(f"{m['name']}: {content}" if m.get("name") else content)
    return "\n".join(lines)


def a2a_connector(
    endpoint: str, *, agent: str, token: str | None = None, liveness: float = DEFAULT_LIVENESS
) -> Connector:
    """A connector that mounts the A2A agent at ``endpoint`` (its base URL, or its card's)."""

    def connect() -> AbstractAsyncContextManager[FrameStream]:
        return open_a2a_mount(endpoint, agent=agent, token=token, liveness=liveness)

    return connect


@asynccontextmanager
async def open_a2a_mount(
    endpoint: str, *, agent: str, token: str | None = None, liveness: float = DEFAULT_LIVENESS
) -> AsyncIterator[FrameStream]:
    """Fetch the card; yield the stream the orchestrator talks over (see the module docstring)."""
    client = A2aClient(agent, endpoint, token=token)
    try:
        await client.fetch_card()
        mount = A2aMount(client)
        ours, theirs = memory_stream_pair()
        config = SessionConfig(heartbeat_interval=None)  # in this process: no line to watch
        async with anyio.create_task_group() as tg:
            tg.start_soon(_serve_mesh_side, theirs, mount, config, liveness)
            try:
                yield ours
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()


async def _serve_mesh_side(
    stream: FrameStream, mount: A2aMount, config: SessionConfig, liveness: float
) -> None:
    try:
        async with open_peer(stream, handler=mount, config=config, agent=mount.agent):
            while True:
                await anyio.sleep(liveness)
                await mount.client.fetch_card()
    except MeshError as exc:
        log.info("a2a.agent_lost", agent=mount.agent, error=str(exc))
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
