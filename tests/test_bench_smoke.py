"""The benchmark harness must not rot: a real smoke run, and the ratio arithmetic.

The full benchmark is a command for people (`make bench`); CI only proves that
the harness still spawns a measurement, parses it, and writes sane JSON.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench._harness import Case, CaseResult, plan_cases
from bench._registry import Measurement, RunContext, Scenario
from bench._report import build_report, format_table

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Four short runs of the cheapest baseline; generous for a loaded 2-core CI box.
SMOKE_TIMEOUT_S = 150
#: The eight short runs of mesh-stdio, the scenarios through the door and their baselines.
SHARED_TIMEOUT_S = 300


def run_smoke(
    output: Path, *args: str, timeout: float = SMOKE_TIMEOUT_S
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``python -m bench --smoke *args`` into ``output``: the finished run and its JSON report."""
    command = [sys.executable, "-m", "bench", "--smoke", *args, "--output", str(output)]
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads((output / "smoke.json").read_text())


@pytest.mark.timeout(SMOKE_TIMEOUT_S + 10)
def test_smoke_run_writes_sane_json(tmp_path: Path) -> None:
    done, report = run_smoke(tmp_path, "--only", "pipe-raw", "--backend", "both")
    assert report["header"]["cores"] >= 1
    assert report["header"]["env_tweaks"]["MALLOC_MMAP_THRESHOLD_"] == "1048576"
    rows = {(r["mode"], r["backend"]): r for r in report["results"]}
    assert set(rows) == {(m, b) for m in ("sequential", "inflight64") for b in ("asyncio", "trio")}
    for row in rows.values():
        assert row["errors"] == []
        figures = row["figures"]
        assert figures["calls_per_s"] > 0
        assert 0 < figures["p50_us"] <= figures["p99_us"]
    assert rows["sequential", "trio"]["trio_vs_asyncio"] > 0
    assert "pipe-raw" in done.stdout  # the table was printed


#: The scenarios that call an agent through an orchestrator's door, as an embedding program does.
THROUGH_THE_DOOR = ("mesh-mcp-mount", "mesh-a2a-mount", "obs-memory")


