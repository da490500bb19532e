"""The RPC wing: the pure session, the peer that drives it over a frame stream, reconnects.

``session`` is the sans-I/O core (frames and the clock in, frames and events out);
``peer`` runs it over a :class:`transports.FrameStream`; ``caller`` is the one
interface every caller satisfies; ``connect`` opens peers per transport;
``reconnect`` keeps one alive across redials; ``exchange`` serves one request per
HTTP exchange; ``backoff`` is the pure delay schedule.
"""
