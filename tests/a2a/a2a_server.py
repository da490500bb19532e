"""An A2A agent built on the a2a-sdk's own server (Starlette under uvicorn), run as a process.

``python tests/a2a/a2a_server.py [PORT [rest]]`` listens on loopback (port 0: any) and
says ``listening URL`` on stdout; with ``rest`` it serves (and its card offers) only
the HTTP+JSON binding, not JSON-RPC. Its skills:

- ``shout``: the message's text in capitals, as one artifact;
- ``count``: ``{"to": N, "every": S}`` counts to N, one WORKING status every S
  seconds ("counted i of N"), then answers ``{"counted": N}``; cancellable, and it
  prints ``cancelled <task id>`` on stdout when it is cancelled;
- ``trip`` (or a chat message that says "plan a trip", as a room's turn may): asks
  "Where to?" (the task rests in INPUT_REQUIRED, naming no schema); the next message
  of that task is the answer: ``booked <its text>``;
- anything else with text (a conversation): a reply written in pieces, appended
  to one artifact, that names the context it belongs to.

It is the test peer for mounting an A2A agent (tests/a2a/test_mount.py) and the
baseline of the bench (bench/).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from google.protobuf import json_format, struct_pb2
from starlette.applications import Starlette


def _text(context: RequestContext) -> str:
    message = context.message
    return "\n".join(p.text for p in message.parts if p.HasField("text")) if message else ""


def _data(context: RequestContext) -> dict[str, Any]:
    message = context.message
    for part in message.parts if message else ():
        if part.HasField("data"):
            value = json_format.MessageToDict(part.data)
            if isinstance(value, dict):
                return value
    return {}


def _skill(context: RequestContext) -> str:
    message = context.message
    if message is not None and message.HasField("metadata"):
        return str(json_format.MessageToDict(message.metadata).get("skill", ""))
    return ""


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        skill = _skill(context)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:  # the answer
            await updater.add_artifact([Part(text=f"booked {_text(context)}")], name="book")
            await updater.complete()
        elif skill == "trip" or "plan a trip" in _text(context).lower():  # a room's turn too
            await updater.requires_input(updater.new_agent_message([Part(text="Where to?")]))
        elif skill == "shout":
            await updater.add_artifact([Part(text=_text(context).upper())], name="shout")
            await updater.complete()
        elif skill == "count":
            await self._count(updater, _data(context))
        else:
            await self._chat(updater, task.context_id, _text(context))

    async def _count(self, updater: TaskUpdater, arguments: dict[str, Any]) -> None:
        to, every = int(arguments.get("to", 3)), float(arguments.get("every", 0.05))
        await updater.start_work()
        try:
            for i in range(1, to + 1):
                await asyncio.sleep(every)
                message = updater.new_agent_message([Part(text=f"counted {i} of {to}")])
                await updater.start_work(message)
        except asyncio.CancelledError:
            print(f"cancelled {updater.task_id}", flush=True)
            raise
        value = json_format.ParseDict({"counted": to}, struct_pb2.Value())
        await updater.add_artifact([Part(data=value)], name="count")
        await updater.complete()

    async def _chat(self, updater: TaskUpdater, context_id: str, text: str) -> None:
        reply = f"In {context_id} you said {text.splitlines()[-1] if text else ''!r}."
        await updater.start_work()
        for i, word in enumerate(reply.split(" ")):
            piece = word if i == 0 else " " + word
            await updater.add_artifact(
                [Part(text=piece)], artifact_id="reply", name="reply", append=i > 0
            )
            await asyncio.sleep(0.01)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def card(url: str, binding: str = "JSONRPC") -> AgentCard:
    return AgentCard(
        name="Shouter",
        description="Shouts, counts, and chats (a2a-sdk test peer).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=binding, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="shout", name="shout", description="Say it louder.", tags=["text"]),
            AgentSkill(id="count", name="count", description="Count slowly.", tags=["slow"]),
            AgentSkill(id="trip", name="trip", description="Ask where, then book.", tags=["ask"]),
        ],
    )


def app(url: str, rest: bool = False) -> Starlette:
    agent_card = card(url, "HTTP+JSON" if rest else "JSONRPC")
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    served = create_rest_routes(handler) if rest else create_jsonrpc_routes(handler, "/")
    return Starlette(routes=create_agent_card_routes(agent_card) + served)


async def main(port: int, rest: bool = False) -> None:
    # Bound first, so that the card can name the port the system chose.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(app(url, rest), log_level="warning"))
    print(f"listening {url}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0, sys.argv[2:3] == ["rest"]))
