"""From manifests to links: one connector per agent, by its transport.

Tokens are read here, from the environment variables the manifests name, and
never stored anywhere but in the connectors (and, for agents that dial in, in
the daemon's :class:`~transports.TokenAuthenticator`, as digests).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from mesh._errors import MeshError
from mesh._orchestrator.orchestrator import AgentSpec, Connector
from mesh.manifests._load import (
    DialInSection,
    HttpSection,
    Manifest,
    ManifestError,
    StdioSection,
    WebSocketSection,
    load_manifests,
)
from transports import (
    TokenAuthenticator,
    WebSocketConfig,
    open_http_client,
    open_stdio_process,
    open_websocket,
)

__all__ = [
    "PROTOCOL_ADAPTERS",
    "ProtocolAdapter",
    "dial_in_tokens",
    "spec_from_manifest",
    "specs_from_manifests",
]

#: Builds the connector for an agent whose transport speaks another protocol
#: (``protocol = "mcp"``): given the manifest, the spec made so far and the environment.
ProtocolAdapter = Callable[[Manifest, AgentSpec, Mapping[str, str] | None], Connector]
#: By protocol name. :mod:`mesh.mcp` adds "mcp" when imported (``import mesh`` does);
#: the wing that knows a protocol sits above this one, so it registers itself here.
PROTOCOL_ADAPTERS: dict[str, ProtocolAdapter] = {}


def spec_from_manifest(
    manifest: Manifest, *, environ: Mapping[str, str] | None = None
) -> AgentSpec:
    """The link for one manifest; raises ManifestError if a named token variable is unset."""
    transport = manifest.transport
    limit = manifest.max_frame_size
    endpoint: str | None = None
    connector: Connector | None
    if isinstance(transport, StdioSection):
        connector = partial(
            open_stdio_process,
            transport.command,
            transport.args,
            env=transport.env,
            cwd=transport.cwd,
            max_frame_size=limit,
        )
        kind = "stdio"
    elif isinstance(transport, HttpSection):
        token = transport.token(environ)
        connector = partial(open_http_client, transport.endpoint, token=token, max_frame_size=limit)
        kind, endpoint = "http", transport.endpoint
    elif isinstance(transport, WebSocketSection):
        token = transport.token(environ)
        config = WebSocketConfig(max_frame_size=limit)
        connector = partial(open_websocket, transport.endpoint, token=token, config=config)
        kind, endpoint = "websocket", transport.endpoint
    else:
        connector, kind = None, "websocket"  # dial-in is a direction; the wire is WebSocket
    spec = AgentSpec(
        manifest.id,
        connector,
        name=manifest.name,
        transport=kind,
        endpoint=endpoint,
        capabilities=frozenset(manifest.capabilities),
        heartbeat_interval=manifest.heartbeat_interval,
        heartbeat_ttl=manifest.heartbeat_ttl or 0.0,
        call_timeout=manifest.call_timeout,
        max_frame_size=limit,
        metadata=dict(manifest.metadata),
    )
    protocol = getattr(transport, "protocol", "mesh")
    if protocol == "mesh":
        return spec
    adapter = PROTOCOL_ADAPTERS.get(protocol)
    if adapter is None:
        raise ManifestError(
            f"no adapter for protocol {protocol!r} is loaded (import mesh.mcp)",
            field="$.transport.protocol",
            agent=manifest.id,
        )
    return dataclasses.replace(spec, connector=adapter(manifest, spec, environ))


def specs_from_manifests(
    directory: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> tuple[list[AgentSpec], list[MeshError]]:
    """Every good manifest in ``directory`` as a spec; every problem as an error (none fatal)."""
    loaded = load_manifests(Path(directory))
    specs: list[AgentSpec] = []
    errors: list[MeshError] = list(loaded.errors)
    for agent_id, manifest in loaded.manifests.items():
        try:
            specs.append(spec_from_manifest(manifest, environ=environ))
        except MeshError as exc:
            source = loaded.sources.get(agent_id)
            errors.append(
                exc.in_file(source) if source is not None and hasattr(exc, "in_file") else exc
            )
    return specs, errors


def dial_in_tokens(
    manifests: Mapping[str, Manifest], *, environ: Mapping[str, str] | None = None
) -> tuple[TokenAuthenticator, list[MeshError]]:
    """The tokens agents that dial in must present, from their manifests' variables."""
    tokens = TokenAuthenticator()
    errors: list[MeshError] = []
    for agent_id, manifest in manifests.items():
        if isinstance(manifest.transport, DialInSection):
            try:
                tokens.add(manifest.transport.token(environ), agent_id)
            except MeshError as exc:
                errors.append(exc)
    return tokens, errors
