"""The collector settings the mesh's own processes (daemon, agents) run with."""

from __future__ import annotations

import json
import subprocess
import sys

from mesh._sdk.gc_tuning import SERVING_THRESHOLDS

PROBE = """
import gc, json
from mesh._sdk.gc_tuning import tune_for_serving
before = gc.get_threshold()
tune_for_serving()
print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))
"""


def test_serving_processes_freeze_start_up_and_collect_less_often() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    before, after, frozen = json.loads(run.stdout)
    assert before == [700, 10, 10]  # CPython's defaults, until an application tunes them
    assert tuple(after) == SERVING_THRESHOLDS
    assert frozen > 1_000  # start-up objects are kept out of every later scan
