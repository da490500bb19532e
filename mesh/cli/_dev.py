"""``mesh dev AGENT`` tries an agent by itself; ``mesh tools AGENT`` lists a daemon's agent's tools.

``AGENT`` for ``mesh dev`` is a Python file (``greeter.py``, or ``greeter.py:agent``
to pick one), a module (``mypkg.greeter[:agent]``) or a manifest (``greeter.toml``).
A file or a module is imported and its :class:`~mesh.Agent` served in this
process (found as ``agent``, or as the only ``Agent`` in the module); a manifest
is started or dialled as the daemon would. Then:

* with ``--call TOOL [--arg K=V …] [--json OBJECT]``: one call, its result as JSON
  on stdout, progress live on stderr, and the CLI's exit codes;
* on a terminal (or with ``--interactive``): the tools, then a prompt that takes
  ``TOOL k=v …`` lines (``help`` shows the tools again, ``quit`` or Ctrl-D ends);
* otherwise: the agent and its tools, with their argument types, then exit.

Errors are shown the way an author needs them: the message and where (the
argument path for invalid arguments, with the tool's usage line), and for an
agent served in-process the traceback of the tool that raised, logged on stderr.
Exit codes are the CLI's (:mod:`mesh.cli._codes`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shlex
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TextIO

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    InvalidParams,
    MeshError,
    RemoteError,
)
from mesh._text import json_text, printable
from mesh.cli._codes import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    interrupted,
    seconds,
)
from mesh.cli._tools_table import format_tools, usage

if TYPE_CHECKING:
    from mesh._rpc.peer import Peer
    from mesh._sdk.agent import Agent
    from mesh.manifests._types import Manifest

__all__ = ["add_dev_commands", "load_agent"]

Request = Callable[..., Any]

#: How long an agent gets to answer ``agent/info`` once started (a cold Python start is slow).
CONNECT_TIMEOUT: Final = 20.0


class DevError(Exception):
    """Why ``mesh dev`` cannot go on, and the exit code that says so."""

    def __init__(self, code: int, message: str, *, bare: bool = False) -> None:
        super().__init__(message)
        self.code = code
        #: Shown as it is, without the ``mesh dev:`` prefix (``file:line:col: ...``).
        self.bare = bare


@dataclass(frozen=True, slots=True)
class Target:
    """What ``AGENT`` named: an agent object to serve here, or a manifest to start."""

    label: str
    agent: Agent | None = None
    manifest: Manifest | None = None


# -- finding the agent ---------------------------------------------------------------------


#: The event loops a command runs on; ``MESH_BACKEND`` picks the default.
BACKENDS = ("asyncio", "trio")


def backend_default() -> str:
    """``MESH_BACKEND``, or asyncio when it is unset or empty."""
    return os.environ.get("MESH_BACKEND") or "asyncio"


def backend_name(value: str) -> str:
    """A backend's name, checked: argparse checks a default (``MESH_BACKEND``) only here."""
    if value not in BACKENDS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of asyncio, trio (MESH_BACKEND)")
    return value


def load_agent(text: str) -> Target:
    """Resolve ``AGENT`` (a file, a module or a manifest; ``:name`` picks an attribute)."""
    if text.endswith(".toml"):
        return _manifest_target(Path(text))
    where, _, name = text.partition(":") if not Path(text).exists() else (text, "", "")
    if where.endswith(".py") or Path(where).is_file():
        module = _import_file(Path(where))
    else:
        module = _import_module(where)
    return Target(label=text, agent=_find_agent(module, name or None, where))


