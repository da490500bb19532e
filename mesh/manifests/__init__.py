"""Agent manifests: one TOML file per agent, decoded and validated into typed structs.

``_types`` holds the structs and their rules, ``_load`` reads a file or a
directory (one broken file never hides the others), ``_validate`` is what
``mesh validate`` prints. Turning a manifest into a link is the orchestrator's
job (:mod:`mesh._orchestrator.links`); this wing is data only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh._public import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from mesh.manifests._load import (
        ManifestSet,
        load_manifest,
        load_manifests,
    )
    from mesh.manifests._types import (
        AccessSection,
        DialInSection,
        HttpSection,
        Manifest,
        ManifestError,
        Persona,
        StdioSection,
        TransportSection,
        WebSocketSection,
    )
    from mesh.manifests._validate import (
        ValidateExit,
        validate_manifests,
    )

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

#: Where each public name lives: imported on first use (``mesh._public.lazy_names``).
_WHERE: dict[str, str] = {
    "ManifestSet": "mesh.manifests._load",
    "load_manifest": "mesh.manifests._load",
    "load_manifests": "mesh.manifests._load",
    "AccessSection": "mesh.manifests._types",
    "DialInSection": "mesh.manifests._types",
    "HttpSection": "mesh.manifests._types",
    "Manifest": "mesh.manifests._types",
    "ManifestError": "mesh.manifests._types",
    "Persona": "mesh.manifests._types",
    "StdioSection": "mesh.manifests._types",
    "TransportSection": "mesh.manifests._types",
    "WebSocketSection": "mesh.manifests._types",
    "ValidateExit": "mesh.manifests._validate",
    "validate_manifests": "mesh.manifests._validate",
}
__getattr__, __dir__ = lazy_names(globals(), _WHERE)
