"""The fault matrix (issue 6, item 3), transport level: each fault with the outcome it must have.

Real agent processes on 127.0.0.1 (or an in-process ``open_agent_server`` where the
server's own state is what is checked), both event loops, every wait bounded.

================================  =================  ============================================
fault                             module             outcome asserted
================================  =================  ============================================
agent SIGKILLed mid-call          test_dead_agents   stdio, HTTP, WebSocket (both dial directions):
                                                     every pending call fails in < 1 s with the
                                                     reason; later calls fail at once
agent SIGSTOPped mid-call         test_dead_agents   stdio, WebSocket: pending calls fail with the
                                                     heartbeat-TTL reason within TTL + slack; a
                                                     healthy idle agent outlives a short TTL
server restarted, same port       test_restart       WebSocket, HTTP: the next call succeeds by
                                                     itself; a server that never returns: "gave
                                                     up" to every caller
10,000 malformed, oversized and   test_flood         stdio, WebSocket, HTTP: each one answered
wrongly typed frames                                 (error frame / 400 / 413 with JSON), agent
                                                     alive, RSS flat; a 1,000-deep frame too
slow, idle and half-open clients  test_slow_clients  closed within their timeouts (408 for half a
                                                     request), clients that never read cut off
                                                     (HTTP and WebSocket); others answered at once
bad and missing tokens            test_tokens        a 4001 storm beside a good link, 401 on /rpc;
                                                     nothing they sent processed
hypothesis fuzzing                test_fuzz          Session.receive_frame, POST /rpc, /ws frames:
                                                     never raises, never 5xx, the answer owed
================================  =================  ============================================

Covered elsewhere or later:

- single-fault basics already in ``tests/integration/``: SIGKILL over stdio and the stdio
  flood of 1,000 (``test_stdio_echo``), one refused token of each kind and 4003
  (``test_websocket_auth``), one slow and one idle HTTP client (``test_http_server``), a
  stdio agent killed under a reconnecting peer (``test_reconnect``); the codec alone under
  hypothesis (``tests/unit/test_protocol.py``);
- daemon level, to come with the daemon: the *daemon* restarted (agents dialled in
  reconnect and re-register, calls through it succeed), a SIGSTOPped agent going stale ->
  offline in the registry within its TTL, bad tokens on the daemon's own API, and
  hypothesis over the daemon's HTTP API bodies.
"""
