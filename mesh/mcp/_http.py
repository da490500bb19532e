"""MCP's streamable HTTP, client side, as a frame stream the MCP codec runs over.

Each frame we send is one ``POST`` to the server's URL; what comes back (a JSON
body, or a ``text/event-stream`` of messages ending with the answer) is what
``receive`` yields, in arrival order, so the session correlates it like any
other link. The transport's own state is the little the spec asks of a client:
the ``Mcp-Session-Id`` an ``initialize`` answer hands out (sent on every later
request, and ended with ``DELETE`` on close), the agreed ``MCP-Protocol-Version``,
a 2026-07-28 request's ``Mcp-Method`` / ``Mcp-Name`` headers, and the optional
``GET`` stream a handshake-era server pushes notifications on.

Cancelling a call also closes its response stream (on 2026-07-28 that *is* the
cancel; earlier revisions get ``notifications/cancelled`` as well). A server that
has forgotten our session (404) or cannot be reached ends the stream, so the
mesh reconnects and negotiates again.

httpx, not the mesh's own HTTP client: this is a different wire (SSE replies, a
GET stream), and the figures that matter for MCP are the stdio ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import httpx
import msgspec

from mesh._errors import Unauthorized
from mesh._logging import get_logger
from mesh.mcp._oauth import McpOAuth, OAuthSettings, verified_tls
from mesh.mcp._revisions import PROTOCOL_VERSION_KEY
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameTooLarge,
    TransportClosed,
    TransportError,
    TransportInfo,
)
from transports._groups import unwrap_single_error

__all__ = ["McpHttpStream", "open_mcp_http_client"]

log = get_logger("mesh.mcp")

#: Dialling must succeed this fast; reading has no deadline of its own (the session's bounds it).
CONNECT_TIMEOUT: Final = 10.0
#: Ending the session with DELETE on close is a courtesy: bounded.
CLOSE_TIMEOUT: Final = 2.0
_HEAD: Final = 512  # bytes kept of each end of an answer over the limit
#: Resuming a cut response stream: the wait when the server names none (SSE's ``retry``
#: default is the client's choice), the longest wait we honour (the call's deadline bounds
#: the whole), and how many attempts in a row may bring nothing new before we give up.
DEFAULT_RETRY: Final = 1.0
RESUME_WAIT_CEILING: Final = 30.0
RESUME_ATTEMPTS: Final = 3
_INITIALIZED: Final = b'"notifications/initialized"'
_NAME_PARAMS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class _Params(msgspec.Struct):
    name: Any = None
    uri: Any = None
    requestId: Any = None  # the wire's spelling
    meta: Any = msgspec.field(default=None, name="_meta")


class _Outgoing(msgspec.Struct):
    """What the transport needs to know of a frame we send (headers, cancels)."""

    id: Any = None
    method: Any = None
    params: _Params | None = None


class _Answer(msgspec.Struct):
    result: Any = None


class _Kind(msgspec.Struct):
    """Enough of a message to tell an answer (an id and no method) from the rest."""

    id: Any = None
    method: Any = None


class _Cursor:
    """How far a response stream got: the last event id, and how long the server asked
    us to wait before resuming from it (its ``retry``, in seconds)."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.retry: float = DEFAULT_RETRY


class _Refused(msgspec.Struct):
    """An HTTP refusal's JSON-RPC body: what is needed to tie it to the request."""

    jsonrpc: Any = None
    id: Any = None
    error: dict[str, Any] | None = None


_read_outgoing = msgspec.json.Decoder(_Outgoing).decode
_read_answer = msgspec.json.Decoder(_Answer).decode
_read_refused = msgspec.json.Decoder(_Refused).decode
_read_kind = msgspec.json.Decoder(_Kind).decode


def _answers(message: bytes, request_id: Any) -> bool:
    """Whether ``message`` is the answer to ``request_id`` (a result or an error)."""
    try:
        kind = _read_kind(message)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return kind.method is None and kind.id == request_id and type(kind.id) is type(request_id)


