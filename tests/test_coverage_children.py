"""Coverage's settings for the suite's children (tests/_coverage.py): same lines, no walk.

A real child is started with the settings ``make test`` hands its children, once as
coverage.py makes them and once as the suite rewrites them, and the two data files are
compared: the same arcs in every file the child ran, and no list of the files it did not.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from coverage.config import read_coverage_config
from coverage.data import CoverageData

from tests import _coverage

ROOT = Path(__file__).resolve().parent.parent
#: A measured tree, and the one module of it (with its package and what it imports) a child runs.
TREE = ROOT / "transports"
RUN = "transports._lines"
RAN = {"__init__.py", "_base.py", "_lines.py"}
#: A child that imports one small module: seconds even under load.
CHILD_TIMEOUT = 60


def _settings(data_file: Path, source: list[str]) -> str:
    """What coverage.py's subprocess patch hands children: the repository's settings.

    Read without making a ``coverage.Coverage``: one made in a process whose coverage the
    subprocess hook started (a pytest-xdist worker) tells that coverage not to save.
    """
    config = read_coverage_config(
        config_file=str(ROOT / "pyproject.toml"),
        warn=_refuse,
        data_file=str(data_file),
        source=source,
    )
    return config.serialize()


def _refuse(message: str) -> None:
    raise AssertionError(f"coverage.py warned reading the settings: {message}")


def _decoded(serialized: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(serialized))
    return decoded


def _child(settings: str, where: Path) -> CoverageData:
    """Run a child that imports ``RUN`` under ``settings``, in ``where``; its data."""
    env = {**os.environ, _coverage.CHILD_SETTINGS: settings, "PYTHONPATH": str(ROOT)}
    env.pop("COVERAGE_PROCESS_START", None)
    command = [sys.executable, "-c", f"import {RUN}"]
    subprocess.run(command, cwd=where, env=env, check=True, timeout=CHILD_TIMEOUT)
    (path,) = (where / "data").glob(".coverage.*")
    data = CoverageData(str(path))
    data.read()
    return data


def test_children_trace_the_source_trees_through_include_globs(tmp_path: Path) -> None:
    given = _settings(tmp_path / ".coverage", [str(TREE)])
    lighter = _coverage.for_children(given)
    assert lighter is not None
    before, after = _decoded(given), _decoded(lighter)
    assert after["source"] is None
    assert after["run_include"] == [os.path.join(os.path.realpath(TREE), "*")]
    assert after["run_omit"] == [str(ROOT / "mesh" / "demo" / "_llama.py")]
    unchanged = {k for k in before if k not in {"source", "run_include", "run_omit"}}
    assert {k: after[k] for k in unchanged} == {k: before[k] for k in unchanged}


def test_settings_with_no_source_directory_are_left_as_they_are(tmp_path: Path) -> None:
    assert _coverage.for_children(_settings(tmp_path / ".coverage", [])) is None
    # A package's name, not a directory: no glob can stand for it.
    assert _coverage.for_children(_settings(tmp_path / ".coverage", ["json"])) is None


def test_a_child_records_the_same_arcs_and_only_the_files_it_ran(tmp_path: Path) -> None:
    as_made, rewritten = tmp_path / "as-made", tmp_path / "rewritten"
    results = []
    for where in (as_made, rewritten):
        where.mkdir()
        settings = _settings(where / "data" / ".coverage", [str(TREE)])
        if where is rewritten:
            lighter = _coverage.for_children(settings)
            assert lighter is not None
            settings = lighter
        results.append(_child(settings, where))
    full, light = results
    ran = {path for path in full.measured_files() if full.arcs(path)}
    assert {Path(path).name for path in ran} == RAN
    # As coverage.py makes them, the child also lists every module of the tree it never ran.
    assert len(full.measured_files()) > len(ran)
    assert light.measured_files() == ran
    assert all(light.arcs(path) == full.arcs(path) for path in ran)


def test_the_suite_rewrites_what_its_children_are_handed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> None:
    given = _settings(tmp_path / ".coverage", [str(TREE)])
    monkeypatch.setenv(_coverage.CHILD_SETTINGS, given)
    _coverage.pytest_configure(pytestconfig)
    assert os.environ[_coverage.CHILD_SETTINGS] == _coverage.for_children(given)
