"""Whether the environment asks this process for traces, read without loading OpenTelemetry.

A ``mesh`` client command decides from this alone whether to load the tracing module and
OpenTelemetry's API: a command nobody traces does not pay for them.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["tracing_requested"]


def tracing_requested(env: Mapping[str, str]) -> bool:
    """True when ``OTEL_TRACES_EXPORTER`` (not ``none``) or an OTLP endpoint is set and
    ``OTEL_SDK_DISABLED`` is not true: the variables the SDK reads to send spans."""
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or exporter_name == "none":
        return False
    return bool(exporter_name or endpoint)
