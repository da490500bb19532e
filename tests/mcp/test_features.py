"""Resources, templates, prompts, completion, subscriptions and logging/setLevel, served
to real MCP clients by a real daemon from the conformance agent (``conformance_agent.py``)
and from a mounted MCP server (``mcp_server.py``), one daemon per backend.

The agent's own server (``/mcp/conf``, ``mesh mcp --agent conf``) offers its URIs and
prompt names as they are; the combined one (``/mcp``, ``mesh mcp``) names prompts
``conf__NAME`` and keeps URIs. Every read goes through the door: the agent's
``access.callers`` decide who reads.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    PromptListChangedNotification,
    PromptReference,
    ResourceListChangedNotification,
    ResourceTemplateReference,
    ResourceUpdatedNotification,
    TextContent,
    TextResourceContents,
)

from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration.test_daemon_auth import create_token
from tests.mcp._peers import HERE
from tests.mcp.conformance_agent import RED_PIXEL_PNG
from tests.mcp.test_mount import stdio_manifest
from tests.mcp.test_serve import mesh_mcp, relay_env

pytestmark = [
    pytest.mark.anyio,
    # logging/setLevel and resources/subscribe are 2025-era methods, which the mesh
    # serves to the clients that still use them: the SDK warns that they are.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

#: The conformance agent, which only the admin and the client token "reader" may call.
GUARDED_AGENT = f"""id = "conf"
[transport]
type = "stdio"
command = {sys.executable!r}
args = [{str(HERE / "conformance_agent.py")!r}, "--stdio"]
[access]
callers = ["client:reader"]
"""
WATCHED = "test://watched-resource"
#: How long a notification may take to arrive (it is sent at once; this only bounds a bug).
NOTICE_DEADLINE = 10.0


#: The MCP server mounted beside it (agent `peer`), for the same callers: what it offers
#: is no other token's to list.
GUARDED_MOUNT = '\n[access]\ncallers = ["client:reader"]\n'


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """The conformance agent and a mounted MCP server, once per backend: each test reads
    them with sessions and tokens of its own."""
    tmp = tmp_path_factory.mktemp("mcp-features")
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "conf.toml").write_text(GUARDED_AGENT)
    mount = stdio_manifest(manifests, revision="2025-11-25")
    mount.write_text(mount.read_text() + GUARDED_MOUNT)
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(tmp / "data")]) as daemon:
        await daemon.wait_online("conf", "peer")
        yield daemon


@asynccontextmanager
async def http_client(daemon: Daemon, path: str, token: str | None = None) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport to ``path``, with ``token`` (the admin's)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token or daemon.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{daemon.http}{path}", http_client=http) as streams,
    ):
        yield streams


async def test_an_agents_own_server_serves_its_resources_prompts_and_completion(
    daemon: Daemon,
) -> None:
    async with Client(http_client(daemon, "/mcp/conf")) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"test://static-text", "test://static-binary", WATCHED} <= listed
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["test://template/{id}/data"]
        text = (await client.read_resource("test://static-text")).contents[0]
        assert isinstance(text, TextResourceContents) and text.mime_type == "text/plain"
        assert text.text == "This is the content of the static text resource."
        blob = (await client.read_resource("test://static-binary")).contents[0]
        assert isinstance(blob, BlobResourceContents) and blob.mime_type == "image/png"
        assert base64.b64decode(blob.blob) == RED_PIXEL_PNG
        data = (await client.read_resource("test://template/42/data")).contents[0]
        assert isinstance(data, TextResourceContents) and '"id":"42"' in data.text
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        arguments = prompts["test_prompt_with_arguments"].arguments or []
        assert [(a.name, a.required) for a in arguments] == [("arg1", True), ("arg2", True)]
        got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert got.messages[0].role == "user"
        assert got.messages[0].content == TextContent(
            type="text", text="Prompt with arguments: arg1='a', arg2='b'"
        )
        image = (await client.get_prompt("test_prompt_with_image")).messages[0].content
        assert isinstance(image, ImageContent) and base64.b64decode(image.data) == RED_PIXEL_PNG
        embedded = await client.get_prompt(
            "test_prompt_with_embedded_resource", {"resourceUri": "test://x"}
        )
        assert isinstance(embedded.messages[0].content, EmbeddedResource)
        completed = await client.complete(
            PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
            {"name": "arg1", "value": "par"},
        )
        assert completed.completion.values == ["paris", "park", "party"]


async def test_bad_input_gets_a_clear_error_and_the_session_lives(daemon: Daemon) -> None:
    async with Client(http_client(daemon, "/mcp/conf")) as client:
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("test://nowhere")
        assert unknown.value.error.code == -32002
        assert "no resource 'test://nowhere'" in unknown.value.error.message
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("test_prompt_with_arguments", {"arg1": "only"})
        assert missing.value.error.code == -32602
        assert "missing ['arg2']" in missing.value.error.message
        with pytest.raises(MCPError) as oversized:
            await client.read_resource("test://oversized")
        assert "MAX_ITEM_BYTES" in oversized.value.error.message
        await client.set_logging_level("warning")
        # The session lives: it still reads.
        assert (await client.read_resource("test://static-text")).contents


async def test_an_unknown_log_level_is_refused_by_name(daemon: Daemon) -> None:
    """The SDK's client checks levels itself, so this one is sent as raw JSON-RPC."""
    headers = {
        "Authorization": f"Bearer {daemon.token}",
        "Accept": "application/json, text/event-stream",
    }
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers) as http:
        opened = await http.post(
            "/mcp/conf", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        )
        http.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        loud = {"level": "loud"}
        answer = await http.post(
            "/mcp/conf",
            json={"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": loud},
        )
        error = answer.json()["error"]
        assert error["code"] == -32602 and "MCP's levels: debug, info" in error["message"]
        read = {"uri": "test://static-text"}
        answer = await http.post(
            "/mcp/conf",
            json={"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": read},
        )
        assert answer.json()["result"]["contents"][0]["text"].startswith("This is the content")


