"""The ``mesh`` command: run the daemon, talk to a running one, try an agent by itself.

Exit codes scripts can rely on, the same for every command, are in
:mod:`mesh.cli._codes` (and docs/daemon.md). Errors are one line on stderr, never a
traceback: a busy port, an unreachable daemon, a refused token, Ctrl-C and a closed
pipe each have their code.

Every client command presents a token: ``$MESH_TOKEN``, ``--token-file``, or the
admin token ``mesh serve`` wrote into ``.mesh/`` (see :mod:`mesh.cli._connection`).
Text that agents or clients supplied is shown with its control characters
escaped (:mod:`mesh._text`); JSON output stays exact.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

from mesh._telemetry.requested import tracing_requested
from mesh._text import json_text, printable
from mesh.cli._codes import (
    EXIT_BROKEN_PIPE,
    EXIT_CANNOT_LISTEN,
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SHUTTING_DOWN,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    fail,
    interrupted,
    seconds,
)
from mesh.cli._connection import (
    DEFAULT_URL,
    add_connection_arguments,
    auth_headers,
    ssl_context,
)
from mesh.cli._dev import BACKENDS, add_dev_commands, backend_default, backend_name
from mesh.cli._mcp_login import add_login_arguments, cmd_mcp_login
from mesh.cli._tokens import add_token_commands

if TYPE_CHECKING:
    from email.message import Message

    from mesh.cli._http import Reply

__all__ = ["main"]

#: What to say when the daemon wants a token and none was presented.
NO_TOKEN_HINT: Final = (
    " (no token was found: set $MESH_TOKEN, give --token-file, or run from the directory "
    "whose .mesh/ holds the daemon's admin.token)"
)
#: What to say when no daemon answers where the CLI looked.
UNREACHABLE_HINT: Final = (
    " (is `mesh serve` running there? name another daemon with --url or $MESH_URL)"
)
#: The CLI's own patience with the daemon, on top of a call's timeout.
HTTP_SLACK: Final = 5.0


_fail = fail


def _status_exit(status: int, error: dict[str, Any]) -> int:
    """The exit code for the daemon's refusal ``error`` (HTTP ``status``)."""
    data = error.get("data")
    if isinstance(data, dict) and data.get("limit"):  # a bound the daemon sets, not a right
        return EXIT_USAGE
    if status == 503 and not isinstance(error.get("code"), int):
        # The daemon's own 503 (an agent's carries its mesh code): it is draining.
        return EXIT_SHUTTING_DOWN
    return {
        401: EXIT_DENIED,
        403: EXIT_DENIED,
        404: EXIT_UNAVAILABLE,
        503: EXIT_UNAVAILABLE,
        504: EXIT_TIMEOUT,
    }.get(status, EXIT_FAILED)


def _request(
    args: argparse.Namespace, method: str, path: str, body: Any = None, timeout: float = 10.0
) -> Any:
    return _exchange(args, method, path, body, timeout)[0]


def _exchange(
    args: argparse.Namespace, method: str, path: str, body: Any = None, timeout: float = 10.0
) -> tuple[Any, Message]:
    """The daemon's JSON answer and its headers; any failure is a one-line exit."""
    response, presented = _send(args, method, path, body, timeout)
    return _payload(response, presented=presented), response.headers


def _send(
    args: argparse.Namespace, method: str, path: str, body: Any, timeout: float
) -> tuple[Reply, bool]:
    """The daemon's answer, whatever its status, and whether a token was presented;
    a daemon that cannot be reached is a one-line exit."""
    from mesh.cli._http import TransportError, send  # urllib: not for `mesh --help`

    url = args.url.rstrip("/") + path
    token = auth_headers(args)
    headers = {**token, **_trace_headers()}
    try:
        response = send(
            method,
            url,
            body=body,
            headers=headers,
            timeout=timeout + HTTP_SLACK,
            context=ssl_context(args),
        )
    except TransportError as exc:
        _fail(EXIT_UNREACHABLE, f"cannot reach the daemon at {args.url}: {exc}{UNREACHABLE_HINT}")
    return response, bool(token)


def _trace_headers() -> dict[str, str]:
    """The current span's ``traceparent``, when this process traces (``OTEL_*`` asked)."""
    if not _TRACING:
        return {}
    from mesh._telemetry.tracing import headers_for, outgoing

    return headers_for(outgoing())


