"""ONE trace per call across real processes, each exporting with the SDK's OTLP exporter to a
receiver on loopback: ``mesh call`` -> ``mesh serve`` -> an agent over stdio, WebSocket dial-in
and HTTP; the tool's own span under the agent's SERVER span; across two daemons on NATS.

The tests that need only *a* traced daemon share one per backend, and one receiver: each
reads the spans that arrived after it began (its own trace, or its own tool's), never all.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from mesh.testing import Daemon, spawn_daemon, spawn_echo_server, spawn_nats_server
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.observe._otlp import ReceivedSpan, Receiver, chain, has_chain, open_receiver
from tests.observe._spans import by_name, traced

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

AGENT_MODULE = "tests.observe.traced_agent"
ROOT = Path(__file__).resolve().parents[2]
#: The tool's argument: it must show in no span.
SECRET = "xylophone"
#: The dial-in agent's token, in the shared daemon's environment.
DIALER_TOKEN = {"DIALER_TOKEN": "dial-in-token-for-tests"}
DIALER = 'id = "dialer"\n[transport]\ntype = "dial-in"\ntoken_env = "DIALER_TOKEN"\n'


def stdio_manifest(agent_id: str, receiver: Receiver, declared: str | None = None) -> str:
    """A stdio agent with mesh id ``agent_id``; its program declares ``declared`` (the same
    by default), also its service name."""
    declared = declared or agent_id
    env = receiver.environment(declared)
    env_table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return f"""
id = "{agent_id}"
[transport]
type = "stdio"
command = "python"
args = ["-m", "{AGENT_MODULE}", "--stdio", "--id", "{declared}"]
cwd = "{ROOT}"
env = {{ {env_table} }}
"""


@pytest.fixture(scope="module")
async def receiver(anyio_backend: str) -> AsyncIterator[Receiver]:
    async with open_receiver() as shared:
        yield shared


@pytest.fixture(scope="module")
async def daemon(
    receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """A daemon tracing to the module's receiver, with ``worker``, ``worker-stdio`` (whose
    program declares itself ``worker``) and a dial-in ``dialer``: a daemon and its agents
    are most of what each test here would cost. The tests over HTTP, through an MCP peer
    and across NATS start their own, as their agents are made for them."""
    manifests = tmp_path_factory.mktemp("traces-manifests")
    (manifests / "worker.toml").write_text(stdio_manifest("worker", receiver))
    declares = stdio_manifest("worker-stdio", receiver, declared="worker")
    (manifests / "worker-stdio.toml").write_text(declares)
    (manifests / "dialer.toml").write_text(DIALER)
    env = {**receiver.environment("mesh-daemon"), **DIALER_TOKEN}
    async with spawn_daemon(manifests, env=env) as shared:
        await shared.wait_online("worker", "worker-stdio")
        yield shared


async def mesh_call(daemon: Daemon, receiver: Receiver, agent: str, message: str) -> None:
    """``mesh call AGENT work --arg message=...`` as a process of its own, traced."""
    env = daemon.env(**receiver.environment("mesh-cli"))
    command = [
        sys.executable,
        "-m",
        "mesh.cli",
        "call",
        agent,
        "work",
        "--arg",
        f"message={message}",
    ]
    done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == {"message": message.upper()}


def the_tool_span(span: ReceivedSpan) -> bool:
    return span.name == "the tool's own work"


async def the_whole_trace(receiver: Receiver, since: int = 0) -> list[ReceivedSpan]:
    """The tool's span and every ancestor up to its root, once all of them have arrived,
    of the spans that arrived from ``since`` on (a test's own, on a shared receiver: each
    test waits for its trace whole, so no earlier tool span arrives after it)."""
    spans = await receiver.wait_for(lambda got: has_chain(got[since:], the_tool_span, ""))
    return chain(spans[since:], next(filter(the_tool_span, spans[since:])))


def assert_hops(path: list[ReceivedSpan], agent: str) -> None:
    """CLI client -> daemon server -> daemon client -> agent server -> the tool's span."""
    hops = [(s.service, s.kind, s.name) for s in path]
    assert hops == [
        ("mesh-cli", "CLIENT", "tools/call"),
        ("mesh-daemon", "SERVER", "tools/call"),
        ("mesh-daemon", "CLIENT", "tools/call"),
        (agent, "SERVER", "tools/call"),
        (agent, "INTERNAL", "the tool's own work"),
    ], hops
    assert len({s.trace_id for s in path}) == 1
    for span in path[:4]:
        assert span.attributes["rpc.method"] == "tools/call"
        assert span.attributes["gen_ai.tool.name"] == "work"  # which tool, on every hop
        assert span.attributes["rpc.response.status_code"] == "OK"
    shown = json.dumps([s.attributes for s in path]).lower()
    assert SECRET not in shown  # neither the argument nor the result is an attribute


