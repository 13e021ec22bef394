"""The gateway's connections to the agent's MCP servers: one :class:`Link` per downstream server, kept
from the gateway's start to its end.

A server is started when the gateway starts (each under :attr:`ListConfig.timeout`) and listed then;
toward it the 2026-07-28 protocol where the server speaks it, the handshake otherwise (the SDK's
``mode="auto"``; a server whose start runs out of its limit without an answer to ``server/discover``
gets the handshake at once on its restart). Its own ``tools/list_changed`` (a notification, or an event
on a ``subscriptions/listen`` stream) makes the link list it again, :data:`RELIST_AFTER_SECONDS` later.
A dead connection is found by its transport (the read stream ends). A server whose start fails or whose
connection is lost is started again at once, once; when that fails too it is down until a host's new
task :data:`RETRY_SECONDS` later or more. The listings go to the link's owner (the gateway,
:class:`LinkOwner`), which applies them and tells the hosts.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from typing import Any, Protocol

from contextsieve.agent.agent import McpServer
from contextsieve.errors import ContextSieveError
from contextsieve.mcp_client.client import ListConfig, describe_error, open_transport, server_kind, wire_entry
from contextsieve.mcp_client.stdio_child import StdioChild

__all__ = ["Link", "LinkOwner", "RELIST_AFTER_SECONDS", "RETRY_SECONDS", "STDERR_CHARS"]

#: The gateway's logger (its records keep the name they had when this was part of the gateway module).
_log = logging.getLogger("contextsieve.mcp_server.gateway")

#: Seconds the gateway waits after a downstream ``tools/list_changed`` before listing again, so that a
#: burst of notifications costs one listing.
RELIST_AFTER_SECONDS = 0.2
#: Seconds after a server went down before a host's new task (``set_task``, ``select_context``) starts
#: it again; also how long a connection must have lasted for its loss to earn another restart at once.
RETRY_SECONDS = 60.0
#: Characters of a failed server's stderr named in its error.
STDERR_CHARS = 300


class LinkOwner(Protocol):
    """What a :class:`Link` needs of the gateway that owns it."""

    #: Seconds a down server stays down before a new task starts it again.
    retry_seconds: float

    async def apply_listing(self, server: str, entries: list[dict[str, Any]]) -> bool:
        """Apply a server's tool list; whether its tools changed (then the hosts were told)."""
        ...

    async def offer_changed(self) -> None:
        """Tell every host that its tool list changed."""
        ...


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


class Link:
    """A downstream server: its connection, kept by :meth:`run` (a task of the gateway's task group)
    from the gateway's start to its end, restarted as the module docstring says.

    ``state``: ``idle`` (not started yet), ``starting``, ``up``, ``down`` (its tools are not offered)
    or ``stopped`` (the gateway ended)."""

    def __init__(self, server: McpServer, config: ListConfig, gateway: LinkOwner) -> None:
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
        #: Whether the first start has ended (up or down): a task before it would miss the server's tools.
        self.settled = False
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
        if state in ("up", "down", "stopped"):
            self.settled = True
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
                        try:
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
                        finally:
                            self._conn_tg = None  # closed: a notification arriving now starts nothing
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
        try:
            self._conn_tg.start_soon(self._relist_until_settled)
        except RuntimeError:  # the connection is ending (its task group closed): its next start lists anyway
            self._relisting = False

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

    async def first_start(self) -> None:
        """Return once the first start has ended (the server is up and listed, or down); at once when
        it has. The caller bounds the wait (a start is bounded by :attr:`ListConfig.timeout`, twice
        with the quick restart)."""
        import anyio

        while not self.settled:
            if self._changed is None:  # run() has not begun yet (it was just scheduled)
                await anyio.sleep(0.01)
            else:
                await self._changed.wait()

    def retry(self) -> bool:
        """Start a down server again when it has been down for :attr:`LinkOwner.retry_seconds`; whether it
        was (its state is ``starting`` from then on, until it is up or down again)."""
        if self.state == "down" and time.monotonic() - self.down_since >= self.gateway.retry_seconds:
            if self._wake is not None:
                self.state = "starting"  # at once: a task waiting for it sees it start (run() sets it too)
                self._wake.set()
                return True
        return False

    async def settle(self) -> None:
        """Return once the server is not starting (up, or down; its first start ended); at once when it is
        not."""
        import anyio

        while not self.settled or self.state in ("starting", "idle"):
            if self._changed is None:  # run() has not begun yet (it was just scheduled)
                await anyio.sleep(0.01)
            else:
                await self._changed.wait()

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
