"""What the MCP server and the gateway share: limits, the session registry, connection state, the
JSON shapes of results and the mapping of contextsieve errors to MCP errors."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextsieve.engine import Engine
from contextsieve.errors import (
    ContextSieveError,
    InputError,
    StashIntegrityError,
    UnknownItemError,
    UnknownSegmentError,
    brief,
)
from contextsieve.mcp_server.connections import connection_state
from contextsieve.selection.context import ContextEntry, StashedEntry
from contextsieve.session.offer import OfferConfig
from contextsieve.session.session import Session
from contextsieve.session.stash_link import StashSettings
from contextsieve.stash.store import StashStore

_log = logging.getLogger(__name__)

__all__ = [
    "HISTORY_TURNS",
    "STATE_KEY",
    "ServeConfig",
    "SessionRegistry",
    "progress_reporter",
    "Warmup",
    "handle_owner",
    "reference_item",
    "mcp_error",
    "invalid_params",
]


#: Requests whose contexts a served session keeps in its history (older ones are dropped).
HISTORY_TURNS = 100


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Limits of the MCP server.

    Attributes:
        max_message_chars: longest ``message`` / ``query`` accepted (default 100,000 characters).
        max_limit: largest ``search_tools`` limit (default 50).
        max_request_bytes: largest HTTP request body (default 1 MB; HTTP only).
        header_seconds: an HTTP connection whose request line and headers have not all arrived this
            long after it opened (or after its previous response) is closed (default 10 s; HTTP only:
            a client that trickles its headers, or sends none, holds no connection past it).
        body_seconds: a request whose body has not all arrived this long after its headers is
            answered 408 (default 30 s; HTTP only).
        max_sessions: sessions kept at once (default 1,000; the least recently used is dropped).
        session_idle_seconds: a session unused this long is dropped (default 3,600).
        stash_session: with a stash, the stash session every call uses (default None: a call without a
            handle uses the agent's namespace, on either protocol, so a host finds what it stashed after a
            restart; a private handle of the stateless protocol uses its own).
        stash_cross_session: with a stash, retrieval searches every stash session (default False).
        stash_per_connection: a connection of the handshake protocol stashes into a namespace of its
            own (its session handle) instead of the agent's: isolation per connection, at the price that
            a host's next process cannot find what this one stashed (default False).
        max_stash_segments: most segments one ``stash_context`` call may carry (default 1,000).
        learn_from_calls: the gateway records the current task's message as an example request of each
            ``agent``-mode tool the host calls successfully (learning from use), and when the next task
            begins, the outcome of the last one (:meth:`Session.record_outcome`: the tools it selected
            and the host never called become misses); default True.
        offer: how the gateway's conversations offer tools across their tasks: the sessions' own
            :class:`~contextsieve.session.offer.OfferConfig` (default: each task its own selection).
            ``OfferConfig(mode="stable", span="session")`` (``contextsieve gateway --stable-offer``): each
            task adds the tools it selects, within ``budget``, so the host's tool list (and the
            provider's prompt cache) changes only when a task needs a tool not offered yet.
    """

    max_message_chars: int = 100_000
    max_limit: int = 50
    max_request_bytes: int = 1_000_000
    header_seconds: float = 10.0
    body_seconds: float = 30.0
    max_sessions: int = 1000
    session_idle_seconds: float = 3600.0
    stash_session: str | None = None
    stash_cross_session: bool = False
    stash_per_connection: bool = False
    max_stash_segments: int = 1000
    learn_from_calls: bool = True
    offer: OfferConfig = OfferConfig()


def reference_item(entry: ContextEntry | StashedEntry) -> dict[str, Any]:
    """A request-context item in the reference shape (see :meth:`ContextEntry.to_dict`)."""
    return entry.to_dict()


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


#: ``report(progress, total, message)``: sends a progress notification for the request being answered
#: (the SDK's ``report_progress``; a no-op when the request carried no progress token).
ProgressReport = Callable[[float, "float | None", "str | None"], Awaitable[None]]


