"""One MCP server in front of an agent's MCP servers that offers the host only the tools each request needs.

``contextsieve gateway AGENT`` (stdio) serves:

- the gateway's own tools: ``set_task(message)`` (select the tools for the host's current task),
  ``select_context(message)`` (the same, with the full request context as ``serve`` gives it) and
  ``search_tools(query, limit=5)`` (find tools by meaning; the ones found are offered from then on);
- the agent's ``always`` and session (manual) tools, and the tools selected for the latest task,
  under the prompt names ``server_tool`` (unique across servers).

Both protocol eras, both ways. Toward the host: the ``initialize`` handshake (``listChanged: true``;
a change of the offer is sent as ``notifications/tools/list_changed``) or the 2026-07-28 protocol
(``tools/list`` carries ``ttlMs: 0`` and ``cacheScope: "private"``, ``subscriptions/listen`` is
served and every change of the offer is announced on it). Toward each server: the 2026-07-28 protocol
where the server speaks it, the handshake otherwise (the SDK's ``mode="auto"``; a server whose start
runs out of its limit without an answer to ``server/discover`` gets the handshake at once on its
restart); a server's own ``tools/list_changed`` (a notification, or an event on a
``subscriptions/listen`` stream the gateway opens) makes the gateway list it again.

Every server is started when the gateway starts (each under :attr:`ListConfig.timeout`) and listed
then, so a tool it added since the cached listing is offered. The host is answered from the start:
``contextsieve gateway`` starts no server before its transport (the agent has the cached listings
then), the model loads in the background (:class:`~contextsieve.mcp_server.common.Warmup`), and a
call waits only for what it needs: the gateway's own tools for the model and the servers' first
start, a call of a tool the offer does not have yet for the servers' first start, a forwarded call
never for the model. ``tools/call`` of an offered tool is
forwarded over that connection, sent at most once and never preceded by a probe (no ``ping``: a
server busy with a slow call is not taken for dead), and its result is returned unchanged (content,
structured content, ``isError``, the server's own JSON-RPC errors); a call has no time limit unless
:attr:`ListConfig.call_timeout` sets one, and its progress passes through. A dead connection is found
by its transport (the read stream ends: the server process exited or closed stdout). A server whose
start fails or whose connection is lost is started again at once, once; when that fails too it is
down: its tools leave the offer (announced), a call of one names the reason, and it is tried again
when a host begins a new task :data:`~contextsieve.mcp_server.downstream.RETRY_SECONDS` later or more
(its tools return, announced). Stdio servers run in process groups of their own that end with the
gateway (:func:`run_gateway`).

The parts: :mod:`~contextsieve.mcp_server.downstream` (one connection per downstream server),
:mod:`~contextsieve.mcp_server.gateway_state` (what each host is offered) and this module (the MCP
server the host talks to, the forwarding of calls and :func:`run_gateway`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.mcp_client.client import ListConfig, describe_error, require_sdk
from contextsieve.mcp_client.stdio_child import end_child_groups
from contextsieve.mcp_server.common import HISTORY_TURNS, ServeConfig, Warmup
from contextsieve.mcp_server.connections import connection_scope, connection_state
from contextsieve.mcp_server.gateway_state import Conversation, Gateway
from contextsieve.mcp_server.http_transport import TransportConfig
from contextsieve.mcp_server.tool_surface import error_result, json_result, mcp_tool
from contextsieve.session.agent_tools import SEARCH_TOOLS, SELECT_CONTEXT, SET_TASK, AgentTool, ContextScope
from contextsieve.session.assembly import tool_definition

_log = logging.getLogger(__name__)

__all__ = ["CONVERSATION_ARGUMENT", "build_gateway", "run_gateway"]

#: The ``conversation`` argument the gateway adds to its own tools: a stateless host passes back the
#: handle its earlier result gave; a stateful host may name a conversation of its own (default: one per
#: connection).
CONVERSATION_ARGUMENT = {
    "conversation": {
        "type": "string",
        "description": "The conversation this task belongs to: the 'conversation' of an earlier result (omit it "
        "to start one).",
    }
}
#: The gateway's own tools, by name.
OWN_TOOLS: dict[str, AgentTool] = {t.name: t for t in (SET_TASK, SELECT_CONTEXT, SEARCH_TOOLS)}


class GatewayHandlers:
    """The MCP requests the gateway answers (:func:`build_gateway` registers them): ``tools/list``,
    ``tools/call`` of its own tools and of the offered tools (forwarded), and its lifespan (the
    downstream servers run while a host is connected)."""

    def __init__(self, gw: Gateway, listen: Any, warmup: Warmup | None) -> None:
        from mcp import types

        self.gw, self.listen, self.warmup = gw, listen, warmup
        self.own_listed = [mcp_tool(t, CONVERSATION_ARGUMENT) for t in OWN_TOOLS.values()]
        self._types = types
        self._connections = 0  # connections in process whose lifespan is running
        self._all_left: Any = None  # set when the last of them leaves

    @asynccontextmanager
    async def lifespan(self, _: Any) -> AsyncIterator[object]:
        """Start every downstream server with the first connection (the others in process share them,
        and the servers end when the last one leaves); yield a scope of the connection's own (its state
        is released when it ends)."""
        import anyio

        gw = self.gw
        async with connection_scope() as scope:
            self._connections += 1
            if gw.tg is not None:  # another connection (in process) runs the servers already
                try:
                    yield scope
                finally:
                    self._leave()
                return
            self._all_left = anyio.Event()
            async with anyio.create_task_group() as tg:
                gw.tg = tg
                for link in gw.links.values():
                    tg.start_soon(link.run)
                try:
                    yield scope
                finally:
                    self._leave()
                    with anyio.CancelScope(shield=True):
                        await self._all_left.wait()  # the servers serve every connection until the last leaves
                    self.listen.close()
                    for link in gw.links.values():
                        link.stop()
                    gw.tg = None

    def _leave(self) -> None:
        self._connections -= 1
        if self._connections == 0 and self._all_left is not None:
            self._all_left.set()

    def _definitions(self, tools: list[Tool]) -> list[Any]:
        names = self.gw.engine.agent.tool_names()
        out = []
        for t in tools:
            d = tool_definition(t, names)
            out.append(self._types.Tool(name=d["name"], description=d["description"], input_schema=d["input_schema"]))
        return out

    async def list_tools(self, ctx: Any, params: Any) -> Any:
        """The gateway's own tools, then the offers of the request's conversations."""
        self.gw.register(ctx)
        return self._types.ListToolsResult(tools=[*self.own_listed, *self._definitions(self.gw.listed(ctx))])

    async def call_tool(self, ctx: Any, params: Any) -> Any:
        """A call of the gateway's own tools, or of an offered tool (forwarded to its server)."""
        tool = OWN_TOOLS.get(params.name)
        if tool is not None:
            return await self.call_own(ctx, tool, params.arguments)
        return await self.forward(ctx, params.name, dict(params.arguments or {}))

    async def call_own(self, ctx: Any, tool: AgentTool, arguments: Any) -> Any:
        """A call of the gateway's own tools: an error the model can act on is an ``isError`` result.
        The result names its conversation and the servers that are down or still starting."""
        import anyio

        gw = self.gw
        try:
            args = tool.check(arguments, extra=("conversation",))
            conv = gw.conversation(ctx, args.pop("conversation", None))
            self._check_sizes(tool, args)
            relay = _progress_relay(ctx)
            if self.warmup is not None:  # the model, loading in the background since the start
                await self.warmup.wait(tool.name, relay)
            if tool is not SEARCH_TOOLS:
                gw.retry_down()  # a new task: servers down long enough start again (it waits for them below)
            await gw.first_starts(relay)  # servers starting: a bounded wait, so the task is chosen from their tools
            before = [t.key for t in gw.listed(ctx)]
            scope = ContextScope(
                conv.session,
                HISTORY_TURNS,
                select=lambda message, preset, settings: gw.task(conv, message, preset, settings),
                offered=lambda: [gw.prompt_name(t.key) for t in gw.offered(conv)],
            )
            result = await anyio.to_thread.run_sync(tool.run, scope, args)
        except ContextSieveError as e:
            return error_result(str(e))
        if tool is SEARCH_TOOLS:
            self._mark_found(conv, result)
        notes = [*result.pop("notes", []), *gw.notes()]
        if tool is SET_TASK and not result["tools"] and not notes:
            notes.append("no tool of the agent matched this task; search_tools finds tools by what they do")
        if [t.key for t in gw.listed(ctx)] != before:  # list_changed only when the list changed
            await (gw.announce() if connection_state(ctx) is None else _tools_changed(ctx))
        return json_result({"conversation": conv.name, **result, "notes": notes})

    def _check_sizes(self, tool: AgentTool, args: dict[str, Any]) -> None:
        config = self.gw.config
        text = args.get("message", args.get("query"))
        if isinstance(text, str) and len(text) > config.max_message_chars:
            raise ToolArgumentError(f"{tool.name}: {len(text)} characters; the limit is {config.max_message_chars}")
        if tool is SEARCH_TOOLS and args["limit"] > config.max_limit:
            raise ToolArgumentError(f"search_tools: limit must be from 1 to {config.max_limit}")

    def _mark_found(self, conv: Conversation, result: dict[str, Any]) -> None:
        """Tools search_tools found: those of servers that are up are offered from now on; the others are
        marked ``available: false`` with why."""
        gw = self.gw
        names = gw.engine.agent.tool_names()
        missing = gw.not_ready()
        found = []
        for r in result["tools"]:
            key = names.get(r["name"])
            why = missing.get(key.server) if key is not None else None
            r["available"] = why is None
            if why is not None:
                r["unavailable"] = f"server {key.server!r} is {why}"  # type: ignore[union-attr]
            elif key is not None:
                found.append(key)
        gw.found(conv, found)

    async def forward(self, ctx: Any, name: str, args: dict[str, Any]) -> Any:
        """A call of an offered tool, forwarded to its server and its result returned as it ran."""
        from mcp import MCPError, types
        from mcp.types import INVALID_PARAMS

        gw, agent = self.gw, self.gw.engine.agent
        key = gw.tool_key(name)
        if key is None or not gw.may_call(ctx, key):
            # a tool of a server still in its first start (the transport starts before the servers are
            # listed): known once that start ends (at most FIRST_TASK_WAIT)
            await gw.first_starts()
            key = gw.tool_key(name)
        if key is None and agent.tool_names().gone(name) is not None:
            raise MCPError(INVALID_PARAMS, agent.tool_names().unknown(name))
        if key is not None and gw.down(key.server) and agent.has(key):
            link = gw.links[key.server]
            raise MCPError(
                types.INTERNAL_ERROR,
                f"tool {brief(name)} cannot be called: server {key.server!r} is unavailable ({link.error}); "
                "its tools are out of the offer until it is back",
            )
        if key is None or not gw.may_call(ctx, key):
            raise MCPError(
                INVALID_PARAMS,
                f"tool {brief(name)} is not offered for this task; call set_task or search_tools to get it offered",
            )
        owners = gw.owners(ctx, key)
        result = await _forward(gw, key, args, _progress_relay(ctx))
        try:  # bookkeeping never turns a call that ran into an error
            await self._learn(owners, key, result, gw.attributable(ctx))
        except ContextSieveError as e:  # a history that cannot be written: said once
            gw.recording_failed(f"the call of {brief(name)} (it ran)", e)
        except Exception as e:  # noqa: BLE001 - e.g. the tool left its server's list while it ran
            _log.warning("the call of %s ran; recording it failed: %s", brief(name), e)
        return result

    async def _learn(self, owners: list[Conversation], key: ItemKey, result: Any, attributable: bool) -> None:
        """Record a forwarded call: every conversation that may have made it counts it as called (so it is
        no miss of their tasks); when it can be told to be one conversation's (``attributable``: a stateful
        connection's, or a stateless request naming its conversation in ``_meta``) and exactly one may
        have made it, that task's message becomes an example of an ``agent``-mode tool called successfully
        (learning from use; a call that may be another conversation's teaches nothing)."""
        import anyio

        gw, agent = self.gw, self.gw.engine.agent
        failed = bool(getattr(result, "is_error", False))
        for conv in owners:
            conv.called[key] = conv.called.get(key, False) or failed
        if not attributable or len(owners) != 1 or failed or not gw.config.learn_from_calls:
            return
        conv = owners[0]
        if conv.task and agent.has(key) and agent.include_mode(agent.get(key)) is IncludeMode.AGENT:
            await anyio.to_thread.run_sync(conv.session.record_tool_calls, conv.task, [key])


