"""The targets the issues set, each worked out from one run's figures and printed with it.

A target is a bound on a figure or on a ratio of figures measured in the same run
(docs/performance.md says why ratios). Each check names what it divides, the
backend it ran on, the measured value, the bound, and whether it holds; a check
whose figures the run did not measure (``--only``, ``--backend``, a failed
scenario) says so instead of guessing.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bench._quiet import Spread, paired_values, settled, verdict_margin

__all__ = ["Check", "Measured", "evaluate", "format_targets", "wanted", "wanted_pairs"]

BACKENDS = ("asyncio", "trio")


class Measured(float):
    """A target's value with the spread of what it is the median of (None: one figure)."""

    spread: Spread | None

    def __new__(cls, value: float, spread: Spread | None = None) -> Measured:
        made = super().__new__(cls, value)
        made.spread = spread
        return made

    @classmethod
    def of(cls, values: Sequence[float]) -> Measured:
        spread = Spread.of(values)
        return cls(spread.median, spread)


#: A group's members as a target names them, ((scenario, backend), ...), and the mode.
PairKey = tuple[tuple[tuple[str, str], ...], str]


@dataclass(frozen=True, slots=True)
class Check:
    target: str  # the words, short
    backend: str
    value: float | None  # None: not measured in this run
    bound: float
    at_least: bool  # value >= bound holds (else value <= bound)
    unit: str  # "x" for a ratio, else the figure's unit
    #: A figure load does not move (memory): its verdict needs no wide margin.
    steady: bool = False

    @property
    def holds(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    @property
    def rounds(self) -> int:
        spread = getattr(self.value, "spread", None)
        return spread.count if spread is not None else 1

    @property
    def settled(self) -> bool:
        """True if every round, and a margin more (`bench._quiet.verdict_margin`), lies on
        one side of the bound: a run as noisy again would give the same verdict."""
        if self.value is None:
            return False
        spread = getattr(self.value, "spread", None)
        low, high = (spread.low, spread.high) if spread is not None else (self.value,) * 2
        margin = verdict_margin(self.rounds, steady=self.steady)
        return settled(min(low, self.value), max(high, self.value), self.bound, margin)

    @property
    def verdict(self) -> str:
        """holds / MISSED, the median's, and "unsettled" when the bound is within reach."""
        word = "holds" if self.holds else "MISSED"
        return word if self.settled else f"{word}, unsettled"


class _Figures:
    """A run's figures by (scenario, mode, backend); a baseline that runs on one backend
    only (the fan-out and idle servers, bare NATS) answers for both.

    A ratio is taken per round of the pair the harness measured back to back
    (``report["pairs"]``) and its median kept with its spread; a run without
    that pair (an old report, a pair not planned) falls back to the repeats by
    index.
    """

    def __init__(self, report: dict[str, Any]) -> None:
        self._rows = report["results"]
        self._pairs = report.get("pairs", [])

    def _row(
        self, scenario: str, mode: str, backend: str, *, baseline: bool
    ) -> dict[str, Any] | None:
        rows = [r for r in self._rows if r["scenario"] == scenario and r["mode"] == mode]
        same = [r for r in rows if r["backend"] == backend]
        return next(iter(same or (rows if baseline else [])), None)

    def get(
        self, scenario: str, mode: str, backend: str, figure: str, *, baseline: bool = False
    ) -> float | None:
        row = self._row(scenario, mode, backend, baseline=baseline)
        value = row["figures"].get(figure) if row else None
        if not value or row is None:
            return None
        repeats = [r[figure] for r in row.get("repeats", []) if r.get(figure)]
        spread = Spread.of(repeats) if repeats else None
        return Measured(float(value), spread)

    def paired(
        self,
        members: Sequence[tuple[str, str]],
        mode: str,
        figure: str,
        combine: Callable[..., float],
    ) -> float | None:
        """`combine` of `figure` across `members` ((scenario, backend), A first), per round.

        Asking declares the group: the harness finds every group the targets ask
        for (`wanted_pairs`) and measures its members back to back, round by round.
        """
        key = [list(member) for member in members]
        for entry in self._pairs:
            if entry["members"] == key and entry["mode"] == mode:
                values = paired_values(entry["rounds"], figure, combine)
                if values:
                    return Measured.of(values)
        rows = [
            self._row(name, mode, backend, baseline=i > 0)
            for i, (name, backend) in enumerate(members)
        ]
        if any(row is None or not row["figures"].get(figure) for row in rows):
            return None
        runs = [r.get("by_round") or r.get("repeats", []) for r in rows if r]
        by_index = paired_values(list(zip(*runs, strict=False)), figure, combine)
        value = combine(*(r["figures"][figure] for r in rows if r))
        return Measured(value, Spread.of(by_index) if by_index else None)

    def ratio(self, mine: str, theirs: str, mode: str, backend: str, figure: str) -> float | None:
        """`mine` / `theirs` on `figure`: a pair, measured back to back (see `paired`)."""
        return self.paired(((mine, backend), (theirs, backend)), mode, figure, operator.truediv)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)


