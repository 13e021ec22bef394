"""The agent-facing tools (:mod:`contextsieve.session.agent_tools`) as MCP tools: the thin layer ``serve`` and
the gateway share.

A tool is listed with its name, title, description, input schema and annotations; a call's
arguments are checked against the schema, and anything a model can act on (a bad argument, an unknown
item or segment, a refused text, a store that cannot be read) comes back as a tool result with
``isError`` and a message that says what to do, as the MCP specification asks of tool execution
errors. Only a call of a tool the server does not have is a protocol error (invalid params).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contextsieve.session.agent_tools import AgentTool

__all__ = ["SESSION_ARGUMENT", "mcp_tool", "json_result", "error_result", "unknown_tool"]

_log = logging.getLogger(__name__)

#: The ``session`` argument ``serve`` adds to every tool: a handle from an earlier result (what it
#: is for is said once, in ``select_context``'s description and the server's instructions).
SESSION_ARGUMENT: Mapping[str, Mapping[str, Any]] = {"session": {"type": "string"}}


def mcp_tool(tool: AgentTool, extra: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """``tool`` as an ``mcp.types.Tool`` (``extra``: arguments the server adds, e.g. :data:`SESSION_ARGUMENT`)."""
    from mcp import types

    d = tool.definition(extra)
    return types.Tool(
        name=d["name"],
        title=d["title"],
        description=d["description"],
        input_schema=d["inputSchema"],
        annotations=types.ToolAnnotations(**d["annotations"]),
    )


def json_result(value: Mapping[str, Any]) -> Any:
    """A tool result whose one text content is ``value`` as JSON."""
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False))])


def error_result(message: str) -> Any:
    """A tool result with ``isError``: ``message`` is what the model reads."""
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def unknown_tool(name: object, known: Sequence[str]) -> Exception:
    """The protocol error for a call of a tool the server does not have."""
    from mcp import MCPError
    from mcp.types import INVALID_PARAMS

    shown = json.dumps(name, ensure_ascii=False)[:80] if isinstance(name, str) else type(name).__name__
    return MCPError(INVALID_PARAMS, f"unknown tool {shown}; this server's tools: {', '.join(known)}")
