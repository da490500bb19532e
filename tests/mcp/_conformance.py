"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``), run
against a server the tests started.

The suite is pinned in ``peers/package-lock.json`` with the Node it needs (22: the npm
``node`` package, so ``peers/node_modules/.bin/node``; the other peers run on the
system's node). :func:`run_server_scenarios` runs its server mode once against a URL
and returns each scenario's checks, so a test can give every scenario an id of its own
without starting node thirty times; :func:`read_client_results` reads the same of a run
of its client mode.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from tests.mcp._peers import HERE, PEERS

SUITE = PEERS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE = PEERS / "node_modules" / ".bin" / "node"
AUTH = HERE / "conformance_auth.cjs"
#: Node's own cache of the suite's compiled code (Node 22's ``NODE_COMPILE_CACHE``): a
#: start of the suite then costs a fifth less CPU (about 1.0 s, not 1.25). It sits beside
#: the modules it caches, outside the repository's tracked files.
COMPILE_CACHE = PEERS / "node_modules" / ".cache" / "node-compile-cache"
#: The whole active server suite takes seconds against a live server; a scenario that
#: waits on a server that never answers takes the suite's own timeouts.
SUITE_TIMEOUT = 600.0
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
#: A client scenario's directory (``auth/...`` scenarios sit in an ``auth`` directory).
_CLIENT_DIR = re.compile(r"^(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
#: The client's last line on stdout: its exit status (``conformance_client.py``).
_EXIT = re.compile(rb"^exit: (?P<status>\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """One scenario's outcome: passed when none of its checks failed."""

    scenario: str
    passed: bool
    #: ``name: message`` of every failed check (and warning), for a readable assert.
    failures: tuple[str, ...]


def suite_env(**extra: str) -> dict[str, str]:
    """The environment the suite runs in: ours, node's compile cache, and ``extra``."""
    return {**os.environ, "NODE_COMPILE_CACHE": str(COMPILE_CACHE), **extra}


def suite_command() -> list[str]:
    """``node index.js`` of the pinned suite (fails, saying how to fix it, when missing)."""
    if not SUITE.exists() or not NODE.exists():
        missing = (
            f"the MCP conformance suite is not installed ({SUITE} or {NODE} is missing): "
            "run `make peers`, or `npm ci` in tests/mcp/peers"
        )
        if os.environ.get("MESH_REQUIRE_NODE") == "1" or os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return [str(NODE), str(SUITE)]


async def run_server_scenarios(
    url: str, *, token: str | None = None, scenario: str | None = None
) -> dict[str, ScenarioResult]:
    """Run the suite's server mode (every active scenario, or one) against ``url``.

    The suite has no option for a token: ``conformance_auth.cjs``, preloaded, adds
    ``token`` as a bearer to the requests it sends to ``url``'s origin.
    """
    parts = urlsplit(url)
    env = suite_env(MESH_CONFORMANCE_ORIGIN=f"{parts.scheme}://{parts.netloc}/")
    if token is not None:
        env["MESH_TOKEN"] = token
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as out:
        node, suite = suite_command()
        command = [node, "--require", str(AUTH), suite, "server", "--url", url, "-o", out]
        if scenario is not None:
            command += ["--scenario", scenario]
        with anyio.fail_after(SUITE_TIMEOUT):
            # Exit status 1 means some scenario failed: the checks say which.
            await anyio.run_process(command, check=False, cwd=str(PEERS), env=env)
        return read_results(Path(out))


def read_results(out: Path) -> dict[str, ScenarioResult]:
    """Each ``server-<scenario>-<time>/checks.json`` the suite wrote, by scenario."""
    results: dict[str, ScenarioResult] = {}
    for directory in sorted(out.iterdir()):
        match = _RESULT_DIR.match(directory.name)
        if match is None:
            continue
        checks = json.loads((directory / "checks.json").read_text())
        failures = tuple(
            f"{check.get('name')}: {check.get('errorMessage') or check.get('description')}"
            for check in checks
            if check.get("status") in ("FAILURE", "WARNING")
        )
        failed = any(check.get("status") == "FAILURE" for check in checks)
        name = match["scenario"]
        results[name] = ScenarioResult(name, passed=not failed and bool(checks), failures=failures)
    return results


def read_client_results(out: Path, may_fail: frozenset[str]) -> dict[str, ScenarioResult]:
    """Each client scenario's verdict from a run of ``client --suite ... -o out``, as the
    suite gives one scenario's (``OVERALL: PASSED``): no check failed or warned, and the
    client finished (was not killed at the timeout) with status 0, or with an error where
    the scenario allows one (``may_fail``). The runner of several scenarios writes the
    checks and the client's output but not its status, which the client prints last."""
    results: dict[str, ScenarioResult] = {}
    for checks_file in sorted(out.rglob("checks.json")):
        match = _CLIENT_DIR.match(checks_file.parent.name)
        if match is None:
            continue
        name = str(checks_file.parent.relative_to(out).with_name(match["scenario"]))
        checks = json.loads(checks_file.read_text())
        failures = [
            f"{check.get('name')}: {check.get('errorMessage') or check.get('description')}"
            for check in checks
            if check.get("status") in ("FAILURE", "WARNING")
        ]
        stdout = (checks_file.parent / "stdout.txt").read_bytes()
        statuses = _EXIT.findall(stdout)
        status = int(statuses[-1]) if statuses else None
        if status is None:
            failures.append("the client did not finish (killed at the suite's timeout)")
        elif status != 0 and name not in may_fail:
            failures.append(f"the client exited with status {status}")
        if failures:
            stderr = (checks_file.parent / "stderr.txt").read_text(errors="replace")
            failures.append(f"client stderr:\n{stderr[-3000:]}")
        results[name] = ScenarioResult(name, passed=not failures, failures=tuple(failures))
    return results
