"""``python -m soak [--duration 300]``: see the package docstring; prints its report."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from soak._fleet import VICTIMS, Fleet, Plan
from soak._load import Tally, call_loop, room_outcomes, run_room, watch_loop
from transports import TransportClosed, open_websocket

WATCHERS = 5
CALL_WORKERS = 8
MiB = 1 << 20


@dataclass
class Log:
    """What happened, in order, with the soak's clock."""

    started: float = field(default_factory=anyio.current_time)
    lines: list[str] = field(default_factory=list)
    rss: dict[str, int] = field(default_factory=dict)

    def __call__(self, text: str) -> None:
        line = f"{anyio.current_time() - self.started:6.1f} s  {text}"
        self.lines.append(line)
        print(line, file=sys.stderr, flush=True)


async def wait_online(fleet: Fleet, agents: list[str], timeout: float = 120) -> float:
    """Until every agent in ``agents`` is online (watching ``/agents/events``); seconds taken."""
    began = anyio.current_time()
    statuses: dict[str, str] = {}
    with anyio.fail_after(timeout):
        async with open_websocket(fleet.events, token=fleet.token) as events:
            while any(statuses.get(a) != "online" for a in agents):
                event = json.loads(await events.receive())
                shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
                statuses.update((agent["id"], agent["status"]) for agent in shown)
    return anyio.current_time() - began


async def wait_back(fleet: Fleet, agent: str, log: Log, what: str) -> None:
    """After a fault: until ``agent`` is online again after having been away; log how long."""
    began = anyio.current_time()
    away = False
    outcome = "back online"
    with anyio.move_on_after(120) as gave_up:
        try:
            async with open_websocket(fleet.events, token=fleet.token) as events:
                while True:
                    event = json.loads(await events.receive())
                    if event["type"] == "snapshot" or event["agent"]["id"] != agent:
                        continue
                    status = event["agent"]["status"]
                    away = away or status != "online" or event["type"] == "registered"
                    if away and status == "online":
                        break
        except TransportClosed as closed:
            outcome = f"not seen back ({closed.reason})"
    if gave_up.cancelled_caught:
        outcome = "not back within 120 s"
    log(f"{what}: {agent} {outcome} after {anyio.current_time() - began:.1f} s")


async def at(log: Log, fraction: float, duration: float) -> None:
    """Until ``fraction`` of the soak has passed (the schedule's clock, not a wait for state)."""
    await anyio.sleep(max(0.0, log.started + fraction * duration - anyio.current_time()))


async def faults(fleet: Fleet, tally: Tally, log: Log, tg: Any) -> None:
    """The schedule of faults, spread over the soak; returns when the soak is over."""
    d = fleet.plan.duration
    freeze = max(4 * fleet.plan.interval, 0.05 * d)  # past the TTL (3 intervals): offline

    async def hurt(fraction: float, what: str, agent: str, act: Callable[[], None]) -> None:
        await at(log, fraction, d)
        tg.start_soon(wait_back, fleet, agent, log, what)
        act()
        log(f"{what}: {agent}")

    await hurt(0.15, "SIGKILL", "victim-stdio", lambda: _kill(fleet.stdio_child("victim-stdio")))
    await hurt(0.25, "SIGSTOP", "victim-http", lambda: fleet.signal("victim-http", signal.SIGSTOP))
    await anyio.sleep(freeze)
    fleet.signal("victim-http", signal.SIGCONT)
    log("SIGCONT: victim-http")
    await hurt(0.35, "SIGKILL", "victim-dial", lambda: fleet.signal("victim-dial", signal.SIGKILL))
    await at(log, 0.40, d)
    await fleet.processes.pop("victim-dial").wait()
    await fleet.start_victim_dial()
    log("restarted the victim-dial process")
    await at(log, 0.55, d)
    await restart_daemon(fleet, tally, log)
    await hurt(0.70, "SIGSTOP", "victim-ws", lambda: fleet.signal("victim-ws", signal.SIGSTOP))
    await anyio.sleep(freeze)
    fleet.signal("victim-ws", signal.SIGCONT)
    log("SIGCONT: victim-ws")
    await at(log, 1.0, d)


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


async def restart_daemon(fleet: Fleet, tally: Tally, log: Log) -> None:
    log.rss["before the restart"] = fleet.daemon_rss()
    tally.windows.begin_restart()
    code = await fleet.stop_daemon()
    log(f"daemon stopped (SIGTERM) with exit status {code}; starting it again")
    await fleet.start_daemon()
    healthy = [*fleet.plan.echo_agents, *fleet.plan.personas]
    took = await wait_online(fleet, healthy)
    tally.windows.end_restart()
    log.rss["after the restart"] = fleet.daemon_rss()
    log(f"daemon restarted; every healthy agent online again after {took:.1f} s")


