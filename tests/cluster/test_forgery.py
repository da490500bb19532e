"""What daemon A's stolen NATS credentials cannot do in daemon B's name.

A real nats-server runs the generator's config for daemons a, b and c; daemons B and
C run in this process, and a raw nats-py client logged in as daemon-a writes what A's
user may write (any agents entry of its own, any room's subject, any lease key) while
claiming to be B. Neither C nor B applies or shows any of it, nor any piece of a reply
A says B's room is writing.
"""

from __future__ import annotations

import operator
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from mesh import EMBEDDER, Principal
from mesh.cluster._keys import DaemonKey, Keys
from mesh.cluster._kv import KvChange
from mesh.cluster._permissions import nats_config, password_variable
from mesh.cluster._sealed import seal, unseal
from mesh.cluster._settings import Names, agent_key
from mesh.cluster._wire import ENCODER, LEASE_ENTRY, LeaseEntry, LivePieces
from mesh.protocol import Response
from mesh.rooms import (
    DeltaEvent,
    Limits,
    MessageEvent,
    People,
    ResumedEvent,
    RoomId,
    RoomSpec,
    RoomStatus,
    decode_event,
    encode_event,
)
from registry import AgentId
from tests.cluster._helpers import SPREAD_TIMEOUT, Member, open_member, wait_status
from tests.cluster._raw import RawDaemon, link_frames, link_request, open_raw_daemon
from tests.cluster.test_rooms import persona

pytestmark = pytest.mark.anyio

PASSWORDS = {"a": "pw-a", "b": "pw-b", "c": "pw-c"}
NAMES = Names("mesh", "a")


@pytest.fixture
async def nats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Any]:
    from mesh.testing import spawn_nats_server

    for daemon, password in PASSWORDS.items():
        monkeypatch.setenv(password_variable(daemon), password)
    config = tmp_path / "mesh-daemons.conf"
    config.write_text(nats_config("mesh", sorted(PASSWORDS)))
    async with spawn_nats_server(args=["-c", str(config)]) as server:
        yield server


def creds(daemon: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "nats_user": f"daemon-{daemon}",
        "nats_password": PASSWORDS[daemon],
        "data_dir": tmp_path,
        "room_lease_ttl": 3.0,
    }


@asynccontextmanager
async def b_and_c(
    nats: Any, tmp_path: Path, delay: float = 0.0
) -> AsyncIterator[tuple[Member, Member, RawDaemon]]:
    """B runs alice and bob (each turn ``delay`` seconds), and room "tea" between them (it
    runs on B); C sees it all."""
    agents = [persona("alice", delay), persona("bob", delay)]
    async with (
        open_member(nats.url, "b", agents, **creds("b", tmp_path)) as b,
        open_member(nats.url, "c", [], **creds("c", tmp_path)) as c,
        open_raw_daemon(nats.url, "a", PASSWORDS["a"]) as raw,
    ):
        await wait_status(c.mesh.registry, "bob")
        yield b, c, raw


async def create_tea(b: Member, c: Member, turns: int, *, seen: int = 2) -> None:
    """Room "tea" on B, ``turns`` long, until C has seen ``seen`` turns."""
    assert b.rooms is not None and c.rooms is not None
    limits = Limits(max_turns=turns, max_messages_per_agent=turns)
    await b.rooms.create(RoomSpec(id="tea", topic="Tea?", members=("alice", "bob"), limits=limits))
    async with c.rooms.subscribe("tea", since=0) as events:
        with anyio.fail_after(SPREAD_TIMEOUT):
            async for event in events:
                if isinstance(event, MessageEvent) and event.turn == seen:
                    return


async def publish(raw: RawDaemon, subject: str, data: bytes, headers: dict[str, str]) -> None:
    """Store a message on a stream as daemon-a's user, and wait for the stream's ack."""
    js = raw.nc.jetstream()
    await raw.run(lambda: js.publish(subject, data, headers=headers))


