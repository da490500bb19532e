"""From manifests to links: one connector per agent, by its transport.

Tokens are read here, from the environment variables the manifests name, and
never stored anywhere but in the connectors (and, for agents that dial in, in
the orchestrator's :class:`~transports.TokenAuthenticator`, as digests).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.spec import AgentSpec
from mesh._telemetry.tracing import MESH_ID_ENV
from mesh._telemetry.tracing import environment as trace_environment
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
    Connector,
    FrameStream,
    TokenAuthenticator,
    WebSocketConfig,
    open_http_client,
    open_stdio_process,
    open_websocket,
)

__all__ = [
    "PROTOCOL_ADAPTERS",
    "ManifestLinks",
    "ProtocolAdapter",
    "dial_in_tokens",
    "links_from_manifests",
    "protocol_adapter",
    "spec_from_manifest",
]

log = get_logger("mesh.orchestrator")

#: Builds the connector for an agent whose transport speaks another protocol
#: (``protocol = "mcp"``): given the manifest, the spec made so far and the environment.
ProtocolAdapter = Callable[[Manifest, AgentSpec, Mapping[str, str] | None], Connector]
#: By protocol name. The wing that knows a protocol sits above this one, so it registers
#: itself here when imported (:mod:`mesh.mcp._manifest` adds "mcp").
PROTOCOL_ADAPTERS: dict[str, ProtocolAdapter] = {}
#: The wing to import for each protocol a manifest may name, on first use: a manifest that
#: says ``protocol = "mcp"`` loads in a process that never imported :mod:`mesh.mcp`.
PROTOCOL_WINGS: Final = {"mcp": "mesh.mcp._manifest", "a2a": "mesh.a2a"}


@dataclass(frozen=True, slots=True)
class ManifestLinks:
    """What a directory of manifests gives an orchestrator.

    ``specs`` links every agent; ``tokens`` are those that agents which dial in
    must present; ``errors`` holds every manifest that did not load, could not be
    linked, or names a dial-in token variable that is unset (none is fatal).
    ``unusable`` names the agents whose manifest loaded but which can never
    connect (a token variable unset), with why: they are in ``specs`` all the same,
    without a connector, so that they are listed as ``offline`` with that reason
    rather than missing. ``ids`` is every id a manifest that loaded defines, linked
    or not: the operator's.
    """

    specs: list[AgentSpec]
    tokens: TokenAuthenticator
    errors: list[MeshError]
    unusable: dict[str, str] = field(default_factory=dict)
    ids: frozenset[str] = frozenset()


def _spawn(
    command: str, args: Sequence[str], *, env: Mapping[str, str], **options: Any
) -> AbstractAsyncContextManager[FrameStream]:
    """Start a stdio agent; it continues the trace current where its link is kept up,
    and its spans name it by its id in the mesh (``options["agent"]``)."""
    named = {MESH_ID_ENV: options["agent"]} if options.get("agent") else {}
    return open_stdio_process(command, args, env={**env, **trace_environment(), **named}, **options)


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
            _spawn,
            transport.command,
            transport.args,
            env=transport.env,
            cwd=transport.cwd,
            max_frame_size=limit,
            agent=manifest.id,
        )
        kind = "stdio"
    elif isinstance(transport, HttpSection):
        token = transport.token(environ)
        connector = partial(open_http_client, transport.endpoint, token=token, max_frame_size=limit)
        kind, endpoint = "http", transport.endpoint
    elif isinstance(transport, WebSocketSection):
        token = transport.token(environ)
        # Heartbeats are on for every manifest link: they are its keepalive.
        config = WebSocketConfig(max_frame_size=limit, ping_interval=None)
        connector = partial(open_websocket, transport.endpoint, token=token, config=config)
        kind, endpoint = "websocket", transport.endpoint
    else:
        connector, kind = None, "websocket"  # dial-in is a direction; the wire is WebSocket
    spec = _spec(manifest, connector, kind, endpoint)
    protocol = getattr(transport, "protocol", "mesh")
    if protocol == "mesh":
        return spec
    adapter = protocol_adapter(protocol)
    if adapter is None:
        raise ManifestError(
            f"no adapter for protocol {protocol!r}",
            field="$.transport.protocol",
            agent=manifest.id,
        )
    connector = adapter(manifest, spec, environ)
    return dataclasses.replace(spec, connector=connector, protocol=protocol)


def protocol_adapter(protocol: str) -> ProtocolAdapter | None:
    """The adapter for ``protocol``, importing the wing that registers it the first time."""
    if protocol not in PROTOCOL_ADAPTERS and protocol in PROTOCOL_WINGS:
        importlib.import_module(PROTOCOL_WINGS[protocol])
    return PROTOCOL_ADAPTERS.get(protocol)


def unusable_spec(manifest: Manifest) -> AgentSpec:
    """The spec of an agent that cannot be linked: its place and description, no connector."""
    transport = manifest.transport
    if isinstance(transport, StdioSection):
        return _spec(manifest, None, "stdio", None)
    if isinstance(transport, HttpSection):
        return _spec(manifest, None, "http", transport.endpoint)
    if isinstance(transport, WebSocketSection):
        return _spec(manifest, None, "websocket", transport.endpoint)
    return _spec(manifest, None, "websocket", None)


def _spec(
    manifest: Manifest, connector: Connector | None, kind: str, endpoint: str | None
) -> AgentSpec:
    limit = manifest.max_frame_size
    return AgentSpec(
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
        start_timeout=manifest.start_timeout,
        metadata=dict(manifest.metadata),
        access=manifest.access,
    )


def links_from_manifests(
    directory: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> ManifestLinks:
    """Load ``directory`` once: a spec per good manifest, the dial-in tokens, every problem.

    Each problem is logged as it is found: ``mesh.manifest_invalid`` (the file does
    not load), ``mesh.manifest_unusable`` (it loads but cannot be linked, e.g. its
    token variable is unset), ``mesh.token_missing`` (a dial-in token is unset).
    """
    loaded = load_manifests(Path(directory))
    errors: list[MeshError] = []
    for invalid in loaded.errors:
        log.error("mesh.manifest_invalid", error=str(invalid))
        errors.append(invalid)
    specs: list[AgentSpec] = []
    unusable: dict[str, str] = {}
    for agent_id, manifest in loaded.manifests.items():
        try:
            specs.append(spec_from_manifest(manifest, environ=environ))
        except MeshError as exc:
            source = loaded.sources.get(agent_id)
            problem = exc
            if isinstance(exc, ManifestError) and source is not None:
                problem = exc.in_file(source)
            log.error("mesh.manifest_unusable", agent=agent_id, error=str(problem))
            errors.append(problem)
            specs.append(unusable_spec(manifest))
            unusable[agent_id] = str(exc)
    tokens, token_errors = dial_in_tokens(loaded.manifests, environ=environ)
    for agent_id, missing in token_errors.items():
        log.error("mesh.token_missing", error=str(missing))
        errors.append(missing)
        unusable[agent_id] = str(missing)
    return ManifestLinks(specs, tokens, errors, unusable, frozenset(loaded.manifests))


def dial_in_tokens(
    manifests: Mapping[str, Manifest], *, environ: Mapping[str, str] | None = None
) -> tuple[TokenAuthenticator, dict[str, MeshError]]:
    """The tokens agents that dial in must present, from their manifests' variables;
    and, by agent id, why a token could not be read."""
    tokens = TokenAuthenticator()
    errors: dict[str, MeshError] = {}
    for agent_id, manifest in manifests.items():
        if isinstance(manifest.transport, DialInSection):
            try:
                tokens.add(manifest.transport.token(environ), agent_id)
            except MeshError as exc:
                errors[agent_id] = exc
    return tokens, errors
