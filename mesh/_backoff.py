"""How long to wait between attempts: exponential backoff with full jitter, as a pure generator.

"Full jitter" is the schedule of AWS's *Exponential Backoff and Jitter* (2015): the wait
before retry ``n`` (counting from 0) is uniform in ``[0, min(cap, base * 2**n))``. Drawing
over the whole range, not just near its top, is what keeps a crowd of clients that lost
the same server from redialing it in lockstep. The schedule is kept apart from any loop
(as websockets keeps ``backoff()`` apart from ``connect``), and randomness is a parameter,
so it is tested without sleeping. The reconnect loop and the providers' retries
both draw their waits from here.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["DEFAULT_BASE", "DEFAULT_CAP", "backoff"]

#: 1 s: the first wait averages half a second, long enough for a blip to pass and
#: short enough that a restarted server is found again almost at once.
DEFAULT_BASE: Final = 1.0
#: 30 s: five doublings from the base. A server down for longer is still probed
#: twice a minute, and a long outage never makes us sleep for minutes after it ends.
DEFAULT_CAP: Final = 30.0

Random = Callable[[], float] | _random.Random


def backoff(
    *,
    base: float = DEFAULT_BASE,
    cap: float = DEFAULT_CAP,
    max_attempts: int | None = None,
    random: Random = _random.random,
) -> Iterator[float]:
    """Yield the wait (seconds) before each retry: ``max_attempts`` of them, or forever if None.

    ``random`` is a ``random.Random`` or a function returning a float in ``[0, 1)``;
    pass ``lambda: 1.0`` to see the ceilings ``1, 2, 4, 8, 16, 30, 30, ...``. The
    arguments are checked here, at the call, not at the first ``next()``.
    """
    if base < 0 or cap < 0:
        raise ValueError(f"backoff needs base >= 0 and cap >= 0, got base={base}, cap={cap}")
    if max_attempts is not None and max_attempts < 0:
        raise ValueError(f"max_attempts must be >= 0 or None, got {max_attempts}")
    draw = random.random if isinstance(random, _random.Random) else random
    return _full_jitter(base, cap, max_attempts, draw)


def _full_jitter(
    base: float, cap: float, max_attempts: int | None, draw: Callable[[], float]
) -> Iterator[float]:
    # Doubling a float is exact, so this equals min(cap, base * 2**n) term by term, but it
    # stops growing at the cap: 2.0**n overflows after ~1,000 attempts, and unlimited
    # retries at a 30 s cap reach that in under nine hours.
    ceiling = min(cap, base)
    attempt = 0
    while max_attempts is None or attempt < max_attempts:
        yield ceiling * draw()
        attempt += 1
        if ceiling < cap:
            ceiling = min(cap, ceiling * 2.0)
