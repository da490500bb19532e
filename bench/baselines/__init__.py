"""The baselines: raw libraries and peer frameworks the mesh is measured against.

Each module holds a scenario's client and, runnable with ``python -m``, its
server. Nothing here imports another baseline's dependencies at import time.
"""
