"""Two runs' verdicts compared: a flip is two settled verdicts that disagree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.compare import compare, main


def _target(target: str, value: float, holds: bool, settled: bool) -> dict[str, Any]:
    return {
        "section": "stdio (issue 17)",
        "target": target,
        "backend": "asyncio",
        "value": value,
        "holds": holds,
        "settled": settled,
        "verdict": ("holds" if holds else "MISSED") + ("" if settled else ", unsettled"),
    }


def test_unsettled_verdicts_agree_and_settled_ones_that_differ_flip(tmp_path: Path) -> None:
    first = {
        "targets": [
            _target("a", 0.9, True, True),
            _target("b", 0.81, True, False),
            _target("c", 0.9, True, True),
        ]
    }
    second = {
        "targets": [
            _target("a", 0.92, True, True),
            _target("b", 0.78, False, True),
            _target("c", 0.5, False, True),
        ]
    }
    lines, flips = compare(first, second)
    assert flips == 1
    assert lines[-1].endswith(
        "1 same settled verdict, 1 unsettled in one run or both (they agree), 1 flipped"
    )
    assert [line.split()[-1] for line in lines[:-1]] == ["same", "unsettled", "FLIPPED"]
    paths = []
    for name, report in (("1.json", first), ("2.json", second)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(report))
    assert main([str(p) for p in paths]) == 1
    assert main([str(paths[0]), str(paths[0])]) == 0


def _cluster_report(remote_p50: float) -> dict[str, Any]:
    rows = [
        ("cluster-remote", remote_p50),
        ("cluster-local", 150.0),
        ("nats-raw", 250.0),
        ("daemon-signatures", 300.0),
    ]
    return {
        "results": [
            {
                "scenario": name,
                "mode": "sequential",
                "backend": "asyncio",
                "figures": {"p50_us": p50},
                "higher_is_better": True,
            }
            for name, p50 in rows
        ]
    }


def test_the_cluster_floors_compare_by_their_whole_names() -> None:
    # 900 µs: 2.25x the floor without the signatures (missed), 1.29x with them (holds)
    lines, flips = compare(_cluster_report(900.0), _cluster_report(920.0))
    assert flips == 0
    signed = "cross-daemon p50 / (local + bare NATS + its 4 signature operations), sequential"
    (line,) = [line for line in lines if signed in line]
    assert "holds" in line
    unsigned = "cross-daemon p50 / (local + bare NATS), sequential"
    (old,) = [line for line in lines if unsigned in line]
    assert "MISSED" in old
    # the names line up: each value starts in the same column
    assert line.index("asyncio") == old.index("asyncio")
