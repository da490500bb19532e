"""One daemon's NATS credentials, used directly, cannot make another daemon obey more than
that daemon may ask: signed calls, the caller it may vouch for, the holder's own door."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import EMBEDDER, Agent, AgentSpec, local_connector
from mesh.agents.echo import agent as echo_agent
from mesh.cluster._bridge import open_nats_loop
from mesh.cluster._keys import DaemonKey, Keys
from mesh.cluster._permissions import nats_config, password_variable
from mesh.manifests import AccessSection
from mesh.protocol import ErrorInfo, Request, Response
from mesh.testing import spawn_nats_server
from tests.cluster._helpers import SPREAD_TIMEOUT, open_member, wait_status
from tests.cluster._raw import link_cancel, link_frames, link_request, link_response

pytestmark = pytest.mark.anyio

CALLS_B = "mesh.mesh.call.b"
CALLS_A = "mesh.mesh.call.a"
CALLS_C = "mesh.mesh.call.c"
INBOX_A = "_INBOX_mesh.mesh.a"


class Attacker:
    """A raw nats-py client with daemon A's credentials and A's key, as a thief holds them:
    it speaks the link between daemons A and B frame by frame."""

    def __init__(self, loop: Any, nc: Any, keys: Keys) -> None:
        # nats-py runs on asyncio: on trio, on the cluster's own asyncio thread.
        self.loop, self.nc, self.keys = loop, nc, keys
        self._send, self.answers = anyio.create_memory_object_stream[Any](100)
        self._number = 0

    async def start(self) -> None:
        async def on_frame(msg: Any) -> None:
            for answer in link_frames(msg.data):
                if isinstance(answer, Response):  # b's answers on a's call subject
                    self.loop.to_mesh(self._send.send_nowait, answer)

        await self.loop.run(lambda: self.nc.subscribe(CALLS_A, cb=on_frame))
        js = self.nc.jetstream()
        key = self.keys.key.public.encode()
        await self.loop.run(lambda: js.publish("$KV.mesh-mesh-keys.a", key))

    async def publish(self, subject: str, data: bytes, **options: Any) -> None:
        async def publish() -> None:
            await self.nc.publish(subject, data, **options)
            await self.nc.flush()

        await self.loop.run(publish)

    async def send(
        self, request: dict[str, Any], *, signed: bool = True, claim: str | None = None
    ) -> str:
        self._number += 1
        request_id = f"x{self._number}"
        frame = link_request("mesh/call", {"origin": "a", **request}, request_id)
        reply = f"{INBOX_A}.x.b"
        headers = self.keys.headers(CALLS_B, reply, frame) if signed else {}
        if claim is not None:
            headers["Mesh-Daemon"] = claim
        await self.publish(CALLS_B, frame, reply=reply, headers=headers or None)
        return request_id

    async def ask(self, request: dict[str, Any]) -> Any:
        """B's answer to ``request``, signed by A as A's: a result, or the error's payload."""
        request_id = await self.send(request)
        with anyio.fail_after(SPREAD_TIMEOUT):
            answer = await self.answers.receive()
        assert answer.id == request_id, "an earlier request was answered"
        return answer.payload.result if answer.payload.success else answer.payload.error


def client(name: str = "x", **fields: Any) -> dict[str, Any]:
    return {"kind": "client", "name": name, **fields}


