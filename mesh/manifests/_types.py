"""The typed, frozen structs one agent manifest (a TOML file) decodes into.

A manifest says who an agent is (id, name, capabilities), how to reach it (a
transport, tagged on ``type``), how to keep it (heartbeat interval and TTL, call
timeout, frame size), and, for chat agents, its persona. msgspec checks types,
required fields, unknown fields and simple bounds while decoding; the checks it
cannot express (id syntax, TTL above interval, URL schemes, env var names) run in
``__post_init__`` and raise :class:`_FieldError`, which the loader turns into the
precise ``$.path`` of the offending field. Loading from files lives in
``_manifest`` (which re-exports these); ``docs/manifests.md`` lists every field.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Final, Literal, TypeAlias
from urllib.parse import parse_qsl, urlsplit

import msgspec

from mesh._errors import ErrorCode, MeshError
from mesh.providers._base import ProviderConfig
from transports import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "ANY_AGENT",
    "ANY_CLIENT",
    "DEFAULT_ACCESS",
    "INTERPRETER_COMMANDS",
    "TRANSPORT_TYPES",
    "AccessSection",
    "DialInSection",
    "HttpSection",
    "Manifest",
    "ManifestError",
    "OAuthSection",
    "Persona",
    "StdioSection",
    "TransportSection",
    "WebSocketSection",
]

#: ``command`` values that mean "the interpreter running the mesh", so shipped
#: manifests start agents with the same Python (and venv) as the daemon.
INTERPRETER_COMMANDS: Final = frozenset({"python", "python3"})

# fullmatch, not a "$"-anchored search: "$" would let "echo\n" through.
_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_Seconds = Annotated[float, msgspec.Meta(gt=0)]
#: An MCP server over stdio is often started by a package runner (``npx -y``, ``uvx``)
#: that fetches it first: 30 s and more when cold on a busy machine.
MCP_START_TIMEOUT: Final = 60.0
#: What the far end speaks: the mesh's envelope, or MCP (the mesh mounts it; docs/mcp.md).
Protocol: TypeAlias = Literal["mesh", "mcp", "a2a"]
McpRevision: TypeAlias = Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18"]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class ManifestError(MeshError):
    """A manifest that cannot be used, and exactly why.

    ``file`` is the manifest's path as it was given, ``field`` the msgspec-style
    path of the culprit (``$.transport.endpoint``; ``None`` for a TOML syntax
    error or an unreadable file) and ``reason`` what is wrong. ``str()`` is
    ``"<file>: <reason> - at `<field>`"``, the shape of msgspec's own messages.
    """

    default_code = ErrorCode.INVALID_PARAMS

    def __init__(
        self,
        reason: str,
        *,
        file: str | os.PathLike[str] | None = None,
        field: str | None = None,
        agent: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = None if file is None else Path(file)
        self.field = field
        message = reason if field is None else f"{reason} - at `{field}`"
        if self.file is not None:
            message = f"{self.file}: {message}"
        super().__init__(message, agent=agent)

    def in_file(self, file: str | os.PathLike[str], *, agent: str | None = None) -> ManifestError:
        """The same error, naming the manifest file (and agent) it came from."""
        return ManifestError(self.reason, file=file, field=self.field, agent=agent or self.agent)


class _FieldError(ValueError):
    """A post-decode check failed on one field of the struct being built.

    msgspec reports a ``__post_init__`` failure at the struct's path and chains
    the original exception, so the loader appends ``field`` to get the exact path.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"`{field}`: {reason}")


class _FieldErrors(ValueError):
    """Several post-decode checks of one struct failed; ``errors`` holds each, in order.

    The loader reports the first (one error per file is what loading needs);
    ``mesh validate`` reports them all.
    """

    def __init__(self, errors: list[_FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(error) for error in errors))


def _check_all(*checks: Callable[[], None]) -> None:
    """Run every check; raise each :class:`_FieldError` they raised, together."""
    errors: list[_FieldError] = []
    for check in checks:
        try:
            check()
        except _FieldError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise _FieldErrors(errors)