class Warmup:
    """What ``serve`` and the gateway do in a background thread from their start, so that they answer
    ``initialize``, ``tools/list`` and the other listings at once: first ``connect`` (``serve``
    without ``--offline``: the agent's MCP servers listed, :meth:`Engine.connect`), then
    :meth:`Engine.prepare` (the agent indexed, the embedding model loaded; its graph built on a first
    run). A call that needs them awaits :meth:`wait`, which sends the caller progress notifications
    meanwhile; the one load is never started twice, and when it failed every call that needs it gets
    the cause as its error (the server keeps answering the rest). What happens is said on stderr
    through :mod:`contextsieve.progress` (started, ready with its seconds) and the log (a failure).

    The thread starts with the transport but lets the host's first answers go first: its work begins
    once the transport has sent :attr:`first_answers` messages (:meth:`host_answered`; the answers to
    ``initialize`` and ``tools/list``), when a call waits for it, or ``grace`` seconds after the start,
    whichever comes first, so those answers do not share the CPU with the model load.

    Args:
        engine: the served engine.
        connect: run before the model load (``None``: nothing to list). An exception it raises is
            logged and the model still loads.
        interval: seconds between two progress notifications to a waiting call (default 0.5).
        grace: most seconds the work waits for the host's first answers (default 1.0; 0: at once).
    """

    #: Messages sent to the host after which the background work begins (before ``grace`` runs out).
    first_answers = 2

    def __init__(
        self,
        engine: Engine,
        *,
        connect: Callable[[], None] | None = None,
        interval: float = 0.5,
        grace: float = 1.0,
    ) -> None:
        self.engine = engine
        self._connect = connect
        self.interval = interval
        self.grace = grace
        self._go = threading.Event()
        self._answers = 0
        #: Set once the listing step has ended (at once without one).
        self.listed = threading.Event()
        if connect is None:
            self.listed.set()
        #: Set once the model load has ended, loaded or failed.
        self.ready = threading.Event()
        #: Why the model load failed (``None`` while it runs or when it succeeded).
        self.error: BaseException | None = None
        #: Seconds from :meth:`start` to the end of the model load (``None`` until then).
        self.seconds: float | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def start(self, *, after_answers: bool = True) -> None:
        """Start the background thread (once; a second call does nothing). Call it right before the
        transport starts. ``after_answers=False``: the work begins at once (a transport that does not
        call :meth:`host_answered`, such as HTTP with its many clients)."""
        if not after_answers:
            self._go.set()
        with self._lock:
            if self._thread is not None:
                return
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="contextsieve-warmup", daemon=True)
        from contextsieve.progress import note

        what = "listing the agent's MCP servers and loading the model" if self._connect else "loading the model"
        note(f"{what} in the background; calls that need it wait for it")
        self._thread.start()

    def host_answered(self) -> None:
        """The transport sent the host a message (the work begins after :attr:`first_answers`)."""
        self._answers += 1
        if self._answers >= self.first_answers:
            self._go.set()

    def _run(self) -> None:
        from contextsieve.progress import note

        self._go.wait(self.grace)
        try:
            if self._connect is not None:
                self._connect()
                note(f"listed the agent's MCP servers ({time.monotonic() - self._started:.1f} s)")
        except Exception as e:  # noqa: BLE001 - reported; the model still loads
            _log.error("listing the agent's MCP servers failed: %s", _cause(e))
        finally:
            self.listed.set()
        try:
            self.engine.prepare()
        except Exception as e:  # noqa: BLE001 - kept for the calls that need the model, and logged
            self.error = e
            self.seconds = time.monotonic() - self._started
            _log.error(
                "indexing the agent and loading the embedding model failed after %.1f s: %s; the calls that "
                "need the model fail with this error (the server goes on; restart it once the cause is fixed)",
                self.seconds,
                _cause(e),
            )
        else:
            self.seconds = time.monotonic() - self._started
            note(f"the model is ready ({self.seconds:.1f} s after the start); calls no longer wait")
        finally:
            self.ready.set()

    async def wait(self, what: str, report: ProgressReport | None = None, *, model: bool = True) -> None:
        """Wait, without blocking the event loop, until the listing (``model=False``) or the model load
        has ended; meanwhile ``report`` gets a progress notification at once and every
        :attr:`interval` seconds (progress: seconds waited). ``what`` names the call (in the message
        and the error). Starts the work if nobody did. Raises :class:`ContextSieveError` with the
        cause when the model load failed (``model=True``)."""
        import anyio

        event = self.ready if model else self.listed
        if not event.is_set():
            self._go.set()  # a call waits: no more grace
            self.start()
            from contextsieve.progress import note

            note(f"{what} waits for {self._awaited(model)}")
            t0 = time.monotonic()
            next_report = t0
            while not event.is_set():
                now = time.monotonic()
                if report is not None and now >= next_report:
                    waited = now - t0
                    message = f"waiting for {self._awaited(model)} ({waited:.1f} s so far)"
                    try:
                        await report(round(waited, 3) + 0.001, None, message)  # > 0 and increasing
                    except Exception as e:  # noqa: BLE001 - progress is advisory: the wait goes on
                        _log.debug("progress notification not sent: %s", e)
                    next_report = now + self.interval
                await anyio.sleep(0.05)
        if model and self.error is not None:
            raise ContextSieveError(
                f"{what} cannot run: indexing the agent and loading the embedding model failed at the server's "
                f"start ({_cause(self.error)}); the server answers the calls that do not need the model; "
                "restart it once the cause is fixed"
            ) from self.error

    def _awaited(self, model: bool) -> str:
        """What a waiting call waits for now."""
        listing = "the agent's MCP servers to be listed"
        if not model:
            return listing
        loading = "the embedding model to load"
        return loading if self.listed.is_set() else f"{listing} and {loading}"


