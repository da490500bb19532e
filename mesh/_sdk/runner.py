"""Running an agent as a program: ``python -m mesh.agents.echo --stdio``.

Agent authors end their module with ``run_agent(agent)``; the flags choose the
transport and the event loop:

* ``--stdio`` (default): frames on stdin/stdout, logs on stderr;
* ``--http HOST:PORT``: HTTP (``POST /rpc``) and WebSocket (``/ws``) on one port;
  prints one JSON line ``{"event": "listening", "http": …, "ws": …}`` on stdout;
* ``--connect ws://…/ws``: dial in to a daemon and serve over that link.

``--token-env VAR`` names the environment variable holding the token (required
for ``--connect``; for ``--http`` it turns authentication on). ``--ca FILE`` (or
``$MESH_CA``) is the CA bundle to trust when dialling a ``wss://`` daemon whose
certificate the system does not know. Logging is configured here (an
application), never in the library.

SIGTERM (or SIGINT) drains: requests already being handled get up to
``--drain-timeout`` seconds to finish and be answered, then the agent exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import anyio

from mesh._errors import MeshError
from mesh._input import MalformedToken, bearer_token
from mesh._logging import configure_logging, get_logger
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from mesh._sdk.gc_tuning import tune_for_serving
from mesh._telemetry.tracing import (
    adopt_mesh_id,
    configure_from_environment,
    parent_from_environment,
)
from transports import DEFAULT_MAX_FRAME_SIZE, TokenAuthenticator, open_stdio_server
from transports._groups import unwrap_single_error

__all__ = ["run_agent"]

log = get_logger("mesh.agent")

#: Exit status when the agent cannot start or was refused (scripts can rely on it).
EXIT_REFUSED = 3
#: How long SIGTERM waits for requests in flight: under the daemon's own drain (10 s),
#: so that its answers can still travel back through it.
DEFAULT_DRAIN_TIMEOUT = 5.0


def _parser(agent: Agent) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"agent {agent.id}", description=agent.description or f"Serve the {agent.id!r} agent."
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (the default)")
    how.add_argument(
        "--http", metavar="HOST:PORT", help="serve HTTP /rpc and WebSocket /ws on one port"
    )
    how.add_argument(
        "--connect", metavar="URL", help="dial in to a daemon's ws:// or wss:// endpoint"
    )
    parser.add_argument("--token-env", metavar="VAR", help="environment variable holding the token")
    parser.add_argument(
        "--ca",
        metavar="FILE",
        default=os.environ.get("MESH_CA"),
        help="CA bundle (PEM) to trust for a wss:// daemon (default $MESH_CA)",
    )
    parser.add_argument("--id", help=f"serve under another agent id (default {agent.id!r})")
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default=os.environ.get("MESH_BACKEND", "asyncio"),
        help="event loop (default: $MESH_BACKEND or asyncio)",
    )
    parser.add_argument("--log-level", default=os.environ.get("MESH_LOG_LEVEL", "info"))
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=DEFAULT_DRAIN_TIMEOUT,
        metavar="SECONDS",
        help=f"on SIGTERM, wait this long for calls in flight (default {DEFAULT_DRAIN_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-frame-size",
        type=int,
        default=DEFAULT_MAX_FRAME_SIZE,
        metavar="BYTES",
        help=f"largest message accepted or sent (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    return parser


Serve = Callable[[anyio.Event], Awaitable[None]]
"""Serves until its transport ends, or until the event is set and it has drained."""


async def _serve_stdio(
    agent: Agent, config: SessionConfig, drain: float, stop: anyio.Event
) -> None:
    async with open_stdio_server(max_frame_size=config.max_frame_size) as stream:
        await _serve_streams(agent, partial(agent.serve, stream, config=config), drain, stop)


async def _serve_streams(
    agent: Agent, serve: Callable[[], Awaitable[None]], drain: float, stop: anyio.Event
) -> None:
    """``serve()`` until it ends; once ``stop`` is set, let requests finish (bounded).

    The answers of finished requests still go out: closing a peer flushes its queue.
    """
    async with anyio.create_task_group() as tg:

        async def serving() -> None:
            await serve()
            tg.cancel_scope.cancel()

        tg.start_soon(serving)
        await stop.wait()
        with anyio.move_on_after(drain):
            await agent.wait_idle()
        if agent.requests_running:
            log.warning("agent.drain_timeout", agent=agent.id, running=agent.requests_running)
        tg.cancel_scope.cancel()


async def _serve_http(
    agent: Agent,
    where: str,
    token: str | None,
    config: SessionConfig,
    drain: float,
    stop: anyio.Event,
) -> None:
    from mesh._sdk.serve import open_agent_server  # the HTTP server: not for a stdio agent

    host, _, port = where.rpartition(":")
    tokens = TokenAuthenticator({token: agent.id}) if token else None
    async with open_agent_server(
        agent, host=host or "127.0.0.1", port=int(port), tokens=tokens, config=config
    ) as server:
        announcement = {"event": "listening", "http": server.url, "ws": server.ws_url + "/ws"}
        print(json.dumps(announcement), flush=True)
        await stop.wait()
        server.stop_accepting()
        # HTTP requests count until their answers are written; calls on WebSocket
        # links are the agent's own count (closing a link flushes their answers).
        with anyio.move_on_after(drain):
            await server.drain(drain)
            await agent.wait_idle()
        if server.active_requests or agent.requests_running:
            log.warning("agent.drain_timeout", agent=agent.id, running=agent.requests_running)


def _token(parser: argparse.ArgumentParser, var: str | None, *, required: bool) -> str | None:
    if var is None:
        if required:
            parser.error("--connect needs --token-env VAR")
        return None
    token = os.environ.get(var, "")
    if not token.strip():
        parser.error(f"--token-env {var}: the variable is not set")
    try:
        return bearer_token(token, f"--token-env {var}")
    except MalformedToken as exc:
        parser.error(str(exc))


async def _until_signalled(agent: Agent, serve: Serve) -> None:
    """``serve`` until it ends, or until SIGTERM/SIGINT and its bounded drain."""
    stop = anyio.Event()
    with parent_from_environment(), unwrap_single_error():
        async with anyio.create_task_group() as tg:

            async def serving() -> None:
                await serve(stop)
                tg.cancel_scope.cancel()

            tg.start_soon(serving)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("agent.draining", agent=agent.id, signal=signal.Signals(signum).name)
                    stop.set()
                    break
            await anyio.sleep_forever()  # serving() ends the group once it has drained


def run_agent(agent: Agent, argv: Sequence[str] | None = None) -> None:
    """Parse flags and serve ``agent`` until its transport closes (or for ever, on a port)."""
    parser = _parser(agent)
    args = parser.parse_args(argv)
    # Logs go to stderr: on stdio, stdout carries the protocol.
    configure_logging(level=args.log_level, stream=sys.stderr)
    if args.id:
        agent.id = args.id
    # Traces to a collector when OTEL_* asks for them and the SDK is installed.
    configure_from_environment(agent.id)
    adopt_mesh_id(os.environ)
    config = SessionConfig(max_frame_size=args.max_frame_size)
    drain = args.drain_timeout
    main: Serve
    if args.http:
        token = _token(parser, args.token_env, required=False)
        main = partial(_serve_http, agent, args.http, token, config, drain)
    elif args.connect:
        from mesh._sdk.serve import serve_agent_dial_in  # WebSocket: not for a stdio agent

        token = _token(parser, args.token_env, required=True)
        tls = ssl.create_default_context(cafile=args.ca) if args.ca else None
        dial_in = partial(
            serve_agent_dial_in, agent, args.connect, token=token, config=config, ssl_context=tls
        )
        main = partial(_serve_streams, agent, dial_in, drain)
    else:
        main = partial(_serve_stdio, agent, config, drain)
    tune_for_serving()
    try:
        anyio.run(_until_signalled, agent, main, backend=args.backend)
    except KeyboardInterrupt:
        pass
    except MeshError as exc:
        print(f"agent {agent.id}: {exc}", file=sys.stderr)
        sys.exit(EXIT_REFUSED)
