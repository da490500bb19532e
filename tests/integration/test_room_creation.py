"""A room is created whole or not at all, whatever its creator's connection does.

The creator's socket is closed at a spread of moments while ``POST /rooms`` is handled;
every room that was recorded must then run to its end (no room left ``running`` at turn
0, holding its owner's quota), and ``mesh room run`` interrupted mid-POST names the room.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import pytest

from mesh.cli._codes import EXIT_INTERRUPTED
from mesh.rooms import StoppedEvent
from mesh.testing import Daemon, spawn_daemon
from tests.integration._daemon import persona_manifest
from tests.integration.test_cli_truth import mesh, read_all
from tests.integration.test_daemon_rooms import ALICE, BOB, watch_room
from transports import HttpRequest, HttpResponse, open_http_server

pytestmark = pytest.mark.anyio

#: Moments (seconds after the request is sent) at which the creator hangs up: from before
#: the daemon has read the body to after it has answered, a few ms apart, so some fall
#: while the room's first events are being recorded.
CLOSE_AFTER = [i * 0.002 for i in range(24)]


def _members() -> list[dict[str, str]]:
    # Named members are not described first: the request reaches the recording at once.
    return [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}]


async def _post_and_hang_up(daemon: Daemon, room_id: str, after: float) -> None:
    body = json.dumps(
        {"id": room_id, "topic": "Tea?", "members": _members(), "limits": {"max_turns": 2}}
    ).encode()
    head = (
        f"POST /rooms HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {daemon.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    port = int(daemon.http.rsplit(":", 1)[1])
    async with await anyio.connect_tcp("127.0.0.1", port) as raw:
        await raw.send(head + body)
        await anyio.sleep(after)  # the moment of hanging up is what this test varies


async def test_a_creator_that_hangs_up_leaves_no_room_running_at_turn_0(tmp_path: Path) -> None:
    persona_manifest(tmp_path, "alice", "Alice", ALICE, 0.0)
    persona_manifest(tmp_path, "bob", "Bob", BOB, 0.0)
    async with spawn_daemon(tmp_path) as daemon:
        await daemon.wait_online("alice", "bob")
        for n, after in enumerate(CLOSE_AFTER):
            await _post_and_hang_up(daemon, f"hang-{n}", after)
        async with daemon.client() as http:
            # A creation still in hand when the socket closed is finished by the daemon:
            # once this room (made after them all) exists, theirs are recorded or gone.
            last = {"id": "last", "topic": "Tea?", "members": _members()}
            assert (await http.post("/rooms", json=last)).status_code == 201
            listed = (await http.get("/rooms", params={"limit": 1000})).json()["rooms"]
            made = [r["room"]["id"] for r in listed if r["room"]["id"].startswith("hang-")]
            for room_id in made:
                events = await watch_room(daemon, room_id, lambda e: isinstance(e, StoppedEvent))
                assert events[-1].reason == "MAX_TURNS", (room_id, events[-1])
            listed = (await http.get("/rooms", params={"limit": 1000})).json()["rooms"]
            running = [
                r["room"]["id"]
                for r in listed
                if r["status"] == "running" and r["room"]["id"].startswith("hang-")
            ]
            assert running == [], running  # none holds its owner's quota
            assert made, "no hang-up fell after the room was recorded"


async def test_room_run_interrupted_mid_creation_names_the_room_and_stops_it() -> None:
    """Ctrl-C while the daemon is still making the room: the CLI waits for the answer,
    then names the room and stops it (``--stop-on-interrupt``)."""
    arrived, signalled = anyio.Event(), anyio.Event()
    asked: list[tuple[str, str]] = []

    async def handle(request: HttpRequest) -> HttpResponse:
        asked.append((request.method, request.path))
        if request.path == "/rooms":
            arrived.set()
            await signalled.wait()  # the creation is in hand when Ctrl-C comes
            room_id = json.loads(request.body)["id"]
            return HttpResponse.json(201, {"room": {"id": room_id}})
        return HttpResponse.json(200, {"room": {"id": "x"}, "status": "stopped"})

    async with open_http_server(handle) as server:
        run = ["room", "run", "--topic", "Tea?", "--agent", "alice", "--agent", "bob"]
        process = await mesh(*run, "--stop-on-interrupt", url=server.url)
        async with process:
            with anyio.fail_after(60):
                await arrived.wait()
                process.send_signal(signal.SIGINT)
                signalled.set()
                code = await process.wait()
                assert process.stderr is not None
                err = (await read_all(process.stderr)).decode().strip().splitlines()
    assert code == EXIT_INTERRUPTED, err
    (line,) = err
    assert line.startswith("mesh: interrupted; room room-") and line.endswith(" stopped"), line
    room_id = line.split()[3]
    assert asked == [("POST", "/rooms"), ("POST", f"/rooms/{room_id}/stop")]
