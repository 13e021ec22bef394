"""One MCP server in front of an agent's MCP servers that offers the host only the tools each request needs.

``contextsieve gateway AGENT`` (stdio) serves:

- the gateway's own tools: ``set_task(message)`` (select the tools for the host's current task),
  ``select_context(message)`` (the same, with the full request context as ``serve`` gives it) and
  ``search_tools(query, limit=5)`` (find tools by meaning; the ones found are offered from then on);
- the agent's ``always`` and session (manual) tools, and the tools selected for the latest task,
  under the prompt names ``server_tool`` (unique across servers).

``tools/call`` of an offered tool is forwarded to the server that owns it over a connection kept open
for the gateway's lifetime, and the server's result is returned unchanged (content, structured
content, ``isError``). A tool that is not offered is refused with an ``invalid params`` error that
names it. After a new task the tool list changes and stateful connections get
``notifications/tools/list_changed``. A downstream server whose connection fails is started again
once; if that fails too it is reported as unavailable in the error of the call, and the gateway and
the other servers keep working.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from contextsieve.agent import McpServer
from contextsieve.agent_tools import SEARCH_TOOLS, SELECT_CONTEXT, SET_TASK, AgentTool, ContextScope
from contextsieve.agentfile import server_tools
from contextsieve.assembly import Request, tool_definition
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.items import IncludeMode, ItemKey, Tool
from contextsieve.mcp.client import ListConfig, describe_error, open_transport, require_sdk, server_kind, wire_entry
from contextsieve.mcp.common import HISTORY_TURNS, ServeConfig, connection_state
from contextsieve.mcp.tool_surface import error_result, json_result, mcp_tool
from contextsieve.session import Session

__all__ = ["build_gateway", "run_gateway"]

#: Seconds the gateway waits after a downstream ``tools/list_changed`` before listing again, so that a
#: burst of notifications costs one listing.
RELIST_AFTER_SECONDS = 0.2
#: Seconds a downstream server has to answer the ping sent before each forwarded call (a connection
#: that died while idle is then restarted before the call is sent, never after).
PING_SECONDS = 5.0


@dataclass
class _State:
    """What one host connection (or, for stateless requests, the gateway) is offered."""

    session: Session
    offered: set[ItemKey] = field(default_factory=set)  # tools of the latest task and of searches
    task: str | None = None  # the latest task's message
    known: frozenset[ItemKey] = frozenset()  # the agent's tools when the session began
    last: dict[ItemKey, int] = field(default_factory=dict)  # stable offer: the task that last selected each tool
    turn: int = 0
    request: Request | None = None  # the latest task's request (its outcome is recorded when the next begins)
    called: dict[ItemKey, bool] = field(default_factory=dict)  # tools called for it -> whether a call failed

    @classmethod
    def new(cls, engine: Engine) -> _State:
        return cls(engine.session(), known=frozenset(t.key for t in engine.agent.tools))


class _Link:
    """A downstream server's connection, owned by a task of the gateway's task group. A
    ``tools/list_changed`` from the server re-lists its tools (``on_change`` gets the entries)."""

    def __init__(self, server: McpServer, config: ListConfig, on_change: Any = None) -> None:
        self.server, self.config, self.on_change = server, config, on_change
        self.client: Any = None
        self.error: str | None = None
        self.starts = 0
        self.relists = 0
        self._relisting = False
        self._again = False
        self._stop: Any = None
        self._tg: Any = None

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        if isinstance(message, types.ToolListChangedNotification) and self._tg is not None:
            if self._relisting:  # a storm of notifications: one more listing after the running one
                self._again = True
                return
            self._relisting = True
            self._tg.start_soon(self._relist_until_settled)

    async def _relist_until_settled(self) -> None:
        """Re-list :data:`RELIST_AFTER_SECONDS` after a notification, and again if more came meanwhile (so
        2,000 notifications cost a few listings, not 2,000, and the host hears of each listing once)."""
        import anyio

        try:
            while True:
                await anyio.sleep(RELIST_AFTER_SECONDS)  # the rest of a storm arrives meanwhile
                self._again = False
                await self._relist()
                if not self._again:
                    return
        finally:
            self._relisting = False

    async def _relist(self) -> None:
        client = self.client
        if client is None:
            return
        try:
            entries: list[dict[str, Any]] = []
            cursor = None
            for _ in range(self.config.max_pages):
                result = await client.list_tools(cursor=cursor)
                entries += [wire_entry(t) for t in result.tools]
                cursor = result.next_cursor
                if not cursor:
                    break
        except Exception as e:  # noqa: BLE001 - the old list stays; the next change tries again
            self.error = f"re-listing after tools/list_changed failed: {describe_error(e)}"
            return
        self.relists += 1
        if self.on_change is not None:
            await self.on_change(self.server.name, entries)

    async def _run(self, ready: Any) -> None:
        import anyio
        from mcp import Client

        stop = self._stop = anyio.Event()
        mine: Any = None
        try:
            with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
                transport = open_transport(self.server, server_kind(self.server), errlog)
                async with Client(  # stateful: a kept connection is what carries tools/list_changed
                    transport, read_timeout_seconds=self.config.timeout, message_handler=self._on_message, mode="legacy"
                ) as client:
                    mine = client
                    self.client, self.error = client, None
                    ready.set()
                    await stop.wait()
        except Exception as e:  # noqa: BLE001 - reported to the caller of the tool
            if self.client is None or self.client is mine:
                self.error = describe_error(e)
        finally:
            if self.client is mine:  # a connection that ends late never clears its successor
                self.client = None
            ready.set()

    async def start(self, tg: Any) -> None:
        import anyio

        self.starts += 1
        self._tg = tg
        ready = anyio.Event()
        tg.start_soon(self._run, ready)
        with anyio.move_on_after(self.config.timeout):
            await ready.wait()
        if self.client is None and self.error is None:
            self.error = f"no connection within {self.config.timeout:g} s"

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def drop(self, client: Any, error: str) -> None:
        """Forget ``client`` (broken) and end its connection; a newer connection is left alone."""
        if self.client is client:
            self.error = error
            self.client = None
            self.stop()


class Gateway:
    """The gateway's state: engine, downstream links, offered tools per connection."""

    def __init__(self, engine: Engine, listing: ListConfig, config: ServeConfig) -> None:
        self.engine, self.listing, self.config = engine, listing, config
        self.links = {
            name: _Link(s, listing, self.apply_listing)
            for name, s in engine.agent.servers.items()
            if s.config.get("type") != "internal"
        }
        self.hosts: dict[int, Any] = {}  # stateful host connections: the latest session object of each
        self.default = _State.new(engine)
        self.tg: Any = None
        self._lock = threading.Lock()

    def prompt_name(self, key: ItemKey) -> str:
        """The name the host sees for the agent's tool ``key`` (the agent's tool names, as every payload)."""
        return self.engine.agent.tool_names().name(key)

    def tool_key(self, name: str) -> ItemKey | None:
        """The agent's tool the host's ``name`` means, or ``None``."""
        return self.engine.agent.tool_names().get(name)

    async def apply_listing(self, server: str, entries: list[dict[str, Any]]) -> None:
        """A downstream server's new tool list: the agent's tools of that server are replaced (file
        overrides applied) and stateful host connections are told the tool list changed."""
        tools, listed = server_tools(self.engine.agent.servers[server], entries, limits=self.listing.limits)
        self.engine.agent.set_server_tools(server, tools, listed)
        for key, session in list(self.hosts.items()):
            try:
                await session.send_tool_list_changed()
            except Exception:  # noqa: BLE001 - that host is gone
                self.hosts.pop(key, None)

    def state(self, ctx: Any) -> _State:
        conn = connection_state(ctx)
        if conn is None:
            return self.default
        self.hosts[id(conn)] = ctx.session
        with self._lock:
            st = conn.get("contextsieve.gateway")
            if st is None:
                st = conn["contextsieve.gateway"] = _State.new(self.engine)
            return st

    def offered(self, st: _State) -> list[Tool]:
        """Tools the host may call now: always and session tools, then the task's and the searches'."""
        agent = self.engine.agent
        keys = [k for k, _ in st.session.items() if k.kind.value == "tool"]
        table = agent.table()  # always tools a server added since the session began are offered too
        keys += [
            table.keys[i]
            for i in range(len(table.keys))
            if table.tool[i] and table.always[i] and table.keys[i] not in st.known
        ]
        keys += [k for k in sorted(st.offered, key=str) if k not in keys]
        out = []
        for k in keys:
            if agent.has(k) and not self.down(k.server):
                tool = agent.get(k)
                if isinstance(tool, Tool) and st.session._tool_available(tool):
                    out.append(tool)
        return out

    def down(self, server: str) -> bool:
        """Whether ``server`` is known to be unavailable: its connection failed and its one restart is
        spent (its tools are not offered; a call would only fail)."""
        link = self.links.get(server)
        return link is not None and link.client is None and link.starts >= 2

    def task(
        self, st: _State, message: str, preset: str | None = None, settings: dict[str, Any] | None = None
    ) -> Request:
        """Select the tools of a new task (``set_task`` / ``select_context``): the last task's outcome
        is recorded, the offer changes (or grows, with a stable offer); returns the task's request."""
        if self.config.learn_from_calls and st.request is not None and st.request.message.strip():
            called = dict(st.called)  # calls run on the event loop while this runs in a worker thread
            done = [k for k in called if st.session.agent.has(k)]
            failed = [k for k in done if called[k]]
            st.session.record_outcome(st.request, done, failed)  # the last task's misses
        req = st.session.build_request(message, preset=preset, **(settings or {}))
        st.task, st.request, st.called = message, req, {}
        st.session.record_reply(req, "")
        del st.session.history[: -2 * HISTORY_TURNS]  # a bounded history of request contexts
        chosen = {e.key for e in req.context.entries if e.key.kind.value == "tool" and e.mode is IncludeMode.AGENT}
        if self.config.stable_offer:  # the offer only grows within the connection (ServeConfig.stable_offer)
            st.turn += 1
            for k in chosen:
                st.last[k] = st.turn
            st.offered |= chosen
            over = len(st.offered) - self.config.offer_budget
            if over > 0:
                stale = sorted((k for k in st.offered if k not in chosen), key=lambda k: (st.last.get(k, 0), str(k)))
                st.offered -= set(stale[:over])
        else:
            st.offered = chosen
        return req