class McpHttpStream:
    """Frames over MCP streamable HTTP; opened by :func:`open_mcp_http_client`."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        tasks: anyio.abc.TaskGroup,
        *,
        token: str | None,
        max_frame_size: int,
    ) -> None:
        self._client = client
        self._url = url
        self._tasks = tasks
        self._token = token
        self._max = max_frame_size
        self._info = TransportInfo("http", url)
        self._send_received, self._received = anyio.create_memory_object_stream[
            bytes | TransportError
        ](float("inf"))
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._posts: dict[Any, anyio.CancelScope] = {}
        self._listening = False
        #: Set once the GET stream is open (or refused): requests sent after the handshake
        #: wait for it, so nothing the server pushes meanwhile has nowhere to go.
        self._listen_ready: anyio.Event | None = None
        self._closed: TransportClosed | None = None

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._max

    async def send(self, frame: bytes) -> None:
        await self.send_many([frame])

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self.send_nowait(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Each frame becomes a POST of its own, at once: nothing is ever left to write."""
        if self._closed is not None:
            raise self._closed
        for frame in frames:
            if self._listen_ready is None and _INITIALIZED in frame:
                self._listen_ready = anyio.Event()
            self._tasks.start_soon(self._post, frame)
        return True

    async def receive(self) -> bytes:
        if self._closed is not None:
            raise self._closed
        try:
            item = await self._received.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise self._closed or TransportClosed("closed locally") from None
        if isinstance(item, TransportError):
            if isinstance(item, TransportClosed):
                self._closed = item
            raise item
        return item

    async def aclose(self) -> None:
        if self._closed is None:
            self._closed = TransportClosed("closed locally")
        if self.session_id is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(httpx.HTTPError):
                await self._client.delete(self._url, headers=self._headers())
            self.session_id = None
        self._send_received.close()
        self._received.close()

    # -- one POST -----------------------------------------------------------------------

    def _headers(self, outgoing: _Outgoing | None = None, *, repeat: bool = True) -> dict[str, str]:
        """The headers of a request; ``repeat=False`` leaves out a 2026-07-28 POST's
        copy of its method and name (a ``GET`` that resumes its stream sends none)."""
        headers = {"accept": "application/json, text/event-stream"}
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        version = self.protocol_version
        params = outgoing.params if outgoing is not None else None
        meta = params.meta if params is not None else None
        if isinstance(meta, dict) and isinstance(meta.get(PROTOCOL_VERSION_KEY), str):
            version = meta[PROTOCOL_VERSION_KEY]
            if repeat and outgoing is not None:
                headers.update(_repeated(outgoing))
        if version is not None:
            headers["mcp-protocol-version"] = version
        return headers

    async def _post(self, frame: bytes) -> None:
        try:
            outgoing = _read_outgoing(frame)
        except msgspec.DecodeError:
            outgoing = _Outgoing()
        if outgoing.method == "notifications/cancelled" and not self._cancel(outgoing):
            return
        await self._wait_for_listen(outgoing)
        scope = anyio.CancelScope()
        if outgoing.id is not None:
            self._posts[outgoing.id] = scope
        listening = False
        try:
            with scope:
                await self._exchange(frame, outgoing)
            if outgoing.method == "notifications/initialized":
                self._tasks.start_soon(self._listen)
                listening = True
        except httpx.HTTPError as exc:
            self._end(TransportClosed(f"MCP server at {self._url} unreachable: {_why(exc)}"))
        except Unauthorized as exc:  # OAuth: no grant, or one the server no longer takes
            self._end(TransportClosed(exc.message))
        finally:
            if outgoing.id is not None:
                self._posts.pop(outgoing.id, None)
            if outgoing.method == "notifications/initialized" and not listening:
                self._listen_opened()  # no GET stream to wait for

    def _cancel(self, cancelled: _Outgoing) -> bool:
        """Close the cancelled request's response; whether to POST the cancel as well."""
        params = cancelled.params
        scope = self._posts.get(params.requestId) if params is not None else None
        if scope is not None:
            scope.cancel()  # on 2026-07-28, closing the response *is* the cancel
        # ... and the only one: a sessionless server has nowhere to route it
        return self.session_id is not None

    async def _wait_for_listen(self, outgoing: _Outgoing) -> None:
        """After the handshake, until the GET stream is open (bounded: it is a courtesy)."""
        ready = self._listen_ready
        if ready is not None and outgoing.method != "notifications/initialized":
            with anyio.move_on_after(CONNECT_TIMEOUT):
                await ready.wait()

    async def _exchange(self, frame: bytes, outgoing: _Outgoing) -> None:
        headers = {**self._headers(outgoing), "content-type": "application/json"}
        request = self._client.build_request("POST", self._url, content=frame, headers=headers)
        response = await self._client.send(request, stream=True)
        try:
            session = response.headers.get("mcp-session-id")
            if session and outgoing.method == "initialize":
                self.session_id = session
            if response.status_code in (202, 204):
                return
            if response.status_code == 404 and self.session_id is not None:
                self._end(TransportClosed(f"MCP server at {self._url} ended our session (404)"))
                return
            kind = response.headers.get("content-type", "")
            if response.status_code == 200 and kind.startswith("text/event-stream"):
                cursor = _Cursor()
                answered = await self._read_events(response, outgoing, cursor)
                await response.aclose()
                if not answered and outgoing.id is not None:
                    await self._resume(outgoing, cursor)
                return
            body = await _read_limited(response, self._max)
            if isinstance(body, FrameTooLarge):
                self._too_large(body, outgoing)
                return
            if response.status_code >= 400:
                body = self._scope_refusal(outgoing.id, response) or _refusal(
                    outgoing.id, response.status_code, body
                )
            self._deliver(body, outgoing)
        finally:
            await response.aclose()

    def _scope_refusal(self, request_id: Any, response: httpx.Response) -> bytes | None:
        """A call refused for lack of OAuth scope, as an error that says what would let
        it through (a person's wider consent, or the server's scopes), not a bare 403."""
        auth = self._client.auth
        why = auth.refusal(response) if isinstance(auth, McpOAuth) else None
        if why is None:
            return None
        error = {"code": -32600, "message": why, "data": {"type": "Unauthorized"}}
        return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _read_events(
        self, response: httpx.Response, outgoing: _Outgoing, cursor: _Cursor
    ) -> bool:
        """Deliver each event's message; True once the answer to ``outgoing`` came.

        A stream that breaks after an event with an id is a stream to resume, like
        one the server ends: only one with nothing to resume from fails the link.
        """
        answered = False
        try:
            async for data in _sse_data(response, self._max, cursor):  # to its end: the
                if isinstance(data, FrameTooLarge):  # server closes it after the answer
                    self._send_received.send_nowait(data)
                    continue
                self._deliver(data, outgoing)
                answered = answered or (outgoing.id is not None and _answers(data, outgoing.id))
        except httpx.TransportError:
            if cursor.last_id is None and not answered:
                raise
        return answered

    async def _resume(self, outgoing: _Outgoing, cursor: _Cursor) -> None:
        """The server ended the call's stream before its answer: wait the ``retry`` it
        asked for and ``GET`` the rest with ``Last-Event-ID``, for as long as each attempt
        brings something new (the call's own deadline cancels the wait); then give up
        with an error for the call rather than leave it waiting for its deadline."""
        why = "the stream ended before the answer, with no event id to resume from"
        stalled = 0
        while cursor.last_id is not None and stalled < RESUME_ATTEMPTS:
            await anyio.sleep(min(cursor.retry, RESUME_WAIT_CEILING))
            before = cursor.last_id
            try:
                why = await self._resume_once(outgoing, cursor)
            except httpx.HTTPError as exc:
                why = f"resuming failed: {_why(exc)}"
            if not why:
                return
            stalled = 0 if cursor.last_id != before else stalled + 1
        self._deliver(_lost_answer(outgoing.id, self._url, why), outgoing)

    async def _resume_once(self, outgoing: _Outgoing, cursor: _Cursor) -> str:
        """One ``GET`` with ``Last-Event-ID``: "" once the answer came, else why not."""
        headers = {**self._headers(outgoing, repeat=False), "accept": "text/event-stream"}
        headers["last-event-id"] = cursor.last_id or ""
        async with self._client.stream("GET", self._url, headers=headers) as response:
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                return f"resuming was refused with HTTP {response.status_code}"
            if await self._read_events(response, outgoing, cursor):
                return ""
        return "the resumed stream ended before the answer"

    def _too_large(self, refused: FrameTooLarge, outgoing: _Outgoing) -> None:
        """A JSON body over the limit, left unread: it answers the request it was POSTed
        with, so that request's id goes along for the session to fail its call at once."""
        if outgoing.id is not None and not refused.tail:
            refused.tail = b',"id":' + msgspec.json.encode(outgoing.id) + b"}"
        with contextlib.suppress(anyio.ClosedResourceError):
            self._send_received.send_nowait(refused)

    def _deliver(self, body: bytes, outgoing: _Outgoing) -> None:
        if not body.strip():
            return
        if outgoing.method == "initialize":
            with contextlib.suppress(msgspec.DecodeError):
                answer = _read_answer(body)
                if isinstance(answer.result, dict):
                    version = answer.result.get("protocolVersion")
                    self.protocol_version = version if isinstance(version, str) else None
        with contextlib.suppress(anyio.ClosedResourceError):
            self._send_received.send_nowait(body)

    async def _listen(self) -> None:
        """The GET stream a handshake-era server may push notifications on (405: none)."""
        if self._listening:
            return
        self._listening = True
        headers = {**self._headers(), "accept": "text/event-stream"}
        try:
            async with self._client.stream("GET", self._url, headers=headers) as response:
                self._listen_opened()
                if response.status_code != 200:
                    return  # 405: the server offers no such stream; that is allowed
                await self._read_events(response, _Outgoing(), _Cursor())
        except httpx.HTTPError as exc:
            log.debug("mcp.http_listen_ended", url=self._url, error=_why(exc))
        finally:
            self._listen_opened()

    def _listen_opened(self) -> None:
        if self._listen_ready is not None:
            self._listen_ready.set()

    def _end(self, error: TransportClosed) -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            self._send_received.send_nowait(error)


