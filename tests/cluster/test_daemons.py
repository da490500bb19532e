"""Three ``mesh serve --nats`` daemons and one nats-server on loopback, as real processes.

The four scenarios of issue 16: an agent on daemon A called from daemon C; a
broadcast over 3 daemons x 10 agents; daemon B SIGKILLed mid-room; NATS away for
five seconds (from two daemons, each with an agent the other calls).
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.rooms import MessageEvent, ResumedEvent, StoppedEvent, decode_event
from mesh.testing import (
    Daemon,
    EchoServer,
    NatsServer,
    spawn_daemon,
    spawn_echo_server,
    spawn_nats_server,
)

#: Three daemons, NATS and their agents as processes: 10-20 s each alone, more under load.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

#: Every wait on the daemons is bounded by this (processes on a loaded machine).
GUARD = 60.0
#: The agents of these tests beat every second: stale after 1 s, offline after 3 s.
INTERVAL = 1.0
TTL = 3.0
#: How often the calls of the NATS outage are made: what is checked is the answer to each
#: call throughout the five seconds, not how many calls fit in them. Back to back they were
#: some fifty pairs, which kept a core busy for the whole outage on each backend.
OUTAGE_PACE = 0.25


def echo_manifest(agent_id: str, echo: EchoServer) -> str:
    return (
        f'id = "{agent_id}"\ncapabilities = ["echo"]\nheartbeat_interval = {INTERVAL}\n'
        f'heartbeat_ttl = {TTL}\n[transport]\ntype = "http"\nendpoint = "{echo.http}"\n'
    )


def persona_manifest(path: Path, agent_id: str, delay: float) -> str:
    return f'''id = "{agent_id}"
name = "{agent_id.title()}"
capabilities = ["chat"]

[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]

[persona]
system_prompt = "You are {agent_id.title()}."
role = "participant"

[persona.provider]
provider = "scripted"
script = ["{agent_id} speaks at turn {{turn}}"]
delay = {delay}
'''


@asynccontextmanager
async def open_daemons(
    tmp_path: Path, nats: NatsServer, manifests: Mapping[str, Mapping[str, str]]
) -> AsyncIterator[dict[str, Daemon]]:
    """One ``mesh serve --nats`` per key of ``manifests`` (daemon id -> file name -> text)."""
    daemons: dict[str, Daemon] = {}
    async with AsyncExitStack() as stack:
        for daemon_id, files in manifests.items():
            directory = tmp_path / daemon_id / "manifests"
            directory.mkdir(parents=True)
            for name, text in files.items():
                (directory / name).write_text(text)
            args = ["--nats", nats.url, "--daemon-id", daemon_id, "--room-lease-ttl", "2"]
            args += ["--data-dir", str(tmp_path / daemon_id / "data")]
            daemons[daemon_id] = await stack.enter_async_context(
                spawn_daemon(directory, extra_args=args)
            )
        yield daemons


async def rpc(
    daemon: Daemon,
    agent: str,
    message: str,
    timeout: float = 20.0,
    *,
    http: httpx.AsyncClient | None = None,
) -> httpx.Response:
    """``agent`` echoes ``message``, called through ``daemon`` (deadlines for a loaded machine:
    both backends failed this walk at load 12 with 5 s calls and a 10 s broadcast), on
    ``http`` when given (a client of that daemon kept across calls), else on a new one."""
    body = {
        "agent": agent,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}},
        "timeout": timeout,
    }
    if http is not None:
        return await http.post("/rpc", json=body, timeout=timeout + 5)
    async with daemon.client(timeout=timeout + 5) as fresh:
        return await fresh.post("/rpc", json=body)


async def watch_room(daemon: Daemon, room_id: str, until: Callable[[Any], bool]) -> list[Any]:
    events: list[Any] = []
    with anyio.fail_after(GUARD):
        async with daemon.open_events(f"/rooms/{room_id}/events") as watch:
            while not events or not until(events[-1]):
                events.append(decode_event(await watch.receive()))
    return events


async def wait_gone(daemon: Daemon, agent_ids: set[str]) -> None:
    """Until none of ``agent_ids`` is in the daemon's registry (watching /agents/events)."""
    async with daemon.open_events("/agents/events") as events:
        present: set[str] = set()
        while True:
            event = json.loads(await events.receive())
            if event["type"] == "snapshot":
                present = {a["id"] for a in event["agents"]} & agent_ids
            elif event["type"] in ("removed", "deregistered"):
                present.discard(event["agent"]["id"])
            if not present:
                return


