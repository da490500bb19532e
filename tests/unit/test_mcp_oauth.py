"""The pure parts of the mount's OAuth client: where metadata is looked for, which
protected-resource metadata may speak for a server, and the signed client assertion."""

from __future__ import annotations

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from mesh import Unauthorized
from mesh.mcp._oauth import OAuthSettings, _covers, _server_places, _signer, challenge_of


def test_an_issuer_with_a_path_is_looked_up_under_it_never_at_the_root() -> None:
    assert _server_places("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration",
    ]
    assert _server_places("https://as.example/") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("resource", "covers"),
    [
        ("https://mcp.example/mcp", True),
        ("https://mcp.example/mcp/", True),
        ("https://MCP.example", True),  # the origin speaks for every path under it
        ("https://evil.example/mcp", False),
        ("http://mcp.example/mcp", False),
        ("https://mcp.example/mcp2", False),
        ("https://mcp.example/other", False),
    ],
)
def test_protected_resource_metadata_speaks_only_for_its_own_server(
    resource: str, covers: bool
) -> None:
    assert _covers(resource, "https://mcp.example/mcp") is covers


def test_a_challenge_names_the_scope_and_error() -> None:
    header = 'Bearer error="insufficient_scope", scope="a b", resource_metadata="https://m/x"'
    assert challenge_of(header) == {
        "error": "insufficient_scope",
        "scope": "a b",
        "resource_metadata": "https://m/x",
    }


def test_a_client_assertion_is_signed_for_the_authorization_server() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    signer = _signer(OAuthSettings(agent="a", jwt_key=pem))
    assert signer is not None
    token = signer.assertion("client-1", "https://as.example")
    claims = jwt.decode(
        token, key.public_key(), algorithms=["ES256"], audience="https://as.example"
    )
    assert claims["iss"] == claims["sub"] == "client-1"
    assert claims["exp"] > claims["iat"] and claims["jti"]


def test_a_key_that_cannot_sign_is_refused_by_name() -> None:
    with pytest.raises(Unauthorized, match=r"jwt_key_file.*cannot sign ES256"):
        _signer(OAuthSettings(agent="a", jwt_key="not a key")).assertion("c", "aud")  # type: ignore[union-attr]
    with pytest.raises(Unauthorized, match=r"jwt_key_file /nowhere/key.pem cannot be read"):
        _signer(OAuthSettings(agent="a", jwt_key_file="/nowhere/key.pem"))
