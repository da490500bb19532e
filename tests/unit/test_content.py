"""Content items a tool returns (mesh.content): their wire form, the agent SDK's checks,
and how /mcp's catalog turns them into MCP's CallToolResult."""

from __future__ import annotations

import msgspec
import pytest

from mesh import Agent, ToolError
from mesh.content import (
    CONTENT_KEY,
    MAX_ITEM_BYTES,
    Audio,
    EmbeddedResource,
    Image,
    Item,
    ResourceLink,
    Text,
    ToolResult,
    decode,
)
from mesh.mcp._catalog import call_result
from mesh.testing import open_memory_peer

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n"


class Forecast(msgspec.Struct):
    city: str
    high: float


def make_agent() -> Agent:
    agent = Agent("art")

    @agent.tool
    def picture() -> Image:
        "One image."
        return Image(data=PNG, mime_type="image/png")

    @agent.tool
    def mixed() -> list[Item]:
        "Every kind of item."
        return [
            Text(text="caption"),
            Image(data=PNG, mime_type="image/png"),
            Audio(data=b"RIFF", mime_type="audio/wav"),
            ResourceLink(uri="file:///a.txt", name="a.txt"),
            EmbeddedResource.of("test://blob", mime_type="application/octet-stream", blob=b"\0"),
        ]

    @agent.tool
    def forecast(city: str) -> ToolResult[Forecast]:
        "Text for people, structure for programs."
        structured = Forecast(city, 21.5) if city != "nowhere" else {"city": city}
        return ToolResult([Text(text=f"{city}: sunny")], structured=structured)  # type: ignore[arg-type]

    @agent.tool
    def huge() -> Image:
        "Past the bound."
        return Image(data=b"\0" * (MAX_ITEM_BYTES + 1), mime_type="image/png")

    @agent.tool
    def plain() -> dict[str, str]:
        "The plain path, unchanged."
        return {"content": "not items"}

    return agent


async def test_items_travel_in_mcp_shapes_and_decode_back() -> None:
    async with open_memory_peer(make_agent()) as peer:
        answer = await peer.call_tool("picture")
        assert answer == {
            CONTENT_KEY: [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]
        }
        mixed = await peer.call_tool("mixed")
        types = [item["type"] for item in mixed[CONTENT_KEY]]
        assert types == ["text", "image", "audio", "resource_link", "resource"]
        decoded = decode(mixed)
        assert decoded is not None and decoded.content[1] == Image(data=PNG, mime_type="image/png")
        assert await peer.call_tool("plain") == {"content": "not items"}
        assert decode({"content": "not items"}) is None


async def test_structured_content_is_declared_and_checked() -> None:
    agent = make_agent()
    schema = agent.tools["forecast"].output_schema
    assert schema is not None and schema["properties"]["high"] == {"type": "number"}
    assert agent.tools["picture"].output_schema is None
    async with open_memory_peer(agent) as peer:
        answer = await peer.call_tool("forecast", {"city": "Oslo"})
        assert answer["$structured"] == {"city": "Oslo", "high": 21.5}
        with pytest.raises(ToolError, match=r"invalid result.*\$\.\$structured"):
            await peer.call_tool("forecast", {"city": "nowhere"})


async def test_an_oversized_item_is_refused_by_name_and_the_link_lives() -> None:
    async with open_memory_peer(make_agent()) as peer:
        with pytest.raises(ToolError, match=r"at most \d+ \(mesh\.content\.MAX_ITEM_BYTES\)"):
            await peer.call_tool("huge")
        assert (await peer.call_tool("picture"))[CONTENT_KEY][0]["type"] == "image"


def test_an_unknown_item_type_is_named() -> None:
    with pytest.raises(ToolError, match=r"Invalid value 'video' - at `\$\.\$content\[0\]\.type`"):
        decode({CONTENT_KEY: [{"type": "video", "data": ""}]})
    served = call_result({CONTENT_KEY: [{"type": "video"}]})
    assert served["isError"] is True
    assert "an item's type is one of text, image" in served["content"][0]["text"]


def test_mcp_answers_carry_items_unchanged() -> None:
    item = {"type": "image", "data": "AA==", "mimeType": "image/png", "annotations": {"x": 1}}
    served = call_result({CONTENT_KEY: [item], "$structured": {"n": 1}})
    assert served == {"content": [item], "structuredContent": {"n": 1}, "isError": False}
    assert call_result({CONTENT_KEY: [item], "$structured": 3}, wrapped=True)[
        "structuredContent"
    ] == {"result": 3}
    # The plain path as before: one JSON text, the structure beside it.
    assert call_result({"a": 1}) == {
        "content": [{"type": "text", "text": '{"a":1}'}],
        "isError": False,
        "structuredContent": {"a": 1},
    }


def test_an_embedded_resource_holds_text_or_blob() -> None:
    with pytest.raises(ValueError, match="either `text` or `blob`"):
        EmbeddedResource.of("test://x")
