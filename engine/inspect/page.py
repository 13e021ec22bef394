"""``contextsieve inspect``: a local web page showing, per message, the request context and why.

For a message typed on the page, or for each turn of a saved session (``--session FILE``), the page
draws the request context as seed 001 does (rules, references, tools and stashed segments in
columns, a badge per include mode, scores as bars with their numbers), the near misses (the best
items below the cut, each with :func:`~contextsieve.session.explain.explain_item`'s reasons, which
``Session.explain`` gives too), the tool offer mode and whether the prompt-cache prefix stayed
byte-identical to the previous message's, and, with a stash store, the stash's hits for the message.

The page is static HTML with a little vanilla JavaScript that renders the JSON endpoints below (all
text goes in as text nodes, never as markup). The HTTP stack is the one ``serve --transport http``
runs (Starlette under uvicorn, from the MCP SDK: the ``mcp`` extra), bound to 127.0.0.1 only.

Endpoints: ``GET /`` (the page), ``GET /api/info``, ``GET /api/turns`` (the saved session's turns,
replayed), ``POST /api/select`` with ``{"message": "..."}`` (a turn of the page's session), ``POST
/api/reset`` (a new page session). Bad input is a 4xx JSON ``{"error": "..."}``: an empty or
oversize message, a body over :data:`MAX_BODY_BYTES` (413), a body that is not JSON (400), another
content type than ``application/json`` (415), a request from another origin or host name (403).
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, MissingExtraError, UnknownItemError, check_text
from contextsieve.selection.context import ContextEntry, RequestContext, StashedEntry, shown_order
from contextsieve.session.assembly import Request
from contextsieve.session.explain import explain_item
from contextsieve.session.session import Message, OfferConfig, Session

if TYPE_CHECKING:
    from contextsieve.stash.store import StashStore

__all__ = [
    "Inspector",
    "InspectServer",
    "build_app",
    "page_file",
    "prefix_digests",
    "MAX_BODY_BYTES",
    "MAX_MESSAGE_CHARS",
    "NEAR_MISSES",
    "STASH_HITS",
]

#: Largest request body the page's endpoints read (413 over it).
MAX_BODY_BYTES = 256 * 1024
#: Longest message accepted (characters).
MAX_MESSAGE_CHARS = 20_000
#: Near misses shown per search domain (the best items the cut left out).
NEAR_MISSES = 3
#: Stash hits shown per message.
STASH_HITS = 8
#: Messages of the page's session history kept (the selection does not read the history; the payload does).
MAX_HISTORY = 200

_COLUMNS = {ItemKind.RULE: "rules", ItemKind.REFERENCE: "references", ItemKind.TOOL: "tools"}
_PREVIEW = 300


def prefix_digests(request: Request) -> dict[str, dict[str, Any]]:
    """The provider-cache prefixes of ``request``: for the deferred Anthropic payload
    (``request.anthropic(tools="deferred")``) and for the payload of the session's own offer
    (``request.anthropic()``, the tools the offer mode chose), the sha256 and length of the compact
    JSON of ``[tools, system]`` (the order the provider's cache reads them in) and the number of
    tools. Two requests' prefixes are byte-identical exactly when the digests are equal."""
    out: dict[str, dict[str, Any]] = {}
    for name, payload in (("deferred", request.anthropic(tools="deferred")), ("selected", request.anthropic())):
        data = json.dumps(
            [payload["tools"], payload["system"]], ensure_ascii=False, separators=(",", ":"), sort_keys=False
        ).encode("utf-8", "surrogatepass")
        out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "tools": len(payload["tools"])}
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _message(value: object) -> str:
    """A message from the page: a non-blank string of at most :data:`MAX_MESSAGE_CHARS` characters."""
    if not isinstance(value, str):
        raise InputError("message must be a string")
    if not value.strip():
        raise InputError("message is empty: type a message to select the context for")
    if len(value) > MAX_MESSAGE_CHARS:
        raise InputError(f"message has {len(value)} characters; the limit is {MAX_MESSAGE_CHARS}")
    return check_text(value, "the message")