async def test_an_entry_a_writes_claiming_bs_agent_is_not_applied_by_c(
    nats: Any, tmp_path: Path
) -> None:
    async with b_and_c(nats, tmp_path) as (_b, c, raw):
        bob = msgspec.structs.replace(c.cluster.sync.remote[AgentId("bob")], daemon="a")
        key, body = agent_key("a", "bob"), ENCODER.encode(bob)
        # A's user may write under A's keys only; what it writes there in B's name (or in
        # A's, without A's key) is refused by C.
        for value in (
            body,
            seal(DaemonKey.generate(), "a", NAMES.agents_bucket, key, body),
            seal(DaemonKey.generate(), "b", NAMES.agents_bucket, key, body),
        ):
            await publish(raw, f"$KV.{NAMES.agents_bucket}.{key}", value, {})
        # A's own agent, signed with A's key, written after them: once C has it, C has
        # read the forgeries.
        mine = DaemonKey.generate()
        await publish(raw, f"$KV.{NAMES.keys_bucket}.a", mine.public.encode(), {})
        zed = msgspec.structs.replace(bob, id="zed")
        zed_key = agent_key("a", "zed")
        sealed = seal(mine, "a", NAMES.agents_bucket, zed_key, ENCODER.encode(zed))
        await publish(raw, f"$KV.{NAMES.agents_bucket}.{zed_key}", sealed, {})
        await wait_status(c.mesh.registry, "zed")
        assert c.cluster.holder("bob") == "b"
        assert c.cluster.sync.remote[AgentId("bob")].daemon == "b"


async def test_a_room_event_or_tombstone_a_forges_in_bs_room_is_not_shown_nor_applied(
    nats: Any, tmp_path: Path
) -> None:
    async with b_and_c(nats, tmp_path) as (b, c, raw):
        await create_tea(b, c, turns=2)
        assert c.rooms is not None and c.cluster.rooms is not None
        await c.cluster.rooms.wait_absorbed()
        before = await c.rooms.transcript("tea")
        subject = NAMES.room_subject("tea")
        last = await c.cluster.link.last_message(NAMES.rooms_stream, subject)
        assert last is not None
        genuine = decode_event(last.data)
        forged = MessageEvent(
            room_id=RoomId("tea"), seq=genuine.seq + 1, turn=3, agent_id="bob", text="A as bob"
        )
        headers = {k: v for k, v in last.headers.items() if k.startswith("Mesh-")}
        await publish(raw, subject, encode_event(forged), headers)  # b's signature, other data
        await publish(raw, subject, b"", {**headers, "Mesh-Room-Deleted": "tea"})
        await publish(raw, subject, b"", {"Mesh-Daemon": "b", "Mesh-Room-Deleted": "tea"})
        await c.cluster.rooms.wait_absorbed()  # C has read all three
        assert await c.rooms.transcript("tea") == before
        assert (await c.rooms.get("tea")).id == "tea"  # not deleted
        assert b.rooms is not None
        assert (await b.rooms.get("tea")).id == "tea"


