"""The stash's part of a session (seed 004 inside seed 000): which stashed segments a request brings
back and within what token cap, how old messages move into the stash to keep the history under its
budget, and why a segment was or was not brought back, read from the request's retrieve trace.

A :class:`~contextsieve.session.session.Session` owns one :class:`SessionStash` and delegates to it; the stash
store itself (:class:`~contextsieve.stash.store.StashStore`) is shared by every session that names it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from contextsieve.agent.items import IncludeMode
from contextsieve.errors import InputError, StashError, UnknownSegmentError, brief
from contextsieve.retrieval.query import Query
from contextsieve.selection.context import Dropped, RequestContext, StashedEntry
from contextsieve.session.explain import Explanation

if TYPE_CHECKING:
    from contextsieve.stash.results import Retrieved, RetrieveTrace, StashResult
    from contextsieve.stash.store import StashStore

__all__ = ["StashSettings", "SessionStash", "StashedMessage", "budget_cut"]


@dataclass(frozen=True, kw_only=True)
class StashSettings:
    """How a session uses its stash.

    Attributes:
        top_k: stashed segments retrieved into each request, best first (0-100, default 3; 0: none).
        min_similarity: leave out segments whose dense cosine to the message is below this (default 0.3).
        max_tokens: at most this many model tokens of stashed segments per request (default 2000);
            segments beyond it are recorded as dropped.
        history_budget: keep the session's history under this many tokens (counted as the token budget
            is) by stashing its oldest messages and tool results after each reply; never the latest
            turn (the last user message and what follows it). ``None`` (default): off.
        cross_session: retrieve from every session of the stash, not only this session's (default False).
    """

    top_k: int = 3
    min_similarity: float = 0.3
    max_tokens: int = 2000
    history_budget: int | None = None
    cross_session: bool = False

    def __post_init__(self) -> None:
        for name, hi in (("top_k", 100), ("max_tokens", 10**9)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                raise InputError(f"stash setting {name} must be an int in 0..{hi}, got {brief(v)}")
        m = self.min_similarity
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not -1.0 <= m <= 1.0:
            raise InputError(f"stash setting min_similarity must be a number in -1..1, got {brief(m)}")
        b = self.history_budget
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise InputError(f"stash setting history_budget must be None or a positive int, got {brief(b)}")
        if not isinstance(self.cross_session, bool):
            raise InputError(f"stash setting cross_session must be true or false, got {brief(self.cross_session)}")


@dataclass(frozen=True)
class StashedMessage:
    """A history message as the stash receives it: its text, role, tool name and time (UNIX seconds)."""

    content: str
    role: str
    name: str | None
    created: float


def budget_cut(costs: Sequence[int], latest_turn: int, budget: int) -> int:
    """How many of the oldest messages (token ``costs``, oldest first) must leave the history to bring
    it under ``budget``, never touching the latest turn (messages from index ``latest_turn`` on)."""
    total = sum(costs)
    n, freed = 0, 0
    while n < latest_turn and total - freed > budget:
        freed += costs[n]
        n += 1
    return n


class SessionStash:
    """A session's view of a stash store: its session name, settings and the notes for the next request.

    Args:
        store: the stash store (``None``: the session has no stash; retrieval returns nothing and
            stashing raises :class:`InputError`).
        session: the session's name in the stash (default: a new random name).
        settings: :class:`StashSettings` (default its defaults).
    """

    def __init__(
        self, store: StashStore | None, session: str | None = None, settings: StashSettings | None = None
    ) -> None:
        if settings is not None and not isinstance(settings, StashSettings):
            raise InputError(f"stash_settings must be a StashSettings, got {type(settings).__name__}")
        self.store = store
        self.settings = settings or StashSettings()
        if session is None:
            self.session: str = "session-" + secrets.token_hex(8)
        else:  # the stash package is imported only by sessions that name theirs
            from contextsieve.stash.segment import check_session

            self.session = check_session(session)
        #: notes for the next request's context (what the history budget moved)
        self.notes: list[str] = []

    def require(self) -> StashStore:
        """The store, or :class:`InputError` when the session has none."""
        if self.store is None:
            raise InputError("this session has no stash (create it with stash=StashStore.open(...))")
        return self.store

    def owned(self, segment_id: str) -> None:
        """:class:`UnknownSegmentError` unless ``segment_id`` is a segment of this session's stash."""
        if self.store is None:
            raise UnknownSegmentError(f"stash:{segment_id}: this session has no stash")
        self.store.get([segment_id], session=self.session)

    # -- requests ---------------------------------------------------------------------------------

    def retrieve(self, query: Query) -> tuple[list[Retrieved], RetrieveTrace | None]:
        """The stashed segments best for ``query`` (``top_k`` of them) and the retrieve's trace (none
        without a stash, a message or ``top_k``). The stash searches with the query's own sentence
        vectors when they are of its model family (one model call per request)."""
        st = self.settings
        if self.store is None or st.top_k == 0 or not query.text.strip():
            return [], None
        try:
            return self.store.retrieve_traced(
                query,
                session=self.session,
                top_k=st.top_k,
                min_similarity=st.min_similarity,
                cross_session=st.cross_session,
            )
        except StashError as e:  # the store is down (a database restart): select without stashed items
            self.notes.append(f"the stash is unavailable, so no stashed segments were retrieved: {e}")
            return [], None

    def entries(self, retrieved: Sequence[Retrieved]) -> tuple[list[StashedEntry], dict[str, str], list[Dropped]]:
        """Request entries for retrieved segments, best first, within ``max_tokens``; and their texts."""
        cap = self.settings.max_tokens
        kept: list[StashedEntry] = []
        dropped: list[Dropped] = []
        used = 0
        for r in retrieved:
            seg = r.segment
            e = StashedEntry(seg.id, r.score, r.similarity, seg.type.value, seg.tokens, seg.timestamp.isoformat())
            if used + seg.tokens > cap:
                dropped.append(
                    Dropped(e, seg.tokens, f"stash max_tokens: stashed segments may add at most {cap} tokens")
                )
                continue
            used += seg.tokens
            kept.append(e)
        ids = {e.segment_id for e in kept}
        return kept, {r.segment.id: r.segment.text for r in retrieved if r.segment.id in ids}, dropped

    def recorded_settings(self) -> dict[str, object]:
        """The stash settings a request context records when it brought segments back."""
        st = self.settings
        return {"top_k": st.top_k, "min_similarity": st.min_similarity, "max_tokens": st.max_tokens}

    def texts_of(self, ctx: RequestContext) -> dict[str, str]:
        """The texts of a stored context's stashed segments that are still in the stash, by id."""
        if not ctx.stashed or self.store is None:
            return {}
        found = self.store.get([e.segment_id for e in ctx.stashed], session=self.session, missing_ok=True)
        return {seg.id: seg.text for seg in found}

    def explain(self, segment_id: str, ctx: RequestContext, message: str, trace: RetrieveTrace | None) -> Explanation:
        """Why the stashed segment ``segment_id`` is or is not in the request context ``ctx`` built for
        ``message``, read from the request's retrieve ``trace`` (no second search)."""
        key = f"stash:{segment_id}"
        self.owned(segment_id)
        st = self.settings
        for rank, e in enumerate(ctx.stashed, 1):
            if e.segment_id == segment_id:
                return Explanation(
                    key,
                    True,
                    IncludeMode.STASH.value,
                    best_score=e.similarity,
                    item_rank=rank,
                    reasons=(
                        f"retrieved from the stash with score {e.score:.3f} (similarity {e.similarity:.3f}), "
                        f"rank {rank} of the top_k {st.top_k}",
                    ),
                )
        for x in ctx.dropped:
            if isinstance(x.entry, StashedEntry) and x.entry.segment_id == segment_id:
                return Explanation(
                    key, False, None, best_score=x.entry.similarity, reasons=(f"retrieved but dropped: {x.reason}",)
                )
        if trace is None or st.top_k == 0 or not message.strip():
            return Explanation(
                key, False, reasons=("no stashed segments are retrieved (top_k is 0 or the message is empty)",)
            )
        c = trace.find(segment_id)
        if c is None:
            return Explanation(
                key,
                False,
                reasons=(
                    f"not among the {trace.pool} candidates of the retrieve (the best by similarity and by "
                    "keywords), or expired",
                ),
            )
        if c.outcome == "below min_similarity":
            why = f"similarity {c.similarity:.3f} is below min_similarity {trace.min_similarity}"
            return Explanation(key, False, best_score=c.similarity, reasons=(why,))
        if c.outcome == "duplicate":
            why = f"score {c.score:.3f} ranks {c.rank}, but the same content ranked higher (another copy)"
            return Explanation(key, False, best_score=c.similarity, item_rank=c.rank, reasons=(why,))
        return Explanation(
            key,
            False,
            best_score=c.similarity,
            item_rank=c.rank,
            reasons=(
                f"score {c.score:.3f} (similarity {c.similarity:.3f}) ranks {c.rank}, below the top_k {st.top_k} "
                "retrieved",
            ),
        )

    # -- stashing ---------------------------------------------------------------------------------

    def stash(self, segments: Iterable[object], *, show_progress: bool = False) -> StashResult:
        """Stash segments in this session's part of the stash (see :meth:`StashStore.stash`)."""
        return self.require().stash(segments, session=self.session, show_progress=show_progress)

    def stash_messages(self, messages: Sequence[StashedMessage]) -> StashResult:
        """Stash history messages as ``message`` segments (source ``session:<role>``, ``tool:<name>`` for
        tool results, the message's time); all or none."""
        from contextsieve.stash.results import StashResult
        from contextsieve.stash.segment import NewSegment

        if not messages:
            return StashResult((), 0, 0, 0)
        return self.require().stash(
            [
                NewSegment(
                    m.content,
                    "message",
                    source=f"tool:{m.name or 'tool'}" if m.role == "tool" else f"session:{m.role}",
                    timestamp=datetime.fromtimestamp(m.created, timezone.utc),
                )
                for m in messages
                if m.content.strip()
            ],
            session=self.session,
        )

    def over_budget(
        self, texts: Sequence[str], latest_turn: int, counter: Callable[[Sequence[str]], list[int]]
    ) -> tuple[int, int]:
        """With a ``history_budget``: how many of the oldest history messages (their sent ``texts``)
        should move to the stash, and the tokens that frees; ``(0, 0)`` when within the budget. Notes
        when the latest turn alone is over it."""
        budget = self.settings.history_budget
        if budget is None or self.store is None or not texts:
            return 0, 0
        costs = [int(c) for c in counter(list(texts))]
        total = sum(costs)
        if total <= budget:
            return 0, 0
        n = budget_cut(costs, latest_turn, budget)
        if n == 0:
            self.notes.append(
                f"the latest turn alone takes {total} tokens, over the history budget of {budget}; it is never stashed"
            )
        return n, sum(costs[:n])
