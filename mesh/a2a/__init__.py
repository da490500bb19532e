"""A2A both ways: every mesh agent an A2A agent, and (mounted) every A2A agent a mesh agent.

- :class:`A2aServer`: the JSON-RPC and HTTP+JSON bindings of A2A 1.0 (and 0.3's
  names) for the agents of an orchestrator, one handler below both: cards, tasks
  in a bounded :class:`TaskStore` (on disk when given a directory), streams that
  a client re-joins from its last event, a tool's files as file parts. The daemon
  serves it at ``/a2a/{agent}`` behind its tokens.
- :func:`a2a_connector` / :func:`open_a2a_mount`: a remote A2A agent as a
  connector the orchestrator links like any agent; a manifest says
  ``protocol = "a2a"`` on an ``http`` transport.

See ``docs/a2a.md``. Nothing here needs the ``a2a-sdk``: it is a test peer and a
benchmark baseline, never a runtime dependency.
"""

from __future__ import annotations

from collections.abc import Mapping

from mesh._orchestrator.links import PROTOCOL_ADAPTERS
from mesh._orchestrator.spec import AgentSpec
from mesh._public import publish
from mesh.a2a._card import build_card
from mesh.a2a._client import A2aClient
from mesh.a2a._mount import A2aMount, a2a_connector, open_a2a_mount
from mesh.a2a._server import A2aError, A2aServer, Caller
from mesh.a2a._tasks import StoreFull, Task, TaskStore
from mesh.manifests import HttpSection, Manifest
from transports import Connector

__all__ = [
    "A2aClient",
    "A2aError",
    "A2aMount",
    "A2aServer",
    "Caller",
    "StoreFull",
    "Task",
    "TaskStore",
    "a2a_connector",
    "build_card",
    "open_a2a_mount",
]


def _mount_manifest(
    manifest: Manifest, spec: AgentSpec, environ: Mapping[str, str] | None
) -> Connector:
    """The connector for a manifest with ``protocol = "a2a"`` (an ``http`` transport)."""
    transport = manifest.transport
    assert isinstance(transport, HttpSection)  # the manifest refuses a2a on any other
    return a2a_connector(
        transport.endpoint,
        agent=manifest.id,
        token=transport.token(environ),
        liveness=manifest.heartbeat_interval,
    )


PROTOCOL_ADAPTERS["a2a"] = _mount_manifest

publish(globals(), __all__)
