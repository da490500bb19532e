"""An agent server knows its WebSocket clients: ``open_agent_server(on_link=...)``.

Each link's peer is handed over as it is served, before the client's handshake is
answered, so a client whose ``open_websocket_peer`` has returned is already known
to the server, which can then notify all of them at once. The dial these links
make connects an IP address itself, with no resolving: both address families.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mesh import Agent, ConnectFailed, Peer, open_agent_server, open_websocket_peer

pytestmark = pytest.mark.anyio

GUARD = 20.0


def _listener(heard: list[Any], arrived: anyio.Event) -> Agent:
    client = Agent("listener")

    @client.on_notification("news")
    def news(peer: Peer | None, params: Any) -> None:
        heard.append(params)
        arrived.set()

    return client


async def test_each_client_is_known_once_its_link_is_up_and_can_be_told_at_once() -> None:
    links: list[Peer] = []
    heard: list[Any] = []
    arrived = [anyio.Event(), anyio.Event()]
    async with open_agent_server(Agent("hub"), on_link=links.append) as server:
        url = f"{server.ws_url}/ws"
        with anyio.fail_after(GUARD):
            async with (
                open_websocket_peer(url, handler=_listener(heard, arrived[0])) as first,
                open_websocket_peer(url, handler=_listener(heard, arrived[1])) as second,
            ):
                # Known before the handshake was answered, so as soon as the dial returns.
                assert len(links) == 2
                assert first.remote_info["id"] == second.remote_info["id"] == "hub"
                Peer.broadcast_nowait(links, "news", {"n": 1})
                for each in arrived:
                    await each.wait()
            for link in links:
                await link.wait_closed()
    assert heard == [{"n": 1}, {"n": 1}]
    assert all(link.closed for link in links)


async def test_a_hook_that_raises_closes_that_link_and_no_other() -> None:
    links: list[Peer] = []

    def once_refused(peer: Peer) -> None:
        if not links:
            links.append(peer)
            raise RuntimeError("the first link is refused")
        links.append(peer)

    async with open_agent_server(Agent("hub"), on_link=once_refused) as server:
        url = f"{server.ws_url}/ws"
        with anyio.fail_after(GUARD):
            with pytest.raises(ConnectFailed):
                async with open_websocket_peer(url, connect_timeout=5):
                    pytest.fail("the refused link should not open")
            async with open_websocket_peer(url) as peer:
                assert await peer.call("ping") is not None
    assert len(links) == 2


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_a_dial_connects_either_address_family_and_refused_says_so(host: str) -> None:
    async with open_agent_server(Agent("hub"), host=host) as server:
        bracketed = f"[{host}]" if ":" in host else host
        url = f"ws://{bracketed}:{server.port}/ws"
        with anyio.fail_after(GUARD):
            async with open_websocket_peer(url) as peer:
                assert peer.remote_info["id"] == "hub"
    # The server is gone: its port refuses, and the dial says where it could not connect.
    with anyio.fail_after(GUARD), pytest.raises(ConnectFailed, match="cannot connect to"):
        async with open_websocket_peer(url):
            pytest.fail("nothing listens there any more")
