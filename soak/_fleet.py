"""The soak's processes: the daemon, the agent hosts, the victims; their manifests.

Every agent but the victims is *healthy*: nothing is done to it but calls. The
victims are the agents the soak hurts (SIGKILL, SIGSTOP), each in a process of its
own so that hurting it hurts nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

from mesh.daemon._tokens import ADMIN_TOKEN_FILE
from soak._host import token_variable

#: The repository root: stdio children get only the environment their manifest names.
ROOT: Final = Path(__file__).resolve().parents[1]
#: A process that has not said it listens within this long is broken, not slow.
START_TIMEOUT: Final = 60.0

WS_TOKEN: Final = "soak-ws-token"
VICTIMS: Final = ("victim-stdio", "victim-http", "victim-ws", "victim-dial")


@dataclass(frozen=True, slots=True)
class Plan:
    duration: float
    per_kind: int
    interval: float
    rate: float
    backend: str

    @property
    def ids(self) -> dict[str, list[str]]:
        kinds = ("stdio", "http", "ws", "dial")
        return {kind: [f"{kind}-{n}" for n in range(1, self.per_kind + 1)] for kind in kinds}

    @property
    def echo_agents(self) -> list[str]:
        return [a for ids in self.ids.values() for a in ids]

    @property
    def personas(self) -> list[str]:
        return [f"{name}-{room}" for room in (1, 2, 3) for name in ("ann", "bob")]


@dataclass
class Fleet:
    plan: Plan
    directory: Path
    processes: dict[str, anyio.abc.Process] = field(default_factory=dict)
    http: str = ""
    port: int = 0
    restarts: int = 0
    #: The admin token the daemon wrote into its data directory (every route wants one).
    token: str = ""

    @property
    def ws(self) -> str:
        return "ws" + self.http.removeprefix("http") + "/ws"

    @property
    def events(self) -> str:
        return self.ws.removesuffix("/ws") + "/agents/events"

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    @property
    def env(self) -> dict[str, str]:
        tokens = {token_variable(a): f"token-{a}" for a in [*self.plan.ids["dial"], "victim-dial"]}
        return {**os.environ, "PYTHONPATH": str(ROOT), "SOAK_WS_TOKEN": WS_TOKEN, **tokens}

    # -- starting ------------------------------------------------------------------------

    async def start(self) -> None:
        plan = self.plan
        served = self._host("serve", plan.ids["http"] + plan.ids["ws"])
        hosted = await self._spawn_line("hosts", served)
        victims = {
            v: (await self._spawn_line(v, self._host("serve", [v])))[v]
            for v in ("victim-http", "victim-ws")
        }
        self._write_manifests({**hosted, **victims})
        await self.start_daemon()
        await self._spawn_line("dialler", self._host("dial-in", plan.ids["dial"], self.ws))
        await self.start_victim_dial()

    async def start_daemon(self) -> None:
        self.restarts += 1
        command = [sys.executable, "-m", "mesh.cli", "serve", "--port", str(self.port)]
        command += ["--manifests", str(self.directory / "manifests")]
        command += ["--data-dir", str(self.directory / "data"), "--backend", self.plan.backend]
        command += ["--log-format", "json", "--log-level", "info"]
        log = self.directory / f"daemon-{self.restarts}.log"
        announced = await self._spawn_line("daemon", command, stderr=log)
        self.http = announced["http"]
        self.port = int(self.http.rsplit(":", 1)[1])
        self.token = (self.directory / "data" / ADMIN_TOKEN_FILE).read_text().strip()

    async def start_victim_dial(self) -> None:
        await self._spawn_line("victim-dial", self._host("dial-in", ["victim-dial"], self.ws))

    def _host(self, mode: str, ids: list[str], url: str | None = None) -> list[str]:
        command = [sys.executable, "-m", "soak._host", mode, "--ids", ",".join(ids)]
        command += ["--backend", self.plan.backend]
        return command + (["--url", url] if url else [])

    async def _spawn_line(
        self, name: str, command: list[str], stderr: Path | None = None
    ) -> dict[str, Any]:
        """Start a process that prints one JSON line when ready; that line, decoded."""
        log = stderr or self.directory / f"{name}.log"
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            process = await anyio.open_process(command, env=self.env, stderr=err, cwd=ROOT)
        finally:
            os.close(err)  # the child has its own copy
        self.processes[name] = process
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(START_TIMEOUT):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        decoded: dict[str, Any] = json.loads(line)
        return decoded

    def _write_manifests(self, hosted: dict[str, dict[str, str]]) -> None:
        directory = self.directory / "manifests"
        directory.mkdir(parents=True)
        plan = self.plan
        head = f'heartbeat_interval = {plan.interval}\ncapabilities = ["echo", "soak"]\n'
        for agent in [*plan.ids["stdio"], "victim-stdio"]:
            args = json.dumps(["-m", "mesh.agents.echo", "--stdio", "--id", agent])
            args = args.replace("]", ', "--log-level", "warning"]')
            (directory / f"{agent}.toml").write_text(
                f'id = "{agent}"\n{head}[transport]\ntype = "stdio"\ncommand = "python"\n'
                f"args = {args}\nenv = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}\n"
            )
        for agent in [*plan.ids["http"], "victim-http"]:
            (directory / f"{agent}.toml").write_text(
                f'id = "{agent}"\n{head}[transport]\ntype = "http"\n'
                f'endpoint = "{hosted[agent]["http"]}"\ntoken_env = "SOAK_WS_TOKEN"\n'
            )
        for agent in [*plan.ids["ws"], "victim-ws"]:
            (directory / f"{agent}.toml").write_text(
                f'id = "{agent}"\n{head}[transport]\ntype = "websocket"\n'
                f'endpoint = "{hosted[agent]["ws"]}"\ntoken_env = "SOAK_WS_TOKEN"\n'
            )
        for agent in [*plan.ids["dial"], "victim-dial"]:
            (directory / f"{agent}.toml").write_text(
                f'id = "{agent}"\n{head}[transport]\ntype = "dial-in"\n'
                f'token_env = "{token_variable(agent)}"\n'
            )
        for persona in plan.personas:
            self._persona(directory, persona)

    def _persona(self, directory: Path, agent: str) -> None:
        name = agent.split("-")[0].title()
        path = directory / f"{agent}.toml"
        script = json.dumps([f"{name}'s point {{turn}}: {word} matters." for word in WORDS])
        path.write_text(
            f'id = "{agent}"\nname = "{name}"\nheartbeat_interval = {self.plan.interval}\n'
            f'[transport]\ntype = "stdio"\ncommand = "python"\n'
            f'args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]\n'
            f"env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}\n"
            f'[persona]\nsystem_prompt = "Be brief."\nrole = "participant"\n'
            f'[persona.provider]\nprovider = "scripted"\nscript = {script}\n'
            f"delay = {self.turn_delay}\n"
        )

    @property
    def turn_delay(self) -> float:
        """A room of TURNS turns lasts about a fifth of the soak."""
        return round(max(0.2, 0.2 * self.plan.duration / TURNS), 2)

    # -- hurting and measuring -----------------------------------------------------------

    def signal(self, name: str, signum: signal.Signals) -> None:
        os.kill(self.processes[name].pid, signum)

    def stdio_child(self, agent_id: str) -> int:
        """The pid of the daemon's stdio child serving ``agent_id``."""
        parent = self.processes["daemon"].pid
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with suppress(OSError):
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if int(stat.rsplit(")", 1)[1].split()[1]) == parent and (
                    agent_id.encode() in cmdline
                ):
                    return int(entry.name)
        raise LookupError(f"no stdio child of the daemon serves {agent_id!r}")

    def daemon_rss(self) -> int:
        with open(f"/proc/{self.processes['daemon'].pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    async def stop_daemon(self) -> int:
        """SIGTERM, and the exit status (the daemon drains first)."""
        daemon = self.processes.pop("daemon")
        daemon.send_signal(signal.SIGTERM)
        with anyio.fail_after(START_TIMEOUT):
            code = await daemon.wait()
        await daemon.aclose()
        return code

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for process in self.processes.values():
                for signum in (signal.SIGCONT, signal.SIGTERM):
                    with suppress(ProcessLookupError):
                        os.kill(process.pid, signum)
            for process in self.processes.values():
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                await process.aclose()


#: Turns per room: long enough to span a fault, short enough to end well within the soak.
TURNS: Final = 30
WORDS: Final = (
    "latency", "memory", "ordering", "backpressure", "deadlines", "tracing", "batching",
    "retries", "ownership", "naming", "testing", "shutdown", "framing", "limits", "tokens",
    "rooms", "observers", "heartbeats", "backoff", "drains",
)  # fmt: skip
