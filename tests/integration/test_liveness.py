"""A real agent process under SIGSTOP goes stale, then offline; SIGCONT brings it back."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import pytest
import sniffio

from mesh import EMBEDDER, Agent, AgentSpec, AgentUnavailable, MeshOrchestrator, local_connector
from mesh.testing import echo_agent_command, spawn_echo_server
from registry import AgentId, AgentStatus, ChangeKind, Registry, StatusChange
from tests.faults._helpers import stop_and_kill
from transports import (
    FrameStream,
    HttpRequest,
    HttpResponse,
    StdioProcessStream,
    TokenAuthenticator,
    WebSocketStream,
    open_http_client,
    open_http_server,
    open_stdio_process,
    open_websocket,
    websocket_upgrade_handler,
)

pytestmark = pytest.mark.anyio

#: A hang guard: the agent's heartbeat TTL is 0.9 s, and a loaded machine may take many
#: times that to notice and report; nothing else can make the agent stale or offline.
GUARD = 15.0


async def test_sigstop_goes_stale_then_offline_and_sigcont_brings_it_back() -> None:
    interval, ttl = 0.3, 0.9
    links: list[StdioProcessStream] = []

    @asynccontextmanager
    async def command() -> AsyncIterator[FrameStream]:
        # The connector the orchestrator dials with: it shows us each process it starts.
        async with open_stdio_process(sys.executable, ["-m", "mesh.agents.echo", "--stdio"]) as s:
            links.append(s)
            yield s

    spec = AgentSpec(
        "frozen", command, transport="stdio", heartbeat_interval=interval, heartbeat_ttl=ttl
    )
    async with MeshOrchestrator([spec]) as mesh, mesh.registry.subscribe() as changes:
        (stream,) = links
        os.kill(stream.pid, signal.SIGSTOP)
        try:
            seen: list[ChangeKind] = []
            with anyio.fail_after(GUARD):
                async for change in changes:
                    seen.append(change.kind)
                    if change.kind is ChangeKind.OFFLINE:
                        break
            assert seen == [ChangeKind.STALE, ChangeKind.OFFLINE]
            with pytest.raises(AgentUnavailable, match="offline"):
                await mesh.call("frozen", "ping", on_behalf_of=EMBEDDER)
        finally:
            os.kill(stream.pid, signal.SIGCONT)
        with anyio.fail_after(GUARD):
            async for change in changes:
                if change.kind is ChangeKind.ONLINE:
                    break
        record = mesh.registry.get(AgentId("frozen"))
        assert record is not None and record.status is AgentStatus.ONLINE
        thawed = {"message": "thawed"}
        assert await mesh.call_tool("frozen", "echo", thawed, on_behalf_of=EMBEDDER) == thawed
        assert links == [stream], "the same link came back: no second process was started"


async def test_a_call_in_flight_fails_when_the_agent_goes_offline_not_at_its_deadline() -> None:
    interval, ttl = 0.3, 0.9
    links: list[StdioProcessStream] = []

    @asynccontextmanager
    async def command() -> AsyncIterator[FrameStream]:
        async with open_stdio_process(sys.executable, ["-m", "mesh.agents.echo", "--stdio"]) as s:
            links.append(s)
            yield s

    spec = AgentSpec(
        "frozen", command, transport="stdio", heartbeat_interval=interval, heartbeat_ttl=ttl
    )
    async with MeshOrchestrator([spec]) as mesh, mesh.registry.subscribe() as changes:
        (stream,) = links
        started = anyio.Event()
        failure: list[BaseException] = []

        async def long_call() -> None:
            sleep = {"seconds": 60, "progress_every": 0.05}
            try:  # its own deadline is a minute away
                await mesh.call_tool(
                    "frozen",
                    "sleep",
                    sleep,
                    timeout=60,
                    on_progress=lambda _: started.set(),
                    on_behalf_of=EMBEDDER,
                )
            except AgentUnavailable as exc:
                failure.append(exc)

        try:
            # GUARD is far under the call's own minute: only the registry's word ends it.
            with anyio.fail_after(GUARD):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_call)
                    await started.wait()  # in the agent's hands
                    os.kill(stream.pid, signal.SIGSTOP)
        finally:
            os.kill(stream.pid, signal.SIGCONT)
        (error,) = failure
        assert "went offline: no heartbeat for" in str(error), error
        with anyio.fail_after(GUARD):
            async for change in changes:
                if change.kind is ChangeKind.ONLINE:
                    break
        assert await mesh.call_tool(
            "frozen", "echo", {"message": "back"}, on_behalf_of=EMBEDDER
        ) == {"message": "back"}
        assert links == [stream], "the thawed agent is usable again on the same link"


class BeatCounter(Registry):
    """The orchestrator's registry, counting the heartbeats its probes record."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: Counter[str] = Counter()
        self._beat = anyio.Event()

    def heartbeat(self, agent_id: AgentId, now: float) -> None:
        super().heartbeat(agent_id, now)
        self.beats[agent_id] += 1
        self._beat.set()
        self._beat = anyio.Event()

    async def wait_beats(self, count: int, agents: list[str]) -> None:
        while any(self.beats[agent] < count for agent in agents):
            await self._beat.wait()


