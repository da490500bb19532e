"""The coverage ratchet's rules (scripts/coverage_ratchet.py), on coverage.py's per-file summaries.

``make test`` runs the script's ``check`` on the run's real data; here its pure part is
given summaries in the shape ``coverage json`` writes, so each rule is seen to bite.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "coverage_ratchet", ROOT / "scripts" / "coverage_ratchet.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


ratchet = _load()


def _summary(lines: int, run: int, branches: int = 0, taken: int = 0) -> dict[str, int]:
    return {
        "num_statements": lines,
        "covered_lines": run,
        "num_branches": branches,
        "covered_branches": taken,
    }


def test_a_package_sums_its_own_modules_lines_and_branches() -> None:
    figures = ratchet.tally(
        {
            str(ROOT / "mesh" / "a.py"): _summary(10, 9, 10, 5),
            str(ROOT / "mesh" / "b.py"): _summary(20, 20),
            str(ROOT / "mesh" / "cluster" / "c.py"): _summary(4, 1),
        }
    )
    assert {name: (t.covered, t.total) for name, t in figures.items()} == {
        "mesh": (34, 40),
        "mesh/cluster": (1, 4),
    }
    assert figures["mesh"].percent == pytest.approx(85.0)


def test_a_drop_within_the_tolerance_passes_and_beyond_it_fails() -> None:
    assert ratchet.problems({"mesh": 90.0}, {"mesh": 89.5}, 0.5) == []
    (line,) = ratchet.problems({"mesh": 90.0}, {"mesh": 89.4}, 0.5)
    assert line == "mesh: 89.4 % is under its floor 90.0 % by more than the tolerance (0.5 points)"


def test_a_package_without_a_floor_and_a_floor_without_a_package_both_fail() -> None:
    found = ratchet.problems({"mesh": 90.0, "gone": 50.0}, {"mesh": 95.0, "mesh/new": 12.0}, 0.5)
    assert found == [
        "gone: has a floor but was not measured (gone? `make coverage-ratchet` drops it)",
        "mesh/new: measured 12.0 % but has no floor (`make coverage-ratchet` adds it)",
    ]


def test_raising_moves_a_floor_up_to_the_figure_never_down() -> None:
    assert ratchet.risen({"up": 80.0, "down": 80.0}, {"up": 84.37, "down": 70.0, "new": 51.29}) == {
        "down": 80.0,
        "new": 51.2,
        "up": 84.3,
    }


def test_the_committed_floors_name_packages_that_exist() -> None:
    floors = json.loads((ROOT / "tests" / "coverage-floor.json").read_text())
    assert 0 < floors["tolerance"] <= 2
    for name, floor in floors["packages"].items():
        assert (ROOT / name / "__init__.py").is_file() or (ROOT / name).is_dir(), name
        assert 0 <= floor <= 100, name
