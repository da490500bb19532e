"""The official MCP conformance suite's server scenarios against the daemon.

One daemon per backend serves the suite's everything-server tools
(``conformance_agent.py``); the suite runs once against each MCP endpoint and every
scenario is a test id of its own. A scenario listed as passing must pass; one not
listed must still fail, so a fix shows here as a list to update, never silently.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator

import httpx
import pytest
from mcp.client import Client
from mcp.types import ImageContent, TextContent

from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp._conformance import ScenarioResult, run_server_scenarios
from tests.mcp._peers import HERE
from tests.mcp.conformance_agent import RED_PIXEL_PNG
from tests.mcp.test_serve import mesh_mcp, over_http

pytestmark = pytest.mark.anyio

#: The suite's active server scenarios (0.1.16).
SCENARIOS = (
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
)

#: What passes through the combined ``/mcp``: tools and prompts are named
#: ``conf__...`` there, so the scenarios that call a tool or get (or complete) a prompt
#: by its own name fail by design; resource URIs are every agent's own, so those pass.
PASSING_COMBINED: frozenset[str] = frozenset(
    {
        "server-initialize",
        "logging-set-level",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
        "prompts-list",
    }
)

#: What passes through one agent's own server, ``/mcp/conf`` (tools under their own names).
PASSING_AGENT: frozenset[str] = PASSING_COMBINED | {
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "completion-complete",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "tools-call-with-logging",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
}

CONFORMANCE_AGENT = f"""id = "conf"
capabilities = ["test"]
[transport]
type = "stdio"
command = {sys.executable!r}
args = [{str(HERE / "conformance_agent.py")!r}, "--stdio"]
"""


Results = dict[str, dict[str, ScenarioResult]]


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """A daemon serving the conformance agent, once per backend."""
    tmp = tmp_path_factory.mktemp("mcp-conformance")
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "conf.toml").write_text(CONFORMANCE_AGENT)
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(tmp / "data")]) as daemon:
        await daemon.wait_online("conf")
        yield daemon


@pytest.fixture(scope="module")
async def results(daemon: Daemon) -> Results:
    """Every scenario's result through ``/mcp`` ("combined") and ``/mcp/conf`` ("agent")."""
    return {
        "combined": await run_server_scenarios(f"{daemon.http}/mcp", token=daemon.token),
        "agent": await run_server_scenarios(f"{daemon.http}/mcp/conf", token=daemon.token),
    }


def _check(results: dict[str, ScenarioResult], scenario: str, passing: frozenset[str]) -> None:
    result = results.get(scenario)
    assert result is not None, f"the suite ran no scenario {scenario!r}: {sorted(results)}"
    if scenario in passing:
        assert result.passed, f"{scenario} fails: {result.failures}"
    else:
        assert not result.passed, f"{scenario} passes now: add it to the passing set"


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_combined_endpoint(results: Results, scenario: str) -> None:
    _check(results["combined"], scenario, PASSING_COMBINED)


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_agent_endpoint(results: Results, scenario: str) -> None:
    _check(results["agent"], scenario, PASSING_AGENT)


async def test_mesh_mcp_serves_one_agent_under_its_own_names(daemon: Daemon) -> None:
    """`mesh mcp --agent conf`: the agent's own tool names, its items as MCP's."""
    parameters = mesh_mcp(daemon)
    parameters.args += ["--agent", "conf"]
    async with Client(parameters) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"test_simple_text", "test_image_content"} <= names
        assert not any("__" in name or name.startswith("mesh_") for name in names)
        image = (await client.call_tool("test_image_content", {})).content[0]
        assert isinstance(image, ImageContent) and image.mime_type == "image/png"
        assert base64.b64decode(image.data) == RED_PIXEL_PNG
        bad = await client.call_tool("bad_content", {})
        assert bad.is_error and "Invalid value 'video'" in str(bad.content[0])
        text = (await client.call_tool("test_simple_text", {})).content[0]
        assert isinstance(text, TextContent) and text.text.startswith("This is a simple text")


async def test_an_unknown_agent_has_no_server(daemon: Daemon) -> None:
    headers = {"Authorization": f"Bearer {daemon.token}", "Accept": "application/json"}
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers) as http:
        answer = await http.post("/mcp/nobody", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 404
    assert "no agent 'nobody' to serve over MCP" in answer.text


async def test_progress_reaches_an_http_client_while_the_call_runs(daemon: Daemon) -> None:
    """/mcp answers a call that asks for progress with an SSE stream: the SDK's HTTP
    client hears each report (before, it heard none: the answer was JSON at the end)."""
    heard: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total))

    async with Client(over_http(daemon)) as client:
        answer = await client.call_tool(
            "conf__test_tool_with_progress", {}, progress_callback=on_progress
        )
        assert not answer.is_error
    assert heard == [(0, 100), (50, 100), (100, 100)]
