"""The mount tests' ``MCPServer`` (the ``mcp`` SDK), exporting its own spans via OTLP.

The SDK's servers trace every request with ``OpenTelemetryMiddleware`` (a SERVER span, its
parent read from ``_meta``); this only gives the process a tracer provider from ``OTEL_*``.
"""

from __future__ import annotations

from mesh._telemetry.tracing import configure_from_environment
from tests.mcp.mcp_server import app

if __name__ == "__main__":
    configure_from_environment("mcp-peer")
    app.run()
