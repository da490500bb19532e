"""The run's header, each figure's ratio to its baseline, the printed table and the JSON.

Ratios are what survive a shared, noisy machine: a scenario is divided by its
baseline measured in the same run, in the same mode, on the same backend when
the baseline runs there (else on the baseline's own backend: the fan-out and
memory servers are asyncio-only). A trio row also carries its ratio to the
same scenario on asyncio, on the scenario's headline figure.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench._children import ENV_TWEAKS
from bench._cpu import cpu_probe_ms
from bench._harness import CaseResult, GroupResult, Settings

__all__ = ["build_report", "cpu_probe_ms", "format_table", "machine_header", "write_json"]

PACKAGES = ("websockets", "anyio", "trio", "httpx", "msgspec", "mcp", "uvicorn", "starlette", "h11")
MAIN_FIGURES = ("calls_per_s", "p50_us", "p99_us", "cpu_us_per_call")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_header(settings: Settings, backends: list[str]) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "backends": backends,
        "duration_s": settings.duration,
        "warmup_s": settings.warmup,
        "repeat": settings.repeat,
        "probe_tolerance": settings.quiet.tolerance,
        "max_attempts": settings.quiet.max_attempts,
        "budget_s": settings.budget_s,
        "smoke": settings.smoke,
        "env_tweaks": ENV_TWEAKS if settings.env_tweaks else {},
        "loadavg_start": os.getloadavg(),
        "cpu_probe_ms_start": round(cpu_probe_ms(), 1),
    }


def _find(results: list[CaseResult], name: str, mode: str, backend: str) -> CaseResult | None:
    rows = [r for r in results if r.case.scenario.name == name and r.case.mode == mode and r.runs]
    same = [r for r in rows if r.case.backend == backend]
    return (same or rows)[0] if rows else None


def _ratios(mine: dict[str, float], theirs: dict[str, float]) -> dict[str, float]:
    return {k: mine[k] / theirs[k] for k in mine if theirs.get(k)}


def build_report(
    results: list[CaseResult], header: dict[str, Any], groups: list[GroupResult] | None = None
) -> dict[str, Any]:
    rows = []
    for result in results:
        case, figures = result.case, result.median() if result.runs else {}
        base_rows = {
            name: row
            for name in case.scenario.baselines
            if (row := _find(results, name, case.mode, case.backend)) is not None
        }
        asyncio_row = _find(results, case.scenario.name, case.mode, "asyncio")
        trio_ratio = None
        if case.backend == "trio" and asyncio_row is not None and asyncio_row is not result:
            trio_ratio = _ratios(figures, asyncio_row.median()).get(case.scenario.metric)
        rows.append(
            {
                "scenario": case.scenario.name,
                "group": case.scenario.group,
                "mode": case.mode,
                "backend": case.backend,
                "metric": case.scenario.metric,
                "higher_is_better": case.scenario.higher_is_better,
                "figures": figures,
                # One entry per baseline measured: each figure as this / baseline.
                "vs": [
                    {
                        "baseline": name,
                        "backend": row.case.backend,
                        "ratios": _ratios(figures, row.median()),
                    }
                    for name, row in base_rows.items()
                ],
                "trio_vs_asyncio": trio_ratio,
                "repeats": result.runs,
                # Per round (None: failed or left out), so figures pair by round.
                "by_round": result.by_round,
                "samples": result.samples,
                "notes": result.notes,
                "errors": result.errors,
                "seconds": round(result.seconds, 1),
                "cpu_probes_ms": result.probes,
                "probe_moved": len(result.flagged),
                "repeated": result.repeated,
            }
        )
    header = header | {"loadavg_end": os.getloadavg(), "cpu_probe_ms_end": round(cpu_probe_ms(), 1)}
    pairs = [
        {
            # As the targets asked for them (bench._targets keys on this) ...
            "members": [list(member) for member in g.group.key[0]],
            "mode": g.group.key[1],
            # ... and what ran: a one-backend baseline stands in from its own backend.
            "measured": [c.label for c in g.group.cases],
            "rounds": g.rounds,
        }
        for g in groups or []
    ]
    return {"header": header, "results": rows, "pairs": pairs}


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _duration(us: float | None) -> str:
    if us is None:
        return ""
    if us < 1000:
        return f"{us:.0f} us"
    return f"{us / 1e3:.1f} ms" if us < 1e6 else f"{us / 1e6:.2f} s"


def _times(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}x"


def _first_ratios(row: dict[str, Any]) -> dict[str, float]:
    return row["vs"][0]["ratios"] if row["vs"] else {}


def _other(row: dict[str, Any]) -> str:
    """Figures beyond calls/s, p50, p99, and the headline ratio to further baselines."""
    ratios = _first_ratios(row)
    parts = []
    figures = row["figures"]
    headline_first = sorted(figures, key=lambda name: name != row["metric"])
    for name in headline_first:
        if name in MAIN_FIGURES:
            continue
        value = figures[name]
        text = f"{name}={value:,.0f}" if value == int(value) else f"{name}={value:,.1f}"
        if name in ratios:
            text += f" ({_times(ratios[name])})"
        parts.append(text)
    for other in row["vs"][1:]:
        ratio = other["ratios"].get(row["metric"])
        parts.append(f"{row['metric']} vs {other['baseline']}: {_times(ratio)}")
    return " ".join(parts)


def format_table(report: dict[str, Any]) -> str:
    h = report["header"]
    packages = ", ".join(f"{k} {v}" for k, v in h["packages"].items())
    tweaks = " ".join(f"{k}={v}" for k, v in h["env_tweaks"].items()) or "none"
    lines = [
        f"agent-mesh bench, {h['date']}",
        f"machine: {h['cores']} cores ({h['cpu']}), Python {h['python']}, {h['platform']}",
        f"load: {h['loadavg_start'][0]:.2f} -> {h['loadavg_end'][0]:.2f};"
        f" cpu probe {h['cpu_probe_ms_start']} -> {h['cpu_probe_ms_end']} ms (lower is faster)",
        f"packages: {packages}",
        f"run: backends {'/'.join(h['backends'])}, {h['duration_s']} s after {h['warmup_s']} s"
        f" warm-up, median of up to {h['repeat']} rounds, each measurement in a fresh process"
        + (" [SMOKE: figures meaningless]" if h["smoke"] else ""),
        f"env of benchmark children: {tweaks}",
        *([f"wall time: {h['wall_s'] / 60:.1f} min"] if "wall_s" in h else []),
        "",
    ]
    head = (
        "scenario",
        "mode",
        "backend",
        "vs",
        "calls/s",
        "x",
        "p50",
        "x",
        "p99",
        "x",
        "cpu/call",
        "x",
        "trio/aio",
    )
    table = [head]
    for row in report["results"]:
        f, r = row["figures"], _first_ratios(row)
        mark = "!" if row.get("probe_moved") else ""
        table.append(
            (
                row["scenario"] + mark,
                row["mode"],
                row["backend"],
                row["vs"][0]["baseline"] if row["vs"] else "-",
                _rate(f.get("calls_per_s")) if not row["errors"] or f else "FAILED",
                _times(r.get("calls_per_s")),
                _duration(f.get("p50_us")),
                _times(r.get("p50_us")),
                _duration(f.get("p99_us")),
                _times(r.get("p99_us")),
                _duration(f.get("cpu_us_per_call")),
                _times(r.get("cpu_us_per_call")),
                _times(row["trio_vs_asyncio"]),
            )
        )
    widths = [max(len(cells[i]) for cells in table) for i in range(len(head))]
    for cells, row in zip(table, [None, *report["results"]], strict=True):
        text = "  ".join(
            c.rjust(w) if i >= 4 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        extra = _other(row) if row else "other"
        lines.append(f"{text}  {extra}".rstrip())
    lines += [
        "",
        'x: this figure / its baseline\'s ("vs"), same mode, same backend where the baseline'
        " runs on it. More calls/s is better; less p50, p99, KiB is better.",
        "trio/aio: the headline figure on trio / the same scenario's on asyncio.",
        "cpu/call: CPU time of every process of the measurement (client, server, agent) in"
        " the window per call; it moves little with load where calls/s and latency do.",
    ]
    repeated = sum(row.get("repeated", 0) for row in report["results"])
    kept = sum(len(row["cpu_probes_ms"]) for row in report["results"])
    lines.append(
        f"noise: {repeated} run(s) made again because the CPU probe moved more than"
        f" {h.get('probe_tolerance', 0.25):.0%} inside them (the quietest of each kept);"
        f" {kept} kept."
    )
    moved = [row for row in report["results"] if row.get("probe_moved")]
    if moved:
        lines.append(
            f"! still noisy after the repeats allowed: {sum(r['probe_moved'] for r in moved)}"
            " run(s) (load changed; trust cpu/call over calls/s there): "
            + ", ".join(f"{r['scenario']} {r['mode']} {r['backend']} {_probes(r)}" for r in moved)
        )
    failures = [(row, e) for row in report["results"] for e in row["errors"]]
    lines += [
        f"FAILED {row['scenario']} {row['mode']} {row['backend']}: {e}" for row, e in failures
    ]
    return "\n".join(lines)


def _probes(row: dict[str, Any]) -> str:
    return " ".join(f"{a:.0f}->{b:.0f}ms" for a, b in row["cpu_probes_ms"])


def write_json(report: dict[str, Any], directory: Path, *, smoke: bool) -> list[Path]:
    """Write latest.json plus a timestamped copy (or smoke.json alone); return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2) + "\n"
    if smoke:
        names = ["smoke.json"]
    else:
        stamp = report["header"]["date"].replace(":", "").replace("-", "").replace("+0000", "Z")
        names = ["latest.json", f"{stamp}.json"]
    paths = [directory / name for name in names]
    for path in paths:
        path.write_text(text)
    return paths
