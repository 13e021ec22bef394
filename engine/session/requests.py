"""Building a session's requests: the query texts of a message, the search over the agent's items,
the request context within the token budget and its assembly; the tool search a host offers; and
the items a tool result points to."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, Item, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.agent.usage import example_hash
from contextsieve.errors import InputError, check_text
from contextsieve.retrieval.text import query_chunks, split_query
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
from contextsieve.selection.search import SearchTrace, context_settings, search
from contextsieve.session.assembly import Request, assemble, fit_budget, item_text, stashed_text, tool_definition
from contextsieve.session.companions import companion_entries
from contextsieve.session.session_items import tool_available
from contextsieve.session.stash_link import SessionStash
from contextsieve.session.task_tools import TaskState, step_settings, task_entries, task_ranking, wanted

if TYPE_CHECKING:
    from contextsieve.stash.results import Retrieved, RetrieveTrace

__all__ = ["ToolMatch", "TokenCounts", "query_texts", "search_items", "build", "search_tools", "expand_from"]

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


def query_texts(message: str, settings: AgentSettings, agent: Agent) -> tuple[list[str], int, str]:
    """The query chunks of a message (see :func:`contextsieve.retrieval.text.split_query`; with steps
    when a domain searches by steps), how many are sentences, and a note when there were more than
    ``max_query_chunks`` sentences (then the capped sentences are searched without steps); at most
    ``max_query_chunks`` steps follow the sentences."""
    steps = settings.query_split == "steps" or (
        settings.own_tool_domain and settings.for_tools().query_split == "steps" and bool(agent.tools)
    )
    cap = settings.max_query_chunks
    chunks, n = split_query(message, steps=steps)
    sentences, note = _capped(chunks[:n], cap)
    if note:
        return sentences, len(sentences), note
    return sentences + chunks[n:][:cap], n, ""


def _capped(chunks: list[str], cap: int) -> tuple[list[str], str]:
    """At most ``cap`` query sentences: the first half and the last half of that many; and a note when cut."""
    if len(chunks) <= cap:
        return chunks, ""
    head = (cap + 1) // 2
    kept = chunks[:head] + chunks[len(chunks) - (cap - head) :]
    note = (
        f"the message has {len(chunks)} sentences; the first {head} and the last {cap - head} were searched "
        f"(max_query_chunks {cap})"
    )
    return kept, note


def search_items(
    store: ChunkStore,
    agent: Agent,
    mask: np.ndarray,
    settings: AgentSettings,
    chunks: Sequence[str],
    n_sentences: int | None = None,
    task: TaskState | None = None,
) -> tuple[list[ContextEntry], SearchTrace]:
    """:func:`~contextsieve.selection.search.search` over the items ``mask`` allows (the agent's lock held);
    for a later step of ``task``, without the recorded examples of the task's own message."""
    own = example_hash(task.message) if task is not None and task.requests and task.message else None
    return search(
        store, agent.table(), mask, settings, chunks, agent.server_descriptions(), n_sentences, not_example=own
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


def build(
    agent: Agent,
    store: ChunkStore,
    settings: AgentSettings,
    held: list[ContextEntry],
    mask: np.ndarray,
    stash: SessionStash,
    tokens: TokenCounts,
    history: Iterable[tuple[str, str]],
    query: str,
    qchunks: list[str],
    cap_note: str,
    retrieved: Sequence[Retrieved] = (),
    n_sentences: int | None = None,
    stash_trace: RetrieveTrace | None = None,
    task: TaskState | None = None,
) -> Request:
    """The request for ``query``: the session's ``held`` entries, the items the search finds among
    ``mask``, the tools a later request of ``task`` carries from the task's first message
    (:func:`~contextsieve.session.task_tools.task_entries`), the stashed segments ``retrieved``, all
    within the token budget, assembled with the ``history`` (``(role, content)`` as sent). Takes the
    stash link's pending notes."""
    entries = list(held)
    found, trace = search_items(store, agent, mask, step_settings(settings, task), qchunks, n_sentences, task)
    entries += found
    dropped: list[Dropped] = []
    # the tools the search aimed for (its tools domain's settings, a step's sized by its message)
    size = next((d.settings.context_top_n for d in trace.domains if d.name == "tools"), 0)
    if task is not None and wanted(settings, task):
        entries, dropped = _carry(store, agent, settings, task, mask, entries, found, size)
    if settings.companion_tools > 0:
        entries = _companions(store, agent, settings, mask, entries, size)
    recorded = context_settings(settings)
    if task is not None and task.requests:
        recorded["task_step"] = task.requests  # a step: this many requests of its task came before
    total: int | None = None
    notes: list[str] = [cap_note] if cap_note else []
    notes += stash.notes
    stash.notes = []
    stashed, stash_texts, stash_dropped = stash.entries(retrieved)
    dropped += stash_dropped
    if retrieved:
        recorded["stash"] = stash.recorded_settings()
    if settings.token_budget is not None:
        recorded["token_budget"] = settings.token_budget
        kept, total, budget_dropped, budget_notes = fit_budget(
            [*entries, *stashed],
            settings.token_budget,
            lambda e: tokens.stashed(e, stash_texts) if isinstance(e, StashedEntry) else tokens.item(agent, e.key),
        )
        entries = [e for e in kept if isinstance(e, ContextEntry)]
        stashed = [e for e in kept if isinstance(e, StashedEntry)]
        dropped += budget_dropped
        notes += budget_notes
    ctx = RequestContext(
        tuple(entries), query, tuple(qchunks), recorded, total, tuple(dropped), tuple(notes), tuple(stashed)
    )
    return assemble(
        agent,
        ctx,
        query,
        history,
        lambda tool: tool_available(agent, settings, tool),
        trace,
        stash_texts,
        stash_trace,
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
        task_chunks, task_n, _ = query_texts(task.message, settings, agent)
        task.ranking = task_ranking(store, agent, settings, task_chunks, task_n, example_hash(task.message))
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
) -> list[ContextEntry]:
    """``entries`` with the tools the history used next to the request's best tools
    (:func:`~contextsieve.session.companions.companion_entries`) in its free places: as many as the
    request's tools leave under ``size`` (the tools its search aimed for), never in another's place."""
    tools = [e for e in entries if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT]
    free = min(settings.companion_tools, size - len(tools))
    relations = store.relations()
    if free <= 0 or not relations.uses:  # nothing to add, or no history: no cost on the request
        return entries
    at = agent.table().position
    return entries + companion_entries(relations, entries, lambda k: k in at and bool(mask[at[k]]), free)


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
    chunks = query_chunks(query)[: settings.max_query_chunks]
    if chunks:
        store.embed_query(chunks)  # outside the agent's lock, as requests embed
    with agent.lock:
        table = agent.table()
        allowed = table.tool.copy()
        for i in np.flatnonzero(allowed).tolist():
            it = table.items[i]
            if isinstance(it, Tool) and not tool_available(agent, base, it):
                allowed[i] = False
        entries, _ = search(store, table, allowed, settings, chunks, agent.server_descriptions())
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
    entries, _ = search_items(store, agent, mask, settings, chunks)
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
