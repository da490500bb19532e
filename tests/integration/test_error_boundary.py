"""The error boundary: every failure to connect is a MeshError saying who, over what, and why.

Each ``open_*`` (and the reconnecting peer, given one attempt) is pointed at a
refused loopback port, a missing command, a certificate from a CA it does not
trust, and a live echo agent process with the wrong token. The error must be the
documented :class:`~mesh.MeshError` subclass, name the agent, the transport and
the cause, and keep the dependency's exception as its ``__cause__``.
"""

from __future__ import annotations

import socket
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

from mesh import (
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    MeshError,
    MeshOrchestrator,
    ReconnectPolicy,
    RoomManager,
    Unauthorized,
    local_connector,
    open_agent_server,
    open_http_peer,
    open_reconnecting_peer,
    open_stdio_peer,
    open_websocket_peer,
)
from mesh.agents.echo import agent as echo_agent
from mesh.providers import ChatMessage, ProviderConfig, ProviderUnreachable, open_provider
from mesh.testing import EchoServer, KillableConnector, open_echo_agent, spawn_echo_server
from transports import (
    CloseCode,
    Connector,
    TransportError,
    open_http_client,
    open_stdio_process,
    open_websocket,
)

pytestmark = pytest.mark.anyio

#: Starting the echo agent's process on a loaded 2-core machine can take seconds.
GUARD = 20.0
#: One attempt, so the reconnecting peer gives up with the attempt's error as its cause.
ONCE = ReconnectPolicy(max_attempts=1)
AGENT = "echo"
TOKEN = "the-right-token"


async def failure(opening: AbstractAsyncContextManager[Any]) -> MeshError:
    """Open, expecting failure; a non-MeshError escapes pytest.raises and fails the test."""
    with anyio.fail_after(GUARD), pytest.raises(MeshError) as caught:
        async with opening:
            pass
    return caught.value


def assert_says(
    error: MeshError, kind: type[MeshError], transport: str, *causes: str, chained: bool = True
) -> None:
    """The exact class; the agent, transport and cause in the message; the origin chained."""
    text = str(error)
    assert type(error) is kind, f"{type(error).__name__}: {text}"
    assert f"agent {AGENT!r}" in text, text
    assert f"over {transport}" in text, text
    for cause in causes:
        assert cause in text, text
    if chained:
        assert error.__cause__ is not None, "the original exception must be chained"


async def gave_up(connector: Connector, **kwargs: Any) -> MeshError:
    """The reconnecting peer's error after one failed attempt through ``connector``."""
    opening = open_reconnecting_peer(connector, agent=AGENT, policy=ONCE, **kwargs)
    return await failure(opening)


def assert_gave_up(error: MeshError, kind: type[MeshError], *causes: str) -> None:
    """Giving up is a ConnectionLost naming the agent, with the attempt's mapped error as cause."""
    text = str(error)
    assert type(error) is ConnectionLost, f"{type(error).__name__}: {text}"
    assert f"gave up connecting to agent {AGENT!r} after 1 attempt" in text, text
    for cause in causes:
        assert cause in text, text
    assert type(error.__cause__) is kind, repr(error.__cause__)


# -- where to fail ----------------------------------------------------------------------------


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound but not listening: the kernel refuses every dial, and the
    port stays ours for the test (a closed one could be taken by someone else)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@dataclass(frozen=True)
class Untrusted:
    """A TLS server whose certificate comes from a CA the client context does not trust."""

    http: str
    ws: str
    client_context: ssl.SSLContext


@pytest.fixture
async def untrusted() -> AsyncIterator[Untrusted]:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    trustme.CA().configure_trust(client_context)  # another CA than the server's
    async with open_agent_server(echo_agent, ssl_context=server_context) as server:
        yield Untrusted(server.url, server.ws_url + "/ws", client_context)


@pytest.fixture
async def guarded() -> AsyncIterator[EchoServer]:
    """The live echo agent process, serving HTTP and WebSocket behind a token."""
    with anyio.fail_after(GUARD):
        async with spawn_echo_server(token=TOKEN) as server:
            yield server


