"""The orchestrator wing: links to agents, the registry kept from them, calls and broadcast.

``spec`` says what one link needs; ``links`` turns manifests into specs;
``table`` keeps the links up and the registry truthful from them (the links
table; ``dial_in``: a dialled-in link's record and takeover); ``door`` makes
every call, for someone, checked once (``access`` holds the rules, ``bound`` a
caller bound to one principal); ``orchestrator`` composes the two for an
embedding program; ``view`` says where each agent stands, registered or not;
``liveness`` keeps the registry's word true (probes on time, calls failed when
an agent goes offline); ``router`` serves ``mesh/call`` for agent-to-agent calls
through the door.
"""
