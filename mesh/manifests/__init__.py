"""Agent manifests: one TOML file per agent, decoded and validated into typed structs.

``_types`` holds the structs and their rules, ``_load`` reads a file or a
directory (one broken file never hides the others), ``_validate`` is what
``mesh validate`` prints. Turning a manifest into a link is the orchestrator's
job (:mod:`mesh._orchestrator.links`); this wing is data only.
"""

from mesh._public import publish
from mesh.manifests._load import (
    AccessSection,
    DialInSection,
    HttpSection,
    Manifest,
    ManifestError,
    ManifestSet,
    Persona,
    StdioSection,
    TransportSection,
    WebSocketSection,
    load_manifest,
    load_manifests,
)
from mesh.manifests._validate import ValidateExit, validate_manifests

__all__ = [
    "AccessSection",
    "DialInSection",
    "HttpSection",
    "Manifest",
    "ManifestError",
    "ManifestSet",
    "Persona",
    "StdioSection",
    "TransportSection",
    "ValidateExit",
    "WebSocketSection",
    "load_manifest",
    "load_manifests",
    "validate_manifests",
]


publish(globals(), __all__)
