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

import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from contextsieve.agent.items import IncludeMode, ItemKey
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.mcp_client.client import ListConfig, describe_error, end_child_groups, require_sdk
from contextsieve.mcp_server.common import HISTORY_TURNS, ServeConfig, Warmup, connection_state
from contextsieve.mcp_server.gateway_state import Gateway, HostState
from contextsieve.mcp_server.tool_surface import error_result, json_result, mcp_tool
from contextsieve.session.agent_tools import SEARCH_TOOLS, SELECT_CONTEXT, SET_TASK, AgentTool, ContextScope
from contextsieve.session.assembly import tool_definition

__all__ = ["build_gateway", "run_gateway"]


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
    import anyio
    from mcp import MCPError, types
    from mcp.server.caching import CacheHint
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
    from mcp.types import INVALID_PARAMS

    bus = InMemorySubscriptionBus()
    listen = ListenHandler(bus)
    gw = Gateway(engine, listing, config, bus)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[Gateway]:
        if gw.tg is not None:  # another connection (in process) runs the servers already
            yield gw
            return
        async with anyio.create_task_group() as tg:
            gw.tg = tg
            for link in gw.links.values():
                tg.start_soon(link.run)
            try:
                yield gw
            finally:
                listen.close()
                for link in gw.links.values():
                    link.stop()
                gw.tg = None

    own = {t.name: t for t in (SET_TASK, SELECT_CONTEXT, SEARCH_TOOLS)}
    own_listed = [mcp_tool(t) for t in own.values()]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        st = gw.state(ctx)
        tools = list(own_listed)
        names = engine.agent.tool_names()
        for t in gw.offered(st):
            d = tool_definition(t, names)
            tools.append(types.Tool(name=d["name"], description=d["description"], input_schema=d["input_schema"]))
        return types.ListToolsResult(tools=tools)

    async def call_own(ctx: Any, st: HostState, tool: AgentTool, arguments: Any) -> types.CallToolResult:
        """A call of the gateway's own tools: an error the model can act on is an ``isError`` result."""
        scope = ContextScope(
            st.session,
            HISTORY_TURNS,
            select=lambda message, preset, settings: gw.task(st, message, preset, settings),
            offered=lambda: [gw.prompt_name(t.key) for t in gw.offered(st)],
        )
        before = [t.key for t in gw.offered(st)]
        try:
            args = tool.check(arguments)
            text = args.get("message", args.get("query"))
            if isinstance(text, str) and len(text) > config.max_message_chars:
                raise ToolArgumentError(f"{tool.name}: {len(text)} characters; the limit is {config.max_message_chars}")
            if tool is SEARCH_TOOLS and args["limit"] > config.max_limit:
                raise ToolArgumentError(f"search_tools: limit must be from 1 to {config.max_limit}")
            if warmup is not None:  # the model, loading in the background since the start
                await warmup.wait(tool.name, ctx.session.report_progress)
            await gw.first_starts()  # a task right after the start: choose from the servers' tools, not from none
            result = await anyio.to_thread.run_sync(tool.run, scope, args)
        except ContextSieveError as e:
            return error_result(str(e))
        if tool is SEARCH_TOOLS:  # the tools found are offered from now on
            names = engine.agent.tool_names()
            st.offered |= {names[r["name"]] for r in result["tools"] if r["name"] in names}
        else:  # a new task: servers down long enough are tried again
            gw.retry_down()
        if [t.key for t in gw.offered(st)] != before:  # list_changed only when the list changed
            if connection_state(ctx) is None:
                await gw.announce()  # the stateless protocol: the shared offer, on subscriptions/listen
            else:
                await _tools_changed(ctx)
        return json_result(result)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        st = gw.state(ctx)
        if name in own:
            return await call_own(ctx, st, own[name], params.arguments)
        key = gw.tool_key(name)
        if key is None or key not in {t.key for t in gw.offered(st)}:
            # a tool of a server still in its first start (the transport starts before the servers are
            # listed): known once that start ends; at once when every server has started
            await gw.first_starts()
            key = gw.tool_key(name)
        if key is not None and gw.down(key.server) and engine.agent.has(key):
            link = gw.links[key.server]
            raise MCPError(
                types.INTERNAL_ERROR,
                f"tool {brief(name)} cannot be called: server {key.server!r} is unavailable ({link.error}); "
                "its tools are out of the offer until it is back",
            )
        if key is None and engine.agent.tool_names().gone(name) is not None:
            raise MCPError(INVALID_PARAMS, engine.agent.tool_names().unknown(name))
        if key is None or key not in {t.key for t in gw.offered(st)}:
            raise MCPError(
                INVALID_PARAMS,
                f"tool {brief(name)} is not offered for this task; call set_task or search_tools to get it offered",
            )
        result = await _forward(gw, key, args, _progress_relay(ctx))
        st.called[key] = st.called.get(key, False) or bool(getattr(result, "is_error", False))
        if config.learn_from_calls and st.task and not getattr(result, "is_error", False):
            if engine.agent.include_mode(engine.agent.get(key)) is IncludeMode.AGENT:
                await anyio.to_thread.run_sync(st.session.record_tool_calls, st.task, [key])
        return result

    from contextsieve import __version__

    class GatewayServer(Server):
        """The SDK's server declaring ``listChanged: true`` on the handshake protocol wherever it is
        run (stdio, the SDK's in-memory client), as the gateway sends it."""

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
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=listen,
        # the offer changes with every task and with the servers' states: a host that listens hears of
        # each change, one that does not lists again
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
    )
    server._contextsieve_gateway = gw  # type: ignore[attr-defined]  # for tests and the CLI
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
) -> None:
    """Serve the gateway over stdio until the host disconnects. The downstream servers end with the
    gateway: when the host disconnects, and on SIGTERM or SIGHUP (their process groups are ended,
    then the gateway dies of the signal). The transport starts at once: right before it, ``warmup``
    (default: a :class:`~contextsieve.mcp_server.common.Warmup` of ``engine`` that loads the model)
    starts in a background thread (see :func:`build_gateway`)."""
    import anyio

    from contextsieve.mcp_server.stdio import run_stdio

    warmup = warmup or Warmup(engine)
    server = build_gateway(engine, listing=listing, config=config, warmup=warmup)
    options = server.create_initialization_options()
    handled = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _end_children_and_die) for sig in handled}
    try:
        warmup.start()
        anyio.run(run_stdio, server, options, warmup.host_answered)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
