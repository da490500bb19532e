"""The A2A part of ``make demo``: A2A both ways, through one daemon.

An A2A agent (a few lines with the ``a2a-sdk``'s own server) runs as a process, and a
manifest that says ``protocol = "a2a"`` mounts it; then an A2A client (the SDK's) calls a
mesh agent through the daemon's ``/a2a/echo``, and the mounted A2A agent takes turns
in a room with a persona. The ``a2a-sdk`` is a dev/bench dependency, not a runtime one:
without it this part says so and is skipped.
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mesh.testing import spawn_daemon

#: The A2A agent the tour mounts: it answers each message in a sentence, written in pieces.
AGENT = textwrap.dedent(
    """
    import asyncio, socket

    import uvicorn
    from a2a.helpers.proto_helpers import new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
    from starlette.applications import Starlette


    class Barista(AgentExecutor):
        async def execute(self, context, event_queue):
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            who = context.message.parts[0].text.splitlines()[-1].split(":")[0]
            words = f"Coffee, obviously - {who} has a point, but only after noon.".split()
            for i, word in enumerate(words):
                await updater.add_artifact([Part(text=(" " if i else "") + word)],
                                           artifact_id="reply", append=i > 0)
            await updater.complete()

        async def cancel(self, context, event_queue):
            raise NotImplementedError


    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    card = AgentCard(
        name="Barista", description="An A2A agent with opinions on coffee.", version="1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="opinion", name="opinion", description="Says what it thinks.",
                           tags=["coffee"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Barista(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))
    print(url, flush=True)
    asyncio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock]))
    """
)

MANIFESTS = {
    "echo.toml": 'id = "echo"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
    'args = ["-m", "mesh.agents.echo", "--stdio"]\n',
    "alice.toml": 'id = "alice"\nname = "Alice"\ncapabilities = ["chat"]\n'
    '[transport]\ntype = "stdio"\ncommand = "python"\n'
    'args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]\n'
    '[persona]\nsystem_prompt = "You are Alice."\nrole = "advocate"\n'
    '[persona.provider]\nprovider = "scripted"\nscript = ["Tea. It is gentler, and it is 4 pm."]\n',
}


def say(text: str = "") -> None:
    print(text, flush=True)


async def a2a_tour() -> None:
    say("\n== A2A both ways ==")
    try:
        import a2a.client  # noqa: F401
    except ImportError:
        say("  (skipped: the `a2a-sdk` is not installed; `pip install a2a-sdk[http-server]`)")
        return
    with tempfile.TemporaryDirectory(prefix="mesh-demo-a2a-") as tmp:
        root = Path(tmp)
        (root / "barista.py").write_text(AGENT)
        process = await anyio.open_process([sys.executable, str(root / "barista.py")], stderr=None)
        try:
            url = await _first_line(process)
            await _tour(root, url)
        finally:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()
                await process.aclose()


async def _first_line(process: anyio.abc.Process) -> str:
    assert process.stdout is not None
    seen = b""
    with anyio.fail_after(30):
        while b"\n" not in seen:
            seen += await process.stdout.receive()
    return seen.split(b"\n", 1)[0].decode().strip().rstrip("/")


async def _tour(root: Path, url: str) -> None:
    manifests = root / "manifests"
    manifests.mkdir()
    for name, text in MANIFESTS.items():
        (manifests / name).write_text(text.replace("{path}", str(manifests / name)))
    (manifests / "barista.toml").write_text(
        f'id = "barista"\nname = "Barista"\n'
        f'[transport]\ntype = "http"\nendpoint = "{url}"\nprotocol = "a2a"\n'
    )
    data = ["--data-dir", str(root / "data"), "--log-level", "warning"]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("echo", "alice", "barista")
        await _call_a_mesh_agent(daemon.http, daemon.token or "")
        await _a_room(daemon)


async def _call_a_mesh_agent(http_url: str, token: str) -> None:
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
    from google.protobuf import json_format, struct_pb2

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, f"{http_url}/a2a/echo").get_agent_card()
        say(f"  an A2A client (the a2a-sdk's) reads {http_url}/a2a/echo's card:")
        say(f"    {card.name}: skills {', '.join(s.id for s in card.skills)}")
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        ask = {"tool": "sleep", "arguments": {"seconds": 0.3, "progress_every": 0.1}}
        data = json_format.ParseDict(ask, struct_pb2.Value())
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(data=data)])
        say(f"    SendStreamingMessage {json.dumps(ask)}:")
        last: Any = None
        async for event in client.send_message(SendMessageRequest(message=message)):
            shown = json_format.MessageToDict(event)
            if "statusUpdate" in shown:
                status = shown["statusUpdate"]["status"]
                said = [p.get("text") for p in status.get("message", {}).get("parts", ())]
                say(f"      {status['state']} {' '.join(s for s in said if s)}".rstrip())
            last = shown
        if last is None or last["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED":
            raise SystemExit(f"the A2A call ended with {last!r}")


async def _a_room(daemon: Any) -> None:
    from mesh.rooms import MessageEvent, decode_event

    room = {"id": "break", "topic": "Tea or coffee?", "members": ["alice", "barista"]}
    room["limits"] = {"max_turns": 2}  # type: ignore[assignment]
    async with daemon.client() as http:
        created = await http.post("/rooms", json=room)
        if created.status_code != 201:
            raise SystemExit(f"the room was refused: {created.text}")
    say('  a room with a persona and the mounted A2A agent (manifest: protocol = "a2a"):')
    spoken = 0
    with anyio.fail_after(60):
        async with daemon.open_events("/rooms/break/events") as events:
            while spoken < 2:
                event = decode_event(await events.receive())
                if isinstance(event, MessageEvent):
                    spoken += 1
                    say(f"    {event.name}: {event.text}")
