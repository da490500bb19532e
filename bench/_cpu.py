"""What the machine gives us, measured so that load does not hide in the figures.

Two instruments. `cpu_probe_ms` times a fixed pure-Python loop by the wall
clock: how much CPU this machine hands a process right now; the harness runs it
before and after every measurement and flags a run whose probe moved (someone
else's work landed inside it). `CpuMeter` adds up the CPU time a measurement's
processes (this one and every descendant: servers, stdio agents) spend in its
window: CPU per call barely moves with load, where calls/s and latency do.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "CpuMeter",
    "OpeningMeter",
    "cpu_probe_ms",
    "cpu_seconds",
    "descendants",
    "instructions_per_call",
    "tree_cpu_seconds",
]

#: Iterations of the probe loop per 1 ms reading unit: the probe reports the time of
#: 1,000,000 iterations (~45 ms on an idle core of the reference machine).
PROBE_LOOPS = 1_000_000
#: Short probes per reading, of PROBE_LOOPS / PROBE_SLICES iterations each: the reading
#: is their median, so one scheduler slice lost to another process (a single long
#: probe's whole error on a quiet shared machine) moves one slice, not the reading.
PROBE_SLICES = 5


def cpu_probe_ms() -> float:
    """Milliseconds per 1,000,000 turns of a fixed pure-Python loop, the median of
    `PROBE_SLICES` short timings: how fast this machine runs us right now."""
    loops = PROBE_LOOPS // PROBE_SLICES
    timings = []
    for _ in range(PROBE_SLICES):
        started = time.perf_counter()
        total = 0
        for i in range(loops):
            total += i
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * PROBE_SLICES * 1e3


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` (all its threads) has used so far, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every live process whose parent chain leads to `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it exited while we looked
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        mine = children.get(todo.pop(), [])
        found += mine
        todo += mine
    return found


def tree_cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time of `pids` together; a process that has exited counts 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


class CpuMeter:
    """CPU seconds spent by this process and its descendants between `start` and `stop`.

    The processes are those alive at `start` (a measurement's servers are up by
    then); the kernel counts in clock ticks (10 ms), so a 2 s window is good to ~1 %.
    """

    def __init__(self) -> None:
        self._pids: list[int] = []
        self._started = 0.0
        self.seconds: float | None = None

    def start(self) -> None:
        me = os.getpid()
        self._pids = [me, *descendants(me)]
        self._started = tree_cpu_seconds(self._pids)

    def stop(self) -> float:
        self.seconds = tree_cpu_seconds(self._pids) - self._started
        return self.seconds


class OpeningMeter:
    """What opening links costs a server and the crowd that dials it, each on its own.

    Started before a crowd opens its links, stopped once the server holds them:
    links per second by the wall clock, and each process's CPU per link. On two
    cores the two run side by side, so the busier one sets the rate.
    """

    def __init__(self, server_pid: int, crowd_pid: int) -> None:
        self._pids = (server_pid, crowd_pid)
        self._cpu = [cpu_seconds(pid) for pid in self._pids]
        self._started = time.perf_counter()

    def stop(self, links: int) -> dict[str, float]:
        took = time.perf_counter() - self._started
        server, crowd = (
            cpu_seconds(pid) - was for pid, was in zip(self._pids, self._cpu, strict=True)
        )
        per = max(1, links)
        return {
            "open_per_s": links / took,
            "open_server_cpu_us_per_link": server / per * 1e6,
            "open_crowd_cpu_us_per_link": crowd / per * 1e6,
        }


def instructions_per_call(command: Callable[[int], Sequence[str]], calls: int) -> float:
    """Instructions per call (user space, every thread) of ``command(n)``, a process that
    makes n calls, run under callgrind twice, with ``calls`` and three times as many: the
    difference leaves the process's start-up out. Load does not move this figure."""
    totals = []
    for n in (calls, 3 * calls):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "callgrind.out"
            run = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command(n)]
            done = subprocess.run(run, capture_output=True, text=True, check=False)
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode != 0 or found is None:
                raise RuntimeError(f"callgrind failed: {done.stderr[-2000:]}")
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / (2 * calls)