def build_gateway(
    engine: Engine,
    *,
    listing: ListConfig = ListConfig(),
    config: ServeConfig = ServeConfig(),
    warmup: Warmup | None = None,
) -> Any:
    """The gateway as a low-level MCP ``Server`` (run it with :func:`run_gateway` or the SDK). Its
    downstream servers are started when a host connects (the server's lifespan) and ended when it
    leaves; ``listing.timeout`` limits each server's start, ``listing.call_timeout`` each call.
    ``warmup``: the background model load (:class:`~contextsieve.mcp_server.common.Warmup`, started by
    the caller) that the gateway's own tools wait for, with progress notifications when the host's
    call carried a progress token; forwarded calls and ``tools/list`` never wait for it. Without one
    the model loads on first use."""
    require_sdk("contextsieve gateway (the MCP gateway for hosts)")
    from mcp.server.caching import CacheHint
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

    from contextsieve import __version__

    bus = InMemorySubscriptionBus()
    listen = ListenHandler(bus)
    gw = Gateway(engine, listing, config, bus)
    handlers = GatewayHandlers(gw, listen, warmup)

    class GatewayServer(Server):
        """The SDK's server declaring ``listChanged: true`` on the handshake protocol wherever it is
        run (stdio, HTTP, the SDK's in-memory client), as the gateway sends it."""

        def create_initialization_options(
            self,
            notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None,
        ) -> Any:
            return super().create_initialization_options(
                notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
            )

    server = GatewayServer(
        "contextsieve-gateway",
        version=__version__,
        lifespan=handlers.lifespan,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_subscriptions_listen=listen,
        # the offer changes with every task and with the servers' states: a host that listens hears of
        # each change, one that does not lists again
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
    )
    server.contextsieve_gateway = gw  # type: ignore[attr-defined]  # for tests and the CLI
    return server


