"""Push notifications: each event of a task POSTed to the client's webhook, at least once.

A client gives a :class:`PushConfig` (with its message, or later with
``CreateTaskPushNotificationConfig``). For each config one delivery loop follows
the task's numbered events, as a stream does, and POSTs each one (a 1.0
``StreamResponse``) in order. An event that is not answered 2xx is sent again,
with exponential backoff and full jitter, until it is or ``MAX_ATTEMPTS`` have
failed (the loop then gives up on that webhook and says so in the log): the
receiver may see an event twice, never out of order, and never misses one while
it answers. Every event goes out, whichever way the task was started (streamed,
blocking or not) — push is not tied to the streaming path.

The webhook is called with the token the client gave (``X-A2A-Notification-Token``)
and its ``authentication`` (``Authorization: <scheme> <credentials>``). Its URL
must pass the server's ``check_push_url``; the daemon's is its endpoint check
(plain http(s), a host in ``webhook_hosts``, which names none unless the operator
sets it: push is then not offered), so a client cannot make the daemon reach
anywhere else; redirects are not followed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx
import msgspec

from mesh._backoff import backoff
from mesh._logging import get_logger
from mesh.a2a._tasks import Task, new_id

__all__ = ["MAX_CONFIGS", "CheckUrl", "PushConfig", "PushRefused", "deliver", "push_config_in"]

log = get_logger("mesh.a2a")

#: Configs one task may hold.
MAX_CONFIGS: Final = 8
#: Attempts per event before the webhook is given up on.
MAX_ATTEMPTS: Final = 8
#: One POST must be answered this fast.
POST_TIMEOUT: Final = 10.0
#: Backoff between attempts: from 0.5 s, doubling, up to 30 s (full jitter).
BACKOFF_BASE: Final = 0.5
BACKOFF_CAP: Final = 30.0

#: The longest token, scheme or credentials a config may give (each goes in a header).
MAX_HEADER_VALUE: Final = 4096
#: What an HTTP header's value may hold: visible ASCII, spaces and tabs inside.
_HEADER_VALUE: Final = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")

#: ``check(url)`` says why the daemon will not call ``url`` (None: it will).
CheckUrl = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class PushConfig:
    id: str
    task_id: str
    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""

    def shown(self) -> dict[str, Any]:
        """As ``TaskPushNotificationConfig`` (credentials are never shown back)."""
        out: dict[str, Any] = {"id": self.id, "taskId": self.task_id, "url": self.url}
        if self.token:
            out["token"] = self.token
        if self.scheme:
            out["authentication"] = {"scheme": self.scheme}
        return out

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.token:
            headers["x-a2a-notification-token"] = self.token
        if self.scheme and self.credentials:
            headers["authorization"] = f"{self.scheme} {self.credentials}"
        return headers


class PushRefused(ValueError):
    """A push config the daemon will not use (the text says why)."""


def push_config_in(value: Any, task_id: str, check: CheckUrl) -> PushConfig:
    """A config as either version writes it (0.3 nests it in ``pushNotificationConfig``)."""
    if not isinstance(value, dict):
        raise PushRefused("a push notification config must be an object")
    inner = value.get("pushNotificationConfig")
    config = inner if isinstance(inner, dict) else value
    url = config.get("url")
    if not isinstance(url, str) or not url:
        raise PushRefused("a push notification config needs a `url`")
    why = check(url)
    if why is not None:
        # The check speaks of endpoints; here one is a webhook (the setting keeps its name).
        raise PushRefused("push url refused: " + re.sub(r"\bendpoint\b(?!_)", "url", why))
    auth = config.get("authentication")
    auth = auth if isinstance(auth, dict) else {}
    scheme = auth.get("scheme") or next(iter(auth.get("schemes") or ()), "")
    return PushConfig(
        id=str(config.get("id") or new_id()),
        task_id=task_id,
        url=url,
        token=_header_value("token", config.get("token")),
        scheme=_header_value("authentication scheme", scheme),
        credentials=_header_value("authentication credentials", auth.get("credentials")),
    )


def _header_value(what: str, value: Any) -> str:
    """``value`` as it will be sent in a header of every POST, or why it cannot be.

    Checked here, with the config: a value HTTP cannot carry (a line break, a byte past
    ASCII) would otherwise fail each delivery later, far from the client that sent it.
    """
    text = str(value or "")
    if len(text) > MAX_HEADER_VALUE:
        raise PushRefused(f"the push {what} is longer than {MAX_HEADER_VALUE} characters")
    if not _HEADER_VALUE.fullmatch(text):
        raise PushRefused(
            f"the push {what} must be printable ASCII with no space at either end "
            f"(a header carries it), got {text[:40]!r}"
        )
    return text


async def deliver(
    task: Task, config: PushConfig, cursor: int, *, still_wanted: Callable[[], bool]
) -> None:
    """POST every event of ``task`` after ``cursor`` to the webhook, in order, until the
    task rests (or the config is deleted: ``still_wanted()`` turns false).

    It runs beside every other client's tasks: whatever goes wrong ends this delivery
    and is logged, and never reaches them."""
    try:
        await _deliver(task, config, cursor, still_wanted)
    except Exception:
        log.exception("a2a.push_failed", task=config.task_id, config=config.id)


async def _deliver(
    task: Task, config: PushConfig, cursor: int, still_wanted: Callable[[], bool]
) -> None:
    async with httpx.AsyncClient(timeout=POST_TIMEOUT, follow_redirects=False) as http:
        while still_wanted():
            changed = task.changed
            batch = list(task.events_after(cursor))
            if cursor + 1 < task.oldest_event:  # fell behind the log: the task says it all
                batch = [(task.last_event, {"task": task.snapshot()})]
            for number, event in batch:
                if not await _post(http, config, event):
                    return
                cursor = number
            if not batch:
                if task.resting:
                    return
                await changed.wait()


async def _post(http: httpx.AsyncClient, config: PushConfig, event: dict[str, Any]) -> bool:
    body = msgspec.json.encode(event)
    waits = backoff(base=BACKOFF_BASE, cap=BACKOFF_CAP, max_attempts=MAX_ATTEMPTS - 1)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            answer = await http.post(config.url, content=body, headers=config.headers())
            if 200 <= answer.status_code < 300:
                return True
            why = f"HTTP {answer.status_code}"
        except httpx.HTTPError as exc:
            why = type(exc).__name__
        log.info("a2a.push_retry", task=config.task_id, config=config.id, attempt=attempt, why=why)
        wait = next(waits, None)
        if wait is None:
            break
        await anyio.sleep(wait)
    log.warning("a2a.push_gave_up", task=config.task_id, config=config.id, attempts=MAX_ATTEMPTS)
    return False
