"""A reply streams piece by piece to observers on every daemon, not only the room's holder.

Two ``mesh serve --nats`` daemons and one nats-server as real processes: daemon A holds the
personas and runs the room; an observer that asked for deltas watches it through B.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mesh.rooms import DeltaEvent, LiveEvent, MessageEvent, decode_live_event
from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster._history import GUARD, open_daemons

#: Two daemons, NATS and two personas as processes: 5-15 s alone, more under load.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
async def nats() -> AsyncIterator[NatsServer]:
    async with spawn_nats_server() as server:
        yield server


async def test_an_observer_on_another_daemon_sees_the_reply_piece_by_piece(
    tmp_path: Path, nats: NatsServer
) -> None:
    urls = {"a": nats.url, "b": nats.url}
    async with open_daemons(tmp_path, urls, {"a": ["alice", "bob"]}) as daemons:
        a, b = daemons["a"], daemons["b"]
        await b.wait_online("alice", "bob", timeout=GUARD)
        spec: dict[str, object] = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
        spec["limits"] = {"max_turns": 6}
        async with a.client(timeout=GUARD) as http:
            created = await http.post("/rooms", json=spec)
            assert created.status_code == 201, created.text
        seen: list[LiveEvent] = []
        with anyio.fail_after(GUARD):
            async with b.open_events("/rooms/tea/events?deltas=1") as watch:
                opened: set[int] = set()  # the turns whose opening B's observer saw
                while True:
                    event = decode_live_event(await watch.receive())
                    seen.append(event)
                    if isinstance(event, DeltaEvent) and not event.text:
                        opened.add(event.turn)
                    if isinstance(event, MessageEvent) and event.turn in opened:
                        message = event
                        break
        async with b.client(timeout=GUARD) as http:
            health = (await http.get("/health")).json()
    pieces = [
        e
        for e in seen
        if isinstance(e, DeltaEvent) and e.turn == message.turn and e.agent_id == message.agent_id
    ]
    assert pieces[0].text == "", pieces  # the turn opened, then its pieces, then the message
    written = [p for p in pieces if p.text]
    assert len(written) >= 3, seen
    assert [p.at for p in written] == sorted(p.at for p in written), written
    assert "".join(p.text for p in written) == message.text, (written, message)
    assert all(p.at == len("".join(q.text for q in written[:i])) for i, p in enumerate(written))
    assert health["cluster"]["rooms"] == [], health  # B runs no room: A published the pieces
