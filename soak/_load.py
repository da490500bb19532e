"""What the soak does to the daemon all along, and what it counts: calls, watchers, rooms.

Failures are judged by when and to whom they happened: a call to a victim may fail
(it was hurt on purpose); any call overlapping the daemon's restart may fail (it was
down); a call to a healthy agent at any other time must not. Likewise a watcher
may be closed by the restart and nothing else, and a healthy agent must never go
``stale`` or ``offline`` outside the restart.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx

from soak._fleet import TURNS, VICTIMS, Fleet
from transports import TransportClosed, open_websocket

#: Each call's own deadline (the echo answers in microseconds; this is for faults).
CALL_TIMEOUT: Final = 5.0
#: Statuses a healthy agent must never show in an event.
BAD: Final = frozenset({"stale", "offline", "removed", "deregistered"})


@dataclass
class Windows:
    """When failures are expected: the daemon restart (start, end), on the anyio clock."""

    restart: list[list[float]] = field(default_factory=list)
    back: anyio.Event | None = None  # set when the restarted daemon has every agent again

    def begin_restart(self) -> None:
        self.back = anyio.Event()
        self.restart.append([anyio.current_time(), float("inf")])

    def end_restart(self) -> None:
        self.restart[-1][1] = anyio.current_time()
        assert self.back is not None
        self.back.set()

    def overlaps_restart(self, start: float, end: float) -> bool:
        return any(start <= until and end >= since for since, until in self.restart)

    @property
    def restarting(self) -> bool:
        return bool(self.restart) and self.restart[-1][1] == float("inf")


@dataclass
class Tally:
    windows: Windows = field(default_factory=Windows)
    ok: int = 0
    failed: Counter[tuple[str, str]] = field(default_factory=Counter)
    flaps: list[str] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    restart_reconnects: int = 0
    events_seen: int = 0
    rooms: dict[str, str] = field(default_factory=dict)

    def call(self, agent: str, reason: str | None, start: float, end: float) -> None:
        if reason is None:
            self.ok += 1
            return
        if agent in VICTIMS:
            category = "fault victims"
        elif self.windows.overlaps_restart(start, end):
            category = "during the daemon restart"
        else:
            category = "healthy agents"
        self.failed[(category, reason)] += 1

    def failed_healthy(self) -> int:
        return sum(n for (category, _), n in self.failed.items() if category == "healthy agents")


def _short(text: str) -> str:
    """A failure's reason with ids and numbers taken out, so that alike ones count as one."""
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:110]


async def call_loop(fleet: Fleet, tally: Tally, worker: int, workers: int) -> None:
    """Echo calls through ``POST /rpc`` at this worker's share of the rate, for ever."""
    targets = [*fleet.plan.echo_agents, *VICTIMS]
    period = workers / fleet.plan.rate
    next_at = anyio.current_time()
    n = worker
    async with httpx.AsyncClient(headers=fleet.headers, timeout=CALL_TIMEOUT + 5) as http:
        while True:
            agent = targets[n % len(targets)]
            n += workers
            message = f"m{n}"
            body = {
                "agent": agent,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": message}},
                "timeout": CALL_TIMEOUT,
            }
            start = anyio.current_time()
            reason = await _one_call(http, fleet.http, body, message)
            tally.call(agent, reason, start, anyio.current_time())
            next_at += period
            await anyio.sleep(max(0.0, next_at - anyio.current_time()))  # the load's pace


async def _one_call(http: httpx.AsyncClient, url: str, body: Any, message: str) -> str | None:
    try:
        reply = await http.post(url + "/rpc", json=body)
    except httpx.HTTPError as exc:
        return f"no answer from the daemon: {type(exc).__name__}"
    try:
        answer = reply.json()
    except json.JSONDecodeError:
        return f"HTTP {reply.status_code} without JSON"
    if reply.status_code == 200 and answer.get("result") == {"message": message}:
        return None
    error = answer.get("error", {}) if isinstance(answer, dict) else {}
    return f"HTTP {reply.status_code}: {_short(str(error.get('message', answer)))}"


async def watch_loop(fleet: Fleet, tally: Tally, healthy: frozenset[str]) -> None:
    """One ``/agents/events`` watcher, held for the whole soak; reconnects after drops."""
    while True:
        try:
            async with open_websocket(fleet.events, token=fleet.token) as stream:
                while True:
                    _judge(json.loads(await stream.receive()), tally, healthy)
        except TransportClosed as closed:
            if tally.windows.restarting:
                tally.restart_reconnects += 1
            else:
                tally.drops.append(f"{anyio.current_time():.1f}: {closed.reason}")
        back = tally.windows.back
        if tally.windows.restarting and back is not None:
            with anyio.move_on_after(120):  # the daemon is back within this, or the soak fails
                await back.wait()


def _judge(event: dict[str, Any], tally: Tally, healthy: frozenset[str]) -> None:
    tally.events_seen += 1
    if event["type"] == "snapshot" or tally.windows.restarting:
        return
    agent = event["agent"]
    if agent["id"] in healthy and agent["status"] in BAD:
        tally.flaps.append(f"{agent['id']}: {event['old']} -> {agent['status']}")


async def run_room(fleet: Fleet, tally: Tally, number: int) -> None:
    """Create room ``number`` (its two personas) and record how it ends."""
    room_id = f"soak-room-{number}"
    spec = {
        "id": room_id,
        "topic": f"What matters most, take {number}?",
        "members": [f"ann-{number}", f"bob-{number}"],
        "limits": {"max_turns": TURNS},
    }
    try:
        async with httpx.AsyncClient(
            base_url=fleet.http, headers=fleet.headers, timeout=30
        ) as http:
            created = await http.post("/rooms", json=spec)
    except httpx.HTTPError as exc:
        tally.rooms[room_id] = f"not created: {exc!r}"
        return
    tally.rooms[room_id] = (
        "running" if created.status_code == 201 else f"not created: {created.text[:120]}"
    )


async def room_outcomes(fleet: Fleet, tally: Tally) -> None:
    async with httpx.AsyncClient(base_url=fleet.http, headers=fleet.headers, timeout=30) as http:
        for room_id, state in list(tally.rooms.items()):
            if state != "running":
                continue
            shown = (await http.get(f"/rooms/{room_id}")).json()["room"]
            reason = shown.get("stop_reason")
            tally.rooms[room_id] = (
                f"{reason} ({shown.get('detail', '')}), turn {shown.get('current_turn')}"
                if reason
                else f"still {shown['status']} at turn {shown.get('current_turn')}"
            )
