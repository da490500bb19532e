"""The bench's targets: worked out from one run's figures, never from another backend's."""

from __future__ import annotations

from typing import Any

from bench._targets import evaluate, format_targets


def _row(
    scenario: str,
    mode: str,
    backend: str,
    higher: bool = True,
    trio: float | None = None,
    **figures: float,
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "mode": mode,
        "backend": backend,
        "figures": figures,
        "higher_is_better": higher,
        "trio_vs_asyncio": trio,
    }


def _checks(report: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(c.target, c.backend): c for _, checks in evaluate(report) for c in checks}


def test_ratios_divide_figures_of_the_same_run_and_backend() -> None:
    report = {
        "results": [
            _row("mesh-stdio", "sequential", "asyncio", calls_per_s=6_000),
            _row("mcp-stdio", "sequential", "asyncio", calls_per_s=500),
            _row("mesh-stdio", "sequential", "trio", calls_per_s=4_000, trio=4_000 / 6_000),
            _row("mcp-stdio", "sequential", "trio", calls_per_s=500),
        ]
    }
    checks = _checks(report)
    assert checks["stdio sequential / MCP SDK stdio", "asyncio"].value == 12.0
    assert checks["stdio sequential / MCP SDK stdio", "asyncio"].holds is True
    assert checks["stdio sequential / MCP SDK stdio", "trio"].value == 8.0
    assert checks["stdio sequential / MCP SDK stdio", "trio"].holds is False
    assert checks["trio / asyncio, mesh-stdio sequential", "trio"].holds is False
    # not measured: no pipe-raw in this run, so no verdict either way
    assert checks["stdio sequential / raw pipe", "asyncio"].holds is None


def test_a_mesh_figure_never_stands_in_for_the_other_backend() -> None:
    report = {
        "results": [
            _row("mesh-memory", "sequential", "asyncio", calls_per_s=45_000),
            _row("loop-pingpong", "sequential", "asyncio", calls_per_s=60_000),
            _row("loop-pingpong", "sequential", "trio", calls_per_s=50_000),
        ]
    }
    checks = _checks(report)
    assert checks["in-process sequential / loop ping-pong", "asyncio"].holds is True
    assert checks["in-process sequential / loop ping-pong", "trio"].value is None


def test_an_asyncio_only_baseline_answers_for_trio() -> None:
    report = {
        "results": [
            _row("mesh-broadcast", "clients1000", "trio", higher=False, p50_us=110_000),
            _row("ws-fanout", "clients1000", "asyncio", higher=False, p50_us=100_000),
        ]
    }
    check = _checks(report)["broadcast to 1,000 / raw fan-out, time to last", "trio"]
    assert abs(check.value - 1.1) < 1e-9
    assert check.holds is True


def test_cluster_latencies_add_sequentially_and_times_per_call_add_in_flight() -> None:
    report = {
        "results": [
            _row("cluster-remote", "sequential", "asyncio", p50_us=500),
            _row("cluster-local", "sequential", "asyncio", p50_us=150),
            _row("nats-raw", "sequential", "asyncio", p50_us=250),
            _row("cluster-remote", "inflight64", "asyncio", calls_per_s=2_000),
            _row("cluster-local", "inflight64", "asyncio", calls_per_s=10_000),
            _row("nats-raw", "inflight64", "asyncio", calls_per_s=10_000),
        ]
    }
    checks = _checks(report)
    sequential = checks["cross-daemon p50 / (local + bare NATS), sequential", "asyncio"]
    assert sequential.value == 500 / 400
    assert sequential.holds is True
    in_flight = checks["cross-daemon time per call / (local + bare NATS), 64 in flight", "asyncio"]
    assert abs(in_flight.value - 2.5) < 1e-9
    assert in_flight.holds is False
    text = format_targets(report)
    assert "1 held, 1 missed" in text
    assert "MISSED" in text


def test_mcp_serving_is_asked_5x_the_sdk_in_flight_and_its_relay_floor_one_at_a_time() -> None:
    rows = [
        _row(scenario, mode, "asyncio", calls_per_s=rate)
        for scenario, mode, rate in (
            ("mesh-mcp-serve", "sequential", 900),
            ("mcp-server-raw", "sequential", 400),
            ("mcp-relay-raw", "sequential", 1_000),
            ("mesh-mcp-serve", "inflight64", 3_000),
            ("mcp-server-raw", "inflight64", 500),
        )
    ]
    checks = _checks({"results": rows})
    assert checks["MCP serving / MCPServer, stdio inflight64", "asyncio"].value == 6.0
    # One call at a time crosses three process hops: 2.25x the SDK says nothing of the mesh;
    # 0.9x the raw relay of the same hops does.
    assert ("MCP serving / MCPServer, stdio sequential", "asyncio") not in checks
    floor = checks["MCP serving / raw relay of its hops, stdio sequential", "asyncio"]
    assert floor.value == 0.9 and floor.holds is True


