"""The registry through the KV bucket: what a member sees of the others, and of bad input."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import msgspec
import pytest

from mesh import AgentSpec, MeshOrchestrator, local_connector
from mesh._errors import ErrorCode
from mesh._tasks import open_task_group
from mesh.agents.echo import agent as echo_agent
from mesh.cluster import ClusterRegistry, ClusterSettings
from mesh.cluster._keys import DaemonKey, KeyRing
from mesh.cluster._link import KvChange, NatsMessage
from mesh.cluster._node import connect_nats, join_cluster
from mesh.cluster._sealed import SEAL_GROUP
from mesh.cluster._settings import agent_key
from mesh.protocol import Response
from mesh.testing import NatsServer, spawn_nats_server
from registry import AgentId, AgentRecord, AgentStatus
from tests.cluster._helpers import SPREAD_TIMEOUT, open_member, wait_status
from tests.cluster._raw import link_frames, link_request

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nats() -> NatsServer:  # type: ignore[misc]
    async with spawn_nats_server() as server:
        yield server


async def test_bad_entries_in_the_bucket_are_skipped_and_the_rest_mirrors(
    nats: NatsServer,
) -> None:
    async with open_member(nats.url, "a") as a, open_member(nats.url, "b") as b:
        link, bucket = a.cluster.link, "mesh-mesh-agents"
        await link.kv_put(bucket, "agent.x.garbage", b"{not json", ttl=30)
        negative = {"daemon": "x", "id": "neg", "name": "n", "status": "online"}
        negative["heartbeat_interval"] = -1  # type: ignore[assignment]
        await link.kv_put(bucket, "agent.x.neg", msgspec.json.encode(negative), ttl=30)
        a.mesh.registry.register(AgentRecord(id=AgentId("good"), name="good"), anyio.current_time())
        await wait_status(b.mesh.registry, "good")
        assert b.mesh.registry.get(AgentId("garbage")) is None
        assert b.mesh.registry.get(AgentId("neg")) is None
        assert b.cluster.holder("good") == "a"


async def test_a_call_that_does_not_decode_is_answered_with_the_reason(nats: NatsServer) -> None:
    echo = AgentSpec("echo", local_connector(echo_agent))
    async with open_member(nats.url, "a", [echo]) as a, open_member(nats.url, "b") as b:
        link = b.cluster.link
        answers: list[Response] = []
        got = anyio.Event()

        def on_answer(message: NatsMessage) -> None:
            for answer in link_frames(message.data):
                if isinstance(answer, Response):
                    answers.append(answer)
                    got.set()

        # b's frames to a go to a's call subject, a's answers to b's (read here too).
        await link.subscribe("mesh.mesh.call.b", on_answer)
        await a.cluster.keys.ensure("b")
        frame = link_request("mesh/call", {"agent": 7, "method": "ping"})
        subject, reply = "mesh.mesh.call.a", f"{link.new_inbox()}.a"
        headers = b.cluster.keys.keys.headers(subject, reply, frame)  # unsigned: dropped
        await link.publish(subject, frame, reply=reply, headers=headers)
        with anyio.fail_after(SPREAD_TIMEOUT):
            await got.wait()
        error = answers[0].payload.error
        assert error is not None and error.code == ErrorCode.INVALID_PARAMS, answers
        assert "invalid mesh/call from daemon 'b'" in error.message and "$.agent" in error.message


async def test_a_registration_and_a_deregistration_spread(nats: NatsServer) -> None:
    async with open_member(nats.url, "a") as a, open_member(nats.url, "b") as b:
        record = AgentRecord(id=AgentId("x"), name="X", capabilities=frozenset({"cap"}))
        a.mesh.registry.register(record, anyio.current_time())
        await wait_status(b.mesh.registry, "x")
        mirrored = b.mesh.registry.get(AgentId("x"))
        assert mirrored is not None and mirrored.capabilities == {"cap"}
        assert [r.id for r in b.mesh.registry.find("cap")] == ["x"]
        a.mesh.registry.mark_offline(AgentId("x"), anyio.current_time())
        await wait_status(b.mesh.registry, "x", AgentStatus.OFFLINE)
        a.mesh.registry.deregister(AgentId("x"), anyio.current_time())
        await wait_status(b.mesh.registry, "x", gone=True)


async def test_an_entry_written_while_its_daemon_leaves_is_withdrawn_too(
    nats: NatsServer,
) -> None:
    """A put still unanswered when the daemon leaves lands before the deletes, not after
    them: its agent would otherwise stay in every other daemon's registry until its TTL."""
    bucket, key = "mesh-mesh-agents", agent_key("b", AgentId("late"))
    gate, put_started, withdrawing = anyio.Event(), anyio.Event(), anyio.Event()
    async with open_member(nats.url, "c") as c, anyio.create_task_group() as tg:
        async with open_member(nats.url, "b") as b:
            link, sync = b.cluster.link, b.cluster.sync
            write, withdraw = link.kv_write_many, sync.withdraw

            async def slow_write(
                bucket: str, writes: Sequence[tuple[str, bytes | None, float]]
            ) -> list[str | None]:
                if any(k == key and v is not None for k, v, _ in writes):
                    put_started.set()  # the put goes out once the daemon has begun to leave
                    await gate.wait()
                with anyio.CancelScope(shield=True):  # and lands, whatever happens meanwhile
                    outcomes = await write(bucket, writes)
                return outcomes  # noqa: RET504 (after the block: a cancel scope may swallow)

            async def withdraw_now() -> None:
                withdrawing.set()
                await withdraw()

            async def open_gate() -> None:
                await withdrawing.wait()
                gate.set()

            link.kv_write_many = slow_write  # type: ignore[method-assign]
            sync.withdraw = withdraw_now  # type: ignore[method-assign]
            tg.start_soon(open_gate)
            late = AgentRecord(id=AgentId("late"), name="late")
            b.mesh.registry.register(late, anyio.current_time())
            with anyio.fail_after(SPREAD_TIMEOUT):
                await put_started.wait()
        assert gate.is_set()
        assert await c.cluster.link.kv_get(bucket, key) is None


