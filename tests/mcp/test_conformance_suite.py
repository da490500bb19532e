"""The official MCP conformance suite's server scenarios against the daemon.

One daemon per backend serves the suite's everything-server tools
(``conformance_agent.py``); the suite runs once against each MCP endpoint and every
scenario is a test id of its own. A scenario listed as passing must pass; one not
listed must still fail, so a fix shows here as a list to update, never silently.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest

from mesh.testing import spawn_daemon
from tests.conftest import BACKENDS
from tests.mcp._conformance import ScenarioResult, run_server_scenarios
from tests.mcp._peers import HERE

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

#: What passes through the combined ``/mcp`` (tools named ``conf__...``).
PASSING_COMBINED: frozenset[str] = frozenset(
    {
        "server-initialize",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    }
)

CONFORMANCE_AGENT = f"""id = "conf"
capabilities = ["test"]
[transport]
type = "stdio"
command = {sys.executable!r}
args = [{str(HERE / "conformance_agent.py")!r}, "--stdio"]
"""


@pytest.fixture(scope="module", params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped: one daemon and one run of the suite per backend."""
    return str(request.param)


@pytest.fixture(scope="module")
async def combined(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, ScenarioResult]]:
    """Every scenario's result through ``/mcp``."""
    tmp = tmp_path_factory.mktemp("mcp-conformance")
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "conf.toml").write_text(CONFORMANCE_AGENT)
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(tmp / "data")]) as daemon:
        await daemon.wait_online("conf")
        yield await run_server_scenarios(f"{daemon.http}/mcp", token=daemon.token)


def _check(results: dict[str, ScenarioResult], scenario: str, passing: frozenset[str]) -> None:
    result = results.get(scenario)
    assert result is not None, f"the suite ran no scenario {scenario!r}: {sorted(results)}"
    if scenario in passing:
        assert result.passed, f"{scenario} fails: {result.failures}"
    else:
        assert not result.passed, f"{scenario} passes now: add it to the passing set"


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_combined_endpoint(combined: dict[str, ScenarioResult], scenario: str) -> None:
    _check(combined, scenario, PASSING_COMBINED)
