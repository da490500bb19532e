"""The official MCP conformance suite's server scenarios through ``mesh mcp`` (stdio).

The suite speaks only streamable HTTP, so each run goes through
:mod:`tests.mcp.stdio_bridge`: a raw front that writes each POSTed message to a
``mesh mcp`` child's stdin and streams back what the child writes. One daemon per
backend serves the suite's everything-server tools (``conformance_agent.py``); the
suite runs once through ``mesh mcp --agent conf`` and once through the combined
``mesh mcp`` (each on the backend under test, as the daemon is), and every scenario is a
test id of its own. The two scenarios that test HTTP itself (:data:`HTTP_ONLY`) would
measure the bridge, so they are left out.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
import sniffio

from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp._conformance import ScenarioResult, run_server_scenarios
from tests.mcp._peers import WITHOUT_COVERAGE
from tests.mcp.stdio_bridge import open_stdio_bridge
from tests.mcp.test_conformance_suite import (
    CONFORMANCE_AGENT,
    PASSING_AGENT,
    PASSING_COMBINED,
    SCENARIOS,
)
from tests.mcp.test_serve import relay_env

#: A test that takes a run's results waits for the whole run in its setup: ~50 s here at
#: load 6 without coverage (a `mesh mcp` started per scenario), so a loaded machine under
#: coverage needs more than the default 180 s.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(360)]

#: What only an HTTP server can pass or fail: the bridge's Origin rule and its streams.
HTTP_ONLY = frozenset({"dns-rebinding-protection", "server-sse-multiple-streams"})
#: The suite's 28 scenarios that ``mesh mcp`` answers itself.
STDIO_SCENARIOS = tuple(scenario for scenario in SCENARIOS if scenario not in HTTP_ONLY)

#: Through ``mesh mcp --agent conf``: what passes on ``/mcp/conf``.
PASSING_STDIO_AGENT: frozenset[str] = PASSING_AGENT - HTTP_ONLY
#: Through the combined ``mesh mcp``: what passes on ``/mcp`` (names are ``conf__...``).
PASSING_STDIO_COMBINED: frozenset[str] = PASSING_COMBINED - HTTP_ONLY


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """A daemon serving the conformance agent, once per backend."""
    tmp = tmp_path_factory.mktemp("mcp-conformance-stdio")
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "conf.toml").write_text(CONFORMANCE_AGENT)
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(tmp / "data")]) as daemon:
        await daemon.wait_online("conf")
        yield daemon


async def _through_mesh_mcp(daemon: Daemon, *extra: str) -> dict[str, ScenarioResult]:
    """The suite, through the bridge, against ``mesh mcp EXTRA...`` children, each on
    the backend the daemon runs on."""
    backend = sniffio.current_async_library()
    command = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http, *extra]
    command += ["--backend", backend]
    env = relay_env(daemon)
    # A `mesh mcp` relays frames without reading them, so its sessions run the same lines
    # but for what a frame's bytes decide (a non-ASCII frame's UTF-8 check, which the
    # transports' own tests cover): coverage measures each run's first session, and the
    # rest skip coverage's start and tracer. The daemon, where each scenario's own code
    # runs, is measured throughout.
    later = {**env, **WITHOUT_COVERAGE}
    async with open_stdio_bridge(command, env=env, later_env=later) as bridge:
        results = await run_server_scenarios(f"{bridge.url}/mcp")
    return {name: result for name, result in results.items() if name not in HTTP_ONLY}


@pytest.fixture(scope="module")
async def agent_results(daemon: Daemon) -> dict[str, ScenarioResult]:
    """Every scenario's result through ``mesh mcp --agent conf``."""
    return await _through_mesh_mcp(daemon, "--agent", "conf")


@pytest.fixture(scope="module")
async def combined_results(daemon: Daemon) -> dict[str, ScenarioResult]:
    """Every scenario's result through the combined ``mesh mcp`` (a fixture of its own:
    each run starts a child per scenario, so each gets a test's timeout to itself)."""
    return await _through_mesh_mcp(daemon)


def _check(results: dict[str, ScenarioResult], scenario: str, passing: frozenset[str]) -> None:
    result = results.get(scenario)
    assert result is not None, f"the suite ran no scenario {scenario!r}: {sorted(results)}"
    if scenario in passing:
        assert result.passed, f"{scenario} fails through mesh mcp: {result.failures}"
    else:
        assert not result.passed, f"{scenario} passes now: add it to the passing set"


@pytest.mark.parametrize("scenario", STDIO_SCENARIOS)
async def test_mesh_mcp_agent(agent_results: dict[str, ScenarioResult], scenario: str) -> None:
    _check(agent_results, scenario, PASSING_STDIO_AGENT)


@pytest.mark.parametrize("scenario", STDIO_SCENARIOS)
async def test_mesh_mcp_combined(
    combined_results: dict[str, ScenarioResult], scenario: str
) -> None:
    _check(combined_results, scenario, PASSING_STDIO_COMBINED)
