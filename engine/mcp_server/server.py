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

import sys
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
    connection_state,
    handle_owner,
    invalid_params,
    log_notes,
    mcp_error,
    progress_reporter,
    reference_item,
    set_log_level,
)
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

# ServeConfig and reference_item live in mcp.common, context_result in agent_tools (the gateway and the
# frameworks share them); they stay importable from here.
__all__ = ["ServeConfig", "build_server", "reference_item", "context_result"]

_T = TypeVar("_T")

#: What ``select_context``'s result says of its tools on ``serve`` (see :class:`ContextScope`).
SERVE_CALLING_TOOLS = (
    "This server does not call these tools. Offer them to the model, and send each call to its server over "
    "your own connection to that server (routes: each name's server and MCP tool name). To have the tools "
    "offered and their calls forwarded for you, configure contextsieve gateway with the same agent file "
    "instead of serve."
)


def build_server(engine: Engine, config: ServeConfig = ServeConfig(), stash: StashStore | None = None) -> Any:
    """The MCP server object (``mcp.server.mcpserver.MCPServer``) serving ``engine``'s agent, and
    the stash tools when ``stash`` is given."""
    require_sdk()
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
            return json_result(await anyio.to_thread.run_sync(work, tool, context, arguments))
        except ContextSieveError as e:
            return error_result(str(e))

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)
    server._lowlevel_server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)

    for it in [*agent.rules, *agent.references]:
        _add_resource(server, it)
    _add_prompts(server, engine, sessions, run, text)
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
            texts = context_result(s.build_request(msg), engine.agent)["texts"]
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


def guarded_app(
    app: Any,
    *,
    token: str | None,
    max_request_bytes: int,
    body_seconds: float = 30.0,
    jsonrpc_path: str | None = "/mcp",
) -> Any:
    """An ASGI wrapper: ``401`` without ``Authorization: Bearer <token>`` (when a token is set, compared
    in constant time), ``413`` for bodies over ``max_request_bytes`` (by header, and as read: a chunked
    body is read here, up to the limit, before the app sees it) and ``408`` for a body that has not
    arrived within ``body_seconds`` (default 30 s: a client that trickles its body holds no worker).

    A JSON POST to ``jsonrpc_path`` (default ``/mcp``; ``None``: none) whose body is not one MCP message
    gets ``400`` with the JSON-RPC error stdio answers for the same line
    (:func:`contextsieve.mcp_server.stdio.refusal`: ``-32600`` for a batch and for a request whose ``id`` is
    not a string or an integer). The SDK answered a batch with ``-32602`` and pydantic's text on the
    handshake protocol, and a request with an object ``id`` as a notification (``202``, no answer)."""
    import hmac

    import anyio

    async def reply(send: Any, status: int, body: bytes, kind: bytes = b"text/plain") -> None:
        head = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": head})
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
        path = str(scope.get("path") or "")
        json_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower() == b"application/json"
        if (
            jsonrpc_path is not None
            and scope.get("method") == "POST"
            and path.rstrip("/") == jsonrpc_path
            and json_type
        ):
            refused = _refusal(body)
            if refused is not None:
                await reply(send, 400, refused, b"application/json")
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect a streaming response waits for

        await app(scope, replay, send)

    return guarded