async def _read_limited(response: httpx.Response, limit: int) -> bytes | FrameTooLarge:
    """The body, or (once it passes ``limit``) what is known of it: the rest is not read."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            declared = response.headers.get("content-length", "")
            total = max(size, int(declared)) if declared.isdigit() else size
            return FrameTooLarge(total, limit, b"".join(chunks)[:_HEAD])
    return b"".join(chunks)


async def _sse_data(
    response: httpx.Response, limit: int, cursor: _Cursor | None = None
) -> AsyncIterator[bytes | FrameTooLarge]:
    """The ``data`` of each server-sent event, as it arrives; ``cursor`` keeps the
    stream's last event id and ``retry`` (what resuming it needs)."""
    data: list[str] = []
    size = 0
    tail = b""  # of an event over the limit: its id may be there
    async for line in response.aiter_lines():
        if not line:
            if data:
                payload = "\n".join(data).encode()
                too_large = FrameTooLarge(size, limit, payload[:_HEAD], tail)
                yield payload if size <= limit else too_large
            data, size, tail = [], 0, b""
        elif line.startswith("data:"):
            chunk = line[5:].removeprefix(" ")
            size += len(chunk)
            if size <= limit:
                data.append(chunk)
                continue
            if len(data) <= 1 and sum(map(len, data)) < _HEAD:  # keep the event's head
                data = ["\n".join([*data, chunk])[:_HEAD]]
            tail = (tail + chunk[-_HEAD:].encode())[-_HEAD:]
        elif cursor is not None:
            _follow(cursor, line)
    if data:
        yield "\n".join(data).encode()