class LeaseChanges:
    """The values of room "tea"'s lease key, as C's link watches them, in order."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self._news = anyio.Event()

    def on_change(self, change: KvChange | None) -> None:
        if change is not None and change.key == "tea":
            self.values.append(change.value)
            self._news.set()
            self._news = anyio.Event()

    async def wait_for(self, found: Callable[[bytes | None], bool], after: int = 0) -> int:
        """The index of the first value past ``after`` that ``found`` accepts."""
        with anyio.fail_after(SPREAD_TIMEOUT):
            while True:
                for index in range(after, len(self.values)):
                    if found(self.values[index]):
                        return index
                await self._news.wait()


async def test_a_lease_a_forges_in_bs_name_is_not_honoured(nats: Any, tmp_path: Path) -> None:
    """A writes B's room's lease in B's name (unsigned, signed with A's key, and signed with
    A's key as if B's), for an hour: it is nobody's lease. B goes on running the room and
    puts its own lease back; C does not take the room over."""
    async with b_and_c(nats, tmp_path, delay=0.1) as (b, c, raw):
        assert b.rooms is not None and c.rooms is not None
        assert b.cluster.rooms is not None and c.cluster.rooms is not None
        # long enough that it still runs when the test is done, however loaded the machine
        await create_tea(b, c, turns=400)
        mine = DaemonKey.generate()  # A's key, which the mesh knows
        await publish(raw, f"$KV.{NAMES.keys_bucket}.a", mine.public.encode(), {})
        bucket, until = NAMES.leases_bucket, time.time() + 3600
        in_bs_name = ENCODER.encode(LeaseEntry(daemon="b", until=until))
        ring = c.cluster.keys.keys.ring

        def bs_lease(value: bytes | None) -> bool:
            opened = None if value is None else unseal(ring, bucket, "tea", value)
            return opened is not None and LEASE_ENTRY.decode(opened.body).daemon == "b"

        changes = LeaseChanges()
        watch = await c.cluster.link.watch(bucket, changes.on_change)
        try:
            await changes.wait_for(bs_lease)
            for forged in (
                in_bs_name,  # unsigned
                seal(mine, "a", bucket, "tea", in_bs_name),  # A's signature, B's name
                seal(mine, "b", bucket, "tea", in_bs_name),  # A's signature as B's
            ):
                await publish(raw, f"$KV.{bucket}.tea", forged, {})
                at = await changes.wait_for(partial(operator.eq, forged))
                # nobody's lease (B's renewal may replace it before a read of the bucket)
                assert await c.cluster.rooms._lease_of("tea", forged, 0.0) is None
                # the next value is B's own lease, put back (not another daemon's take-over)
                back = await changes.wait_for(partial(operator.ne, forged), after=at + 1)
                assert bs_lease(changes.values[back]), changes.values[back]
                # B still runs the room: a turn after its lease is back is recorded by B
                recorded = await c.cluster.link.last_message(
                    NAMES.rooms_stream, NAMES.room_subject("tea")
                )
                assert recorded is not None
                await wait_turn_after(c, decode_event(recorded.data).seq)
                last = await c.cluster.link.last_message(
                    NAMES.rooms_stream, NAMES.room_subject("tea")
                )
                assert last is not None
                assert last.headers["Mesh-Daemon"] == "b", last.headers
        finally:
            await watch.stop()
        assert b.cluster.rooms.holds("tea") and not c.cluster.rooms.holds("tea")
        assert await c.cluster.rooms.lease_holder("tea") == "b"
        events = await c.rooms.events("tea")
        assert not [e for e in events if isinstance(e, ResumedEvent)], "the room moved"
        assert (await b.rooms.get("tea")).status is RoomStatus.RUNNING


async def wait_turn_after(member: Member, seq: int) -> None:
    """Until ``member`` shows a turn of room "tea" recorded after event ``seq``."""
    assert member.rooms is not None
    async with member.rooms.subscribe("tea", since=seq) as events:
        with anyio.fail_after(SPREAD_TIMEOUT):
            async for event in events:
                if isinstance(event, MessageEvent) and event.seq > seq:
                    return


async def ask_as_a(raw: RawDaemon, keys: Keys, control: dict[str, Any], number: int) -> Any:
    """B's answer to a room control A signs as its own, on the link between A and B."""
    subject = NAMES.calls("b")
    request_id = f"forge-{number}"
    answers: list[Any] = []
    got = anyio.Event()

    def take(frame: Any) -> None:
        if isinstance(frame, Response) and frame.id == request_id:
            answers.append(frame)
            got.set()

    async def on_answer(msg: Any) -> None:
        for frame in link_frames(msg.data):
            raw.loop.to_mesh(take, frame)

    data = link_request("mesh/room-control", control, request_id)
    subscription = await raw.run(lambda: raw.nc.subscribe(NAMES.calls("a"), cb=on_answer))
    try:
        headers = keys.headers(subject, "", data)
        await raw.run(lambda: raw.nc.publish(subject, data, headers=headers))
        with anyio.fail_after(SPREAD_TIMEOUT):
            await got.wait()
    finally:
        await raw.run(subscription.unsubscribe)
    return answers[0].payload.result