class Mine(Exception):
    """The caller's own error, raised in the body of a public ``async with``."""


async def test_the_clusters_context_managers_raise_the_callers_error_as_itself(
    nats: NatsServer,
) -> None:
    # Each owns a task group; at the boundary a lone error is the caller's again.
    with anyio.fail_after(SPREAD_TIMEOUT), pytest.raises(Mine) as caught:
        async with spawn_nats_server():
            raise Mine("in spawn_nats_server")
    assert type(caught.value) is Mine
    with anyio.fail_after(SPREAD_TIMEOUT), pytest.raises(Mine) as caught:
        async with open_member(nats.url, "alpha"):
            raise Mine("in open_cluster")
    assert type(caught.value) is Mine


async def test_a_batch_of_writes_says_for_each_whether_it_was_stored(nats: NatsServer) -> None:
    """More writes than one flush carries, puts and deletes mixed; a bucket that does not
    exist refuses each write with the reason, and raises nothing."""
    async with open_member(nats.url, "a") as a:
        link, bucket = a.cluster.link, "mesh-mesh-agents"
        puts = [(f"agent.k{i}", b'"v%d"' % i, 30.0) for i in range(1200)]
        with anyio.fail_after(SPREAD_TIMEOUT):
            assert await link.kv_write_many(bucket, puts) == [None] * 1200
            deletes = [(f"agent.k{i}", None, 0.0) for i in range(0, 1200, 2)]
            assert await link.kv_write_many(bucket, deletes) == [None] * 600
            assert await link.kv_get(bucket, "agent.k0") is None
            stored = await link.kv_get(bucket, "agent.k1199")
            assert stored is not None and stored[0] == b'"v1199"'
            refused = await link.kv_write_many("no-such-bucket", puts[:3])
        assert all(reason is not None and "no JetStream stream" in reason for reason in refused)


async def test_a_watch_skips_its_own_values_by_their_first_bytes_but_not_their_deletes(
    nats: NatsServer,
) -> None:
    """What a daemon wrote itself comes back from its watch: skipped before it is decoded,
    but a delete of its own key (no value) is still a change."""
    async with open_member(nats.url, "a") as a:
        link, bucket = a.cluster.link, "mesh-mesh-agents"
        seen: list[tuple[str, bytes | None]] = []
        last = anyio.Event()

        def on_change(change: KvChange | None) -> None:
            if change is not None and change.key.startswith("skip."):
                seen.append((change.key, change.value))
                if change.key == "skip.last":
                    last.set()

        with pytest.raises(ValueError, match="non-empty"):
            await link.watch(bucket, on_change, skip=b"")
        watch = await link.watch(bucket, on_change, skip=b'{"own":')
        writes: list[tuple[str, bytes | None, float]] = [
            ("skip.mine", b'{"own":1}', 30.0),
            ("skip.theirs", b'{"other":1}', 30.0),
            ("skip.mine", None, 0.0),
            ("skip.last", b'{"own":2,"then":{"own":3}}', 30.0),
            ("skip.last", b'{"other":{"own":4}}', 30.0),
        ]
        try:
            with anyio.fail_after(SPREAD_TIMEOUT):
                assert await link.kv_write_many(bucket, writes) == [None] * len(writes)
                await last.wait()
        finally:
            await watch.stop()
    assert seen == [
        ("skip.theirs", b'{"other":1}'),
        ("skip.mine", None),
        ("skip.last", b'{"other":{"own":4}}'),
    ]


