"""The ``mesh`` command's exit codes: one table, documented in docs/daemon.md.

====  ======================================================================
0     success (``room run``: the room finished by its rules)
1     the call failed at the agent, a manifest is invalid, or the room stopped with ERROR
2     usage error (bad flags or arguments, a deadline over the daemon's ``max_call_timeout``)
3     the daemon could not be reached (or was lost for good while following a room)
4     the agent is unknown, offline or unreachable (``room run``: AGENT_LOST)
5     the call timed out
6     ``mesh serve`` cannot listen (the port is in use, not permitted, or the host is wrong)
7     ``room run``: the room was paused or stopped by request before it finished
8     the daemon refused the token (missing, unknown, malformed, or without the right)
9     the daemon is shutting down and takes no new work (try again once it is back)
130   interrupted (Ctrl-C)
141   stdout was closed early (``mesh agents | head -1``): nothing more is written
====  ======================================================================
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Final, NoReturn

from mesh._text import printable

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_UNAVAILABLE: Final = 4
EXIT_TIMEOUT: Final = 5
EXIT_CANNOT_LISTEN: Final = 6
EXIT_ROOM_HALTED: Final = 7
EXIT_DENIED: Final = 8
EXIT_SHUTTING_DOWN: Final = 9
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE, what `yes | head -1` reports for yes


def seconds(text: str) -> float:
    """An argparse type: a duration past zero (a deadline of 0, -1, nan or inf is a usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def interrupted(detail: str = "") -> int:
    """Ctrl-C: one line on stderr, the same whenever it comes, and :data:`EXIT_INTERRUPTED`.

    ``detail`` says what the interruption left behind (a room that runs on)."""
    print(f"mesh: interrupted{'; ' if detail else ''}{detail}", file=sys.stderr)
    return EXIT_INTERRUPTED


def fail(code: int, message: str) -> NoReturn:
    """The one way a command fails: one line on stderr (controls escaped), exit ``code``."""
    # Messages quote what agents and clients sent (an agent's error, a room's id).
    print(f"mesh: {printable(message)}", file=sys.stderr)
    raise SystemExit(code)
