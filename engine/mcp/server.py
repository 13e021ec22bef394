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
unguessable and never listed. A stateful connection's handles work on that connection only (not on
another connection, not after it ended); a handle made over the stateless protocol is a capability
any stateless request may present (over HTTP: whoever holds the token). Sessions idle for
:attr:`ServeConfig.session_idle_seconds` are dropped, and at most :attr:`ServeConfig.max_sessions`
are kept (the least recently used goes first). Bad input (unknown item, bad setting, oversize message) is a JSON-RPC
``invalid params`` error naming the problem; other contextsieve errors are ``internal error`` with
their message; the server keeps running.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, brief
from contextsieve.items import ItemKey, ItemKind, Reference, Rule
from contextsieve.mcp.client import require_sdk
from contextsieve.mcp.common import (
    HISTORY_TURNS,
    STATE_KEY,
    ServeConfig,
    SessionRegistry,
    connection_state,
    context_result,
    handle_owner,
    invalid_params,
    log_notes,
    mcp_error,
    reference_item,
    set_log_level,
    tool_match_result,
)
from contextsieve.session import Session
from contextsieve.stash.store import StashStore

try:  # the tools' annotations are evaluated by the SDK, so Context must be a module global
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # build_server raises MissingExtraError naming the extra
    Context = MCPServer = None  # type: ignore[assignment,misc]

# ServeConfig, reference_item and context_result live in mcp.common (the gateway shares them); they
# stay importable from here.
__all__ = ["ServeConfig", "build_server", "reference_item", "context_result"]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