def build_gateway(engine: Engine, *, listing: ListConfig = ListConfig(), config: ServeConfig = ServeConfig()) -> Any:
    """The gateway as a low-level MCP ``Server`` (run it with :func:`run_gateway` or the SDK)."""
    require_sdk()
    import anyio
    from mcp import MCPError, types
    from mcp.server.lowlevel import Server
    from mcp.types import INVALID_PARAMS

    gw = Gateway(engine, listing, config)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[Gateway]:
        async with anyio.create_task_group() as tg:
            gw.tg = tg
            try:
                yield gw
            finally:
                for link in gw.links.values():
                    link.stop()

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

    async def call_own(ctx: Any, st: _State, tool: AgentTool, arguments: Any) -> types.CallToolResult:
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
            result = await anyio.to_thread.run_sync(tool.run, scope, args)
        except ContextSieveError as e:
            return error_result(str(e))
        if tool is SEARCH_TOOLS:  # the tools found are offered from now on
            names = engine.agent.tool_names()
            st.offered |= {names[r["name"]] for r in result["tools"] if r["name"] in names}
        if [t.key for t in gw.offered(st)] != before:  # list_changed only when the list changed
            await _tools_changed(ctx)
        return json_result(result)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        st = gw.state(ctx)
        if name in own:
            return await call_own(ctx, st, own[name], params.arguments)
        key = gw.tool_key(name)
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

    server = Server(
        "contextsieve-gateway",
        version=__version__,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server._contextsieve_gateway = gw  # type: ignore[attr-defined]  # for tests and the CLI
    return server


async def _tools_changed(ctx: Any) -> None:
    """Tell a stateful connection that its tool list changed (the stateless protocol re-lists)."""
    if connection_state(ctx) is None:
        return
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # noqa: BLE001 - a notification is best effort; the next tools/list is right anyway
        pass


def _progress_relay(ctx: Any) -> Any:
    """A downstream progress callback that passes each notification on to the host, when the host's
    call asked for progress (a ``progressToken``); else ``None``."""
    meta = ctx.meta or {}
    token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
    if token is None:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        try:
            await ctx.session.send_progress_notification(
                token, progress, total, message, related_request_id=str(ctx.request_id)
            )
        except Exception:  # noqa: BLE001 - progress is best effort; the result still comes back
            pass

    return relay


async def _forward(gw: Gateway, key: ItemKey, args: dict[str, Any], progress: Any = None) -> Any:
    """Call ``key`` on its server, starting the connection when there is none (one restart after a
    broken one). A call is sent at most once: if it fails after it was sent (the connection broke,
    the server crashed, its result was malformed) it may have run, so the host gets an error for this
    call and the call is never re-sent; a broken connection is dropped, so the next call starts the
    server again."""
    import anyio
    from mcp import MCPError, types

    link = gw.links.get(key.server)
    if link is None:
        raise MCPError(types.INVALID_PARAMS, f"server {key.server!r} has no process to forward to")
    while True:  # nothing of the call is sent in this loop: starting (again) is safe
        if link.client is None:
            if link.starts >= 2:
                raise MCPError(types.INTERNAL_ERROR, f"server {key.server!r} is unavailable: {link.error}")
            await link.start(gw.tg)
            continue
        client = link.client
        try:  # a connection that died while idle is found here, before the call is sent
            with anyio.fail_after(PING_SECONDS):
                await client.send_ping()
            break
        except Exception as e:  # noqa: BLE001 - dead or hung: drop it and start the server again
            link.drop(client, f"no answer to a ping ({describe_error(e) or 'timeout'})")
    maybe_ran = f"the call to {key.server}:{key.name} may have run, so it is not sent again"
    try:
        return await client.call_tool(key.name, args, progress_callback=progress)
    except MCPError as e:
        if e.error.code != types.CONNECTION_CLOSED:
            raise  # the server answered with an error: pass it on unchanged
        link.drop(client, f"the connection closed ({e.error.message})")
        raise MCPError(types.INTERNAL_ERROR, f"server {key.server!r} closed the connection; {maybe_ran}") from e
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as e:
        link.drop(client, describe_error(e))
        raise MCPError(types.INTERNAL_ERROR, f"server {key.server!r}: the connection broke; {maybe_ran}") from e
    except Exception as e:  # noqa: BLE001 - e.g. a result that is not MCP: an error of this call only
        raise MCPError(
            types.INTERNAL_ERROR,
            f"server {key.server!r} answered something that is not a tool result ({describe_error(e)})",
        ) from e


def run_gateway(engine: Engine, *, listing: ListConfig = ListConfig(), config: ServeConfig = ServeConfig()) -> None:
    """Serve the gateway over stdio until the host disconnects."""
    import anyio
    from mcp.server.lowlevel import NotificationOptions

    from contextsieve.mcp.stdio import run_stdio

    server = build_gateway(engine, listing=listing, config=config)
    options = server.create_initialization_options(notification_options=NotificationOptions(tools_changed=True))
    anyio.run(run_stdio, server, options)
