"""agent-mesh benchmarks: the mesh against its peers and the practical limits, in one run.

``python -m bench`` runs every registered scenario, each measurement in a fresh
process, and prints a table of calls/s, p50 and p99 with each figure's ratio to
its baseline; the same goes to ``bench/results/`` as JSON. A scenario is an
``async def run(ctx: RunContext) -> Measurement`` registered with `scenario`;
`measure_calls` times any ``async def call()`` one at a time or 64 in flight.
"""

from bench._children import Server, announce_port, die_with_parent, open_server, python_module
from bench._measure import encode_request, measure_calls
from bench._registry import Measurement, RunContext, Scenario, scenario

__all__ = [
    "Measurement",
    "RunContext",
    "Scenario",
    "Server",
    "announce_port",
    "die_with_parent",
    "encode_request",
    "measure_calls",
    "open_server",
    "python_module",
    "scenario",
]
