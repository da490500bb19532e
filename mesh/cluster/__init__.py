"""Many daemons, one mesh: ``mesh serve --nats URL`` joins the others over NATS.

Optional: it needs the ``cluster`` extra (``pip install 'agent-mesh[cluster]'``,
which brings nats-py). The registry lives in a JetStream key-value bucket whose
entries expire by TTL; a call to an agent another daemon holds is a NATS request
to that daemon carrying the deadline, cancel and progress; a room is held by
one daemon at a time under a lease, its events live in a JetStream stream, and
another daemon resumes it exactly once when its holder dies. See
``docs/cluster.md``.
"""

from mesh._public import publish
from mesh.cluster._errors import ClusterError
from mesh.cluster._node import Cluster, open_cluster
from mesh.cluster._registry import HOLDER, ClusterRegistry
from mesh.cluster._settings import ClusterSettings

__all__ = [
    "HOLDER",
    "Cluster",
    "ClusterError",
    "ClusterRegistry",
    "ClusterSettings",
    "open_cluster",
]


publish(globals(), __all__)
