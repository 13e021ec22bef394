"""What the gateway offers each host: the state of a host connection (:class:`HostState`: its session,
the tools offered, the latest task and the calls made for it) and :class:`Gateway`, which holds the
downstream links, decides which tools a host may call now, selects a new task's tools (per task, or a
stable offer that grows) and applies a server's listing to the agent, telling every host of a change."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError
from contextsieve.mcp_client.catalog import ToolCache, tool_hash
from contextsieve.mcp_client.client import ListConfig
from contextsieve.mcp_server.common import HISTORY_TURNS, ServeConfig, connection_state
from contextsieve.mcp_server.downstream import RETRY_SECONDS, Link
from contextsieve.session.assembly import Request
from contextsieve.session.session import Session

__all__ = ["HostState", "Gateway", "apply_cached_listings"]

#: The gateway's logger (its records keep the name they had when this was part of the gateway module).
_log = logging.getLogger("contextsieve.mcp_server.gateway")


def apply_cached_listings(engine: Engine, listing: ListConfig = ListConfig()) -> list[str]:
    """Give the agent the cached listings of its servers (``mcp-tools`` in the cache folder, as
    :meth:`Engine.connect` leaves them) without starting any: what ``contextsieve gateway`` does before
    its transport starts, so its first ``tools/list`` offers yesterday's ``always`` tools at once; the
    gateway starts and lists every server right after (:meth:`Gateway.apply_listing`). Returns the
    servers applied. A listing that cannot be applied is logged and skipped."""
    folder = engine.tools_folder
    if folder is None:
        return []
    cache = ToolCache(folder)
    applied = []
    for name, server in engine.agent.servers.items():
        if server.config.get("type") == "internal":
            continue
        hit = cache.get(server)
        if hit is None:
            continue
        try:
            tools, listed = server_tools(server, hit[0], limits=listing.limits)
        except ContextSieveError as e:
            _log.warning("server %r: its cached listing was not used: %s", name, e)
            continue
        engine.agent.set_server_tools(name, tools, listed)
        applied.append(name)
    return applied


@dataclass
class HostState:
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
    def new(cls, engine: Engine) -> HostState:
        return cls(engine.session(), known=frozenset(t.key for t in engine.agent.tools))


class Gateway:
    """The gateway's state: engine, downstream links, offered tools per connection."""

    def __init__(self, engine: Engine, listing: ListConfig, config: ServeConfig, bus: Any = None) -> None:
        self.engine, self.listing, self.config = engine, listing, config
        self.links = {
            name: Link(s, listing, self)
            for name, s in engine.agent.servers.items()
            if s.config.get("type") != "internal"
        }
        self.hosts: dict[int, Any] = {}  # stateful host connections: the latest session object of each
        self.bus = bus  # the SDK's subscription bus of the subscriptions/listen streams (2026-07-28 hosts)
        self.default = HostState.new(engine)
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
        folder = self.engine.tools_folder  # the cache Engine.connect reads
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

    async def first_starts(self) -> None:
        """Wait until every server's first start has ended (up and listed, or down), at most twice
        :attr:`ListConfig.timeout` and a second: a host's first task right after the gateway started
        would otherwise be chosen from no tools (an empty listing cache) or from yesterday's listing.
        At once when the gateway is not running or every server has started before."""
        import anyio

        if self.tg is None or all(link.settled for link in self.links.values()):
            return
        with anyio.move_on_after(2 * self.listing.timeout + 1):
            for link in self.links.values():
                await link.first_start()

    def retry_down(self) -> None:
        """Start the servers that have been down for :attr:`retry_seconds` again (on a host's new task)."""
        for link in self.links.values():
            link.retry()

    def state(self, ctx: Any) -> HostState:
        conn = connection_state(ctx)
        if conn is None:
            return self.default
        self.hosts[id(conn)] = ctx.session
        with self._lock:
            st = conn.get("contextsieve.gateway")
            if st is None:
                st = conn["contextsieve.gateway"] = HostState.new(self.engine)
            return st

    def offered(self, st: HostState) -> list[Tool]:
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
                if isinstance(tool, Tool) and st.session.tool_available(tool):
                    out.append(tool)
        return out

    def down(self, server: str) -> bool:
        """Whether ``server`` is down: it failed to start or lost its connection, and its restart at once
        failed too (its tools are not offered; a call would only fail)."""
        link = self.links.get(server)
        return link is not None and link.state == "down"

    def task(
        self, st: HostState, message: str, preset: str | None = None, settings: dict[str, Any] | None = None
    ) -> Request:
        """Select the tools of a new task (``set_task`` / ``select_context``): the last task's outcome
        is recorded, the offer changes (or grows, with a stable offer); returns the task's request."""
        if self.config.learn_from_calls and st.request is not None and st.request.message.strip():
            called = dict(st.called)  # calls run on the event loop while this runs in a worker thread
            done = [k for k in called if st.session.agent.has(k)]
            failed = [k for k in done if called[k]]
            st.session.record_outcome(st.request, done, failed)  # the last task's misses
        st.session.new_task()  # a task's first request: tool_top_n tools, no tools carried from the last task
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