class _Recorder(_Figures):
    """Runs the rules before the run to learn which groups and figures they ask for.

    `rows` are the planned cases as rules see rows (scenario, mode, backend, metric),
    so a rule that walks the rows (trio against asyncio) declares its pairs too.
    """

    def __init__(self, rows: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__({"results": list(rows)})
        self.asked: list[PairKey] = []
        self.read: list[tuple[str, str, str]] = []

    def get(
        self, scenario: str, mode: str, backend: str, figure: str, *, baseline: bool = False
    ) -> float | None:
        self.read.append((scenario, mode, backend))
        return 1.0

    def paired(
        self,
        members: Sequence[tuple[str, str]],
        mode: str,
        figure: str,
        combine: Callable[..., float],
    ) -> float | None:
        self.asked.append((tuple((name, backend) for name, backend in members), mode))
        return 1.0


def wanted_pairs(rows: Sequence[dict[str, Any]] = ()) -> list[PairKey]:
    """Every group a target asks for (`_Figures.ratio`, `_Figures.paired`), in order;
    with `rows` (the planned cases), also those of the rules that walk the rows."""
    return wanted(rows)[0]


def wanted(rows: Sequence[dict[str, Any]] = ()) -> tuple[list[PairKey], list[tuple[str, str, str]]]:
    """The groups the targets divide, and the single figures they read ((scenario, mode,
    backend)): what a run must measure in every round for its verdicts."""
    recorder = _Recorder(rows)
    for _, rule in RULES:
        list(rule(recorder))
    return list(dict.fromkeys(recorder.asked)), list(dict.fromkeys(recorder.read))


Rule = Callable[[_Figures], Iterator[Check]]


def _core(f: _Figures) -> Iterator[Check]:
    """Against the physical limit in the same run: two tasks ping-ponging a message."""
    for backend in BACKENDS:
        ratio = f.ratio("mesh-memory", "loop-pingpong", "sequential", backend, "calls_per_s")
        yield Check("in-process sequential / loop ping-pong", backend, ratio, 0.6, True, "x")


def _stdio(f: _Figures) -> Iterator[Check]:
    for backend in BACKENDS:
        ratio = f.ratio("mesh-stdio", "mcp-stdio", "sequential", backend, "calls_per_s")
        yield Check("stdio sequential / MCP SDK stdio", backend, ratio, 10.0, True, "x")
    for backend in BACKENDS:
        ratio = f.ratio("mesh-stdio", "pipe-raw", "sequential", backend, "calls_per_s")
        yield Check("stdio sequential / raw pipe", backend, ratio, 0.8, True, "x")


def _websocket(f: _Figures) -> Iterator[Check]:
    for mode in ("sequential", "inflight64"):
        for backend in BACKENDS:
            ratio = f.ratio("mesh-ws", "ws-raw", mode, backend, "calls_per_s")
            yield Check(f"WebSocket {mode} / raw websockets", backend, ratio, 0.8, True, "x")


def _trio(f: _Figures) -> Iterator[Check]:
    for row in f.rows():
        if row["backend"] != "trio" or not row["scenario"].startswith(("mesh-", "cluster-")):
            continue
        metric = row.get("metric", "calls_per_s")
        # less is better: asyncio's / trio's, so more is better here
        order = [(row["scenario"], "trio"), (row["scenario"], "asyncio")]
        ratio = (
            f.paired(order, row["mode"], metric, operator.truediv)
            if row["higher_is_better"]
            else f.paired(order[::-1], row["mode"], metric, operator.truediv)
        )
        target = f"trio / asyncio, {row['scenario']} {row['mode']}"
        yield Check(target, "trio", ratio, 0.8, True, "x")


def _broadcast(f: _Figures) -> Iterator[Check]:
    for backend in BACKENDS:
        ratio = f.ratio("mesh-broadcast", "ws-fanout", "clients1000", backend, "p50_us")
        yield Check(
            "broadcast to 1,000 / raw fan-out, time to last", backend, ratio, 1.2, False, "x"
        )


def _idle(f: _Figures) -> Iterator[Check]:
    for mode, links in (("conns1000", "1,000"), ("conns10000", "10,000")):
        for backend in BACKENDS:
            kib = f.get("mesh-idle", mode, backend, "kib_per_conn")
            yield Check(f"KiB per idle link at {links}", backend, kib, 20.0, False, "KiB", True)


def _opening(f: _Figures) -> Iterator[Check]:
    """A mesh link (handshake with ``agent/info``) against a bare websockets connection."""
    for mode, links in (("conns1000", "1,000"), ("conns10000", "10,000")):
        for backend in BACKENDS:
            ratio = f.ratio("mesh-idle", "ws-idle", mode, backend, "open_per_s")
            yield Check(
                f"{links} links opened per second / raw websockets", backend, ratio, 0.9, True, "x"
            )


def _mcp(f: _Figures) -> Iterator[Check]:
    for mode in ("sequential", "inflight64"):
        for backend in BACKENDS:
            ratio = f.ratio("mesh-mcp-mount", "mcp-stdio", mode, backend, "p50_us")
            yield Check(f"MCP mount p50 / SDK direct, {mode}", backend, ratio, 1.2, False, "x")
    for mine, theirs, wire in (
        ("mesh-mcp-serve", "mcp-server-raw", "stdio"),
        ("mesh-mcp-http", "mcp-server-http", "HTTP"),
    ):
        # 5x the SDK's server is asked with 64 in flight; one call at a time is bounded by
        # the process hops it crosses, so it is judged against their raw relay below.
        for backend in BACKENDS:
            ratio = f.ratio(mine, theirs, "inflight64", backend, "calls_per_s")
            yield Check(
                f"MCP serving / MCPServer, {wire} inflight64", backend, ratio, 5.0, True, "x"
            )
    for mine, floor, wire in (
        ("mesh-mcp-serve", "mcp-relay-raw", "stdio"),
        ("mesh-mcp-http", "mcp-relay-http-raw", "HTTP"),
    ):
        for backend in BACKENDS:
            ratio = f.ratio(mine, floor, "sequential", backend, "calls_per_s")
            yield Check(
                f"MCP serving / raw relay of its hops, {wire} sequential",
                backend,
                ratio,
                0.8,
                True,
                "x",
            )


def _a2a(f: _Figures) -> Iterator[Check]:
    for mode in ("sequential", "inflight64"):
        for backend in BACKENDS:
            ratio = f.ratio("mesh-a2a-serve", "a2a-server-sdk", mode, backend, "calls_per_s")
            yield Check(f"A2A serving / the SDK's server, {mode}", backend, ratio, 5.0, True, "x")
    for mode in ("sequential", "inflight64"):
        for backend in BACKENDS:
            ratio = f.ratio("mesh-a2a-mount", "a2a-client-sdk", mode, backend, "p50_us")
            yield Check(
                f"A2A mount p50 / SDK client direct, {mode}", backend, ratio, 1.2, False, "x"
            )


#: Across daemons / (one daemon + bare NATS): the issue's bound per backend (under trio
#: every NATS operation crosses to nats-py's asyncio thread and back).
CLUSTER_BOUND = {"asyncio": 1.3, "trio": 2.0}


def _sequential_sum(remote: float, *floor: float) -> float:
    return remote / sum(floor)


def _inflight_sum(remote: float, *floor: float) -> float:
    return (1 / remote) / sum(1 / rate for rate in floor)


#: What a cross-daemon call is set against, each part measured in the same round: the
#: local call and one bare NATS request/reply; then the same and the signatures the call
#: pays, which a bare request/reply does not (`daemon-signatures`: its request and its
#: answer each signed and checked; with 64 in flight, a 64th of them, as its frames
#: travel 64 to a message).
_CLUSTER_FLOORS = (
    ("local + bare NATS", "local + bare NATS", ("cluster-local", "nats-raw")),
    (
        "local + bare NATS + its 4 signature operations",
        "local + bare NATS + its share of 4 signature operations",
        ("cluster-local", "nats-raw", "daemon-signatures"),
    ),
)


def _cluster(f: _Figures) -> Iterator[Check]:
    """Across daemons vs its floor (one daemon + one bare NATS request/reply, then with the
    call's signatures too): latencies add when sequential; with 64 in flight, time per
    call (1 / rate) adds. A floor's parts are measured back to back with the call across
    daemons, round by round (bare NATS stands in from asyncio on trio)."""
    for sequential, in_flight, parts in _CLUSTER_FLOORS:
        for mode, figure, combine, what in (
            ("sequential", "p50_us", _sequential_sum, f"p50 / ({sequential}), sequential"),
            (
                "inflight64",
                "calls_per_s",
                _inflight_sum,
                f"time per call / ({in_flight}), 64 in flight",
            ),
        ):
            for backend in BACKENDS:
                members = (("cluster-remote", backend), *((part, backend) for part in parts))
                ratio = f.paired(members, mode, figure, combine)
                bound = CLUSTER_BOUND[backend]
                yield Check(f"cross-daemon {what}", backend, ratio, bound, False, "x")
    for backend in BACKENDS:
        rate = f.get("cluster-registry", "agents10000", backend, "mirrored_per_s")
        yield Check("registry via KV, 10,000 agents mirrored", backend, rate, 20_000, True, "/s")
    for backend in BACKENDS:
        ratio = f.ratio("cluster-registry", "kv-raw", "agents10000", backend, "mirrored_per_s")
        yield Check("registry via KV / bare nats-py KV, 10,000", backend, ratio, 0.5, True, "x")


def _observability(f: _Figures) -> Iterator[Check]:
    for scenario, where in (("obs-stdio", "stdio"), ("obs-memory", "in-process")):
        for backend in BACKENDS:
            ratio = f.ratio(scenario, f"{scenario}-bare", "sequential", backend, "calls_per_s")
            yield Check(
                f"{where} sequential, metrics on and tracing off / no hooks",
                backend,
                ratio,
                0.97,
                True,
                "x",
            )


RULES: tuple[tuple[str, Rule], ...] = (
    ("in-process against the physical limit (issue 30)", _core),
    ("stdio (issue 17)", _stdio),
    ("WebSocket (issue 17)", _websocket),
    ("broadcast (issue 17)", _broadcast),
    ("idle links (issue 17)", _idle),
    ("links that open in one round trip (issue 30)", _opening),
    ("trio against asyncio (issue 17)", _trio),
    ("MCP both ways (issue 14)", _mcp),
    ("A2A both ways (issue 25)", _a2a),
    ("cluster (issues 16, 30)", _cluster),
    ("observability costs at most 3 % (issue 26)", _observability),
)


def evaluate(report: dict[str, Any]) -> list[tuple[str, list[Check]]]:
    figures = _Figures(report)
    return [(title, list(rule(figures))) for title, rule in RULES]


def _number(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"


def _value(check: Check) -> str:
    return "-" if check.value is None else _number(check.value, check.unit)


def _spread(check: Check) -> str:
    """The lowest and highest of what the value is the median of, and how many."""
    spread = getattr(check.value, "spread", None)
    if spread is None or spread.count < 2:
        return "(one figure)"
    unit = "x" if check.unit == "x" else ""
    low, high = _number(spread.low, unit).strip(), _number(spread.high, unit).strip()
    return f"[{low} .. {high}, n={spread.count}]"


def _bound(check: Check) -> str:
    sign = ">=" if check.at_least else "<="
    bound = f"{check.bound:g}x" if check.unit == "x" else f"{check.bound:,g} {check.unit}"
    return f"{sign} {bound}"


def format_targets(report: dict[str, Any]) -> str:
    """Every target with its measured value; sections with nothing measured are left out."""
    lines = [
        "",
        "targets (each a figure or a ratio within this run; a ratio is the median of one per"
        " round of its pair measured back to back, [lowest .. highest, rounds]; a verdict is"
        " 'unsettled' when its bound lies within that range widened by 25 % for one figure,"
        " 10 % for two rounds, 5 % for three or more (5 % for memory): a repeated run may"
        " give the other verdict):",
    ]
    counts = {"held": 0, "missed": 0, "unsettled": 0}
    for title, checks in evaluate(report):
        measured = [c for c in checks if c.value is not None]
        if not measured:
            continue
        lines.append(f"  {title}")
        width = max(len(c.target) for c in measured)
        for check in measured:
            counts["held" if check.holds else "missed"] += 1
            counts["unsettled"] += not check.settled
            lines.append(
                f"    {check.target.ljust(width)}  {check.backend:7}  {_value(check):>12}"
                f"  {_spread(check):<24}  {_bound(check):>14}  {check.verdict}"
            )
    if counts["held"] + counts["missed"] == 0:
        return ""
    lines.append(
        f"  {counts['held']} held, {counts['missed']} missed, {counts['unsettled']} of them"
        " unsettled (docs/performance.md says why where one is missed)"
    )
    return "\n".join(lines)
