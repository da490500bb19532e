"""The daemon's long-lived streams stay up through keepalive, however long they are held."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest

from tests.integration._daemon import persona_manifest, serve_in_process
from tests.integration._raw_ws import RawWebSocket, open_raw_websocket

pytestmark = pytest.mark.anyio

#: The daemon pings every PING s and gives up after PONG_WAIT s: a watcher whose pongs
#: were never read would be closed within PING + PONG_WAIT, long before ROUNDS pings.
PING, PONG_WAIT, ROUNDS = 0.05, 0.25, 20


async def test_watchers_and_observers_stay_up_through_many_keepalive_rounds(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    # Turns that take a minute: the room is running for the whole test.
    persona_manifest(manifests, "alice", "Alice", ["Tea."], delay=60)
    persona_manifest(manifests, "bob", "Bob", ["Coffee."], delay=60)
    settings = {"ping_interval": PING, "ping_timeout": PONG_WAIT}
    async with serve_in_process(manifests, tmp_path / "data", **settings) as daemon:
        await daemon.wait_online("alice", "bob")
        async with httpx.AsyncClient(base_url=daemon.http) as http:
            spec = {"id": "long", "topic": "Tea?", "members": ["alice", "bob"]}
            assert (await http.post("/rooms", json=spec)).status_code == 201
        base = daemon.ws.removesuffix("/ws")
        with anyio.fail_after(30):
            async with (
                open_raw_websocket(f"{base}/agents/events") as agents,
                open_raw_websocket(f"{base}/rooms/long/events") as room,
            ):
                seen: dict[str, list[bytes]] = {}

                async def hold(name: str, stream: RawWebSocket) -> None:
                    seen[name] = await stream.hold(ROUNDS)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(hold, "agents", agents)
                    tg.start_soon(hold, "room", room)
    assert json.loads(seen["agents"][0])["type"] == "snapshot"
    assert json.loads(seen["room"][0])["type"] == "WELCOME"
