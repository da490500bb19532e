"""A handler for the calling side of a link that records the notifications it is sent."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio

from mesh._rpc.peer import Peer, RequestContext

__all__ = ["NotificationRecorder"]


class NotificationRecorder:
    """A request handler for the *calling* side that records every notification.

    ``await recorder.wait_for(method, predicate)`` returns the first matching
    params, waiting (bounded by the caller's own ``fail_after``) if none came yet.
    """

    def __init__(self) -> None:
        self.received: defaultdict[str, list[Any]] = defaultdict(list)
        self._changed = anyio.Event()

    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        from mesh._errors import MethodNotFound

        raise MethodNotFound(f"the test client serves no methods ({method!r})")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        self.received[method].append(params)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, method: str, predicate: Callable[[Any], bool] = lambda _: True) -> Any:
        while True:
            for params in self.received[method]:
                if predicate(params):
                    return params
            await self._changed.wait()
