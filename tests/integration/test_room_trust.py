"""Rooms under their owner's rules: who may join, what a guest's words can do, whose a seat is,
and how long one token can hold room slots. A real ``mesh serve`` with scripted personas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.rooms import (
    DeltaEvent,
    ErrorEvent,
    MessageEvent,
    ResumedEvent,
    StoppedEvent,
    decode_event,
    decode_live_event,
)
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)

from ._daemon import LONG_LIMITS, persona_manifest
from .test_daemon_auth import create_token

pytestmark = pytest.mark.anyio

#: Never the goodbye word, never the same twice (no exit rule of theirs fires on its own).
SCRIPT = ["Reply {turn}, after {speaker}."]
GUARD = 60.0
BYE = "Goodbye."


def _manifests(tmp_path: Path, delay: float) -> Path:
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    persona_manifest(manifests, "alice", "Alice", SCRIPT, delay)
    persona_manifest(manifests, "bob", "Bob", SCRIPT, delay)
    return manifests


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Alice and Bob at half a second a turn, for the tests that make tokens and rooms of
    their own names and stop their rooms: a daemon and its two persona processes are most
    of what each of them would cost. A restart, settings of its own or a count of every
    room keeps a daemon of its own."""
    async with spawn_daemon(_manifests(tmp_path_factory.mktemp("trust"), 0.5)) as shared:
        await shared.wait_online("alice", "bob")
        yield shared


@pytest.fixture(scope="module")
async def shares_daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Quick agents under a share of two rooms a token, for the tests of that share: each
    makes tokens of its own names, reads only its own rooms and stops them."""
    directory = tmp_path_factory.mktemp("trust-shares")
    settings = directory / "settings.toml"
    # Long enough for the hog's third room to be refused while its two still wait for
    # Carol on a loaded machine (at 1 s they sometimes gave up first, freeing a slot).
    settings.write_text("max_rooms_per_identity = 2\nmax_person_wait = 15.0\n")
    args = ["--config", str(settings), "--data-dir", str(directory / "data")]
    async with spawn_daemon(_manifests(directory, 0.0), extra_args=args) as shared:
        await shared.wait_online("alice", "bob")
        yield shared


async def _create(daemon: Daemon, token: str, room_id: str, **spec: Any) -> dict[str, Any]:
    body = {"id": room_id, "topic": "Tea or coffee?", "members": ["alice", "bob"], **spec}
    async with daemon.client(token=token) as http:
        created = await http.post("/rooms", json=body)
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


async def _goodbye_in_turn(daemon: Daemon, http: httpx.AsyncClient) -> MessageEvent:
    """Gwen says "Goodbye." when her turn comes; the first agent's message after it."""
    said_at: int | None = None
    with anyio.fail_after(GUARD):
        async with daemon.open_events("/rooms/open/events?deltas=1") as events:
            while True:
                event = decode_live_event(await events.receive())
                assert not isinstance(event, StoppedEvent), event
                if isinstance(event, DeltaEvent) and event.agent_id == "gwen" and said_at is None:
                    said = await http.post("/rooms/open/say", json={"member": "gwen", "text": BYE})
                    assert said.status_code == 200, said.text  # the answer to her turn
                    said_at = said.json()["turn"]
                elif (
                    isinstance(event, MessageEvent)
                    and said_at is not None
                    and event.agent_id in ("alice", "bob")
                    and event.turn > said_at
                ):
                    return event


