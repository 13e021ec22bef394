"""What the MCP server and the gateway share: limits, the session registry, connection state, the
JSON shapes of results and the mapping of contextsieve errors to MCP errors."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextsieve.assembly import Request, tool_definition
from contextsieve.context import ContextEntry, StashedEntry
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, UnknownItemError, UnknownSegmentError
from contextsieve.items import ItemKind, Reference, Rule
from contextsieve.session import Session, StashSettings, ToolMatch
from contextsieve.stash.store import StashStore

_log = logging.getLogger(__name__)

__all__ = [
    "HISTORY_TURNS",
    "STATE_KEY",
    "ServeConfig",
    "SessionRegistry",
    "progress_reporter",
    "handle_owner",
    "connection_state",
    "reference_item",
    "context_result",
    "tool_match_result",
    "mcp_error",
    "invalid_params",
]


#: Requests whose contexts a served session keeps in its history (older ones are dropped).
HISTORY_TURNS = 100


@dataclass(frozen=True)
class ServeConfig:
    """Limits of the MCP server.

    Attributes:
        max_message_chars: longest ``message`` / ``query`` accepted (default 100,000 characters).
        max_limit: largest ``search_tools`` limit (default 50).
        max_request_bytes: largest HTTP request body (default 1 MB; HTTP only).
        max_sessions: sessions kept at once (default 1,000; the least recently used is dropped).
        session_idle_seconds: a session unused this long is dropped (default 3,600).
        stash_session: with a stash, the stash session every connection uses (default None: each
            connection's own session handle, so no client sees another's segments).
        stash_cross_session: with a stash, retrieval searches every stash session (default False).
        max_stash_segments: most segments one ``stash_context`` call may carry (default 1,000).
        learn_from_calls: the gateway records the current task's message as an example request of each
            ``agent``-mode tool the host calls successfully (learning from use; default True).
    """

    max_message_chars: int = 100_000
    max_limit: int = 50
    max_request_bytes: int = 1_000_000
    max_sessions: int = 1000
    session_idle_seconds: float = 3600.0
    stash_session: str | None = None
    stash_cross_session: bool = False
    max_stash_segments: int = 1000
    learn_from_calls: bool = True


def reference_item(entry: ContextEntry | StashedEntry) -> dict[str, Any]:
    """A request-context item in the reference shape (see :meth:`ContextEntry.to_dict`)."""
    return entry.to_dict()


def context_result(engine: Engine, req: Request) -> dict[str, Any]:
    """The JSON result of ``select_context``: items, texts of the selected rules and references (and
    of stashed segments brought back, with a stash), the tools to offer (prompt names ``server_tool``),
    and what was dropped and noted."""
    ctx, tools = req.context, req.tools
    texts = []
    for e in ctx.entries:
        if e.key.kind is not ItemKind.TOOL:
            item = engine.agent.get(e.key)
            assert isinstance(item, (Rule, Reference))
            texts.append({"type": e.key.kind.value, "name": e.key.name, "text": item.text})
    texts += [
        {"type": "stash", "name": e.segment_id, "text": req.stash_texts[e.segment_id]}
        for e in ctx.stashed
        if e.segment_id in req.stash_texts
    ]
    return {
        "items": [reference_item(e) for e in ctx.entries] + [reference_item(e) for e in ctx.stashed],
        "texts": texts,
        "tools": tools,
        "dropped": [{**reference_item(d.entry), "tokens": d.tokens, "reason": d.reason} for d in ctx.dropped],
        "notes": list(ctx.notes),
        "summary": ctx.summary(),
    }


def mcp_error(e: ContextSieveError) -> Exception:
    """The MCP error a contextsieve error becomes: invalid params for bad input, internal error otherwise
    (the message is the error's own text; never a traceback)."""
    from mcp import MCPError
    from mcp.types import INTERNAL_ERROR, INVALID_PARAMS

    code = INVALID_PARAMS if isinstance(e, (InputError, UnknownItemError, UnknownSegmentError)) else INTERNAL_ERROR
    return MCPError(code, str(e))


def invalid_params(message: str) -> Exception:
    """An MCP invalid-params error with ``message``."""
    from mcp import MCPError
    from mcp.types import INVALID_PARAMS

    return MCPError(INVALID_PARAMS, message)


def tool_match_result(match: ToolMatch) -> dict[str, Any]:
    """A :meth:`Session.search_tools` hit as ``search_tools`` returns it: the tool as offered to the LLM
    (name, description, input_schema), its server and MCP name, and its score."""
    tool = match.tool
    return {**tool_definition(tool), "server": tool.server, "tool": tool.name, "similarity": match.score}


def progress_reporter(ctx: Any) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback for work a tool does in its worker thread: each call sends
    the client a progress notification for this request (sent only when the client asked for them
    with a progress token; a notification that cannot be sent never fails the call)."""
    import anyio.from_thread

    def progress(done: int, total: int) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, float(done), float(total), f"embedded {done} of {total} texts")
        except Exception as e:  # noqa: BLE001 - progress is advisory: the work goes on
            _log.debug("progress notification not sent: %s", e)

    return progress


#: Key of the session handle in a stateful connection's state.
STATE_KEY = "contextsieve.session"
#: Key of a stateful connection's random identity in its state (what its handles are bound to).
CONNECTION_KEY = "contextsieve.connection"
#: Owner of handles made by requests of the stateless protocol (usable by any such request).
STATELESS = "stateless"


def handle_owner(state: dict[str, Any] | None) -> str:
    """Who may use the handles a request makes (the access model, docs/mcp.md): a stateful
    connection's handles are bound to that connection (another connection, or any request once it
    ended, gets "unknown or expired"); handles made over the stateless protocol are capabilities any
    request of that protocol may present (everyone who may call the server: over HTTP, who holds the
    token)."""
    if state is None:
        return STATELESS
    ident = state.get(CONNECTION_KEY)
    if not isinstance(ident, str):
        ident = state[CONNECTION_KEY] = secrets.token_hex(16)
    return "connection:" + ident


def connection_state(ctx: Any) -> dict[str, Any] | None:
    """The per-connection state dict of a stateful (``initialize``) connection, ``None`` for a request
    of the stateless protocol (its connection lives for one request)."""
    version = str(getattr(ctx, "protocol_version", "") or "")
    if not version or version >= "2026-07-28":
        return None
    state = getattr(getattr(ctx.session, "_connection", None), "state", None)
    return state if isinstance(state, dict) else None


class SessionRegistry:
    """Sessions by handle: random, bounded in number (LRU) and idle time (see :class:`ServeConfig`)."""

    def __init__(self, engine: Engine, config: ServeConfig, stash: StashStore | None = None) -> None:
        self._engine, self._config, self._stash = engine, config, stash
        self._by_handle: OrderedDict[str, tuple[Session, float, str]] = OrderedDict()  # session, used, owner
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        idle = self._config.session_idle_seconds
        while self._by_handle:
            handle, (_, used, _) = next(iter(self._by_handle.items()))
            if now - used <= idle and len(self._by_handle) <= self._config.max_sessions:
                break
            del self._by_handle[handle]

    def default_namespace(self) -> str:
        """The stash session of calls that name no handle over the stateless protocol: one per agent,
        kept in the store, so what such a host stashed it finds again (an LLM does not reliably thread
        a handle through its calls)."""
        return "agent:" + self._engine.agent.name

    def get(self, handle: str, owner: str) -> Session | None:
        """The session of ``handle`` if it is live and ``owner`` (:func:`handle_owner`) may use it."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            got = self._by_handle.get(handle)
            if got is None or got[2] != owner:
                return None  # one answer for unknown and not yours: a handle's existence is not told
            self._by_handle[handle] = (got[0], now, owner)
            self._by_handle.move_to_end(handle)
            return got[0]

    def new(self, owner: str, *, shared: bool = False, handle: str | None = None) -> tuple[str, Session]:
        """A new session and its handle. ``shared``: its stash part is the agent's default namespace
        (:meth:`default_namespace`; a call of the stateless protocol that names no handle), else its
        own (the handle's; a stateful connection's). ``handle``: register it under this handle again
        (a connection whose session was evicted keeps its handle, and with it its stashed segments).
        ``owner``: who may use the handle (:func:`handle_owner`)."""
        handle = handle or "cs-" + secrets.token_urlsafe(16)
        if self._stash is None:
            session = self._engine.session()
        else:  # select_context brings back this connection's stashed segments
            own = self.default_namespace() if shared else handle
            session = self._engine.session(
                stash=self._stash,
                stash_session=self._config.stash_session or own,
                stash_settings=StashSettings(cross_session=self._config.stash_cross_session),
            )
        now = time.monotonic()
        with self._lock:
            self._by_handle[handle] = (session, now, owner)
            self._expire(now)
        return handle, session