@pytest.fixture
async def nats() -> AsyncIterator[NatsServer]:
    async with spawn_nats_server() as server:
        yield server


async def test_calls_from_anywhere_and_a_broadcast_over_thirty_agents(
    tmp_path: Path, nats: NatsServer
) -> None:
    async with spawn_echo_server() as echo:
        manifests = {
            d: {f"{d}-{n}.toml": echo_manifest(f"{d}-{n}", echo) for n in range(10)}
            for d in ("a", "b", "c")
        }
        # an agent on A that only agents may call: C's clients are refused, as A's would be
        guarded = echo_manifest("guarded", echo).replace('capabilities = ["echo"]', "")
        manifests["a"]["guarded.toml"] = guarded + '[access]\ncallers = ["agents"]\n'
        async with open_daemons(tmp_path, nats, manifests) as daemons:
            everyone = [f"{d}-{n}" for d in "abc" for n in range(10)]
            shown = await daemons["c"].wait_online(*everyone, timeout=GUARD)
            assert {shown[a]["daemon"] for a in everyone} == {"a", "b", "c"}
            assert shown["a-3"]["daemon"] == "a" and shown["c-3"]["daemon"] == "c"
            # an agent on daemon A, called from daemon C
            called = await rpc(daemons["c"], "a-3", "across")
            assert called.status_code == 200, called.text
            assert called.json()["result"] == {"message": "across"}
            async with daemons["b"].client(timeout=GUARD) as http:
                cast = await http.post(
                    "/broadcast",
                    json={
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": "all"}},
                        "capability": "echo",
                        "timeout": 30,
                    },
                )
                health = (await http.get("/health")).json()
            answers = cast.json()["agents"]
            assert sorted(answers) == sorted(everyone)
            assert all(a == {"result": {"message": "all"}} for a in answers.values())
            assert health["cluster"]["nats"]["connected"] is True
            assert sorted(health["cluster"]["daemons"]) == ["a", "b", "c"]
            missing = await rpc(daemons["a"], "nobody", "?")
            assert missing.status_code == 404
            await daemons["c"].wait_online("guarded", timeout=GUARD)
            async with daemons["c"].client() as admin:
                made = await admin.post("/tokens", json={"role": "client", "name": "carol"})
            token = made.json()["token"]
            async with daemons["c"].client(token=token) as carol:
                body = {"agent": "guarded", "method": "ping"}
                refused = await carol.post("/rpc", json=body)
                assert refused.status_code == 403, refused.text
                assert "does not accept calls from client token 'carol'" in refused.text
                # nor through a room on C: its turns would be made for carol (one door)
                spec = {"topic": "t", "members": ["guarded", "a-1"]}
                room = await carol.post("/rooms", json=spec)
                assert room.status_code == 403, room.text
                assert (
                    "agent 'guarded' does not accept calls from client token 'carol'" in room.text
                )
                assert (
                    await carol.post("/rpc", json={"agent": "a-1", "method": "ping"})
                ).is_success
            # C's admin token is an admin on C only: on A it is a client like any other.
            admin_call = await rpc(daemons["c"], "guarded", "admin may not")
            assert admin_call.status_code == 403, admin_call.text
            assert "does not accept calls from client token" in admin_call.text


