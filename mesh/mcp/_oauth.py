"""OAuth 2.1 for mounting a protected MCP server, as MCP's authorization spec has it.

The browser part happens once, in :func:`login` (``mesh mcp login AGENT``): find the
server's authorization server (protected-resource metadata, RFC 9728, then the
authorization server's own metadata, RFC 8414), register a client (RFC 7591) unless
the manifest names one, send the person to the authorization URL with PKCE (S256)
and a ``state``, take the code on a loopback redirect and trade it for tokens. The
grant is kept in ``{data_dir}/mcp-oauth/{agent}.json``, readable by its owner only.

From then on the mount is unattended: :class:`McpOAuth` is the ``httpx.Auth`` of the
mount's HTTP client. It sends the access token, refreshes it shortly before it expires
(or when the server answers 401) and keeps the refreshed grant. A server that allows
the client-credentials grant needs no login at all. When neither a grant nor a way to
get one is left, the link fails with :class:`LoginNeeded`, naming the command to run.

Older and newer servers are met as the spec's revisions have them: a 2025-03-26 server
(no protected-resource metadata) is its own authorization server; metadata whose
``resource`` is another server's is refused; a client may be named by the URL of its
metadata document, or prove itself with a signed JWT (``private_key_jwt``, PyJWT); and a
call refused for lack of scope gets the wider scope once, unattended for the
client-credentials grant, at the next login for a person's.

Our own code, over httpx, rather than a library: the ``mcp`` SDK's
``OAuthClientProvider`` is an ``httpx2.Auth`` (not httpx's) and would make the SDK
(pydantic, starlette) a runtime dependency; authlib's httpx client does PKCE and token
requests but neither discovery nor registration, which are most of the work here.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import re
import secrets
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import anyio
import anyio.abc
import h11
import httpx
import msgspec

from mesh._errors import Unauthorized
from mesh._logging import get_logger
from mesh.manifests import HttpSection

__all__ = [
    "Grant",
    "LoginNeeded",
    "McpOAuth",
    "OAuthSettings",
    "grant_path",
    "login",
    "oauth_settings",
]

log = get_logger("mesh.mcp")

#: A token is refreshed this long before it expires, so a call never carries a stale one.
REFRESH_MARGIN: Final = 60.0
#: Each request to an authorization server (metadata, registration, token) gets this long.
AS_TIMEOUT: Final = 15.0
#: The person has this long to approve in the browser before `mesh mcp login` gives up.
LOGIN_TIMEOUT: Final = 300.0
_DEFAULT_DATA_DIR: Final = ".mesh"
_CALLBACK_PATH: Final = "/callback"


@functools.cache
def verified_tls() -> ssl.SSLContext:
    """The CA-verifying TLS context every MCP client of this process shares.

    httpx builds one per client unless given one, and reading the CA bundle is most of
    it (about 20 ms of CPU): a mount opens a client for each link and one for its
    authorization server, a login another. A context is safe to share; this one is
    httpx's default (``SSL_CERT_FILE``/``SSL_CERT_DIR`` as httpx reads them).
    """
    return httpx.create_ssl_context()


class LoginNeeded(Unauthorized):
    """No usable grant for a server that needs OAuth: someone must log in once."""


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """How one mounted server is authorized (the manifest's ``[transport.oauth]``)."""

    agent: str
    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = None
    scopes: tuple[str, ...] = ()
    data_dir: str | os.PathLike[str] | None = None
    #: The client's id as the HTTPS URL of its metadata document, used where the
    #: authorization server reads such documents (``client_id_metadata_document_supported``).
    client_metadata_url: str | None = None
    #: A private key (PEM) the client signs its token requests with (``private_key_jwt``,
    #: RFC 7523) instead of a secret, and the signature's algorithm.
    jwt_key: str | None = None
    jwt_algorithm: str = "ES256"
    #: Where ``jwt_key`` is read from, at each token request, when it is not given.
    jwt_key_file: str | None = None


class Grant(msgspec.Struct, kw_only=True):
    """What the mount keeps between runs: the client it is, where to refresh, the tokens."""

    client_id: str
    token_endpoint: str
    resource: str
    client_secret: str | None = None
    access_token: str | None = None
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    #: The secret goes in an HTTP Basic header (``client_secret_basic``), not the form.
    basic: bool = False
    #: The authorization server's issuer: the audience of a signed client assertion.
    issuer: str | None = None
    #: The scope a call was refused for lack of (HTTP 403 ``insufficient_scope``): the
    #: next login asks for it, as a person must consent to more than they granted.
    wanted: str | None = None

    def fresh(self, now: float) -> bool:
        if self.access_token is None:
            return False
        return self.expires_at is None or now < self.expires_at - REFRESH_MARGIN


class _ResourceMetadata(msgspec.Struct):
    authorization_servers: list[str] = []
    resource: str | None = None
    scopes_supported: list[str] = []


class _ServerMetadata(msgspec.Struct):
    issuer: str
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    registration_endpoint: str | None = None
    code_challenge_methods_supported: list[str] = []
    token_endpoint_auth_methods_supported: list[str] = []
    client_id_metadata_document_supported: bool = False


class _Registered(msgspec.Struct):
    client_id: str
    client_secret: str | None = None
    token_endpoint_auth_method: str | None = None


class _Tokens(msgspec.Struct):
    access_token: str
    token_type: str = "Bearer"
    expires_in: float | None = None
    refresh_token: str | None = None
    scope: str | None = None


class _Refusal(msgspec.Struct):
    error: str = "error"
    error_description: str | None = None


@dataclass(frozen=True, slots=True)
class _Found:
    resource: str
    server: _ServerMetadata
    scopes: tuple[str, ...]


def oauth_settings(
    agent: str, transport: HttpSection, environ: Mapping[str, str] | None
) -> OAuthSettings | None:
    """The manifest's ``[transport.oauth]`` as the mount uses it (None: no OAuth)."""
    section = transport.oauth
    if section is None:
        return None
    return OAuthSettings(
        agent=agent,
        grant=section.grant,
        client_id=section.client_id,
        client_secret=transport.client_secret(environ),
        scopes=section.scopes,
        data_dir=(os.environ if environ is None else environ).get("MESH_DATA_DIR"),
        client_metadata_url=section.client_metadata_url,
        jwt_key_file=section.jwt_key_file,
        jwt_algorithm=section.jwt_algorithm,
    )


def grant_path(agent: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where ``agent``'s grant is kept: the daemon's data dir (``$MESH_DATA_DIR``, else
    ``.mesh``), ``mcp-oauth/{agent}.json``."""
    directory = Path(data_dir or os.environ.get("MESH_DATA_DIR") or _DEFAULT_DATA_DIR)
    return directory / "mcp-oauth" / f"{agent}.json"


def _load(path: Path) -> Grant | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Grant)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("mcp.oauth_grant_unreadable", path=str(path), error=str(exc))
        return None


def _save(path: Path, grant: Grant) -> None:
    """Write the grant readable by its owner only (0600, in a 0700 directory), atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(msgspec.json.encode(grant))
    os.chmod(temporary, 0o600)  # an older file of another mode is truncated, not re-created
    os.replace(temporary, path)


# -- discovery and registration ---------------------------------------------------------


def _well_known(url: str, name: str) -> list[str]:
    """RFC 9728 places of a resource's metadata: the suffix inserted before the path, then
    at the root."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    places = [f"/.well-known/{name}{path}"] if path else []
    places.append(f"/.well-known/{name}")
    return [urlunsplit((parts.scheme, parts.netloc, place, "", "")) for place in places]


def _server_places(issuer: str) -> list[str]:
    """Where an authorization server's metadata may be, in the order MCP's spec tries them:
    RFC 8414's and OpenID's with the issuer's path inserted, then OpenID's with it appended.
    An issuer with a path is never looked up at the root: that is another server's."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    places = [
        f"/.well-known/oauth-authorization-server{path}",
        f"/.well-known/openid-configuration{path}",
    ]
    if path:
        places.append(f"{path}/.well-known/openid-configuration")
    return [urlunsplit((parts.scheme, parts.netloc, place, "", "")) for place in places]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _covers(resource: str, url: str) -> bool:
    """Whether protected-resource metadata naming ``resource`` may speak for ``url``: the
    same origin, and ``url``'s path at or under the resource's (RFC 9728 section 3.3)."""
    have, want = urlsplit(resource), urlsplit(url)
    if (have.scheme.lower(), have.netloc.lower()) != (want.scheme.lower(), want.netloc.lower()):
        return False
    base, path = have.path.rstrip("/"), want.path.rstrip("/")
    return path == base or path.startswith(base + "/")


async def _first(client: httpx.AsyncClient, urls: list[str], kind: type[Any]) -> Any:
    """The first of ``urls`` that answers 200 with a document of ``kind``; None if none."""
    for url in urls:
        response = await client.get(url, headers={"accept": "application/json"})
        if response.status_code == 200:
            try:
                return msgspec.json.decode(response.content, type=kind)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise Unauthorized(f"OAuth metadata at {url} is not valid: {exc}") from None
    return None


_CHALLENGE: Final = re.compile(r'(resource_metadata|scope|error)\s*=\s*"([^"]*)"')


def challenge_of(header: str) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer ...`` header that the client reads."""
    return dict(_CHALLENGE.findall(header))


async def _challenge(client: httpx.AsyncClient, mcp_url: str) -> dict[str, str]:
    """What the server's 401 says (``WWW-Authenticate: Bearer resource_metadata=...``)."""
    probe = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream"}
    response = await client.post(mcp_url, json=probe, headers=headers)
    if response.status_code != 401:
        return {}
    return challenge_of(response.headers.get("www-authenticate", ""))


async def discover(client: httpx.AsyncClient, mcp_url: str) -> _Found:
    """The authorization server that guards ``mcp_url``, and what it offers: the metadata
    the server's 401 points at, else the RFC 9728 well-known places; a server with none
    is a 2025-03-26 one (see :func:`_legacy_server`)."""
    challenge = await _challenge(client, mcp_url)
    places = _well_known(mcp_url, "oauth-protected-resource")
    if "resource_metadata" in challenge:
        places.insert(0, challenge["resource_metadata"])
    resource: _ResourceMetadata | None = await _first(client, places, _ResourceMetadata)
    if resource is None:
        legacy = await _legacy_server(client, mcp_url)
        return _Found(mcp_url, legacy, tuple(challenge.get("scope", "").split()))
    if resource.resource is not None and not _covers(resource.resource, mcp_url):
        raise Unauthorized(
            f"the protected-resource metadata of {mcp_url} is for {resource.resource}, not"
            " this server (RFC 9728: its `resource` must match the server's URL): refused"
        )
    if not resource.authorization_servers:
        raise Unauthorized(
            f"the protected-resource metadata of {mcp_url} names no authorization server"
            " (RFC 9728 `authorization_servers`): it cannot be logged in to"
        )
    issuer = resource.authorization_servers[0]
    server: _ServerMetadata | None = await _first(client, _server_places(issuer), _ServerMetadata)
    if server is None or server.token_endpoint is None:
        raise Unauthorized(f"the authorization server {issuer} publishes no usable metadata")
    scopes = challenge["scope"].split() if challenge.get("scope") else resource.scopes_supported
    return _Found(resource.resource or mcp_url, server, tuple(scopes))


async def _legacy_server(client: httpx.AsyncClient, mcp_url: str) -> _ServerMetadata:
    """MCP 2025-03-26, before protected-resource metadata: the server's origin is its own
    authorization server, with RFC 8414 metadata at the root, else OAuth's usual
    ``/authorize``, ``/token`` and ``/register`` there."""
    origin = _origin(mcp_url)
    server: _ServerMetadata | None = await _first(client, _server_places(origin), _ServerMetadata)
    if server is not None and server.token_endpoint is not None:
        return server
    return _ServerMetadata(
        issuer=origin,
        authorization_endpoint=f"{origin}/authorize",
        token_endpoint=f"{origin}/token",
        registration_endpoint=f"{origin}/register",
    )


async def _register(
    client: httpx.AsyncClient, found: _Found, settings: OAuthSettings, redirect_uri: str | None
) -> _Registered:
    """The manifest's client; else its metadata document's URL, where the authorization
    server reads those; else one registered now (RFC 7591)."""
    if settings.client_id is not None:
        return _Registered(settings.client_id, settings.client_secret)
    if _by_document(found.server, settings):
        return _Registered(str(settings.client_metadata_url), None, "none")
    endpoint = found.server.registration_endpoint
    if endpoint is None:
        raise Unauthorized(
            f"the authorization server {found.server.issuer} registers no clients:"
            " name one with client_id (or, where it reads client metadata documents,"
            " client_metadata_url) in the manifest's [transport.oauth]"
        )
    grant_types = (
        ["client_credentials"]
        if settings.grant == "client_credentials"
        else ["authorization_code", "refresh_token"]
    )
    metadata: dict[str, Any] = {
        "client_name": f"agent-mesh ({settings.agent})",
        "grant_types": grant_types,
        "response_types": ["code"] if redirect_uri else [],
        "token_endpoint_auth_method": "client_secret_post"
        if settings.grant == "client_credentials"
        else "none",
    }
    if redirect_uri:
        metadata["redirect_uris"] = [redirect_uri]
    if settings.scopes:
        metadata["scope"] = " ".join(settings.scopes)
    response = await client.post(endpoint, json=metadata)
    if response.status_code not in (200, 201):
        raise Unauthorized(f"registering a client at {endpoint} failed: {_refusal(response)}")
    try:
        return msgspec.json.decode(response.content, type=_Registered)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unauthorized(f"registering a client at {endpoint}: the answer {exc}") from None


def _by_document(server: _ServerMetadata, settings: OAuthSettings) -> bool:
    """Whether the client is known by its metadata document's URL (a public client: an
    authorization-code login only; the server must say it reads such documents)."""
    return (
        settings.client_metadata_url is not None
        and settings.grant == "authorization_code"
        and server.client_id_metadata_document_supported
    )


def _basic(server: _ServerMetadata, client: _Registered) -> bool:
    """Whether the client authenticates to the token endpoint with HTTP Basic: as it was
    registered, else as the server offers (Basic is OAuth's default when it says nothing)."""
    if client.client_secret is None:
        return False
    if client.token_endpoint_auth_method is not None:
        return client.token_endpoint_auth_method == "client_secret_basic"
    offered = server.token_endpoint_auth_methods_supported
    return not offered or "client_secret_basic" in offered


_ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
#: A client assertion is good for this long: one token request, with room for clock skew.
ASSERTION_LIFETIME: Final = 300.0


@dataclass(frozen=True, slots=True)
class _Signer:
    """Signs the client's assertions (``private_key_jwt``) with the configured key.

    PyJWT over pyca/cryptography does the signing: hand-rolled JOSE is how clients
    come to sign with the wrong curve or encoding."""

    key: str
    algorithm: str

    def assertion(self, client_id: str, audience: str) -> str:
        """An RFC 7523 client assertion: the client is its issuer and subject, the
        authorization server's issuer its audience."""
        try:
            import jwt  # only a client with a key needs it
        except ImportError:
            raise Unauthorized(
                "oauth.jwt_key_file needs PyJWT: pip install 'agent-mesh[mcp-jwt]'"
            ) from None
        now = int(time.time())
        claims = {
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + int(ASSERTION_LIFETIME),
            "jti": secrets.token_urlsafe(16),
        }
        try:
            return jwt.encode(claims, self.key, algorithm=self.algorithm)
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise Unauthorized(
                f"the client's key (oauth.jwt_key_file) cannot sign {self.algorithm}: {exc}"
            ) from None


def _signer(settings: OAuthSettings) -> _Signer | None:
    """The client's signer, its key read now (a replaced key takes effect unrestarted)."""
    if settings.jwt_key is not None:
        return _Signer(settings.jwt_key, settings.jwt_algorithm)
    if settings.jwt_key_file is None:
        return None
    try:
        key = Path(settings.jwt_key_file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unauthorized(
            f"oauth.jwt_key_file {settings.jwt_key_file} cannot be read: {exc}"
        ) from None
    return _Signer(key, settings.jwt_algorithm)


def _refusal(response: httpx.Response) -> str:
    try:
        refused = msgspec.json.decode(response.content, type=_Refusal)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return f"HTTP {response.status_code}"
    detail = f": {refused.error_description}" if refused.error_description else ""
    return f"HTTP {response.status_code} {refused.error}{detail}"


async def _token_request(
    client: httpx.AsyncClient, grant: Grant, form: dict[str, str], signer: _Signer | None = None
) -> Grant:
    """POST ``form`` to the token endpoint; the grant with the tokens it answers. With a
    ``signer`` the client proves itself by a signed assertion, not a secret."""
    form = {**form, "resource": grant.resource}
    auth: httpx.Auth = httpx.Auth()  # none: the client has no auth of its own
    if signer is not None:
        form["client_id"] = grant.client_id
        form["client_assertion_type"] = _ASSERTION_TYPE
        form["client_assertion"] = signer.assertion(grant.client_id, grant.issuer or "")
    elif grant.client_secret and grant.basic:  # RFC 6749 2.3.1: both form-encoded first
        auth = httpx.BasicAuth(quote(grant.client_id, safe=""), quote(grant.client_secret, safe=""))
    else:
        form["client_id"] = grant.client_id
        if grant.client_secret:
            form["client_secret"] = grant.client_secret
    response = await client.post(grant.token_endpoint, data=form, auth=auth, timeout=AS_TIMEOUT)
    if response.status_code != 200:
        raise LoginNeeded(
            f"the token endpoint {grant.token_endpoint} refused the"
            f" {form['grant_type']} grant: {_refusal(response)}"
        )
    try:
        tokens = msgspec.json.decode(response.content, type=_Tokens)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LoginNeeded(f"the token endpoint {grant.token_endpoint} answered: {exc}") from None
    expires = time.time() + tokens.expires_in if tokens.expires_in else None
    return msgspec.structs.replace(
        grant,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token or grant.refresh_token,
        expires_at=expires,
        scope=tokens.scope or grant.scope,
    )


# -- unattended: the mount's httpx.Auth -------------------------------------------------


class McpOAuth(httpx.Auth):
    """Bearer tokens from the kept grant, refreshed as needed (see the module docstring)."""

    def __init__(self, url: str, settings: OAuthSettings) -> None:
        self._url = url
        self._settings = settings
        self._path = grant_path(settings.agent, settings.data_dir)
        self._lock = anyio.Lock()
        self._client = httpx.AsyncClient(timeout=AS_TIMEOUT, verify=verified_tls())

    async def aclose(self) -> None:
        await self._client.aclose()

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._token(stale=None)
        if token is not None:
            request.headers["authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            await response.aread()
            request.headers["authorization"] = f"Bearer {await self._token(stale=token or '')}"
            response = yield request
        challenge = challenge_of(response.headers.get("www-authenticate", ""))
        if response.status_code == 403 and challenge.get("error") == "insufficient_scope":
            wider = await self._step_up(challenge.get("scope", ""))
            if wider is not None:  # once: a server that refuses again is answered as it is
                await response.aread()
                request.headers["authorization"] = f"Bearer {wider}"
                yield request

    def refusal(self, response: httpx.Response) -> str | None:
        """What to tell the caller of a request the server refused for lack of scope (HTTP
        403 ``insufficient_scope``) that no token we can get unattended would carry."""
        challenge = challenge_of(response.headers.get("www-authenticate", ""))
        if response.status_code != 403 or challenge.get("error") != "insufficient_scope":
            return None
        grant = _load(self._path)
        held = set((grant.scope or "").split()) if grant is not None else set()
        needed = challenge.get("scope", "")
        if grant is None or set(needed.split()) <= held or self._cc:
            return (
                f"the MCP server at {self._url} refuses this call for lack of scope"
                f" {needed!r} (HTTP 403 insufficient_scope), although the grant holds"
                f" {grant.scope if grant else None!r}: the server's scopes need changing"
            )
        return (
            f"the MCP server at {self._url} needs scope {needed!r} for this call, beyond the"
            f" {grant.scope!r} consented to: run `mesh mcp login {self._settings.agent}`"
            " once more to consent to it"
        )

    @property
    def _cc(self) -> bool:
        return self._settings.grant == "client_credentials"

    async def _step_up(self, needed: str) -> str | None:
        """A token that carries ``needed`` as well, when one can be had unattended (the
        client-credentials grant asks for it); else None, and the next login asks for it."""
        async with self._lock:
            grant = _load(self._path)
            if grant is None:
                return None
            held = (grant.scope or " ".join(self._settings.scopes)).split()
            wider = " ".join(dict.fromkeys([*held, *needed.split()]))
            if set(needed.split()) <= set(held):
                return None  # asking again for what we hold would only loop
            if not self._cc:
                _save(self._path, msgspec.structs.replace(grant, wanted=wider))
                return None
            form = {"grant_type": "client_credentials", "scope": wider}
            grant = await _token_request(self._client, grant, form, _signer(self._settings))
            _save(self._path, grant)
            log.info("mcp.oauth_scope_stepped_up", agent=self._settings.agent, scope=wider)
            return str(grant.access_token)

    async def _token(self, *, stale: str | None) -> str | None:
        """A fresh access token. ``stale``: one the server refused (get another; ``""``
        when it refused us without one). None: no grant yet, and nothing to get one with
        before the server says it wants one (a person must log in)."""
        async with self._lock:
            grant = _load(self._path)
            if grant is not None and grant.fresh(time.time()) and grant.access_token != stale:
                return str(grant.access_token)
            if grant is None and stale is None and not self._cc:
                return None
            grant = await self._renew(grant)
            _save(self._path, grant)
            log.info("mcp.oauth_token_renewed", agent=self._settings.agent)
            return str(grant.access_token)

    async def _renew(self, grant: Grant | None) -> Grant:
        signer = _signer(self._settings)
        if grant is not None and grant.refresh_token:
            form = {"grant_type": "refresh_token", "refresh_token": grant.refresh_token}
            try:
                return await _token_request(self._client, grant, form, signer)
            except LoginNeeded:
                if not self._cc:
                    raise self._login_needed("the refresh token was refused") from None
        if self._cc:
            return await self._client_credentials(grant, signer)
        why = "no grant is kept" if grant is None else "the access token expired, with no refresh"
        raise self._login_needed(why)

    async def _client_credentials(self, grant: Grant | None, signer: _Signer | None) -> Grant:
        if grant is None:
            found = await discover(self._client, self._url)
            client = await _register(self._client, found, self._settings, None)
            grant = Grant(
                client_id=client.client_id,
                client_secret=client.client_secret,
                token_endpoint=str(found.server.token_endpoint),
                resource=found.resource,
                basic=_basic(found.server, client),
                issuer=found.server.issuer,
            )
        form = {"grant_type": "client_credentials"}
        if self._settings.scopes:
            form["scope"] = " ".join(self._settings.scopes)
        return await _token_request(self._client, grant, form, signer)

    def _login_needed(self, why: str) -> LoginNeeded:
        agent = self._settings.agent
        return LoginNeeded(
            f"the MCP server at {self._url} needs OAuth and {why}: run `mesh mcp login {agent}`"
            f" once (it keeps the grant in {self._path})",
            agent=agent,
        )


# -- once, with a person: mesh mcp login ------------------------------------------------


def _pkce() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def login(
    url: str,
    settings: OAuthSettings,
    *,
    open_url: Callable[[str], Coroutine[Any, Any, None]],
    timeout: float = LOGIN_TIMEOUT,
) -> Path:
    """Authorize the mount of ``url`` with a person's consent; returns where the grant is.

    ``open_url`` shows the authorization URL (the CLI prints it and opens a browser);
    the authorization server redirects back to a listener on 127.0.0.1 for the code.
    """
    async with httpx.AsyncClient(timeout=AS_TIMEOUT, verify=verified_tls()) as client:
        found = await discover(client, url)
        if found.server.authorization_endpoint is None:
            raise Unauthorized(f"{found.server.issuer} has no authorization endpoint")
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            redirect_uri = f"http://127.0.0.1:{port}{_CALLBACK_PATH}"
            registered = await _register(client, found, settings, redirect_uri)
            verifier, challenge = _pkce()
            state = secrets.token_urlsafe(16)
            query = {
                "response_type": "code",
                "client_id": registered.client_id,
                "redirect_uri": redirect_uri,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "state": state,
                "resource": found.resource,
            }
            scopes = _login_scopes(settings, found)
            if scopes:
                query["scope"] = " ".join(scopes)
            authorize = f"{found.server.authorization_endpoint}?{urlencode(query)}"
            answer = await _wait_for_consent(listener, authorize, open_url, timeout)
        if answer.get("state") != state:
            raise Unauthorized("the authorization answer's state does not match: refused")
        if "code" not in answer:
            refused = answer.get("error_description") or answer.get("error") or "no code"
            raise Unauthorized(f"the authorization server refused: {refused}")
        grant = Grant(
            client_id=registered.client_id,
            client_secret=registered.client_secret,
            token_endpoint=str(found.server.token_endpoint),
            resource=found.resource,
            basic=_basic(found.server, registered),
            issuer=found.server.issuer,
        )
        form = {
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        grant = await _token_request(client, grant, form, _signer(settings))
    path = grant_path(settings.agent, settings.data_dir)
    _save(path, grant)
    return path


def _login_scopes(settings: OAuthSettings, found: _Found) -> tuple[str, ...]:
    """The scope a login asks for: the manifest's, else the server's; with what a call
    was refused for lack of since the last login (kept in the grant)."""
    scopes = settings.scopes or found.scopes
    kept = _load(grant_path(settings.agent, settings.data_dir))
    if kept is None or not kept.wanted:
        return tuple(scopes)
    return tuple(dict.fromkeys([*scopes, *kept.wanted.split()]))


async def _wait_for_consent(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    authorize: str,
    open_url: Callable[[str], Coroutine[Any, Any, None]],
    timeout: float,
) -> dict[str, str]:
    """Show ``authorize``, then serve the loopback listener until the redirect brings
    its query (the code and state, or the server's refusal)."""
    answer: dict[str, str] = {}

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            target = await _read_target(stream)
            if target is None or urlsplit(target).path != _CALLBACK_PATH:
                await _respond(stream, 404, "not here")
                return
            answer.update((k, v[0]) for k, v in parse_qs(urlsplit(target).query).items())
            await _respond(stream, 200, "agent-mesh: authorized; you may close this page.")
            tg.cancel_scope.cancel()

    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            await open_url(authorize)
    if not answer:
        raise Unauthorized(f"no answer from the browser within {timeout:g} s: not logged in")
    return answer


async def _read_target(stream: anyio.abc.SocketStream) -> str | None:
    connection = h11.Connection(h11.SERVER)
    while True:
        event = connection.next_event()
        if isinstance(event, h11.Request):
            return event.target.decode("ascii", "replace")
        if event is h11.NEED_DATA:
            try:
                connection.receive_data(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return None
        else:
            return None


async def _respond(stream: anyio.abc.SocketStream, status: int, text: str) -> None:
    body = text.encode()
    head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
    head += f"content-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
    head += "connection: close\r\n\r\n"
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(head.encode() + body)
