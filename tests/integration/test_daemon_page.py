"""What the room page needs of the daemon: a token beside the WebSocket URL (not in it), a
person passing their turn, refusals that read as words, and the CLI's Markdown export."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mesh.rooms import DeltaEvent, decode_live_event
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)

from ._daemon import persona_manifest

pytestmark = pytest.mark.anyio

ECHO = ["{speaker} said: {last}"]
GUARD = 60.0
#: A room a person joins, or one the test stops itself: it must not reach its turn limit
#: first, however slowly a loaded machine runs the client that joins it.
LONG = 400


def _manifests(tmp_path: Path, delay: float) -> tuple[Path, list[str]]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ECHO, delay)
    persona_manifest(manifests, "bob", "Bob", ECHO, delay)
    return manifests, ["--data-dir", str(tmp_path / "data")]


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Alice and Bob answering at once, for the tests that open rooms and tokens of their own
    names: a daemon and its two persona processes, started once."""
    manifests, args = _manifests(tmp_path_factory.mktemp("page"), 0.0)
    async with spawn_daemon(manifests, extra_args=args) as shared:
        await shared.wait_online("alice", "bob")
        yield shared


async def _create(daemon: Daemon, room_id: str, max_turns: int) -> None:
    spec = {"id": room_id, "topic": "Tea or coffee?", "members": ["alice", "bob"]}
    async with daemon.client() as http:
        created = await http.post("/rooms", json=spec | {"limits": {"max_turns": max_turns}})
        assert created.status_code == 201, created.text


def _first_frame(url: str, protocols: list[str]) -> tuple[str | None, dict[str, object]]:
    """Open a WebSocket offering ``protocols`` (as a browser does); the subprotocol the
    daemon chose and the first event. Blocking: run on a thread."""
    with connect(url, subprotocols=protocols, open_timeout=GUARD) as ws:  # type: ignore[arg-type]
        return ws.subprotocol, json.loads(ws.recv(timeout=GUARD))


def _refused(url: str, protocols: list[str]) -> int | None:
    with connect(url, subprotocols=protocols, open_timeout=GUARD) as ws:  # type: ignore[arg-type]
        try:
            ws.recv(timeout=GUARD)
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


async def test_a_browser_sends_its_token_as_a_websocket_subprotocol(daemon: Daemon) -> None:
    url = daemon.ws.removesuffix("/ws") + "/agents/events"  # no ?token= in it
    chosen, first = await anyio.to_thread.run_sync(
        _first_frame, url, ["mesh", f"bearer.{daemon.token}"]
    )
    # The daemon selects `mesh` and never echoes the token.
    assert chosen == "mesh" and first["type"] == "snapshot"
    code = await anyio.to_thread.run_sync(_refused, url, ["mesh", "bearer.mesh_not-a-token"])
    assert code == 4001
    assert await anyio.to_thread.run_sync(_refused, url, ["mesh"]) == 4001


async def test_a_person_passes_their_turn_over_http(tmp_path: Path) -> None:
    manifests, args = _manifests(tmp_path, 0.1)
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        await _create(daemon, "pass", LONG)
        async with daemon.client() as http:
            joined = await http.post("/rooms/pass/join", json={"name": "Carol"})
            assert joined.status_code == 200, joined.text
            with anyio.fail_after(GUARD):
                async with daemon.open_events("/rooms/pass/events?deltas=1") as watch:
                    while True:
                        event = decode_live_event(await watch.receive())
                        if isinstance(event, DeltaEvent) and event.agent_id == "carol":
                            break
            assert event.text == "" and event.deadline is not None
            mixed = {"member": "carol", "text": "hi", "pass": True}
            both = await http.post("/rooms/pass/say", json=mixed)
            assert both.status_code == 400 and "send text or pass" in both.text
            passed = await http.post("/rooms/pass/say", json={"member": "carol", "pass": True})
            assert passed.status_code == 200, passed.text
            assert passed.json() == {"status": "passed", "member": "carol"}
            again = await http.post("/rooms/pass/say", json={"member": "carol", "pass": True})
            assert again.status_code == 409 and "not your turn" in again.json()["error"]["message"]
            await http.post("/rooms/pass/stop")


async def test_an_observer_is_refused_in_words_not_an_enum(daemon: Daemon) -> None:
    async with daemon.client() as http:
        made = await http.post("/tokens", json={"role": "observer", "name": "wall"})
        observer = made.json()["token"]
        spec = {"topic": "Tea?", "members": ["alice", "bob"]}
        refused = await http.post(
            "/rooms", json=spec, headers={"authorization": f"Bearer {observer}"}
        )
    assert refused.status_code == 403
    message = refused.json()["error"]["message"]
    assert message.startswith("an observer token may not do this: it needs the 'rooms' right")
    assert "<" not in message and "Right." not in message


async def test_the_markdown_export_is_the_clis(daemon: Daemon) -> None:
    await _create(daemon, "md", 3)
    async with daemon.client() as http:
        with anyio.fail_after(GUARD):
            async with daemon.open_events("/rooms/md/events") as watch:
                while json.loads(await watch.receive())["type"] != "STOPPED":
                    pass
        served = await http.get("/rooms/md/events", params={"format": "md"})
        bad = await http.get("/rooms/md/events", params={"format": "html"})
    assert served.headers["content-type"].startswith("text/markdown")
    assert bad.status_code == 400 and "format must be json or md" in bad.text
    command = [sys.executable, "-m", "mesh.cli", "room", "export", "md", "--format", "md"]
    printed = await anyio.run_process(command, env=daemon.env(), stderr=subprocess.PIPE)
    assert served.text == printed.stdout.decode()
    assert served.text.startswith("# Tea or coffee?") and "## Turn 3: Alice" in served.text