async def test_daemon_a_credentials_make_b_obey_no_more_than_a_may(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nats

    for daemon in "abc":
        monkeypatch.setenv(password_variable(daemon), f"pw-{daemon}")
    config = tmp_path / "mesh-daemons.conf"
    config.write_text(nats_config("mesh", ["a", "b", "c"]))  # each daemon its own subjects
    held = anyio.Event()
    release = anyio.Event()
    slow = Agent("slow")

    @slow.tool
    async def wait() -> dict[str, bool]:
        held.set()
        await release.wait()
        return {"real": True}

    specs = [
        AgentSpec("echo", local_connector(echo_agent)),
        AgentSpec("closed", local_connector(echo_agent), access=AccessSection(callers=())),
        AgentSpec("slow", local_connector(slow)),
    ]
    b_creds: Any = {"nats_user": "daemon-b", "nats_password": "pw-b"}
    async with (
        spawn_nats_server(args=["-c", str(config)]) as server,
        open_member(server.url, "b", specs, **b_creds) as b,
        open_member(server.url, "c", nats_user="daemon-c", nats_password="pw-c") as c,
        open_nats_loop() as loop,
    ):
        nc = await loop.run(
            lambda: nats.connect(server.url, user="daemon-a", password="pw-a", inbox_prefix=INBOX_A)
        )
        attacker = Attacker(loop, nc, Keys("a", DaemonKey.generate()))
        try:
            b.mesh.max_call_timeout = 300.0  # as mesh serve sets it by default
            await attacker.start()
            ping = {"agent": "echo", "method": "ping"}
            assert (await attacker.ask({**ping, "caller": client()}))["agent"] == "echo"

            refusals: dict[str, dict[str, Any]] = {
                "a daemon vouches to another for a client token, an agent": {
                    **ping,
                    "caller": {"kind": "embedder"},
                },
                "reserved to the daemon": {
                    "agent": "echo",
                    "method": "room/persona",
                    "caller": client(admin=True),
                },
                "access.callers is []": {"agent": "closed", "method": "ping", "caller": client()},
                "outside (0, 300] s": {**ping, "timeout": 100_000, "caller": client()},
                "a daemon calls in its own name only": {**ping, "origin": "c", "caller": client()},
                "which daemon 'a' does not hold": {
                    **ping,
                    "caller": {"kind": "agent", "name": "echo"},
                },
            }
            for rule, request in refusals.items():
                answer = await attacker.ask(request)
                assert isinstance(answer, ErrorInfo) and answer.code == -32007, (rule, answer)
                assert rule in answer.message

            # Unsigned, or signed by A while claiming C: dropped unanswered (the next,
            # honest request is the first one answered).
            await attacker.send({**ping, "caller": client()}, signed=False)
            await attacker.send({**ping, "caller": client()}, claim="c")
            assert (await attacker.ask({**ping, "caller": client()}))["agent"] == "echo"

            # A reads C's call to B, answers it in its own name and in B's, and cancels it
            # at B: C waits for B's own answer, and B runs the call to its end.
            await wait_status(c.mesh.registry, "slow")
            seen = anyio.Event()
            calls: list[Request] = []

            def saw(frame: Any) -> None:
                if isinstance(frame, Request) and frame.payload.method == "mesh/call":
                    calls.append(frame)
                    seen.set()

            async def on_call(msg: Any) -> None:
                for frame in link_frames(msg.data):
                    loop.to_mesh(saw, frame)

            # The shipped config lets no daemon but b read b's calls: the request id
            # reaches the thief here through b's own user, as if it had leaked.
            observer = await loop.run(
                lambda: nats.connect(server.url, user="daemon-b", password="pw-b")
            )
            await loop.run(lambda: observer.subscribe(CALLS_B, cb=on_call))
            await loop.run(observer.flush)  # the server has the subscription before C calls
            async with anyio.create_task_group() as tg:
                results: list[Any] = []

                async def call() -> None:
                    results.append(
                        await c.mesh.call_tool(
                            "slow", "wait", {}, timeout=30, on_behalf_of=EMBEDDER
                        )
                    )

                tg.start_soon(call)
                with anyio.fail_after(SPREAD_TIMEOUT):
                    await seen.wait()
                    await held.wait()
                request_id = calls[-1].id
                fake = link_response(request_id, {"real": False})
                signed = attacker.keys.headers(CALLS_C, "", fake)
                await attacker.publish(CALLS_C, fake, headers=signed)
                await attacker.publish(
                    CALLS_C, fake, headers={"Mesh-Daemon": "b", "Mesh-Sig": "AA"}
                )
                cancel = link_cancel(request_id)
                await attacker.publish(
                    CALLS_B, cancel, headers=attacker.keys.headers(CALLS_B, "", cancel)
                )
                # b answers a's next request after the cancel: it has read it, and left C's call be
                assert (await attacker.ask({**ping, "caller": client()}))["agent"] == "echo"
                release.set()
            assert results == [{"real": True}]
            assert b.cluster.calls.calls_served >= 1
            await loop.run(observer.close)
        finally:
            await loop.run(nc.close)
            attacker._send.close()
            attacker.answers.close()