async def test_a_speaks_for_no_seat_and_steers_no_room_of_bs_tokens(
    nats: Any, tmp_path: Path
) -> None:
    """With A's credentials and key, room control in B's room: no seat of B's client is
    A's to speak for, whatever A names it, and no room of B's client is A's to stop."""
    async with b_and_c(nats, tmp_path) as (b, c, raw):
        assert b.rooms is not None and c.rooms is not None
        keys = Keys("a", DaemonKey.generate())
        await publish(raw, f"$KV.{NAMES.keys_bucket}.a", keys.key.public.encode(), {})
        people = People(join="clients")
        spec = RoomSpec(
            id="tea",
            topic="Tea?",
            members=("alice", "bob"),
            limits=Limits(max_turns=400, turn_timeout=60),
            people=people,
        )
        created = await b.rooms.create(spec, owner="token:own", creator=EMBEDDER)
        assert created.room.owner == "token:own@b"  # B's token, named as the cluster names it
        pat = Principal.client("pat")
        await b.rooms.join("tea", "Pat", holder="token:pat", person=pat)
        say = {"room": "tea", "op": "say", "member": "pat", "text": "I am Pat", "person": pat}
        forged_admin = {"kind": "client", "name": "root", "admin": True}
        attempts: dict[str, dict[str, Any]] = {
            "the same token id at A is another token": {**say, "holder": "token:pat@a"},
            "a daemon speaks for its own tokens only": {**say, "holder": "token:pat@b"},
            "its owner's token belongs to another daemon": {
                "room": "tea",
                "op": "stop",
                "holder": "token:own@a",
                "person": forged_admin,
            },
            "no asker at all": {"room": "tea", "op": "stop"},
        }
        for number, (why, control) in enumerate(attempts.items()):
            answer = await ask_as_a(raw, keys, control, number)
            assert answer.get("kind") == "forbidden", (why, answer)
        assert (await c.rooms.get("tea")).status is RoomStatus.RUNNING
        transcript = await b.rooms.transcript("tea")
        assert all(message.agent_id != "pat" for message in transcript)
        # B's own client, through B, still speaks as Pat and stops the room it owns.
        said = await b.rooms.say("tea", "pat", "Pat here", holder="token:pat", person=pat)
        assert said["member"] == "pat"
        stopped = await b.rooms.stop("tea", by="token:own", person=Principal.client("own"))
        assert stopped.status is RoomStatus.STOPPED


async def test_a_live_piece_a_forges_in_bs_room_is_not_shown(nats: Any, tmp_path: Path) -> None:
    """A publishes pieces of the reply B's room is writing: on its own subject, signed with
    its own key (A does not hold the room) and as B's (a signature that is not B's); its
    user may not publish on B's subject at all. C's observer shows B's pieces only."""
    # Two seconds a turn, a piece every 0.4 s: what A forges is of the turn in flight.
    async with b_and_c(nats, tmp_path, delay=2.0) as (b, c, raw):
        assert c.rooms is not None
        await create_tea(b, c, turns=400, seen=1)
        keys = Keys("a", DaemonKey.generate())
        await publish(raw, f"$KV.{NAMES.keys_bucket}.a", keys.key.public.encode(), {})
        shown: list[DeltaEvent] = []
        with capture_logs() as logs, anyio.fail_after(SPREAD_TIMEOUT):
            async with c.rooms.subscribe_live("tea", since=0) as events:
                async for event in events:
                    if isinstance(event, DeltaEvent) and event.text:
                        break
                genuine = event
                assert isinstance(genuine, DeltaEvent)
                mine, bs = NAMES.room_live("a"), NAMES.room_live("b")
                for subject, signer in ((mine, "a"), (mine, "b"), (bs, "b")):
                    piece = msgspec.structs.replace(genuine, at=0, text=f"A as {signer}")
                    data = ENCODER.encode(LivePieces(pieces=(piece,)))
                    headers = {**keys.headers(subject, data), "Mesh-Daemon": signer}
                    await raw.run(partial(raw.nc.publish, subject, data, headers=headers))
                await raw.run(raw.nc.flush)
                await raw.refused("publish", bs)
                turn = genuine.turn
                async for event in events:  # until the turn after the next is done
                    if isinstance(event, DeltaEvent):
                        shown.append(event)
                    elif isinstance(event, MessageEvent) and event.turn > turn + 1:
                        break
        forged = [e for e in logs if e["event"] == "cluster.forged" and "live" in e["what"]]
        assert [e["claimed"] for e in forged] == ["a", "b"], logs
        assert [e for e in shown if e.text.startswith("A as")] == []
        assert any(e.text and e.turn == turn + 1 for e in shown), shown  # B's own are shown