class Inspector:
    """What the page shows, as JSON-ready dicts (the web server is :func:`build_app`).

    Args:
        engine: the agent's engine.
        session_file: a session saved by :meth:`Session.save`: :meth:`turns` replays its turns, and
            typed messages continue it (its items, settings and history).
        stash: a stash store: its hits for each message (across its sessions), and the segments the
            page's session brings back into requests.
        stash_session: the page session's name in the stash when no session file names one
            (default ``"default"``, the stash's default session).
        offer: the tool offer mode of the page's session (``"request"`` or ``"stable"``, see
            :class:`~contextsieve.session.session.OfferConfig`).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        session_file: str | Path | None = None,
        stash: StashStore | None = None,
        stash_session: str | None = None,
        offer: str = "request",
    ) -> None:
        self.engine = engine
        self.stash = stash
        self.offer = OfferConfig(mode=offer)
        self.session_file = Path(session_file) if session_file is not None else None
        self._stash_session = stash_session
        self._lock = threading.Lock()
        self._turns: list[dict[str, Any]] | None = None
        self._session = self._new_session()
        self._previous = self._last_prefix(self._session)
        #: user turns of the session file (0 without one)
        self._file_turns = sum(1 for m in self._session.history if m.role == "user")

    # -- sessions ---------------------------------------------------------------------------------

    def _new_session(self) -> Session:
        if self.session_file is not None:
            s = self.engine.load_session(self.session_file, stash=self.stash)
            s.offer = self.offer
            return s
        name = self._stash_session
        if name is None and self.stash is not None:
            from contextsieve.stash.options import DEFAULT_SESSION

            name = DEFAULT_SESSION
        return self.engine.session(stash=self.stash, stash_session=name, offer=self.offer)

    def _last_prefix(self, session: Session) -> dict[str, dict[str, Any]] | None:
        """The prefixes of the session's last recorded request (rebuilt from its context), if any."""
        for i in range(len(session.history) - 1, -1, -1):
            m = session.history[i]
            if m.context is not None:
                try:
                    return prefix_digests(session.request_for(m.context, m.context.query))
                except ContextSieveError:
                    return None
        return None

    def reset(self) -> dict[str, Any]:
        """Start the page's session again (from the session file, when there is one)."""
        with self._lock:
            self._session = self._new_session()
            self._previous = self._last_prefix(self._session)
        return {"reset": True, "history": len(self._session.history)}

    # -- what the page asks for -------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The agent, the page session's settings and what the page was started with."""
        from contextsieve import __version__

        agent = self.engine.agent
        stash = None
        if self.stash is not None:
            stash = {"store": self.stash.backend.location, "session": self._session.stash_session}
        return {
            "version": __version__,
            "agent": agent.name,
            "description": str(agent.metadata.get("description") or ""),
            "counts": {"rules": len(agent.rules), "references": len(agent.references), "tools": len(agent.tools)},
            "offer": {"mode": self.offer.mode, "budget": self.offer.budget},
            "session_file": str(self.session_file) if self.session_file is not None else None,
            "turns": self._file_turns,
            "stash": stash,
            "limits": {"max_body_bytes": MAX_BODY_BYTES, "max_message_chars": MAX_MESSAGE_CHARS},
            "load_warnings": list(agent.load_warnings),  # keys of the agent file nobody reads, and the like
        }

    def select(self, message: object) -> dict[str, Any]:
        """The page session's request for ``message`` (a turn: it is recorded with an empty reply),
        analysed: see :meth:`analyse`."""
        text = _message(message)
        with self._lock:
            s = self._session
            t = time.perf_counter()
            req = s.build_request(text)
            ms = (time.perf_counter() - t) * 1000
            out = self.analyse(s, req, text, ms, self._previous)
            self._previous = prefix_digests(req)
            s.record_reply(req, "")
            del s.history[:-MAX_HISTORY]
        return out

    def turns(self) -> list[dict[str, Any]]:
        """Each user turn of the session file: the context recorded for it, and a replay now (the
        turn's message with the session items the recording names and the history before it), whose
        search trace gives the near misses and whose payload gives the prefix, compared with the
        previous turn's."""
        with self._lock:
            if self._turns is None:
                self._turns = self._replay()
            return self._turns

    def _replay(self) -> list[dict[str, Any]]:
        if self.session_file is None:
            return []
        replay = self.engine.load_session(self.session_file, stash=self.stash)
        replay.offer = self.offer
        agent = self.engine.agent
        history = list(replay.history)
        items: list[tuple[ItemKey, IncludeMode]] = replay.items()
        previous: dict[str, dict[str, Any]] | None = None
        out: list[dict[str, Any]] = []
        for i, m in enumerate(history):
            if m.role != "user":
                continue
            recorded = _recorded_context(history, i)
            notes: list[str] = []
            if recorded is not None:
                wanted = [
                    (e.key, e.mode) for e in recorded.entries if e.mode in (IncludeMode.ALWAYS, IncludeMode.MANUAL)
                ]
                gone = [str(k) for k, _ in wanted if not agent.has(k)]
                if gone:
                    notes.append("no longer in the agent: " + ", ".join(gone))
                items = [(k, mode) for k, mode in wanted if agent.has(k)]
            replay.replace_items(items)
            replay.history = history[:i]
            turn: dict[str, Any] = {"turn": len(out) + 1, "message": m.content}
            try:
                t = time.perf_counter()
                req = replay.build_request(m.content)
                ms = (time.perf_counter() - t) * 1000
            except ContextSieveError as e:
                turn["error"] = str(e)
                out.append(turn)
                continue
            turn.update(self.analyse(replay, req, m.content, ms, previous))
            previous = prefix_digests(req)
            if recorded is not None:
                try:  # the texts of its stashed segments still in the stash
                    texts = replay.request_for(recorded, m.content).stash_texts
                except ContextSieveError:  # an item it names is no longer in the agent
                    texts = {}
                turn.update(_shown(agent, recorded, texts))
                turn["recorded"] = _compare(recorded, req.context, notes)
            else:
                turn["recorded"] = None
            out.append(turn)
        return out

    def analyse(
        self,
        session: Session,
        req: Request,
        message: str,
        ms: float,
        previous: dict[str, dict[str, Any]] | None,
    ) -> dict[str, Any]:
        """What the page shows for one request: the context in columns, the near misses with their
        reasons, dropped items and notes, the offer and prefix (``same_as_previous``: whether each
        prefix is byte-identical to ``previous``'s; ``None`` for a first message) and the stash hits."""
        ctx = req.context
        prefixes = prefix_digests(req)
        for name, p in prefixes.items():
            p["same_as_previous"] = None if previous is None else previous[name]["sha256"] == p["sha256"]
        loaded = [t["name"] for t in req.tools if t["name"] not in req.always]
        deferred = req.anthropic(tools="deferred")["tools"]
        trace = req.trace
        cut = []
        if trace is not None:
            for d in trace.domains:
                st = d.settings
                cut.append(
                    {
                        "domain": d.name,
                        "top_k": st.context_top_k,
                        "top_n": st.context_top_n,
                        "include_score": st.context_include_score,
                    }
                )
        out: dict[str, Any] = {
            "message": message,
            "query": ctx.query,
            "query_chunks": list(ctx.query_chunks),
            "ms": round(ms, 1),
            **_shown(self.engine.agent, ctx, req.stash_texts),
            "cut": cut,
            "near_misses": self._near_misses(session, req),
            "offer": {
                "mode": session.offer.mode,
                "budget": session.offer.budget,
                "offered": [t["name"] for t in req.tools],
                "deferred": {
                    "declared": len(deferred),
                    "deferred": sum(1 for t in deferred if t.get("defer_loading")),
                    "loaded": loaded,
                },
            },
            "prefix": prefixes,
            "stash": self._stash_hits(session, ctx, message),
        }
        return out

    def _near_misses(self, session: Session, req: Request) -> list[dict[str, Any]]:
        """Per search domain, the best :data:`NEAR_MISSES` items the search grouped but the cut left
        out, with the reasons :func:`explain_item` gives (what ``session.explain`` says)."""
        trace = req.trace
        if trace is None:
            return []
        agent = self.engine.agent
        ctx = req.context
        taken = {e.key for e in ctx.entries} | {d.entry.key for d in ctx.dropped if isinstance(d.entry, ContextEntry)}
        in_session = dict(session.items())
        out: list[dict[str, Any]] = []
        for d in trace.domains:
            n = 0
            for rank, sel in enumerate(d.grouped, 1):
                key = trace.order[sel.item]
                if key in taken:
                    continue
                item = agent.get(key)
                ex = explain_item(
                    key,
                    req,
                    session_mode=in_session.get(key),
                    include_mode=agent.include_mode(item),
                    tool_available=True,  # grouped items were candidates: usable in this session
                    item=item,
                )
                out.append(
                    {
                        **_describe(agent, key),
                        "domain": d.name,
                        "rank": rank,
                        "similarity": _round(sel.sim),
                        "score": _round(sel.score),
                        "included": ex.included,
                        "reasons": list(ex.reasons),
                        "explanation": str(ex),
                    }
                )
                n += 1
                if n == NEAR_MISSES:
                    break
        return out

    def _stash_hits(self, session: Session, ctx: RequestContext, message: str) -> dict[str, Any] | None:
        """The stash's best segments for the message across its sessions (``None`` without a stash)."""
        if self.stash is None:
            return None
        query = ctx.query or message
        out: dict[str, Any] = {"session": session.stash_session, "cross_session": True, "hits": []}
        if not query.strip():
            return out
        brought = {e.segment_id for e in ctx.stashed}
        try:
            found, _ = self.stash.retrieve_traced(
                query, session=session.stash_session, top_k=STASH_HITS, cross_session=True
            )
        except ContextSieveError as e:
            out["error"] = str(e)
            return out
        out["hits"] = [
            {
                "segment_id": r.segment.id,
                "session": r.segment.session,
                "type": r.segment.type.value,
                "similarity": _round(r.similarity),
                "keyword": _round(r.keyword),
                "score": _round(r.score),
                "tokens": r.segment.tokens,
                "timestamp": r.segment.timestamp.isoformat(),
                "preview": r.segment.preview(_PREVIEW),
                "in_request": r.segment.session == session.stash_session and r.segment.id in brought,
            }
            for r in found
        ]
        return out


