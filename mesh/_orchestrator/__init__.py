"""The orchestrator wing: links to agents, the registry kept from them, calls and broadcast.

``spec`` says what one link needs; ``links`` turns manifests into specs;
``orchestrator`` keeps the links up and calls through them; ``view`` says where
each agent stands, registered or not; ``liveness`` keeps the registry's word true
(probes on time, calls failed when an agent goes offline); ``router`` serves
``mesh/call`` for agent-to-agent calls.
"""
