"""``make demo-cluster``: the tour runs to the end and its output stays readable."""

from __future__ import annotations

import pytest

from mesh.demo._cluster_tour import cluster_tour


@pytest.mark.anyio
async def test_the_cluster_tour_runs_on_per_daemon_users_and_prints_no_log_lines(
    capfd: pytest.CaptureFixture[str],
) -> None:
    await cluster_tour()
    out, err = capfd.readouterr()
    assert "a NATS user per daemon" in out
    assert "cluster demo finished" in out
    # The daemons log to the terminal at warning level: the tour must give them nothing to say.
    assert [line for line in (out + err).splitlines() if line.startswith("{")] == []
