"""contextsieve as an MCP server: per-request context selection and tool search for any MCP host.

``contextsieve serve AGENT [--transport stdio|http]`` runs :func:`build_server` over stdio (default)
or streamable HTTP. Tools (JSON results):

- ``select_context(message, settings?, preset?)``: the request context for ``message`` in this
  connection's session, items in the reference shape plus contextsieve's extras, the selected rules'
  and references' texts and the selected tools' names and schemas.
- ``search_tools(query, limit=5)``: the agent's tools this session may use, best first.
- ``explain(message, item)``: why an item is or is not selected (the selection's own trace).
- ``add_to_session(item)`` / ``remove_from_session(item)``: manual session items.

Rules and references are resources (``contextsieve://rule/NAME``, ``contextsieve://reference/NAME``).
Each MCP session (connection) has its own contextsieve :class:`~contextsieve.session.Session`; no
client can name another's. Bad input (unknown item, bad setting, oversize message) is a JSON-RPC
``invalid params`` error naming the problem; other contextsieve errors are ``internal error`` with
their message; the server keeps running.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from contextsieve.assembly import tool_definition
from contextsieve.context import ContextEntry, RequestContext
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, UnknownItemError, brief
from contextsieve.items import ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.mcp.client import require_sdk
from contextsieve.search import search
from contextsieve.session import Session

try:  # the tools' annotations are evaluated by the SDK, so Context must be a module global
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # build_server raises MissingExtraError naming the extra
    Context = MCPServer = None  # type: ignore[assignment,misc]

__all__ = ["ServeConfig", "build_server", "reference_item", "context_result"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class ServeConfig:
    """Limits of the MCP server.

    Attributes:
        max_message_chars: longest ``message`` / ``query`` accepted (default 100,000 characters).
        max_limit: largest ``search_tools`` limit (default 50).
        max_request_bytes: largest HTTP request body (default 1 MB; HTTP only).
    """

    max_message_chars: int = 100_000
    max_limit: int = 50
    max_request_bytes: int = 1_000_000


def reference_item(entry: ContextEntry) -> dict[str, Any]:
    """A request-context item in the reference shape (``type``, ``name``, ``serverName`` for tools,
    ``includeMode``, ``similarityScore`` for searched items) with contextsieve's extras under
    ``contextsieve``."""
    key = entry.key
    out: dict[str, Any] = {"type": key.kind.value, "name": key.name}
    if key.kind is ItemKind.TOOL:
        out["serverName"] = key.server
    out["includeMode"] = entry.mode.value
    if entry.score is not None:
        out["similarityScore"] = entry.score
    extras = {
        k: v
        for k, v in (
            ("query_chunk", entry.query_chunk),
            ("chunk", entry.chunk),
            ("via", entry.via),
            ("pulled_by", str(entry.pulled_by) if entry.pulled_by else None),
            ("priority", entry.priority),
        )
        if v is not None
    }
    if extras:
        out["contextsieve"] = extras
    return out


def context_result(engine: Engine, ctx: RequestContext, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON result of ``select_context``: items, texts of the selected rules and references, the
    tools to offer (prompt names ``server_tool``), and what was dropped and noted."""
    texts = []
    for e in ctx.entries:
        if e.key.kind is not ItemKind.TOOL:
            item = engine.agent.get(e.key)
            assert isinstance(item, (Rule, Reference))
            texts.append({"type": e.key.kind.value, "name": e.key.name, "text": item.text})
    return {
        "items": [reference_item(e) for e in ctx.entries],
        "texts": texts,
        "tools": tools,
        "dropped": [{**reference_item(d.entry), "tokens": d.tokens, "reason": d.reason} for d in ctx.dropped],
        "notes": list(ctx.notes),
        "summary": ctx.summary(),
    }