async def test_mesh_call_to_a_stdio_agent_is_one_trace(daemon: Daemon, receiver: Receiver) -> None:
    since = len(receiver.spans)
    await mesh_call(daemon, receiver, "worker", SECRET)
    path = await the_whole_trace(receiver, since)
    assert_hops(path, "worker")


async def test_spans_name_a_stdio_agent_by_its_mesh_id_and_keep_the_one_it_declares(
    daemon: Daemon, receiver: Receiver
) -> None:
    since = len(receiver.spans)
    await mesh_call(daemon, receiver, "worker-stdio", SECRET)
    path = await the_whole_trace(receiver, since)
    addresses = [s.attributes.get("server.address") for s in path[:4]]
    assert addresses == ["worker-stdio"] * 4, addresses
    assert path[3].service == "worker" and path[3].kind == "SERVER"
    assert path[3].attributes["mesh.agent.declared_id"] == "worker"


async def test_a_failed_mesh_call_ends_every_span_with_the_calls_own_status(
    daemon: Daemon, receiver: Receiver
) -> None:
    """The CLI's root span says TOOL_ERROR, as the daemon's and the agent's do, not how the
    command exited (SystemExit)."""
    since = len(receiver.spans)
    env = daemon.env(**receiver.environment("mesh-cli"))
    command = [sys.executable, "-m", "mesh.cli", "call", "worker", "fail"]
    done = await anyio.run_process([*command, "--arg", "message=no"], env=env, check=False)
    assert done.returncode == 1, done.stderr.decode()

    def failed(span: ReceivedSpan) -> bool:
        return span.attributes.get("gen_ai.tool.name") == "fail"

    # Each process exports on its own schedule: wait for all four hops, whichever comes last.
    every_hop = {
        ("mesh-cli", "CLIENT"),
        ("mesh-daemon", "SERVER"),
        ("mesh-daemon", "CLIENT"),
        ("worker", "SERVER"),
    }
    spans = await receiver.wait_for(
        lambda got: {(s.service, s.kind) for s in got[since:] if failed(s)} >= every_hop
    )
    spans = spans[since:]
    hops = {(s.service, s.kind): s.attributes for s in spans if failed(s)}
    assert set(hops) == every_hop, sorted(hops)
    for (service, kind), attributes in hops.items():
        assert attributes["rpc.response.status_code"] == "TOOL_ERROR", (service, kind)
        assert attributes["error.type"] == "TOOL_ERROR", (service, kind)


async def test_the_console_exporter_writes_one_line_per_span(daemon: Daemon) -> None:
    """Between one-line log events (and through a daemon that logs a stdio agent's stderr
    line by line), a span is one line of JSON, not an indented block."""
    env = daemon.env(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="mesh-cli")
    command = [sys.executable, "-m", "mesh.cli", "call", "nobody", "work"]
    done = await anyio.run_process(command, env=env, check=False)
    lines = done.stderr.decode().splitlines()
    spans = [json.loads(line) for line in lines if line.startswith("{")]
    assert [span["name"] for span in spans] == ["tools/call"], lines
    assert spans[0]["attributes"]["gen_ai.tool.name"] == "work"
    assert spans[0]["attributes"]["rpc.response.status_code"] == "UNAVAILABLE"


async def test_over_websocket_dial_in_is_one_trace(daemon: Daemon, receiver: Receiver) -> None:
    since = len(receiver.spans)
    command = [sys.executable, "-m", AGENT_MODULE, "--connect", daemon.ws]
    command += ["--token-env", "DIALER_TOKEN", "--id", "dialer"]
    agent_env = {**os.environ, **DIALER_TOKEN, **receiver.environment("dialer")}
    async with await anyio.open_process(command, env=agent_env, stderr=None) as dialler:
        try:
            await daemon.wait_online("dialer")
            await mesh_call(daemon, receiver, "dialer", SECRET)
            path = await the_whole_trace(receiver, since)
        finally:
            dialler.terminate()
    assert_hops(path, "dialer")


async def test_over_http_is_one_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_receiver() as receiver:
        for key, value in receiver.environment("web").items():
            monkeypatch.setenv(key, value)
        async with spawn_echo_server(module=AGENT_MODULE, extra_args=["--id", "web"]) as web:
            manifest = f'id = "web"\n[transport]\ntype = "http"\nendpoint = "{web.http}"\n'
            (tmp_path / "web.toml").write_text(manifest)
            monkeypatch.setenv("OTEL_SERVICE_NAME", "mesh-daemon")
            async with spawn_daemon(tmp_path) as daemon:
                await daemon.wait_online("web")
                await mesh_call(daemon, receiver, "web", SECRET)
                path = await the_whole_trace(receiver)
    assert_hops(path, "web")


def mcp_manifest(receiver: Receiver) -> str:
    env = {"PYTHONPATH": str(ROOT), **receiver.environment("mcp-peer")}
    env_table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return f"""
id = "peer"
[transport]
type = "stdio"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.observe.traced_mcp_server"]
cwd = "{ROOT}"
protocol = "mcp"
env = {{ {env_table} }}
"""


