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
then, so a tool it added since the cached listing is offered. ``tools/call`` of an offered tool is
forwarded over that connection, sent at most once and never preceded by a probe (no ``ping``: a
server busy with a slow call is not taken for dead), and its result is returned unchanged (content,
structured content, ``isError``, the server's own JSON-RPC errors); a call has no time limit unless
:attr:`ListConfig.call_timeout` sets one, and its progress passes through. A dead connection is found
by its transport (the read stream ends: the server process exited or closed stdout). A server whose
start fails or whose connection is lost is started again at once, once; when that fails too it is
down: its tools leave the offer (announced), a call of one names the reason, and it is tried again
when a host begins a new task :data:`RETRY_SECONDS` later or more (its tools return, announced).
Stdio servers run in process groups of their own that end with the gateway (:func:`run_gateway`).
"""

from __future__ import annotations

import logging
import math
import signal
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from contextsieve.agent.agent import McpServer
from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.mcp_client.catalog import ToolCache, tool_hash
from contextsieve.mcp_client.client import (
    ListConfig,
    StdioChild,
    describe_error,
    end_child_groups,
    open_transport,
    require_sdk,
    server_kind,
    wire_entry,
)
from contextsieve.mcp_server.common import HISTORY_TURNS, ServeConfig, connection_state
from contextsieve.mcp_server.tool_surface import error_result, json_result, mcp_tool
from contextsieve.session.agent_tools import SEARCH_TOOLS, SELECT_CONTEXT, SET_TASK, AgentTool, ContextScope
from contextsieve.session.assembly import Request, tool_definition
from contextsieve.session.session import Session

__all__ = ["build_gateway", "run_gateway", "RELIST_AFTER_SECONDS", "RETRY_SECONDS"]

_log = logging.getLogger(__name__)

#: Seconds the gateway waits after a downstream ``tools/list_changed`` before listing again, so that a
#: burst of notifications costs one listing.
RELIST_AFTER_SECONDS = 0.2
#: Seconds after a server went down before a host's new task (``set_task``, ``select_context``) starts
#: it again; also how long a connection must have lasted for its loss to earn another restart at once.
RETRY_SECONDS = 60.0
#: Characters of a failed server's stderr named in its error.
STDERR_CHARS = 300


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


class _WatchedReader:
    """A transport's read stream whose end (EOF, or closed under the reader) calls ``on_close``: how a
    dead connection is found without sending anything."""

    def __init__(self, inner: Any, on_close: Any) -> None:
        self._inner, self._on_close = inner, on_close

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_close()
            raise

    def __aiter__(self) -> _WatchedReader:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()
        self._on_close()

    async def aclose(self) -> None:
        await self._inner.aclose()
        self._on_close()

    async def __aenter__(self) -> _WatchedReader:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            self._on_close()


class _Watched:
    """A transport (async context manager of read and write streams) whose read stream is watched."""

    def __init__(self, inner: Any, on_close: Any) -> None:
        self.inner, self._on_close = inner, on_close

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self.inner.__aenter__()
        return _WatchedReader(read, self._on_close), write

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


class _Link:
    """A downstream server: its connection, kept by :meth:`run` (a task of the gateway's task group)
    from the gateway's start to its end, restarted as the module docstring says.

    ``state``: ``idle`` (not started yet), ``starting``, ``up``, ``down`` (its tools are not offered)
    or ``stopped`` (the gateway ended)."""

    def __init__(self, server: McpServer, config: ListConfig, gateway: Gateway) -> None:
        self.server, self.config, self.gateway = server, config, gateway
        self.client: Any = None
        self.era: str | None = None  # the protocol version of the connection
        #: How the next start opens: ``auto`` (``server/discover``, the handshake when it is refused) or
        #: ``legacy`` (the handshake at once, for a server that does not answer the probe at all).
        self.mode = "auto"
        self.state = "idle"
        self.error: str | None = None
        self.starts = 0
        self.relists = 0
        self.down_since = 0.0
        self._up_since = 0.0
        self._stopping = False
        self._lost = False  # the current connection ended (its read stream did)
        self._timed_out = False  # the last start ran out of the start-up limit
        self._relisting = False
        self._again = False
        self._wake: Any = None  # set when the current connection ends, on stop() and on retry()
        self._changed: Any = None  # set (and replaced) at every change of state
        self._conn_tg: Any = None  # the task group of the current connection (relists, listen stream)
        self._scope: Any = None  # the cancel scope of the current connection (stop() ends a start at once)

    def _set(self, state: str) -> None:
        import anyio

        self.state = state
        if self._changed is not None:
            self._changed.set()
        self._changed = anyio.Event()

    def _end(self) -> None:
        self._lost = True
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Keep the server connected until :meth:`stop`."""
        import anyio

        quick = True  # the one restart at once
        self._stopping = False
        self._changed = anyio.Event()
        while not self._stopping:
            self.starts += 1
            back = self.state == "down"
            self._set("starting")
            was_up = await self._connect(back)
            if self._stopping:
                break
            if not was_up:  # a server that never answered server/discover gets the handshake next time
                self.mode = "legacy" if self.mode == "auto" and self._timed_out else "auto"
            if was_up and time.monotonic() - self._up_since >= self.gateway.retry_seconds:
                quick = True  # a connection that lasted earns another restart at once
            if quick:
                quick = False
                _log.warning("server %r: %s; starting it again", self.server.name, self.error)
                continue
            self._wake = anyio.Event()
            self.down_since = time.monotonic()
            self._set("down")
            _log.warning("server %r is unavailable: %s", self.server.name, self.error)
            await self.gateway.offer_changed()  # its tools left the offer
            await self._wake.wait()  # retry() or stop()
        self._set("stopped")

    async def _connect(self, back: bool) -> bool:
        """One connection from start to end; returns whether it came up (``self.error`` says why it ended)."""
        import anyio
        from mcp import Client, types
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        from contextsieve import __version__

        self._wake, self._lost, self._timed_out, up = anyio.Event(), False, False, False
        transport: Any = None
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    if self._stopping:
                        scope.cancel()
                    scope.deadline = anyio.current_time() + self.config.timeout  # the start-up limit
                    transport = _Watched(open_transport(self.server, server_kind(self.server), errlog), self._end)
                    async with Client(
                        transport,
                        mode=self.mode,  # auto: the 2026-07-28 protocol where the server speaks it, else the handshake
                        read_timeout_seconds=None,  # a call's limit is ListConfig.call_timeout, set per call
                        message_handler=self._on_message,
                        cache=None,  # a re-listing must reach the server
                        client_info=types.Implementation(name="contextsieve-gateway", version=__version__),
                    ) as client:
                        async with anyio.create_task_group() as tg:
                            self._conn_tg = tg
                            tools = client.server_capabilities.tools
                            if client.protocol_version in MODERN_PROTOCOL_VERSIONS and tools and tools.list_changed:
                                await tg.start(self._listen, client)  # subscribed before listing: no change lost
                            entries = await self._list(client)
                            scope.deadline = math.inf  # up: the start-up limit is over
                            self.client, self.era, self.error = client, client.protocol_version, None
                            self._up_since, up = time.monotonic(), True
                            changed = await self._apply(entries)
                            self._set("up")
                            if back and not changed:
                                await self.gateway.offer_changed()  # its tools are back
                            await self._wake.wait()
                            tg.cancel_scope.cancel()
                if scope.cancelled_caught and not up:
                    self._timed_out = True
                    self.error = f"no connection and tool list within {self.config.timeout:g} s"
                elif self._lost and not self._stopping:
                    self.error = "the connection closed"
            except Exception as e:  # noqa: BLE001 - reported with the server's tools and calls
                self.error = describe_error(e)
            finally:
                self.client, self._conn_tg, self._scope = None, None, None
            if self._stopping:
                return up
            inner = getattr(transport, "inner", None)
            if isinstance(inner, StdioChild) and inner.returncode is not None:
                self.error = f"{self.error}; the server process exited with status {inner.returncode}"
            errlog.seek(0)
            tail = " ".join(errlog.read()[-STDERR_CHARS:].split())
            if tail:
                self.error = f"{self.error} (stderr: {tail})"
        return up

    async def _list(self, client: Any) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        cursor = None
        for _ in range(self.config.max_pages):
            result = await client.list_tools(cursor=cursor)
            entries += [wire_entry(t) for t in result.tools]
            if len(entries) > self.config.max_tools:
                raise ContextSieveError(f"more than {self.config.max_tools} tools")
            cursor = result.next_cursor
            if not cursor:
                return entries
        raise ContextSieveError(f"more than {self.config.max_pages} pages of tools")

    async def _apply(self, entries: list[dict[str, Any]]) -> bool:
        """Apply a listing to the agent; whether the server's tools changed (then the hosts were told)."""
        try:
            return await self.gateway.apply_listing(self.server.name, entries)
        except ContextSieveError as e:  # e.g. malformed tools: the agent keeps the tools it had
            _log.warning("server %r: its tool list was not applied: %s", self.server.name, e)
            return False

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        if isinstance(message, types.ToolListChangedNotification):
            self._relist_soon()

    async def _listen(self, client: Any, *, task_status: Any = None) -> None:
        """Follow the server's ``tools/list_changed`` on a ``subscriptions/listen`` stream (2026-07-28);
        started (``task_status``) once the server acknowledged it, or failed to."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as events:
                started = True
                if task_status is not None:
                    task_status.started()
                async for _ in events:
                    self._relist_soon()
        except Exception as e:  # noqa: BLE001 - no stream: the gateway's listing stays as it is
            _log.info("server %r: no subscriptions/listen stream (%s)", self.server.name, describe_error(e))
        finally:
            if not started and task_status is not None:
                task_status.started()

    def _relist_soon(self) -> None:
        if self._conn_tg is None:
            return
        if self._relisting:  # a storm of notifications: one more listing after the running one
            self._again = True
            return
        self._relisting = True
        self._conn_tg.start_soon(self._relist_until_settled)

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
        try:  # no time limit: a server busy with a slow call lists when it is done; ends with the connection
            entries = await self._list(client)
        except Exception as e:  # noqa: BLE001 - the old list stays; the next change tries again
            _log.warning("server %r: listing after tools/list_changed failed: %s", self.server.name, describe_error(e))
            return
        self.relists += 1
        await self._apply(entries)

    async def connected(self) -> Any:
        """The server's live client, waiting while it starts; an MCP error naming why when it is down."""
        from mcp import MCPError, types

        while True:
            if self.state == "up" and self.client is not None and not self._lost:
                return self.client
            if self.state in ("down", "stopped", "idle") or self._changed is None:
                why = "the gateway is not running" if self.state in ("stopped", "idle") else self.error
                raise MCPError(types.INTERNAL_ERROR, f"server {self.server.name!r} is unavailable: {why}")
            await self._changed.wait()

    def retry(self) -> None:
        """Start a down server again when it has been down for :attr:`Gateway.retry_seconds`."""
        if self.state == "down" and time.monotonic() - self.down_since >= self.gateway.retry_seconds:
            if self._wake is not None:
                self._wake.set()

    def stop(self) -> None:
        """End the connection (a start in progress at once; the server process is ended either way)."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._scope is not None and self.state != "up":
            self._scope.cancel()

    def drop(self, client: Any) -> None:
        """End ``client``'s connection (it broke in a way its read stream did not show); a newer
        connection is left alone."""
        if client is self.client:
            self._end()


class Gateway:
    """The gateway's state: engine, downstream links, offered tools per connection."""

    def __init__(self, engine: Engine, listing: ListConfig, config: ServeConfig, bus: Any = None) -> None:
        self.engine, self.listing, self.config = engine, listing, config
        self.links = {
            name: _Link(s, listing, self)
            for name, s in engine.agent.servers.items()
            if s.config.get("type") != "internal"
        }
        self.hosts: dict[int, Any] = {}  # stateful host connections: the latest session object of each
        self.bus = bus  # the SDK's subscription bus of the subscriptions/listen streams (2026-07-28 hosts)
        self.default = _State.new(engine)
        self.tg: Any = None
        #: Seconds a down server stays down before a new task starts it again (default :data:`RETRY_SECONDS`).
        self.retry_seconds = RETRY_SECONDS
        self._lock = threading.Lock()

    def prompt_name(self, key: ItemKey) -> str:
        """The name the host sees for the agent's tool ``key`` (the agent's tool names, as every payload)."""
        return self.engine.agent.tool_names().name(key)

    def tool_key(self, name: str) -> ItemKey | None:
        """The agent's tool the host's ``name`` means, or ``None``."""
        return self.engine.agent.tool_names().get(name)

    async def apply_listing(self, server: str, entries: list[dict[str, Any]]) -> bool:
        """A downstream server's tool list (listed when it connected, or again after its
        ``tools/list_changed``): the agent's tools of that server are replaced (file overrides applied),
        the listing is cached for the next start, and when the tools changed every host is told
        (:meth:`offer_changed`). Returns whether they changed."""
        agent = self.engine.agent
        before = self._hashes(server)
        tools, listed = server_tools(agent.servers[server], entries, limits=self.listing.limits)
        agent.set_server_tools(server, tools, listed)
        folder = self.engine._tools_folder()  # the cache Engine.connect reads
        if folder is not None:
            try:
                ToolCache(folder).put(agent.servers[server], entries)
            except OSError as e:
                _log.warning("server %r: its listing could not be cached: %s", server, e.strerror or e)
        if self._hashes(server) == before:
            return False
        await self.offer_changed()
        return True

    def _hashes(self, server: str) -> dict[str, str]:
        return {
            t.name: tool_hash({"name": t.name, "description": t.description, "inputSchema": t.input_schema})
            for t in self.engine.agent.tools
            if t.server == server
        }

    async def offer_changed(self) -> None:
        """Tell every host that its tool list changed: ``notifications/tools/list_changed`` to each
        connection of the handshake protocol, a ``tools/list_changed`` event on every
        ``subscriptions/listen`` stream of the 2026-07-28 protocol."""
        for key, session in list(self.hosts.items()):
            try:
                await session.send_tool_list_changed()
            except Exception:  # noqa: BLE001 - that host is gone
                self.hosts.pop(key, None)
        await self.announce()

    async def announce(self) -> None:
        """A ``tools/list_changed`` event on every ``subscriptions/listen`` stream (2026-07-28 hosts,
        which share the gateway's one offer)."""
        if self.bus is not None:
            from mcp.server.subscriptions import ToolsListChanged

            await self.bus.publish(ToolsListChanged())

    def retry_down(self) -> None:
        """Start the servers that have been down for :attr:`retry_seconds` again (on a host's new task)."""
        for link in self.links.values():
            link.retry()

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
        """Whether ``server`` is down: it failed to start or lost its connection, and its restart at once
        failed too (its tools are not offered; a call would only fail)."""
        link = self.links.get(server)
        return link is not None and link.state == "down"

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
    """The gateway as a low-level MCP ``Server`` (run it with :func:`run_gateway` or the SDK). Its
    downstream servers are started when a host connects (the server's lifespan) and ended when it
    leaves; ``listing.timeout`` limits each server's start, ``listing.call_timeout`` each call."""
    require_sdk()
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
        if key is not None and gw.down(key.server) and engine.agent.has(key):
            link = gw.links[key.server]
            raise MCPError(
                types.INTERNAL_ERROR,
                f"tool {brief(name)} cannot be called: server {key.server!r} is unavailable ({link.error}); "
                "its tools are out of the offer until it is back",
            )
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


def run_gateway(engine: Engine, *, listing: ListConfig = ListConfig(), config: ServeConfig = ServeConfig()) -> None:
    """Serve the gateway over stdio until the host disconnects. The downstream servers end with the
    gateway: when the host disconnects, and on SIGTERM or SIGHUP (their process groups are ended,
    then the gateway dies of the signal)."""
    import anyio

    from contextsieve.mcp_server.stdio import run_stdio

    server = build_gateway(engine, listing=listing, config=config)
    options = server.create_initialization_options()
    handled = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _end_children_and_die) for sig in handled}
    try:
        anyio.run(run_stdio, server, options)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
