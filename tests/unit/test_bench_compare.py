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