def served_by_the_peer(span: ReceivedSpan) -> bool:
    return span.service == "mcp-peer" and span.name == "tools/call shout"


async def test_an_mcp_client_through_mcp_to_a_mounted_mcp_server_is_one_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp.client import Client

    from tests.mcp.test_serve import over_http

    async with open_receiver() as receiver:
        (tmp_path / "peer.toml").write_text(mcp_manifest(receiver))
        for key, value in receiver.environment("mesh-daemon").items():
            monkeypatch.setenv(key, value)
        async with spawn_daemon(tmp_path) as daemon:
            await daemon.wait_online("peer")
            with traced() as (provider, exporter):
                tracer = provider.get_tracer("the MCP client's application")
                with tracer.start_as_current_span("ask the mesh"):
                    async with Client(over_http(daemon)) as client:
                        answer = await client.call_tool("peer__shout", {"text": SECRET})
            assert answer.structured_content == {"result": SECRET.upper()}
            root = by_name(exporter.get_finished_spans(), "ask the mesh")
            outside = f"{root.context.span_id:016x}"
            spans = await receiver.wait_for(lambda got: has_chain(got, served_by_the_peer, outside))
    served = next(filter(served_by_the_peer, spans))
    path = chain(spans, served, outside)
    hops = [(s.service, s.kind, s.name) for s in path]
    assert hops == [
        ("mesh-daemon", "SERVER", "tools/call peer__shout"),
        ("mesh-daemon", "CLIENT", "tools/call"),
        ("mesh-daemon", "SERVER", "tools/call"),
        ("mcp-peer", "SERVER", "tools/call shout"),
    ], hops
    assert path[0].parent_id == f"{root.context.span_id:016x}"
    assert {s.trace_id for s in path} == {f"{root.context.trace_id:032x}"}
    assert path[0].attributes["gen_ai.tool.name"] == "peer__shout"
    assert SECRET not in json.dumps([s.attributes for s in path]).lower()


async def test_across_two_daemons_on_nats_is_one_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_receiver() as receiver, spawn_nats_server() as nats, AsyncExitStack() as stack:
        for key, value in receiver.environment("unnamed").items():
            monkeypatch.setenv(key, value)
        daemons = {}
        for name, manifests in (
            ("a", {"worker.toml": stdio_manifest("worker", receiver)}),
            ("b", {}),
        ):
            directory = tmp_path / name / "manifests"
            directory.mkdir(parents=True)
            for file, text in manifests.items():
                (directory / file).write_text(text)
            args = ["--nats", nats.url, "--daemon-id", name, "--data-dir", str(tmp_path / name)]
            env = {"OTEL_SERVICE_NAME": f"daemon-{name}"}
            daemons[name] = await stack.enter_async_context(
                spawn_daemon(directory, extra_args=args, env=env)
            )
        await daemons["b"].wait_online("worker", timeout=60)
        await mesh_call(daemons["b"], receiver, "worker", SECRET)
        path = await the_whole_trace(receiver)
    hops = [(s.service, s.kind, s.name) for s in path]
    assert hops == [
        ("mesh-cli", "CLIENT", "tools/call"),
        ("daemon-b", "SERVER", "tools/call"),
        ("daemon-b", "CLIENT", "tools/call"),
        ("daemon-a", "SERVER", "tools/call"),
        ("daemon-a", "CLIENT", "tools/call"),
        ("worker", "SERVER", "tools/call"),
        ("worker", "INTERNAL", "the tool's own work"),
    ], hops
    for span in path[:6]:  # which tool, on every hop: the daemon that serves b's call too
        assert span.attributes["gen_ai.tool.name"] == "work", (span.service, span.kind)


async def test_a_spawned_stdio_agent_continues_the_trace_in_its_environment() -> None:
    from mesh import open_stdio_peer

    async with open_receiver() as receiver:
        env = {"PYTHONPATH": str(ROOT), **receiver.environment("child")}
        args = ["-m", AGENT_MODULE, "--stdio", "--id", "child"]
        with (
            traced() as (provider, _),
            provider.get_tracer("test").start_as_current_span("spawn") as spawn,
        ):
            link = open_stdio_peer(sys.executable, args, env=env, cwd=str(ROOT))
            peer = await link.__aenter__()
        try:
            # Tracing is off here: the request carries no trace, so the agent's SERVER span
            # can only have its parent from TRACEPARENT, set when it was spawned.
            assert await peer.call_tool("work", {"message": SECRET}) == {"message": SECRET.upper()}
            spans = await receiver.wait_for(lambda got: any(map(the_tool_span, got)))
        finally:
            await link.__aexit__(None, None, None)
    server = next(s for s in spans if s.kind == "SERVER" and s.name == "tools/call")
    assert server.parent_id == f"{spawn.get_span_context().span_id:016x}"
    assert server.trace_id == f"{spawn.get_span_context().trace_id:032x}"
