"""A2A both ways: every mesh agent an A2A agent, and (mounted) every A2A agent a mesh agent.

- :class:`A2aServer`: the JSON-RPC binding of A2A 1.0 (and 0.3's names) for the
  agents of an orchestrator: cards, tasks in a bounded :class:`TaskStore`,
  streams that a client re-joins from its last event. The daemon serves it at
  ``/a2a/{agent}`` behind its tokens.

See ``docs/a2a.md``. Nothing here needs the ``a2a-sdk``: it is a test peer and a
benchmark baseline, never a runtime dependency.
"""

from __future__ import annotations

from mesh._public import publish
from mesh.a2a._card import build_card
from mesh.a2a._server import A2aError, A2aServer, Caller
from mesh.a2a._tasks import StoreFull, Task, TaskStore

__all__ = ["A2aError", "A2aServer", "Caller", "StoreFull", "Task", "TaskStore", "build_card"]

publish(globals(), __all__)