# -- a refused dial ---------------------------------------------------------------------------


async def test_a_refused_dial_is_connect_failed(refused_port: int) -> None:
    http, ws = f"http://127.0.0.1:{refused_port}", f"ws://127.0.0.1:{refused_port}/ws"
    error = await failure(open_http_peer(http, agent=AGENT))
    assert_says(error, ConnectFailed, "http", http, "ConnectionRefusedError")
    error = await failure(open_websocket_peer(ws, agent=AGENT))
    assert_says(error, ConnectFailed, "websocket", f"cannot connect to {ws}")
    assert isinstance(error.__cause__, TransportError)

    assert_gave_up(await gave_up(partial(open_websocket, ws)), ConnectFailed, ws)
    error = await gave_up(partial(open_http_client, http))
    assert_gave_up(error, ConnectFailed, http, "ConnectionRefusedError", "over http")


# -- a command that cannot run ---------------------------------------------------------------


async def test_a_missing_or_unrunnable_command_is_connect_failed(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-agent"
    error = await failure(open_stdio_peer(str(missing), agent=AGENT))
    assert_says(error, ConnectFailed, "stdio", "FileNotFoundError", str(missing))
    assert isinstance(error.__cause__, FileNotFoundError)

    not_executable = tmp_path / "agent.py"
    not_executable.write_text("print('never run')\n")
    error = await failure(open_stdio_peer(str(not_executable), agent=AGENT))
    assert_says(error, ConnectFailed, "stdio", "PermissionError", str(not_executable))

    error = await gave_up(partial(open_stdio_process, str(missing)))
    assert_gave_up(error, ConnectFailed, "FileNotFoundError", str(missing))


async def test_an_agent_that_dies_while_starting_is_connect_failed_with_its_exit() -> None:
    script = "import sys; sys.stderr.write('no model configured\\n'); sys.exit(3)"
    error = await failure(open_stdio_peer(sys.executable, ["-c", script], agent=AGENT))
    assert_says(error, ConnectFailed, "stdio", "no model configured")
    assert isinstance(error, ConnectFailed)  # for mypy: the fields below are ConnectionLost's
    assert error.exit_code == 3
    assert error.stderr_tail == ("no model configured",)


# -- a certificate from a CA nobody trusts ---------------------------------------------------


async def test_an_untrusted_certificate_is_connect_failed_with_the_tls_reason(
    untrusted: Untrusted,
) -> None:
    tls = untrusted.client_context
    reason = "CERTIFICATE_VERIFY_FAILED"
    error = await failure(open_http_peer(untrusted.http, agent=AGENT, ssl_context=tls))
    assert_says(error, ConnectFailed, "http", untrusted.http, reason)
    error = await failure(open_websocket_peer(untrusted.ws, agent=AGENT, ssl_context=tls))
    assert_says(error, ConnectFailed, "websocket", untrusted.ws, reason)

    error = await gave_up(partial(open_websocket, untrusted.ws, ssl_context=tls))
    assert_gave_up(error, ConnectFailed, untrusted.ws, reason)


# -- a token the agent refuses --------------------------------------------------------------


async def test_a_wrong_token_is_unauthorized(guarded: EchoServer) -> None:
    ws = guarded.ws  # ws://127.0.0.1:PORT/ws
    error = await failure(open_websocket_peer(ws, agent=AGENT, token="a-wrong-token"))
    assert_says(error, Unauthorized, "websocket", "4001")
    assert isinstance(error, Unauthorized) and error.close_code == CloseCode.UNAUTHORIZED
    assert "a-wrong-token" not in str(error)

    error = await failure(open_http_peer(guarded.http, agent=AGENT, token="a-wrong-token"))
    # The session builds this one from the 401 reply itself: the reply is the evidence.
    assert_says(error, Unauthorized, "http", "HTTP 401", chained=False)

    # A good token that claims another agent's id is refused as well (4003).
    impostor = open_websocket_peer(
        ws, agent=AGENT, token=TOKEN, headers=[("X-Agent-Id", "someone-else")]
    )
    error = await failure(impostor)
    assert_says(error, Unauthorized, "websocket", "4003")
    assert isinstance(error, Unauthorized) and error.close_code == CloseCode.FORBIDDEN

    error = await gave_up(partial(open_websocket, ws, token="a-wrong-token"))
    assert_gave_up(error, Unauthorized, "4001", "over websocket")

    # The right token gets through the same doors.
    with anyio.fail_after(GUARD):
        async with open_websocket_peer(ws, agent=AGENT, token=TOKEN) as peer:
            assert await peer.call_tool("echo", {"message": "in"}) == {"message": "in"}


# -- an agent that never answers ------------------------------------------------------------


MUTE = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # reads, never answers


async def test_an_agent_that_never_answers_is_a_call_timeout() -> None:
    opening = open_stdio_peer(MUTE[0], MUTE[1:], agent=AGENT, connect_timeout=0.5)
    error = await failure(opening)
    assert_says(error, CallTimeout, "stdio", "did not answer within 0.5 s")

    error = await gave_up(partial(open_stdio_process, MUTE[0], MUTE[1:]), connect_timeout=0.5)
    assert_gave_up(error, CallTimeout, "0.5 s")


# -- what is not translated -----------------------------------------------------------------


async def test_the_callers_own_errors_are_not_translated() -> None:
    # Only the opening is mapped: an OSError from the caller's body stays an OSError.
    with anyio.fail_after(GUARD), pytest.raises(OSError, match="the caller's own") as caught:
        async with open_echo_agent():
            raise OSError("the caller's own")
    assert not isinstance(caught.value, MeshError)


class Mine(Exception):
    """The caller's own error, raised in the body of a public ``async with``."""


def local_stream() -> AbstractAsyncContextManager[Any]:
    return local_connector(echo_agent)()


def killable_stream() -> AbstractAsyncContextManager[Any]:
    return KillableConnector(echo_agent)()


def room_manager(tmp_path: Path) -> AbstractAsyncContextManager[Any]:
    async def speak(agent_id: str, request: Any) -> Any:
        raise AssertionError("no room is made here")

    return RoomManager(tmp_path, speak=speak, fsync=False)


@pytest.mark.parametrize(
    "opening",
    [
        pytest.param(lambda tmp: local_stream(), id="local_connector"),
        pytest.param(lambda tmp: killable_stream(), id="KillableConnector"),
        pytest.param(room_manager, id="RoomManager"),
        pytest.param(lambda tmp: MeshOrchestrator(), id="MeshOrchestrator"),
    ],
)
async def test_a_public_context_manager_raises_the_callers_error_as_itself(
    opening: Callable[[Path], AbstractAsyncContextManager[Any]], tmp_path: Path
) -> None:
    # Each owns a task group, which wraps what the body raises in an ExceptionGroup;
    # at the boundary a lone error is the caller's again, as every open_* does.
    with anyio.fail_after(GUARD), pytest.raises(Mine) as caught:
        async with opening(tmp_path):
            raise Mine("the caller's own")
    assert type(caught.value) is Mine


# -- providers --------------------------------------------------------------------------------


async def test_a_provider_error_is_a_mesh_error(refused_port: int) -> None:
    config = ProviderConfig(
        provider="openai",
        model="tiny",
        base_url=f"http://127.0.0.1:{refused_port}/v1",
        api_key_env="",
        max_retries=0,
    )
    with anyio.fail_after(GUARD), pytest.raises(MeshError) as caught:
        async with open_provider(config) as provider:
            await provider.complete([ChatMessage(role="user", content="hi")])
    assert isinstance(caught.value, ProviderUnreachable)
    assert "openai model 'tiny'" in str(caught.value) and str(refused_port) in str(caught.value)