def _check_url(field: str, url: str, schemes: tuple[str, ...]) -> None:
    # Neither the URL nor its query is echoed: either may hold a credential.
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError as exc:
        raise _FieldError(field, f"Expected a valid URL: {exc}") from None
    wanted = " or ".join(f"{scheme}://" for scheme in schemes)
    if parts.scheme not in schemes:
        # "localhost:8701" parses with scheme "localhost"; that is a missing scheme.
        got = f"scheme {parts.scheme!r}" if "://" in url else "no scheme"
        raise _FieldError(field, f"Expected a URL starting with {wanted}, got {got}")
    if not parts.hostname:
        raise _FieldError(field, f"Expected a URL with a host after {parts.scheme}://")
    if parts.password is not None or any(k == "token" for k, _ in parse_qsl(parts.query)):
        raise _FieldError(
            field,
            "Credentials do not belong in a manifest; put the token in an environment "
            "variable and name it with `token_env`",
        )


def _check_env_name(field: str, name: str | None) -> None:
    # The value is not echoed: a token pasted here by mistake must not reach a log.
    if name is not None and not _ENV_NAME.fullmatch(name):
        raise _FieldError(
            field,
            "Expected the NAME of an environment variable (letters, digits and `_`, "
            "not starting with a digit), not the token itself",
        )


def _check_revision(protocol: str, revision: str) -> None:
    if protocol != "mcp" and revision != "auto":
        raise _FieldError("mcp_revision", 'Only meaningful with `protocol = "mcp"`')


def _read_token(name: str, environ: Mapping[str, str] | None) -> str:
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        raise ManifestError(
            f"environment variable {name!r} is not set (or is empty); "
            "it must hold this agent's token",
            field="$.transport.token_env",
        )
    return value


class _SectionBase(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"
):
    def token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The token this link authenticates with, read from the environment.

        ``None`` when the transport uses none. Raises :class:`ManifestError`
        naming the variable (never its value) when it is unset or empty.
        """
        return None


class StdioSection(_SectionBase, frozen=True, kw_only=True, tag="stdio"):
    """Spawn the agent as a child process and talk over its stdin/stdout.

    ``command = "python"`` (or ``"python3"``) means the running interpreter
    (``sys.executable``). The child gets only a few basic variables plus ``env``.
    ``load_manifest`` makes a relative ``cwd`` absolute, against the manifest's
    directory.
    """

    command: _NonEmpty
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    cwd: str | None = None
    protocol: Protocol = "mesh"
    mcp_revision: McpRevision = "auto"

    def __post_init__(self) -> None:
        if self.command in INTERPRETER_COMMANDS and sys.executable:
            msgspec.structs.force_setattr(self, "command", sys.executable)
        _check_revision(self.protocol, self.mcp_revision)
        if self.protocol == "a2a":
            raise _FieldError("protocol", 'An A2A agent is reached over `type = "http"`')

    def resolve(self, base: str | os.PathLike[str]) -> StdioSection:
        """This transport with a relative (or ``~``) ``cwd`` made absolute against ``base``."""
        if self.cwd is None:
            return self
        cwd = Path(self.cwd).expanduser()
        return msgspec.structs.replace(self, cwd=str((Path(base) / cwd).resolve()))


class OAuthSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[transport.oauth]`` of a mounted MCP server that needs OAuth (docs/mcp.md).

    ``authorization_code`` (the default) needs ``mesh mcp login AGENT`` once;
    ``client_credentials`` needs nobody. Without ``client_id`` the mesh names itself by
    ``client_metadata_url`` where the authorization server reads client metadata
    documents, else registers a client (dynamic client registration).
    ``client_secret_env`` names a configured client's secret; ``jwt_key_file`` a private
    key (PEM) it signs its token requests with instead (``private_key_jwt``).
    """

    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = None
    client_secret_env: str | None = None
    scopes: tuple[str, ...] = ()
    client_metadata_url: str | None = None
    jwt_key_file: str | None = None
    jwt_algorithm: Literal["ES256", "ES384", "RS256", "PS256", "EdDSA"] = "ES256"

    def __post_init__(self) -> None:
        _check_all(
            partial(_check_env_name, "oauth.client_secret_env", self.client_secret_env),
            self._check_metadata_url,
            self._check_jwt_key,
        )

    def _check_metadata_url(self) -> None:
        url = self.client_metadata_url
        if url is None:
            return
        field = "oauth.client_metadata_url"
        _check_url(field, url, ("https",))
        if urlsplit(url).path in ("", "/"):
            raise _FieldError(field, "A client metadata document's URL needs a path")
        if self.grant != "authorization_code":
            raise _FieldError(field, 'Only meaningful with `grant = "authorization_code"`')

    def _check_jwt_key(self) -> None:
        if self.jwt_key_file is None:
            return
        if self.client_secret_env is not None:
            raise _FieldError(
                "oauth.jwt_key_file",
                "A client proves itself with `client_secret_env` or `jwt_key_file`, not both",
            )
        if self.client_id is None:
            raise _FieldError(
                "oauth.jwt_key_file", "Needs `client_id`: the key's client, named in what it signs"
            )

    def resolve(self, base: str | os.PathLike[str]) -> OAuthSection:
        """This section with a relative (or ``~``) ``jwt_key_file`` made absolute."""
        if self.jwt_key_file is None:
            return self
        key = Path(self.jwt_key_file).expanduser()
        return msgspec.structs.replace(self, jwt_key_file=str((Path(base) / key).resolve()))


