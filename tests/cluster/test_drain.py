"""A daemon told to stop finishes the calls other daemons sent it; only new ones are refused.

Three ``mesh serve --nats`` and a real nats-server: calls from daemons A and C into B's
agent are in the agent's hands when B gets SIGTERM. They are answered; a call sent
after B started draining gets 503 "shutting down", never a 404 for an agent "removed".
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import httpx
import pytest

from mesh.testing import Daemon, EchoServer, NatsServer, spawn_nats_server
from tests.cluster.test_daemons import GUARD, echo_manifest, open_daemons, rpc
from tests.faults._helpers import spawn_holding_server, wait_holding

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

#: How long each held call takes: long enough that B is still draining when the test
#: has sent its new call, and short enough against the default drain timeout (10 s).
HELD = 3.0


async def _hold(daemon: Daemon, replies: list[httpx.Response]) -> None:
    body = {
        "agent": "echo-b",
        "method": "tools/call",
        "params": {"name": "hold", "arguments": {"seconds": HELD}},
        "timeout": 60,
    }
    async with daemon.client(timeout=GUARD) as http:
        replies.append(await http.post("/rpc", json=body))


async def test_sigterm_finishes_the_calls_other_daemons_sent_and_refuses_new_ones(
    tmp_path: Path,
) -> None:
    async with spawn_nats_server() as nats, spawn_holding_server() as holder:
        await _drain_with_calls_in_flight(tmp_path, nats, holder)


async def _drain_with_calls_in_flight(tmp_path: Path, nats: NatsServer, holder: EchoServer) -> None:
    manifests: dict[str, dict[str, str]] = {"a": {}, "c": {}}
    manifests["b"] = {"echo-b.toml": echo_manifest("echo-b", holder)}
    async with open_daemons(tmp_path, nats, manifests) as daemons:
        a, b, c = daemons["a"], daemons["b"], daemons["c"]
        await a.wait_online("echo-b", timeout=GUARD)
        await c.wait_online("echo-b", timeout=GUARD)
        replies: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_hold, a, replies)
            tg.start_soon(_hold, c, replies)
            with anyio.fail_after(GUARD):
                await wait_holding(holder, 2)
            b.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(GUARD):
                refused = await _first_refusal(a)
        for reply in replies:
            assert reply.json() == {"result": {"slept": HELD}}, reply.text
        assert refused.status_code == 503, refused.text
        assert "shutting down" in refused.json()["error"]["message"], refused.text
        with anyio.fail_after(GUARD):
            assert await b.process.wait() == 0


async def _first_refusal(daemon: Daemon) -> httpx.Response:
    """Call B's agent through ``daemon`` until a call is not answered: the first one B
    refuses once it drains (each call a real round trip, bounded by the caller)."""
    while True:
        reply = await rpc(daemon, "echo-b", "new")
        if reply.status_code != 200:
            return reply