def _every_agent(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``GET /agents`` page after page (the daemon answers 1,000 at most each time)."""
    agents: list[dict[str, Any]] = []
    after: str | None = None
    while True:  # ends: each page starts past the last one, or this exits
        query = "" if after is None else "?" + urlencode({"after": after})
        listed = _request(args, "GET", "/agents" + query)
        agents += listed["agents"]
        following = listed.get("next")
        if following is None:
            return agents
        if not isinstance(following, str) or (after is not None and following <= after):
            _fail(
                EXIT_FAILED, f"the daemon answered a next page that does not follow: {following!r}"
            )
        after = following


def _payload(response: Reply, *, presented: bool) -> Any:
    if response.status_code == 204:
        return None
    try:
        payload = response.json()
    except ValueError:
        _fail(EXIT_FAILED, f"the daemon answered HTTP {response.status_code} without JSON")
    if response.status_code >= 400:
        error = payload.get("error", {}) if isinstance(payload, dict) else {}
        message = _error_text(error) if isinstance(error, dict) else str(error)
        if response.status_code == 401 and not presented:
            message += NO_TOKEN_HINT
        _fail(_status_exit(response.status_code, error if isinstance(error, dict) else {}), message)
    return payload


def _error_text(error: dict[str, Any]) -> str:
    """A mesh error as ``mesh dev`` shows it: ``ToolError -32000 (raised ValueError): …``."""
    message = str(error.get("message", error))
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return message  # the daemon's own refusal (a bad body, a missing room): its words
    from mesh._errors import error_from_code

    kind = type(error_from_code(code, message)).__name__
    data = error.get("data")
    raised = data.get("type") if isinstance(data, dict) else None
    where = f" (raised {raised})" if isinstance(raised, str) and raised else ""
    return f"{kind} {code}{where}: {message}"


# -- commands ------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    import anyio

    from mesh._logging import configure_logging
    from mesh._sdk.gc_tuning import tune_for_serving
    from mesh.daemon._serve import ListenError, SettingsError, load_settings, serve_daemon

    overrides = {
        "host": args.host,
        "port": args.port,
        "manifests": args.manifests,
        "drain_timeout": args.drain_timeout,
        "data_dir": args.data_dir,
        "log_level": args.log_level,
        "log_format": args.log_format,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "nats": args.nats,
        "cluster_id": args.cluster_id,
        "daemon_id": args.daemon_id,
        "nats_creds": args.nats_creds,
        "nats_tls_ca": args.nats_tls_ca,
        "nats_tls_cert": args.nats_tls_cert,
        "nats_tls_key": args.nats_tls_key,
        "nats_allow_open": args.nats_allow_open or None,
        "room_lease_ttl": args.room_lease_ttl,
    }
    try:
        settings = load_settings(args.config, environ=os.environ, overrides=overrides)
    except SettingsError as exc:
        _fail(EXIT_USAGE, str(exc))
    json_logs = {"auto": None, "json": True, "console": False}[settings.log_format]
    configure_logging(level=settings.log_level, json=json_logs)
    if not Path(settings.manifests).is_dir():
        _fail(
            EXIT_USAGE,
            f"no manifests directory at {settings.manifests!r}: create it (an empty one serves "
            "no agents of its own) or pass --manifests DIR ($MESH_MANIFESTS)",
        )
    tune_for_serving()
    # Everything the daemon writes (transcripts, the rooms database, tokens) is its own:
    # 0600 files and 0700 directories, whatever the shell's umask.
    os.umask(0o077)
    from mesh._errors import MeshError

    try:
        # SIGINT is the daemon's own once it listens; before, it is a KeyboardInterrupt.
        stopped_by = anyio.run(serve_daemon, settings, backend=args.backend)
    except ListenError as exc:
        _fail(EXIT_CANNOT_LISTEN, str(exc))
    except MeshError as exc:  # e.g. NATS refused the daemon's credentials
        _fail(EXIT_USAGE, str(exc))
    if stopped_by == signal.SIGINT:  # Ctrl-C, as every command reports it; SIGTERM is a stop
        raise KeyboardInterrupt
    return EXIT_OK


def cmd_agents(args: argparse.Namespace) -> int:
    agents = _every_agent(args)
    if args.json:
        print(json.dumps(agents, indent=2))
        return EXIT_OK
    clustered = any("daemon" in agent for agent in agents)
    header: tuple[str, ...] = ("ID", "TRANSPORT", "STATUS", "LAST SEEN", "CAPABILITIES")
    rows: list[tuple[str, ...]] = [(*header, "DAEMON") if clustered else header]
    for agent in agents:
        ago = agent.get("last_seen_ago")
        seen = "never" if ago is None else f"{ago:.1f}s ago"  # configured, not yet connected
        # Ids and capabilities registered over HTTP are whatever a client sent.
        capabilities = ",".join(agent["capabilities"])
        cells: tuple[str, ...] = (
            agent["id"],
            _transport(agent),
            agent["status"],
            seen,
            capabilities,
        )
        if clustered:
            cells = (*cells, agent.get("daemon", ""))
        rows.append(tuple(printable(cell) for cell in cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    _print_link_errors(agents)
    return EXIT_OK


def _transport(agent: dict[str, Any]) -> str:
    """The wire, and what it speaks when that is not the mesh's own protocol: `stdio (mcp)`."""
    protocol = agent.get("protocol", "mesh")
    return agent["transport"] if protocol == "mesh" else f"{agent['transport']} ({protocol})"


def _print_link_errors(agents: list[dict[str, Any]]) -> None:
    """Below the table, why each agent that is not up is not: its link's last error (an
    exit status, a command not found), so a crash loop does not read as a slow start."""
    failing = [a for a in agents if a.get("link_error") and a["status"] != "online"]
    if failing:
        print()
    for agent in failing:
        print(printable(f"{agent['id']} ({agent['status']}): {agent['link_error']}"))


def _parse_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        _fail(EXIT_USAGE, f"--arg wants KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)  # numbers, booleans, null, lists, objects
    except ValueError:
        return key, raw  # anything else is a string


def _arguments(args: argparse.Namespace) -> dict[str, Any]:
    """Tool arguments from ``--json OBJECT`` and ``--arg KEY=VALUE`` (the latter win)."""
    arguments: dict[str, Any] = {}
    if args.json_args is not None:
        try:
            loaded = json.loads(args.json_args)
        except ValueError as exc:
            _fail(EXIT_USAGE, f"--json is not valid JSON: {exc}")
        if not isinstance(loaded, dict):
            _fail(EXIT_USAGE, "--json must be a JSON object of arguments")
        arguments.update(loaded)
    arguments.update(_parse_arg(item) for item in args.arg)
    return arguments


def cmd_call(args: argparse.Namespace) -> int:
    arguments = _arguments(args)
    body = {
        "agent": args.agent,
        "method": "tools/call",
        "params": {"name": args.tool, "arguments": arguments},
        "timeout": args.timeout,
    }
    if _TRACING:
        response, presented = _traced_call(args, body)
    else:
        response, presented = _send(args, "POST", "/rpc", body, args.timeout)
    result = _payload(response, presented=presented)["result"]
    print(json_text(result, indent=2))
    return EXIT_OK


def _traced_call(args: argparse.Namespace, body: dict[str, Any]) -> tuple[Reply, bool]:
    """The call in a client span, which ends with the call's own outcome."""
    from mesh._errors import MeshError
    from mesh._telemetry.tracing import calling

    try:
        with calling("tools/call", args.agent, tool=args.tool):
            response, presented = _send(args, "POST", "/rpc", body, args.timeout)
            _raise_answered_error(response)
    except MeshError:
        pass  # the span has the call's outcome; the answer is reported as any command's is
    return response, presented


def _raise_answered_error(response: Reply) -> None:
    """The mesh error the daemon answered (a tool's error, a timeout), raised so the span
    around the call ends with the call's own status rather than how this command exits."""
    from mesh._errors import error_from_code

    if response.status_code < 400:
        return
    try:
        error = response.json().get("error", {})
        code, message = error.get("code"), str(error.get("message", ""))
    except (ValueError, AttributeError):
        return  # not the daemon's JSON: reported as such by _payload
    if isinstance(code, int) and not isinstance(code, bool):
        raise error_from_code(code, message)


def cmd_broadcast(args: argparse.Namespace) -> int:
    arguments = _arguments(args)
    body = {
        "method": "tools/call",
        "params": {"name": args.tool, "arguments": arguments},
        "capability": args.capability,
        "timeout": args.timeout,
    }
    answers = _request(args, "POST", "/broadcast", body, timeout=args.timeout)["agents"]
    failed = 0
    for agent_id, answer in answers.items():
        if "error" in answer:
            failed += 1
            print(f"{printable(agent_id)}: error: {printable(answer['error']['message'])}")
        else:
            print(f"{printable(agent_id)}: {json_text(answer['result'])}")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_resources(args: argparse.Namespace) -> int:
    """An agent's resources, templates and prompts: what `mesh read` and MCP clients ask for."""
    for method, key, field in (
        ("resources/list", "resources", "uri"),
        ("resources/templates/list", "resourceTemplates", "uriTemplate"),
        ("prompts/list", "prompts", "name"),
    ):
        body = {"agent": args.agent, "method": method, "timeout": args.timeout}
        answer, _ = _exchange(args, "POST", "/rpc", body, args.timeout)
        for entry in answer["result"].get(key, ()):
            kind = key.removesuffix("s").lower()
            about = entry.get("description") or entry.get("mimeType") or ""
            print(printable(f"{kind:16} {entry.get(field)}  {about}".rstrip()))
    return EXIT_OK


def cmd_read(args: argparse.Namespace) -> int:
    """One resource's contents: text as it is, bytes as their size and media type."""
    params = {"uri": args.uri}
    body = {"agent": args.agent, "method": "resources/read", "params": params}
    answer, _ = _exchange(args, "POST", "/rpc", {**body, "timeout": args.timeout}, args.timeout)
    for item in answer["result"].get("contents", ()):
        if isinstance(item.get("text"), str):
            print(item["text"])
        else:
            size = len(str(item.get("blob") or "")) * 3 // 4
            print(printable(f"({item.get('mimeType')}, about {size} bytes: read it over MCP)"))
    return EXIT_OK


def cmd_ping(args: argparse.Namespace) -> int:
    body = {"agent": args.agent, "method": "ping", "timeout": args.timeout}
    _, headers = _exchange(args, "POST", "/rpc", body, args.timeout)
    # The daemon's own measure of the round trip to the agent (Server-Timing): timing
    # this command's request would add a fresh client and connection (~100 ms) to 2 ms.
    elapsed = _server_timing(headers.get("server-timing", ""))
    if elapsed is None:
        _fail(EXIT_FAILED, "the daemon did not say how long the ping took (Server-Timing)")
    print(f"{printable(args.agent)}: pong in {elapsed:.1f} ms (daemon to agent and back)")
    return EXIT_OK


def _server_timing(header: str) -> float | None:
    """``call;dur=2.345`` → 2.345 (milliseconds)."""
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == "dur":
            with suppress(ValueError):
                return float(value)
    return None


def cmd_mcp(args: argparse.Namespace) -> int:
    from functools import partial

    import anyio

    from mesh._errors import ConnectionLost, Unauthorized
    from mesh._logging import configure_logging
    from mesh.cli._connection import token_for
    from mesh.mcp._relay import relay_stdio

    if args.action == "login":
        return cmd_mcp_login(args)
    configure_logging(level="warning")  # stderr: stdout carries the MCP frames
    token = token_for(args)
    relay = partial(
        relay_stdio, args.url, token=token, ssl_context=ssl_context(args), agent=args.agent
    )
    try:
        anyio.run(relay, backend=args.backend)
    except Unauthorized as exc:
        _fail(EXIT_DENIED, str(exc) + ("" if token else NO_TOKEN_HINT))
    except ConnectionLost as exc:
        _fail(EXIT_UNREACHABLE, f"{exc} (daemon {args.url}){UNREACHABLE_HINT}")
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from mesh.manifests._validate import validate_manifests

    return int(validate_manifests(args.directory, environ=os.environ))


# -- the parser ------------------------------------------------------------------------


#: The commands whose arguments cost an import of their wing to describe, and their help.
HEAVY_COMMANDS: Final = {
    "room": "conversation rooms: run, watch, list, show, export, steer, delete",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """``mesh``'s parser: every command, or with ``command`` (the one about to run) only
    that one's arguments in full: the others are names and help lines, so ``mesh call``
    or ``mesh --help`` does not import the rooms wing to describe ``mesh room run``.
    """
    parser = _Parser(prog="mesh", description="agent-mesh: run the daemon and talk to agents.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(command, url_default=os.environ.get("MESH_URL", DEFAULT_URL))
        return command

    _add_serve_command(sub)
    _add_call_commands(client)
    for name, help_text in HEAVY_COMMANDS.items():
        if command is None or command == name:
            from mesh.cli._rooms import add_room_commands

            add_room_commands(client(name, help_text), _request)
        else:
            sub.add_parser(name, help=help_text)
    add_token_commands(sub, client, _request)
    add_dev_commands(sub, client, _request)

    mcp = client(
        "mcp",
        "serve the daemon's agents to an MCP host over stdio (docs/mcp.md);"
        " `mesh mcp login AGENT`: authorize a mounted server that needs OAuth, once",
    )
    mcp.add_argument("--backend", choices=BACKENDS, default=backend_default(), type=backend_name)
    mcp.add_argument(
        "--agent",
        metavar="ID",
        help="serve this one agent, its tools under their own names (default: every agent's,"
        " as AGENT__TOOL)",
    )
    add_login_arguments(mcp)
    mcp.set_defaults(func=cmd_mcp, runs_library=True)

    _add_cluster_command(sub)
    validate = sub.add_parser(
        "validate", help="check manifests", description="Check every manifest in a directory."
    )
    validate.add_argument("directory", nargs="?", default="manifests")
    validate.set_defaults(func=cmd_validate)
    return parser


def _add_cluster_command(sub: Any) -> None:
    """``mesh cluster nats-config``: what each daemon's NATS user may do (docs/cluster.md)."""
    text = "tools for a mesh of daemons over NATS"
    cluster = sub.add_parser("cluster", help=text, description=text)
    commands = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    text = "print a nats-server config giving each daemon a user that acts in its own name only"
    config = commands.add_parser("nats-config", help=text, description=text)
    config.add_argument("--cluster-id", default="mesh", help="the mesh's cluster id (mesh)")
    config.add_argument(
        "--daemon", action="append", required=True, metavar="ID", help="a daemon id (repeat)"
    )
    config.set_defaults(func=cmd_cluster_nats_config)


def cmd_cluster_nats_config(args: argparse.Namespace) -> int:
    from mesh.cluster._errors import ClusterError
    from mesh.cluster._permissions import nats_config

    try:
        print(nats_config(args.cluster_id, args.daemon), end="")
    except ClusterError as exc:
        print(f"mesh cluster nats-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


class _Parser(argparse.ArgumentParser):
    """A parser whose every command refuses a flag it does not know itself, with its own
    usage and the flag it likely meant (``mesh serve --prot`` → ``did you mean --port``).

    argparse hands a command's unknown words up to ``mesh``, whose usage lists commands,
    not the flag the user mistyped. Subcommands are built with this class too.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggestion(extras)}")
        return parsed, extras

    def _suggestion(self, extras: list[str]) -> str:
        from difflib import get_close_matches

        flag = next((word.partition("=")[0] for word in extras if word.startswith("-")), "")
        known = [option for option in self._option_string_actions if option.startswith("--")]
        close = get_close_matches(flag, known, n=1, cutoff=0.6) if flag else []
        return f" (did you mean {close[0]}?)" if close else ""


class _VersionAction(argparse._VersionAction):
    """``--version``, reading the installed version only when asked (it costs an import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        self.version = f"mesh {_version()}"
        super().__call__(parser, *args, **kwargs)


def _version() -> str:
    """The installed distribution's version (what ``pip`` shows), not a copy in the code."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agent-mesh")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _add_serve_command(sub: Any) -> None:
    """``mesh serve`` and its settings (each also a key of the settings file)."""
    serve = sub.add_parser(
        "serve",
        help="run the daemon",
        description="Run the mesh daemon (HTTP API and /ws on one port).",
    )
    serve.add_argument("--config", help="a TOML settings file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1; $MESH_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8700; 0 picks one; $MESH_PORT)")
    serve.add_argument(
        "--manifests", help="directory of agent manifests (default manifests; $MESH_MANIFESTS)"
    )
    serve.add_argument(
        "--drain-timeout", type=float, help="seconds calls in flight get at shutdown (default 10)"
    )
    serve.add_argument(
        "--data-dir", help="where rooms keep transcripts (default .mesh; $MESH_DATA_DIR)"
    )
    serve.add_argument("--tls-cert", help="PEM certificate chain: serve https:// and wss://")
    serve.add_argument("--tls-key", help="the certificate's PEM private key")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        help="auto: console on a TTY, else JSON",
    )
    serve.add_argument("--backend", choices=BACKENDS, default=backend_default(), type=backend_name)
    cluster = serve.add_argument_group(
        "cluster",
        "join other daemons over NATS (docs/cluster.md); credentials: $MESH_NATS_TOKEN, "
        "$MESH_NATS_USER and $MESH_NATS_PASSWORD, or the settings file",
    )
    cluster.add_argument("--nats", metavar="URL", help="NATS URL(s), comma-separated ($MESH_NATS)")
    cluster.add_argument("--cluster-id", help="daemons with one id are one mesh (default mesh)")
    cluster.add_argument("--daemon-id", help="this daemon's id (default <hostname>-<random>)")
    cluster.add_argument("--nats-creds", metavar="FILE", help="a NATS .creds file")
    cluster.add_argument("--nats-tls-ca", metavar="FILE", help="CA bundle for NATS over TLS")
    cluster.add_argument("--nats-tls-cert", metavar="FILE", help="client certificate for NATS")
    cluster.add_argument("--nats-tls-key", metavar="FILE", help="its private key")
    cluster.add_argument(
        "--nats-allow-open",
        action="store_true",
        help="join a plaintext NATS at a network address with no credentials anyway",
    )
    cluster.add_argument(
        "--room-lease-ttl", type=float, help="seconds before a dead daemon's rooms move (10)"
    )
    serve.set_defaults(func=cmd_serve)


def _add_call_commands(client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The commands that ask the daemon about agents or call them: agents, call, broadcast,
    resources, read, ping."""
    agents = client("agents", "list the agents the daemon knows")
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")
    agents.set_defaults(func=cmd_agents)

    call = client("call", "call an agent's tool through the daemon")
    call.add_argument("agent")
    call.add_argument("tool")
    call.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an argument (JSON value, else string)",
    )
    call.add_argument(
        "--json", dest="json_args", metavar="OBJECT", help="all arguments as a JSON object"
    )
    call.add_argument("--timeout", type=seconds, default=30.0)
    call.set_defaults(func=cmd_call)

    cast = client("broadcast", "call a tool on every agent (with a capability) at once")
    cast.add_argument("tool")
    cast.add_argument("--capability", help="only agents that advertise this capability")
    cast.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE")
    cast.add_argument("--json", dest="json_args", metavar="OBJECT")
    cast.add_argument("--timeout", type=seconds, default=10.0)
    cast.set_defaults(func=cmd_broadcast)

    resources = client("resources", "list an agent's resources, templates and prompts")
    resources.add_argument("agent")
    resources.add_argument("--timeout", type=seconds, default=10.0)
    resources.set_defaults(func=cmd_resources)

    read = client("read", "read one of an agent's resources")
    read.add_argument("agent")
    read.add_argument("uri")
    read.add_argument("--timeout", type=seconds, default=30.0)
    read.set_defaults(func=cmd_read)

    ping = client("ping", "ping an agent through the daemon")
    ping.add_argument("agent")
    ping.add_argument("--timeout", type=seconds, default=5.0)
    ping.set_defaults(func=cmd_ping)


def _command(argv: Sequence[str]) -> str:
    """The command ``argv`` names: its first word that is not an option (``mesh``'s own
    options take no value), or "" when there is none (``mesh --help``)."""
    return next((word for word in argv if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # Ctrl-C is one line and 130 whenever it comes: while the command's imports load too.
    try:
        args = build_parser(_command(words)).parse_args(words)
        _configure(args)
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return interrupted()
    return code


#: Whether this process sends spans (``OTEL_*`` asked for them and the SDK is installed).
_TRACING = False


def _configure(args: argparse.Namespace) -> None:
    global _TRACING
    # Traces to a collector when OTEL_* asks for them and the SDK is installed; the tracing
    # module (and OpenTelemetry's API, a tenth of a second) loads only then, or was loaded
    # already by the program that runs this command in its own process.
    tracing = sys.modules.get("mesh._telemetry.tracing")
    if args.command == "serve" or tracing_requested(os.environ):
        from mesh._telemetry import tracing as loaded

        loaded.configure_from_environment("mesh-daemon" if args.command == "serve" else "mesh-cli")
        tracing = loaded
    _TRACING = tracing is not None and tracing.active()
    if getattr(args, "runs_library", False):
        from mesh._logging import configure_logging

        # The library is silent until configured; a command that runs its clients (a room
        # followed over WebSocket, a person's seat) shows their warnings. A command that
        # only makes HTTP requests runs no library code that logs, and skips structlog.
        configure_logging(level="warning", stream=sys.stderr)


def _silence_stdout() -> None:
    """The reader went away (``| head``): point stdout at /dev/null so nothing else fails."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
