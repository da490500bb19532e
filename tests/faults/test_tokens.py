"""Row 6: bad and missing tokens are refused, and nothing they send is processed.

``tests/integration/test_websocket_auth.py`` covers one refused connection of each kind
(missing, wrong, revoked: 4001; another agent's: 4003). Here: a storm of 100 refused
connections, each sending calls at once, does not disturb a good connection's calls
and none of theirs runs; and ``POST /rpc`` without a valid token is 401 and runs nothing.
"""

from __future__ import annotations

import anyio
import httpx
import msgspec
import pytest

from mesh import open_agent_server, open_websocket_peer
from tests.faults._helpers import recording_agent
from transports import CloseCode, TokenAuthenticator, TransportClosed, open_websocket

pytestmark = pytest.mark.anyio

REFUSED = 100
#: The good connection's calls, while the storm lasts (a bound, not a target).
MAX_GOOD_CALLS = 2_000


def _touch(request_id: str) -> bytes:
    return msgspec.json.encode(
        {
            "type": "request",
            "id": request_id,
            "timestamp": 1,
            "payload": {"method": "tools/call", "params": {"name": "touch", "arguments": {}}},
        }
    )


async def _refused_with(url: str, token: str | None, n: int) -> int | None:
    """Dial, fire five calls at once, and report the close code that ended the link."""
    async with open_websocket(url, token=token) as stream:
        try:
            await stream.send_many([_touch(f"refused-{n}-{k}") for k in range(5)])
            with anyio.fail_after(5):
                await stream.receive()
        except TransportClosed as closed:
            return closed.close_code
    return None


async def test_a_storm_of_refused_connections_does_not_disturb_a_good_one() -> None:
    calls: list[str] = []
    codes: list[int | None] = []
    # How many good calls had been answered when each refused link ended: the storm
    # may slow the good connection, not stall it, so the count grows during the storm.
    good_answered_at_refusal: list[int] = []
    good_answered = 0
    storm_over = anyio.Event()
    tokens = TokenAuthenticator({"good": "guarded"})
    async with (
        open_agent_server(recording_agent(calls), tokens=tokens) as server,
        open_websocket_peer(server.ws_url + "/ws", token="good", agent="guarded") as good,
    ):
        url = server.ws_url + "/ws"

        async def good_calls() -> None:
            nonlocal good_answered
            for _ in range(MAX_GOOD_CALLS):
                assert await good.call_tool("touch") == "touched"
                good_answered += 1
                if storm_over.is_set():
                    return

        async def refused(n: int) -> None:
            codes.append(await _refused_with(url, None if n % 2 else f"wrong-{n}", n))
            good_answered_at_refusal.append(good_answered)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(good_calls)
                async with anyio.create_task_group() as storm:
                    for n in range(REFUSED):
                        storm.start_soon(refused, n)
                storm_over.set()
        assert not good.closed
    assert codes == [CloseCode.UNAUTHORIZED] * REFUSED
    assert not [request_id for request_id in calls if request_id.startswith("refused-")]
    assert len(calls) == good_answered >= 2, "the good connection kept calling throughout"
    first, last = good_answered_at_refusal[0], good_answered_at_refusal[-1]
    assert first < last, "good calls were answered between the first refusal and the last"


async def test_rpc_without_a_valid_token_is_401_and_runs_nothing() -> None:
    calls: list[str] = []
    tokens = TokenAuthenticator({"good": "guarded"})
    async with (
        open_agent_server(recording_agent(calls), tokens=tokens) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        refused = [
            await http.post("/rpc", content=_touch("no-token")),
            await http.post(
                "/rpc", content=_touch("wrong"), headers={"authorization": "Bearer wrong"}
            ),
            await http.post("/rpc", content=_touch("basic"), headers={"authorization": "Basic x"}),
        ]
        for reply in refused:
            assert reply.status_code == 401
            assert reply.json()["error"]["message"] == "missing or invalid bearer token"
        assert calls == []
        good = await http.post(
            "/rpc", content=_touch("good"), headers={"authorization": "Bearer good"}
        )
        assert good.status_code == 200 and good.json()["payload"]["result"] == "touched"
    assert calls == ["good"]