def _follow(cursor: _Cursor, line: str) -> None:
    """An ``id:`` or ``retry:`` line of an event stream (others carry nothing we use)."""
    field, _, value = line.partition(":")
    value = value.removeprefix(" ")
    if field == "id" and "\0" not in value:
        cursor.last_id = value or None
    elif field == "retry" and value.isdigit():
        cursor.retry = int(value) / 1000


def _repeated(outgoing: _Outgoing) -> dict[str, str]:
    """2026-07-28 repeats a request's method, and the name it acts on, in headers."""
    method = str(outgoing.method)
    headers = {"mcp-method": method}
    name_key = _NAME_PARAMS.get(method)
    value = getattr(outgoing.params, name_key) if name_key and outgoing.params else None
    if isinstance(value, str) and value.isascii() and value == value.strip():
        headers["mcp-name"] = value
    return headers


def _refusal(request_id: Any, status: int, body: bytes) -> bytes:
    """An HTTP 4xx/5xx answer to the POST of ``request_id``, as a JSON-RPC error for it.

    A server that refuses a request before reading its id (the TypeScript SDK's "Server
    not initialized" to a ``server/discover``, HTTP 400) answers with ``id: null``: the
    POST it answers is known, so the error is given that request's id, or the call
    would wait for its deadline and ``auto`` would never fall back to ``initialize``.
    """
    try:
        refused = _read_refused(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _error_frame(request_id, status, body)
    if refused.jsonrpc != "2.0" or refused.error is None:
        return _error_frame(request_id, status, body)
    if refused.id is not None or request_id is None:
        return body
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": refused.error})


def _error_frame(request_id: Any, status: int, body: bytes) -> bytes:
    """An HTTP refusal with no JSON-RPC body, as the JSON-RPC error it stands for."""
    text = body[:200].decode("utf-8", "replace").strip() or "no body"
    code = -32600 if 400 <= status < 500 else -32603
    error = {"code": code, "message": f"HTTP {status} from the MCP server: {text}"}
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": error})


def _lost_answer(request_id: Any, url: str, why: str) -> bytes:
    """The error a call gets when its response stream ended for good without an answer."""
    message = f"the MCP server at {url} did not answer: {why}"
    error = {"code": -32603, "message": message}
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": error})


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@asynccontextmanager
async def open_mcp_http_client(
    url: str,
    *,
    token: str | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    verify: Any = True,
    oauth: OAuthSettings | None = None,
) -> AsyncIterator[McpHttpStream]:
    """Talk to the MCP server at ``url`` (its streamable HTTP endpoint, e.g. ``.../mcp``).

    ``token`` is a static bearer token; ``oauth`` authorizes with OAuth instead
    (:mod:`mesh.mcp._oauth`: the grant ``mesh mcp login`` kept, refreshed as needed).
    """
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT)
    auth = McpOAuth(url, oauth) if oauth is not None else None
    if verify is True:
        verify = verified_tls()  # not a CA bundle read for every link
    with unwrap_single_error():
        async with (
            _closing(auth),
            httpx.AsyncClient(timeout=timeout, verify=verify, auth=auth) as client,
            anyio.create_task_group() as tasks,
        ):
            stream = McpHttpStream(client, url, tasks, token=token, max_frame_size=max_frame_size)
            try:
                yield stream
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                tasks.cancel_scope.cancel()


@asynccontextmanager
async def _closing(auth: McpOAuth | None) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if auth is not None:
            with anyio.CancelScope(shield=True):
                await auth.aclose()