@pytest.fixture(scope="module")
def asyncio_smoke(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One --smoke run of mesh-stdio and the scenarios through the door on asyncio, with
    their baselines, in the one mode --smoke runs of each (sequential): the two tests below
    read its report. One run, not one each, so the bench and mcp-stdio, a baseline of
    both, start once; the baselines' inflight64 runs, which no test here reads, are left
    to `test_smoke_run_writes_sane_json` (pipe-raw's, on both loops)."""
    only = [arg for name in ("mesh-stdio", *THROUGH_THE_DOOR) for arg in ("--only", name)]
    output = tmp_path_factory.mktemp("bench-smoke")
    _, report = run_smoke(output, *only, "--mode", "sequential", timeout=SHARED_TIMEOUT_S)
    return report


@pytest.mark.timeout(SHARED_TIMEOUT_S + 10)  # the first test of the two waits for the run
def test_smoke_runs_the_mesh_over_stdio(asyncio_smoke: Any) -> None:
    """The mesh's own path: --smoke runs mesh-stdio sequentially (and its two baselines)."""
    mesh = [r for r in asyncio_smoke["results"] if r["scenario"] == "mesh-stdio"]
    assert [(r["mode"], r["backend"]) for r in mesh] == [("sequential", "asyncio")]
    assert mesh[0]["figures"]["calls_per_s"] > 0
    assert {v["baseline"] for v in mesh[0]["vs"]} == {"pipe-raw", "mcp-stdio"}


@pytest.mark.timeout(SHARED_TIMEOUT_S + 10)
def test_smoke_runs_the_scenarios_that_call_through_the_door(asyncio_smoke: Any) -> None:
    """Each names who its calls are made for: once the door refused a call that names nobody,
    these scenarios ended with no figure until this smoke ran them."""
    rows = {r["scenario"]: r for r in asyncio_smoke["results"]}
    for name in THROUGH_THE_DOOR:
        assert rows[name]["errors"] == [], rows[name]["errors"]
        assert rows[name]["figures"]["calls_per_s"] > 0


def test_smoke_modes_limit_what_smoke_runs() -> None:
    many = Scenario("many", "stdio", _never_run, smoke_modes=("sequential",))
    cases = plan_cases([many], ["asyncio"], smoke=True)
    assert [c.label for c in cases] == ["many sequential asyncio"]
    assert len(plan_cases([many], ["asyncio"])) == 2


async def _never_run(ctx: RunContext) -> Measurement:
    raise AssertionError("the report test does not run scenarios")


def _result(scenario: Scenario, backend: str, calls: float, p50: float) -> CaseResult:
    result = CaseResult(Case(scenario, "sequential", backend))  # type: ignore[arg-type]
    result.runs = [
        {"calls_per_s": calls, "p50_us": p50},
        {"calls_per_s": calls * 3, "p50_us": p50},  # the median of 2 is their mean
    ]
    return result


def test_ratios_divide_by_the_baseline_on_the_same_backend() -> None:
    raw = Scenario("raw", "stdio", _never_run)
    peer = Scenario("peer", "stdio", _never_run, backends=("asyncio",))
    mine = Scenario("mine", "stdio", _never_run, baselines=("raw", "peer"))
    results = [
        _result(raw, "asyncio", 1000, 100),
        _result(raw, "trio", 2000, 50),
        _result(peer, "asyncio", 100, 1000),
        _result(mine, "asyncio", 500, 200),
        _result(mine, "trio", 500, 100),
    ]
    report = build_report(results, {"date": "x"})
    rows = {(r["scenario"], r["backend"]): r for r in report["results"]}
    trio_row = rows["mine", "trio"]
    vs_raw, vs_peer = trio_row["vs"]
    assert (vs_raw["baseline"], vs_raw["backend"]) == ("raw", "trio")
    assert vs_raw["ratios"] == {"calls_per_s": 0.25, "p50_us": 2.0}
    # peer has no trio run, so trio is compared with peer on asyncio
    assert (vs_peer["backend"], vs_peer["ratios"]["calls_per_s"]) == ("asyncio", 5.0)
    assert trio_row["trio_vs_asyncio"] == 1.0
    assert rows["raw", "asyncio"]["vs"] == []


def test_table_shows_ratios_and_failures() -> None:
    raw = Scenario("raw", "stdio", _never_run)
    mine = Scenario("mine", "stdio", _never_run, baselines=("raw",))
    broken = CaseResult(Case(mine, "sequential", "trio"), errors=["exit code 1"])
    results = [_result(raw, "asyncio", 1000, 100), _result(mine, "asyncio", 1500, 50), broken]
    header = {
        "date": "today",
        "cores": 2,
        "cpu": "cpu",
        "python": "3.11",
        "platform": "linux",
        "packages": {"anyio": "4"},
        "backends": ["asyncio", "trio"],
        "duration_s": 1.0,
        "warmup_s": 0.1,
        "repeat": 2,
        "smoke": False,
        "env_tweaks": {},
        "loadavg_start": (0.0, 0.0, 0.0),
        "cpu_probe_ms_start": 1.0,
    }
    text = format_table(build_report(results, header))
    assert "1.50x" in text  # calls/s ratio to raw
    assert "0.50x" in text  # p50 ratio to raw
    assert "FAILED mine sequential trio: exit code 1" in text


def test_asyncio_only_scenarios_still_run_when_trio_is_asked() -> None:
    both = Scenario("both", "stdio", _never_run, modes=("sequential", "inflight64"))
    server = Scenario("server", "memory", _never_run, modes=("conns1000",), backends=("asyncio",))
    cases = plan_cases([both, server], ["trio"])
    assert [c.label for c in cases] == [
        "both sequential trio",
        "both inflight64 trio",
        "server conns1000 asyncio",
    ]


@pytest.mark.timeout(SMOKE_TIMEOUT_S + 10)
def test_sigterm_stops_the_run_and_the_measurement_under_way(tmp_path: Path) -> None:
    """A measurement runs in a session of its own; stopping the bench must kill it too."""

    command = [sys.executable, "-m", "bench", "--only", "pipe-raw", "--mode", "sequential"]
    command += ["--backend", "asyncio", "--duration", "60", "--rounds", "1", "--budget", "0"]
    with subprocess.Popen(
        [*command, "--verbose", "--output", str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as bench:
        try:
            assert bench.stderr is not None
            # The bench names each measurement as it starts: read until it does (the pipe
            # ends if the bench dies first; the test's timeout bounds the rest).
            lines = (line.strip() for line in bench.stderr)
            started = next((line for line in lines if line.startswith("started ")), "")
            assert started, "the bench ended before any measurement started"
            pid = int(started.rsplit("(pid ", 1)[1].rstrip(")"))
            assert Path(f"/proc/{pid}").exists(), "the measurement is not there to stop"
            bench.send_signal(signal.SIGTERM)
            bench.wait(timeout=30)  # not the 60 s window: the run under way was killed
            assert not _is_run_one(pid), "the measurement outlived the bench"
        finally:
            bench.kill()


def _is_run_one(pid: int) -> bool:
    try:
        return b"bench.run_one" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
