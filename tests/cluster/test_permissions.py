"""Each daemon's NATS user acts in its own name only: the generated nats-server config.

A real nats-server runs the shipped ``examples/nats/mesh-daemons.conf`` (which is
the generator's output); two daemons work together on it, calls and a room, and a
raw nats-py client logged in as daemon A is refused everything of daemon B's:
its subjects, its inbox, its keys, and the JetStream API verbs that erase a record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import EMBEDDER, AgentSpec, local_connector
from mesh.agents.echo import agent as echo_agent
from mesh.cli._main import main as mesh_main
from mesh.cluster import ClusterError
from mesh.cluster._permissions import nats_config, password_variable
from mesh.cluster._settings import agent_key
from mesh.rooms import Limits, MessageEvent, RoomSpec
from mesh.testing import NatsServer, spawn_nats_server
from tests._cli_logging import logging_of_its_own
from tests.cluster._helpers import SPREAD_TIMEOUT, Member, open_member, wait_status
from tests.cluster._raw import open_raw_daemon
from tests.cluster.test_rooms import persona

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "nats" / "mesh-daemons.conf"
PASSWORDS = {"a": "pw-a", "b": "pw-b"}


def test_the_shipped_example_is_the_generators_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXAMPLE_CONFIG.read_text() == nats_config("mesh", ["a", "b"])
    with logging_of_its_own():  # main() sets up logging as a CLI should: not for later tests
        assert mesh_main(["cluster", "nats-config", "--daemon", "a", "--daemon", "b"]) == 0
    assert capsys.readouterr().out == EXAMPLE_CONFIG.read_text()


@pytest.mark.parametrize(
    ("cluster", "daemons", "says"),
    [
        ("mesh", [], "at least one daemon"),
        ("me.sh", ["a"], "cluster_id 'me.sh'"),
        ("mesh", ["a", "b>"], "daemon_id 'b>'"),
        ("mesh", ["a-b", "a_b"], "share the password variable"),
    ],
)
def test_bad_ids_are_refused_with_the_rule(cluster: str, daemons: list[str], says: str) -> None:
    with pytest.raises(ClusterError, match=says):
        nats_config(cluster, daemons)
    argv = ["cluster", "nats-config", "--cluster-id", cluster]
    argv += [word for d in daemons for word in ("--daemon", d)]
    if daemons:
        with logging_of_its_own():
            assert mesh_main(argv) == 2


@pytest.fixture
async def nats(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NatsServer]:
    for daemon, password in PASSWORDS.items():
        monkeypatch.setenv(password_variable(daemon), password)
    async with spawn_nats_server(args=["-c", str(EXAMPLE_CONFIG)]) as server:
        yield server


def creds(daemon: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "nats_user": f"daemon-{daemon}",
        "nats_password": PASSWORDS[daemon],
        "data_dir": tmp_path,
    }


@asynccontextmanager
async def two_daemons(nats: NatsServer, tmp_path: Path) -> AsyncIterator[tuple[Member, Member]]:
    echo = AgentSpec("echo", local_connector(echo_agent))
    async with (
        open_member(nats.url, "a", [echo, persona("alice")], **creds("a", tmp_path)) as a,
        open_member(nats.url, "b", [persona("bob")], **creds("b", tmp_path)) as b,
    ):
        await wait_status(b.mesh.registry, "echo")
        await wait_status(b.mesh.registry, "alice")
        await wait_status(a.mesh.registry, "bob")
        yield a, b


@pytest.mark.anyio
async def test_daemon_a_is_refused_daemon_bs_subjects_keys_inbox_and_purges(
    nats: NatsServer, tmp_path: Path
) -> None:
    async with two_daemons(nats, tmp_path) as (a, b):
        assert await b.mesh.call_tool("echo", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER) == {
            "message": "hi"
        }
        spec = RoomSpec(
            id="tea", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=2)
        )
        assert b.rooms is not None and a.rooms is not None
        await b.rooms.create(spec)
        async with a.rooms.subscribe("tea", since=0) as events:  # a reads what b records
            with anyio.fail_after(SPREAD_TIMEOUT):
                async for event in events:
                    if isinstance(event, MessageEvent) and event.turn == 2:
                        break
        # Both daemons stayed inside their permissions.
        assert not [line for line in nats.log if b"Violation" in line], nats.log

        async with open_raw_daemon(nats.url, "a", PASSWORDS["a"]) as raw:
            nc = raw.nc
            # Its own key may be written: the refusals below are about whose, not what.
            mine = f"$KV.mesh-mesh-agents.{agent_key('a', 'mine')}"
            ack = await raw.run(lambda: nc.request(mine, b"{}", 5))
            assert b'"seq"' in ack.data
            for subject in ("mesh.mesh.call.b", "_INBOX_mesh.mesh.b.>"):
                await raw.run(lambda: nc.subscribe(subject))  # noqa: B023 (awaited at once)
                await raw.refused("subscription", subject)
            for subject in (
                "$KV.mesh-mesh-keys.b",
                f"$KV.mesh-mesh-agents.{agent_key('b', 'bob')}",
                "$KV.mesh-mesh-agents.daemon.b",
                "$JS.API.STREAM.PURGE.mesh-mesh-rooms",
                "$JS.API.STREAM.DELETE.mesh-mesh-rooms",
                "$JS.API.STREAM.UPDATE.KV_mesh-mesh-agents",
                "$JS.API.STREAM.MSG.DELETE.mesh-mesh-rooms",
                "$JS.API.STREAM.PURGE.KV_mesh-mesh-agents",
            ):
                await raw.run(lambda: nc.publish(subject, b"{}"))  # noqa: B023
                await raw.refused("publish", subject)
        # None of it happened: b's agent is still b's, and the room is still recorded.
        assert a.cluster.holder("bob") == "b"
        assert (await a.rooms.get("tea")).id == "tea"