async def soak(plan: Plan, directory: Path) -> tuple[Tally, Log, Fleet]:
    fleet = Fleet(plan, directory)
    tally = Tally()
    log = Log()
    try:
        await fleet.start()
        agents = [*plan.echo_agents, *plan.personas, *VICTIMS]
        took = await wait_online(fleet, agents)
        log.started = anyio.current_time()
        log(f"the soak begins: {len(agents)} agents online ({took:.1f} s after the daemon)")
        log.rss["start"] = fleet.daemon_rss()
        healthy = frozenset([*plan.echo_agents, *plan.personas])
        async with anyio.create_task_group() as tg:
            for _ in range(WATCHERS):
                tg.start_soon(watch_loop, fleet, tally, healthy)
            for worker in range(CALL_WORKERS):
                tg.start_soon(call_loop, fleet, tally, worker, CALL_WORKERS)
            for number, fraction in ((1, 0.02), (2, 0.30), (3, 0.45)):
                tg.start_soon(_later, log, fraction, plan.duration, run_room, fleet, tally, number)
            await faults(fleet, tally, log, tg)
            tg.cancel_scope.cancel()
        log.rss["end"] = fleet.daemon_rss()
        await room_outcomes(fleet, tally)
        code = await fleet.stop_daemon()
        log(f"the soak is over; daemon stopped with exit status {code}")
    finally:
        await fleet.aclose()
    return tally, log, fleet


async def _later(
    log: Log,
    fraction: float,
    duration: float,
    action: Callable[..., Awaitable[None]],
    *args: Any,
) -> None:
    await at(log, fraction, duration)
    await action(*args)
    log(f"created {action.__name__.removeprefix('run_')} {args[-1]}")


def report(plan: Plan, tally: Tally, log: Log, fleet: Fleet) -> bool:
    per = plan.per_kind
    agents = 4 * per + len(VICTIMS) + len(plan.personas)
    out = [
        f"soak: {plan.duration:g} s, {agents} agents (stdio {per + 1}, http {per + 1}, "
        f"websocket {per + 1}, dial-in {per + 1}, persona stdio {len(plan.personas)}), "
        f"heartbeat interval {plan.interval:g} s, {WATCHERS} watchers, 3 rooms, "
        f"~{plan.rate:g} calls/s, backend {plan.backend}",
        f"calls ok: {tally.ok}",
        f"calls failed: {sum(tally.failed.values())}",
    ]
    for (category, reason), n in sorted(tally.failed.items(), key=lambda kv: (kv[0][0], -kv[1])):
        out.append(f"  {n:6d}  {category}: {reason}")
    out.append(f"calls failed for healthy agents outside the restart: {tally.failed_healthy()}")
    out.append(f"status flaps of healthy agents: {len(tally.flaps)}")
    out += [f"  {flap}" for flap in Counter(tally.flaps).most_common(10)]
    out.append(
        f"watcher drops: {len(tally.drops)} "
        f"(reconnected after the daemon restart: {tally.restart_reconnects}; "
        f"events seen: {tally.events_seen})"
    )
    out += [f"  {drop}" for drop in tally.drops[:10]]
    out.append("rooms:")
    out += [f"  {room}: {state}" for room, state in sorted(tally.rooms.items())]
    out.append("daemon RSS: " + ", ".join(f"{k} {v / MiB:.1f} MiB" for k, v in log.rss.items()))
    out.append("timeline:")
    out += [f"  {line}" for line in log.lines]
    warnings = _log_warnings(fleet.directory)
    out.append("daemon log warnings/errors by event: " + (", ".join(warnings) or "none"))
    ended = all(s.split()[0] in FINISHED for s in tally.rooms.values()) and len(tally.rooms) == 3
    passed = not tally.flaps and not tally.drops and not tally.failed_healthy() and ended
    out.append(f"verdict: {'PASS' if passed else 'FAIL'}")
    print("\n".join(out))
    return passed


FINISHED = {"CONVERGED", "NO_IMPROVEMENT", "MAX_TURNS", "GOODBYE"}


def _log_warnings(directory: Path) -> list[str]:
    counts: Counter[str] = Counter()
    for path in sorted(directory.glob("daemon-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error"):
                counts[f"{entry['level']} {entry.get('event')}"] += 1
    return [f"{event} x{n}" for event, n in counts.most_common(8)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--per-kind", type=int, default=12, help="healthy agents per transport")
    parser.add_argument("--interval", type=float, default=3.0, help="heartbeat interval (s)")
    parser.add_argument("--rate", type=float, default=40.0, help="calls per second")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    plan = Plan(args.duration, args.per_kind, args.interval, args.rate, args.backend)
    work = Path(tempfile.mkdtemp(prefix="mesh-soak-"))
    try:
        tally, log, fleet = anyio.run(soak, plan, work, backend=args.backend)
        passed = report(plan, tally, log, fleet)
    finally:
        if args.keep:
            print(f"work directory (logs): {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
