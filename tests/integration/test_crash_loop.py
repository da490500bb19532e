"""A crash loop is shown as one: offline, with why, and counted in ``/metrics``.

Three stdio agents that can never come up, each its own way (the command exits at once,
its module does not exist, its binary is missing), under a real daemon: each turns
``offline`` after a few failed attempts, with the exit status, the stderr tail or
"command not found" as its link error, in ``/agents`` and ``mesh agents``; ``/metrics``
counts their restarts and link failures by agent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mesh.testing import Daemon, spawn_daemon
from tests.integration.test_cli_truth import run

pytestmark = pytest.mark.anyio

#: Failed attempts in a row after which a link is shown offline (docs/daemon.md).
FAILING_AFTER = 3

#: Each failing agent, and what its link error must say about why.
FAILING = {
    "exits": ('command = "python"\nargs = ["-c", "import sys; sys.exit(3)"]', "status 3"),
    "no-module": (
        'command = "python"\nargs = ["-m", "no_such_module_here"]',
        "No module named no_such_module_here",
    ),
    "no-binary": ('command = "/no/such/binary"', "command not found: '/no/such/binary'"),
}


def _by_agent(exposition: str, name: str) -> dict[str, float]:
    """The samples of counter ``name`` by their ``agent`` label."""
    return {
        sample.labels["agent"]: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == name
    }


def _write_manifests(directory: Path) -> None:
    for agent_id, (command, _) in FAILING.items():
        text = f'id = "{agent_id}"\n[transport]\ntype = "stdio"\n{command}\n'
        (directory / f"{agent_id}.toml").write_text(text)


async def _wait_offline(daemon: Daemon, agent_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Until every agent is shown offline (watching ``/agents/events``, no polling)."""
    agents: dict[str, dict[str, Any]] = {}
    with anyio.fail_after(120):  # a few attempts on the backoff's schedule, on a loaded machine
        async with daemon.open_events("/agents/events") as events:
            while not all(agents.get(a, {}).get("status") == "offline" for a in agent_ids):
                event = json.loads(await events.receive())
                shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
                agents.update((agent["id"], agent) for agent in shown)
    return agents


@pytest.mark.timeout(240)
async def test_agents_that_can_never_start_are_offline_with_why_and_counted(
    tmp_path: Path,
) -> None:
    _write_manifests(tmp_path)
    async with spawn_daemon(tmp_path) as daemon:
        shown = await _wait_offline(daemon, list(FAILING))
        for agent_id, (_, why) in FAILING.items():
            error = shown[agent_id]["link_error"]
            assert why in error, (agent_id, error)
            assert "attempts in a row failed (retrying)" in error, error
        async with daemon.client() as http:
            scraped = (await http.get("/metrics")).text
            ready = await http.get("/readyz")
        restarts = _by_agent(scraped, "mesh_agent_restarts_total")
        failures = _by_agent(scraped, "mesh_agent_link_failures_total")
        for agent_id in FAILING:
            assert restarts[agent_id] >= FAILING_AFTER - 1, restarts
            assert failures[agent_id] >= FAILING_AFTER - 1, failures
        # The daemon itself can take work: a failing agent is the agent's state, not its.
        assert ready.status_code == 200, ready.text
        code, out, err = await run("agents", daemon=daemon)
    assert code == 0, err
    table, _, reasons = out.partition("\n\n")
    for agent_id, (_, why) in FAILING.items():
        rows = [line.split()[:3] for line in table.splitlines()]
        assert [agent_id, "stdio", "offline"] in rows, table
        said = [line for line in reasons.splitlines() if line.startswith(f"{agent_id} (offline)")]
        assert said and why in said[0], reasons
