"""``python -m bench``: run the scenarios, print the table, write the JSON.

python -m bench                        # everything, asyncio and trio, within ~20 min
python -m bench --thorough             # longer windows, 5 rounds, no time budget (~1.5 h)
python -m bench --smoke                # seconds: every scenario once, tiny windows
python -m bench --only ws-raw --only pipe-raw --backend trio --repeat 3
python -m bench --only mesh-stdio --without mcp-stdio --mode sequential
python -m bench --list
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench._cpu import cpu_probe_ms
from bench._harness import (
    Case,
    Group,
    Settings,
    estimate_plan_s,
    plan_blocks,
    plan_cases,
    plan_groups,
    run_cases,
)
from bench._quiet import MAX_ATTEMPTS, QuietPolicy, calibrate_tolerance
from bench._registry import BACKENDS, Backend, all_scenarios
from bench._report import build_report, format_table, machine_header, write_json
from bench._targets import evaluate, format_targets, wanted

#: Identical code measured twice in one run differs by up to ~25% on a shared
#: 2-core machine; the median of 3 interleaved rounds is what ratios can rest on.
DEFAULT_REPEAT = 3
#: A run of one case takes ~3.5 s on a quiet 2-core machine with 1 s windows and
#: ~6 s beside a CPU hog (most of it is processes starting); the budget lets three
#: rounds of the targets' cases fit quiet and about two under load, and bounds the
#: run either way.
DEFAULT_DURATION_S = 1.0
DEFAULT_WARMUP_S = 0.3
DEFAULT_BUDGET_MIN = 22.0
#: Attempts at a noisy measurement: one repeat by default, more with --thorough.
DEFAULT_MAX_ATTEMPTS = 2
#: --thorough: the windows and rounds of a careful run, however long it takes.
THOROUGH = {"duration": 2.0, "warmup": 0.5, "repeat": 5, "max_attempts": MAX_ATTEMPTS}
#: Probe readings taken back to back at start, to learn how far it moves at rest.
CALIBRATION_READINGS = 12
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: --smoke: long enough for every code path to run, short enough for CI.
SMOKE_DURATION_S = 0.3
SMOKE_WARMUP_S = 0.1
#: Repeating noisy runs may add at most this share of the planned runs' time...
REPEAT_SHARE = 0.5
#: ... and of the run's time budget.
BUDGET_REPEAT_SHARE = 0.2
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
    parser.add_argument("--duration", type=float, help="measured seconds per run (default 1)")
    parser.add_argument("--warmup", type=float, help="discarded seconds first (default 0.3)")
    parser.add_argument(
        "--repeat",
        "--rounds",
        dest="repeat",
        type=int,
        help="rounds (runs per case), median reported (default 3; 1 with --smoke)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="MIN",
        help=f"minutes the run may take; later rounds give way (default {DEFAULT_BUDGET_MIN:g};"
        " 0: none)",
    )
    parser.add_argument(
        "--thorough",
        action="store_true",
        help="2 s windows after 0.5 s, 5 rounds, 4 attempts at a noisy run, no budget, and"
        " the long modes (10,000 idle links)",
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
        " (default 2, --thorough 4, --smoke 1)",
    )
    parser.add_argument("--no-env-tweaks", action="store_true", help="omit MALLOC_* settings")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="JSON directory")
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    parser.add_argument("--plan", action="store_true", help="print the plan and exit")
    parser.add_argument(
        "--verbose", action="store_true", help="name each measurement as it starts, with its pid"
    )
    return parser.parse_args(argv)


def _backends(args: argparse.Namespace) -> list[Backend]:
    if args.backend in BACKENDS:
        return [args.backend]
    if args.backend is None and args.smoke:
        return ["asyncio"]
    return list(BACKENDS)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    # SIGTERM stops the run as Ctrl-C does: the measurements under way die with it.
    signal.signal(signal.SIGTERM, _interrupt)
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
        chosen = set(args.only)
        chosen |= {b for s in scenarios if s.name in chosen for b in s.baselines}
        scenarios = [s for s in scenarios if s.name in chosen]
    scenarios = [s for s in scenarios if s.name not in set(args.without or ())]
    settings = _settings(args)
    backends = _backends(args)
    # A mode asked by name runs even if it is one of the long ones --thorough keeps.
    every_mode = args.thorough or bool(args.mode)
    cases = plan_cases(scenarios, backends, smoke=settings.smoke, thorough=every_mode)
    if args.mode:
        cases = [case for case in cases if case.mode in args.mode]
    pairs, read = wanted(_rows(cases))
    groups = [] if args.no_pairs else plan_groups(cases, pairs)
    # What no target reads runs in one round (--thorough: in every round).
    targeted = {c for g in groups for c in g.cases}
    targeted |= {c for c in cases if (c.scenario.name, c.mode, c.backend) in read}
    once = [] if args.thorough or args.no_pairs else [c for c in cases if c not in targeted]
    planned = estimate_plan_s(cases, settings, once)
    # Repeats of noisy runs may add at most half the planned runs' time, and a fifth
    # of the run's budget: the rounds matter more than a quieter single run.
    repeats = REPEAT_SHARE * planned
    if settings.budget_s is not None:
        repeats = min(repeats, BUDGET_REPEAT_SHARE * settings.budget_s)
    settings = replace(settings, repeat_budget_s=repeats)
    if not settings.smoke:
        settings = _calibrated(settings)
    header = machine_header(settings, list(backends))
    started = time.monotonic()
    print(_plan_text(cases, groups, once, settings, planned), file=sys.stderr)
    if args.plan:
        for block in plan_blocks(cases, groups):
            print("  " + " | ".join(c.label for c in block.cases), file=sys.stderr)
        return 0
    results, group_results = run_cases(
        cases,
        settings,
        progress=lambda line: print(line, file=sys.stderr),
        groups=groups,
        once=once,
    )
    wall = {"wall_s": round(time.monotonic() - started, 1)}
    report = build_report(results, header | wall, group_results)
    report["targets"] = [
        {
            "section": title,
            **asdict(check),
            "spread": asdict(spread) if (spread := getattr(check.value, "spread", None)) else None,
            "holds": check.holds,
            "settled": check.settled,
            "verdict": check.verdict,
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


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the flags: --smoke's, --thorough's or make bench's defaults."""
    if args.smoke:
        defaults = {"duration": SMOKE_DURATION_S, "warmup": SMOKE_WARMUP_S, "repeat": 1}
        defaults["max_attempts"] = 1
    elif args.thorough:
        defaults = dict(THOROUGH)
    else:
        defaults = {"duration": DEFAULT_DURATION_S, "warmup": DEFAULT_WARMUP_S}
        defaults |= {"repeat": DEFAULT_REPEAT, "max_attempts": DEFAULT_MAX_ATTEMPTS}
    minutes = DEFAULT_BUDGET_MIN if args.budget is None else args.budget
    unbounded = args.smoke or (args.thorough and args.budget is None)
    return Settings(
        duration=args.duration if args.duration is not None else defaults["duration"],
        warmup=args.warmup if args.warmup is not None else defaults["warmup"],
        repeat=max(1, args.repeat or int(defaults["repeat"])),
        smoke=args.smoke,
        env_tweaks=not args.no_env_tweaks,
        jobs=args.jobs or (SMOKE_JOBS if args.smoke else 1),
        quiet=QuietPolicy(max_attempts=max(1, args.max_attempts or int(defaults["max_attempts"]))),
        budget_s=None if unbounded or minutes <= 0 else minutes * 60,
        verbose=args.verbose,
    )