def _recorded_context(history: Sequence[Message], user: int) -> RequestContext | None:
    """The request context of the reply to the user message at ``user`` (before the next user message)."""
    for m in history[user + 1 :]:
        if m.role == "user":
            return None
        if m.role == "assistant" and m.context is not None:
            return m.context
    return None


def _compare(recorded: RequestContext, now: RequestContext, notes: list[str]) -> dict[str, Any]:
    """How a replay's items differ from the recording's (by item and include mode)."""
    a = {(str(e.key), e.mode.value) for e in recorded.entries}
    b = {(str(e.key), e.mode.value) for e in now.entries}
    return {
        "same_items": a == b,
        "only_recorded": [f"{k} [{m}]" for k, m in sorted(a - b)],
        "only_replay": [f"{k} [{m}]" for k, m in sorted(b - a)],
        "notes": notes,
    }


def _describe(agent: Any, key: ItemKey) -> dict[str, Any]:
    """An item's identity for the page, and a short description when the agent still has it."""
    d: dict[str, Any] = {
        "key": str(key),
        "type": key.kind.value,
        "name": key.name,
        "server": key.server or None,
        "label": f"{key.server}:{key.name}" if key.kind is ItemKind.TOOL else key.name,
    }
    try:
        item = agent.get(key)
    except UnknownItemError:
        d["known"] = False
        d["description"] = ""
        return d
    d["known"] = True
    text = item.description or ("" if isinstance(item, Tool) else item.text)
    d["description"] = text if len(text) <= _PREVIEW else text[:_PREVIEW].rstrip() + "..."
    return d


