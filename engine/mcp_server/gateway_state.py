"""What the gateway offers each conversation.

A **conversation** (:class:`Conversation`) is one host conversation: its session, the tools its latest
task was offered, the tools it was ever offered (they stay callable within it), its latest task and the
calls made for it. A stateful (handshake) connection has a default conversation and any others its host
names with the gateway tools' ``conversation`` argument (two chats or sub-agents on one stdio
connection); a request of the stateless 2026-07-28 protocol names its conversation by the handle an
earlier result gave it (the ``conversation`` field), and one without a handle starts a new one. State of
conversations that end is released: a connection's with the connection, a stateless one after
:attr:`ServeConfig.session_idle_seconds` unused or past :attr:`ServeConfig.max_sessions`.

:class:`Gateway` holds the downstream links, decides which tools a request may list and call, selects a
task's tools, says which servers are down or still starting, and applies a server's listing to the agent,
telling every host of a change. Before its first task a conversation is offered the agent's ``always``
and session tools and a **starter offer** (:meth:`Gateway.starter`): the tools this agent used most
(its learned examples), else the tools that match the agent's own description best.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.items import ItemKey, ItemKind, Tool
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, ToolArgumentError, brief
from contextsieve.mcp_client.catalog import ToolCache, tool_hash
from contextsieve.mcp_client.client import ListConfig
from contextsieve.mcp_server.common import HISTORY_TURNS, ServeConfig
from contextsieve.mcp_server.connections import connection_state, live_states, request_meta
from contextsieve.mcp_server.downstream import RETRY_SECONDS, Link
from contextsieve.session.assembly import Request

__all__ = [
    "CALLABLE_MAX",
    "Conversation",
    "FIRST_TASK_WAIT",
    "Gateway",
    "PROGRESS_SECONDS",
    "STARTER_TOOLS",
    "apply_cached_listings",
]

#: The gateway's logger (its records keep the name they had when this was part of the gateway module).
_log = logging.getLogger("contextsieve.mcp_server.gateway")

#: Tools a conversation keeps callable: every tool it was offered, the latest 60 (its current offer always).
CALLABLE_MAX = 60
#: Tools of the starter offer a conversation has before its first task (default 5).
STARTER_TOOLS = 5
#: Seconds a task waits at most for servers still in their first start (default 10): then it is chosen
#: from the servers that are up, and its result says which are not.
FIRST_TASK_WAIT = 10.0
#: Seconds between two progress notifications to a task that waits for servers (default 2; at most 5).
PROGRESS_SECONDS = 2.0
#: The name of a connection's conversation when its host names none.
DEFAULT_CONVERSATION = "default"
#: Conversations one stateful connection keeps at most (the least recently used goes first).
CONVERSATIONS_PER_CONNECTION = 100
#: The ``_meta`` key by which a request of the stateless protocol may name its conversation (the handle
#: an earlier result gave): its ``tools/list`` then shows that conversation's offer alone, and its
#: forwarded calls count for that conversation (and teach it).
CONVERSATION_META = "io.contextsieve/conversation"
_CONVERSATIONS = "contextsieve.gateway.conversations"  # key of a connection's conversations in its state
_HOST = "contextsieve.gateway.host"  # key of a connection's latest request session in its state (to notify)


def _described(agent: Any, pool: list[ItemKey]) -> list[ItemKey]:
    """The tools of ``pool`` whose names and descriptions best match the agent's own description (BM25;
    only tools sharing a word with it; ties in pool order)."""
    from contextsieve.retrieval.bm25 import BM25Index

    about = " ".join(t for t in (str(agent.metadata.get("description") or ""), agent.system_prompt) if t)
    if not about.strip() or not pool:
        return []
    texts = [f"{k.server} {k.name} {getattr(agent.get(k), 'description', '')}" for k in pool]
    scores = BM25Index(texts).scores(about[:5000])
    order = sorted((i for i in range(len(pool)) if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
    return [pool[i] for i in order[:STARTER_TOOLS]]


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
class Conversation:
    """One host conversation (see the module docstring)."""

    name: str  # its handle (the stateless protocol: made by the gateway) or its name on its connection
    session: Any  # contextsieve.session.session.Session
    offer: list[ItemKey] = field(default_factory=list)  # the latest task's tools, in offer order
    found: list[ItemKey] = field(default_factory=list)  # tools search_tools found since that task
    callable: dict[ItemKey, None] = field(default_factory=dict)  # every tool offered in it, oldest first
    task: str | None = None  # the latest task's message
    request: Request | None = None  # the latest task's request (its outcome is recorded when the next begins)
    called: dict[ItemKey, bool] = field(default_factory=dict)  # tools called for it -> whether a call failed
    tasks: int = 0

    def remember(self, keys: list[ItemKey]) -> None:
        """``keys`` were offered: callable from now on (the latest :data:`CALLABLE_MAX` of them)."""
        for k in keys:
            self.callable.pop(k, None)
            self.callable[k] = None
        for k in list(self.callable)[: max(0, len(self.callable) - CALLABLE_MAX)]:
            if k not in self.offer:
                del self.callable[k]


class Gateway:
    """The gateway's state: engine, downstream links, conversations (see the module docstring)."""

    def __init__(self, engine: Engine, listing: ListConfig, config: ServeConfig, bus: Any = None) -> None:
        self.engine, self.listing, self.config = engine, listing, config
        self.links = {
            name: Link(s, listing, self)
            for name, s in engine.agent.servers.items()
            if s.config.get("type") != "internal"
        }
        self.bus = bus  # the SDK's subscription bus of the subscriptions/listen streams (2026-07-28 hosts)
        self.tg: Any = None
        #: Seconds a down server stays down before a new task starts it again (default :data:`RETRY_SECONDS`).
        self.retry_seconds = RETRY_SECONDS
        self._stateless: OrderedDict[str, tuple[Conversation, float]] = OrderedDict()
        self._starter: tuple[tuple[int, ...], list[ItemKey]] | None = None  # the cold starter, per tool set
        self._deadline: float | None = None  # until when calls wait for the servers starting now
        self._lock = threading.Lock()
        self._unrecorded: set[str] = set()  # the recording errors logged already (each once)

    def recording_failed(self, what: str, error: Exception) -> None:
        """Log that recording ``what`` into the learned history failed (a history file in a folder this
        user may not write, say): once per kind of error, since every later record fails the same way.
        Selection and the call go on."""
        first = str(error) not in self._unrecorded
        self._unrecorded.add(str(error))
        (_log.warning if first else _log.debug)(
            "%s; recording %s failed: %s%s",
            "the gateway goes on without learning from it" if first else "again",
            what,
            error,
            " (said once: later records that fail the same way are logged at debug level)" if first else "",
        )

    # -- names --------------------------------------------------------------------------------------

    def prompt_name(self, key: ItemKey) -> str:
        """The name the host sees for the agent's tool ``key`` (the agent's tool names, as every payload)."""
        return self.engine.agent.tool_names().name(key)

    def tool_key(self, name: str) -> ItemKey | None:
        """The agent's tool the host's ``name`` means, or ``None``."""
        return self.engine.agent.tool_names().get(name)

    # -- conversations ------------------------------------------------------------------------------

    def _new(self, name: str) -> Conversation:
        return Conversation(name, self.engine.session(offer=self.config.offer))

    def conversation(self, ctx: Any, name: object = None) -> Conversation:
        """The conversation a gateway tool's call belongs to: on a stateful connection the one its host
        names (``name``; default :data:`DEFAULT_CONVERSATION`, made on first use); on the stateless
        protocol the one whose handle ``name`` is, or a new one with a new handle.

        Raises:
            ToolArgumentError: a name that is not a string of 1-100 characters, or a stateless handle
                that is unknown or expired (its conversation was released).
        """
        if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 100):
            raise ToolArgumentError("conversation must be the handle of an earlier result (1-100 characters)")
        state = connection_state(ctx)
        if state is not None:
            with self._lock:
                state[_HOST] = ctx.session
                convs: OrderedDict[str, Conversation] = state.setdefault(_CONVERSATIONS, OrderedDict())
                label = name or DEFAULT_CONVERSATION
                conv = convs.pop(label, None) or self._new(label)
                convs[label] = conv  # the most recently used last
                while len(convs) > CONVERSATIONS_PER_CONNECTION:
                    convs.popitem(last=False)
                return conv
        name = name if name is not None else request_meta(ctx, CONVERSATION_META)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if name is not None:
                got = self._stateless.pop(name, None) if isinstance(name, str) else None
                if got is None:
                    raise ToolArgumentError(
                        f"unknown or expired conversation {brief(name)}; call without one to start a new conversation"
                    )
                conv = got[0]
            else:
                conv = self._new("cv-" + secrets.token_urlsafe(12))
            self._stateless[conv.name] = (conv, now)
            self._expire(now)
            return conv

    def _expire(self, now: float) -> None:
        idle, most = self.config.session_idle_seconds, self.config.max_sessions
        while self._stateless:
            name, (_, used) = next(iter(self._stateless.items()))
            if now - used <= idle and len(self._stateless) <= most:
                break
            del self._stateless[name]

    def register(self, ctx: Any) -> None:
        """Note a stateful connection's latest request session, to tell it when its offer changes."""
        state = connection_state(ctx)
        if state is not None:
            state[_HOST] = ctx.session

    def conversations(self, ctx: Any) -> list[Conversation]:
        """The conversations a request acts for: its connection's; on the stateless protocol the one its
        ``_meta`` names (:data:`CONVERSATION_META`), else every live one (such a request names no
        conversation but its gateway tools' calls)."""
        state = connection_state(ctx)
        if state is not None:
            return list(state.get(_CONVERSATIONS, {}).values())
        named = request_meta(ctx, CONVERSATION_META)
        with self._lock:
            self._expire(time.monotonic())
            if isinstance(named, str) and named in self._stateless:
                return [self._stateless[named][0]]
            return [c for c, _ in self._stateless.values()]

    def attributable(self, ctx: Any) -> bool:
        """Whether a forwarded call can be told to belong to one conversation: a stateful connection's, or
        a stateless request whose ``_meta`` names its conversation."""
        return connection_state(ctx) is not None or isinstance(request_meta(ctx, CONVERSATION_META), str)

    # -- what is offered ----------------------------------------------------------------------------

    def offered(self, conv: Conversation | None) -> list[Tool]:
        """The tools a conversation is offered now: its ``always`` and session tools, then its latest
        task's (before its first task: the :meth:`starter` offer) and its searches'; ``None``: a
        conversation not begun. Tools of servers that are down are left out."""
        agent = self.engine.agent
        if conv is not None:
            keys = [k for k, _ in conv.session.items() if k.kind is ItemKind.TOOL]
        else:
            table = agent.table()
            keys = [table.keys[i] for i in range(len(table.keys)) if table.tool[i] and table.always[i]]
        keys += conv.offer if conv is not None and conv.tasks else self.starter()
        keys += conv.found if conv is not None else []
        out: list[Tool] = []
        seen: set[ItemKey] = set()
        for k in keys:
            if k in seen or not agent.has(k) or self.down(k.server):
                continue
            seen.add(k)
            tool = agent.get(k)
            if isinstance(tool, Tool) and (conv is None or conv.session.tool_available(tool)):
                out.append(tool)
        return out

    def listed(self, ctx: Any) -> list[Tool]:
        """What ``tools/list`` shows a request: the offers of the conversations it may act for, in
        order (one not begun yet: the ``always`` tools and the starter offer)."""
        convs = self.conversations(ctx)
        stateless = connection_state(ctx) is None
        out: dict[ItemKey, Tool] = {}
        for conv in ([None] if stateless or not convs else []) + convs:
            for t in self.offered(conv):
                out.setdefault(t.key, t)
        return list(out.values())

    def owners(self, ctx: Any, key: ItemKey) -> list[Conversation]:
        """The conversations for which a request may be calling ``key``: those whose latest task (or
        search, or starter) offers it, else those that were offered it before; latest task first. A
        request of the stateless protocol names no conversation for a forwarded call, so more than one
        may own it."""
        convs = sorted(self.conversations(ctx), key=lambda c: -c.tasks)
        now = [c for c in convs if key in {t.key for t in self.offered(c)}]
        return now or [c for c in convs if key in c.callable]

    def may_call(self, ctx: Any, key: ItemKey) -> bool:
        """Whether a request may call ``key``: a conversation it acts for was offered it, or it is among
        the ``always`` tools and the starter offer every conversation begins with."""
        return bool(self.owners(ctx, key)) or key in {t.key for t in self.offered(None)}

    def starter(self) -> list[ItemKey]:
        """The starter offer (:data:`STARTER_TOOLS` ``agent``-mode tools): the ones this agent used most
        (by its learned examples), else the ones whose names and descriptions share the most words
        with the agent's own description (its metadata description and system prompt, by BM25: no model
        is needed, so ``tools/list`` never waits for one, and the same tools give the same offer)."""
        agent = self.engine.agent
        store = self.engine.store
        try:
            used = store.usage().counts(store.usage_scope)
        except ContextSieveError as e:
            _log.warning("the starter offer does not read the learned examples: %s", e)
            used = {}
        table = agent.table()
        pool = [table.keys[i] for i in range(len(table.keys)) if table.tool[i] and table.agent[i]]
        counts = {k: used[k] for k in pool if k in used}
        if counts:
            return sorted(counts, key=lambda k: (-counts[k], str(k)))[:STARTER_TOOLS]
        if self._starter is None or self._starter[0] != table.shape:
            self._starter = (table.shape, _described(agent, pool))
        return list(self._starter[1])

    # -- servers ------------------------------------------------------------------------------------

    def down(self, server: str) -> bool:
        """Whether ``server`` is down: it failed to start or lost its connection, and its restart at once
        failed too (its tools are not offered; a call would only fail)."""
        link = self.links.get(server)
        return link is not None and link.state == "down"

    def not_ready(self) -> dict[str, str]:
        """Servers whose tools cannot be offered now: name -> why (down: the error; still starting)."""
        out = {}
        for name, link in self.links.items():
            if link.state == "down":
                out[name] = f"down ({link.error}); tried again with a task {self.retry_seconds:g} s after it went down"
            elif link.state in ("idle", "starting") and not link.settled:
                out[name] = "still starting"
        return out

    def notes(self) -> list[str]:
        """One line per server that is down or still starting, with the tools it would offer (its
        tools the agent knows, from a cached or earlier listing)."""
        notes = []
        for name, why in self.not_ready().items():
            known = [self.prompt_name(t.key) for t in self.engine.agent.tools if t.server == name]
            would = f"; it would offer {', '.join(known[:8])}{' ...' if len(known) > 8 else ''}" if known else ""
            notes.append(f"server {name!r} is {why}: its tools are not offered now{would}")
        return notes

    async def first_starts(
        self, report: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    ) -> None:
        """Wait while servers are starting (their first start, or a start again a task asked for), at most
        until :data:`FIRST_TASK_WAIT` seconds after the first call that waited for that start, telling
        ``report`` (a progress callback) every :data:`PROGRESS_SECONDS` which are still starting: a task
        right after the gateway started would otherwise be chosen from no tools (an empty listing cache) or
        from yesterday's listing. At once when the gateway is not running or no server is starting."""
        import anyio

        if self.tg is None:
            return
        start = time.monotonic()
        while True:
            waiting = [n for n, link in self.links.items() if not link.settled or link.state == "starting"]
            now = time.monotonic()
            if not waiting:
                self._deadline = None
                return
            if self._deadline is None:
                self._deadline = now + FIRST_TASK_WAIT  # one bound for every call waiting for these starts
            if now >= self._deadline:
                return
            if report is not None:
                try:
                    await report(now - start, FIRST_TASK_WAIT, f"waiting for server(s) {', '.join(waiting)} to start")
                except Exception:  # noqa: BLE001 - progress is best effort
                    pass
            with anyio.move_on_after(min(PROGRESS_SECONDS, self._deadline - now)):
                for name in waiting:
                    await self.links[name].settle()

    def retry_down(self) -> bool:
        """Start the servers that have been down for :attr:`retry_seconds` again (on a host's new task);
        whether any was."""
        return any([link.retry() for link in self.links.values()])

    # -- tasks --------------------------------------------------------------------------------------

    def task(
        self, conv: Conversation, message: str, preset: str | None = None, settings: dict[str, Any] | None = None
    ) -> Request:
        """Select the tools of a new task (``set_task`` / ``select_context``): the last task's outcome
        is recorded, the conversation's offer becomes the request's tools (a stable offer,
        :class:`~contextsieve.session.offer.OfferConfig`, keeps growing); returns the task's request."""
        session = conv.session
        if self.config.learn_from_calls and conv.request is not None and conv.request.message.strip():
            called = dict(conv.called)  # calls run on the event loop while this runs in a worker thread
            done = [k for k in called if session.agent.has(k)]
            failed = [k for k in done if called[k]]
            try:
                session.record_outcome(conv.request, done, failed)  # the last task's misses
            except ContextSieveError as e:  # a history that cannot be written never stops a task
                self.recording_failed("the last task's outcome", e)
        session.new_task()  # a task's first request: tool_top_n tools, no tools carried from the last task
        req = session.build_request(message, preset=preset, **(settings or {}))
        # kept without its search traces: the next task records its outcome from its context, message
        # and task, and a trace holds the request's rows (MBs with a year of history) for up to
        # max_sessions conversations
        conv.task, conv.request, conv.called = message, dataclasses.replace(req, trace=None, stash_trace=None), {}
        session.record_reply(req, "")
        del session.history[: -2 * HISTORY_TURNS]  # a bounded history of request contexts
        conv.offer = [req.tool_key(t["name"]) for t in req.tools]
        conv.found = []
        conv.tasks += 1
        conv.remember(conv.offer)
        return req

    def found(self, conv: Conversation, keys: list[ItemKey]) -> None:
        """Tools ``search_tools`` found for ``conv``: offered from now on (until its next task)."""
        conv.found += [k for k in keys if k not in conv.found]
        conv.remember(keys)

    # -- listings -----------------------------------------------------------------------------------

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
        for state in live_states():
            session = state.get(_HOST)
            if session is None:
                continue
            try:
                await session.send_tool_list_changed()
            except Exception:  # noqa: BLE001 - that host is gone
                state.pop(_HOST, None)
        await self.announce()

    async def announce(self) -> None:
        """A ``tools/list_changed`` event on every ``subscriptions/listen`` stream (2026-07-28 hosts)."""
        if self.bus is not None:
            from mcp.server.subscriptions import ToolsListChanged

            await self.bus.publish(ToolsListChanged())
