"""Calls across members of a cluster, in one process: deadline, progress, cancel, broadcast."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    AgentUnavailable,
    CallTimeout,
    RequestContext,
    ToolError,
    local_connector,
)
from mesh.agents.echo import agent as echo_agent
from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster._helpers import SPREAD_TIMEOUT, open_member, wait_status

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nats() -> NatsServer:  # type: ignore[misc]
    async with spawn_nats_server() as server:
        yield server


def echo(agent_id: str, **fields: Any) -> AgentSpec:
    return AgentSpec(
        agent_id, local_connector(echo_agent), capabilities=frozenset({"echo"}), **fields
    )


async def test_an_agent_on_one_member_is_called_from_another(nats: NatsServer) -> None:
    async with open_member(nats.url, "a", [echo("echo")]) as a, open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "echo")
        record = b.mesh.registry.get("echo")  # type: ignore[arg-type]
        assert record is not None and record.metadata["mesh.daemon"] == "a"
        assert await b.mesh.call_tool("echo", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER) == {
            "message": "hi"
        }
        assert await b.mesh.call_tool(
            "echo", "reverse", {"text": "abc"}, on_behalf_of=EMBEDDER
        ) == {"text": "cba"}
        assert b.cluster.holder("echo") == "a" and a.cluster.holder("echo") == "a"
        assert a.cluster.calls.calls_served == 2
        with pytest.raises(ToolError) as failed:
            await b.mesh.call_tool("echo", "fail", {"message": "on purpose"}, on_behalf_of=EMBEDDER)
        assert "on purpose" in str(failed.value) and "via daemon 'a'" in str(failed.value)
        with pytest.raises(AgentUnavailable, match="no agent 'nobody'"):
            await b.mesh.call("nobody", "ping", on_behalf_of=EMBEDDER)


async def test_the_deadline_progress_and_cancel_cross_daemons(nats: NatsServer) -> None:
    cancelled = anyio.Event()
    blocker = Agent("blocker")

    @blocker.tool
    async def hold(seconds: float) -> dict[str, float]:
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return {"held": seconds}

    specs = [echo("echo"), AgentSpec("blocker", local_connector(blocker))]
    async with open_member(nats.url, "a", specs), open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "blocker")
        await wait_status(b.mesh.registry, "echo")
        # progress crosses, and pushes the wait out past timeout + margin (1.6 s) on both sides
        progress: list[Mapping[str, Any]] = []
        slept = await b.mesh.call_tool(
            "echo",
            "sleep",
            {"seconds": 2.0, "progress_every": 0.2},
            timeout=0.6,
            on_progress=progress.append,
            on_behalf_of=EMBEDDER,
        )
        assert slept == {"slept": 2.0} and len(progress) >= 8
        # the deadline is the holder's verdict, naming the agent; the agent is told to stop
        with pytest.raises(CallTimeout) as timed_out:
            await b.mesh.call_tool(
                "blocker", "hold", {"seconds": 30}, timeout=0.3, on_behalf_of=EMBEDDER
            )
        assert "blocker" in str(timed_out.value)
        with anyio.fail_after(SPREAD_TIMEOUT):
            await cancelled.wait()


async def test_an_artifact_streamed_in_pieces_crosses_daemons_as_pieces(nats: NatsServer) -> None:
    scribe = Agent("scribe")

    @scribe.tool
    async def write(lines: list[str], ctx: RequestContext) -> None:
        for i, line in enumerate(lines):
            ctx.report_artifact("story", line, last=i == len(lines) - 1)
        ctx.report_artifact("stats", {"lines": len(lines)}, last=True)

    async with (
        open_member(nats.url, "a", [AgentSpec("scribe", local_connector(scribe))]),
        open_member(nats.url, "b") as b,
    ):
        await wait_status(b.mesh.registry, "scribe")
        reports: list[Mapping[str, Any]] = []
        await b.mesh.call_tool(
            "scribe",
            "write",
            {"lines": ["Once", "upon"]},
            on_progress=reports.append,
            on_behalf_of=EMBEDDER,
        )
    assert [r.get("artifact") for r in reports] == [
        {"name": "story", "last": False, "text": "Once"},
        {"name": "story", "last": True, "text": "upon"},
        {"name": "stats", "last": True, "data": {"lines": 2}},
    ]


async def test_a_caller_that_gives_up_cancels_the_remote_call(nats: NatsServer) -> None:
    cancelled = anyio.Event()
    started = anyio.Event()
    blocker = Agent("blocker")

    @blocker.tool
    async def hold(seconds: float) -> dict[str, float]:
        started.set()
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return {"held": seconds}

    async with (
        open_member(nats.url, "a", [AgentSpec("blocker", local_connector(blocker))]),
        open_member(nats.url, "b") as b,
    ):
        await wait_status(b.mesh.registry, "blocker")
        with anyio.fail_after(SPREAD_TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.mesh.as_embedder().call_tool, "blocker", "hold", {"seconds": 30})
                await started.wait()
                tg.cancel_scope.cancel()
            await cancelled.wait()


async def test_agents_call_agents_across_daemons_and_broadcast_reaches_all(
    nats: NatsServer,
) -> None:
    async with (
        open_member(nats.url, "a", [echo("relay"), echo("a1"), echo("a2")]) as a,
        open_member(nats.url, "b", [echo("b1"), echo("b2")]),
        open_member(nats.url, "c", [echo("c1")]) as c,
    ):
        for agent_id in ("relay", "a1", "a2", "b1", "b2"):
            await wait_status(c.mesh.registry, agent_id)
        await wait_status(a.mesh.registry, "c1")
        # relay (on a) asks the mesh to call c1 (on c): agent to agent, across daemons
        relayed = await a.mesh.call_tool(
            "relay", "relay", {"to": "c1", "message": "hop"}, on_behalf_of=EMBEDDER
        )
        assert relayed == {"from": "c1", "message": "hop"}
        outcomes = await c.mesh.broadcast(
            "tools/call",
            {"name": "echo", "arguments": {"message": "all"}},
            capability="echo",
            on_behalf_of=EMBEDDER,
        )
        assert sorted(outcomes) == ["a1", "a2", "b1", "b2", "c1", "relay"]
        assert all(o.result == {"message": "all"} for o in outcomes.values())


async def test_a_member_that_leaves_takes_its_agents_with_it(nats: NatsServer) -> None:
    async with open_member(nats.url, "c") as c:
        async with open_member(nats.url, "b", [echo("b1")]):
            await wait_status(c.mesh.registry, "b1")
        await wait_status(c.mesh.registry, "b1", gone=True)  # withdrawn, not left to expire
        with pytest.raises(AgentUnavailable):
            await c.mesh.call("b1", "ping", on_behalf_of=EMBEDDER)


async def test_an_agent_its_holder_sees_go_offline_is_offline_everywhere(
    nats: NatsServer,
) -> None:
    from mesh.testing import KillableConnector
    from registry import AgentStatus

    connector = KillableConnector(echo_agent)
    spec = AgentSpec("fragile", connector, heartbeat_interval=5.0)
    async with open_member(nats.url, "a", [spec]), open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "fragile")
        connector.kill()  # the link drops: a marks it offline at once, and says so
        await wait_status(b.mesh.registry, "fragile", AgentStatus.OFFLINE)
        with pytest.raises(AgentUnavailable, match="'fragile' \\(held by daemon 'a'\\) is offline"):
            await b.mesh.call("fragile", "ping", on_behalf_of=EMBEDDER)


async def test_access_sections_hold_across_daemons(nats: NatsServer) -> None:
    from mesh import Forbidden
    from mesh.manifests import AccessSection

    guarded = AccessSection(callers=("agent:relay",), calls=())
    specs_a = [echo("guarded", access=guarded)]
    specs_b = [echo("relay"), echo("other")]
    async with open_member(nats.url, "a", specs_a), open_member(nats.url, "b", specs_b) as b:
        await wait_status(b.mesh.registry, "guarded")
        assert b.mesh.access_of("guarded") == guarded  # as its holder published it
        allowed = await b.mesh.call_tool(
            "relay", "relay", {"to": "guarded", "message": "ok"}, on_behalf_of=EMBEDDER
        )
        assert allowed == {"from": "guarded", "message": "ok"}
        with pytest.raises(Forbidden, match="does not accept calls from agent 'other'"):
            await b.mesh.call_tool(
                "other", "relay", {"to": "guarded", "message": "no"}, on_behalf_of=EMBEDDER
            )


async def test_a_call_in_flight_ends_when_its_agent_goes_offline(nats: NatsServer) -> None:
    from registry import AgentId

    started = anyio.Event()
    blocker = Agent("blocker")

    @blocker.tool
    async def hold(seconds: float) -> dict[str, float]:
        started.set()
        await anyio.sleep(seconds)
        return {"held": seconds}

    spec = AgentSpec("blocker", local_connector(blocker))
    async with open_member(nats.url, "a", [spec]) as a, open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "blocker")
        with anyio.fail_after(SPREAD_TIMEOUT):
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    with pytest.raises(AgentUnavailable, match=r"'blocker'.*offline"):
                        await b.mesh.call_tool(
                            "blocker", "hold", {"seconds": 60}, timeout=60, on_behalf_of=EMBEDDER
                        )

                tg.start_soon(call)
                await started.wait()
                a.mesh.registry.mark_offline(AgentId("blocker"), anyio.current_time())


async def test_the_holder_checks_who_a_call_is_made_for_at_its_own_door(nats: NatsServer) -> None:
    from mesh import Forbidden, Principal
    from mesh.manifests import AccessSection

    vault = AccessSection(callers=("client:ops",))
    member_a = open_member(nats.url, "a", [echo("vault", access=vault)])
    async with member_a as a, open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "vault")
        with pytest.raises(Forbidden, match="does not accept calls from client token 'dev'"):
            await b.mesh.call_tool("vault", "echo", {"message": "no"}, on_behalf_of=dev())
        served = a.cluster.calls.calls_served
        assert served == 0  # b's own door refused it: nothing went to a
        # Past b's door (a daemon that skipped it): a checks the identity the call carries.
        call = {"name": "echo", "arguments": {"message": "x"}}
        sent = b.cluster.calls.call
        with pytest.raises(Forbidden, match="does not accept calls from client token 'dev'"):
            await sent("a", "vault", "tools/call", call, timeout=10, caller=dev())
        assert a.cluster.calls.calls_served == served + 1
        ops = Principal.client("ops")
        assert await sent("a", "vault", "tools/call", call, timeout=10, caller=ops) == {
            "message": "x"
        }
        turn = Principal.client("ops").in_room("r")
        with pytest.raises(Forbidden, match="reserved to the daemon"):
            await sent("a", "vault", "room/turn", {}, timeout=10, caller=ops)
        # A room's turns are vouched for by the daemon that holds its lease only.
        with pytest.raises(Forbidden, match="room 'r', whose lease daemon 'b' does not hold"):
            await sent("a", "vault", "tools/call", call, timeout=10, caller=turn)


def dev() -> Any:
    """The client token ``dev``, which the vault above does not admit."""
    from mesh import Principal

    return Principal.client("dev")


async def test_a_holder_that_never_answers_times_out_on_the_callers_clock(
    nats: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's own deadline (the timeout plus the margin for the holder's verdict) ends
    a call whose holder took it and went silent, and tells the holder it gave up; a second
    call's later deadline, armed first, does not hide it (one clock for every call)."""

    taken: list[str] = []
    gave_up: list[str] = []
    both_taken, both_cancelled, timed_out = anyio.Event(), anyio.Event(), anyio.Event()
    async with (
        open_member(nats.url, "a", [echo("echo")]) as a,
        open_member(nats.url, "b") as b,
    ):
        await wait_status(b.mesh.registry, "echo")

        async def silent(request_id: str) -> None:
            try:
                await anyio.sleep_forever()
            finally:  # the link's cancel: the caller gave up
                gave_up.append(request_id)
                if len(gave_up) == 2:
                    both_cancelled.set()

        def take_and_stay_silent(ctx: RequestContext, *_: Any) -> Any:
            taken.append(ctx.request_id)
            if len(taken) == 2:
                both_taken.set()
            return silent(ctx.request_id)

        monkeypatch.setattr(a.cluster.calls, "take", take_and_stay_silent)
        failures: list[BaseException] = []

        async def call(timeout: float) -> None:
            try:
                await b.mesh.call_tool(
                    "echo", "echo", {"message": "hi"}, timeout=timeout, on_behalf_of=EMBEDDER
                )
            except CallTimeout as exc:
                failures.append(exc)
                timed_out.set()

        with anyio.fail_after(SPREAD_TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, 20.0)  # the later deadline, armed first
                tg.start_soon(call, 0.2)
                await timed_out.wait()
                await both_taken.wait()
                tg.cancel_scope.cancel()
            await both_cancelled.wait()  # the timed-out call and the cancelled one
    assert len(failures) == 1 and "no answer from daemon 'a' within 0.2 s" in str(failures[0])
    assert sorted(gave_up) == sorted(taken)