def _refusal(body: bytes) -> bytes | None:
    """The JSON-RPC error (as JSON) owed to an HTTP POST body that is JSON but not one MCP message, the
    same as stdio answers (:func:`contextsieve.mcp_server.stdio.refusal`); ``None`` for a message, and for a
    body that is not JSON (the SDK answers ``-32700`` for that itself)."""
    import json

    import pydantic_core

    from contextsieve.mcp_server.stdio import refusal

    try:
        decoded = pydantic_core.from_json(body)
    except ValueError:
        return None
    error = refusal(decoded)
    if error is None:
        return None
    # id null when there is no id to answer: JSON-RPC requires it on the wire
    out = {"jsonrpc": "2.0", "id": error.id, "error": error.error.model_dump(mode="json", exclude_none=True)}
    return json.dumps(out, separators=(",", ":")).encode()


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


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (``127.0.0.0/8``, ``::1``): a server
    bound there is reachable from this machine only. ``""``, ``0.0.0.0``, ``::``, a name that does
    not resolve and a name with any other address are not."""
    import ipaddress
    import socket

    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]).split("%")[0] for info in found}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_exposure(host: str, token: str | None, allow_unauthenticated: bool = False) -> None:
    """Refuse to serve HTTP on ``host`` without a bearer token when ``host`` is not loopback (anyone who
    can reach the address could call the tools and read and delete the stash) unless
    ``allow_unauthenticated`` says so on purpose (e.g. behind a proxy that authenticates).

    Raises:
        InputError: ``host`` is not loopback, no ``token``, and not ``allow_unauthenticated``.
    """
    if token is None and not allow_unauthenticated and not is_loopback(host):
        raise InputError(
            f"--host {brief(host)} is reachable from other machines and no token is set: pass --token-env VAR "
            "(clients then send 'Authorization: Bearer <token>'), bind 127.0.0.1, or pass --allow-unauthenticated "
            "if something in front of the server authenticates"
        )


def bind(host: str, port: int, *, listen: bool = True) -> list[Any]:
    """Listening TCP sockets on every address of ``host`` at ``port`` (``0``: a free port, the same on
    every address), before anything is announced, so that a taken port is an error of this call.
    ``listen=False``: bound only (a check that accepts no connection; the CLI makes it before loading
    the agent).

    Raises:
        ContextSieveError: the address cannot be listened on (the port is taken, a privileged port, a
            host name that does not resolve); the message says which and what to do.
    """
    import errno
    import socket

    where = f"[{host}]" if ":" in host else host
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as e:
        raise ContextSieveError(f"cannot listen on {where}:{port}: cannot resolve {brief(host)} ({e})") from e
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys((f, k, p, "", a) for f, k, p, _, a in found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if sys.platform != "win32":  # POSIX: a port whose old connections linger in TIME_WAIT can be reused
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # the port the first address got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            if listen:
                sock.listen(2048)
    except OSError as e:
        for sock in sockets:
            sock.close()
        if e.errno == errno.EADDRINUSE:
            why = (
                "the port is in use (another process listens there): stop it, or pick another --port (0: any free one)"
            )
        elif e.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges): pick another --port"
        elif e.errno == errno.EADDRNOTAVAIL:
            why = "no network interface of this machine has that address: pick another --host"
        else:
            why = e.strerror or str(e)
        raise ContextSieveError(f"cannot listen on {where}:{port}: {why}") from e
    return sockets


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
) -> None:
    """Run the server until interrupted: over stdio, or streamable HTTP at ``http://host:port/mcp``.

    HTTP: the address is bound first (:func:`bind`; ``port=0``: a free port), then the server starts,
    and only once it serves is one line written to stderr: ``contextsieve: serving MCP (streamable HTTP)
    at http://HOST:PORT/mcp`` (the port bound). A ``host`` that is not loopback needs a ``token`` (or
    ``allow_unauthenticated=True``: :func:`check_exposure`). Logging is left as the process configured
    it (the CLI logs warnings and above to stderr; ``--log-level``).

    Raises:
        InputError: ``transport`` is neither ``stdio`` nor ``http``; a ``host`` that is not loopback
            without a ``token`` or ``allow_unauthenticated``.
        ContextSieveError: the address cannot be listened on (:func:`bind`), or the HTTP server did not
            start.
    """
    if transport not in ("stdio", "http"):
        raise InputError(f"transport must be 'stdio' or 'http', got {brief(transport)}")
    if transport == "stdio":
        server = build_server(engine, config, stash)
        import anyio

        from contextsieve.mcp_server.stdio import run_stdio

        low = server._lowlevel_server  # what the SDK's own run("stdio") serves
        anyio.run(run_stdio, low, low.create_initialization_options())
        return
    check_exposure(host, token, allow_unauthenticated)
    sockets = bind(host, port)
    try:
        _serve_http(build_server(engine, config, stash), sockets, host, token, config)
    finally:
        for sock in sockets:
            sock.close()


def _serve_http(server: Any, sockets: list[Any], host: str, token: str | None, config: ServeConfig) -> None:
    """Serve ``server`` over streamable HTTP on the bound ``sockets`` until interrupted, announcing the
    address on stderr once it serves."""
    import uvicorn

    app = guarded_app(
        server.streamable_http_app(),
        token=token,
        max_request_bytes=config.max_request_bytes,
        body_seconds=config.body_seconds,
    )
    where = f"[{host}]" if ":" in host else host
    url = f"http://{where}:{sockets[0].getsockname()[1]}/mcp"

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)  # a startup that fails exits (SystemExit) instead
            print(f"contextsieve: serving MCP (streamable HTTP) at {url}", file=sys.stderr, flush=True)

    # log_config=None, log_level=None: uvicorn's loggers go through the process's logging like the SDK's
    http = uvicorn.Config(app, log_config=None, log_level=None, http=header_deadline_protocol(config.header_seconds))
    try:
        Announcing(http).run(sockets=sockets)
    except SystemExit as e:  # uvicorn exits with 3 when its startup fails
        raise ContextSieveError(f"the HTTP server did not start (uvicorn exit code {e.code}); see the log above") from e
