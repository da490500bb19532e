"""A NATS subject pair between two daemons as a frame stream, under the one ``Peer``.

Daemon A's frames to daemon B go to B's call subject (``mesh.<cluster>.call.<b>``)
and B's to A's: each daemon reads its own call subject only, and hands each frame to
the stream of the daemon that signed it. Over that stream runs a
:class:`~mesh.Peer` like any other link's, so a call to another daemon is a
``mesh/call`` request with the peer's own deadlines, progress and cancel, and room
control is methods on the same link: no second call machine.

Frames sent together go in one NATS message, each on a line of its own (a frame is
compact JSON, never a raw newline, as on stdio): one publish, one signature, one
delivery and one check for the lot, where each costs more than the frame itself.

Every message is signed by its publisher over its subject, its reply subject and its
body. The reply subject is under the sender's inbox, where nobody answers: NATS
sends its "no responders" status there when nobody reads the subject (a daemon that
is gone), and the stream ends at once, its calls with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError
from mesh.cluster._keys import Keys
from mesh.cluster._link import NatsLink
from transports import DEFAULT_MAX_FRAME_SIZE, TransportClosed, TransportInfo
from transports._loop import Wakeup, current_loop

__all__ = ["DaemonStream", "frame_limit"]

log = get_logger("mesh.cluster")

#: What a frame leaves of NATS's payload limit for its headers (the signature, a trace).
HEADERS_ROOM: Final = 4096
_NEWLINE: Final = b"\n"


def frame_limit(max_payload: int | None) -> int:
    """The largest frame a daemon link carries: the transports' limit, or less where the
    NATS server takes less (its ``max_payload`` counts headers and body together)."""
    if not max_payload:
        return DEFAULT_MAX_FRAME_SIZE
    return max(1024, min(DEFAULT_MAX_FRAME_SIZE, max_payload - HEADERS_ROOM))


class DaemonStream:
    """This daemon's half of the subject pair with daemon ``daemon``; see the module
    docstring. Frames arrive through :meth:`deliver` (from the one subscription to our
    call subject, after the signer was checked) and leave by NATS publish, which cannot
    be done without waiting, so :meth:`send_nowait` queues for :meth:`send_many`."""

    __slots__ = (
        "_after",
        "_closed",
        "_keys",
        "_limit",
        "_link",
        "_parked",
        "_queued",
        "_read",
        "_received",
        "_reply",
        "_sent",
        "_subject",
        "_take",
        "_unsent",
        "_wakeup",
        "daemon",
        "info",
    )

    def __init__(
        self, link: NatsLink, keys: Keys, daemon: str, *, subject: str, reply: str, limit: int
    ) -> None:
        self.daemon = daemon
        self.info = TransportInfo("nats", f"daemon {daemon!r}")
        self._link = link
        self._keys = keys
        self._subject = subject
        self._reply = reply
        self._limit = limit
        self._received: deque[bytes] = deque()
        self._read = 0  # frames the reader has taken (and handled: it takes the next after)
        #: after_read's callbacks, each with the count of frames to be read first.
        self._after: deque[tuple[int, Callable[[], None]]] = deque()
        self._queued: list[bytes] = []
        self._parked: Wakeup | None = None
        self._take: Callable[[bytes], bool] | None = None  # see deliver_to
        self._unsent = 0  # frames taken and not yet handed to NATS
        self._sent: list[Wakeup] = []  # wait_sent, parked
        self._wakeup = current_loop().wakeup
        self._closed: TransportClosed | None = None

    @property
    def max_frame_size(self) -> int:
        return self._limit

    @property
    def closed(self) -> bool:
        return self._closed is not None

    # -- in ---------------------------------------------------------------------------------

    def deliver(self, data: bytes) -> None:
        """A message ``daemon`` signed: its frames, for the reader (dropped once the
        stream has ended)."""
        if _NEWLINE not in data:
            self._deliver(data)
            return
        for frame in data.split(_NEWLINE):
            self._deliver(frame)

    def _deliver(self, frame: bytes) -> None:
        if self._closed is not None:
            return
        take = self._take
        if take is not None and not self._received and take(frame):
            return
        self._received.append(frame)
        self._wake()

    def deliver_to(self, take: Callable[[bytes], bool] | None) -> None:
        """Offer ``take`` each frame that arrives while none waits for the reader.

        ``take`` runs where NATS delivered the frame and returns True if it consumed the
        frame (which ``receive`` then never returns), False to leave it to ``receive``:
        a peer wakes a lone caller from here rather than through its reader task.
        """
        self._take = take

    async def receive(self) -> bytes:
        # The reader asks for a frame once it has handled the last one it took.
        if self._after:
            self._run_after()
        while not self._received:
            self._raise_if_closed()
            parked = self._parked = self._wakeup()
            await parked.wait()
        self._read += 1
        return self._received.popleft()

    def after_read(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the peer has handled every frame delivered so far (now,
        if it has): what NATS brought before news on another subject (an agent gone) is
        the peer's to act on first (its answer completes a call that news would fail)."""
        if not self._received:
            callback()
        else:
            self._after.append((self._read + len(self._received), callback))

    def _run_after(self) -> None:
        after = self._after
        while after and after[0][0] <= self._read:
            after.popleft()[1]()

    # -- out --------------------------------------------------------------------------------

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        self._raise_if_closed()
        _check_lines(frames)
        self._queued.extend(frames)
        self._unsent += len(frames)
        return False

    async def send(self, frame: bytes) -> None:
        await self.send_many([frame])

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self._raise_if_closed()
        _check_lines(frames)
        queued, self._queued = self._queued, []
        self._unsent += len(frames)
        try:
            for message, count in _messages([*queued, *frames], self._limit):
                await self._publish(message)
                self._unsent -= count
        finally:
            if not self._unsent or self._closed is not None:
                self._wake_sent()

    async def wait_sent(self) -> None:
        """Until every frame taken so far is handed to NATS (or the stream has ended): a
        daemon that stops answers what it served before it says it is gone."""
        if not self._unsent or self._closed is not None:
            return
        parked = self._wakeup()
        self._sent.append(parked)
        await parked.wait()

    def _wake_sent(self) -> None:
        parked, self._sent = self._sent, []
        for waiter in parked:
            waiter.set()

    async def _publish(self, message: bytes) -> None:
        subject, reply = self._subject, self._reply
        headers = self._keys.headers(subject, reply, message)
        try:
            await self._link.send(subject, message, self._not_sent, reply=reply, headers=headers)
        except ClusterError as exc:
            self._not_sent(exc)
        self._raise_if_closed()

    def _not_sent(self, error: ClusterError) -> None:
        self.end(f"NATS could not carry a frame to daemon {self.daemon!r}: {error}")

    # -- the end ----------------------------------------------------------------------------

    def end(self, reason: str) -> None:
        """No frame will come or go any more: the reader (and so the peer) reads what came
        before and then ends with ``reason``."""
        if self._closed is not None:
            return
        self._closed = TransportClosed(reason)
        self._queued.clear()
        self._wake()
        self._wake_sent()

    async def aclose(self) -> None:
        self.end("closed locally")
        self._received.clear()
        self._after.clear()

    def _wake(self) -> None:
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.set()

    def _raise_if_closed(self) -> None:
        if self._closed is not None:
            raise TransportClosed(self._closed.reason)


def _check_lines(frames: Sequence[bytes]) -> None:
    for frame in frames:
        if _NEWLINE in frame:
            raise ValueError("a frame must not contain a raw newline")


def _messages(frames: Sequence[bytes], limit: int) -> Iterator[tuple[bytes, int]]:
    """``frames`` joined a line each into messages of at most ``limit`` bytes (a frame
    of its own may be as large); each with the count of frames it carries."""
    start, size = 0, -1
    for end, frame in enumerate(frames):
        if end > start and size + 1 + len(frame) > limit:
            yield _NEWLINE.join(frames[start:end]), end - start
            start, size = end, -1
        size += 1 + len(frame)
    if start < len(frames):
        yield _NEWLINE.join(frames[start:]), len(frames) - start
