"""The official MCP conformance suite's client scenarios against the mesh's mount.

The client under test is ``conformance_client.py``: it mounts the scenario's server as a
mesh agent (streamable HTTP, ``auto``, OAuth when asked) and calls its tools. The suite
runs every scenario once per backend (the script runs on the backend it is given), all of
them from one node process (``client --suite all``: node and the suite load once, not once
a scenario), and every scenario is a test id of its own. A scenario listed as passing must
pass, and one not listed must still fail, so a fix shows here as a list to update, never
silently.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp._conformance import (
    ScenarioResult,
    read_client_results,
    suite_command,
    suite_env,
)
from tests.mcp._peers import HERE, PEERS, ROOT, WITHOUT_COVERAGE

pytestmark = pytest.mark.anyio

#: The suite's client scenarios (0.1.16): 26, 22 of them OAuth.
SCENARIOS = (
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
)

PASSING: frozenset[str] = frozenset(
    {
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
        "auth/metadata-default",
        "auth/metadata-var1",
        "auth/metadata-var2",
        "auth/metadata-var3",
        "auth/basic-cimd",
        "auth/scope-step-up",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/2025-03-26-oauth-endpoint-fallback",
        "auth/resource-mismatch",
        "auth/client-credentials-jwt",
        "auth/scope-from-www-authenticate",
        "auth/scope-from-scopes-supported",
        "auth/scope-omitted-when-undefined",
        "auth/scope-retry-limit",
        "auth/token-endpoint-auth-basic",
        "auth/token-endpoint-auth-post",
        "auth/token-endpoint-auth-none",
        "auth/pre-registration",
        "auth/client-credentials-basic",
        "auth/offline-access-scope",
        "auth/offline-access-not-supported",
    }
)

#: The scenarios whose client may exit with an error and still pass (the suite's
#: ``allowClientError``): each checks that the client refuses to go on.
CLIENT_MAY_FAIL = frozenset({"auth/scope-retry-limit", "auth/resource-mismatch"})

#: How long the suite gives each client, from its start: the suite starts every client at
#: once and each waits for one of :data:`PARALLEL` lanes, so this is the wait for the
#: clients ahead of it as well as its own run (a client that starts Python and the mesh on
#: a loaded 2-core machine can take more than the suite's default of 30 s alone).
CLIENT_TIMEOUT_MS = 300_000
#: The whole run of a backend's 26 scenarios: the last lane's clients and the suite's end.
RUN_TIMEOUT = 540.0
#: Clients run at once (each one's scenario listens on its own port).
PARALLEL = 4
#: The backend whose clients coverage measures. The mount's code is the same on both
#: loops (anyio's and httpx's), so the other backend's 26 clients run the same lines
#: and skip coverage's start and tracer, a third of each client's CPU; the verdicts are
#: the suite's on both.
MEASURED_BACKEND = "asyncio"


@pytest.fixture(scope="module")
async def verdicts(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ScenarioResult]:
    """Each scenario's verdict, from one run of the suite's every client scenario."""
    node, suite = suite_command()
    out = tmp_path_factory.mktemp(f"conformance-client-{anyio_backend}")
    lanes = out / "lanes"
    lanes.mkdir()
    for lane in range(PARALLEL):
        (lanes / f"lane-{lane}").touch()
    client = f"{sys.executable} {HERE / 'conformance_client.py'}"
    env = suite_env(
        PYTHONPATH=str(ROOT), MESH_BACKEND=anyio_backend, MESH_CONFORMANCE_LANES=str(lanes)
    )
    if anyio_backend != MEASURED_BACKEND:
        env.update(WITHOUT_COVERAGE)
    command = [node, suite, "client", "--command", client, "--suite", "all"]
    command += ["--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(out / "results")]
    with anyio.fail_after(RUN_TIMEOUT):
        # Exit status 1 means some scenario failed: each one's checks say which.
        await anyio.run_process(command, check=False, cwd=str(PEERS), env=env)
    found = read_client_results(out / "results", CLIENT_MAY_FAIL)
    assert set(found) == set(SCENARIOS), "the suite's client scenarios are not SCENARIOS"
    return found


@pytest.mark.timeout(600)  # the first test of a backend waits for all 26 scenarios
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_client_scenario(verdicts: dict[str, ScenarioResult], scenario: str) -> None:
    result = verdicts[scenario]
    if scenario in PASSING:
        assert result.passed, f"{scenario} fails:\n" + "\n".join(result.failures)
    else:
        assert not result.passed, f"{scenario} passes now: add it to PASSING"
