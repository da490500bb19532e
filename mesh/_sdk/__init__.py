"""The SDK wing: :class:`~mesh.Agent` and its tools, serving an agent, running one as a program."""
