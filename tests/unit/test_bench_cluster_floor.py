"""The floor of a call across daemons: its signatures timed with the cluster's own keys.

`daemon-signatures` signs and checks a call's request and its answer as two daemons
do (`mesh/cluster/_keys.py`), frames of the size `cluster-remote` sends; the cluster
targets add it to the local call and bare NATS, measured in the same rounds.
"""

from __future__ import annotations

import anyio
import pytest

from bench._harness import plan_cases, plan_groups
from bench._registry import Backend, RunContext, get_scenario
from bench._targets import wanted_pairs
from bench.cluster_scenarios import call_frames, daemon_signatures
from mesh.protocol import MESH_CODEC, Request, Response


def test_the_frames_signed_are_a_cross_daemon_call_and_its_answer() -> None:
    request, answer = call_frames()
    asked, answered = MESH_CODEC.decode(request), MESH_CODEC.decode(answer)
    assert isinstance(asked, Request) and isinstance(answered, Response)
    assert asked.payload.method == "mesh/call"
    assert asked.payload.params["agent"] == "echo"
    assert answered.id == asked.id and answered.payload.success
    # what cluster-remote's b and a sent (their ids and timestamps the same length)
    assert (len(request), len(answer)) == (376, 157)


@pytest.mark.parametrize(("mode", "frames"), [("sequential", 1), ("inflight64", 64)])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_calls_signatures_are_timed_per_call(mode: str, frames: int, backend: Backend) -> None:
    ctx = RunContext(mode=mode, backend=backend, duration=0.02, warmup=0.0)
    result = anyio.run(daemon_signatures, ctx, backend=backend)
    assert result.p50_us is not None and result.p50_us > 0
    assert result.p99_us is not None and result.p99_us >= result.p50_us
    # calls/s is the time per call the in-flight floor adds: 1 / p50
    assert result.calls_per_s == pytest.approx(1e6 / result.p50_us)
    assert result.samples > 0
    assert result.extra["frames_per_message"] == frames
    assert result.extra["cpu_us_per_call"] > 0


def test_the_signatures_run_beside_the_call_across_daemons_in_every_round() -> None:
    pairs = wanted_pairs()
    for mode in ("sequential", "inflight64"):
        for backend in ("asyncio", "trio"):
            members = (
                ("cluster-remote", backend),
                ("cluster-local", backend),
                ("nats-raw", backend),
                ("daemon-signatures", backend),
            )
            assert (members, mode) in pairs
    names = ("cluster-remote", "cluster-local", "nats-raw", "daemon-signatures")
    scenarios = [get_scenario(name, "bench.cluster_scenarios") for name in names]
    cases = plan_cases(scenarios, ["asyncio", "trio"])
    key = (
        (
            ("cluster-remote", "trio"),
            ("cluster-local", "trio"),
            ("nats-raw", "trio"),
            ("daemon-signatures", "trio"),
        ),
        "sequential",
    )
    (group,) = plan_groups(cases, [key])
    # trio's own signatures; bare NATS, asyncio only, stands in from asyncio
    assert [c.label for c in group.cases] == [
        "cluster-remote sequential trio",
        "cluster-local sequential trio",
        "nats-raw sequential asyncio",
        "daemon-signatures sequential trio",
    ]
    # --only cluster-remote brings its floor's parts, the signatures included
    assert "daemon-signatures" in scenarios[0].baselines
