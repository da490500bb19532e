"""The coverage ratchet: each package's branch coverage may not drop below its committed floor.

    .venv/bin/python scripts/coverage_ratchet.py check   # make test, after the report
    .venv/bin/python scripts/coverage_ratchet.py raise   # make coverage-ratchet

Both read the combined data of the last ``coverage run`` (``.coverage``) and sum it per
package: a directory of the measured source, its modules only (``mesh/cluster`` does not
include ``mesh/cluster/x``). A package's figure is coverage.py's own (lines and branches taken,
over lines and branches), so the whole's figure is the one ``coverage report`` prints.

``check`` rewrites nothing. It fails when a package is more than the file's ``tolerance``
under its floor, when a measured package has no floor (a new package starts gated), and when
a floor names a package that no longer exists. ``raise`` rewrites the file: a floor goes up to
the measured figure, never down, so lowering one is a hand edit that a reviewer sees.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ROOT / "tests" / "coverage-floor.json"


@dataclass
class Tally:
    """What coverage.py counted in one package: lines and branches, run and in all."""

    covered: int = 0
    total: int = 0

    @property
    def percent(self) -> float:
        return 100.0 if self.total == 0 else 100.0 * self.covered / self.total


def package_of(path: str) -> str:
    """The package a measured file belongs to: its directory, relative to the repository."""
    parent = Path(path).resolve().parent
    try:
        return parent.relative_to(ROOT).as_posix()
    except ValueError:
        return parent.as_posix()


def tally(files: Mapping[str, Mapping[str, int]]) -> dict[str, Tally]:
    """Per-package sums of coverage.py's per-file summaries (``coverage json``'s shape)."""
    packages: dict[str, Tally] = {}
    for path, summary in files.items():
        counted = packages.setdefault(package_of(path), Tally())
        counted.covered += summary["covered_lines"] + summary.get("covered_branches", 0)
        counted.total += summary["num_statements"] + summary.get("num_branches", 0)
    return packages


def measured() -> dict[str, float]:
    """Each package's figure from the combined ``.coverage`` of the last run."""
    import coverage  # only here: the module's pure part is tested without a data file

    cov = coverage.Coverage(config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    report = ROOT / ".coverage-ratchet.json"
    try:
        cov.json_report(outfile=str(report))
        files = json.loads(report.read_text())["files"]
    finally:
        report.unlink(missing_ok=True)
    summaries = {path: measured["summary"] for path, measured in files.items()}
    return {name: counted.percent for name, counted in tally(summaries).items()}


RAISE = "`make coverage-ratchet`"


def problems(
    floors: Mapping[str, float], figures: Mapping[str, float], tolerance: float
) -> list[str]:
    """Every way the figures break the ratchet, one line each, naming the package and the rule."""
    gone = [
        f"{name}: has a floor but was not measured (gone? {RAISE} drops it)"
        for name in sorted(floors.keys() - figures.keys())
    ]
    new = [
        f"{name}: measured {figures[name]:.1f} % but has no floor ({RAISE} adds it)"
        for name in sorted(figures.keys() - floors.keys())
    ]
    dropped = [
        f"{name}: {figures[name]:.1f} % is under its floor {floors[name]:.1f} % "
        f"by more than the tolerance ({tolerance} points)"
        for name in sorted(floors.keys() & figures.keys())
        if figures[name] < floors[name] - tolerance
    ]
    return gone + new + dropped


def risen(floors: Mapping[str, float], figures: Mapping[str, float]) -> dict[str, float]:
    """The floors after a deliberate raise: up to the figure (rounded down), never down."""
    return {
        name: max(floors.get(name, 0.0), math.floor(figure * 10) / 10)
        for name, figure in sorted(figures.items())
    }


def _read() -> tuple[dict[str, float], float]:
    text = json.loads(FLOORS.read_text())
    return {str(k): float(v) for k, v in text["packages"].items()}, float(text["tolerance"])


def _write(floors: Mapping[str, float], tolerance: float) -> None:
    text = {"tolerance": tolerance, "packages": dict(floors)}
    FLOORS.write_text(json.dumps(text, indent=2) + "\n")


def check() -> int:
    floors, tolerance = _read()
    figures = measured()
    found = problems(floors, figures, tolerance)
    for name in sorted(floors.keys() & figures.keys()):
        if figures[name] >= floors[name] + 1.0:
            print(f"{name}: {figures[name]:.1f} %, a point over its floor: raise it ({RAISE})")
    for line in found:
        print(f"coverage ratchet ({FLOORS.relative_to(ROOT)}): {line}", file=sys.stderr)
    return 1 if found else 0


def raise_floors() -> int:
    floors, tolerance = _read()
    figures = measured()
    new = risen({k: v for k, v in floors.items() if k in figures}, figures)
    for name, floor in new.items():
        if floor != floors.get(name):
            print(f"{name}: {floors.get(name, '-')} -> {floor}")
    for name in sorted(floors.keys() - figures.keys()):
        print(f"{name}: dropped (not measured)")
    _write(new, tolerance)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["check", "raise"])
    args = parser.parse_args()
    return check() if args.action == "check" else raise_floors()


if __name__ == "__main__":
    sys.exit(main())