async def test_of_two_holders_of_one_id_the_others_use_the_earliest_registered(
    nats: NatsServer,
) -> None:
    twin = AgentRecord(id=AgentId("twin"), name="twin")
    async with (
        open_member(nats.url, "c") as c,
        open_member(nats.url, "b") as b,
        open_member(nats.url, "a") as a,
    ):
        b.mesh.registry.register(twin, anyio.current_time())  # b first
        await wait_status(c.mesh.registry, "twin")
        await wait_status(a.mesh.registry, "twin")
        a.mesh.registry.register(twin, anyio.current_time())
        # a's entries reach c in the order a wrote them: once "after" is there, so is "twin".
        a.mesh.registry.register(AgentRecord(id=AgentId("after"), name="x"), anyio.current_time())
        await wait_status(c.mesh.registry, "after")
        assert c.cluster.holder("twin") == "b"  # not whichever wrote last: b stays
        assert a.cluster.holder("twin") == "a"  # a calls its own
        b.mesh.registry.deregister(AgentId("twin"), anyio.current_time())
        with anyio.fail_after(SPREAD_TIMEOUT):
            async with c.mesh.registry.subscribe() as changes:
                if c.cluster.holder("twin") != "a":
                    async for _ in changes:
                        if c.cluster.holder("twin") == "a":
                            break


async def test_an_entry_that_comes_before_its_writers_key_is_checked_once_the_key_is_read(
    nats: NatsServer,
) -> None:
    """A new daemon's entry may reach a member before the keys bucket's watch brings the
    daemon's key: the member reads the key then, and applies the entry (not only its next
    renewal, which may be a heartbeat interval away)."""
    async with open_member(nats.url, "c") as c:
        # C's watch of the keys bucket lags (here: for ever); only a direct read finds D's.
        watch = c.cluster.keys._watch
        assert watch is not None
        await watch.stop()
        slow = AgentSpec("slow", local_connector(echo_agent), heartbeat_interval=3600.0)
        async with open_member(nats.url, "d", [slow]):
            await wait_status(c.mesh.registry, "slow")
            assert c.cluster.holder("slow") == "d"
            assert "d" in c.cluster.keys.keys.ring


async def test_a_daemons_key_is_written_before_its_first_entry(nats: NatsServer) -> None:
    """Another daemon drops an entry whose writer's key it cannot read yet as forged:
    a joining daemon writes its key first, then its agents' entries, even for an agent
    whose heartbeats come while it is still joining."""
    written: list[str] = []
    async with open_member(nats.url, "a") as a:  # the buckets exist: b's writes land at once
        link = a.cluster.link
        await link.subscribe("$KV.mesh-mesh-keys.b", lambda _: written.append("key"))
        await link.subscribe(
            f"$KV.mesh-mesh-agents.{agent_key('b', 'beating')}", lambda _: written.append("entry")
        )
        settings = ClusterSettings(nats=nats.url, daemon_id="b")
        async with MeshOrchestrator([], registry=ClusterRegistry()) as b:
            b.registry.register(AgentRecord(id=AgentId("beating"), name="b"), anyio.current_time())
            joined = anyio.Event()

            async def beat() -> None:
                while not joined.is_set():
                    b.registry.heartbeat(AgentId("beating"), anyio.current_time())
                    await anyio.lowlevel.checkpoint()  # a beat between every step of the join

            async with open_task_group() as tg, connect_nats(settings) as b_link:
                tg.start_soon(beat)
                async with join_cluster(b, b_link):
                    joined.set()
                    await wait_status(a.mesh.registry, "beating")
    assert written[:2] == ["key", "entry"]


async def test_a_burst_of_registrations_is_signed_and_checked_once_per_group(
    nats: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Ed25519 signature costs more than the rest of an entry's way: agents written
    together share one per group, and the mirror checks each group's once."""
    signed: list[str] = []
    checked: list[str] = []
    sign, verify = DaemonKey.sign, KeyRing.verify

    def counted_sign(self: DaemonKey, data: bytes) -> str:
        signed.append(self.public)
        return sign(self, data)

    def counted_verify(self: KeyRing, daemon: str, data: bytes, signature: str | None) -> bool:
        checked.append(daemon)
        return verify(self, daemon, data, signature)

    async with open_member(nats.url, "a") as a, open_member(nats.url, "b") as b:
        monkeypatch.setattr(DaemonKey, "sign", counted_sign)
        monkeypatch.setattr(KeyRing, "verify", counted_verify)
        n, now = 2 * SEAL_GROUP + 2, anyio.current_time()
        for i in range(n):
            a.mesh.registry.register(AgentRecord(id=AgentId(f"x{i}"), name="x"), now)
        await wait_status(b.mesh.registry, f"x{n - 1}")  # the bucket keeps the order
        assert all(AgentId(f"x{i}") in b.mesh.registry for i in range(n))
        assert all(b.cluster.holder(f"x{i}") == "a" for i in range(n))
        # Three groups, and the daemons' own entries renewed meanwhile (one each a while).
        assert signed.count(a.cluster.keys.keys.key.public) <= 3 + 2
        assert checked.count("a") <= 3 + 2
