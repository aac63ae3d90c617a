"""The Model Context Protocol as `memoryd mcp` speaks it: JSON-RPC 2.0 on stdin/stdout, one
message a line, with the lifecycle and the tool methods a read-only tool server needs
(`initialize`, `ping`, `tools/list`, `tools/call`). Pure apart from the two streams it is
given; it imports nothing of the MCP SDK (whose import alone took most of a second), so the
server answers the handshake as fast as any command starts.

A tool's arguments are checked against its JSON Schema before it runs (the subset the tools
use: types, `enum`, `pattern`, `minimum`/`maximum`, `anyOf`, `items`, `required`); what fails
is a tool error the agent can correct, as is a `ToolError` its handler raises."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

# Revisions whose handshake and tool methods this server speaks; a client asking for another
# gets the newest, and decides itself whether it can go on.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


class ToolError(Exception):
    """A call the agent can correct (a bad argument): answered as a tool error, not a crash."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[..., dict[str, Any]]
    annotations: Mapping[str, bool]

    def listed(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": {"type": "object", "additionalProperties": True},
            "annotations": dict(self.annotations),
        }


def problems(schema: Mapping[str, Any], value: Any, where: str) -> list[str]:
    """What is wrong with `value` against `schema` (empty: nothing)."""
    if "anyOf" in schema:
        found = [problems(option, value, where) for option in schema["anyOf"]]
        if all(found):
            return [f"{where}: {json.dumps(value)} is none of: " + "; or ".join(_said(found))]
        return []
    kind = schema.get("type")
    if kind is not None and not TYPES[kind](value):
        return [f"{where}: expected {kind}, got {json.dumps(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: expected one of {', '.join(map(repr, schema['enum']))}"]
    if "pattern" in schema and not re.search(schema["pattern"], value):
        return [f"{where}: {value!r} does not match {schema['pattern']}"]
    if "minimum" in schema and value < schema["minimum"]:
        return [f"{where}: {value} is under {schema['minimum']}"]
    if "maximum" in schema and value > schema["maximum"]:
        return [f"{where}: {value} is over {schema['maximum']}"]
    if kind == "array" and "items" in schema:
        return [
            p for i, v in enumerate(value) for p in problems(schema["items"], v, f"{where}[{i}]")
        ]
    if kind == "object":
        missing = [k for k in schema.get("required", ()) if k not in value]
        absent = [f"{where}.{k}: required" for k in missing]
        props = schema.get("properties", {})
        return absent + [
            p for k, v in value.items() if k in props for p in problems(props[k], v, k)
        ]
    return []


def _said(found: list[list[str]]) -> Iterable[str]:
    return (" ".join(p.split(": ", 1)[-1] for p in option) for option in found)


class Server:
    """One client's session: each request line in, its answer line out, in order."""

    def __init__(self, info: Mapping[str, str], instructions: str, tools: Iterable[Tool]) -> None:
        self.info, self.instructions = dict(info), instructions
        self.tools = {tool.name: tool for tool in tools}

    def serve(self, lines: IO[bytes], out: IO[bytes]) -> None:
        """Answer until the client closes stdin; a notification gets no answer."""
        for line in lines:
            if not line.strip():
                continue
            answer = self.answer(line)
            if answer is not None:
                out.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
                out.flush()

    def answer(self, line: bytes) -> dict[str, Any] | None:
        try:
            message = json.loads(line)
        except ValueError:
            return _error(None, PARSE_ERROR, "not JSON")
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return _error(None, INVALID_REQUEST, "not a JSON-RPC request")
        if "id" not in message:
            return None  # notifications/initialized, cancelled: nothing to answer
        ident, params = message["id"], message.get("params") or {}
        method = {
            "initialize": self._initialize,
            "ping": lambda _: {},
            "tools/list": lambda _: {"tools": [t.listed() for t in self.tools.values()]},
            "tools/call": self._call,
        }.get(message["method"])
        if method is None:
            return _error(ident, METHOD_NOT_FOUND, f"no method {message['method']}")
        if not isinstance(params, dict):
            return _error(ident, INVALID_PARAMS, "params must be an object")
        return {"jsonrpc": "2.0", "id": ident, "result": method(params)}

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self.info,
            "instructions": self.instructions,
        }

    def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(str(params.get("name")))
        if tool is None:
            return _tool_error(f"Unknown tool: {params.get('name')}")
        arguments = params.get("arguments") or {}
        wrong = problems(tool.input_schema, arguments, "arguments")
        if wrong:
            return _tool_error(f"Error executing tool {tool.name}: " + "; ".join(wrong))
        props = tool.input_schema.get("properties", {})
        try:
            result = tool.handler(**{k: v for k, v in arguments.items() if k in props})
        except ToolError as error:
            return _tool_error(str(error))
        except Exception as error:  # one failed call is said to the agent; the server goes on
            return _tool_error(f"Error executing tool {tool.name}: {error}")
        text = json.dumps(result, ensure_ascii=False, indent=2)
        return {"content": [{"type": "text", "text": text}], "structuredContent": result}


def _tool_error(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
