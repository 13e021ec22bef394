"""contextsieve as an MCP server: per-request context selection and tool search for any MCP host.

``contextsieve serve AGENT [--transport stdio|http]`` runs :func:`build_server` over stdio (default)
or streamable HTTP. Tools (JSON results):

- ``select_context(message, settings?, preset?)``: the request context for ``message`` in this
  connection's session, items in the reference shape plus contextsieve's extras, the selected rules'
  and references' texts and the selected tools' names and schemas.
- ``search_tools(query, limit=5)``: the agent's tools this session may use, best first.
- ``explain(message, item)``: why an item is or is not selected (the selection's own trace).
- ``add_to_session(item)`` / ``remove_from_session(item)``: manual session items.
- ``record_tool_calls(message, tools)``: learning from use (the message becomes an example of each tool).

With a stash store (``--stash PATH|URI``), the stash tools of :mod:`contextsieve.mcp.stash_tools`
join them (``stash_context``, ``retrieve_stashed_context``, ``merge_stashed_context``, ...).

Rules and references are resources (``contextsieve://rule/NAME``, ``contextsieve://reference/NAME``).

Sessions: every result carries ``session``, a random 128-bit handle of a contextsieve
:class:`~contextsieve.session.Session` (session items, settings, history of request contexts). A
client of the stateful protocol (``initialize`` handshake, protocol 2025-11-25 and older: Claude
Desktop, Cursor, stdio hosts) gets one session per connection without doing anything. The stateless
protocol (2026-07-28) has no connections, so, as that revision prescribes, the client passes the
handle back in the ``session`` argument; without one, a call starts a new session. Handles are
unguessable and never listed, so no client can read or change another's session. Sessions idle for
:attr:`ServeConfig.session_idle_seconds` are dropped, and at most :attr:`ServeConfig.max_sessions`
are kept (the least recently used goes first). Bad input (unknown item, bad setting, oversize message) is a JSON-RPC
``invalid params`` error naming the problem; other contextsieve errors are ``internal error`` with
their message; the server keeps running.
"""

from __future__ import annotations

import inspect
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from contextsieve.assembly import Request, tool_definition
from contextsieve.context import ContextEntry, StashedEntry
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, UnknownItemError, UnknownSegmentError, brief
from contextsieve.items import ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.mcp.client import require_sdk
from contextsieve.search import search
from contextsieve.session import Session, StashSettings
from contextsieve.stash.store import StashStore

try:  # the tools' annotations are evaluated by the SDK, so Context must be a module global
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # build_server raises MissingExtraError naming the extra
    Context = MCPServer = None  # type: ignore[assignment,misc]

__all__ = ["ServeConfig", "build_server", "reference_item", "context_result"]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


#: Requests whose contexts a served session keeps in its history (older ones are dropped).
HISTORY_TURNS = 100


@dataclass(frozen=True)
class ServeConfig:
    """Limits of the MCP server.

    Attributes:
        max_message_chars: longest ``message`` / ``query`` accepted (default 100,000 characters).
        max_limit: largest ``search_tools`` limit (default 50).
        max_request_bytes: largest HTTP request body (default 1 MB; HTTP only).
        max_sessions: sessions kept at once (default 1,000; the least recently used is dropped).
        session_idle_seconds: a session unused this long is dropped (default 3,600).
        stash_session: with a stash, the stash session every connection uses (default None: each
            connection's own session handle, so no client sees another's segments).
        stash_cross_session: with a stash, retrieval searches every stash session (default False).
        max_stash_segments: most segments one ``stash_context`` call may carry (default 1,000).
        learn_from_calls: the gateway records the current task's message as an example request of each
            ``agent``-mode tool the host calls successfully (learning from use; default True).
    """

    max_message_chars: int = 100_000
    max_limit: int = 50
    max_request_bytes: int = 1_000_000
    max_sessions: int = 1000
    session_idle_seconds: float = 3600.0
    stash_session: str | None = None
    stash_cross_session: bool = False
    max_stash_segments: int = 1000
    learn_from_calls: bool = True


def reference_item(entry: ContextEntry | StashedEntry) -> dict[str, Any]:
    """A request-context item in the reference shape (see :meth:`ContextEntry.to_dict`)."""
    return entry.to_dict()


def context_result(engine: Engine, req: Request) -> dict[str, Any]:
    """The JSON result of ``select_context``: items, texts of the selected rules and references (and
    of stashed segments brought back, with a stash), the tools to offer (prompt names ``server_tool``),
    and what was dropped and noted."""
    ctx, tools = req.context, req.tools
    texts = []
    for e in ctx.entries:
        if e.key.kind is not ItemKind.TOOL:
            item = engine.agent.get(e.key)
            assert isinstance(item, (Rule, Reference))
            texts.append({"type": e.key.kind.value, "name": e.key.name, "text": item.text})
    texts += [
        {"type": "stash", "name": e.segment_id, "text": req.stash_texts[e.segment_id]}
        for e in ctx.stashed
        if e.segment_id in req.stash_texts
    ]
    return {
        "items": [reference_item(e) for e in ctx.entries] + [reference_item(e) for e in ctx.stashed],
        "texts": texts,
        "tools": tools,
        "dropped": [{**reference_item(d.entry), "tokens": d.tokens, "reason": d.reason} for d in ctx.dropped],
        "notes": list(ctx.notes),
        "summary": ctx.summary(),
    }


