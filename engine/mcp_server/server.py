"""contextsieve as an MCP server: per-request context selection and tool search for any MCP host.

``contextsieve serve AGENT [--transport stdio|http]`` runs :func:`build_server` over stdio (default)
or streamable HTTP. Its tools are :mod:`contextsieve.session.agent_tools`' (one definition each, shared with
the gateway and the framework integrations; JSON results), registered by
:mod:`contextsieve.mcp_server.tool_surface` with a ``session`` argument added:

- ``select_context``, ``search_tools``, ``explain``, ``add_to_session``, ``remove_from_session``,
  ``record_tool_calls`` (:data:`~contextsieve.session.agent_tools.CONTEXT_TOOLS`);
- with a stash store (``--stash PATH|URI``), ``stash_context``, ``retrieve_stashed_context``,
  ``merge_stashed_context``, ``list_stashed_context``, ``delete_stashed_context``,
  ``protect_stashed_context`` (:data:`~contextsieve.session.stash_agent_tools.STASH_TOOLS`).

Rules and references are resources (``contextsieve://rule/NAME``, ``contextsieve://reference/NAME``), and
the ``context`` prompt gives the rules and references selected for a message.

The server is the MCP SDK's low-level ``Server`` with one handler per method (:class:`ServeHandlers`),
through the SDK's public API only.

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

from contextlib import AbstractAsyncContextManager
from typing import Any

from contextsieve.agent.items import Reference, Rule
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.mcp_client.client import require_sdk
from contextsieve.mcp_server.common import (
    HISTORY_TURNS,
    STATE_KEY,
    ServeConfig,
    SessionRegistry,
    Warmup,
    handle_owner,
    invalid_params,
    log_notes,
    mcp_error,
    progress_reporter,
    set_log_level,
)
from contextsieve.mcp_server.connections import connection_scope, connection_state
from contextsieve.mcp_server.http_transport import TransportConfig, bind, serve_http
from contextsieve.mcp_server.tool_surface import SESSION_ARGUMENT, error_result, json_result, mcp_tool, unknown_tool
from contextsieve.session.agent_tools import CONTEXT_TOOLS, AgentTool, ContextScope, context_result
from contextsieve.session.session import Session
from contextsieve.session.stash_agent_tools import STASH_TOOLS, StashScope
from contextsieve.stash.store import StashStore

__all__ = ["build_server", "serve", "ServeHandlers", "HandlerContext"]

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

#: The one prompt ``serve`` declares, its one argument, and what it says of itself.
PROMPT_NAME = "context"
PROMPT_ARGUMENT = "message"
PROMPT_DESCRIPTION = (
    "The rules and references contextsieve selects for a message (a fresh session), as one user message to "
    "put before it."
)

#: The MIME type of the rule and reference resources.
RESOURCE_MIME_TYPE = "text/markdown"


def _instructions(agent_name: str) -> str:
    return (
        f"Context selection for the agent {agent_name!r}: call select_context with each user message to get "
        "the rules, references and tools to put into the prompt; search_tools finds tools by meaning. "
        "Every result carries a session handle: pass it back as the session argument to stay in one session "
        "(its items, history and own stashed segments). Without it, a connection of the handshake protocol "
        "keeps one session, and a stateless call starts a new one whose stash is the agent's shared stash."
    )


def build_server(
    engine: Engine, config: ServeConfig = ServeConfig(), stash: StashStore | None = None, warmup: Warmup | None = None
) -> Any:
    """The MCP server (the SDK's low-level ``mcp.server.lowlevel.Server``) serving ``engine``'s agent,
    and the stash tools when ``stash`` is given: run it over your own transport, with
    ``streamable_http_app()``, or connect the SDK's in-memory ``Client`` to it. ``warmup``: the
    background work (:class:`Warmup`, started by the caller) that calls and the ``context`` prompt wait
    for (``tools/list``, resources and the listings never wait): every tool waits for its listing step,
    all but :data:`WITHOUT_MODEL` for the model, with progress notifications when the request carried a
    progress token. Without one the model loads on first use, in the call that needs it."""
    require_sdk("contextsieve serve (the MCP server for hosts)")
    return ServeHandlers(engine, config, stash, warmup).server()


class HandlerContext:
    """One request as the helpers of :mod:`~contextsieve.mcp_server.connections` read it (``connection_state``,
    ``log_notes``, ``progress_reporter``): the SDK's public request context (``ServerRequestContext``:
    its protocol version, transport request and lifespan value say which connection it came on), with
    the request's progress and log notifications sent through its ``session``."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.protocol_version = ctx.protocol_version
        self.request = ctx.request
        self.lifespan_context = ctx.lifespan_context
        self.session = ctx.session

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """A progress notification for this request (none when it carried no progress token)."""
        await self.session.report_progress(progress, total, message)

    async def log(self, level: Any, data: Any, *, logger_name: str | None = None) -> None:
        """A ``notifications/message`` for this request (on the stateless protocol only at a level the
        request's ``_meta`` asked for; the SDK decides)."""
        await self.session.send_log_message(level, data, logger_name, related_request_id=self.ctx.request_id)


