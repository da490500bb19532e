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
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from urllib.parse import quote, unquote

from mesh._errors import Forbidden
from mesh._orchestrator.bound import Doorway
from mesh.a2a import A2aServer, Caller, TaskStore
from mesh.daemon._auth import Identity
from mesh.daemon._limits import check_endpoint
from mesh.daemon._routes import Params
from mesh.daemon._settings import DaemonSettings
from transports import HttpRequest, HttpResponse

__all__ = ["DaemonA2a"]


def check_webhook(url: str, *, allowed: Sequence[str]) -> str | None:
    """Why the daemon will not POST push notifications to ``url`` (None: it will)."""
    return check_endpoint(url, allowed, "webhook_hosts")


class DaemonA2a:
    """The handlers of the ``/a2a/…`` routes."""

    def __init__(self, door: Doorway, settings: DaemonSettings) -> None:
        self._door = door
        self._scheme = "https" if settings.tls_cert is not None else "http"
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
        self.server = A2aServer(door, store=store, check_push_url=check)

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

    async def handle_card(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        agent = p["agent"]
        refused = self._refused(who, agent)
        if refused is not None:
            return refused
        return await self.server.card(request, agent, self._url(request, agent))

    async def handle_rpc(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        agent = p["agent"]
        refused = self._refused(who, agent)
        if refused is not None:
            return refused
        return await self.server.handle(request, agent, Caller(who.owner, identity=who.principal))

    async def handle_rest(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        """The HTTP+JSON binding: the same agent check, then the same server below."""
        agent = p["agent"]
        refused = self._refused(who, agent)
        if refused is not None:
            return refused
        # The segments under /a2a/{agent}, each percent-decoded as the route table does.
        path = tuple(unquote(s) for s in request.path.split("/") if s)[2:]
        caller = Caller(who.owner, identity=who.principal)
        return await self.server.handle_rest(request, agent, caller, path)
