"""The MCP conformance suite's everything-server tools, written as a mesh agent.

The suite (``tests/mcp/_conformance.py``) calls tools by fixed names
(``test_simple_text``, ``test_image_content``...); this agent offers them with the
mesh's agent SDK, so the suite measures what the mesh carries of MCP through
``/mcp/conf`` (its own names) and ``/mcp`` (``conf__test_simple_text``...).

Run it with ``python tests/mcp/conformance_agent.py --stdio``.
"""

from __future__ import annotations

import anyio

from mesh import Agent, CompletionArgument, CompletionRef, RequestContext, run_agent
from mesh.content import Audio, EmbeddedResource, Image, Item, PromptMessage, Text

agent = Agent(
    "conf",
    name="Conformance",
    description="The MCP conformance suite's everything-server tools.",
    capabilities=["test"],
)

#: A 1x1 red PNG, as the suite's image scenarios ask.
RED_PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)

#: A silent WAV of one sample (a RIFF header and two bytes of 16-bit PCM).
SILENT_WAV = (
    b"RIFF&\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"
    b"\x44\xac\x00\x00\x88\x58\x01\x00\x02\x00\x10\x00data\x02\x00\x00\x00\x00\x00"
)


@agent.tool
def test_image_content() -> Image:
    """A 1x1 red PNG."""
    return Image(data=RED_PIXEL_PNG, mime_type="image/png")


@agent.tool
def test_audio_content() -> Audio:
    """A silent WAV."""
    return Audio(data=SILENT_WAV, mime_type="audio/wav")


@agent.tool
def test_embedded_resource() -> EmbeddedResource:
    """A text resource, inline."""
    return EmbeddedResource.of(
        "test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    )


@agent.tool
def test_multiple_content_types() -> list[Item]:
    """Text, an image and a resource together."""
    return [
        Text(text="Multiple content types test:"),
        Image(data=RED_PIXEL_PNG, mime_type="image/png"),
        EmbeddedResource.of(
            "test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        ),
    ]


@agent.tool
def test_simple_text() -> str:
    """A plain text answer."""
    return "This is a simple text response for testing."


@agent.tool
def test_error_handling() -> str:
    """Always fails, so the client sees isError."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@agent.tool
async def test_tool_with_progress(ctx: RequestContext) -> str:
    """Reports 0, 50 and 100 of 100, ~50 ms apart."""
    for step in (0, 50, 100):
        ctx.report_progress(step, 100)
        if step < 100:
            await anyio.sleep(0.05)
    return "Progress reported: 0, 50, 100 of 100"


@agent.tool
async def test_tool_with_logging(ctx: RequestContext) -> str:
    """Logs three lines at info, ~50 ms apart."""
    for step, line in enumerate(
        ("Tool execution started", "Tool processing data", "Tool execution completed")
    ):
        if step:
            await anyio.sleep(0.05)
        ctx.log("info", line)
    return "Logging completed"


@agent.tool
async def test_sampling(prompt: str, ctx: RequestContext) -> str:
    """Asks the client's model to answer ``prompt``."""
    sampled = await ctx.sample(prompt, max_tokens=100)
    return f"LLM response: {sampled.content.get('text')}"


@agent.tool
async def test_elicitation(message: str, ctx: RequestContext) -> str:
    """Asks the client's user for a username and an email."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    got = await ctx.elicit(message, schema)
    return f"User response: action={got.action}, content={got.content}"


@agent.tool
async def test_elicitation_sep1034_defaults(ctx: RequestContext) -> str:
    """An elicitation whose every primitive field has a default (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "default": True},
        },
    }
    got = await ctx.elicit("Please review the defaults", schema)
    return f"Elicitation completed: action={got.action}, content={got.content}"


@agent.tool
async def test_elicitation_sep1330_enums(ctx: RequestContext) -> str:
    """An elicitation with the five kinds of enum (SEP-1330)."""
    titled = [
        {"const": f"value{n}", "title": title}
        for n, title in ((1, "First Option"), (2, "Second Option"), (3, "Third Option"))
    ]
    choices = [
        {"const": f"value{n}", "title": title}
        for n, title in ((1, "First Choice"), (2, "Second Choice"), (3, "Third Choice"))
    ]
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {"type": "string", "oneOf": titled},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {"type": "array", "items": {"anyOf": choices}},
        },
    }
    got = await ctx.elicit("Pick your options", schema)
    return f"Elicitation completed: action={got.action}, content={got.content}"


@agent.tool
def bad_content() -> dict[str, object]:
    """Not a suite tool: a content answer with an item of a type MCP does not have."""
    return {"$content": [{"type": "video", "data": ""}]}


@agent.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@agent.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed binary resource: the red pixel."""
    return RED_PIXEL_PNG


@agent.resource("test://watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients subscribe to; `touch_watched` says it changed."""
    return f"watched, version {_watched['version']}"


_watched = {"version": 0}


@agent.tool
def touch_watched() -> int:
    """Not a suite tool: change the watched resource and tell its subscribers."""
    _watched["version"] += 1
    agent.resource_updated("test://watched-resource")
    return _watched["version"]


@agent.resource("test://oversized", mime_type="application/octet-stream")
def oversized() -> bytes:
    """Not a suite resource: more bytes than a resource may hold."""
    return bytes(9 * 1024 * 1024)


@agent.resource_template("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> str:
    """Data for an id, from a template."""
    return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'


@agent.prompt()
def test_simple_prompt() -> str:
    """A prompt with no arguments."""
    return "This is a simple prompt for testing."


@agent.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@agent.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Item]:
    """A prompt that embeds a resource."""
    return [
        EmbeddedResource.of(
            resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        ),
        Text(text="Please process the embedded resource above."),
    ]


@agent.prompt()
def test_prompt_with_image() -> list[PromptMessage]:
    """A prompt with an image."""
    return [
        PromptMessage(content=Image(data=RED_PIXEL_PNG, mime_type="image/png")),
        PromptMessage(content=Text(text="Please analyze the image above.")),
    ]


@agent.completion()
def complete(
    ref: CompletionRef, argument: CompletionArgument, context: dict[str, str]
) -> list[str]:
    """Completes the suite's prompt arguments and template ids."""
    choices = {"arg1": ["paris", "park", "party"], "id": ["123", "456"]}.get(argument.name, [])
    return [value for value in choices if value.startswith(argument.value)]


if __name__ == "__main__":
    run_agent(agent)
