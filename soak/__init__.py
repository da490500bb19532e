"""``make soak``: the daemon held for minutes under load and faults, and what it said meanwhile.

Not a test and not in CI: it runs ``mesh serve`` for five minutes (``--duration``) on
loopback with about fifty agents over every transport (stdio children, HTTP and
WebSocket servers it dials, agents that dial in), five ``/agents/events`` watchers,
three rooms of scripted personas, a steady call load, SIGKILL and SIGSTOP of some
agents and one daemon restart, then prints calls ok and failed by reason, status
flaps of healthy agents, watcher drops, how each room ended, and the daemon's RSS.
It exits 0 only when healthy agents never flapped, no watcher dropped while the
daemon was up, no call to a healthy agent failed outside the restart, and every
room ended with a recorded reason.
"""
