"""Each attack of issue 11, tried on a real ``mesh serve``: refused, nothing changed,
and the legitimate path still works with the right token."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.rooms import ErrorEvent, StoppedEvent
from mesh.testing import Daemon, echo_agent_command, spawn_daemon, spawn_echo_server
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import persona_manifest
from tests.integration.test_daemon_auth import create_token
from tests.integration.test_daemon_rooms import watch_room
from transports import HttpRequest, HttpResponse, WebSocketStream, open_http_server

pytestmark = pytest.mark.anyio

ALICE = [f"Alice says {n}." for n in range(10)]
BOB = [f"Bob says {n}." for n in range(10)]
GUARD = 60.0


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """One daemon with no manifests for the tests that only register ids and make tokens of
    their own names (each id and name used by one test): starting it is most of their cost."""
    async with spawn_daemon(tmp_path_factory.mktemp("attacks-manifests")) as shared:
        yield shared


def turn_params(room: str, agent: str, turn: int) -> dict[str, Any]:
    return {"room_id": room, "turn": turn, "agent_id": agent, "system": "", "messages": []}


async def wait_status(events: WebSocketStream, agent: str, status: str) -> None:
    """Read /agents/events until ``agent`` shows ``status`` (bound it with a deadline)."""
    while True:
        event = json.loads(await events.receive())
        shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
        if any(a["id"] == agent and a["status"] == status for a in shown):
            return


@asynccontextmanager
async def recorder() -> AsyncIterator[list[str]]:
    """An HTTP server on loopback that records every request it gets (an attacker's sink)."""
    seen: list[str] = []

    async def record(request: HttpRequest) -> HttpResponse:
        seen.append(f"{request.method} {request.target}")
        return HttpResponse.error(500, "no")

    async with open_http_server(record) as server:
        seen.append(server.url)
        yield seen


async def test_a_stranger_cannot_speak_in_a_room_or_end_it(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ALICE, 0.1)
    persona_manifest(manifests, "bob", "Bob", BOB, 0.1)
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("alice", "bob")
        client = await create_token(daemon, "client", "mallory")
        spec: dict[str, Any] = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
        spec["limits"] = {"max_turns": 6}
        async with daemon.client() as admin:
            assert (await admin.post("/rooms", json=spec)).status_code == 201
        rpc = {"agent": "alice", "method": "room/turn", "params": turn_params("tea", "alice", 2)}
        big = {**rpc, "params": turn_params("tea", "alice", 10**9)}
        async with httpx.AsyncClient(base_url=daemon.http) as stranger:
            for body in (rpc, big):
                assert (await stranger.post("/rpc", json=body)).status_code == 401
        async with daemon.client(token=client) as mallory:
            for body in (rpc, big, {**rpc, "method": "room/persona"}):
                refused = await mallory.post("/rpc", json=body)
                assert refused.status_code == 403, refused.text
                assert refused.json()["error"]["code"] == -32007
                assert "reserved to the daemon" in refused.json()["error"]["message"]
            cast = await mallory.post("/broadcast", json={"method": "room/turn", "params": {}})
            assert cast.status_code == 403
            pinged = await mallory.post("/rpc", json={"agent": "alice", "method": "ping"})
            assert pinged.status_code == 200  # the legitimate path
        events = await watch_room(daemon, "tea", lambda e: isinstance(e, StoppedEvent))
        async with daemon.client() as admin:
            final = (await admin.get("/rooms/tea")).json()
    assert final["room"]["stop_reason"] == "MAX_TURNS"
    assert [m["turn"] for m in final["transcript"]] == [1, 2, 3, 4, 5, 6]
    assert all(m["text"] in ALICE + BOB for m in final["transcript"])
    assert not [e for e in events if isinstance(e, ErrorEvent)]


def _manifests(directory: Path, http_endpoint: str) -> None:
    (directory / "echo-stdio.toml").write_text(
        'id = "echo-stdio"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        'args = ["-m", "mesh.agents.echo", "--stdio", "--id", "echo-stdio"]\n'
    )
    (directory / "echo-http.toml").write_text(
        f'id = "echo-http"\n[transport]\ntype = "http"\nendpoint = "{http_endpoint}"\n'
    )


async def test_manifest_ids_cannot_be_deleted_overwritten_or_hijacked(tmp_path: Path) -> None:
    async with spawn_echo_server() as echo, recorder() as sink:
        _manifests(tmp_path, echo.http)
        async with spawn_daemon(tmp_path) as daemon:
            await daemon.wait_online("echo-stdio", "echo-http")
            client = await create_token(daemon, "client", "mallory")
            async with daemon.client() as admin:
                before = {a["id"]: a for a in (await admin.get("/agents")).json()["agents"]}
            hijack = {"id": "echo-http", "endpoint": sink[0], "capabilities": ["evil"]}
            lie = {"id": "echo-stdio", "transport": "http"}
            async with httpx.AsyncClient(base_url=daemon.http) as stranger:
                assert (await stranger.delete("/agents/echo-stdio")).status_code == 401
                assert (await stranger.post("/agents/register", json=hijack)).status_code == 401
            for token in (client, daemon.token):  # not even an admin: the operator owns them
                async with daemon.client(token=token) as http:
                    for agent in ("echo-stdio", "echo-http"):
                        gone = await http.delete(f"/agents/{agent}")
                        assert gone.status_code == 409, gone.text
                        assert "defined by a manifest" in gone.json()["error"]["message"]
                    assert (await http.post("/agents/register", json=hijack)).status_code == 409
                    assert (await http.post("/agents/register", json=lie)).status_code in (
                        400,
                        409,
                    )
                    echoed = await http.post(
                        "/rpc",
                        json={
                            "agent": "echo-http",
                            "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"message": "still mine"}},
                        },
                    )
                    assert echoed.json() == {"result": {"message": "still mine"}}
            async with daemon.client() as admin:
                after = {a["id"]: a for a in (await admin.get("/agents")).json()["agents"]}
    assert sink == [sink[0]]  # the attacker's endpoint was never called
    for agent in ("echo-stdio", "echo-http"):
        for field in ("transport", "endpoint", "capabilities", "status", "name"):
            assert after[agent][field] == before[agent][field], (agent, field)


async def test_http_ids_belong_to_whoever_registered_them(daemon: Daemon) -> None:
    ann = await create_token(daemon, "client", "ann")
    mallory = await create_token(daemon, "client", "mallory")
    async with daemon.client(token=ann) as owner, daemon.client(token=mallory) as other:
        joined = await owner.post("/agents/register", json={"id": "weather"})
        assert joined.status_code == 201
        steal = await other.post("/agents/register", json={"id": "weather", "name": "evil"})
        assert steal.status_code == 403 and steal.json()["error"]["missing"] == "ownership"
        assert (await other.post("/agents/weather/heartbeat")).status_code == 403
        assert (await other.delete("/agents/weather")).status_code == 403
        assert (await owner.get("/agents/weather")).json()["name"] == "weather"
        renamed = await owner.post("/agents/register", json={"id": "weather", "name": "W"})
        assert renamed.status_code == 200 and renamed.json()["name"] == "W"
        assert (await owner.post("/agents/weather/heartbeat")).status_code == 200
        bad = await owner.post("/agents/register", json={"id": "Weather Station"})
        assert bad.status_code == 400 and "manifest id rule" in bad.text
    async with daemon.client() as admin:
        assert (await admin.delete("/agents/weather")).status_code == 204


async def test_a_client_cannot_take_the_id_an_agent_token_dials_in_with(
    daemon: Daemon,
) -> None:
    token = await create_token(daemon, "agent", "bob-token", agent="bob")
    mallory = await create_token(daemon, "client", "mallory-of-bob")
    async with daemon.client(token=mallory) as http:
        # Before bob dials in (or after a restart, before he is back): the id is his.
        for body in ({"id": "bob"}, {"id": "bob", "endpoint": "http://127.0.0.1:9/"}):
            taken = await http.post("/agents/register", json=body)
            assert taken.status_code == 409 and "agent token" in taken.text, taken.text
    command, _ = echo_agent_command()
    args = ["-m", "mesh.agents.echo", "--connect", daemon.ws, "--token-env", "T"]
    async with await anyio.open_process(
        [command, *args, "--id", "bob"], env={**os.environ, "T": token}
    ) as bob:
        try:
            with anyio.fail_after(GUARD):
                await daemon.wait_online("bob")
            async with daemon.client(token=mallory) as http:
                echoed = await http.post(
                    "/rpc",
                    json={
                        "agent": "bob",
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": "it is bob"}},
                    },
                )
            assert echoed.json() == {"result": {"message": "it is bob"}}
        finally:
            bob.kill()


async def test_a_stranger_cannot_keep_a_dead_dial_in_agent_online(tmp_path: Path) -> None:
    (tmp_path / "dialer.toml").write_text(
        'id = "dialer"\n[transport]\ntype = "dial-in"\ntoken_env = "DIALER_TOKEN"\n'
    )
    env = {"DIALER_TOKEN": "dialer-secret"}
    async with spawn_daemon(tmp_path, env=env) as daemon:
        command, _ = echo_agent_command()
        args = ["-m", "mesh.agents.echo", "--connect", daemon.ws, "--token-env", "DIALER_TOKEN"]
        process = await anyio.open_process(
            [command, *args, "--id", "dialer"], env={**os.environ, **env}
        )
        async with daemon.open_events("/agents/events") as events:
            with anyio.fail_after(20):
                await wait_status(events, "dialer", "online")
                process.kill()
                await process.wait()
                await wait_status(events, "dialer", "offline")
        await process.aclose()
        client = await create_token(daemon, "client", "mallory")
        async with httpx.AsyncClient(base_url=daemon.http) as stranger:
            assert (await stranger.post("/agents/dialer/heartbeat")).status_code == 401
        async with daemon.client(token=client) as mallory:
            beat = await mallory.post("/agents/dialer/heartbeat")
            assert beat.status_code == 409 and "defined by a manifest" in beat.text
            assert (await mallory.get("/agents/dialer")).json()["status"] == "offline"


async def test_registrations_cannot_make_the_daemon_spin_or_call_anywhere(tmp_path: Path) -> None:
    settings = tmp_path / "mesh.toml"
    settings.write_text('endpoint_hosts = ["localhost"]\n')
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    async with (
        recorder() as sink,
        spawn_daemon(manifests, extra_args=["--config", str(settings)]) as daemon,
    ):
        port = sink[0].rsplit(":", 1)[1]
        async with daemon.client() as http:
            spin = await http.post(
                "/agents/register",
                json={
                    "id": "spin",
                    "endpoint": f"http://localhost:{port}",
                    "heartbeat_interval": 0.001,
                },
            )
            assert (
                spin.status_code == 400
                and spin.json()["error"]["limit"] == "min_heartbeat_interval"
            )
            for endpoint, rule in (
                (f"http://127.0.0.1:{port}", "endpoint_hosts"),  # not in this daemon's list
                (f"http://localhost:{port}/any/path?x=1", "query string"),
                (f"http://user:pw@localhost:{port}", "user-info"),
                (f"http://localhost:{port}#frag", "fragment"),
                ("file:///etc/passwd", "http:// or https://"),
            ):
                refused = await http.post(
                    "/agents/register", json={"id": "forger", "endpoint": endpoint}
                )
                assert refused.status_code == 400, endpoint
                assert rule in refused.json()["error"]["message"], endpoint
                assert "pw" not in refused.text
            assert (await http.get("/agents/forger")).status_code == 404
            assert (await http.get("/agents/spin")).status_code == 404
            ok = await http.post("/agents/register", json={"id": "fine", "heartbeat_interval": 1})
            assert ok.status_code == 201
    assert sink == [sink[0]]  # nothing was ever sent to the sink


async def test_what_a_client_stores_is_bounded(tmp_path: Path) -> None:
    settings = tmp_path / "mesh.toml"
    bounds = ("max_registrations_per_identity = 3", "max_active_rooms = 1")
    settings.write_text("\n".join([*bounds, "max_rooms_kept_per_identity = 2", ""]))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ALICE, 0.2)
    persona_manifest(manifests, "bob", "Bob", BOB, 0.2)
    data = tmp_path / "data"
    args = ["--config", str(settings), "--data-dir", str(data)]
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        ann = await create_token(daemon, "client", "ann")
        mallory = await create_token(daemon, "client", "mallory")
        async with daemon.client(token=ann) as http, daemon.client(token=mallory) as other:
            huge = {"id": "fat", "metadata": {"blob": "x" * (900 * 1024)}}
            fat = await http.post("/agents/register", json=huge)
            assert fat.status_code == 413 and fat.json()["error"]["limit"] == "max_metadata_size"
            for n in range(3):
                assert (
                    await http.post("/agents/register", json={"id": f"a{n}"})
                ).status_code == 201
            more = await http.post("/agents/register", json={"id": "a3"})
            assert more.status_code == 429
            assert more.json()["error"]["limit"] == "max_registrations_per_identity"
            assert (await other.post("/agents/register", json={"id": "b0"})).status_code == 201
            members = ["alice", "bob"]
            for spec, status, limit in (
                ({"topic": "x" * 5000, "members": members}, 413, "max_topic_length"),
                (
                    {"topic": "t", "members": members, "limits": {"max_turns": 10**30}},
                    400,
                    "max_room_turns",
                ),
                ({"topic": "t", "members": [f"m{n}" for n in range(17)]}, 400, "max_room_members"),
            ):
                refused = await http.post("/rooms", json=spec)
                assert refused.status_code == status, refused.text
                assert refused.json()["error"]["limit"] == limit
            named = {"topic": "t", "members": ["alice", {"id": "bob", "name": "B" * 10_000}]}
            refused = await http.post("/rooms", json=named)
            assert refused.status_code == 400 and "members[1].name" in refused.text, refused.text
            room = {"id": "r1", "topic": "t", "members": members, "limits": {"max_turns": 40}}
            assert (await http.post("/rooms", json=room)).status_code == 201
            second = await http.post("/rooms", json={**room, "id": "r2"})
            assert (
                second.status_code == 429 and second.json()["error"]["limit"] == "max_active_rooms"
            )
            assert (await other.post("/rooms/r1/stop")).status_code == 403
            assert (await other.delete("/rooms/r1")).status_code == 403
            assert (await http.delete("/rooms/r1")).status_code == 409  # running: stop it first
            assert (await http.post("/rooms/r1/stop")).status_code == 200
            assert (await other.delete("/rooms/r1")).status_code == 403
            assert (await http.delete("/rooms/r1")).status_code == 204
            assert (await http.get("/rooms/r1")).status_code == 404
            assert (await http.post("/rooms", json={**room, "id": "r2"})).status_code == 201
            # Finished rooms are kept, up to a bound per token: a loop of make and stop
            # cannot fill the disk. Deleting one makes room.
            assert (await http.post("/rooms/r2/stop")).status_code == 200
            assert (await http.post("/rooms", json={**room, "id": "r3"})).status_code == 201
            assert (await http.post("/rooms/r3/stop")).status_code == 200
            third = await http.post("/rooms", json={**room, "id": "r4"})
            assert third.status_code == 429, third.text
            assert third.json()["error"]["limit"] == "max_rooms_kept_per_identity"
            assert (await other.post("/rooms", json={**room, "id": "m1"})).status_code == 201
            assert (await other.post("/rooms/m1/stop")).status_code == 200
            assert (await http.delete("/rooms/r2")).status_code == 204
            assert (await http.post("/rooms", json={**room, "id": "r4"})).status_code == 201
            assert (await http.post("/rooms/r4/stop")).status_code == 200
    assert not (data / "rooms" / "r1.jsonl").exists()
    with sqlite3.connect(data / "rooms.sqlite3") as db:
        for table in ("rooms", "members", "messages"):
            column = "id" if table == "rooms" else "room_id"
            count = db.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = 'r1'").fetchone()
            assert count == (0,), table


