"""ADK's ``RemoteA2aAgent`` calling mesh agents, run by ADK's own ``Runner``: a script of the
ADK peer virtualenv (``make adk``), started by tests/a2a/test_walls.py.

``python remote.py URL TEXT [URL TEXT ...]`` sends each TEXT to the A2A agent at URL (its
base URL: the card is under it) with the bearer token in ``MESH_TOKEN``, through a Runner on
an ``InMemorySessionService``, as an ADK application would. For each it prints one JSON line:
``{"url", "texts", "partials", "thoughts"}``: the text of every finished event, of every
partial one, and of every part ADK marks a thought (what a task said while ``WORKING``: an
application shows it apart from the reply), so that the test sees what ADK's user would, and
how often.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings

import httpx
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

#: ADK marks its A2A classes experimental with a warning on each use; said once is enough.
warnings.filterwarnings("ignore", message=".*EXPERIMENTAL.*")


async def ask(http: httpx.AsyncClient, url: str, text: str) -> dict[str, object]:
    """One conversation of one message: what ADK's Runner yields of the remote's answer."""
    remote = RemoteA2aAgent(
        name="mesh_agent", agent_card=f"{url}/.well-known/agent-card.json", httpx_client=http
    )
    store = InMemorySessionService()
    runner = Runner(agent=remote, app_name="mesh_peer", session_service=store)
    session = await store.create_session(app_name="mesh_peer", user_id="ann")
    said = types.Content(role="user", parts=[types.Part(text=text)])
    heard: dict[str, list[str]] = {"texts": [], "partials": [], "thoughts": []}
    async for event in runner.run_async(user_id="ann", session_id=session.id, new_message=said):
        for part in (event.content.parts if event.content else None) or ():
            if part.text:
                kind = "thoughts" if part.thought else "partials" if event.partial else "texts"
                heard[kind].append(part.text)
    return {"url": url, **heard}


async def main(pairs: list[str]) -> None:
    headers = {"Authorization": f"Bearer {os.environ['MESH_TOKEN']}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        for url, text in zip(pairs[::2], pairs[1::2], strict=True):
            print(json.dumps(await ask(http, url, text)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
