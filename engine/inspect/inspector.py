"""``contextsieve inspect``: what the page shows, per message, about the request context and why.

For a message typed on the page, or for each turn of a saved session (``--session FILE``), the page
draws the request context as seed 001 does (rules, references, tools and stashed segments in
columns, a badge per include mode, scores as bars with their numbers), the near misses (the best
items below the cut, each with :func:`~contextsieve.session.explain.explain_item`'s reasons, which
``Session.explain`` gives too), the tool offer mode and whether the prompt-cache prefix stayed
byte-identical to the previous message's, and, with a stash store, the stash's hits for the message.
:class:`Inspector` keeps the page's session and answers with JSON-ready dicts (shaped by
:mod:`.views`); :mod:`.app` serves them, :mod:`.server` runs the app.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextsieve.agent.items import IncludeMode, ItemKey
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError, check_text
from contextsieve.inspect.views import (
    PREVIEW_CHARS,
    compare_contexts,
    describe_item,
    prefix_digests,
    recorded_context,
    round_score,
    shown_context,
)
from contextsieve.selection.context import ContextEntry, RequestContext
from contextsieve.session.assembly import Request
from contextsieve.session.explain import explain_item
from contextsieve.session.offer import OfferConfig
from contextsieve.session.session import Session

if TYPE_CHECKING:
    from contextsieve.stash.store import StashStore

__all__ = [
    "Inspector",
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
            :class:`~contextsieve.session.offer.OfferConfig`).
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
            recorded = recorded_context(history, i)
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
            if recorded is not None and recorded.settings.get("task_step"):
                replay.continue_task()  # a step of the task the turns before it replayed
            else:
                replay.new_task()
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
                turn.update(shown_context(agent, recorded, texts))
                turn["recorded"] = compare_contexts(recorded, req.context, notes)
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
            **shown_context(self.engine.agent, ctx, req.stash_texts),
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
                        **describe_item(agent, key),
                        "domain": d.name,
                        "rank": rank,
                        "similarity": round_score(sel.sim),
                        "score": round_score(sel.score),
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
                "similarity": round_score(r.similarity),
                "keyword": round_score(r.keyword),
                "score": round_score(r.score),
                "tokens": r.segment.tokens,
                "timestamp": r.segment.timestamp.isoformat(),
                "preview": r.segment.preview(PREVIEW_CHARS),
                "in_request": r.segment.session == session.stash_session and r.segment.id in brought,
            }
            for r in found
        ]
        return out
