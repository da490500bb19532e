"""The daemon's A2A face: each agent an A2A agent at ``/a2a/{agent}`` (docs/a2a.md).

``GET /a2a/{agent}/.well-known/agent-card.json`` (the ``read`` right) is the
agent's card; ``POST /a2a/{agent}`` (the ``call`` right) is its JSON-RPC
endpoint, and the paths under it (``message:send``, ``tasks/{id}``, …; the ``call``
right on every verb) its HTTP+JSON binding, answered by the same server. Before
any, the agent must be one the daemon knows (404) and its manifest's
``access.callers`` must admit the token (403: the door, asked
ahead; every call a task makes passes the door again). An agent a token may not
call has, for that token, no card either. Tasks belong to the token that made
them: another token asking for one is told there is no such task.

The A2A server, and the ``mesh.a2a`` wing with it, loads on the first ``/a2a`` request
that passes those checks, not when the daemon starts: a daemon nobody asks over A2A
does not pay for it. One whose data directory holds tasks an earlier run kept loads it
at start, as it always did, and takes them back then.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, unquote

import anyio
import anyio.abc

from mesh._errors import Forbidden
from mesh._orchestrator.bound import Doorway
from mesh.daemon._auth import Identity
from mesh.daemon._limits import check_endpoint
from mesh.daemon._routes import Params
from mesh.daemon._settings import DaemonSettings
from transports import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from mesh.a2a import A2aServer, Caller

__all__ = ["JOURNAL_FILE", "SERVER_START_TIMEOUT", "DaemonA2a"]

#: The tasks an earlier run kept, in the data directory (``mesh.a2a._journal.FILE``,
#: named here so that looking for it does not load the wing).
JOURNAL_FILE: Final = "a2a.sqlite3"
#: How long the first ``/a2a`` request waits for the server to load (its imports and
#: the journal: well under a second, ten times that on a loaded machine) before a 503.
SERVER_START_TIMEOUT: Final = 30.0


def check_webhook(url: str, *, allowed: Sequence[str]) -> str | None:
    """Why the daemon will not POST push notifications to ``url`` (None: it will)."""
    return check_endpoint(url, allowed, "webhook_hosts")


class DaemonA2a:
    """The handlers of the ``/a2a/…`` routes."""

    def __init__(self, door: Doorway, settings: DaemonSettings) -> None:
        self._door = door
        self._settings = settings
        self._scheme = "https" if settings.tls_cert is not None else "http"
        #: The server, once loaded (see the module docstring).
        self.server: A2aServer | None = None
        self._wanted = anyio.Event()
        self._ready = anyio.Event()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the A2A server's tasks until cancelled, once it is loaded: at once if the
        data directory keeps tasks, else on the first ``/a2a`` request."""
        kept = (Path(self._settings.data_dir) / JOURNAL_FILE).exists()
        if not kept:
            task_status.started()
            await self._wanted.wait()
        server = self._load()
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            self.server = server
            self._ready.set()
            if kept:
                task_status.started()

    def _load(self) -> A2aServer:
        from mesh.a2a import A2aServer, TaskStore  # the wing, loaded on first use

        settings = self._settings
        # Webhooks go only to the hosts the operator named (none: push is not offered), and
        # are held to the rule of registered endpoints: no request forgery.
        hosts = settings.webhook_hosts
        check = partial(check_webhook, allowed=hosts) if hosts else None
        store = TaskStore(
            max_tasks=settings.a2a_max_tasks,
            max_per_owner=settings.a2a_max_tasks_per_identity,
            max_history=settings.a2a_task_history,
            retention=settings.a2a_task_retention,
            directory=settings.data_dir,
        )
        return A2aServer(self._door, store=store, check_push_url=check)

    async def _server(self) -> A2aServer | None:
        """The server, loaded now if it is not yet; None if it did not come up in time."""
        if self.server is None:
            self._wanted.set()
            with anyio.move_on_after(SERVER_START_TIMEOUT):
                await self._ready.wait()
        return self.server

    def _refused(self, who: Identity, agent: str) -> HttpResponse | None:
        if not self._door.knows(agent):
            return HttpResponse.error(404, f"no agent {agent!r}")
        try:  # the door's own answer, asked ahead: no card for an agent the token may not call
            self._door.authorize(agent, "tools/call", on_behalf_of=who.principal)
        except Forbidden as exc:
            return HttpResponse.error(403, str(exc))
        return None

    def _url(self, request: HttpRequest, agent: str) -> str:
        host = request.header("host") or "127.0.0.1"
        return f"{self._scheme}://{host}/a2a/{quote(agent, safe='')}"

    async def _admit(self, who: Identity, agent: str) -> A2aServer | HttpResponse:
        """The server to answer with, or the refusal (checked before the server loads)."""
        refused = self._refused(who, agent)
        if refused is not None:
            return refused
        server = await self._server()
        if server is None:
            why = f"the A2A server did not start within {SERVER_START_TIMEOUT:g} s"
            return HttpResponse.error(503, why)
        return server

    async def handle_card(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        agent = p["agent"]
        server = await self._admit(who, agent)
        if isinstance(server, HttpResponse):
            return server
        return await server.card(request, agent, self._url(request, agent))

    async def handle_rpc(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        agent = p["agent"]
        server = await self._admit(who, agent)
        if isinstance(server, HttpResponse):
            return server
        return await server.handle(request, agent, _caller(who))

    async def handle_rest(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        """The HTTP+JSON binding: the same agent check, then the same server below."""
        agent = p["agent"]
        server = await self._admit(who, agent)
        if isinstance(server, HttpResponse):
            return server
        # The segments under /a2a/{agent}, each percent-decoded as the route table does.
        path = tuple(unquote(s) for s in request.path.split("/") if s)[2:]
        return await server.handle_rest(request, agent, _caller(who), path)


def _caller(who: Identity) -> Caller:
    """Who asks, as the A2A server keys tasks: loaded with the server, so imported here."""
    from mesh.a2a import Caller

    return Caller(who.owner, identity=who.principal)