async def test_healthy_agents_on_every_transport_never_change_status() -> None:
    interval = 0.2
    token = "ws-token"
    registry = BeatCounter()
    backend = sniffio.current_async_library()
    stdio = partial(open_stdio_process, *echo_agent_command(backend=backend))
    async with (
        spawn_echo_server() as over_http,
        spawn_echo_server(token=token) as over_ws,
        MeshOrchestrator(
            [
                AgentSpec("memory", local_connector(Agent("memory")), heartbeat_interval=interval),
                AgentSpec("stdio", stdio, transport="stdio", heartbeat_interval=interval),
                AgentSpec(
                    "http",
                    partial(open_http_client, over_http.http),
                    transport="http",
                    heartbeat_interval=interval,
                ),
                AgentSpec(
                    "websocket",
                    partial(open_websocket, over_ws.ws, token=token),
                    transport="websocket",
                    heartbeat_interval=interval,
                ),
                AgentSpec("dial-in", None, heartbeat_interval=interval),
            ],
            registry=registry,
        ) as mesh,
        _dial_in_listener(mesh, "dial-in") as url,
        _dial_in_agent(url, "dial-in", backend),
    ):
        agents = ["memory", "stdio", "http", "websocket", "dial-in"]
        with anyio.fail_after(GUARD):
            await registry.wait_beats(1, agents)  # every one is linked and answering
        changes: list[StatusChange] = []
        registry.add_listener(changes.append)
        registry.beats.clear()
        with anyio.fail_after(GUARD * 2):
            await registry.wait_beats(10, agents)  # ten intervals and more, for each
        assert changes == [], [(c.agent_id, str(c.kind)) for c in changes]


DIAL_TOKEN = "dial-in-token"


@asynccontextmanager
async def _dial_in_listener(mesh: MeshOrchestrator, agent_id: str) -> AsyncIterator[str]:
    """A loopback ``/ws`` where ``agent_id`` dials in to ``mesh``; yields its URL."""

    async def serve(stream: WebSocketStream, who: str | None) -> None:
        assert who is not None
        await mesh.serve_dial_in(stream, who)

    async def no_http(request: HttpRequest) -> HttpResponse:
        return HttpResponse.error(404, "only /ws here")

    tokens = TokenAuthenticator({DIAL_TOKEN: agent_id})
    upgrade = websocket_upgrade_handler(serve, authenticator=tokens)
    async with open_http_server(no_http, upgrade_handler=upgrade) as server:
        yield server.ws_url + "/ws"


@asynccontextmanager
async def _dial_in_agent(url: str, agent_id: str, backend: str) -> AsyncIterator[None]:
    command, args = echo_agent_command(backend=backend)
    args = [a for a in args if a != "--stdio"]
    args += ["--connect", url, "--token-env", "DIAL_TOKEN", "--id", agent_id]
    env = {**os.environ, "DIAL_TOKEN": DIAL_TOKEN}
    process = await anyio.open_process([command, *args], env=env, stdout=None, stderr=None)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            stop_and_kill(process.pid)
            await process.wait()
            await process.aclose()