def _manifest_target(path: Path) -> Target:
    from mesh.manifests._load import ManifestError, load_manifest
    from mesh.manifests._types import DialInSection

    try:
        manifest = load_manifest(path)
    except ManifestError as exc:
        raise DevError(EXIT_FAILED, str(exc)) from None
    if isinstance(manifest.transport, DialInSection):
        raise DevError(
            EXIT_USAGE,
            f"{path}: agent {manifest.id!r} dials in to a daemon; run `mesh serve` and try "
            f"`mesh tools {manifest.id}` and `mesh call {manifest.id} TOOL` instead",
        )
    return Target(label=str(path), manifest=manifest)


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise DevError(EXIT_USAGE, f"no agent file at {str(path)!r}")
    # Like `python greeter.py`: the file's directory comes first, so its neighbours import.
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(f"_mesh_dev_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise DevError(EXIT_USAGE, f"{path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    _run_author_code(lambda: spec.loader.exec_module(module), str(path))  # type: ignore[union-attr]
    return module


def _import_module(name: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):  # "", ".", "a b": no module
        raise DevError(EXIT_USAGE, f"{name!r} is neither a file, a manifest (.toml) nor a module")
    sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        module: ModuleType = _run_author_code(lambda: importlib.import_module(name), name)
        return module
    except DevError as exc:
        if isinstance(exc.__cause__, ModuleNotFoundError) and exc.__cause__.name == name:
            raise DevError(
                EXIT_USAGE, f"{name!r} is neither a file, a manifest (.toml) nor a module"
            ) from None
        raise


def _run_author_code(load: Callable[[], Any], where: str) -> Any:
    try:
        return load()
    except SyntaxError as exc:  # one line, as compilers and editors read it
        raise DevError(EXIT_USAGE, _syntax_error_line(exc, where), bare=True) from exc
    except Exception as exc:
        # The author's own bug: their frames are the most useful thing to show; mesh's and
        # the import machinery's, which called them, are not theirs to read.
        shown = "".join(_authors_frames(traceback.TracebackException.from_exception(exc)).format())
        raise DevError(EXIT_USAGE, f"importing {where} failed:\n{shown.rstrip()}") from exc


def _syntax_error_line(exc: SyntaxError, given: str) -> str:
    """``broken.py:1:12: SyntaxError: invalid syntax``, the file named as it was given."""
    name = exc.filename
    if name and Path(given).is_file() and Path(name).resolve() == Path(given).resolve():
        name = given
    where = ":".join(str(part) for part in (name, exc.lineno, exc.offset) if part)
    return f"{where}: {type(exc).__name__}: {exc.msg}"


#: Frames in these are the caller's, not the author's: mesh itself and importlib's.
_NOT_AUTHORS: Final = (str(Path(__file__).resolve().parent.parent) + os.sep, "<frozen ")


def _authors_frames(shown: traceback.TracebackException) -> traceback.TracebackException:
    """``shown`` (and what it was raised from) without mesh's frames or importlib's."""
    kept = [f for f in shown.stack if not f.filename.startswith(_NOT_AUTHORS)]
    shown.stack = traceback.StackSummary.from_list(kept)
    for linked in (shown.__cause__, shown.__context__):
        if linked is not None:
            _authors_frames(linked)
    return shown


def _find_agent(module: ModuleType, name: str | None, where: str) -> Agent:
    from mesh._sdk.agent import Agent

    if name is not None:
        found = getattr(module, name, None)
        if not isinstance(found, Agent):
            raise DevError(EXIT_USAGE, f"{where} has no Agent named {name!r}")
        return found
    if isinstance(getattr(module, "agent", None), Agent):
        return module.agent  # type: ignore[no-any-return]
    agents = {key: value for key, value in vars(module).items() if isinstance(value, Agent)}
    if len(agents) == 1:
        return next(iter(agents.values()))
    if not agents:
        raise DevError(EXIT_USAGE, f"{where} defines no mesh.Agent")
    names = ", ".join(sorted(agents))
    raise DevError(EXIT_USAGE, f"{where} defines several agents ({names}); pick one: {where}:NAME")


# -- connecting ----------------------------------------------------------------------------


@asynccontextmanager
async def open_target(target: Target) -> AsyncIterator[Peer]:
    """A Peer to the agent: served here over memory, or started as its manifest says."""
    from mesh._orchestrator.links import spec_from_manifest
    from mesh._orchestrator.spec import local_connector
    from mesh._rpc.boundary import map_transport_errors
    from mesh._rpc.connect import handshake
    from mesh._rpc.peer import open_peer
    from mesh._rpc.session import SessionConfig
    from transports import unwrap_single_error

    if target.agent is not None:
        connector, agent_id, config = local_connector(target.agent), target.agent.id, None
    else:
        assert target.manifest is not None
        spec = spec_from_manifest(target.manifest)
        assert spec.connector is not None  # dial-in manifests were refused when loaded
        connector, agent_id = spec.connector, spec.id
        config = SessionConfig(max_frame_size=spec.max_frame_size)
    async with AsyncExitStack() as opened:
        # A command that is not there, a cwd that is not, an agent that exits at once: the
        # one-line ConnectFailed the daemon would log, not the OSError of a child process.
        with unwrap_single_error(), map_transport_errors(agent=agent_id):
            stream = await opened.enter_async_context(connector())
            peer = await opened.enter_async_context(
                open_peer(stream, agent=agent_id, config=config)
            )
            await handshake(peer, timeout=CONNECT_TIMEOUT)
        yield peer


# -- calling -------------------------------------------------------------------------------


def parse_arguments(words: Sequence[str]) -> dict[str, Any]:
    """``k=v`` words (values are JSON if they parse, else strings), or one JSON object."""
    if len(words) == 1 and words[0].lstrip().startswith("{"):
        loaded = json.loads(words[0])
        if not isinstance(loaded, dict):
            raise ValueError("arguments as JSON must be an object")
        return loaded
    arguments: dict[str, Any] = {}
    for word in words:
        key, sep, raw = word.partition("=")
        if not sep or not key:
            raise ValueError(f"arguments are KEY=VALUE, got {word!r}")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


class ProgressLine:
    """Progress reports as they come: one line redrawn on a terminal, a line each elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._shown = False

    def show(self, params: Mapping[str, Any]) -> None:
        total = params.get("total")
        done = f"{params.get('progress', 0):g}" + (f"/{total:g}" if total is not None else "")
        message = printable(str(params.get("message") or ""))
        text = f"progress {done} {message}".rstrip()
        if self._tty:
            self._stream.write(f"\r\x1b[K{text}")
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown and self._tty:
            self._stream.write("\n")
            self._stream.flush()
        self._shown = False


def _exit_code(exc: MeshError) -> int:
    if isinstance(exc, CallTimeout):
        return EXIT_TIMEOUT
    if isinstance(exc, ConnectionLost | AgentUnavailable):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def report_error(exc: MeshError, tools: Sequence[Mapping[str, Any]], tool: str) -> None:
    """The error as an author wants it: the message, its type, and how to call the tool."""
    kind = type(exc).__name__
    raised = exc.data.get("type") if isinstance(exc.data, dict) else None
    where = f" (raised {raised})" if raised and isinstance(exc, RemoteError) else ""
    print(f"error: {kind} {exc.code}{where}: {printable(str(exc))}", file=sys.stderr)
    if isinstance(exc, InvalidParams):
        for described in tools:
            if described.get("name") == tool:
                print(f"usage: {usage(described)}", file=sys.stderr)


async def call_once(
    peer: Peer,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    timeout: float,
    tools: Sequence[Mapping[str, Any]],
) -> int:
    """Call one tool; print its result (stdout) or its error (stderr); the exit code."""
    progress = ProgressLine(sys.stderr)
    params = {"name": tool, "arguments": dict(arguments)}
    try:
        result = await peer.call("tools/call", params, timeout=timeout, on_progress=progress.show)
    except MeshError as exc:
        progress.close()
        report_error(exc, tools, tool)
        return _exit_code(exc)
    progress.close()
    print(json_text(result, indent=2), flush=True)
    return EXIT_OK


async def repl(
    peer: Peer,
    tools: Sequence[Mapping[str, Any]],
    read_line: Callable[[], Awaitable[str]],
    *,
    timeout: float,
) -> int:
    """Read ``TOOL k=v …`` lines and call each, until ``quit`` or the end of input."""
    while True:
        try:
            line = await read_line()
        except EOFError:
            return EXIT_OK
        try:
            words = shlex.split(line)
            name, *rest = words or [""]
            arguments = parse_arguments(rest) if name else {}
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            continue
        if name in ("quit", "exit"):
            return EXIT_OK
        if name in ("help", "?", "tools"):
            print(format_tools(tools))
        elif name:
            await call_once(peer, name, arguments, timeout=timeout, tools=tools)


def _stdin_reader(prompt: str) -> Callable[[], Awaitable[str]]:
    import anyio.to_thread

    async def read_line() -> str:
        return await anyio.to_thread.run_sync(input, prompt, abandon_on_cancel=True)

    return read_line


async def dev_session(target: Target, args: argparse.Namespace) -> int:
    async with open_target(target) as peer:
        tools = (await peer.call("tools/list", timeout=args.timeout))["tools"]
        if args.call is not None:
            arguments = {**args.json_args, **args.arg}
            return await call_once(peer, args.call, arguments, timeout=args.timeout, tools=tools)
        info = peer.remote_info or {}
        title = f"{info.get('id', peer.agent)} {info.get('version', '')}".rstrip()
        description = f": {info['description']}" if info.get("description") else ""
        print(printable(f"{title}{description}  [{target.label}]") + "\n")
        print(format_tools(tools), flush=True)
        if not (args.interactive or sys.stdin.isatty()):
            return EXIT_OK
        print("\ncall a tool: TOOL key=value ... (help: the tools again; quit or Ctrl-D: leave)")
        prompt = f"{printable(str(info.get('id', 'agent')))}> " if sys.stdin.isatty() else ""
        return await repl(peer, tools, _stdin_reader(prompt), timeout=args.timeout)


# -- the commands ----------------------------------------------------------------------------


def cmd_dev(args: argparse.Namespace) -> int:
    import anyio

    from mesh._logging import configure_logging
    from transports import unwrap_single_error

    # Readable lines even off a terminal: an author reads these, not a log collector.
    configure_logging(level=args.log_level, stream=sys.stderr, json=False)
    try:
        args.arg = parse_arguments(args.arg) if args.arg else {}
        args.json_args = parse_arguments([args.json_args]) if args.json_args else {}
    except ValueError as exc:
        return _refuse(EXIT_USAGE, str(exc))
    try:
        target = load_agent(args.agent)
        # The session's task groups wrap what a call raised (a CallTimeout): shown as itself.
        with unwrap_single_error():
            code: int = anyio.run(dev_session, target, args, backend=args.backend)
        return code
    except DevError as exc:
        if exc.bare:
            print(printable(str(exc)), file=sys.stderr)
            return exc.code
        return _refuse(exc.code, str(exc))
    except MeshError as exc:  # the agent would not start, or would not answer
        return _refuse(_exit_code(exc) if not isinstance(exc, RemoteError) else 1, str(exc))
    except KeyboardInterrupt:
        return interrupted()
    except BaseExceptionGroup as group:  # two at once (a timeout and the link it closed): the first
        first = _first_mesh_error(group)
        if first is None:
            raise
        return _refuse(_exit_code(first) if not isinstance(first, RemoteError) else 1, str(first))


def _first_mesh_error(group: BaseExceptionGroup[BaseException]) -> MeshError | None:
    matched, _ = group.split(MeshError)
    leaf: BaseException | None = matched
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf if isinstance(leaf, MeshError) else None


def _refuse(code: int, message: str) -> int:
    print(f"mesh dev: {printable(message)}", file=sys.stderr)
    return code


def cmd_tools(args: argparse.Namespace, request: Request) -> int:
    body = {"agent": args.agent, "method": "tools/list", "timeout": args.timeout}
    tools = request(args, "POST", "/rpc", body, timeout=args.timeout)["result"]["tools"]
    print(json_text(tools, indent=2) if args.json else format_tools(tools))
    return EXIT_OK


def add_dev_commands(
    sub: Any, client: Callable[[str, str], argparse.ArgumentParser], request: Request
) -> None:
    text = "try an agent by itself: list its tools, call one, or call them at a prompt"
    dev = sub.add_parser("dev", help=text, description=text)
    dev.add_argument("agent", help="a Python file, a module (pkg.mod[:name]) or a manifest (.toml)")
    dev.add_argument("--call", metavar="TOOL", help="call this tool once, print the result, exit")
    dev.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE")
    dev.add_argument("--json", dest="json_args", metavar="OBJECT", help="arguments as JSON")
    dev.add_argument("--timeout", type=seconds, default=30.0, help="seconds per call (default 30)")
    dev.add_argument(
        "-i", "--interactive", action="store_true", help="prompt for calls even off a terminal"
    )
    dev.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    dev.add_argument("--backend", choices=BACKENDS, default=backend_default(), type=backend_name)
    dev.set_defaults(func=cmd_dev)

    tools = client("tools", "list an agent's tools and their arguments, through the daemon")
    tools.add_argument("agent")
    tools.add_argument("--json", action="store_true", help="print the tools/list JSON")
    tools.add_argument("--timeout", type=seconds, default=10.0)
    tools.set_defaults(func=lambda a: cmd_tools(a, request))
