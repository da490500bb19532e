"""A rolling restart: a second process dials in with the same token and takes the id over.

Calls go to the new link at once; the old one finishes what it has in flight,
is closed with 4009 and exits 0; the agent never leaves ``online``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from mesh.testing import Daemon, echo_agent_command, spawn_daemon
from transports import WebSocketStream

pytestmark = pytest.mark.anyio

TOKEN = "roller-secret"
#: How long the client keeps calling on each side of the takeover, and how often.
CALLS_PER_SECOND = 100
#: Calls before, during (at least: they go on until the takeover is over) and after it.
CALLS_PER_PHASE = 150


async def dial_in(daemon: Daemon) -> anyio.abc.Process:
    command, _ = echo_agent_command()
    args = ["-m", "mesh.agents.echo", "--connect", daemon.ws, "--token-env", "ROLLER_TOKEN"]
    return await anyio.open_process(
        [command, *args, "--id", "roller"],
        env={**os.environ, "ROLLER_TOKEN": TOKEN},
        stdout=None,
        stderr=None,
    )


class Watch:
    """Every event /agents/events sends about the agent, and a way to wait for one."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = anyio.Event()

    async def follow(self, stream: WebSocketStream) -> None:
        while True:
            event = json.loads(await stream.receive())
            shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
            for agent in shown:
                if agent["id"] == "roller":
                    self.events.append({"type": event["type"], "status": agent["status"]})
                    self._changed.set()
                    self._changed = anyio.Event()

    async def wait_for(self, kind: str, count: int) -> None:
        while sum(e["type"] == kind for e in self.events) < count:
            await self._changed.wait()


async def call_steadily(
    http: httpx.AsyncClient,
    replies: list[Any],
    *,
    calls: int = CALLS_PER_PHASE,
    until: anyio.Event | None = None,
) -> int:
    """Echo calls through the daemon, paced at about CALLS_PER_SECOND: ``calls`` of them,
    and on until ``until`` is set. Returns how many were sent; each adds a reply when
    it is answered.

    A count, not a time: on a loaded machine the pacing sleep runs long, and a phase of
    fixed seconds would send too few calls to show that none is lost.
    """
    body = {
        "agent": "roller",
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "steady"}},
        "timeout": 10,
    }

    async def one() -> None:
        reply = await http.post("/rpc", json=body)
        replies.append((reply.status_code, reply.json()))

    sent = 0
    async with anyio.create_task_group() as tg:
        while sent < calls or (until is not None and not until.is_set()):
            tg.start_soon(one)
            sent += 1
            await anyio.sleep(1 / CALLS_PER_SECOND)  # pacing the load, not waiting on anything
    return sent


async def test_a_rolling_restart_loses_no_call_and_never_goes_offline(tmp_path: Path) -> None:
    (tmp_path / "roller.toml").write_text(
        'id = "roller"\n[transport]\ntype = "dial-in"\ntoken_env = "ROLLER_TOKEN"\n'
    )
    async with spawn_daemon(tmp_path, env={"ROLLER_TOKEN": TOKEN}) as daemon:
        first = await dial_in(daemon)
        await daemon.wait_online("roller")
        watch = Watch()
        replies: list[Any] = []
        sent: list[int] = []
        slow: list[Any] = []
        async with (
            daemon.open_events("/agents/events") as events,
            daemon.client(timeout=30) as http,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(watch.follow, events)
            with anyio.fail_after(60):
                await watch.wait_for("snapshot", 1)
                sent.append(await call_steadily(http, replies))

                async def hold() -> None:  # in flight on the old link during the takeover
                    params = {"name": "sleep", "arguments": {"seconds": 1.0}}
                    body = {"agent": "roller", "method": "tools/call", "params": params}
                    slow.append((await http.post("/rpc", json=body)).json())

                tg.start_soon(hold)
                second = await dial_in(daemon)
                over = anyio.Event()

                async def across() -> None:
                    sent.append(await call_steadily(http, replies, until=over))

                async with anyio.create_task_group() as during:
                    during.start_soon(across)
                    await watch.wait_for("registered", 1)  # the second link took over
                    first_exit = await first.wait()
                    over.set()
                sent.append(await call_steadily(http, replies))
            tg.cancel_scope.cancel()
        second.terminate()
        await second.wait()
        await first.aclose()
        await second.aclose()
    failures = [reply for reply in replies if reply[0] != 200]
    assert failures == []
    assert len(sent) == 3 and min(sent) >= CALLS_PER_PHASE
    assert len(replies) == sum(sent)  # every call sent was answered
    assert all(r[1] == {"result": {"message": "steady"}} for r in replies)
    assert slow == [{"result": {"slept": 1.0}}]
    assert first_exit == 0  # told 4009: replaced, not refused
    assert [e["status"] for e in watch.events] == ["online"] * len(watch.events)
    assert [e["type"] for e in watch.events] == ["snapshot", "registered"]