async def test_the_combined_server_names_prompts_and_keeps_uris(daemon: Daemon) -> None:
    """`mesh mcp` (every agent): prompts as AGENT__NAME, resources under their own URIs."""
    async with Client(mesh_mcp(daemon)) as client:
        capabilities = client.server_capabilities
        assert capabilities is not None and capabilities.resources is not None
        assert capabilities.resources.subscribe and capabilities.prompts is not None
        names = {p.name for p in (await client.list_prompts()).prompts}
        assert "conf__test_simple_prompt" in names and "test_simple_prompt" not in names
        got = await client.get_prompt("conf__test_simple_prompt")
        assert got.messages[0].content == TextContent(
            type="text", text="This is a simple prompt for testing."
        )
        resources = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert "[agent conf]" in (resources["test://static-text"].description or "")
        text = (await client.read_resource("test://template/7/data")).contents[0]
        assert isinstance(text, TextResourceContents) and '"id":"7"' in text.text
        completed = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="test://template/{id}/data"),
            {"name": "id", "value": "4"},
        )
        assert completed.completion.values == ["456"]
        with pytest.raises(MCPError, match="unknown prompt 'test_simple_prompt'"):
            await client.get_prompt("test_simple_prompt")


async def test_a_subscriber_hears_of_an_update_over_mesh_mcp(daemon: Daemon) -> None:
    """A 2026-07-28 client's `subscriptions/listen` names the URI; the agent's
    `resource_updated` reaches it (the relay's WebSocket is a stream)."""
    parameters = mesh_mcp(daemon)
    parameters.args += ["--agent", "conf"]
    async with (
        Client(parameters) as client,
        client.listen(resource_subscriptions=[WATCHED]) as subscription,
    ):
        assert subscription.honored.resource_subscriptions == [WATCHED]
        await client.call_tool("touch_watched", {})
        with anyio.fail_after(NOTICE_DEADLINE):
            async for event in subscription:
                assert getattr(event, "uri", None) == WATCHED, event
                break


