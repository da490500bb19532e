"""Garbage-collector settings for the processes the mesh owns (``mesh serve``, agents).

CPython starts a young-generation collection every 700 net allocations and
promotes survivors towards full collections that walk every live container. A
server holding thousands of links is mostly long-lived containers (sessions,
tasks, protocol objects), so with the defaults it spends its time re-scanning
them: measured in ``bench/`` (``mesh-idle``), a daemon opening 10,000 links slowed
to ~25 links/s past 5,000. Applications call :func:`tune_for_serving` once, after
start-up; a library never touches the collector.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["SERVING_THRESHOLDS", "tune_for_serving"]

#: Young collections every 50,000 allocations instead of 700; the older
#: generations keep CPython's own ratios (and 3.11's 25 %-growth rule for full ones).
SERVING_THRESHOLDS: Final = (50_000, 10, 10)


def tune_for_serving() -> None:
    """Freeze what start-up allocated (modules, settings) and collect less often."""
    gc.collect()
    gc.freeze()  # start-up objects never die: keep them out of every later scan
    gc.set_threshold(*SERVING_THRESHOLDS)
