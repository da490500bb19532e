"""Two ``mesh serve --nats`` daemons on a real NATS: remote calls in each one's metrics, and
``/readyz`` following the NATS connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from mesh.testing import Daemon, NatsServer, spawn_echo_server, spawn_nats_server
from tests.cluster.test_daemons import GUARD, echo_manifest, open_daemons, rpc
from tests.observe.test_metrics import samples, value

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
async def nats() -> AsyncIterator[NatsServer]:
    async with spawn_nats_server() as server:
        yield server


async def metrics(daemon: Daemon) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with daemon.client() as http:
        return samples((await http.get("/metrics")).text)


async def wait_ready(daemon: Daemon, status: int) -> dict[str, str]:
    """Until ``/readyz`` answers ``status``: one request after another, bounded."""
    async with httpx.AsyncClient(base_url=daemon.http) as anyone:
        with anyio.fail_after(GUARD):
            while (reply := await anyone.get("/readyz")).status_code != status:
                pass
    body: dict[str, str] = reply.json()
    return body


async def test_remote_calls_are_counted_on_both_daemons(tmp_path: Path, nats: NatsServer) -> None:
    async with spawn_echo_server() as echo:
        manifests = {"a": {"echo-a.toml": echo_manifest("echo-a", echo)}, "b": {}}
        async with open_daemons(tmp_path, nats, manifests) as daemons:
            a, b = daemons["a"], daemons["b"]
            await b.wait_online("echo-a", timeout=GUARD)
            for n in range(3):
                assert (await rpc(b, "echo-a", f"hop {n}")).status_code == 200
            held, asking = await metrics(a), await metrics(b)
    remote = "mesh_cluster_remote_call_duration_seconds_count"
    assert value(asking, remote, status="OK") == 3
    served = "mesh_rpc_server_duration_seconds_count"
    assert value(held, served, surface="cluster", method="tools/call", status="OK") == 3
    assert value(asking, served, surface="http", method="tools/call", status="OK") == 3
    assert value(held, remote, status="OK") == 0


async def test_readyz_follows_nats_and_reconnects_are_counted(
    tmp_path: Path, nats: NatsServer
) -> None:
    async with spawn_echo_server() as echo:
        manifests = {"a": {"echo-a.toml": echo_manifest("echo-a", echo)}, "b": {}}
        async with open_daemons(tmp_path, nats, manifests) as daemons:
            b = daemons["b"]
            await b.wait_online("echo-a", timeout=GUARD)
            assert await wait_ready(b, 200) == {"status": "ready"}
            await nats.stop()
            down = await wait_ready(b, 503)
            assert down == {"status": "not ready", "reason": "cluster: not connected to NATS"}
            await nats.start()
            await wait_ready(b, 200)
            found = await metrics(b)
    assert value(found, "mesh_cluster_nats_reconnects_total") == 1