def build_server(engine: Engine, config: ServeConfig = ServeConfig(), stash: StashStore | None = None) -> Any:
    """The MCP server object (``mcp.server.mcpserver.MCPServer``) serving ``engine``'s agent, and
    the stash tools when ``stash`` is given."""
    require_sdk()
    agent = engine.agent
    from contextsieve import __version__

    server = MCPServer(
        name=f"contextsieve ({agent.name})",
        version=__version__,
        instructions=(
            f"Context selection for the agent {agent.name!r}: call select_context with each user message to get "
            "the rules, references and tools to put into the prompt; search_tools finds tools by meaning."
        ),
    )
    sessions = SessionRegistry(engine, config, stash)

    def tool(fn: _F) -> _F:
        """Register ``fn`` with its docstring, dedented, as the tool's description, and each argument's
        line of the docstring's ``Args:`` as that argument's description in the input schema (what an
        LLM reads when it fills the call in)."""
        described(fn)
        server.tool(description=inspect.cleandoc(fn.__doc__ or ""), structured_output=False)(fn)
        return fn

    def session_of(ctx: Context, handle: str | None) -> tuple[str, Session]:
        state = connection_state(ctx)
        owner = handle_owner(state)
        if handle is not None:
            if not isinstance(handle, str):
                raise invalid_params("session must be a string handle from an earlier result")
            found = sessions.get(handle, owner)
            if found is None:
                raise invalid_params(
                    "unknown or expired session handle (a connection's handles work on that connection only); "
                    "call without one to start a new session"
                )
            return handle, found
        if state is not None:  # the stateful protocol: one session per connection
            handle = state.get(STATE_KEY)
            found = sessions.get(handle, owner) if handle else None
            if found is not None:
                return str(handle), found
            if handle:  # evicted (idle, or the session limit): the same handle again, so the same stash
                handle, found = sessions.new(owner, handle=str(handle))
                found.add_note(
                    "this connection's session was dropped (idle or over the session limit) and started again: "
                    "its session items and history are gone, its stashed segments are not"
                )
                return handle, found
            handle, found = sessions.new(owner)
            state[STATE_KEY] = handle
            return handle, found
        return sessions.new(owner, shared=True)  # stateless, no handle: the agent's shared stash namespace

    def run(fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except ContextSieveError as e:
            raise mcp_error(e) from e

    def text(value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise invalid_params(f"{what} must be a string")
        if len(value) > config.max_message_chars:
            raise invalid_params(f"{what} has {len(value)} characters; the limit is {config.max_message_chars}")
        return value

    def key_of(item: Any) -> ItemKey:
        if not isinstance(item, str):
            raise invalid_params("item must be a string such as rule:NAME, reference:NAME or tool:SERVER:NAME")
        key = run(lambda: ItemKey.parse(item))
        if not agent.has(key):
            raise invalid_params(f"the agent has no {brief(item)}")
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
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).

        Returns JSON: session (the handle), items (type, name, serverName, includeMode, similarityScore,
        contextsieve extras), texts of the selected rules and references, tools (name, description,
        input_schema), dropped, notes.
        """
        msg = text(message, "message")
        if settings is not None and not isinstance(settings, dict):
            raise invalid_params("settings must be an object")
        handle, s = session_of(ctx, session)

        def build() -> dict[str, Any]:
            req = s.build_request(msg, preset=preset, **(settings or {}))
            s.record_reply(req, "")
            del s.history[: -2 * HISTORY_TURNS]  # a bounded history of request contexts
            return {"session": handle, **context_result(engine, req)}

        result = run(build)
        log_notes(ctx, result.get("notes", ()))  # also as log messages: hosts show those to the user
        return json.dumps(result, ensure_ascii=False)

    @tool
    def search_tools(query: str, ctx: Context, limit: int = 5, session: str | None = None) -> str:
        """Find the agent's tools by meaning (every tool this session may use, whatever its include mode).

        Args:
            query: what the tool should do.
            limit: how many tools to return (1-50, default 5).
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).

        Returns JSON: tools (name as offered to the LLM, server, tool, description, input_schema, similarity),
        best first (ranked by similarity and keyword match together).
        """
        q = text(query, "query")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= config.max_limit:
            raise invalid_params(f"limit must be an int from 1 to {config.max_limit}")
        handle, s = session_of(ctx, session)
        found = run(lambda: [tool_match_result(m) for m in s.search_tools(q, limit)])
        return json.dumps({"session": handle, "tools": found}, ensure_ascii=False)

    @tool
    def explain(message: str, item: str, ctx: Context, session: str | None = None) -> str:
        """Why an item is or is not in the request context for a message (the selection's own trace).

        Args:
            message: the user's message.
            item: rule:NAME, reference:NAME or tool:SERVER:NAME; with a stash, also stash:SEGMENT_ID.
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).
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
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).
        """
        key = key_of(item)
        handle, s = session_of(ctx, session)
        run(lambda: sessions.change_items(handle, s, lambda: s.add(key)))
        return json.dumps(
            {"session": handle, "items": [{"item": str(k), "includeMode": m.value} for k, m in s.items()]}
        )

    @tool
    def remove_from_session(item: str, ctx: Context, session: str | None = None) -> str:
        """Remove an item from this session (an always item stays removed for this session).

        Args:
            item: rule:NAME, reference:NAME or tool:SERVER:NAME.
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).
        """
        key = key_of(item)
        handle, s = session_of(ctx, session)
        run(lambda: sessions.change_items(handle, s, lambda: s.remove(key)))
        return json.dumps(
            {"session": handle, "items": [{"item": str(k), "includeMode": m.value} for k, m in s.items()]}
        )

    @tool
    def record_tool_calls(message: str, tools: list[str], ctx: Context, session: str | None = None) -> str:
        """Learning from use: the LLM called these tools after this message; keep the message as an example
        request of each, so later requests like it select them (kept in the server's memory; on disk only when
        the server runs with --remember-requests).

        Args:
            message: the user's message the calls answered.
            tools: the tools called, as tool:SERVER:NAME (at most 50).
            session: the session handle of an earlier result; pass it back on every call to stay in one
                session (the default client protocol keeps no connection state: without it each call starts
                a new session).
        """
        msg = text(message, "message")
        if not isinstance(tools, list) or not tools or len(tools) > 50:
            raise invalid_params("tools must be a list of 1 to 50 items such as tool:SERVER:NAME")
        keys = [key_of(t) for t in tools]
        if any(k.kind is not ItemKind.TOOL for k in keys):
            raise invalid_params("only tools can be recorded as called")
        handle, s = session_of(ctx, session)
        run(lambda: s.record_tool_calls(msg, keys))
        return json.dumps({"session": handle, "recorded": [str(k) for k in keys]})

    if stash is not None:
        from contextsieve.mcp.stash_tools import add_stash_tools

        add_stash_tools(
            tool,
            stash,
            session_of=session_of,
            shared=sessions.default_namespace(),
            state_of=connection_state,
            run=run,
            text=text,
            invalid=invalid_params,
            fixed_session=config.stash_session,
            cross_session=config.stash_cross_session,
            max_segments=config.max_stash_segments,
        )
    for it in [*agent.rules, *agent.references]:
        _add_resource(server, it)
    _add_prompts(server, engine, sessions, run, text)
    _add_logging(server)
    return server


def _add_logging(server: Any) -> None:
    """The ``logging`` capability: ``logging/setLevel`` keeps a stateful connection's level (see
    :func:`~contextsieve.mcp.common.log_notes`; an unknown level is invalid params)."""
    from mcp import types

    async def on_set_level(ctx: Any, params: Any) -> Any:
        try:
            set_log_level(connection_state(ctx), params.level)
        except ValueError as e:
            raise invalid_params(str(e)) from None
        return types.EmptyResult()

    server._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)


def described(fn: Callable[..., Any]) -> None:
    """Give each argument of ``fn`` its ``Args:`` docstring line as a schema description
    (``Annotated[type, Field(description=...)]``), in place; arguments without a line are left as they are."""
    import typing

    from pydantic import Field

    docs = _arg_docs(inspect.cleandoc(fn.__doc__ or ""))
    hints = typing.get_type_hints(fn, globalns={**fn.__globals__, "Context": Context}, include_extras=True)
    for name, text in docs.items():
        if name in hints and name != "ctx":
            fn.__annotations__[name] = typing.Annotated[hints[name], Field(description=text)]


def _arg_docs(doc: str) -> dict[str, str]:
    """``{argument: description}`` from a Google-style ``Args:`` section (continuation lines joined)."""
    out: dict[str, str] = {}
    inside, current = False, None
    for line in doc.splitlines():
        if line.strip() == "Args:":
            inside = True
            continue
        if not inside:
            continue
        if not line.strip() or not line.startswith(" "):
            break
        head, sep, rest = line.strip().partition(": ")
        if line.startswith("    ") and not line.startswith("     ") and sep and head.isidentifier():
            current = head
            out[current] = rest.strip()
        elif current is not None:
            out[current] += " " + line.strip()
    return out


def _add_prompts(
    server: Any,
    engine: Engine,
    sessions: SessionRegistry,
    run: Callable[[Callable[[], Any]], Any],
    text: Callable[[Any, str], str],
) -> None:
    """The ``context`` prompt (the server declares prompts, so it serves one), and MCP's invalid-params
    error for an unknown prompt name (the SDK answers an internal error and logs a traceback)."""

    @server.prompt(
        name="context",
        description=(
            "The rules and references contextsieve selects for a message (a fresh session), as one user "
            "message to put before it."
        ),
    )
    def context(message: str) -> str:
        msg = text(message, "message")

        def build() -> str:
            _, s = sessions.new("prompt")  # never handed out
            texts = context_result(engine, s.build_request(msg))["texts"]
            parts = [f"{t['type'].capitalize()} {t['name']}:\n{t['text']}" for t in texts]
            return "\n\n".join(parts) or "(no rules or references selected for this message)"

        return str(run(build))

    original = server.get_prompt

    async def get_prompt(name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        known = sorted(p.name for p in await server.list_prompts())
        if name not in known:
            raise invalid_params(f"unknown prompt {brief(name)}; this server's prompts: {', '.join(known)}")
        return await original(name, arguments, context)

    server.get_prompt = get_prompt


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


def guarded_app(app: Any, *, token: str | None, max_request_bytes: int, body_seconds: float = 30.0) -> Any:
    """An ASGI wrapper: ``401`` without ``Authorization: Bearer <token>`` (when a token is set, compared
    in constant time), ``413`` for bodies over ``max_request_bytes`` (by header, and as read: a chunked
    body is read here, up to the limit, before the app sees it) and ``408`` for a body that has not
    arrived within ``body_seconds`` (default 30 s: a client that trickles its body holds no worker)."""
    import hmac

    import anyio

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
        parts: list[bytes] = []
        seen = 0
        with anyio.move_on_after(body_seconds) as waited:
            while True:
                message = await receive()
                if message.get("type") == "http.disconnect":
                    return  # the client left before its body was complete
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > max_request_bytes:
                    await reply(send, 413, f"request body over {max_request_bytes} bytes".encode())
                    return
                parts.append(chunk)
                if not message.get("more_body", False):
                    break
        if waited.cancelled_caught:
            await reply(send, 408, f"request body not received within {body_seconds:g} s".encode())
            return
        body = b"".join(parts)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect a streaming response waits for

        await app(scope, replay, send)

    return guarded


def header_deadline_protocol(seconds: float) -> type:
    """uvicorn's h11 protocol with a deadline on request headers: a connection whose request line and
    headers are not complete ``seconds`` after it opened, or after its previous response was sent, is
    closed. uvicorn itself times out only an idle keep-alive connection, and any byte received cancels
    that timer, so a client trickling a header a byte at a time (or opening connections and sending
    nothing) held each connection forever."""
    import asyncio

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # still waiting for a request's headers

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the headers are in: the body has its own limit (guarded_app)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline


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
        import anyio

        from contextsieve.mcp.stdio import run_stdio

        low = server._lowlevel_server  # what the SDK's own run("stdio") serves
        anyio.run(run_stdio, low, low.create_initialization_options())
        return
    if transport != "http":
        raise InputError(f"transport must be 'stdio' or 'http', got {brief(transport)}")
    import uvicorn

    app = guarded_app(
        server.streamable_http_app(),
        token=token,
        max_request_bytes=config.max_request_bytes,
        body_seconds=config.body_seconds,
    )
    where = f"[{host}]" if ":" in host else host
    print(f"contextsieve: serving MCP (streamable HTTP) at http://{where}:{port}/mcp", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", http=header_deadline_protocol(config.header_seconds))