def _mcp_error(e: ContextSieveError) -> Exception:
    from mcp import MCPError
    from mcp.types import INTERNAL_ERROR, INVALID_PARAMS

    code = INVALID_PARAMS if isinstance(e, (InputError, UnknownItemError, UnknownSegmentError)) else INTERNAL_ERROR
    return MCPError(code, str(e))


def _invalid(message: str) -> Exception:
    from mcp import MCPError
    from mcp.types import INVALID_PARAMS

    return MCPError(INVALID_PARAMS, message)


def build_server(engine: Engine, config: ServeConfig = ServeConfig(), stash: StashStore | None = None) -> Any:
    """The MCP server object (``mcp.server.mcpserver.MCPServer``) serving ``engine``'s agent, and
    the stash tools when ``stash`` is given."""
    require_sdk()
    agent = engine.agent
    server = MCPServer(
        name=f"contextsieve ({agent.name})",
        instructions=(
            f"Context selection for the agent {agent.name!r}: call select_context with each user message to get "
            "the rules, references and tools to put into the prompt; search_tools finds tools by meaning."
        ),
    )
    sessions = _Sessions(engine, config, stash)

    def tool(fn: _F) -> _F:
        """Register ``fn`` with its docstring, dedented, as the tool's description."""
        server.tool(description=inspect.cleandoc(fn.__doc__ or ""), structured_output=False)(fn)
        return fn

    def session_of(ctx: Context, handle: str | None) -> tuple[str, Session]:
        if handle is not None:
            if not isinstance(handle, str):
                raise _invalid("session must be a string handle from an earlier result")
            found = sessions.get(handle)
            if found is None:
                raise _invalid("unknown or expired session handle; call without one to start a new session")
            return handle, found
        state = _connection_state(ctx)
        if state is not None:  # the stateful protocol: one session per connection
            handle = state.get(_STATE_KEY)
            found = sessions.get(handle) if handle else None
            if found is not None:
                return str(handle), found
            handle, found = sessions.new()
            state[_STATE_KEY] = handle
            return handle, found
        return sessions.new()

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

    @tool
    def select_context(
        message: str,
        ctx: Context,
        settings: dict[str, Any] | None = None,
        preset: str | None = None,
        session: str | None = None,
    ) -> str:
        """The request context for a user message: which rules, references and tools to put into the
        prompt, and why.

        Args:
            message: the user's message (mentions @ref:NAME / @rule:NAME add items to the session).
            settings: overrides for this request only, e.g. {"context_top_n": 8} (contextsieve names).
            preset: "aggressive", "normal", "conservative" or "reference".
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.

        Returns JSON: session (the handle), items (type, name, serverName, includeMode, similarityScore,
        contextsieve extras), texts of the selected rules and references, tools (name, description,
        input_schema), dropped, notes.
        """
        msg = text(message, "message")
        if settings is not None and not isinstance(settings, dict):
            raise _invalid("settings must be an object")
        handle, s = session_of(ctx, session)

        def build() -> dict[str, Any]:
            if settings or preset:
                saved = s.settings
                try:
                    s.update_settings(preset, **(settings or {}))
                    req = s.build_request(msg)
                finally:
                    s.settings = saved
            else:
                req = s.build_request(msg)
            s.record_reply(req, "")
            del s.history[: -2 * HISTORY_TURNS]  # a bounded history of request contexts
            return {"session": handle, **context_result(engine, req)}

        return json.dumps(run(build), ensure_ascii=False)

    @tool
    def search_tools(query: str, ctx: Context, limit: int = 5, session: str | None = None) -> str:
        """Find the agent's tools by meaning (every tool this session may use, whatever its include mode).

        Args:
            query: what the tool should do.
            limit: how many tools to return (1-50, default 5).
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.

        Returns JSON: tools (name as offered to the LLM, server, tool, description, input_schema, similarity),
        best first (ranked by similarity and keyword match together).
        """
        q = text(query, "query")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= config.max_limit:
            raise _invalid(f"limit must be an int from 1 to {config.max_limit}")
        handle, s = session_of(ctx, session)
        found = run(lambda: _search_tools(engine, s, q, limit))
        return json.dumps({"session": handle, "tools": found}, ensure_ascii=False)

    @tool
    def explain(message: str, item: str, ctx: Context, session: str | None = None) -> str:
        """Why an item is or is not in the request context for a message (the selection's own trace).

        Args:
            message: the user's message.
            item: rule:NAME, reference:NAME or tool:SERVER:NAME; with a stash, also stash:SEGMENT_ID.
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.
        """
        msg = text(message, "message")
        key: ItemKey | str = (
            item if stash is not None and isinstance(item, str) and item.startswith("stash:") else key_of(item)
        )
        handle, s = session_of(ctx, session)
        ex = run(lambda: s.explain(msg, key))
        return json.dumps({"session": handle, **ex.__dict__, "text": str(ex)}, ensure_ascii=False)

    @tool
    def add_to_session(item: str, ctx: Context, session: str | None = None) -> str:
        """Add an item to this session as manual (it is in every request from now on).

        Args:
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.
        """
        key = key_of(item)
        handle, s = session_of(ctx, session)
        run(lambda: s.add(key))
        return json.dumps(
            {"session": handle, "items": [{"item": str(k), "includeMode": m.value} for k, m in s.items()]}
        )

    @tool
    def remove_from_session(item: str, ctx: Context, session: str | None = None) -> str:
        """Remove an item from this session (an always item stays removed for this session).

        Args:
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.
        """
        key = key_of(item)
        handle, s = session_of(ctx, session)
        run(lambda: s.remove(key))
        return json.dumps(
            {"session": handle, "items": [{"item": str(k), "includeMode": m.value} for k, m in s.items()]}
        )

    @tool
    def record_tool_calls(message: str, tools: list[str], ctx: Context, session: str | None = None) -> str:
        """Learning from use: the LLM called these tools after this message; keep the message as an example
        request of each, so later requests like it select them (examples persist beside the embedding cache).

        Args:
            message: the user's message the calls answered.
            tools: the tools called, as tool:SERVER:NAME (at most 50).
            session: the session handle of an earlier result (stateless clients); omit on a stateful connection.
        """
        msg = text(message, "message")
        if not isinstance(tools, list) or not tools or len(tools) > 50:
            raise _invalid("tools must be a list of 1 to 50 items such as tool:SERVER:NAME")
        keys = [key_of(t) for t in tools]
        if any(k.kind is not ItemKind.TOOL for k in keys):
            raise _invalid("only tools can be recorded as called")
        handle, s = session_of(ctx, session)
        run(lambda: s.record_tool_calls(msg, keys))
        return json.dumps({"session": handle, "recorded": [str(k) for k in keys]})

    if stash is not None:
        from contextsieve.mcp.stash_tools import add_stash_tools

        add_stash_tools(
            tool,
            stash,
            session_of=session_of,
            run=run,
            text=text,
            invalid=_invalid,
            fixed_session=config.stash_session,
            cross_session=config.stash_cross_session,
            max_segments=config.max_stash_segments,
        )
    for it in [*agent.rules, *agent.references]:
        _add_resource(server, it)
    return server