async def test_a_token_protected_agent_is_not_callable_through_the_daemon_by_anyone(
    tmp_path: Path,
) -> None:
    async with spawn_echo_server(token="agent-secret") as echo:
        (tmp_path / "vault.toml").write_text(
            f'id = "vault"\n[transport]\ntype = "http"\nendpoint = "{echo.http}"\n'
            'token_env = "VAULT_TOKEN"\n[access]\ncallers = ["client:ops"]\n'
        )
        async with spawn_daemon(tmp_path, env={"VAULT_TOKEN": "agent-secret"}) as daemon:
            await daemon.wait_online("vault")
            dev = await create_token(daemon, "client", "dev")
            ops = await create_token(daemon, "client", "ops")
            call = {
                "agent": "vault",
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "secret"}},
            }
            async with httpx.AsyncClient(base_url=daemon.http) as stranger:
                assert (await stranger.post("/rpc", json=call)).status_code == 401
            async with daemon.client(token=dev) as http:
                refused = await http.post("/rpc", json=call)
                assert refused.status_code == 403 and refused.json()["error"]["code"] == -32007
                assert "access.callers" in refused.json()["error"]["message"]
                cast = await http.post("/broadcast", json={"method": "ping"})
                assert cast.json()["agents"]["vault"]["error"]["code"] == -32007
            for token in (ops, daemon.token):
                async with daemon.client(token=token) as http:
                    allowed = await http.post("/rpc", json=call)
                    assert allowed.json() == {"result": {"message": "secret"}}
