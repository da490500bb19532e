"""The cluster's branch of the exception tree.

:class:`ClusterError` is a setting that does not fit, NATS refusing the daemon,
or the cluster's machinery stopped; calls to agents held by another daemon fail
with the mesh's own errors (:class:`~mesh.AgentUnavailable` when NATS is away or
the holder is gone, :class:`~mesh.CallTimeout`, the agent's own error), so a
caller never needs to know whether its agent was local.
"""

from __future__ import annotations

from mesh._errors import MeshError

__all__ = ["ClusterError"]


class ClusterError(MeshError):
    """The cluster cannot do what was asked; the message says which setting or server, and why."""