async def test_the_owner_chooses_who_joins_and_a_guests_goodbye_ends_nothing(
    daemon: Daemon,
) -> None:
    owner = await create_token(daemon, "client", "owner")
    guest = await create_token(daemon, "client", "guest")
    await _create(daemon, owner, "closed", limits=LONG_LIMITS)
    await _create(daemon, owner, "open", limits=LONG_LIMITS, people={"join": ["guest"]})
    async with daemon.client(token=guest) as http:
        closed = await http.post("/rooms/closed/join", json={"name": "Gwen"})
        assert closed.status_code == 403, closed.text
        assert "people.join" in closed.json()["error"]["message"]
        joined = await http.post("/rooms/open/join", json={"name": "Gwen"})
        assert joined.status_code == 200, joined.text
        await _goodbye_in_turn(daemon, http)  # and the room went on
    async with daemon.client(token=owner) as http:
        assert (await http.post("/rooms/open/pause")).status_code == 200
        resumed = await http.post("/rooms/open/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["status"] == "running"
        for room in ("open", "closed"):
            await http.post(f"/rooms/{room}/stop")


async def _people_answers(
    daemon: Daemon, token: str, name: str, member: str = "carol"
) -> tuple[int, int, int]:
    """What ``token`` gets for joining as ``name``, then saying and leaving as ``member``."""
    async with daemon.client(token=token) as http:
        joined = await http.post("/rooms/seats/join", json={"name": name})
        said = await http.post("/rooms/seats/say", json={"member": member, "text": "It's me."})
        left = await http.post("/rooms/seats/leave", json={"member": member})
    return joined.status_code, said.status_code, left.status_code


async def test_a_seat_stays_its_holders_after_leaving_and_a_restart(tmp_path: Path) -> None:
    manifests, data = _manifests(tmp_path, 0.5), tmp_path / "data"
    args = ["--data-dir", str(data)]
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        owner = await create_token(daemon, "client", "owner")
        carol = await create_token(daemon, "client", "carol")
        mallory = await create_token(daemon, "client", "mallory")
        spec = {"max_turns": 400, "max_messages_per_agent": 200}
        await _create(daemon, owner, "seats", limits=spec, people={"join": "clients"})
        async with daemon.client(token=carol) as http:
            assert (await http.post("/rooms/seats/join", json={"name": "Carol"})).status_code == 200
            assert (
                await http.post("/rooms/seats/leave", json={"member": "carol"})
            ).status_code == 204
        # Carol is away: her seat is still hers.
        assert await _people_answers(daemon, mallory, "Carol") == (403, 403, 403)
        async with daemon.client(token=mallory) as http:
            alike = await http.post("/rooms/seats/join", json={"name": "C\u0430rol"})  # Cyrillic a
            assert alike.status_code == 409, alike.text
            assert "looks like 'Carol'" in alike.json()["error"]["message"]
            wide = await http.post("/rooms/seats/join", json={"name": "\uff23arol"})  # fullwidth C
            assert wide.status_code == 409, wide.text
            own = await http.post("/rooms/seats/join", json={"name": "Mallory"})
            assert own.status_code == 200, own.text
    async with spawn_daemon(manifests, extra_args=args) as daemon:  # the same data dir
        await daemon.wait_online("alice", "bob")
        assert await _people_answers(daemon, mallory, "Carol") == (403, 403, 403)
        async with daemon.client(token=carol) as http:
            back = await http.post("/rooms/seats/join", json={"name": "Carol"})
            assert back.status_code == 200, back.text
        async with daemon.client() as admin:
            events = (await admin.get("/rooms/seats/events")).json()["events"]
            carols = [e for e in events if e["type"] == "AGENT_JOINED" and e["agent_id"] == "carol"]
            assert carols and all(e["by"] == "carol" for e in carols), carols
            await admin.post("/rooms/seats/stop")


async def _joined_events(daemon: Daemon, room_id: str, member: str) -> list[dict[str, Any]]:
    async with daemon.client() as admin:
        events = (await admin.get(f"/rooms/{room_id}/events")).json()["events"]
    return [e for e in events if e["type"] == "AGENT_JOINED" and e["agent_id"] == member]


async def test_an_admins_seat_is_held_like_any_and_admins_still_act_for_anyone(
    daemon: Daemon,
) -> None:
    owner = await create_token(daemon, "client", "seats-owner")
    guest = await create_token(daemon, "client", "seats-guest")
    spec = {"max_turns": 400, "max_messages_per_agent": 200}
    await _create(daemon, owner, "seats", limits=spec, people={"join": "clients"})
    async with daemon.client() as admin:  # the operator, signed in with the admin token
        me = (await admin.get("/whoami")).json()
        joined = await admin.post("/rooms/seats/join", json={"name": "Ada"})
        assert joined.status_code == 200, joined.text
    async with daemon.client(token=guest) as http:
        said = await http.post("/rooms/seats/say", json={"member": "ada", "text": "I'm Ada."})
        assert said.status_code == 403, said.text  # while she is here
        assert "held by another token" in said.json()["error"]["message"]
        taken = await http.post("/rooms/seats/join", json={"name": "Ada"})
        assert taken.status_code == 403, taken.text
        assert (await http.post("/rooms/seats/join", json={"name": "Gwen"})).status_code == 200
    async with daemon.client() as admin:
        assert (await admin.post("/rooms/seats/leave", json={"member": "ada"})).status_code == 204
        # An admin may still act for any seat: the guest's, here.
        for_gwen = await admin.post("/rooms/seats/say", json={"member": "gwen", "text": "Hi."})
        assert for_gwen.status_code in (200, 202), for_gwen.text
    # Ada is away: her seat is still hers.
    assert await _people_answers(daemon, guest, "Ada", "ada") == (403, 403, 403)
    adas = await _joined_events(daemon, "seats", "ada")
    assert adas and all(e["holder"] == f"token:{me['id']}" for e in adas), adas
    assert all(e["by"] == me["name"] for e in adas), adas
    async with daemon.client() as admin:
        back = await admin.post("/rooms/seats/join", json={"name": "Ada"})
        assert back.status_code == 200, back.text
        await admin.post("/rooms/seats/stop")


async def test_names_that_pass_for_a_members_are_refused_by_their_unicode_skeleton(
    daemon: Daemon,
) -> None:
    owner = await create_token(daemon, "client", "names-owner")
    await _create(daemon, owner, "names", limits=LONG_LIMITS)
    async with daemon.client(token=owner) as http:
        assert (await http.post("/rooms/names/join", json={"name": "Carol"})).status_code == 200
        # Cherokee tli, a small capital c, a Cyrillic ghe
        for alike in ("\u13dfarol", "\u1d04arol", "Ca\u0433ol"):
            refused = await http.post("/rooms/names/join", json={"name": alike})
            assert refused.status_code == 409, (alike, refused.text)
            assert "looks like 'Carol'" in refused.json()["error"]["message"]
        await http.post("/rooms/names/stop")


async def test_one_token_holds_only_its_share_of_rooms_and_absent_people_free_theirs(
    shares_daemon: Daemon,
) -> None:
    daemon = shares_daemon
    hog = await create_token(daemon, "client", "hog")
    other = await create_token(daemon, "client", "other")
    # A room where a person is to speak after one message from each agent: nobody comes.
    people = {"people": {"join": "clients"}, "limits": {"max_messages_per_agent": 1}}
    carol = {"id": "carol", "name": "Carol", "kind": "human"}
    waiting = {**people, "members": ["alice", "bob", carol]}
    await _create(daemon, hog, "wait-1", **waiting)
    await _create(daemon, hog, "wait-2", **waiting)
    async with daemon.client(token=hog) as http:
        third = await http.post(
            "/rooms", json={"topic": "t", "members": ["alice", "bob"], "id": "wait-3"}
        )
        assert third.status_code == 429, third.text
        assert third.json()["error"]["limit"] == "max_rooms_per_identity"
    await _create(daemon, other, "others")  # the hog's share is not everyone's
    async with daemon.client(token=other) as http:
        await http.post("/rooms/others/stop")
    # Carol never comes: each room stops, resumably, naming her, and frees its slot.
    for room_id in ("wait-1", "wait-2"):
        with anyio.fail_after(GUARD):
            async with daemon.open_events(f"/rooms/{room_id}/events") as events:
                while not isinstance(stopped := decode_event(await events.receive()), StoppedEvent):
                    pass
        assert stopped.reason == "AGENT_LOST", stopped
        assert "Carol" in stopped.detail, stopped.detail
    async with daemon.client(token=hog) as http:
        again = await http.post("/rooms", json={"topic": "t", "members": ["alice", "bob"]})
        assert again.status_code == 201, again.text
        await http.post(f"/rooms/{again.json()['room']['id']}/stop")
        resumed = await http.post("/rooms/wait-1/resume")  # resumable, and it has a slot
        assert resumed.status_code == 200, resumed.text
        await http.post("/rooms/wait-1/stop")


async def test_clients_filling_their_shares_leave_room_slots_for_a_newcomer_and_an_admin(
    tmp_path: Path,
) -> None:
    # Per-token shares alone add up to more than the pool (4 clients x 8 = 32 rooms by
    # default): here 4 clients x 2 > 7.
    settings = tmp_path / "settings.toml"
    bounds = ["max_active_rooms = 7", "max_rooms_per_identity = 2"]
    settings.write_text("\n".join([*bounds, "newcomer_rooms = 3", "admin_rooms = 1", ""]))
    args = ["--config", str(settings), "--data-dir", str(tmp_path / "data")]
    # Slow agents: the rooms stay running (waiting for a turn) until the test stops them.
    async with spawn_daemon(_manifests(tmp_path, 60.0), extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        clients = [await create_token(daemon, "client", f"c{n}") for n in range(6)]
        spec = {"topic": "t", "members": ["alice", "bob"]}

        async def start(token: str | None) -> httpx.Response:
            async with daemon.client(token=token) as http:
                return await http.post("/rooms", json=spec)

        refusals: list[str] = []
        for token in clients[:4]:  # each takes all it may
            for _ in range(2):
                answer = await start(token)
                if answer.status_code != 201:
                    assert answer.status_code == 429, answer.text
                    refusals.append(answer.json()["error"]["limit"])
        # The first two take their shares; the last 3 slots were kept for tokens with none.
        assert refusals == ["newcomer_rooms", "newcomer_rooms"], refusals
        fifth = await start(clients[4])
        assert fifth.status_code == 201, fifth.text
        admin = await start(None)  # past max_active_rooms: the admins' own slot
        assert admin.status_code == 201, admin.text
        # Now the pool is really full, for a newcomer and for an admin, each told why.
        full: list[tuple[str | None, str]] = [
            (clients[5], "max_active_rooms"),
            (None, "admin_rooms"),
        ]
        for who, limit in full:
            refused = await start(who)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["limit"] == limit
            assert f"{limit} = " in refused.json()["error"]["message"]
        async with daemon.client() as http:
            for room in (await http.get("/rooms")).json()["rooms"]:
                await http.post(f"/rooms/{room['room']['id']}/stop")


async def test_rooms_asked_for_at_once_take_no_more_slots_than_there_are(
    shares_daemon: Daemon,
) -> None:
    # Each room is checked against the limit, then its members are introduced, and only
    # then does it count: asked for all at once, each used to find every slot free.
    daemon = shares_daemon
    burst = await create_token(daemon, "client", "burst")
    statuses: list[int] = []
    async with daemon.client(token=burst) as http:

        async def create(n: int) -> None:
            body = {"id": f"at-once-{n}", "topic": "t", "members": ["alice", "bob"]}
            statuses.append((await http.post("/rooms", json=body)).status_code)

        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(create, n)
        assert sorted(statuses) == [201, 201, *[429] * 6], statuses
        listed = (await http.get("/rooms")).json()["rooms"]
        mine = [r for r in listed if r["room"]["id"].startswith("at-once-")]
        running = [r for r in mine if r["status"] == "running"]
        assert len(running) == 2, listed
        for room in running:
            await http.post(f"/rooms/{room['room']['id']}/stop")


async def test_a_resumed_room_still_calls_for_its_creator(tmp_path: Path) -> None:
    manifests, data = _manifests(tmp_path, 0.5), tmp_path / "data"
    args = ["--data-dir", str(data)]
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        dev = await create_token(daemon, "client", "dev")
        await _create(daemon, dev, "kept", limits=LONG_LIMITS)
    # While the daemon is down, the operator closes bob to everyone but the token ops.
    with (manifests / "bob.toml").open("a") as bob:
        bob.write('\n[access]\ncallers = ["client:ops"]\n')
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        resumed = False  # bob's messages from before the restart are replayed first
        with anyio.fail_after(GUARD):
            async with daemon.open_events("/rooms/kept/events") as events:
                while True:
                    event = decode_event(await events.receive())
                    resumed = resumed or isinstance(event, ResumedEvent)
                    if isinstance(event, ErrorEvent) and event.agent_id == "bob":
                        break
                    spoke = isinstance(event, MessageEvent) and event.agent_id == "bob"
                    assert not (resumed and spoke), f"bob answered the resumed room: {event}"
        assert "does not accept calls from client token 'dev'" in event.message, event
        async with daemon.client() as admin:
            await admin.post("/rooms/kept/stop")