def _calibrated(settings: Settings) -> Settings:
    """The probe's tolerance for this run: how far it moves at rest, right now."""
    readings = [cpu_probe_ms() for _ in range(CALIBRATION_READINGS)]
    tolerance = calibrate_tolerance(readings, floor=settings.quiet.tolerance)
    return replace(settings, quiet=replace(settings.quiet, tolerance=tolerance))


def _rows(cases: list[Case]) -> list[dict[str, Any]]:
    """The planned cases as the target rules see a report's rows."""
    return [
        {
            "scenario": c.scenario.name,
            "mode": c.mode,
            "backend": c.backend,
            "metric": c.scenario.metric,
            "higher_is_better": c.scenario.higher_is_better,
            "figures": {},
        }
        for c in cases
    ]


def _plan_text(
    cases: list[Case], groups: list[Group], once: list[Case], settings: Settings, planned_s: float
) -> str:
    """What the run will do and how long it should take, before it starts."""
    blocks = plan_blocks(cases, groups)
    runs = sum(
        1 if c in once else min(settings.repeat, c.scenario.max_repeat or settings.repeat)
        for c in cases
    )
    budget = (
        f"budget {settings.budget_s / 60:.0f} min: a block of a later round that would end"
        " past it is left out"
        if settings.budget_s
        else "no time budget"
    )
    return (
        f"plan: {len(cases)} cases in {len(blocks)} blocks ({len(groups)} pairs or groups"
        f" measured back to back), {settings.repeat} round(s) of the {len(cases) - len(once)}"
        f" the targets read, one of the other {len(once)}: {runs} runs of"
        f" {settings.warmup:g} + {settings.duration:g} s, ~{planned_s / 60:.0f} min on a quiet"
        f" machine; {budget}. A run whose CPU probe moved more than"
        f" {settings.quiet.tolerance:.0%} (the probe's own move at rest, at least 25 %) is"
        f" made again, at most {settings.quiet.max_attempts} attempts."
    )


if __name__ == "__main__":
    sys.exit(main())
