"""An agent's tools as a person reads them: names, descriptions, arguments and their types.

``tools/list`` answers with JSON Schemas, which are precise and hard to read at a
glance; this turns them into the types an author wrote (``str``, ``list[int]``,
``Point``) with their constraints, defaults and descriptions, one row per
argument. Every text comes from the agent, so every text is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from mesh._text import printable

__all__ = ["format_tools", "schema_type", "usage"]

_SCALARS: Final = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}
_BOUNDS: Final = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minLength", "length >="),
    ("maxLength", "length <="),
    ("minItems", "items >="),
    ("maxItems", "items <="),
)


def schema_type(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> str:
    """The Python-like type a JSON Schema describes: ``str``, ``list[Point]``, ``'a' | 'b'``."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(repr(value) for value in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " | ".join(schema_type(arm, defs) for arm in schema[union])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_SCALARS.get(k, str(k)) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return f"list[{schema_type(items, defs)}]" if isinstance(items, Mapping) else "list"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and not schema.get("properties"):
            return f"dict[str, {schema_type(extra, defs)}]"
        return "object"
    if isinstance(kind, str):
        shown = _SCALARS.get(kind, kind)
        return f"{shown} ({schema['format']})" if "format" in schema else shown
    return "any"


def _constraints(schema: Mapping[str, Any]) -> str:
    parts = [f"{words} {schema[key]!r}" for key, words in _BOUNDS if key in schema]
    if "pattern" in schema:
        parts.append(f"matches {schema['pattern']!r}")
    return ", ".join(parts)


def _argument_rows(schema: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(name, type, required-or-default, description and constraints) per argument."""
    defs = schema.get("$defs", {})
    required = set(schema.get("required", ()))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            need = "required"
        elif "default" in prop:
            need = f"= {prop['default']!r}"
        else:
            need = "optional"
        notes = [text for text in (prop.get("description", ""), _constraints(prop)) if text]
        rows.append((name, schema_type(prop, defs), need, "; ".join(notes)))
    return rows


def usage(tool: Mapping[str, Any]) -> str:
    """How to call the tool at ``mesh dev``'s prompt: ``greet name=STR [excited=BOOL]``."""
    schema = tool.get("inputSchema", {})
    required = set(schema.get("required", ()))
    words = [printable(str(tool.get("name", "?")))]
    for name, prop in schema.get("properties", {}).items():
        shown = schema_type(prop, schema.get("$defs", {}))
        # Metavars in capitals, as --help writes them; literal values as they must be typed.
        word = f"{name}={shown if chr(39) in shown else shown.upper()}"
        words.append(word if name in required else f"[{word}]")
    return printable(" ".join(words))


def format_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """Every tool: its name and description, then one aligned row per argument, then its result."""
    if not tools:
        return "(no tools)"
    blocks = []
    for tool in tools:
        description = str(tool.get("description", "")).strip().splitlines()
        head = printable(str(tool.get("name", "?")))
        lines = [f"{head}  {printable(description[0])}" if description else head]
        rows = _argument_rows(tool.get("inputSchema", {}))
        output = tool.get("outputSchema")
        if isinstance(output, Mapping):
            rows.append(("->", schema_type(output), "", "the result"))
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append(printable("    " + "  ".join([*cells, row[3]]).rstrip()))
        if not rows:
            lines.append("    (no arguments)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
