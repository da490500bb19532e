"""Bad input from a peer, logged without letting the peer flood the log.

A peer that sends garbage gets an error answer for every frame (that is the
protocol), but the log gets at most one line per :data:`LOG_WINDOW` per
connection, carrying how many more came since the last line, and one closing
line with the count nobody saw. Input errors are never logged with a traceback:
they are the peer's mistake, not ours.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

__all__ = ["LOG_WINDOW", "InputComplaints"]

log = structlog.get_logger("mesh.session")

#: One line per connection per this many seconds: a flood of 20,000 bad frames
#: costs a handful of lines, and a single bad frame is still logged at once.
LOG_WINDOW: Final = 10.0


class InputComplaints:
    """The bad-input log of one connection (or one server, for HTTP's exchanges)."""

    __slots__ = ("_quiet_until", "_unlogged", "_window", "total")

    def __init__(self, *, window: float = LOG_WINDOW) -> None:
        self._window = window
        self._quiet_until = float("-inf")
        self._unlogged = 0
        #: Every bad input noted, logged or not.
        self.total = 0

    def note(self, event: str, now: float, **fields: Any) -> None:
        """One bad input at ``now``: logged if the window allows, else counted."""
        self.total += 1
        if now < self._quiet_until:
            self._unlogged += 1
            return
        if self._unlogged:
            fields["more_since_last_line"] = self._unlogged
        self._unlogged = 0
        self._quiet_until = now + self._window
        log.warning(event, **fields)

    def close(self, **fields: Any) -> None:
        """The connection ended: say how many bad inputs were counted but not logged."""
        if self._unlogged:
            log.warning("mesh.bad_input_unlogged", count=self._unlogged, total=self.total, **fields)
            self._unlogged = 0