async def test_a_subscriber_hears_of_an_update_over_http(daemon: Daemon) -> None:
    """A handshake-era HTTP session subscribes; the update rides in front of its next
    answer (the one to the call that changed the resource), and stops after unsubscribe."""
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    async with Client(
        http_client(daemon, "/mcp"), mode="legacy", message_handler=on_message
    ) as client:
        await client.subscribe_resource(WATCHED)
        await client.call_tool("conf__touch_watched", {})
        assert heard == [WATCHED]
        await client.unsubscribe_resource(WATCHED)
        await client.call_tool("conf__touch_watched", {})
        await client.send_ping()
        assert heard == [WATCHED]


async def test_the_agents_access_rules_refuse_a_resource_read(daemon: Daemon) -> None:
    outsider = await create_token(daemon, "client", "outsider")
    reader = await create_token(daemon, "client", "reader")
    async with Client(http_client(daemon, "/mcp/conf", outsider)) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource("test://static-text")
        assert "does not accept calls from client token 'outsider'" in str(refused.value)
        assert "access.callers" in str(refused.value)
        with pytest.raises(MCPError, match=r"access\.callers"):
            await client.get_prompt("test_simple_prompt")
        assert (await client.list_resources()).resources == []
    async with Client(http_client(daemon, "/mcp", outsider)) as client:
        assert (await client.list_prompts()).prompts == []  # conf's are not for this token
        with pytest.raises(MCPError, match="no agent offers resource"):
            await client.read_resource("test://static-text")
    async with Client(http_client(daemon, "/mcp/conf", reader)) as client:
        assert (await client.read_resource("test://static-text")).contents


async def test_a_mesh_caller_reads_resources_as_methods(daemon: Daemon) -> None:
    """The same features are mesh methods: `POST /rpc` reads a resource too."""
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers) as http:
        answer = await http.post(
            "/rpc",
            json={"agent": "conf", "method": "resources/read", "params": {"uri": WATCHED}},
        )
    assert answer.status_code == 200, answer.text
    contents = answer.json()["result"]["contents"]
    assert contents[0]["uri"] == WATCHED and contents[0]["text"].startswith("watched, version")


async def test_a_mounted_servers_resources_prompts_and_changes_pass_through(
    daemon: Daemon,
) -> None:
    """An MCP server mounted as agent `peer`: its resource and prompt reach an MCP client
    of `mesh mcp --agent peer` as the server answers them, and its `list_changed`
    notifications reach that client as they happen."""
    changed: list[type] = []
    both = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceListChangedNotification | PromptListChangedNotification):
            changed.append(type(message))
            if len(set(changed)) == 2:
                both.set()

    parameters = mesh_mcp(daemon)
    parameters.args += ["--agent", "peer"]
    async with Client(parameters, mode="legacy", message_handler=on_message) as client:
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == ["note://today"]
        note = (await client.read_resource("note://today")).contents[0]
        assert isinstance(note, TextResourceContents) and note.text == "buy milk"
        got = await client.get_prompt("greet", {"name": "Ann"})
        assert got.messages[0].content == TextContent(type="text", text="Say hello to Ann.")
        await client.call_tool("renote", {})
        with anyio.fail_after(NOTICE_DEADLINE):
            await both.wait()


async def test_the_cli_lists_and_reads_an_agents_resources(daemon: Daemon) -> None:
    async def mesh(*args: str) -> Any:
        command = [sys.executable, "-m", "mesh.cli", *args, "--url", daemon.http]
        return await anyio.run_process(command, env=relay_env(daemon), check=False)

    listed = await mesh("resources", "conf")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.decode().splitlines()
    assert any(line.startswith("resource ") and "test://static-text" in line for line in lines)
    assert any("test://template/{id}/data" in line for line in lines)
    assert any(line.startswith("prompt ") and "test_simple_prompt" in line for line in lines)
    read = await mesh("read", "conf", "test://template/9/data")
    assert read.returncode == 0 and '"id":"9"' in read.stdout.decode(), read.stderr
    missing = await mesh("read", "conf", "test://nowhere")
    assert missing.returncode != 0
    assert "no resource 'test://nowhere'" in missing.stderr.decode()
