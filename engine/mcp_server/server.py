"""contextsieve as an MCP server: per-request context selection and tool search for any MCP host.

``contextsieve serve AGENT [--transport stdio|http]`` runs :func:`build_server` over stdio (default)
or streamable HTTP. Its tools are :mod:`contextsieve.session.agent_tools`' (one definition each, shared with
the gateway and the framework integrations; JSON results), registered by
:mod:`contextsieve.mcp_server.tool_surface` with a ``session`` argument added:

- ``select_context``, ``search_tools``, ``explain``, ``add_to_session``, ``remove_from_session``,
  ``record_tool_calls`` (:data:`~contextsieve.session.agent_tools.CONTEXT_TOOLS`);
- with a stash store (``--stash PATH|URI``), ``stash_context``, ``retrieve_stashed_context``,
  ``merge_stashed_context``, ``list_stashed_context``, ``delete_stashed_context``,
  ``protect_stashed_context`` (:data:`~contextsieve.session.agent_tools.STASH_TOOLS`).

Rules and references are resources (``contextsieve://rule/NAME``, ``contextsieve://reference/NAME``).

Sessions: every result carries ``session``, a random 128-bit handle of a contextsieve
:class:`~contextsieve.session.session.Session` (session items, settings, history of request contexts). A
client of the stateful protocol (``initialize`` handshake, protocol 2025-11-25 and older: Claude
Desktop, Cursor, stdio hosts) gets one session per connection without doing anything. The stateless
protocol (2026-07-28) has no connections, so, as that revision prescribes, the client passes the
handle back in the ``session`` argument; without one, a call starts a new session. Handles are
unguessable and never listed. A stateful connection's handles work on that connection only (not on
another connection, not after it ended); a handle made over the stateless protocol is a capability
any stateless request may present (over HTTP: whoever holds the token). Sessions idle for
:attr:`ServeConfig.session_idle_seconds` are dropped, and at most :attr:`ServeConfig.max_sessions`
are kept (the least recently used goes first). Anything a model can act on (a bad argument, an unknown
item or segment or handle, an oversize message, a store that cannot be read) is a tool result with
``isError`` and a message saying what to do; only an unknown tool is a JSON-RPC ``invalid params``
error; the server keeps running.

Where stashed segments go: a call that passes a ``session`` handle uses that session's own namespace
(its random handle; a client cannot name another session's segments), and so does a stateful connection
without one; a call of the stateless protocol without a handle uses the agent's shared namespace
``agent:<name>``, kept in the store. ``ServeConfig.stash_session`` puts every call into one named
namespace instead, and ``ServeConfig.stash_cross_session`` lets retrieval search every namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from contextsieve.agent.items import Reference, Rule
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, ToolArgumentError, brief
from contextsieve.mcp_client.client import require_sdk
from contextsieve.mcp_server.common import (
    HISTORY_TURNS,
    STATE_KEY,
    ServeConfig,
    SessionRegistry,
    Warmup,
    connection_state,
    handle_owner,
    invalid_params,
    log_notes,
    mcp_error,
    progress_reporter,
    set_log_level,
)
from contextsieve.mcp_server.http_transport import bind, check_exposure, serve_http
from contextsieve.mcp_server.tool_surface import SESSION_ARGUMENT, error_result, json_result, mcp_tool, unknown_tool
from contextsieve.session.agent_tools import (
    CONTEXT_TOOLS,
    STASH_TOOLS,
    AgentTool,
    ContextScope,
    StashScope,
    context_result,
)
from contextsieve.session.session import Session
from contextsieve.stash.store import StashStore

try:  # the tools' annotations are evaluated by the SDK, so Context must be a module global
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # build_server raises MissingExtraError naming the extra
    Context = MCPServer = None  # type: ignore[assignment,misc]

__all__ = ["build_server", "serve"]

_T = TypeVar("_T")

#: Tools that never need the model (they only read or change stored segments' records): they do not wait
#: for the background model load, and work when it failed.
WITHOUT_MODEL = frozenset({"list_stashed_context", "delete_stashed_context", "protect_stashed_context"})

#: What ``select_context``'s result says of its tools on ``serve`` (see :class:`ContextScope`).
SERVE_CALLING_TOOLS = (
    "This server does not call these tools. Offer them to the model, and send each call to its server over "
    "your own connection to that server (routes: each name's server and MCP tool name). To have the tools "
    "offered and their calls forwarded for you, configure contextsieve gateway with the same agent file "
    "instead of serve."
)


def build_server(
    engine: Engine, config: ServeConfig = ServeConfig(), stash: StashStore | None = None, warmup: Warmup | None = None
) -> Any:
    """The MCP server object (``mcp.server.mcpserver.MCPServer``) serving ``engine``'s agent, and
    the stash tools when ``stash`` is given. ``warmup``: the background work (:class:`Warmup`, started
    by the caller) that calls and the ``context`` prompt wait for (``tools/list``, resources and the
    listings never wait): every tool waits for its listing step, all but :data:`WITHOUT_MODEL` for the
    model, with progress notifications when the request carried a progress token. Without one the
    model loads on first use, in the call that needs it."""
    require_sdk("contextsieve serve (the MCP server for hosts)")
    from mcp import types

    agent = engine.agent
    from contextsieve import __version__

    server = MCPServer(
        name=f"contextsieve ({agent.name})",
        version=__version__,
        instructions=(
            f"Context selection for the agent {agent.name!r}: call select_context with each user message to get "
            "the rules, references and tools to put into the prompt; search_tools finds tools by meaning. "
            "Every result carries a session handle: pass it back as the session argument to stay in one session "
            "(its items, history and own stashed segments). Without it, a connection of the handshake protocol "
            "keeps one session, and a stateless call starts a new one whose stash is the agent's shared stash."
        ),
    )
    sessions = SessionRegistry(engine, config, stash)

    def session_of(ctx: Context, handle: str | None) -> tuple[str, Session]:
        state = connection_state(ctx)
        owner = handle_owner(state)
        if handle is not None:
            if not isinstance(handle, str):
                raise ToolArgumentError("session must be a string handle from an earlier result")
            found = sessions.get(handle, owner)
            if found is None:
                raise ToolArgumentError(
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

    def stash_namespace(ctx: Any, session: str | None) -> tuple[str | None, str]:
        """(the handle to answer with, the stash namespace): the namespace of the call's session (the
        agent's for a call without a handle on either protocol, a private handle's own; see
        :class:`~contextsieve.mcp_server.common.SessionRegistry`). A stateless call without a handle answers
        with none: no session is made for it."""
        fixed = config.stash_session
        if session is None and connection_state(ctx) is None:
            return None, fixed or sessions.default_namespace()
        handle, s = session_of(ctx, session)
        return handle, fixed or s.stash_session

    tools: dict[str, AgentTool] = {t.name: t for t in (*CONTEXT_TOOLS, *(STASH_TOOLS if stash is not None else ()))}
    listed = [mcp_tool(t, SESSION_ARGUMENT) for t in tools.values()]

    def work(tool: AgentTool, ctx: Any, arguments: dict[str, Any]) -> dict[str, Any]:
        """One call in a worker thread: the scope the tool works on, the tool, the session handle added."""
        handle_arg = arguments.pop("session", None)
        if handle_arg is not None and not isinstance(handle_arg, str):
            raise ToolArgumentError(f"{tool.name}: session must be a handle from an earlier result")
        if tool in STASH_TOOLS:
            assert stash is not None
            handle, name = stash_namespace(ctx, handle_arg)
            scope = StashScope(
                stash, name, config.stash_cross_session, config.max_stash_segments, progress_reporter(ctx)
            )
            return {"session": handle, **tool.run(scope, arguments)}
        handle, s = session_of(ctx, handle_arg)
        cscope = ContextScope(s, HISTORY_TURNS, calling_tools=SERVE_CALLING_TOOLS)
        if tool.name in ("add_to_session", "remove_from_session"):  # kept in the store for stateless handles
            out: dict[str, Any] = {}
            sessions.change_items(handle, s, lambda: out.update(tool.run(cscope, arguments)))
            return {"session": handle, **out}
        result = {"session": handle, **tool.run(cscope, arguments)}
        if tool.name == "select_context":
            log_notes(ctx, result.get("notes", ()))  # also as log messages: hosts show those to the user
        return result

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        import anyio

        tool = tools.get(params.name)
        if tool is None:
            raise unknown_tool(params.name, list(tools))
        context = Context(
            request_context=ctx,
            mcp_server=server,
            input_params=params,
            subscriptions=getattr(server, "_subscriptions", None),
        )
        try:
            arguments = tool.check(params.arguments, extra=("session",))
            for name in ("message", "query"):
                if isinstance(arguments.get(name), str) and len(arguments[name]) > config.max_message_chars:
                    raise ToolArgumentError(
                        f"{tool.name}: {name} has {len(arguments[name])} characters; "
                        f"the limit is {config.max_message_chars}"
                    )
            limit = arguments.get("limit")
            if tool.name == "search_tools" and isinstance(limit, int) and limit > config.max_limit:
                raise ToolArgumentError(f"search_tools: limit must be from 1 to {config.max_limit}")
            if warmup is not None:
                await warmup.wait(tool.name, context.report_progress, model=tool.name not in WITHOUT_MODEL)
            return json_result(await anyio.to_thread.run_sync(work, tool, context, arguments))
        except ContextSieveError as e:
            return error_result(str(e))

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)
    server._lowlevel_server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)

    for it in [*agent.rules, *agent.references]:
        _add_resource(server, it)
    _add_prompts(server, engine, sessions, run, text, warmup)
    _add_logging(server)
    return server


def _add_logging(server: Any) -> None:
    """The ``logging`` capability: ``logging/setLevel`` keeps a stateful connection's level (see
    :func:`~contextsieve.mcp_server.common.log_notes`; an unknown level is invalid params)."""
    from mcp import types

    async def on_set_level(ctx: Any, params: Any) -> Any:
        try:
            set_log_level(connection_state(ctx), params.level)
        except ValueError as e:
            raise invalid_params(str(e)) from None
        return types.EmptyResult()

    server._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)


def _add_prompts(
    server: Any,
    engine: Engine,
    sessions: SessionRegistry,
    run: Callable[[Callable[[], Any]], Any],
    text: Callable[[Any, str], str],
    warmup: Warmup | None = None,
) -> None:
    """The ``context`` prompt (the server declares prompts, so it serves one; it waits for ``warmup``'s
    model load), and MCP's invalid-params error for an unknown prompt name (the SDK answers an internal
    error and logs a traceback)."""

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
            texts = context_result(s.build_request(msg), engine.agent)["texts"]
            parts = [f"{t['type'].capitalize()} {t['name']}:\n{t['text']}" for t in texts]
            return "\n\n".join(parts) or "(no rules or references selected for this message)"

        return str(run(build))

    original = server.get_prompt

    async def get_prompt(name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        known = sorted(p.name for p in await server.list_prompts())
        if name not in known:
            raise invalid_params(f"unknown prompt {brief(name)}; this server's prompts: {', '.join(known)}")
        if warmup is not None:
            try:
                await warmup.wait(f"the {name} prompt", context.report_progress if context is not None else None)
            except ContextSieveError as e:
                raise mcp_error(e) from e
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


def serve(
    engine: Engine,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    config: ServeConfig = ServeConfig(),
    stash: StashStore | None = None,
    allow_unauthenticated: bool = False,
    warmup: Warmup | None = None,
) -> None:
    """Run the server until interrupted: over stdio, or streamable HTTP at ``http://host:port/mcp``.

    The transport starts at once: right before it, ``warmup`` (default: a :class:`Warmup` of
    ``engine`` that loads the model) starts in a background thread, and the calls that need it wait
    for it (see :func:`build_server`), so a host's ``initialize`` and ``tools/list`` never wait for
    the model. Its notes (started; ready, with the seconds) go to :mod:`contextsieve.progress`.

    HTTP (:mod:`~contextsieve.mcp_server.http_transport`): the address is bound first (``bind``;
    ``port=0``: a free port), then the server starts, and only once it serves is one line written to
    stderr: ``contextsieve: serving MCP (streamable HTTP) at http://HOST:PORT/mcp`` (the port bound). A
    ``host`` that is not loopback needs a ``token`` (or ``allow_unauthenticated=True``:
    ``check_exposure``). Logging is left as the process configured it (the CLI logs warnings and above
    to stderr; ``--log-level``).

    Raises:
        InputError: ``transport`` is neither ``stdio`` nor ``http``; a ``host`` that is not loopback
            without a ``token`` or ``allow_unauthenticated``.
        ContextSieveError: the address cannot be listened on (``bind``), or the HTTP server did not
            start.
    """
    if transport not in ("stdio", "http"):
        raise InputError(f"transport must be 'stdio' or 'http', got {brief(transport)}")
    warmup = warmup or Warmup(engine)
    if transport == "stdio":
        server = build_server(engine, config, stash, warmup)
        import anyio

        from contextsieve.mcp_server.stdio import run_stdio

        low = server._lowlevel_server  # what the SDK's own run("stdio") serves
        warmup.start()
        anyio.run(run_stdio, low, low.create_initialization_options(), warmup.host_answered)
        return
    check_exposure(host, token, allow_unauthenticated)
    sockets = bind(host, port)
    try:
        server = build_server(engine, config, stash, warmup)
        warmup.start(after_answers=False)  # HTTP: many clients, no one host's first answers to wait for
        serve_http(server, sockets, host, token, config)
    finally:
        for sock in sockets:
            sock.close()
