"""A2A both ways: the daemon serving an agent against the a2a-sdk's own server, and a mounted
A2A agent against the SDK's own client calling it directly.

The trivial agent is an echo: the text of a ``{"tool": "echo", "arguments": {"message"}}``
data part (the echo agent's own argument; ``text`` also works for the SDK's executor) comes
back as a completed task's one artifact, and the client counts a call only when its task
completed: a failed task would carry the text back too (in the task's history). The SDK's side
(``python -m bench.a2a_scenarios``) is its ``DefaultRequestHandler`` and JSON-RPC routes
under uvicorn, with an executor doing exactly that; the mesh's side is ``mesh serve`` with
the echo agent over stdio, behind ``/a2a/echo``.

Serving (group ``a2a-serve``): one minimal client (raw h11, a keep-alive connection per
caller, as the MCP HTTP scenarios use) POSTs blocking ``SendMessage`` calls to
``a2a-server-sdk`` and to ``mesh-a2a-serve``.

Mounting (group ``a2a-mount``): ``a2a-client-sdk`` is the SDK's client (one, shared,
streaming) calling the SDK's server; ``mesh-a2a-mount`` calls the same server through a
``MeshOrchestrator`` that mounts it (``mesh.a2a.a2a_connector``).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import msgspec

from bench._children import announce_port, die_with_parent, listen_socket, open_server
from bench._children import python_module as _module
from bench._measure import measure_calls
from bench._registry import Measurement, RunContext, scenario
from bench.mcp_scenarios import _H11Client, open_daemon
from bench.mesh_scenarios import quiet_logs

TEXT = "hello, agent mesh"
_encoder = msgspec.json.Encoder()
_HEADERS = {"content-type": "application/json", "a2a-version": "1.0"}


#: What a served call must answer: a task that completed (one that failed carries the text too).
COMPLETED = b'"TASK_STATE_COMPLETED"'


def _send(call_id: int) -> bytes:
    data = {"tool": "echo", "arguments": {"message": TEXT}}
    message = {"messageId": f"m{call_id}", "role": "ROLE_USER", "parts": [{"data": data}]}
    request = {"jsonrpc": "2.0", "id": call_id, "method": "SendMessage"}
    return _encoder.encode({**request, "params": {"message": message}})


async def _drive(url: str, ctx: RunContext, token: str | None = None) -> Measurement:
    from urllib.parse import urlsplit

    endpoint = urlsplit(url)
    http = _H11Client(endpoint.hostname or "127.0.0.1", endpoint.port or 80, endpoint.path or "/")
    headers = dict(_HEADERS)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    ids = iter(range(10**9))

    async def call() -> None:
        status, _, content = await http.post(_send(next(ids)), headers)
        answer = msgspec.json.decode(content)
        completed = COMPLETED in content and TEXT in content.decode()
        if status != 200 or "result" not in answer or not completed:
            raise RuntimeError(f"HTTP {status}: {content[:200]!r}")

    try:
        return await measure_calls(call, ctx)
    finally:
        await http.aclose()


@scenario(
    "a2a-server-sdk",
    group="a2a-serve",
    description="the a2a-sdk's JSON-RPC server under uvicorn, echo executor, minimal client",
    smoke_modes=("sequential",),
)
async def a2a_server_sdk(ctx: RunContext) -> Measurement:
    async with open_server(_module("bench.a2a_scenarios")) as server:
        return await _drive(f"http://127.0.0.1:{server.port}/", ctx)


@scenario(
    "mesh-a2a-serve",
    group="a2a-serve",
    baseline="a2a-server-sdk",
    description="the daemon's /a2a/echo -> echo agent (stdio), same client",
    smoke_modes=("sequential",),
    setup_allowance_s=60.0,
)
async def mesh_a2a_serve(ctx: RunContext) -> Measurement:
    async with open_daemon(ctx.backend) as (url, token):
        return await _drive(f"{url}/a2a/echo", ctx, token)


@scenario(
    "a2a-client-sdk",
    group="a2a-mount",
    description="the a2a-sdk's client calling its own server directly (streaming)",
    smoke_modes=("sequential",),
)
async def a2a_client_sdk(ctx: RunContext) -> Measurement:
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
    from google.protobuf import json_format, struct_pb2

    data = {"tool": "echo", "arguments": {"text": TEXT}}
    value = json_format.ParseDict(data, struct_pb2.Value())
    async with (
        open_server(_module("bench.a2a_scenarios")) as server,
        httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=128)) as http,
    ):
        url = f"http://127.0.0.1:{server.port}"
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)

        async def call() -> None:
            message = Message(message_id="m", role=Role.ROLE_USER, parts=[Part(data=value)])
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            if not events:
                raise RuntimeError("no answer")

        return await measure_calls(call, ctx)


@scenario(
    "mesh-a2a-mount",
    group="a2a-mount",
    baseline="a2a-client-sdk",
    description="mesh: the same server mounted (protocol a2a), called through the orchestrator",
    smoke_modes=("sequential",),
)
async def mesh_a2a_mount(ctx: RunContext) -> Measurement:
    from mesh import EMBEDDER, AgentSpec, MeshOrchestrator
    from mesh.a2a import a2a_connector

    quiet_logs()
    async with open_server(_module("bench.a2a_scenarios")) as server:
        url = f"http://127.0.0.1:{server.port}"
        spec = AgentSpec("peer", a2a_connector(url, agent="peer"), transport="http")
        async with MeshOrchestrator([spec], connect_timeout=30) as mesh:
            await mesh.wait_linked()

            async def call() -> None:
                result = await mesh.call_tool("peer", "echo", {"text": TEXT}, on_behalf_of=EMBEDDER)
                if TEXT not in str(result):
                    raise RuntimeError(f"the mounted echo answered {result!r}")

            return await measure_calls(call, ctx)


# -- the SDK's server (a child process) -------------------------------------------------------


def _app(url: str) -> Any:
    from a2a.helpers.proto_helpers import new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
    from google.protobuf import json_format
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            part = context.message.parts[0]
            if part.HasField("text"):
                text = part.text
            else:
                data = json_format.MessageToDict(part.data)
                arguments = data.get("arguments", {})
                text = arguments.get("message") or arguments.get("text") or data.get("text", "")
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.add_artifact([Part(text=text)], name="result")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    interface = AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
    card = AgentCard(
        name="echo",
        description="echo",
        version="1",
        supported_interfaces=[interface],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="echo", name="echo", description="echo")],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")
    return Starlette(routes=routes)


async def _serve() -> None:
    import uvicorn

    sock = listen_socket()
    port = sock.getsockname()[1]
    app = _app(f"http://127.0.0.1:{port}/")
    config = uvicorn.Config(
        app, http="h11", loop="asyncio", log_level="warning", access_log=False, lifespan="on"
    )
    announce_port(port)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    die_with_parent()
    del sys.argv[1:]
    anyio.run(_serve)