def _shown(agent: Any, ctx: RequestContext, stash_texts: Any) -> dict[str, Any]:
    """A request context as the page draws it (seed 001): a column per kind, session items first
    (always, then manual), then searched items by score; stashed segments; dropped items; notes."""
    columns: dict[str, list[dict[str, Any]]] = {name: [] for name in _COLUMNS.values()}
    for kind, name in _COLUMNS.items():
        entries = shown_order(ctx.of_kind(kind))
        columns[name] = [
            {
                **_describe(agent, e.key),
                "mode": e.mode.value,
                "score": e.score,  # unrounded: the page shows it as `select` does (two decimals)
                "via": e.via,
                "pulled_by": str(e.pulled_by) if e.pulled_by is not None else None,
                "priority": e.priority,
            }
            for e in entries
        ]
    stashed = [_stashed(e, stash_texts.get(e.segment_id)) for e in ctx.stashed]
    dropped = []
    for x in ctx.dropped:
        if isinstance(x.entry, StashedEntry):
            d = _stashed(x.entry, stash_texts.get(x.entry.segment_id))
        else:
            d = {**_describe(agent, x.entry.key), "mode": x.entry.mode.value, "score": _round(x.entry.score)}
        dropped.append({**d, "tokens": x.tokens, "reason": x.reason})
    return {
        "summary": ctx.summary(),
        "columns": columns,
        "stashed": stashed,
        "dropped": dropped,
        "notes": list(ctx.notes),
        "tokens": ctx.tokens,
        "settings": ctx.settings,
        "context": ctx.to_dict(),
    }


