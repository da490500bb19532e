"""The ``mesh`` command's one request to the daemon, on the standard library's HTTP client.

A client command makes one or a few synchronous requests and exits. httpx would bring
httpcore, which imports trio and anyio when they are installed, for its async locks: about
half the CPU of a ``mesh agents`` start, for a process that never runs an event loop.
``urllib.request`` does what such a command needs: TLS with the command's CA, a timeout,
the ``*_PROXY`` variables as httpx honours them; it follows no redirect, as httpx does not.
The commands that hold a connection open (``mesh room run``, ``watch``, ``join``, ``mcp``)
use the library's own async clients.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPException
from typing import Any
from urllib.error import HTTPError, URLError

__all__ = ["Reply", "TransportError", "send"]


class TransportError(Exception):
    """The daemon could not be reached, or the exchange broke off (refused, timed out, reset)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What the daemon answered, whatever its status."""

    status_code: int
    headers: Message
    content: bytes

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.content)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the daemon's answer, not a new place to send the token."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def send(
    method: str,
    url: str,
    *,
    body: Any = None,
    headers: dict[str, str],
    timeout: float,
    context: ssl.SSLContext | None,
) -> Reply:
    """One request (``body`` as JSON when given); raises :class:`TransportError`."""
    data = None if body is None else json.dumps(body).encode()
    sent = {**headers, **({"Content-Type": "application/json"} if data is not None else {})}
    request = urllib.request.Request(url, data=data, headers=sent, method=method)
    opener = urllib.request.build_opener(
        _NoRedirect(), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=timeout) as answered:
            return Reply(answered.status, answered.headers, answered.read())
    except HTTPError as refused:  # any status of 300 and over: an answer all the same
        with refused:
            return Reply(refused.code, refused.headers, refused.read())
    except URLError as exc:
        raise TransportError(str(exc.reason)) from exc
    except (OSError, HTTPException) as exc:  # a timeout or a reset while reading
        raise TransportError(str(exc) or type(exc).__name__) from exc