async def test_sigkill_a_daemon_its_agents_leave_and_its_room_resumes_elsewhere(
    tmp_path: Path, nats: NatsServer
) -> None:
    async with spawn_echo_server() as echo:
        persona_dir = tmp_path / "personas"
        persona_dir.mkdir()
        alice, bob = persona_dir / "alice.toml", persona_dir / "bob.toml"
        alice.write_text(persona_manifest(alice, "alice", 0.2))
        bob.write_text(persona_manifest(bob, "bob", 0.2))
        manifests = {
            "a": {"alice.toml": alice.read_text()},
            "b": {f"b-{n}.toml": echo_manifest(f"b-{n}", echo) for n in range(3)},
            "c": {"bob.toml": bob.read_text()},
        }
        async with open_daemons(tmp_path, nats, manifests) as daemons:
            a, b, c = daemons["a"], daemons["b"], daemons["c"]
            await a.wait_online("b-0", "b-1", "b-2", "bob", timeout=GUARD)
            await b.wait_online("alice", "bob", timeout=GUARD)
            spec = {"id": "long", "topic": "Tea?", "members": ["alice", "bob"]}
            spec["limits"] = {"max_turns": 12}  # type: ignore[assignment]
            async with b.client() as http:
                created = await http.post("/rooms", json=spec)
            assert created.status_code == 201, created.text
            await watch_room(b, "long", lambda e: isinstance(e, MessageEvent) and e.turn >= 3)
            b.process.send_signal(signal.SIGKILL)
            killed = anyio.current_time()
            await b.process.wait()
            # B's agents leave the registry within their TTL (KV TTL: whole seconds)
            with anyio.fail_after(GUARD):
                await wait_gone(a, {"b-0", "b-1", "b-2"})
            assert anyio.current_time() - killed < TTL + 2.5
            # its room resumes on A or C, every turn once
            events = await watch_room(a, "long", lambda e: isinstance(e, StoppedEvent))
            async with c.client() as http:
                shown = (await http.get("/rooms/long")).json()
    turns = [e.turn for e in events if isinstance(e, MessageEvent)]
    assert turns == list(range(1, 13)), turns
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(isinstance(e, ResumedEvent) for e in events) == 1
    assert events[-1].reason == "MAX_TURNS"
    assert [m["turn"] for m in shown["transcript"]] == list(range(1, 13))
    assert shown["room"]["status"] == "stopped"


async def test_nats_away_for_five_seconds(tmp_path: Path, nats: NatsServer) -> None:
    async with spawn_echo_server() as echo:
        # Two daemons: each calls its own agent and the other's (a third, with no agent and
        # no call, only added a process).
        manifests = {
            "a": {"echo-a.toml": echo_manifest("echo-a", echo)},
            "c": {"echo-c.toml": echo_manifest("echo-c", echo)},
        }
        async with open_daemons(tmp_path, nats, manifests) as daemons:
            a, c = daemons["a"], daemons["c"]
            await c.wait_online("echo-a", "echo-c", timeout=GUARD)
            await a.wait_online("echo-a", "echo-c", timeout=GUARD)
            await nats.stop()
            local_calls = remote_failures = 0
            # The outage lasts five seconds and work goes on meanwhile, a pair of calls every
            # OUTAGE_PACE. The deadline is checked between calls, never by cancelling one: a
            # request cut off mid-body leaves httpx's body generator unfinished, and trio
            # reports that when it is collected.
            next_pair = anyio.current_time()
            outage_ends = next_pair + 5.0
            async with a.client() as on_a, c.client() as on_c:
                while anyio.current_time() < outage_ends:
                    local = await rpc(a, "echo-a", "still here", http=on_a)
                    assert local.status_code == 200, local.text  # local calls never fail
                    local_calls += 1
                    started = anyio.current_time()
                    remote = await rpc(c, "echo-a", "anyone?", http=on_c)
                    assert remote.status_code == 503, remote.text  # remote ones fail fast
                    assert anyio.current_time() - started < 1.0
                    assert "NATS" in remote.json()["error"]["message"]
                    remote_failures += 1
                    next_pair += OUTAGE_PACE
                    await anyio.sleep_until(min(next_pair, outage_ends))
                health = (await on_c.get("/health")).json()
            assert health["cluster"]["nats"]["connected"] is False
            await nats.start()
            # the registry converges: each sees the other's agent online again
            await c.wait_online("echo-a", "echo-c", timeout=GUARD)
            await a.wait_online("echo-a", "echo-c", timeout=GUARD)
            remote = await rpc(c, "echo-a", "back")
            assert remote.status_code == 200, remote.text
            assert remote.json()["result"] == {"message": "back"}
    assert local_calls > 3 and remote_failures > 3