def _cause(e: BaseException) -> str:
    """An error's text, with its type when it is not one of contextsieve's own."""
    return str(e) if isinstance(e, ContextSieveError) else f"{type(e).__name__}: {e}"


#: Levels of MCP's ``notifications/message`` (RFC 5424's), least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
#: Key of a stateful connection's log level (set by ``logging/setLevel``) in its state.
LOG_LEVEL_KEY = "contextsieve.log-level"
#: The level below which nothing is sent to a connection that never set one: ``notice``, the level
#: of a request context's notes (what a host should see: a dropped session, a store that could not
#: be read, a budget that cut items).
DEFAULT_LOG_LEVEL = "notice"


def log_notes(ctx: Any, notes: Sequence[str], level: str = "notice") -> int:
    """Send each note to the client as a ``notifications/message`` of ``level`` (logger
    ``contextsieve``) from a tool's worker thread, for this request; returns how many were sent. A
    stateful connection gets only what its ``logging/setLevel`` level (default
    :data:`DEFAULT_LOG_LEVEL`) allows; on the stateless protocol the SDK sends only what the request's
    ``_meta`` log level asked for. A message that cannot be sent never fails the call."""
    import warnings

    import anyio.from_thread

    state = connection_state(ctx)
    floor = str((state or {}).get(LOG_LEVEL_KEY, DEFAULT_LOG_LEVEL))
    if state is not None and LOG_LEVELS.index(level) < LOG_LEVELS.index(floor):
        return 0
    sent = 0

    async def send(note: str) -> None:
        await ctx.log(level, note, logger_name="contextsieve")

    for note in notes:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks the logging capability deprecated from 2026-07-28
                anyio.from_thread.run(send, note)
            sent += 1
        except Exception as e:  # noqa: BLE001 - a log message is advisory: the call goes on
            _log.debug("log message not sent: %s", e)
    return sent


def set_log_level(state: dict[str, Any] | None, level: object) -> None:
    """``logging/setLevel``: keep ``level`` as the connection's (a request of the stateless protocol has
    no connection to keep it on: its level travels in each request's ``_meta``)."""
    if level not in LOG_LEVELS:
        raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}")
    if state is not None:
        state[LOG_LEVEL_KEY] = level


#: Key of the session handle in a stateful connection's state.
STATE_KEY = "contextsieve.session.session"
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


#: Key in the stash store of the random key that signs stateless handles (shared by every server process
#: on the store, so any of them can check a handle another one made).
HANDLE_KEY = "mcp:handle-key"
#: Prefix of the store key holding a stateless handle's session items (followed by the handle's sha256).
ITEMS_KEY = "mcp:session-items:"
#: The registry's name of the agent session (:meth:`SessionRegistry.agent_session`); never a handle.
AGENT_HANDLE = "agent"


