"""The client under test in the conformance suite's client scenarios: the mesh's own mount.

``python tests/mcp/conformance_client.py URL`` mounts the MCP server at ``URL`` as a mesh
agent (streamable HTTP, ``mcp_revision = "auto"``, OAuth when the server asks for it),
lists its tools and calls each, as the scenarios ask of a client. The suite names the
scenario in ``MCP_CONFORMANCE_SCENARIO`` and, for some, hands a pre-registered client in
``MCP_CONFORMANCE_CONTEXT``. The browser step of an authorization-code login is this
script following the authorization server's redirect (the suite's server approves at once).

The suite starts every scenario's client at once; with ``MESH_CONFORMANCE_LANES`` naming
a directory of lane files, each client first holds one of them (an ``flock``, let go when
the process ends however it ends), so only that many run at a time. A client imports the
mesh only once it holds its lane: a waiting client costs nothing. Its last line on stdout
is ``exit: 0`` or ``exit: 1``, the status the suite's runner of all scenarios keeps no
record of; no such line means the client never finished (it was killed).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import traceback
import zlib
from functools import partial
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mesh.mcp._oauth import OAuthSettings

#: Arguments for the tools the scenarios define (anything else is called with none).
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}
#: The client's metadata document, as the suite's CIMD scenario expects it (the
#: authorization server there does not fetch it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
#: What a refusal says when a person's consent would let the call through.
LOGIN = "mesh mcp login"


def hold_lane(directory: str, scenario: str) -> IO[bytes]:
    """One of the lane files in ``directory``, locked: a free one if any, else this
    scenario's own (by its name's hash), waited for. The lock lasts as long as the file
    stays open, and the kernel lets it go when the process ends."""
    lanes = sorted(os.listdir(directory))
    first = zlib.crc32(scenario.encode()) % len(lanes)
    for index in (*range(first, len(lanes)), *range(first)):
        lane = open(os.path.join(directory, lanes[index]), "rb")  # noqa: SIM115 (held)
        try:
            fcntl.flock(lane, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lane.close()
            continue
        return lane
    lane = open(os.path.join(directory, lanes[first]), "rb")  # noqa: SIM115 (held)
    fcntl.flock(lane, fcntl.LOCK_EX)
    return lane


async def accept_as_offered(params: dict[str, Any]) -> dict[str, Any]:
    """The person answering a server's question accepts the form as it is offered: each
    field the server gave a default keeps it (the mesh fills them in)."""
    return {"action": "accept", "content": {}}


async def approve(url: str) -> None:
    """The person at the browser: follow the authorization redirect to our callback."""
    import httpx  # after the mesh, which keeps httpx's own command line unloaded

    from mesh.mcp._oauth import verified_tls

    async with httpx.AsyncClient(verify=verified_tls()) as client:
        response = await client.get(url)
        while response.is_redirect:
            response = await client.get(response.headers["location"])


def settings(directory: str) -> OAuthSettings:
    from mesh.mcp._oauth import OAuthSettings

    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    grant: Literal["authorization_code", "client_credentials"] = (
        "client_credentials" if "client-credentials" in scenario else "authorization_code"
    )
    return OAuthSettings(
        agent="conformance",
        grant=grant,
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
        data_dir=directory,
        client_metadata_url=CLIENT_METADATA_URL,
        jwt_key=context.get("private_key_pem"),
        jwt_algorithm=context.get("signing_algorithm", "ES256"),
    )


async def use(url: str, oauth: OAuthSettings) -> None:
    from mesh import MeshError, open_peer
    from mesh.mcp import open_mcp_http_client, open_mcp_mount
    from mesh.mcp._oauth import login

    wire = partial(open_mcp_http_client, url, oauth=oauth)
    async with (
        open_mcp_mount(wire, agent="conformance", connect_timeout=20) as stream,
        open_peer(stream, agent="conformance") as peer,
    ):
        for tool in await peer.list_tools():
            name = str(tool.get("name"))
            call = partial(
                peer.call_tool,
                name,
                ARGUMENTS.get(name, {}),
                timeout=20,
                on_elicit=accept_as_offered,
            )
            try:
                await call()
            except MeshError as exc:
                print(f"{name}: {exc}", file=sys.stderr)
                if LOGIN not in str(exc):
                    continue
                # The call needs a wider scope: the person consents once more, and the
                # mount, which reads the kept grant on each request, carries it.
                await login(url, oauth, open_url=approve, timeout=20)
                await call()


async def main(url: str) -> None:
    from mesh import MeshError
    from mesh.mcp._oauth import login

    with tempfile.TemporaryDirectory(prefix="mesh-conformance-") as directory:
        oauth = settings(directory)
        try:
            await use(url, oauth)
        except MeshError as exc:
            if LOGIN not in str(exc):
                raise
            await login(url, oauth, open_url=approve, timeout=20)
            await use(url, oauth)


def run(url: str) -> int:
    """The client's run, in its lane when given lanes; its exit status, also printed."""
    lanes = os.environ.get("MESH_CONFORMANCE_LANES")
    lane = hold_lane(lanes, os.environ.get("MCP_CONFORMANCE_SCENARIO", "")) if lanes else None
    status = 1
    try:
        import anyio

        anyio.run(main, url, backend=os.environ.get("MESH_BACKEND", "asyncio"))
        status = 0
    except Exception:
        traceback.print_exc()
    finally:
        print(f"exit: {status}", flush=True)
        if lane is not None:
            lane.close()
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
