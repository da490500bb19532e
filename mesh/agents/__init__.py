"""Agents that ship with agent-mesh (run each with ``python -m mesh.agents.NAME``)."""
