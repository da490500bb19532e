"""``/metrics`` of a real ``mesh serve``: what it counts, that Prometheus's tools accept it,
that a real Prometheus server scrapes it; and the public probes ``/healthz`` ``/readyz``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mesh.rooms import MessageEvent, StoppedEvent
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import persona_manifest
from tests.integration.test_daemon import rpc, stdio_manifest, write
from tests.integration.test_daemon_auth import create_token
from tests.integration.test_daemon_rooms import watch_room
from tests.observe._prometheus import promtool_check, query, relay_scrapes, run_prometheus

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """A daemon with the echo agent over stdio, for the tests that read what it exposes:
    they count in differences and name their own tokens, so they can share it."""
    manifests = tmp_path_factory.mktemp("metrics-manifests")
    write(manifests, "echo.toml", stdio_manifest("echo"))
    async with spawn_daemon(manifests) as shared:
        await shared.wait_online("echo")
        yield shared


ROOT = Path(__file__).resolve().parents[2]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(exposition: str) -> Samples:
    """Every sample by (name, labels), as ``prometheus_client``'s own parser reads them."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def make_calls(daemon: Daemon) -> None:
    """Three good calls, one a tool refuses, one to nobody."""
    for n in range(3):
        params = {"name": "echo", "arguments": {"message": str(n)}}
        ok = await rpc(daemon, "echo", "tools/call", params)
        assert ok.status_code == 200, ok.text
    missing = await rpc(daemon, "echo", "tools/call", {"name": "nope", "arguments": {}})
    assert missing.status_code == 502
    nobody = await rpc(daemon, "nobody-by-this-name", "ping")
    assert nobody.status_code == 404


async def scrape(daemon: Daemon, token: str) -> httpx.Response:
    async with daemon.client(token=token) as http:
        return await http.get("/metrics")


async def test_metrics_count_the_calls_and_name_nothing_unbounded(daemon: Daemon) -> None:
    observer = await create_token(daemon, "observer", "prometheus")
    before = samples((await scrape(daemon, observer)).text)  # the daemon is shared
    await make_calls(daemon)
    reply = await scrape(daemon, observer)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = reply.text
    found = samples(text)
    calls = "mesh_rpc_client_duration_seconds_count"

    def counted(**labels: str) -> float:
        return value(found, calls, **labels) - value(before, calls, **labels)

    assert counted(agent="echo", method="tools/call", status="OK") == 3
    assert counted(agent="echo", method="tools/call", status="METHOD_NOT_FOUND") == 1
    # An agent nobody knows is not a label: its name is whatever the client typed.
    assert counted(agent="(unknown)", method="ping", status="UNAVAILABLE") == 1
    assert "nobody-by-this-name" not in text
    assert value(found, "mesh_build_info", version=version("agent-mesh")) == 1
    # ... and the CLI names the same build.
    cli = await anyio.run_process([sys.executable, "-m", "mesh.cli", "--version"])
    assert cli.stdout.decode().split() == ["mesh", version("agent-mesh")]
    assert value(found, "mesh_links", transport="stdio", status="connected") == 1
    assert value(found, "mesh_registry_agents", status="online") == 1
    assert value(found, "mesh_frames_total", direction="out") >= 4
    assert value(found, "mesh_frame_bytes_total", direction="in") > 0
    assert value(found, "mesh_rpc_calls_in_flight", side="client") == 0
    assert value(found, "process_cpu_seconds_total") > 0


async def test_promtool_accepts_the_exposition(daemon: Daemon) -> None:
    await make_calls(daemon)
    assert daemon.token is not None
    reply = await scrape(daemon, daemon.token)
    checked = promtool_check(reply.content)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


async def test_metrics_want_a_token_that_may_read(daemon: Daemon) -> None:
    async with httpx.AsyncClient(base_url=daemon.http) as stranger:
        assert (await stranger.get("/metrics")).status_code == 401
    agent = await create_token(daemon, "agent", "a1", agent="a1")
    refused = await scrape(daemon, agent)
    assert refused.status_code == 403
    assert refused.json()["error"]["missing"] == "read"


async def test_a_real_prometheus_scrapes_the_daemon(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write(manifests, "echo.toml", stdio_manifest("echo"))
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("echo")
        observer = await create_token(daemon, "observer", "prometheus")
        await make_calls(daemon)
        async with (
            relay_scrapes(urlsplit(daemon.http).netloc) as relay,
            run_prometheus(tmp_path, relay.target, observer) as url,
        ):
            await relay.wait_stored(60)
            promql = 'sum(mesh_rpc_client_duration_seconds_count{agent="echo",status="OK"})'
            result = await query(url, promql)
            up = await query(url, 'up{job="mesh"}')
    assert float(result[0]["value"][1]) == 3
    assert [float(r["value"][1]) for r in up] == [1]


async def probe(daemon: Daemon, path: str) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=daemon.http) as anyone:
        reply = await anyone.get(path)
    return reply.status_code, reply.json()


async def test_probes_are_public_and_say_only_ok(daemon: Daemon) -> None:
    assert await probe(daemon, "/healthz") == (200, {"status": "ok"})
    assert await probe(daemon, "/readyz") == (200, {"status": "ready"})


async def test_room_turns_stops_and_tokens_are_counted(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ["Tea keeps me calm.", "Both, then."], 0.0)
    persona_manifest(manifests, "bob", "Bob", ["Coffee wakes me up.", "Agreed."], 0.0)
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("alice", "bob")
        limits = {"max_turns": 4}
        spec = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"], "limits": limits}
        async with daemon.client() as http:
            assert (await http.post("/rooms", json=spec)).status_code == 201
        events = await watch_room(daemon, "tea", lambda e: isinstance(e, StoppedEvent))
        assert daemon.token is not None
        found = samples((await scrape(daemon, daemon.token)).text)
    said = [e for e in events if isinstance(e, MessageEvent)]
    assert value(found, "mesh_room_turn_duration_seconds_count", outcome="spoken") == len(said)
    assert value(found, "mesh_room_stops_total", reason=str(events[-1].reason)) == 1
    words = sum(len(e.text.split()) for e in said if e.agent_id == "alice")
    assert value(found, "mesh_provider_tokens_total", agent="alice", type="output") == words
    assert value(found, "mesh_provider_tokens_total", agent="bob", type="input") > 0
    assert "tea" not in {v for key in found for _, v in key[1]}  # no room id as a label


async def test_the_dashboard_asks_only_for_metrics_the_daemon_serves(daemon: Daemon) -> None:
    assert daemon.token is not None
    exposition = (await scrape(daemon, daemon.token)).text
    served = set()
    for family in text_string_to_metric_families(exposition):
        suffixes = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",)}
        served |= {family.name, *(family.name + s for s in suffixes.get(family.type, ()))}
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bmesh_[a-z_]+", target["expr"])
    }
    assert asked and asked <= served, asked - served
