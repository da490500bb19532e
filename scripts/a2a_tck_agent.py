"""The A2A TCK's system under test, as a mesh agent: what it does is chosen by the prefix of
the message's id, as the TCK's scenarios (``scenarios/core_operations.feature``) say. It
reads the id from the request's A2A context (its ``a2a`` argument, docs/a2a.md), so it is
also the example of a tool that sees its request. Serve it with a manifest::

    id = "tck"
    [transport]
    type = "stdio"
    command = "python"
    args = ["scripts/a2a_tck_agent.py", "--stdio"]
    [metadata]
    text_entry = "respond"

``tck-input-required`` asks the caller for input (the task waits in ``INPUT_REQUIRED``),
and the answering message's id (in the answer's ``_meta.a2a``) picks what happens next, as
a new message's would: another ``tck-input-required`` asks again, anything else is done.
"""

from __future__ import annotations

from typing import Any

from mesh import Agent, RequestContext, ToolError, run_agent
from mesh.content import EmbeddedResource, ResourceLink, Text

agent = Agent("tck", description="The A2A TCK's scenarios, chosen by the message id's prefix.")


#: What the agent asks: one string field, so a text answer fills it.
QUESTION = {"type": "object", "properties": {"text": {"type": "string"}}}


@agent.tool
async def respond(text: str, ctx: RequestContext, a2a: dict[str, Any] | None = None) -> Any:
    """Do what the TCK's scenario for this message id says."""
    message_id = str((a2a or {}).get("messageId", ""))
    while message_id.startswith("tck-input-required"):
        # ctx.ask rather than ctx.elicit: the raw answer keeps its _meta (the message's id).
        answer = await ctx.ask("elicit", {"message": "Input required", "requestedSchema": QUESTION})
        if answer.get("action") != "accept":
            return "cancelled"
        message_id = str(answer.get("_meta", {}).get("a2a", {}).get("messageId", ""))
    return scenario(message_id)


def scenario(message_id: str) -> Any:
    """The answer the scenario of ``message_id`` gives."""
    if message_id.startswith("tck-artifact-text"):
        return [Text("Generated text content")]
    if message_id.startswith("tck-artifact-file-url"):
        url = "https://example.com/output.txt"
        return [ResourceLink(uri=url, name="output.txt", mime_type="text/plain")]
    if message_id.startswith("tck-artifact-file"):
        return [EmbeddedResource.of("file:///output.txt", mime_type="text/plain", blob=b"TCK file")]
    if message_id.startswith("tck-artifact-data"):
        return {"key": "value", "count": 42}
    if message_id.startswith("tck-message-response"):
        return {"$message": "Direct message response"}
    if message_id.startswith("tck-reject-task"):
        raise ToolError("rejected", data={"type": "Rejected"})
    return "Hello from TCK"


if __name__ == "__main__":
    run_agent(agent)