async def _tools_changed(ctx: Any) -> None:
    """Tell a stateful connection that its tool list changed."""
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # noqa: BLE001 - a notification is best effort; the next tools/list is right anyway
        pass


def _progress_relay(ctx: Any) -> Any:
    """A downstream progress callback that passes each notification on to the host's call (the SDK's
    ``report_progress``: a no-op when the host's call did not ask for progress; over JSON-RPC a
    ``notifications/progress`` with the host's token, in process the host's callback)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        try:
            await ctx.session.report_progress(progress, total, message)
        except Exception:  # noqa: BLE001 - progress is best effort; the result still comes back
            pass

    return relay


async def _forward(gw: Gateway, key: ItemKey, args: dict[str, Any], progress: Any = None) -> Any:
    """Call ``key`` on its server over its connection (waiting while the server starts). Nothing is
    sent before the call (no probe), and the call is sent at most once: if it fails after it was sent
    (the connection closed, the server crashed, its result was malformed, the call limit ran out) it
    may have run, so the host gets an error for this call and the call is never re-sent."""
    import anyio
    from mcp import MCPError, types

    link = gw.links.get(key.server)
    if link is None:
        raise MCPError(types.INVALID_PARAMS, f"server {key.server!r} has no process to forward to")
    client = await link.connected()
    limit = gw.listing.call_timeout
    maybe_ran = f"the call to {key.server}:{key.name} may have run, so it is not sent again"
    try:
        return await client.call_tool(key.name, args, read_timeout_seconds=limit, progress_callback=progress)
    except MCPError as e:
        if e.error.code == types.REQUEST_TIMEOUT and limit is not None:
            raise MCPError(
                types.REQUEST_TIMEOUT,
                f"the call to {key.server}:{key.name} did not end within the call limit of {limit:g} s; it was "
                "cancelled on the server and is not sent again",
            ) from e
        if e.error.code != types.CONNECTION_CLOSED:
            raise  # the server answered with an error: pass it on unchanged
        raise MCPError(types.INTERNAL_ERROR, f"server {key.server!r} closed the connection; {maybe_ran}") from e
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as e:
        link.drop(client)  # broken: the next call waits for the server to start again
        raise MCPError(types.INTERNAL_ERROR, f"server {key.server!r}: the connection broke; {maybe_ran}") from e
    except Exception as e:  # noqa: BLE001 - e.g. a result that is not MCP: an error of this call only
        raise MCPError(
            types.INTERNAL_ERROR,
            f"server {key.server!r} answered something that is not a tool result ({describe_error(e)})",
        ) from e


def _end_children_and_die(signum: int, frame: Any) -> None:
    """SIGTERM / SIGHUP: end the servers' process groups, then die of the signal as before."""
    import os

    end_child_groups()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def run_gateway(
    engine: Engine,
    *,
    listing: ListConfig = ListConfig(),
    config: ServeConfig = ServeConfig(),
    warmup: Warmup | None = None,
    transport: TransportConfig = TransportConfig(),
) -> None:
    """Serve the gateway until the host disconnects (stdio, the default :class:`TransportConfig`) or until
    interrupted (``TransportConfig(kind="http", ...)``: streamable HTTP at ``http://host:port/mcp``, as
    :func:`contextsieve.mcp_server.server.serve` serves, for many hosts at once: each conversation has its
    own offer). The downstream servers end with the gateway: when the host disconnects, and on SIGTERM or
    SIGHUP (their process groups are ended, then the gateway dies of the signal). The transport starts at
    once: right before it, ``warmup`` (default: a :class:`~contextsieve.mcp_server.common.Warmup` of
    ``engine`` that loads the model) starts in a background thread (see :func:`build_gateway`).

    Raises:
        ContextSieveError: the HTTP address cannot be listened on.
    """
    import anyio

    warmup = warmup or Warmup(engine)
    handled = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _end_children_and_die) for sig in handled}
    try:
        if transport.kind == "http":
            from contextsieve.mcp_server.http_transport import bind, serve_http

            sockets = bind(transport.host, transport.port)
            try:
                server = build_gateway(engine, listing=listing, config=config, warmup=warmup)
                warmup.start(after_answers=False)  # many hosts: no one host's first answers to wait for
                serve_http(server, sockets, transport.host, transport.token, config)
            finally:
                for sock in sockets:
                    sock.close()
            return
        from contextsieve.mcp_server.stdio import run_stdio

        server = build_gateway(engine, listing=listing, config=config, warmup=warmup)
        warmup.start()
        anyio.run(run_stdio, server, server.create_initialization_options(), warmup.host_answered)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
