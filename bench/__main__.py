"""``python -m bench``: run the scenarios, print the table, write the JSON.

python -m bench                        # everything, asyncio and trio
python -m bench --smoke                # seconds: every scenario once, tiny windows
python -m bench --only ws-raw --only pipe-raw --backend trio --repeat 3
python -m bench --only mesh-stdio --without mcp-stdio --mode sequential
python -m bench --list
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench._harness import Settings, plan_cases, plan_groups, run_cases
from bench._quiet import MAX_ATTEMPTS, QuietPolicy
from bench._registry import BACKENDS, Backend, all_scenarios
from bench._report import build_report, format_table, machine_header, write_json
from bench._targets import evaluate, format_targets, wanted_pairs

#: Identical code measured twice in one run differs by up to ~25% on a shared
#: 2-core machine; the median of 3 interleaved runs is what ratios can rest on.
DEFAULT_REPEAT = 3
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: --smoke: long enough for every code path to run, short enough for CI.
SMOKE_DURATION_S = 0.3
SMOKE_WARMUP_S = 0.1
#: Repeating noisy runs may add at most this share of the planned runs' time.
REPEAT_SHARE = 0.5
#: --smoke runs overlap this much (its figures are not measurements anyway).
SMOKE_JOBS = 3


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI (asyncio only)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run this scenario and its baselines (repeatable)",
    )
    parser.add_argument(
        "--without",
        action="append",
        metavar="NAME",
        help="leave this scenario out, even as a baseline (repeatable)",
    )
    parser.add_argument(
        "--mode",
        action="append",
        metavar="MODE",
        help="run only this mode of each scenario, e.g. sequential (repeatable)",
    )
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], help="default: both")
    parser.add_argument("--duration", type=float, help="measured seconds per run (default 2)")
    parser.add_argument("--warmup", type=float, help="discarded seconds first (default 0.5)")
    parser.add_argument(
        "--repeat", type=int, help="runs per case, median reported (default 3; 1 with --smoke)"
    )
    parser.add_argument("--jobs", type=int, help="runs at once (default 1; 3 with --smoke)")
    parser.add_argument(
        "--no-pairs",
        action="store_true",
        help="measure each case alone (ratios from medians, not from back-to-back pairs)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        help="attempts at a measurement whose CPU probe moved, quietest kept"
        " (default 4, --smoke 1)",
    )
    parser.add_argument("--no-env-tweaks", action="store_true", help="omit MALLOC_* settings")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="JSON directory")
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    return parser.parse_args(argv)


def _backends(args: argparse.Namespace) -> list[Backend]:
    if args.backend in BACKENDS:
        return [args.backend]
    if args.backend is None and args.smoke:
        return ["asyncio"]
    return list(BACKENDS)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    scenarios = all_scenarios()
    if args.list:
        for s in scenarios:
            vs = f"vs {s.baseline}" if s.baseline else "baseline"
            print(f"{s.name:16} {s.group:10} {vs:18} {'/'.join(s.modes):24} {s.description}")
        return 0
    if args.only:
        unknown = set(args.only) - {s.name for s in scenarios}
        if unknown:
            sys.exit(f"unknown scenario(s) {sorted(unknown)}; see --list")
        wanted = set(args.only)
        wanted |= {b for s in scenarios if s.name in wanted for b in s.baselines}
        scenarios = [s for s in scenarios if s.name in wanted]
    scenarios = [s for s in scenarios if s.name not in set(args.without or ())]
    default_duration, default_warmup = (
        (SMOKE_DURATION_S, SMOKE_WARMUP_S) if args.smoke else (2.0, 0.5)
    )
    settings = Settings(
        duration=args.duration if args.duration is not None else default_duration,
        warmup=args.warmup if args.warmup is not None else default_warmup,
        repeat=max(1, args.repeat or (1 if args.smoke else DEFAULT_REPEAT)),
        smoke=args.smoke,
        env_tweaks=not args.no_env_tweaks,
        jobs=args.jobs or (SMOKE_JOBS if args.smoke else 1),
        quiet=QuietPolicy(
            max_attempts=max(1, args.max_attempts or (1 if args.smoke else MAX_ATTEMPTS))
        ),
    )
    backends = _backends(args)
    header = machine_header(settings, list(backends))
    started = time.monotonic()
    cases = plan_cases(scenarios, backends, smoke=settings.smoke)
    if args.mode:
        cases = [case for case in cases if case.mode in args.mode]
    groups = [] if args.no_pairs else plan_groups(cases, wanted_pairs())
    # Repeats may add at most half the planned runs' time (start-up ~2 s each).
    runs = settings.repeat * len(cases)
    settings = replace(
        settings, repeat_budget_s=REPEAT_SHARE * runs * (settings.warmup + settings.duration + 2)
    )
    results, group_results = run_cases(
        cases, settings, progress=lambda line: print(line, file=sys.stderr), groups=groups
    )
    wall = {"wall_s": round(time.monotonic() - started, 1)}
    report = build_report(results, header | wall, group_results)
    report["targets"] = [
        {
            "section": title,
            **asdict(check),
            "spread": asdict(spread) if (spread := getattr(check.value, "spread", None)) else None,
            "holds": check.holds,
        }
        for title, checks in evaluate(report)
        for check in checks
        if check.value is not None
    ]
    print(format_table(report))
    print(format_targets(report))
    for path in write_json(report, args.output, smoke=args.smoke):
        print(f"wrote {path}")
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