def _mcp_error(e: ContextSieveError) -> Exception:
    from mcp import MCPError
    from mcp.types import INTERNAL_ERROR, INVALID_PARAMS

    code = INVALID_PARAMS if isinstance(e, (InputError, UnknownItemError)) else INTERNAL_ERROR
    return MCPError(code, str(e))


def _invalid(message: str) -> Exception:
    from mcp import MCPError
    from mcp.types import INVALID_PARAMS

    return MCPError(INVALID_PARAMS, message)


def build_server(engine: Engine, config: ServeConfig = ServeConfig()) -> Any:
    """The MCP server object (``mcp.server.mcpserver.MCPServer``) serving ``engine``'s agent."""
    require_sdk()
    agent = engine.agent
    server = MCPServer(
        name=f"contextsieve ({agent.name})",
        instructions=(
            f"Context selection for the agent {agent.name!r}: call select_context with each user message to get "
            "the rules, references and tools to put into the prompt; search_tools finds tools by meaning."
        ),
    )
    sessions: weakref.WeakKeyDictionary[Any, Session] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def session_of(ctx: Context) -> Session:
        with lock:
            s = sessions.get(ctx.session)
            if s is None:
                s = sessions[ctx.session] = engine.session()
            return s

    def run(fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except ContextSieveError as e:
            raise _mcp_error(e) from e

    def text(value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise _invalid(f"{what} must be a string")
        if len(value) > config.max_message_chars:
            raise _invalid(f"{what} has {len(value)} characters; the limit is {config.max_message_chars}")
        return value

    def key_of(item: Any) -> ItemKey:
        if not isinstance(item, str):
            raise _invalid("item must be a string such as rule:NAME, reference:NAME or tool:SERVER:NAME")
        key = run(lambda: ItemKey.parse(item))
        if not agent.has(key):
            raise _invalid(f"the agent has no {brief(item)}")
        return key

    @server.tool()
    def select_context(
        message: str, ctx: Context, settings: dict[str, Any] | None = None, preset: str | None = None
    ) -> str:
        """The request context for a user message: which rules, references and tools to put into the
        prompt, and why.

        Args:
            message: the user's message (mentions @ref:NAME / @rule:NAME add items to the session).
            settings: overrides for this request only, e.g. {"context_top_n": 8} (contextsieve names).
            preset: "aggressive", "normal" or "conservative".

        Returns JSON: items (type, name, serverName, includeMode, similarityScore, contextsieve extras),
        texts of the selected rules and references, tools (name, description, input_schema), dropped, notes.
        """
        msg = text(message, "message")
        session = session_of(ctx)

        def build() -> dict[str, Any]:
            if settings or preset:
                saved = session.settings
                try:
                    session.update_settings(preset, **(settings or {}))
                    req = session.build_request(msg)
                finally:
                    session.settings = saved
            else:
                req = session.build_request(msg)
            session.record_reply(req, "")
            return context_result(engine, req.context, req.tools)

        if settings is not None and not isinstance(settings, dict):
            raise _invalid("settings must be an object")
        return json.dumps(run(build), ensure_ascii=False)

    @server.tool()
    def search_tools(query: str, ctx: Context, limit: int = 5) -> str:
        """Find the agent's tools by meaning (every tool this session may use, whatever its include mode).

        Args:
            query: what the tool should do.
            limit: how many tools to return (1-50, default 5).

        Returns JSON: tools (name as offered to the LLM, server, tool, description, input_schema, score), best first.
        """
        q = text(query, "query")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= config.max_limit:
            raise _invalid(f"limit must be an int from 1 to {config.max_limit}")
        session = session_of(ctx)
        return json.dumps({"tools": run(lambda: _search_tools(engine, session, q, limit))}, ensure_ascii=False)

    @server.tool()
    def explain(message: str, item: str, ctx: Context) -> str:
        """Why an item is or is not in the request context for a message (the selection's own trace).

        Args:
            message: the user's message.
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
        """
        msg = text(message, "message")
        key = key_of(item)
        session = session_of(ctx)
        ex = run(lambda: session.explain(msg, key))
        return json.dumps({**ex.__dict__, "text": str(ex)}, ensure_ascii=False)

    @server.tool()
    def add_to_session(item: str, ctx: Context) -> str:
        """Add an item to this session as manual (it is in every request from now on).

        Args:
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
        """
        key = key_of(item)
        session = session_of(ctx)
        run(lambda: session.add(key))
        return json.dumps({"items": [{"item": str(k), "includeMode": m.value} for k, m in session.items()]})

    @server.tool()
    def remove_from_session(item: str, ctx: Context) -> str:
        """Remove an item from this session (an always item stays removed for this session).

        Args:
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
        """
        key = key_of(item)
        session = session_of(ctx)
        run(lambda: session.remove(key))
        return json.dumps({"items": [{"item": str(k), "includeMode": m.value} for k, m in session.items()]})

    for it in [*agent.rules, *agent.references]:
        _add_resource(server, it)
    return server


def _add_resource(server: Any, item: Rule | Reference) -> None:
    kind = item.kind.value

    def read() -> str:
        return item.text

    server.resource(
        f"contextsieve://{kind}/{item.name}",
        name=f"{kind}:{item.name}",
        description=item.description or f"the {kind} {item.name}",
        mime_type="text/markdown",
    )(read)


def _search_tools(engine: Engine, session: Session, query: str, limit: int) -> list[dict[str, Any]]:
    """The selection pipeline (:func:`contextsieve.search.search`) over the tools the session may use,
    with the top ``limit`` and no score threshold."""
    from contextsieve.chunking import query_chunks

    table = engine.agent.table()
    allowed = table.tool.copy()
    for i in range(len(table.items)):
        it = table.items[i]
        if allowed[i] and isinstance(it, Tool) and not session._tool_available(it):
            allowed[i] = False
    base = session.settings.for_tools()
    settings = base.with_overrides(
        context_top_n=limit,
        context_top_k=max(base.context_top_k, 4 * limit),
        context_include_score=0.0,
        expansion_depth=0,
        min_representation_floor=None,
        token_budget=None,
    )
    chunks = query_chunks(query)[: settings.max_query_chunks]
    entries, _ = search(engine.store, table, allowed, settings, chunks, engine.agent.server_descriptions())
    out = []
    for e in entries[:limit]:
        tool = engine.agent.get(e.key)
        assert isinstance(tool, Tool)
        d = tool_definition(tool)
        out.append({**d, "server": tool.server, "tool": tool.name, "score": e.score})
    return out


def guarded_app(app: Any, *, token: str | None, max_request_bytes: int) -> Any:
    """An ASGI wrapper: ``401`` without ``Authorization: Bearer <token>`` (when a token is set, compared
    in constant time) and ``413`` for bodies over ``max_request_bytes`` (by header and as streamed)."""
    import hmac

    async def reply(send: Any, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if token is not None:
            got = headers.get(b"authorization", b"")
            if not hmac.compare_digest(got, b"Bearer " + token.encode()):
                await reply(send, 401, b"missing or wrong bearer token")
                return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > max_request_bytes):
            await reply(send, 413, f"request body over {max_request_bytes} bytes".encode())
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_request_bytes:
                    raise InputError(f"request body over {max_request_bytes} bytes")
            return message

        await app(scope, counted, send)

    return guarded


def serve(
    engine: Engine,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    config: ServeConfig = ServeConfig(),
) -> None:
    """Run the server until interrupted: over stdio, or streamable HTTP at ``http://host:port/mcp``."""
    server = build_server(engine, config)
    if transport == "stdio":
        server.run("stdio")
        return
    if transport != "http":
        raise InputError(f"transport must be 'stdio' or 'http', got {brief(transport)}")
    import uvicorn

    app = guarded_app(server.streamable_http_app(), token=token, max_request_bytes=config.max_request_bytes)
    uvicorn.run(app, host=host, port=port, log_level="warning")