async def test_calls_made_together_cross_in_fewer_nats_messages_than_frames(
    nats: NatsServer,
) -> None:
    """Frames sent together share one NATS message (one publish, one signature, one
    check): 32 calls started at once reach the holder in fewer than 32 messages, and
    each is answered with its own."""
    calls = 32
    async with open_member(nats.url, "a", [echo("echo")]) as a, open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "echo")
        await b.mesh.call_tool("echo", "echo", {"message": "open"}, on_behalf_of=EMBEDDER)
        messages: list[bytes] = []
        watch = await a.cluster.link.subscribe(
            "mesh.mesh.call.a", lambda message: messages.append(message.data)
        )
        answers: dict[int, Any] = {}

        async def call(n: int) -> None:
            answers[n] = await b.mesh.call_tool(
                "echo", "echo", {"message": str(n)}, on_behalf_of=EMBEDDER
            )

        with anyio.fail_after(SPREAD_TIMEOUT):
            async with anyio.create_task_group() as tg:
                for n in range(calls):
                    tg.start_soon(call, n)
        await watch.stop()
        assert answers == {n: {"message": str(n)} for n in range(calls)}
        frames = [frame for message in messages for frame in message.split(b"\n")]
        assert len(frames) >= calls  # the requests (and any cancels) all went that way
        assert len(messages) < calls
