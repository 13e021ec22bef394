"""Which stateful connection an MCP request came on, and the scratch state kept for it, read through the
MCP SDK's public request context only (:func:`connection_key`, :func:`connection_state`); a server's
lifespan yields :func:`connection_scope` so that each stdio or in-memory connection has state of its own,
released when it ends."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["connection_key", "connection_scope", "connection_state", "live_states", "request_meta"]


def request_meta(ctx: Any, key: str) -> Any:
    """The value of ``key`` in a request's ``_meta`` (``None`` when absent)."""
    meta = getattr(getattr(ctx, "request_context", ctx), "meta", None)
    return meta.get(key) if isinstance(meta, dict) else None


def connection_key(ctx: Any) -> str | None:
    """Which stateful (``initialize``) connection a request came on, read from the SDK's public request
    context; ``None`` for a request of the stateless protocol (its connection lives for one request).
    Over HTTP, the connection's ``Mcp-Session-Id``; over stdio or in memory, where the server's lifespan
    is entered once per connection, the object that lifespan yielded (see :func:`connection_scope`)."""
    ctx = getattr(ctx, "request_context", ctx)  # the SDK's high-level Context wraps the request context
    version = str(getattr(ctx, "protocol_version", "") or "")
    if not version or version >= "2026-07-28":
        return None
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    if isinstance(session_id, str) and session_id:
        return "http:" + session_id
    return f"run:{id(ctx.lifespan_context)}"


class _ConnectionStates:
    """Per-connection scratch state by :func:`connection_key`: released when a run's lifespan ends
    (:func:`connection_scope`); HTTP sessions, whose end the server is not told of, are dropped after 30
    minutes unused or past 10,000 at once (least recently used first): the MCP SDK's own limits of an
    HTTP session, which it has ended by then."""

    MAX = 10_000
    IDLE_SECONDS = 1800.0

    def __init__(self) -> None:
        self._states: OrderedDict[str, tuple[dict[str, Any], float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            found = self._states.pop(key, None)
            state = found[0] if found is not None else {}
            self._states[key] = (state, now)
            while self._states:
                oldest, (_, used) = next(iter(self._states.items()))
                if len(self._states) <= self.MAX and now - used <= self.IDLE_SECONDS:
                    break
                del self._states[oldest]
            return state

    def release(self, key: str) -> None:
        with self._lock:
            self._states.pop(key, None)

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return [state for state, _ in self._states.values()]


_STATES = _ConnectionStates()


def connection_state(ctx: Any) -> dict[str, Any] | None:
    """The per-connection state dict of a stateful (``initialize``) connection, ``None`` for a request
    of the stateless protocol (its connection lives for one request). Kept by :func:`connection_key`
    through the SDK's public API only."""
    key = connection_key(ctx)
    return None if key is None else _STATES.get(key)


def live_states() -> list[dict[str, Any]]:
    """The state dicts of the stateful connections kept now (to tell each host of a change)."""
    return _STATES.live()


@asynccontextmanager
async def connection_scope() -> AsyncIterator[object]:
    """What a server's lifespan yields so that each stdio or in-memory connection (one lifespan each) has
    state of its own (:func:`connection_key`), released when the connection ends."""
    scope = object()
    try:
        yield scope
    finally:
        _STATES.release(f"run:{id(scope)}")
