"""Run ONE scenario in ONE mode on ONE backend, in this fresh process; print its result.

The harness (`python -m bench`) starts this module once per measurement and
reads the last stdout line starting with ``RESULT `` as JSON. Anything else on
stdout or stderr is kept only to explain a failure. Usable by hand too::

    python -m bench.run_one ws-raw --mode inflight64 --backend trio --duration 2
"""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from bench._registry import BACKENDS, Measurement, RunContext, get_scenario

RESULT_PREFIX = "RESULT "


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run_one", description=__doc__)
    parser.add_argument("scenario")
    parser.add_argument("--mode", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="asyncio")
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--module", help="the module that registers the scenario (import only it)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    scenario = get_scenario(args.scenario, args.module)
    if args.mode not in scenario.modes:
        sys.exit(f"{scenario.name} has no mode {args.mode!r}; it has {scenario.modes}")
    if args.backend not in scenario.backends:
        sys.exit(f"{scenario.name} does not run on {args.backend}; it runs on {scenario.backends}")
    ctx = RunContext(
        mode=args.mode,
        backend=args.backend,
        duration=args.duration,
        warmup=args.warmup,
        smoke=args.smoke,
    )
    result: Measurement = anyio.run(scenario.run, ctx, backend=args.backend)
    line = {"figures": result.figures(), "samples": result.samples, "notes": result.notes}
    sys.stdout.write(RESULT_PREFIX + json.dumps(line) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