SIGNED_SEQUENTIAL = (
    "cross-daemon p50 / (local + bare NATS + its 4 signature operations), sequential"
)
SIGNED_IN_FLIGHT = (
    "cross-daemon time per call / (local + bare NATS + its share of 4 signature operations),"
    " 64 in flight"
)


def test_a_cross_daemon_call_is_also_set_against_its_floor_with_the_signatures() -> None:
    report = {
        "results": [
            _row("cluster-remote", "sequential", "asyncio", p50_us=900),
            _row("cluster-local", "sequential", "asyncio", p50_us=150),
            _row("nats-raw", "sequential", "asyncio", p50_us=250),
            _row("daemon-signatures", "sequential", "asyncio", p50_us=300),
            _row("cluster-remote", "sequential", "trio", p50_us=1_200),
            _row("cluster-local", "sequential", "trio", p50_us=200),
            _row("daemon-signatures", "sequential", "trio", p50_us=350),
            _row("cluster-remote", "inflight64", "asyncio", calls_per_s=2_000),
            _row("cluster-local", "inflight64", "asyncio", calls_per_s=10_000),
            _row("nats-raw", "inflight64", "asyncio", calls_per_s=10_000),
            _row("daemon-signatures", "inflight64", "asyncio", calls_per_s=100_000),
        ]
    }
    checks = _checks(report)
    # without the signatures: 900 / 400 misses; with them, 900 / (150 + 250 + 300) holds
    assert checks["cross-daemon p50 / (local + bare NATS), sequential", "asyncio"].value == 2.25
    signed = checks[SIGNED_SEQUENTIAL, "asyncio"]
    assert signed.value == 900 / 700
    assert (signed.holds, signed.bound) == (True, 1.3)
    # trio's own signatures and local call, bare NATS standing in from asyncio: 1200 / 800
    on_trio = checks[SIGNED_SEQUENTIAL, "trio"]
    assert on_trio.value == 1.5
    assert (on_trio.holds, on_trio.bound) == (True, 2.0)
    # in flight the times per call add: 1/2,000 against 1/10,000 + 1/10,000 + 1/100,000
    in_flight = checks[SIGNED_IN_FLIGHT, "asyncio"]
    assert abs(in_flight.value - 500 / 210) < 1e-9
    assert in_flight.holds is False
    old = checks["cross-daemon time per call / (local + bare NATS), 64 in flight", "asyncio"]
    assert abs(old.value - 2.5) < 1e-9
    assert checks[SIGNED_IN_FLIGHT, "trio"].value is None  # no trio run in flight here


def test_without_the_signatures_measured_only_the_old_floor_is_read() -> None:
    report = {
        "results": [
            _row("cluster-remote", "sequential", "asyncio", p50_us=500),
            _row("cluster-local", "sequential", "asyncio", p50_us=150),
            _row("nats-raw", "sequential", "asyncio", p50_us=250),
        ]
    }
    checks = _checks(report)
    assert checks["cross-daemon p50 / (local + bare NATS), sequential", "asyncio"].holds
    assert checks[SIGNED_SEQUENTIAL, "asyncio"].value is None
    assert SIGNED_SEQUENTIAL not in format_targets(report)


def test_the_signed_floor_is_taken_round_by_round_from_its_four_members() -> None:
    members = [
        ["cluster-remote", "asyncio"],
        ["cluster-local", "asyncio"],
        ["nats-raw", "asyncio"],
        ["daemon-signatures", "asyncio"],
    ]
    rounds: list[list[dict[str, float] | None]] = [
        [{"p50_us": 900.0}, {"p50_us": 150.0}, {"p50_us": 250.0}, {"p50_us": 300.0}],
        [{"p50_us": 1_000.0}, {"p50_us": 200.0}, {"p50_us": 300.0}, {"p50_us": 300.0}],
        [{"p50_us": 800.0}, {"p50_us": 150.0}, {"p50_us": 250.0}, None],  # signatures failed
        [{"p50_us": 2_400.0}, {"p50_us": 400.0}, {"p50_us": 600.0}, {"p50_us": 600.0}],
    ]
    report = {
        "results": [],
        "pairs": [{"members": members, "mode": "sequential", "rounds": rounds}],
    }
    check = _checks(report)[SIGNED_SEQUENTIAL, "asyncio"]
    # 1.2857, 1.25 and 1.5 (the third round gives nothing): the median of each round's own
    assert abs(check.value - 900 / 700) < 1e-9
    spread = check.value.spread
    assert (spread.count, spread.low, spread.high) == (3, 1.25, 1.5)
