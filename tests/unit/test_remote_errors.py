"""What the peer said is kept apart from what happened here (h11's Local/Remote split).

An agent whose handler reports ``-32003`` (its own backend link died) or ``-32001`` (its
own call timed out) has answered: the caller's link is fine and its deadline has not
passed, so the caller gets a :class:`~mesh.RemoteError` carrying the code, never the
:class:`~mesh.ConnectionLost` or :class:`~mesh.CallTimeout` it would get for its own
link or clock. A router (``mesh/call``, the daemon, a cluster holder) relaying its
verdict on the link it holds is another matter: that verdict is the local kind.
"""

from __future__ import annotations

import anyio
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    MeshOrchestrator,
    RemoteError,
    RequestContext,
    local_connector,
)
from mesh._errors import error_from_code
from mesh.agents.echo import agent as echo_agent
from mesh.testing import open_memory_peer

pytestmark = pytest.mark.anyio

GUARD = 10.0

reporter = Agent("reporter")


@reporter.tool
async def backend_gone() -> None:
    raise ConnectionLost("the backend's link closed")


@reporter.tool
async def backend_slow() -> None:
    raise CallTimeout("the backend did not answer within 2 s")


@pytest.mark.parametrize(
    ("tool", "code", "local"),
    [
        ("backend_gone", ErrorCode.CONNECTION_LOST, ConnectionLost),
        ("backend_slow", ErrorCode.TIMEOUT, CallTimeout),
    ],
)
async def test_an_agent_that_reports_a_link_or_deadline_error_is_a_remote_error(
    tool: str, code: ErrorCode, local: type[Exception]
) -> None:
    with anyio.fail_after(GUARD):
        async with open_memory_peer(reporter) as peer:
            with pytest.raises(RemoteError) as caught:
                await peer.call_tool(tool, {})
            assert not isinstance(caught.value, local)
            assert caught.value.code == code and caught.value.agent == "reporter"
            assert "the backend" in caught.value.message
            assert not peer.closed
            await peer.ping()  # our link is fine: a round trip still answers


async def test_a_routers_verdict_on_the_link_it_holds_stays_the_local_kind() -> None:
    relay = Agent("relay")
    seen: list[BaseException] = []

    @relay.tool
    async def slow_relay(ctx: RequestContext) -> None:
        args = {"name": "sleep", "arguments": {"seconds": 30}}
        try:
            await ctx.call_agent("echo", "tools/call", args, timeout=0.2)
        except CallTimeout as exc:  # the mesh's verdict: echo's deadline passed there
            seen.append(exc)
            raise

    specs = [AgentSpec(a.id, local_connector(a)) for a in (relay, echo_agent)]
    async with MeshOrchestrator(specs) as mesh:
        with anyio.fail_after(GUARD), pytest.raises(RemoteError) as caught:
            await mesh.call_tool("relay", "slow_relay", {}, on_behalf_of=EMBEDDER)
    [relayed] = seen
    assert type(relayed) is CallTimeout and "agent 'echo'" in str(relayed)
    # ... and relay, letting it out of its handler, reported it: remote to the mesh.
    assert caught.value.code == ErrorCode.TIMEOUT and not isinstance(caught.value, CallTimeout)


def test_error_from_code_tells_a_report_from_a_relayed_verdict() -> None:
    reported = error_from_code(ErrorCode.TIMEOUT, "slow")
    relayed = error_from_code(ErrorCode.TIMEOUT, "slow", relayed=True)
    assert type(reported) is RemoteError and reported.code == ErrorCode.TIMEOUT
    assert type(relayed) is CallTimeout
    lost = error_from_code(ErrorCode.CONNECTION_LOST, "gone")
    assert type(lost) is RemoteError and lost.code == ErrorCode.CONNECTION_LOST
    assert type(error_from_code(ErrorCode.CONNECTION_LOST, "gone", relayed=True)) is ConnectionLost
