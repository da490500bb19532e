"""Test helpers that ship with the package, one job per module as in ``trio.testing``.

Use them in your own tests as the mesh's tests do::

    async with open_echo_agent() as peer:          # the live echo agent, over stdio
        assert await peer.call_tool("echo", {"message": "hi"}) == {"message": "hi"}

* echo agents: :func:`open_echo_agent` (over stdio), :func:`spawn_echo_server`
  (HTTP/WebSocket), :func:`open_dial_in_echo_agent` (it dials in to us);
* in this process: :func:`open_memory_peer`, :class:`KillableConnector`;
* the calling side: :class:`NotificationRecorder`;
* a daemon: :func:`spawn_daemon` (``mesh serve``), :class:`DaemonClient`;
* the cluster: :func:`spawn_nats_server`.

The pytest plugin (:mod:`mesh.pytest_plugin`, on once the package is installed)
wraps these in fixtures; docs/testing.md shows both.
"""

from mesh._public import publish
from mesh.testing._daemon import Daemon, spawn_daemon
from mesh.testing._daemon_client import DaemonClient, open_daemon_client
from mesh.testing._dial_in import DialInEcho, open_dial_in_echo_agent, spawn_dial_in_echo
from mesh.testing._echo import EchoServer, echo_agent_command, open_echo_agent, spawn_echo_server
from mesh.testing._memory import KillableConnector, open_memory_peer
from mesh.testing._nats import NatsServer, nats_server_binary, spawn_nats_server
from mesh.testing._process import SPAWN_TIMEOUT
from mesh.testing._recorder import NotificationRecorder

__all__ = [
    "SPAWN_TIMEOUT",
    "Daemon",
    "DaemonClient",
    "DialInEcho",
    "EchoServer",
    "KillableConnector",
    "NatsServer",
    "NotificationRecorder",
    "echo_agent_command",
    "nats_server_binary",
    "open_daemon_client",
    "open_dial_in_echo_agent",
    "open_echo_agent",
    "open_memory_peer",
    "spawn_daemon",
    "spawn_dial_in_echo",
    "spawn_echo_server",
    "spawn_nats_server",
]

publish(globals(), __all__)
