"""Run the cluster's fault histories many rounds in a row and count what happened.

    .venv/bin/python scripts/cluster_rounds.py --rounds 20 --backend asyncio

Each round runs the person-elsewhere and the holder-cut-off scenarios of
tests/cluster/test_fence.py (``--only holder-paused`` for the SIGSTOP one) on a
fresh nats-server and three fresh daemons, and
checks the same invariants; a round that fails prints why and the loop goes on.
Not part of ``make test`` (a few minutes a backend): run it by hand after
touching the cluster's rooms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster.test_fence import holder_cut_off, holder_paused, person_elsewhere

Scenario = Callable[[Path, NatsServer], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "person-elsewhere": person_elsewhere,
    "holder-cut-off": holder_cut_off,
    "holder-paused": holder_paused,
}
#: What runs without --only: the two faults that once lost a turn or crashed a daemon.
DEFAULT = ("person-elsewhere", "holder-cut-off")


async def one(scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory(prefix="mesh-rounds-") as scratch:
        async with spawn_nats_server() as nats:
            await scenario(Path(scratch), nats)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args()
    counts: Counter[str] = Counter()
    for name in args.only or DEFAULT:
        for round_ in range(1, args.rounds + 1):
            started = time.monotonic()
            try:
                anyio.run(one, SCENARIOS[name], backend=args.backend)
            except Exception as exc:  # count it, show it, go on (Ctrl-C stops the loop)
                counts[f"{name} failed"] += 1
                print(f"{name} round {round_}: FAILED: {exc!r}", flush=True)
                traceback.print_exc()
            else:
                counts[f"{name} passed"] += 1
                took = time.monotonic() - started
                print(f"{name} round {round_}: ok ({took:.1f} s)", flush=True)
    print(f"{args.backend}: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0 if not any(k.endswith("failed") for k in counts) else 1


if __name__ == "__main__":
    sys.exit(main())
