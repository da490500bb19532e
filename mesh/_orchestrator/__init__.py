"""The orchestrator wing: links to agents, the registry kept from them, calls and broadcast.

``spec`` says what one link needs; ``links`` turns manifests into specs;
``orchestrator`` keeps the links up and calls through them; ``router`` serves
``mesh/call`` for agent-to-agent calls.
"""