_STATE_KEY = "contextsieve.session"


def _connection_state(ctx: Any) -> dict[str, Any] | None:
    """The per-connection state dict of a stateful (``initialize``) connection, ``None`` for a request
    of the stateless protocol (its connection lives for one request)."""
    version = str(getattr(ctx, "protocol_version", "") or "")
    if not version or version >= "2026-07-28":
        return None
    state = getattr(getattr(ctx.session, "_connection", None), "state", None)
    return state if isinstance(state, dict) else None


class _Sessions:
    """Sessions by handle: random, bounded in number (LRU) and idle time."""

    def __init__(self, engine: Engine, config: ServeConfig, stash: StashStore | None = None) -> None:
        self._engine, self._config, self._stash = engine, config, stash
        self._by_handle: OrderedDict[str, tuple[Session, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        idle = self._config.session_idle_seconds
        while self._by_handle:
            handle, (_, used) = next(iter(self._by_handle.items()))
            if now - used <= idle and len(self._by_handle) <= self._config.max_sessions:
                break
            del self._by_handle[handle]

    def get(self, handle: str) -> Session | None:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            got = self._by_handle.get(handle)
            if got is None:
                return None
            self._by_handle[handle] = (got[0], now)
            self._by_handle.move_to_end(handle)
            return got[0]

    def new(self) -> tuple[str, Session]:
        handle = "cs-" + secrets.token_urlsafe(16)
        if self._stash is None:
            session = self._engine.session()
        else:  # select_context brings back this connection's stashed segments
            session = self._engine.session(
                stash=self._stash,
                stash_session=self._config.stash_session or handle,
                stash_settings=StashSettings(cross_session=self._config.stash_cross_session),
            )
        now = time.monotonic()
        with self._lock:
            self._by_handle[handle] = (session, now)
            self._expire(now)
        return handle, session


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
        out.append({**d, "server": tool.server, "tool": tool.name, "similarity": e.score})
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
    stash: StashStore | None = None,
) -> None:
    """Run the server until interrupted: over stdio, or streamable HTTP at ``http://host:port/mcp``."""
    server = build_server(engine, config, stash)
    if transport == "stdio":
        server.run("stdio")
        return
    if transport != "http":
        raise InputError(f"transport must be 'stdio' or 'http', got {brief(transport)}")
    import uvicorn

    app = guarded_app(server.streamable_http_app(), token=token, max_request_bytes=config.max_request_bytes)
    uvicorn.run(app, host=host, port=port, log_level="warning")
