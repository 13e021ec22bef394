"""Building a session's requests: :class:`RequestBuilder` takes a message to the payload (its
:class:`~contextsieve.retrieval.query.Query`, split and embedded once; the stash's segments; the search
over the agent's items; the tools a task carries and the companions history adds; the token budget;
the request context and its assembly); the tool search a host offers; and the items a tool result
points to."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, Item, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.agent.usage import example_hash
from contextsieve.errors import InputError, check_text
from contextsieve.retrieval.query import Query
from contextsieve.retrieval.text import query_chunks
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
from contextsieve.selection.search import context_settings, search
from contextsieve.selection.search_trace import SearchTrace
from contextsieve.session.assembly import Request, assemble, fit_budget, item_text, stashed_text, tool_definition
from contextsieve.session.companions import companion_entries
from contextsieve.session.session_items import SessionItems, tool_available
from contextsieve.session.stash_link import SessionStash
from contextsieve.session.task_tools import (
    TaskState,
    example_gate,
    step_settings,
    task_entries,
    task_ranking,
    wanted,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "ToolMatch",
    "TokenCounts",
    "RequestBuilder",
    "query_of",
    "search_items",
    "search_tools",
    "expand_from",
]

TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True)
class ToolMatch:
    """A tool :meth:`Session.search_tools <contextsieve.session.session.Session.search_tools>` found:
    the tool, its ranking score (dense similarity plus the keyword term, as selection ranks) and its
    definition as offered to a model (:func:`~contextsieve.session.assembly.tool_definition`:
    ``definition["name"]`` is the name a model calls)."""

    tool: Tool
    score: float
    definition: dict[str, Any] = field(default_factory=dict, compare=False)


def query_of(message: str, settings: AgentSettings, agent: Agent) -> Query:
    """The query of a message (:meth:`Query.split <contextsieve.retrieval.query.Query.split>`): with steps
    when a domain searches by steps, at most ``max_query_chunks`` sentences (the first and the last
    half, with a note, when it has more; then no steps) and at most that many steps."""
    steps = settings.query_split == "steps" or (
        settings.own_tool_domain and settings.for_tools().query_split == "steps" and bool(agent.tools)
    )
    return Query.split(message, steps=steps, cap=settings.max_query_chunks)


def search_items(
    store: ChunkStore,
    agent: Agent,
    mask: np.ndarray,
    settings: AgentSettings,
    query: Query,
    task: TaskState | None = None,
) -> tuple[list[ContextEntry], SearchTrace]:
    """:func:`~contextsieve.selection.search.search` over the items ``mask`` allows (the agent's lock held);
    for a later step of ``task``, without the recorded examples of the task's own message; the examples
    count from the gate of the request's place in its task (:func:`~contextsieve.session.task_tools.example_gate`)."""
    own = example_hash(task.message) if task is not None and task.requests and task.message else None
    return search(
        store,
        agent.table(),
        mask,
        settings,
        query,
        agent.server_descriptions(),
        not_example=own,
        example_gate=example_gate(task),
    )


class TokenCounts:
    """Tokens each item or stashed segment adds to a request, by ``counter`` (default: the embedding
    model's tokenizer), memoised per item object."""

    def __init__(self, counter: TokenCounter | None, store: ChunkStore) -> None:
        self.counter = counter
        self.store = store
        self._memo: dict[ItemKey, tuple[Item, int]] = {}

    def _count(self, text: str) -> int:
        counter = self.counter or self.store.embedder.count_tokens
        return int(counter([text])[0])

    def stashed(self, e: StashedEntry, texts: dict[str, str]) -> int:
        return self._count(stashed_text(e, texts[e.segment_id]))

    def item(self, agent: Agent, key: ItemKey) -> int:
        """Tokens the item adds to the request (its message, or its tool definition)."""
        item = agent.get(key)
        memo = self._memo.get(key)
        if memo is not None and memo[0] is item:
            return memo[1]
        n = self._count(item_text(item, agent.tool_names()))
        self._memo[key] = (item, n)
        return n


@dataclass(frozen=True)
class _Fitted:
    """What the token budget kept (items and stashed segments), their tokens, its notes and what it dropped."""

    entries: list[ContextEntry]
    stashed: list[StashedEntry]
    total: int
    notes: list[str]
    dropped: list[Dropped]


class RequestBuilder:
    """Builds a session's requests, one per message: the only place a request context is assembled.

    For each message: its :class:`~contextsieve.retrieval.query.Query` (split once, embedded once,
    outside the agent's lock), the stashed segments it brings back (with the query's own vectors),
    then under the agent's lock the search over the items the session may search, the tools a later
    step of a task carries, the companions history adds, the token budget, the request context and
    the payload.

    Args:
        agent: the session's agent. store: its chunk store.
        stash: the session's stash link (notes for the next request are taken from it).
        tokens: the token counts the budget reads.
    """

    def __init__(self, agent: Agent, store: ChunkStore, stash: SessionStash, tokens: TokenCounts) -> None:
        self.agent = agent
        self.store = store
        self.stash = stash
        self.tokens = tokens

    def query(self, message: str, settings: AgentSettings, searching: bool) -> Query:
        """The query of ``message``, embedded when ``searching`` and it has texts (one model call)."""
        query = query_of(message, settings, self.agent)
        if not searching or not query.chunks:
            return query
        return self.store.embedded(query)

    def build(
        self,
        message: str,
        settings: AgentSettings,
        items: SessionItems,
        history: Iterable[tuple[str, str]],
        task: TaskState,
    ) -> Request:
        """The request for ``message`` (mentions removed) with ``settings``: the session's held
        ``items``, the items the search finds among those it may search, the tools a later request
        of ``task`` carries from the task's first message
        (:func:`~contextsieve.session.task_tools.task_entries`), the stashed segments, all within the
        token budget, assembled with the ``history`` (``(role, content)`` as sent). Notes the request
        in ``task``."""
        agent = self.agent
        with agent.lock:
            searching = bool(items.searchable(agent, settings).any())
        query = self.query(message, settings, searching)
        retrieved, stash_trace = self.stash.retrieve(query)
        with agent.lock:
            entries, dropped, trace = self._selected(query, settings, items, task)
            stashed, stash_texts, stash_dropped = self.stash.entries(retrieved)
            recorded = context_settings(settings)
            if task.requests:
                recorded["task_step"] = task.requests  # a step: this many requests of its task came before
            if retrieved:
                recorded["stash"] = self.stash.recorded_settings()
            notes = [query.cap_note] if query.cap_note else []
            notes += self.stash.notes
            self.stash.notes = []
            total: int | None = None
            if settings.token_budget is not None:
                recorded["token_budget"] = settings.token_budget
                fitted = self._fit(settings.token_budget, entries, stashed, stash_texts)
                entries, stashed, total = fitted.entries, fitted.stashed, fitted.total
                notes += fitted.notes
                stash_dropped += fitted.dropped
            ctx = RequestContext(
                tuple(entries),
                query.text,
                query.chunks,
                recorded,
                total,
                tuple(dropped + stash_dropped),
                tuple(notes),
                tuple(stashed),
            )
            request = assemble(
                agent,
                ctx,
                query.text,
                history,
                settings,
                trace,
                stash_texts,
                stash_trace,
            )
            if task.requests and task.message is not None:  # a step: its outcome is learned under its task
                request = dataclasses.replace(request, task=task.message)
            task.note(query.text, request.context.entries)
        return request

    def _selected(
        self, query: Query, settings: AgentSettings, items: SessionItems, task: TaskState
    ) -> tuple[list[ContextEntry], list[Dropped], SearchTrace]:
        """The held items, the search's, the tools carried from ``task`` and the companions; the
        tools that gave their place to a carried one; the search's trace. The agent's lock is held."""
        agent, store = self.agent, self.store
        mask = items.searchable(agent, settings)
        entries = list(items.entries(agent))
        found, trace = search_items(store, agent, mask, step_settings(settings, task), query, task)
        entries += found
        dropped: list[Dropped] = []
        # the tools the search aimed for (its tools domain's settings, a step's sized by its message)
        size = next((d.settings.context_top_n for d in trace.domains if d.name == "tools"), 0)
        if wanted(settings, task):
            entries, dropped = _carry(store, agent, settings, task, mask, entries, found, size)
        if settings.companion_tools > 0:
            after = task.called if task.requests else []
            entries = _companions(store, agent, settings, mask, entries, size, after)
        return entries, dropped, trace

    def _fit(
        self, budget: int, entries: list[ContextEntry], stashed: list[StashedEntry], texts: dict[str, str]
    ) -> _Fitted:
        """The entries and stashed segments within the token ``budget``
        (:func:`~contextsieve.session.assembly.fit_budget`), their total, its notes and what it dropped."""
        tokens, agent = self.tokens, self.agent
        kept, total, dropped, notes = fit_budget(
            [*entries, *stashed],
            budget,
            lambda e: tokens.stashed(e, texts) if isinstance(e, StashedEntry) else tokens.item(agent, e.key),
        )
        return _Fitted(
            [e for e in kept if isinstance(e, ContextEntry)],
            [e for e in kept if isinstance(e, StashedEntry)],
            total,
            notes,
            dropped,
        )


#: Why a step's own tool left the request (:class:`Dropped`): a tool carried from the task took its place.
CARRY_REASON = "its place went to a tool carried from the task (task_tools)"


def _carry(
    store: ChunkStore,
    agent: Agent,
    settings: AgentSettings,
    task: TaskState,
    mask: np.ndarray,
    entries: list[ContextEntry],
    found: list[ContextEntry],
    size: int,
) -> tuple[list[ContextEntry], list[Dropped]]:
    """``entries`` with the tools a later request of ``task`` carries from the task's first message
    (:func:`~contextsieve.session.task_tools.task_entries`): in free places up to ``size`` (the tools
    the request aimed for), then each in the place of one of the request's own tools, the lowest
    ranked first (one of its own always stays). The tools that gave their place are returned
    as dropped."""
    if task.ranking is None and task.message is not None:
        task.ranking = task_ranking(
            store, agent, settings, query_of(task.message, settings, agent), example_hash(task.message)
        )
    own = [e for e in found if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT]
    carried = task_entries(settings, task, agent.table(), mask, {e.key for e in entries}, own)
    if not carried:
        return entries, []
    over = len(own) + len(carried) - size
    n_give = min(max(0, over), max(0, len(own) - 1))
    give = own[len(own) - n_give :]  # the search's order is the ranking score's (entries show similarity)
    gone = {id(e) for e in give}
    return [e for e in entries if id(e) not in gone] + carried, [Dropped(e, 0, CARRY_REASON) for e in give]


def _companions(
    store: ChunkStore,
    agent: Agent,
    settings: AgentSettings,
    mask: np.ndarray,
    entries: list[ContextEntry],
    size: int,
    after: Sequence[ItemKey] = (),
) -> list[ContextEntry]:
    """``entries`` with the tools the history used next to the request's best tools (and, for a step,
    next to the tool its task called last: ``after``)
    (:func:`~contextsieve.session.companions.companion_entries`) in its free places: as many as the
    request's tools leave under ``size`` (the tools its search aimed for), never in another's place."""
    tools = [e for e in entries if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT]
    free = min(settings.companion_tools, size - len(tools))
    relations = store.relations()
    if free <= 0 or not relations.uses:  # nothing to add, or no history: no cost on the request
        return entries
    at = agent.table().position
    return entries + companion_entries(relations, entries, lambda k: k in at and bool(mask[at[k]]), free, after)


def search_tools(store: ChunkStore, agent: Agent, base: AgentSettings, query: str, limit: int) -> list[ToolMatch]:
    """The ``limit`` (1-50) tools a session with settings ``base`` may use that best fit ``query``
    (see :meth:`Session.search_tools <contextsieve.session.session.Session.search_tools>`). Embeds the
    query first, then holds the agent's lock while it searches."""
    if not isinstance(query, str):
        raise InputError(f"query must be a str, got {type(query).__name__}")
    check_text(query, "the query")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
        raise InputError(f"limit must be an int from 1 to 50, got {limit!r}")
    tools = base.for_tools()
    settings = tools.with_overrides(
        context_top_n=limit,
        context_top_k=min(100, max(tools.context_top_k, 4 * limit)),  # the setting's range
        context_include_score=0.0,
        expansion_depth=0,
        min_representation_floor=None,
        token_budget=None,
    )
    q = Query.of_texts(query, query_chunks(query)[: settings.max_query_chunks])
    if q.chunks:  # outside the agent's lock, as requests embed
        q = store.embedded(q)
    with agent.lock:
        table = agent.table()
        allowed = table.tool.copy()
        for i in np.flatnonzero(allowed).tolist():
            it = table.items[i]
            if isinstance(it, Tool) and not tool_available(agent, base, it):
                allowed[i] = False
        entries, _ = search(store, table, allowed, settings, q, agent.server_descriptions())
        names = agent.tool_names()
        out = []
        for e in entries[:limit]:
            tool = agent.get(e.key)
            if isinstance(tool, Tool):
                out.append(ToolMatch(tool, float(e.score or 0.0), tool_definition(tool, names)))
        return out


def expand_from(
    store: ChunkStore, agent: Agent, mask: np.ndarray, settings: AgentSettings, text: str, max_chunks: int
) -> RequestContext:
    """Proposals for the items a tool result points to (see :meth:`Session.expand_from
    <contextsieve.session.session.Session.expand_from>`); ``via="tool-result"``."""
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    check_text(text, "the tool result")
    if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
        raise InputError(f"max_chunks must be a positive int, got {max_chunks!r}")
    chunks = query_chunks(text)[:max_chunks]
    entries, _ = search_items(store, agent, mask, settings, Query.of_texts(text, chunks))
    proposals = tuple(
        ContextEntry(
            e.key,
            e.mode,
            e.score,
            e.chunk,
            e.query_chunk,
            e.priority,
            "tool-result" if e.via == "query" else e.via,
            e.pulled_by,
        )
        for e in entries
    )
    return RequestContext(proposals, text[:200], tuple(chunks), {**context_settings(settings), "source": "tool-result"})
