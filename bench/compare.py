"""``python -m bench.compare A.json B.json``: did two runs give the same verdicts?

Works out the targets of two reports (`python -m bench` writes them) with the
current rules (`bench._targets`: a report keeps every round, so a rule made
stricter applies to an old run too) and prints each target measured in both
with its value and verdict in each. Two verdicts
*agree* when they are the same, or when either run called its verdict unsettled
(its bound within the run's spread, see `bench._quiet.settled`): an unsettled
verdict claims nothing a run could contradict. They *flip* when both runs
settled on opposite verdicts; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench._targets import evaluate

__all__ = ["compare", "main"]

Key = tuple[str, str, str]


def _targets(report: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    if "results" not in report:  # targets alone, as written
        return {(t["section"], t["target"], t["backend"]): t for t in report.get("targets", [])}
    return {
        (section, c.target, c.backend): {
            "value": c.value,
            "holds": c.holds,
            "settled": c.settled,
            "verdict": c.verdict,
        }
        for section, checks in evaluate(report)
        for c in checks
        if c.value is not None
    }


def _verdict(target: dict[str, Any]) -> str:
    if "verdict" in target:
        return str(target["verdict"])
    return "holds" if target["holds"] else "MISSED"


def compare(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[str], int]:
    """Lines that compare the two runs' targets, and how many verdicts flipped."""
    first, second = _targets(a), _targets(b)
    lines, flips, same, loose = [], 0, 0, 0
    keys = [k for k in first if k in second]
    # As wide as the longest name: cut at 58 characters, a cross-daemon target lost its mode.
    width = max((len(key[1]) for key in keys), default=0)
    for key in keys:
        x, y = first[key], second[key]
        settled = x.get("settled", True) and y.get("settled", True)
        if x["holds"] == y["holds"] and settled:
            state, same = "same", same + 1
        elif settled:
            state, flips = "FLIPPED", flips + 1
        else:
            state, loose = "unsettled", loose + 1
        lines.append(
            f"  {key[1]:{width}} {key[2]:7} {x['value']:9.3g} {_verdict(x):18}"
            f" {y['value']:9.3g} {_verdict(y):18} {state}"
        )
    lines.append(
        f"{same + flips + loose} targets in both runs: {same} same settled verdict,"
        f" {loose} unsettled in one run or both (they agree), {flips} flipped"
    )
    return lines, flips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    reports = [json.loads(path.read_text()) for path in (args.first, args.second)]
    lines, flips = compare(*reports)
    print("\n".join(lines))
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
