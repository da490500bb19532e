"""A link its clock declares lost stops its reader, on both loops.

Over ``open_peer`` the reader is a task of the link's group. When the link is lost for
another reason than the reader's own (here the heartbeat TTL: nothing heard), the peer
cancels that task itself: the caller's ``async with`` goes on, and the silent stream is
read no more.
"""

from __future__ import annotations

import anyio
import pytest

from mesh import SessionConfig, open_peer
from transports import memory_stream_pair

pytestmark = pytest.mark.anyio


async def test_a_link_lost_to_its_heartbeat_ttl_stops_reading() -> None:
    client, server = memory_stream_pair()  # nobody serves the other end: nothing is heard
    receive = client.receive
    stopped = anyio.Event()

    async def watched() -> bytes:
        try:
            return await receive()
        except anyio.get_cancelled_exc_class():
            stopped.set()
            raise

    client.receive = watched  # type: ignore[method-assign]
    config = SessionConfig(heartbeat_interval=0.05, heartbeat_ttl=0.2)
    with anyio.fail_after(10):
        async with open_peer(client, config=config) as peer:
            await peer.wait_closed()
            await stopped.wait()  # before the async with's own exit cancels the group
    await server.aclose()