class HttpSection(_SectionBase, frozen=True, kw_only=True, tag="http"):
    """Reach the agent at ``POST {endpoint}/rpc``; ``token_env`` names its bearer token.

    With ``protocol = "mcp"``, ``endpoint`` is the MCP server's streamable HTTP URL itself;
    with ``protocol = "a2a"``, the A2A agent's base URL (or its card's URL, ``….json``).
    """

    endpoint: str
    token_env: str | None = None
    protocol: Protocol = "mesh"
    mcp_revision: McpRevision = "auto"
    oauth: OAuthSection | None = None

    def __post_init__(self) -> None:
        _check_all(
            partial(_check_url, "endpoint", self.endpoint, ("http", "https")),
            partial(_check_env_name, "token_env", self.token_env),
            partial(_check_revision, self.protocol, self.mcp_revision),
            self._check_oauth,
        )

    def _check_oauth(self) -> None:
        if self.oauth is not None and self.protocol != "mcp":
            raise _FieldError("oauth", 'Only meaningful with `protocol = "mcp"`')
        if self.oauth is not None and self.token_env is not None:
            raise _FieldError("oauth", "A server is reached with `token_env` or `oauth`, not both")

    def token(self, environ: Mapping[str, str] | None = None) -> str | None:
        return None if self.token_env is None else _read_token(self.token_env, environ)

    def client_secret(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The OAuth client's secret, read from ``oauth.client_secret_env`` (None if unnamed)."""
        name = self.oauth.client_secret_env if self.oauth is not None else None
        return None if name is None else _read_token(name, environ)


class WebSocketSection(_SectionBase, frozen=True, kw_only=True, tag="websocket"):
    """Dial the agent's WebSocket ``endpoint`` with the token held in ``$token_env``."""

    endpoint: str
    token_env: str

    def __post_init__(self) -> None:
        _check_all(
            partial(_check_url, "endpoint", self.endpoint, ("ws", "wss")),
            partial(_check_env_name, "token_env", self.token_env),
        )

    def token(self, environ: Mapping[str, str] | None = None) -> str:
        return _read_token(self.token_env, environ)


class DialInSection(_SectionBase, frozen=True, kw_only=True, tag="dial-in"):
    """The agent dials the daemon's ``/ws``; it must present the token held in ``$token_env``."""

    token_env: str

    def __post_init__(self) -> None:
        _check_env_name("token_env", self.token_env)

    def token(self, environ: Mapping[str, str] | None = None) -> str:
        return _read_token(self.token_env, environ)


TransportSection: TypeAlias = StdioSection | HttpSection | WebSocketSection | DialInSection

#: The ``type`` values, in the order the docs list them.
TRANSPORT_TYPES: Final = ("stdio", "http", "websocket", "dial-in")


#: In ``access.callers``: any client token (role ``client`` or ``admin``).
ANY_CLIENT: Final = "clients"
#: In ``access.callers``: any agent, calling through ``mesh/call``.
ANY_AGENT: Final = "agents"
_CLIENT_NAME = re.compile(r"client:[A-Za-z0-9._-]{1,64}")


def _check_caller(index: int, entry: str) -> None:
    if entry in (ANY_CLIENT, ANY_AGENT) or _CLIENT_NAME.fullmatch(entry):
        return
    if entry.startswith("agent:") and _ID.fullmatch(entry.removeprefix("agent:")):
        return
    raise _FieldError(
        f"callers[{index}]",
        f"Expected `{ANY_CLIENT}`, `{ANY_AGENT}`, `agent:ID` or `client:TOKEN-NAME`, got {entry!r}",
    )


class AccessSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who may call this agent, and which agents it may call through ``mesh/call``.

    ``callers`` lists ``clients`` (any client token), ``agents`` (any agent),
    ``agent:ID`` or ``client:TOKEN-NAME``; an admin token may always call.
    ``calls`` lists agent ids, or ``*`` for every agent. See ``docs/security.md``.
    """

    callers: tuple[str, ...] = (ANY_CLIENT, ANY_AGENT)
    calls: tuple[str, ...] = ("*",)

    def __post_init__(self) -> None:
        for index, entry in enumerate(self.callers):
            _check_caller(index, entry)
        for index, target in enumerate(self.calls):
            if target != "*" and not _ID.fullmatch(target):
                raise _FieldError(f"calls[{index}]", f"Expected an agent id or `*`, got {target!r}")


#: The access section of an agent whose manifest has none: one object, since checking
#: it again for every agent the registry mirrors was a tenth of the mirror's CPU.
DEFAULT_ACCESS: Final = AccessSection()


class Persona(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who a chat agent is in a room, and which model speaks for it."""

    system_prompt: _NonEmpty
    provider: ProviderConfig
    role: _NonEmpty = "participant"
    awareness: Literal["basic", "intermediate", "high"] = "intermediate"
    #: How many tokens of a room's transcript this persona's model is shown (None: the
    #: room's choice): set it to fit a small context window. Its reply budget is the
    #: provider's ``max_tokens``.
    context_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None


class Manifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One agent, as its manifest file describes it. See ``docs/manifests.md``.

    After construction ``name`` is never empty (it defaults to ``id``) and
    ``heartbeat_ttl`` is never ``None`` (it defaults to three intervals).
    """

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    transport: TransportSection
    name: str = ""
    description: str = ""
    version: str = "0.1.0"
    capabilities: tuple[_NonEmpty, ...] = ()
    heartbeat_interval: _Seconds = 10.0
    heartbeat_ttl: _Seconds | None = None
    call_timeout: _Seconds = 30.0
    max_frame_size: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_FRAME_SIZE
    #: How long a link has to come up (spawn, handshake); None: the daemon's default,
    #: or ``MCP_START_TIMEOUT`` for an MCP server over stdio.
    start_timeout: _Seconds | None = None
    persona: Persona | None = None
    metadata: dict[str, str] = {}
    access: AccessSection = DEFAULT_ACCESS

    def __post_init__(self) -> None:
        _check_all(self._check_id, self._check_ttl)
        if not self.name:
            msgspec.structs.force_setattr(self, "name", self.id)
        if self.heartbeat_ttl is None:
            msgspec.structs.force_setattr(self, "heartbeat_ttl", 3 * self.heartbeat_interval)
        transport = self.transport
        if (
            self.start_timeout is None
            and isinstance(transport, StdioSection)
            and transport.protocol == "mcp"
        ):
            msgspec.structs.force_setattr(self, "start_timeout", MCP_START_TIMEOUT)

    def _check_id(self) -> None:
        if not _ID.fullmatch(self.id):
            raise _FieldError(
                "id",
                f"Expected lowercase letters, digits, `.`, `_` or `-`, starting with a letter "
                f"or digit, got {self.id!r}",
            )

    def _check_ttl(self) -> None:
        interval = self.heartbeat_interval
        if self.heartbeat_ttl is not None and self.heartbeat_ttl <= interval:
            raise _FieldError(
                "heartbeat_ttl",
                f"Expected a TTL greater than `heartbeat_interval` ({interval:g} s), "
                f"got {self.heartbeat_ttl:g} s",
            )