class ServeHandlers:
    """What ``serve`` answers, one method per MCP request, over the sessions they share
    (:class:`~contextsieve.mcp_server.common.SessionRegistry`); :meth:`server` registers them on the SDK's
    low-level ``Server``.

    Errors: an unknown tool, prompt or resource, and a bad prompt argument are JSON-RPC invalid params;
    anything a model can act on in a tool call is an ``isError`` result (see the module docstring)."""

    def __init__(
        self, engine: Engine, config: ServeConfig, stash: StashStore | None = None, warmup: Warmup | None = None
    ) -> None:
        self.engine, self.config, self.stash, self.warmup = engine, config, stash, warmup
        self.sessions = SessionRegistry(engine, config, stash)
        self.tools: dict[str, AgentTool] = {
            t.name: t for t in (*CONTEXT_TOOLS, *(STASH_TOOLS if stash is not None else ()))
        }
        self.resources: dict[str, Rule | Reference] = {
            f"contextsieve://{it.kind.value}/{it.name}": it for it in [*engine.agent.rules, *engine.agent.references]
        }

    def server(self) -> Any:
        """The SDK's low-level ``Server`` answering with these handlers. It declares tools, prompts,
        resources and logging; ``subscriptions/listen`` is served (the 2026-07-28 capabilities say so,
        nothing is ever published: the lists never change); each run over one connection (stdio, in
        memory) has its own connection state (:func:`~contextsieve.mcp_server.connections.connection_scope`)."""
        from mcp import types
        from mcp.server.lowlevel import Server
        from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        from contextsieve import __version__

        name = f"contextsieve ({self.engine.agent.name})"
        server = Server(
            name,
            version=__version__,
            instructions=_instructions(self.engine.agent.name),
            lifespan=self.lifespan,
            get_tool_input_schema=self.header_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_subscriptions_listen=ListenHandler(InMemorySubscriptionBus()),
        )
        # registered here, not as on_set_logging_level: that one warns that logging is deprecated from 2026-07-28
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self.set_level)
        # a request that carries a requestState this server never issued is invalid params
        server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=name))
        return server

    def lifespan(self, server: Any) -> AbstractAsyncContextManager[object]:
        """Entered once per run of the server (a stdio or in-memory connection, an HTTP app)."""
        return connection_scope()

    def header_schema(self, name: str) -> None:
        """No tool of ``serve`` declares an argument sent as an ``Mcp-Param-*`` HTTP header: nothing to
        check before a call (the SDK would list the tools for each call to find that out)."""
        return None

    # -- sessions ---------------------------------------------------------------------------------------

    def session_of(self, call: HandlerContext, handle: str | None) -> tuple[str, Session]:
        """The session a call works on, and its handle: the one ``handle`` names (if the caller may use
        it), else the connection's own (the stateful protocol), else a new one in the agent's shared
        stash namespace (the stateless protocol)."""
        state = connection_state(call)
        owner = handle_owner(state)
        if handle is not None:
            if not isinstance(handle, str):
                raise ToolArgumentError("session must be a string handle from an earlier result")
            found = self.sessions.get(handle, owner)
            if found is None:
                raise ToolArgumentError(
                    "unknown or expired session handle (a connection's handles work on that connection only); "
                    "call without one to start a new session"
                )
            return handle, found
        if state is None:  # stateless, no handle: the agent's shared stash namespace
            return self.sessions.new(owner, shared=True)
        handle = state.get(STATE_KEY)  # the stateful protocol: one session per connection
        found = self.sessions.get(handle, owner) if handle else None
        if found is not None:
            return str(handle), found
        if handle:  # evicted (idle, or the session limit): the same handle again, so the same stash
            handle, found = self.sessions.new(owner, handle=str(handle))
            found.add_note(
                "this connection's session was dropped (idle or over the session limit) and started again: "
                "its session items and history are gone, its stashed segments are not"
            )
            return handle, found
        handle, found = self.sessions.new(owner)
        state[STATE_KEY] = handle
        return handle, found

    def stash_namespace(self, call: HandlerContext, session: str | None) -> tuple[str | None, str]:
        """(the handle to answer with, the stash namespace): the namespace of the call's session (the
        agent's for a call without a handle on either protocol, a private handle's own; see
        :class:`~contextsieve.mcp_server.common.SessionRegistry`). A stateless call without a handle answers
        with none: no session is made for it."""
        fixed = self.config.stash_session
        if session is None and connection_state(call) is None:
            return None, fixed or self.sessions.default_namespace()
        handle, s = self.session_of(call, session)
        return handle, fixed or s.stash_session

    # -- tools ------------------------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        return types.ListToolsResult(tools=[mcp_tool(t, SESSION_ARGUMENT) for t in self.tools.values()])

    async def call_tool(self, ctx: Any, params: Any) -> Any:
        """``tools/call``: the arguments checked, the warmup awaited (with progress), the tool run in a
        worker thread; an unknown tool is invalid params, a contextsieve error an ``isError`` result."""
        import anyio

        tool = self.tools.get(params.name)
        if tool is None:
            raise unknown_tool(params.name, list(self.tools))
        call = HandlerContext(ctx)
        try:
            arguments = self.checked(tool, params.arguments)
            if self.warmup is not None:
                await self.warmup.wait(tool.name, call.report_progress, model=tool.name not in WITHOUT_MODEL)
            return json_result(await anyio.to_thread.run_sync(self.work, tool, call, arguments))
        except ContextSieveError as e:
            return error_result(str(e))

    def checked(self, tool: AgentTool, arguments: Any) -> dict[str, Any]:
        """A call's arguments checked against the tool's schema and the server's limits."""
        out = tool.check(arguments, extra=("session",))
        limit = self.config.max_message_chars
        for name in ("message", "query"):
            if isinstance(out.get(name), str) and len(out[name]) > limit:
                raise ToolArgumentError(f"{tool.name}: {name} has {len(out[name])} characters; the limit is {limit}")
        if tool.name == "search_tools" and isinstance(out.get("limit"), int) and out["limit"] > self.config.max_limit:
            raise ToolArgumentError(f"search_tools: limit must be from 1 to {self.config.max_limit}")
        return out

    def work(self, tool: AgentTool, call: HandlerContext, arguments: dict[str, Any]) -> dict[str, Any]:
        """One call in a worker thread: the scope the tool works on, the tool, the session handle added."""
        handle_arg = arguments.pop("session", None)
        if handle_arg is not None and not isinstance(handle_arg, str):
            raise ToolArgumentError(f"{tool.name}: session must be a handle from an earlier result")
        if tool in STASH_TOOLS:
            assert self.stash is not None
            handle, name = self.stash_namespace(call, handle_arg)
            c = self.config
            scope = StashScope(self.stash, name, c.stash_cross_session, c.max_stash_segments, progress_reporter(call))
            return {"session": handle, **tool.run(scope, arguments)}
        handle, s = self.session_of(call, handle_arg)
        cscope = ContextScope(s, HISTORY_TURNS, calling_tools=SERVE_CALLING_TOOLS)
        if tool.name in ("add_to_session", "remove_from_session"):  # kept in the store for stateless handles
            out: dict[str, Any] = {}
            self.sessions.change_items(handle, s, lambda: out.update(tool.run(cscope, arguments)))
            return {"session": handle, **out}
        result = {"session": handle, **tool.run(cscope, arguments)}
        if tool.name == "select_context":
            log_notes(call, result.get("notes", ()))  # also as log messages: hosts show those to the user
        return result

    # -- the context prompt -----------------------------------------------------------------------------

    async def list_prompts(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        argument = types.PromptArgument(name=PROMPT_ARGUMENT, required=True)
        prompt = types.Prompt(name=PROMPT_NAME, description=PROMPT_DESCRIPTION, arguments=[argument])
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(self, ctx: Any, params: Any) -> Any:
        """``prompts/get`` of ``context``: its message checked, the model awaited (with progress), the
        selection made in a worker thread for a fresh session. An unknown prompt, a missing or unknown
        argument and an oversize message are invalid params."""
        import anyio
        from mcp import types

        message = self.prompt_message(params.name, params.arguments)
        if self.warmup is not None:
            try:
                await self.warmup.wait(f"the {PROMPT_NAME} prompt", HandlerContext(ctx).report_progress)
            except ContextSieveError as e:
                raise mcp_error(e) from e
        text = await anyio.to_thread.run_sync(self.prompt_text, message)
        content = types.TextContent(type="text", text=text)
        return types.GetPromptResult(
            description=PROMPT_DESCRIPTION, messages=[types.PromptMessage(role="user", content=content)]
        )

    def prompt_message(self, name: str, arguments: Any) -> str:
        """The ``message`` of a ``prompts/get`` request, checked (an MCP invalid-params error says what is wrong)."""
        if name != PROMPT_NAME:
            raise invalid_params(f"unknown prompt {brief(name)}; this server's prompts: {PROMPT_NAME}")
        args = dict(arguments or {})
        unknown = sorted(k for k in args if k != PROMPT_ARGUMENT)
        if unknown:
            raise invalid_params(f"unknown argument {brief(unknown[0])}; the {PROMPT_NAME} prompt takes message")
        message = args.get(PROMPT_ARGUMENT)
        if not isinstance(message, str):
            raise invalid_params(f"the {PROMPT_NAME} prompt needs the argument message (a string)")
        if len(message) > self.config.max_message_chars:
            limit = self.config.max_message_chars
            raise invalid_params(f"message has {len(message)} characters; the limit is {limit}")
        return message

    def prompt_text(self, message: str) -> str:
        """The ``context`` prompt's text for ``message``: the rules and references selected for it in a
        fresh session (whose handle is never handed out)."""
        try:
            _, s = self.sessions.new("prompt")
            texts = context_result(s.build_request(message), self.engine.agent)["texts"]
        except ContextSieveError as e:
            raise mcp_error(e) from e
        parts = [f"{t['type'].capitalize()} {t['name']}:\n{t['text']}" for t in texts]
        return "\n\n".join(parts) or "(no rules or references selected for this message)"

    # -- rules and references as resources --------------------------------------------------------------

    async def list_resources(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        listed = [
            types.Resource(
                uri=uri,
                name=f"{it.kind.value}:{it.name}",
                description=it.description or f"the {it.kind.value} {it.name}",
                mime_type=RESOURCE_MIME_TYPE,
            )
            for uri, it in self.resources.items()
        ]
        return types.ListResourcesResult(resources=listed)

    async def list_resource_templates(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(self, ctx: Any, params: Any) -> Any:
        """``resources/read``: a rule's or reference's text; an unknown URI is invalid params."""
        from mcp import MCPError, types

        uri = str(params.uri)
        item = self.resources.get(uri)
        if item is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}", data={"uri": uri})
        contents = types.TextResourceContents(uri=params.uri, text=item.text, mime_type=RESOURCE_MIME_TYPE)
        return types.ReadResourceResult(contents=[contents])

    # -- logging ----------------------------------------------------------------------------------------

    async def set_level(self, ctx: Any, params: Any) -> Any:
        """``logging/setLevel`` keeps a stateful connection's level (see
        :func:`~contextsieve.mcp_server.common.log_notes`; an unknown level is invalid params)."""
        from mcp import types

        try:
            set_log_level(connection_state(HandlerContext(ctx)), params.level)
        except ValueError as e:
            raise invalid_params(str(e)) from None
        return types.EmptyResult()


def serve(
    engine: Engine,
    *,
    transport: TransportConfig = TransportConfig(),
    config: ServeConfig = ServeConfig(),
    stash: StashStore | None = None,
    warmup: Warmup | None = None,
) -> None:
    """Run the server until interrupted: over stdio (the default :class:`TransportConfig`), or streamable HTTP
    at ``http://host:port/mcp`` (``TransportConfig(kind="http", ...)``).

    The transport starts at once: right before it, ``warmup`` (default: a :class:`Warmup` of
    ``engine`` that loads the model) starts in a background thread, and the calls that need it wait
    for it (see :func:`build_server`), so a host's ``initialize`` and ``tools/list`` never wait for
    the model. Its notes (started; ready, with the seconds) go to :mod:`contextsieve.progress`.

    HTTP (:mod:`~contextsieve.mcp_server.http_transport`): the address is bound first (``bind``;
    ``port=0``: a free port), then the server starts, and only once it serves is one line written to
    stderr: ``contextsieve: serving MCP (streamable HTTP) at http://HOST:PORT/mcp`` (the port bound). A
    ``host`` that is not loopback needs a ``token`` (or ``allow_unauthenticated=True``: checked when the
    :class:`TransportConfig` is made). Logging is left as the process configured it (the CLI logs warnings
    and above to stderr; ``--log-level``).

    Raises:
        ContextSieveError: the address cannot be listened on (``bind``), or the HTTP server did not
            start.
    """
    warmup = warmup or Warmup(engine)
    if transport.kind == "stdio":
        server = build_server(engine, config, stash, warmup)
        import anyio

        from contextsieve.mcp_server.stdio import run_stdio

        warmup.start()
        anyio.run(run_stdio, server, server.create_initialization_options(), warmup.host_answered)
        return
    sockets = bind(transport.host, transport.port)
    try:
        server = build_server(engine, config, stash, warmup)
        warmup.start(after_answers=False)  # HTTP: many clients, no one host's first answers to wait for
        serve_http(server, sockets, transport.host, transport.token, config)
    finally:
        for sock in sockets:
            sock.close()