class SessionRegistry:
    """Sessions by handle: random, bounded in number (LRU) and idle time (see :class:`ServeConfig`).

    Handles of the stateless protocol are signed (``cs-`` + 128 random bits + ``.`` + an HMAC-SHA256
    tag under a key kept in the stash store, or, without a stash, made per process): a process that
    does not hold such a session (it was evicted, or another server process on the same store made
    it) checks the tag and takes it up under the same handle, with its stash namespace (the handle)
    and, from the store, its session items; only its request history (a record, not used in
    selection) is per process. So any process on one store answers any stateless call, and eviction
    never loses a session's stashed segments or moves a client to another session.

    A stateless call without a handle uses the **agent session**: one per agent and store, its stash
    part the agent's namespace (:meth:`default_namespace`) and its session items kept in the store, so
    what such a host stashes or pins it finds in its next process; the handle the call answers with
    names a private session of its own (its own namespace) from the next call on. A stateful
    connection's handles are plain random strings bound to that connection (:func:`handle_owner`); its
    session's stash part is the agent's namespace too, unless ``ServeConfig.stash_per_connection``."""

    def __init__(self, engine: Engine, config: ServeConfig, stash: StashStore | None = None) -> None:
        self._engine, self._config, self._stash = engine, config, stash
        self._by_handle: OrderedDict[str, tuple[Session, float, str]] = OrderedDict()  # session, used, owner
        self._applied: dict[str, str | None] = {}  # stateless handle -> the stored items record last applied
        self._key: bytes | None = None
        self._agent: Session | None = None  # the agent session: calls of the stateless protocol without a handle
        self._lock = threading.Lock()
        if stash is not None:  # read (or made) once, now: a store down later does not stop new sessions
            self._handle_key()

    def _expire(self, now: float) -> None:
        idle = self._config.session_idle_seconds
        while self._by_handle:
            handle, (_, used, _) = next(iter(self._by_handle.items()))
            if now - used <= idle and len(self._by_handle) <= self._config.max_sessions:
                break
            del self._by_handle[handle]
            self._applied.pop(handle, None)

    def default_namespace(self) -> str:
        """The stash session of calls that name no handle (either protocol): one per agent, kept in the
        store, so what a host stashed it finds again after a restart (an LLM does not reliably thread a
        handle through its calls)."""
        return "agent:" + self._engine.agent.identity

    def agent_session(self) -> Session:
        """The agent session (see the class docstring): made once, its items brought up to what the
        store holds on every use (another process may have changed them)."""
        with self._lock:
            session = self._agent
            if session is None:
                session = self._agent = self._make(self.default_namespace())
        self._sync_items(AGENT_HANDLE, session)
        return session

    # -- signed stateless handles ---------------------------------------------------------------------

    def _handle_key(self) -> bytes:
        """The key stateless handles are signed with: the store's (made once, by whichever process
        comes first), else this process's own (also for a store this user may only read that has none)."""
        if self._key is None:
            if self._stash is None:
                self._key = secrets.token_bytes(32)
            else:
                if self._stash.backend.read_only:
                    stored = self._stash.read_value(HANDLE_KEY) or secrets.token_hex(32)
                else:
                    stored = self._stash.write_value(HANDLE_KEY, secrets.token_hex(32), replace=False)
                try:
                    self._key = bytes.fromhex(stored)
                except ValueError as e:
                    raise StashIntegrityError(f"the stash's MCP handle key ({HANDLE_KEY}) is damaged") from e
        return self._key

    def _tag(self, body: str) -> str:
        digest = hmac.new(self._handle_key(), body.encode(), hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def _signed(self) -> str:
        body = "cs-" + secrets.token_urlsafe(16)
        return body + "." + self._tag(body)

    def _valid(self, handle: str) -> bool:
        """Whether ``handle`` is a stateless handle signed with this store's key."""
        body, dot, tag = handle.rpartition(".")
        return (
            bool(dot)
            and body.startswith("cs-")
            and len(handle) < 100
            and hmac.compare_digest(tag.encode(), self._tag(body).encode())
        )

    # -- session items kept in the store ------------------------------------------------------------

    def _items_key(self, handle: str) -> str:
        if handle == AGENT_HANDLE:  # one per agent in a store: its namespace names it
            handle = self.default_namespace()
        return ITEMS_KEY + hashlib.sha256(handle.encode()).hexdigest()

    def _sync_items(self, handle: str, session: Session) -> None:
        """Bring a stateless session's items up to what the store holds (another process may have
        changed them). While the store cannot be read the session goes on with what it has, and says so."""
        if self._stash is None:
            return
        try:
            record = self._stash.read_value(self._items_key(handle))
        except ContextSieveError as e:
            session.add_note(f"session items not read from the stash store ({e}); using this process's copy")
            return
        if record is None or record == self._applied.get(handle):
            return
        try:
            pairs = [(i["key"], i["mode"]) for i in json.loads(record)]
            session.replace_items([(k, m) for k, m in pairs if self._engine.agent.has(k)])
        except (ValueError, KeyError, TypeError, ContextSieveError) as e:
            session.add_note(f"the session items kept in the stash store could not be read back ({brief(str(e))})")
            return
        self._applied[handle] = record

    def change_items(self, handle: str, session: Session, change: Callable[[], None]) -> None:
        """Run ``change`` (an add or remove on ``session``) and, for a stateless handle with a stash, keep
        the session's items in the store (so every server process sees them). If they cannot be stored,
        the session's items are put back as they were and the error is raised: nothing changed."""
        before = session.items()
        change()
        if session is self._agent:
            handle = AGENT_HANDLE
        elif self._stash is None or not self._valid(handle):
            return
        if self._stash is None:
            return
        record = json.dumps([{"key": str(k), "mode": m.value} for k, m in session.items()])
        try:
            self._stash.write_value(self._items_key(handle), record)
        except BaseException:
            session.replace_items(before)
            raise
        with self._lock:
            self._applied[handle] = record

    # -- registry -------------------------------------------------------------------------------------

    def get(self, handle: str, owner: str) -> Session | None:
        """The session of ``handle`` if ``owner`` (:func:`handle_owner`) may use it: a live one, or, for a
        valid signed stateless handle, the same session started again (see the class docstring)."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            got = self._by_handle.get(handle)
            if got is not None:
                if got[2] != owner:
                    return None  # one answer for unknown and not yours: a handle's existence is not told
                self._by_handle[handle] = (got[0], now, owner)
                self._by_handle.move_to_end(handle)
        if got is not None:
            if owner == STATELESS:
                self._sync_items(handle, got[0])
            return got[0]
        if owner != STATELESS or not self._valid(handle):
            return None
        _, session = self.new(owner, handle=handle)
        self._sync_items(handle, session)
        return session

    def _make(self, namespace: str) -> Session:
        """A new session whose stash part is ``namespace`` (or ``ServeConfig.stash_session``)."""
        if self._stash is None:
            return self._engine.session()
        return self._engine.session(  # select_context brings back the namespace's stashed segments
            stash=self._stash,
            stash_session=self._config.stash_session or namespace,
            stash_settings=StashSettings(cross_session=self._config.stash_cross_session),
        )

    def new(self, owner: str, *, shared: bool = False, handle: str | None = None) -> tuple[str, Session]:
        """A session and its handle. ``shared`` (a call of the stateless protocol that names no handle):
        the agent session (:meth:`agent_session`) with a new signed handle, which takes up a private
        session of its own when passed back. Else a new session: a stateful connection's stashes into the
        agent's namespace (its handle's with ``ServeConfig.stash_per_connection``), a stateless handle's
        into the handle's own. ``handle``: register it under this handle again (a connection whose
        session was evicted keeps its handle, and with it its stashed segments). ``owner``: who may use
        the handle (:func:`handle_owner`); a stateless owner's new handle is signed."""
        if handle is None:
            handle = self._signed() if owner == STATELESS else "cs-" + secrets.token_urlsafe(16)
        if shared and owner == STATELESS:
            return handle, self.agent_session()
        agent_namespace = owner != STATELESS and not self._config.stash_per_connection
        session = self._make(self.default_namespace() if agent_namespace else handle)
        now = time.monotonic()
        with self._lock:
            self._by_handle[handle] = (session, now, owner)
            self._expire(now)
        return handle, session