def _stashed(e: StashedEntry, text: str | None) -> dict[str, Any]:
    preview = None if text is None else (text if len(text) <= _PREVIEW else text[:_PREVIEW].rstrip() + "...")
    return {
        "key": f"stash:{e.segment_id}",
        "segment_id": e.segment_id,
        "mode": IncludeMode.STASH.value,
        "segment_type": e.segment_type,
        "score": _round(e.score),
        "similarity": _round(e.similarity),
        "tokens": e.tokens,
        "timestamp": e.timestamp,
        "preview": preview,
    }


# -- the web server --------------------------------------------------------------------------------

_LOCAL_HOSTS = ("127.0.0.1", "localhost")
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _require_stack() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            "contextsieve inspect serves its page with the MCP SDK's web stack (starlette, uvicorn): "
            "pip install 'contextsieve[mcp]'"
        ) from e


def page_file(name: str) -> bytes:
    """One of the page's static files (``index.html``, ``inspect.css``, ``inspect.js``: package data of
    ``contextsieve.inspect``), as the bytes served. Every text from the JSON goes into the page through
    ``textContent``, never as markup."""
    return resources.files("contextsieve.inspect").joinpath(name).read_bytes()


def _host_name(value: str) -> str:
    """The host name of a ``Host`` header value or an origin's authority (no port, no brackets)."""
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def build_app(inspector: Inspector, *, max_body_bytes: int = MAX_BODY_BYTES, body_seconds: float = 30.0) -> Any:
    """The page's ASGI application (Starlette). Requests must name 127.0.0.1 or localhost as their
    host and, when they carry an ``Origin``, come from the page itself (403 otherwise: no other web
    site can read or drive it, also not through DNS rebinding); POST bodies must be
    ``application/json`` (415), at most ``max_body_bytes`` (413) and arrive within ``body_seconds``
    (408)."""
    _require_stack()
    import anyio
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request as HttpRequest
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def error(status: int, message: str) -> Response:
        return JSONResponse({"error": message}, status_code=status, headers=_HEADERS)

    def asset(body: bytes, media_type: str) -> Any:
        async def get(request: HttpRequest) -> Response:
            return Response(body, media_type=media_type, headers=_HEADERS)

        return get

    async def read_json(request: HttpRequest) -> Any:
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "application/json":
            raise _HttpError(415, "send the body as application/json")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            raise _HttpError(413, f"request body over {max_body_bytes} bytes")
        parts: list[bytes] = []
        seen = 0
        try:
            with anyio.fail_after(body_seconds):
                async for chunk in request.stream():
                    seen += len(chunk)
                    if seen > max_body_bytes:
                        raise _HttpError(413, f"request body over {max_body_bytes} bytes")
                    parts.append(chunk)
        except TimeoutError:
            raise _HttpError(408, f"request body not received within {body_seconds:g} s") from None
        try:
            return json.loads(b"".join(parts).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise _HttpError(400, f"the body is not valid JSON: {e}") from None
        except RecursionError:
            raise _HttpError(400, "the body is not valid JSON: nested too deeply") from None

    def api(fn: Any) -> Any:
        """An endpoint answering JSON: contextsieve's input errors as 400, others as 500, never a traceback."""

        async def endpoint(request: HttpRequest) -> Response:
            try:
                result = await fn(request)
            except _HttpError as e:
                return error(e.status, e.message)
            except (InputError, UnknownItemError) as e:
                return error(400, str(e).strip("'\""))
            except ContextSieveError as e:
                return error(500, str(e))
            except Exception as e:  # noqa: BLE001 - the page gets a message, the console one line
                print(f"contextsieve inspect: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                return error(500, f"internal error ({type(e).__name__}); see the server's console")
            return JSONResponse(result, headers=_HEADERS)

        return endpoint

    async def info(request: HttpRequest) -> Any:
        return await run_in_threadpool(inspector.info)

    async def turns(request: HttpRequest) -> Any:
        return {"turns": await run_in_threadpool(inspector.turns)}

    async def select(request: HttpRequest) -> Any:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise _HttpError(400, 'the body must be a JSON object: {"message": "..."}')
        if "message" not in body:
            raise _HttpError(400, 'the body has no "message"')
        return await run_in_threadpool(inspector.select, body["message"])

    async def reset(request: HttpRequest) -> Any:
        await read_json(request)
        return await run_in_threadpool(inspector.reset)

    async def no_icon(request: HttpRequest) -> Response:
        return Response(status_code=204, headers=_HEADERS)

    async def http_error(request: HttpRequest, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        words = {404: "no such page", 405: "method not allowed"}
        response = error(status, words.get(status, getattr(exc, "detail", "") or "error"))
        response.headers.update(getattr(exc, "headers", None) or {})  # Allow, for a 405
        return response

    app = Starlette(
        routes=[
            Route("/", asset(page_file("index.html"), "text/html; charset=utf-8"), methods=["GET"]),
            Route("/inspect.js", asset(page_file("inspect.js"), "text/javascript; charset=utf-8"), methods=["GET"]),
            Route("/inspect.css", asset(page_file("inspect.css"), "text/css; charset=utf-8"), methods=["GET"]),
            Route("/favicon.ico", no_icon, methods=["GET"]),
            Route("/api/info", api(info), methods=["GET"]),
            Route("/api/turns", api(turns), methods=["GET"]),
            Route("/api/select", api(select), methods=["POST"]),
            Route("/api/reset", api(reset), methods=["POST"]),
        ],
        exception_handlers={HTTPException: http_error},
    )

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
            host = headers.get("host", "")
            origin = headers.get("origin")
            why = None
            if _host_name(host) not in _LOCAL_HOSTS:
                why = "this page answers requests for 127.0.0.1 or localhost only"
            elif origin is not None and origin != f"http://{host}":
                why = "requests from other origins are refused"
            if why is not None:
                await error(403, why)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


class InspectServer:
    """The page served on ``127.0.0.1:port`` (``port`` 0: any free port) by uvicorn, with the header
    deadline of ``serve --transport http``. The socket is bound at construction (:attr:`url` is then
    known); :meth:`serve_forever` serves in this thread, :meth:`start` / :meth:`stop` (or ``with``) in
    a background thread."""

    def __init__(
        self,
        inspector: Inspector,
        *,
        port: int = 0,
        header_seconds: float = 10.0,
        body_seconds: float = 30.0,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InputError(f"port must be an int from 0 to 65535, got {port!r}")
        app = build_app(inspector, max_body_bytes=max_body_bytes, body_seconds=body_seconds)
        import uvicorn

        from contextsieve.mcp_server.http_transport import header_deadline_protocol

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
        except OSError as e:
            sock.close()
            raise InputError(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
        self._sock = sock
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", http=header_deadline_protocol(header_seconds))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Serve until interrupted (Ctrl-C) or :meth:`stop`."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._sock.close()

    def start(self, timeout: float = 30.0) -> InspectServer:
        """Serve in a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="contextsieve-inspect", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ContextSieveError("the inspect server did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the background thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> InspectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
