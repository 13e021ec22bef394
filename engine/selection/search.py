"""One search: the agent-mode items chosen for a message, and the trace of every decision it made.

:func:`search` is the only place the selection is computed. It returns the entries it chose and a
:class:`SearchTrace` (per domain: the top-K chunks with their ranking and similarity scores, the
items they grouped into, the cut-offs, promotions and expansions). Explanations read the trace
(:func:`contextsieve.session.explain.explain_item`), so an explanation cannot disagree with a selection.

Large agents are searched through the chunk store's HNSW index: the index proposes dense candidates
(more than top-K, then more again while too few of them are candidates), the best keyword chunks
join them, and the same fused score as the exact path ranks that union exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.agent.agent import ItemTable
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.kernels.scoring import query_scores, score_pool
from contextsieve.retrieval.bm25 import tokenize
from contextsieve.retrieval.query import Query
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.chunk_terms import example_terms, outcome_penalty, server_boost, summed
from contextsieve.selection.context import ContextEntry
from contextsieve.selection.expansion import Expanded, expand, expansion_scores, graph_expand
from contextsieve.selection.indexed_chunks import IndexedChunks
from contextsieve.selection.ranking import (
    FILL_RATIO,
    SENTENCE_ITEMS,
    CutRule,
    RankRule,
    Selected,
    SentenceEvidence,
    cut,
    item_query_scores,
    min_representation,
    names_nothing,
    rank_chunks,
    ratio_base,
    represent_sentences,
)
from contextsieve.selection.recorded_requests import WEAK_REQUESTS, NearRequests, RecordedRequests, near_floor
from contextsieve.selection.search_rows import RowVectors, SearchRows
from contextsieve.selection.search_trace import DomainTrace, SearchTrace

__all__ = [
    "search",
    "context_settings",
    "OVERFETCH",
    "MAX_INDEX_CANDIDATES",
    "KEYWORD_CANDIDATES",
]

#: The HNSW path asks the index for this many times top-K chunks first (x4 again while fewer than
#: top-K of them are candidates, up to :data:`MAX_INDEX_CANDIDATES`, then it scans exactly).
OVERFETCH = 4
#: Most chunks the HNSW path asks the index for before it falls back to an exact scan.
MAX_INDEX_CANDIDATES = 4096
#: Chunks with the best keyword scores that join the index's candidates on the HNSW path (a chunk
#: can rank in the top K by dense + keyword while in neither list's top K alone).
KEYWORD_CANDIDATES = 2048

_DOMAIN_KINDS = {"all": None, "rules+references": (ItemKind.RULE, ItemKind.REFERENCE), "tools": (ItemKind.TOOL,)}


def context_settings(s: AgentSettings) -> dict[str, object]:
    """The settings a request context records (the reference's three)."""
    return {"top_k": s.context_top_k, "top_n": s.context_top_n, "include_score": s.context_include_score}


def search(
    store: ChunkStore,
    table: ItemTable,
    allowed: np.ndarray,
    settings: AgentSettings,
    query: Query,
    server_descriptions: dict[str, str],
    *,
    not_example: str | None = None,
    example_gate: float | None = None,
) -> tuple[list[ContextEntry], SearchTrace]:
    """Choose agent-mode items for ``query``.

    Every item of ``table`` (:meth:`Agent.table`) is indexed (so a later request with other
    candidates embeds nothing new); search chooses among the ``allowed`` ones (a bool per item):
    the reference ranking (top-K chunks, similarity > 0, best chunk per item, include score, top-N)
    with contextsieve's keyword term, then minimum representation and expansion when the settings turn
    them on. With ``tool_domain`` ``own`` (or ``tool_settings``), rules + references and tools are two
    domains, each searched with its own settings.

    ``query``: the message's :class:`~contextsieve.retrieval.query.Query` (its vectors are embedded
    here when it has none); a domain whose ``query_split`` is ``"sentences"`` searches with its
    sentences alone, one whose ``query_split`` is ``"steps"`` with its steps too.

    ``not_example``: the :attr:`~contextsieve.agent.example_records.Example.hash` of recorded example requests that
    do not count (a task's steps pass their task's message: what the task taught under its own message
    does not steer the task itself); ``None``: all count.

    ``example_gate``: the cosine from which a recorded example request counts for ``query`` (default
    :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`, a request's own; a task's later steps pass
    :data:`~contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY`); a domain aiming for fewer than
    :data:`~contextsieve.agent.settings.WIDE_OFFER` items raises it to that narrow gate.

    Returns:
        The chosen entries (query matches by ranking score, then promotions, then expansions) and the trace.
    """
    order = table.keys
    if not allowed.any() or not query.chunks:  # nothing to choose: embed nothing (no model loads)
        nothing = np.zeros((0, 0), dtype=np.float32)
        empty = np.zeros(0, np.int64)
        return [], SearchTrace(query.chunks, order, RowVectors(nothing, empty, empty, nothing, empty), empty, nothing)
    if query.vectors is None:  # outside the store's lock: requests embed in parallel
        query = store.embedded(query)
    with store.lock:  # one consistent view of the chunks from sync to the last read
        store.sync(table.items, server_descriptions=server_descriptions, version=table.shape)
        domains = _domains(table, allowed, settings)
        gate = agent_settings.EXAMPLE_SIMILARITY if example_gate is None else example_gate
        return _Pass.over(store, table, query, domains, not_example, gate).run(domains)


#: A domain of a search: its name, the items it may choose (a bool per item) and its settings.
_Domain = tuple[str, np.ndarray, AgentSettings]


def _domains(table: ItemTable, allowed: np.ndarray, settings: AgentSettings) -> list[_Domain]:
    """The domains ``settings`` search ``allowed`` in: rules + references and tools apart (``tool_domain``
    ``own`` or ``tool_settings``), else all together."""
    if settings.own_tool_domain:
        return [
            ("rules+references", allowed & ~table.tool, settings),
            ("tools", allowed & table.tool, settings.for_tools()),
        ]
    return [("all", allowed, settings)]


@dataclass
class _Pass:
    """One search under the store's lock: the chunks and what every domain reads of them."""

    store: ChunkStore
    table: ItemTable
    query: Query
    rows: SearchRows  # the chunks it reads: every own chunk, the examples close to the request
    recorded: tuple[RecordedRequests, NearRequests] | None  # the recorded requests, those close to it
    indexed: IndexedChunks | None
    words: tuple[str, ...]  # what the message names, for the evidence floor
    keyword: np.ndarray | None  # each chunk's keyword score (BM25) for the message
    not_example: str | None
    gate: float  # the cosine from which a recorded example counts for this request (a wide offer)

    @classmethod
    def over(
        cls,
        store: ChunkStore,
        table: ItemTable,
        query: Query,
        domains: list[_Domain],
        not_example: str | None,
        gate: float,
    ) -> _Pass:
        """The pass of ``query`` over the synced ``store`` (with keyword scores when one of ``domains``
        weighs them), its recorded examples counting from ``gate``."""
        chunks, _ = store.matrix(table.keys)
        recorded = store.recorded_requests(table.keys)
        assert query.vectors is not None  # search embedded it
        close = None if recorded is None else recorded.requests.near(query.vectors, near_floor(gate))
        if close is not None and gate < agent_settings.NARROW_EXAMPLE_SIMILARITY:  # the band: its closest
            close = close.capped(agent_settings.NARROW_EXAMPLE_SIMILARITY, WEAK_REQUESTS)
        near = None if recorded is None or close is None else (recorded, close)
        rows = SearchRows.of(chunks, store.layout(table.keys), recorded, close, gate)
        indexed = store.search_index(table.keys)
        named = keyword_query(query.chunks)
        words = tuple(tokenize(named))
        keywords = chunks.shape[0] > 0 and any(ds.keyword_weight > 0 for _, _, ds in domains)
        keyword = store.keyword_index(table.keys).scores(named)[rows.rows] if keywords else None
        return cls(store, table, query, rows, near, indexed, words, keyword, not_example, gate)

    @property
    def vectors(self) -> np.ndarray:
        assert self.query.vectors is not None  # search embedded it
        return self.query.vectors

    @property
    def chunks(self) -> np.ndarray:
        return self.rows.chunks

    @property
    def owner(self) -> np.ndarray:
        return self.rows.owner

    def run(self, domains: list[_Domain]) -> tuple[list[ContextEntry], SearchTrace]:
        """The entries chosen in each of ``domains`` (:func:`_domains`), and the trace."""
        trace = SearchTrace(self.query.chunks, self.table.keys, self.rows.parts, self.owner, self.vectors)
        if self.chunks.shape[0] == 0:
            return [], trace
        for name, mask, ds in domains:
            if mask.any():  # e.g. an agent of tools only: the other domain has nothing to choose
                trace.domains.append(self.domain(name, mask, ds))
        chosen = [c for d in trace.domains for c in d.chosen]
        if len(trace.domains) > 1:
            chosen.sort(key=lambda c: -c.score)  # ranking score across domains; entries report similarity
        promoted = [c for d in trace.domains for c in d.promoted]
        entries = [self.entry(c.item, c.sim, c.chunk, c.query_chunk, "query") for c in chosen]
        entries += [self.entry(c.item, c.score, c.chunk, c.query_chunk, "min-representation") for c in promoted]
        picked = [c.item for c in chosen] + [c.item for c in promoted]
        if picked and any(ds.expansion_depth > 0 and ds.expansion_top_n > 0 for _, _, ds in domains):
            priority, _ = score_pool(self.vectors, self.chunks)  # which chunks of a selected item query first
            for d in trace.domains:
                for x in _expand(
                    self.store, d.settings, d.candidates, picked, priority, self.chunks, self.owner, self.table.keys
                ):
                    entries.append(self.entry(x.item, x.score, x.chunk, None, "expansion", x.source_item))
        return entries, trace

    def entry(
        self, item: int, score: float, row: int, qc: int | None, via: str, pulled: int | None = None
    ) -> ContextEntry:
        """The request entry of the item at position ``item`` chosen by its chunk ``row``."""
        items = self.table.items
        it = items[item]
        return ContextEntry(
            it.key,
            IncludeMode.EXPANSION if via == "expansion" else IncludeMode.AGENT,
            round(score, 6),
            self.rows.chunk_index(row),
            qc,
            None if isinstance(it, Tool) else it.priority,
            via,
            items[pulled].key if pulled is not None else None,
        )

    def history(
        self, mask: np.ndarray, qvec: np.ndarray, gate: float
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, tuple[RecordedRequests, np.ndarray] | None]:
        """The chunks a domain of candidates ``mask`` excludes, the recorded-example term of each
        (:func:`~contextsieve.selection.chunk_terms.example_terms`, examples counting from ``gate``, at
        least the pass's), which rows are examples, and the recorded requests with their scores for
        ``qvec`` (``None``: nothing recorded)."""
        every, hashes = self.store.example_rows(self.table.keys)
        examples = every[self.rows.rows]
        # the hashes of the examples read (``hashes`` lists every example's)
        hashes = (
            hashes[np.searchsorted(np.flatnonzero(every), self.rows.rows[examples])] if examples.any() else hashes[:0]
        )
        usable = examples
        if self.not_example is not None and hashes.size:  # the task's own message does not steer its steps
            usable = examples.copy()
            usable[np.flatnonzero(examples)[hashes == self.not_example]] = False
        exclude = ~mask[self.owner] if usable is examples else ~mask[self.owner] | (examples & ~usable)
        if self.recorded is None:
            return *example_terms(usable, self.chunks, exclude, qvec, gate=gate), examples, None
        recorded, near = self.recorded
        # each request's, for this domain's queries
        scores = near.best(len(recorded.requests), qvec.shape[0], near_floor(gate))
        per_row = np.full(self.chunks.shape[0], -np.inf, dtype=np.float32)
        if examples.any():
            per_row[examples] = recorded.example_scores(scores, self.rows.rows[examples])
        exclude, history = example_terms(usable, self.chunks, exclude, qvec, per_row, gate)
        return exclude, history, examples, (recorded, scores)

    def domain(self, name: str, mask: np.ndarray, ds: AgentSettings) -> DomainTrace:
        """One domain's search: rank its candidate chunks, cut, promote."""
        n_sentences = self.query.n_sentences
        n_queries = self.vectors.shape[0] if ds.query_split == "steps" else n_sentences
        qvec = self.vectors[:n_queries]
        size = ds.tool_offer_size(n_queries) if name == "tools" else ds.context_top_n
        if size != ds.context_top_n:  # a step's tools: the size follows the message (the trace keeps it)
            ds = dataclasses.replace(ds, context_top_n=size)
        gate = (
            self.gate if size >= agent_settings.WIDE_OFFER else max(self.gate, agent_settings.NARROW_EXAMPLE_SIMILARITY)
        )
        exclude, history, examples, requests = self.history(mask, qvec, gate)
        keyword = None
        raw = self.keyword
        if raw is not None and ds.keyword_weight > 0:
            top = raw[~exclude].max(initial=0.0)  # normalised by the domain's best candidate chunk
            keyword = raw / top if top > 0 else raw
        rows = (
            _index_candidates(
                self.indexed, self.rows.base, qvec, exclude, keyword, ds.context_top_k, _DOMAIN_KINDS[name]
            )
            if self.indexed
            else None
        )
        scored = _scored_rows(rows, exclude, examples)
        boost = server_boost(self.store, self.table, mask, self.owner, qvec, ds.server_weight)
        outcome = outcome_penalty(requests, mask, self.owner, ds.outcome_weight)
        total = summed(boost, outcome, history)
        rank = RankRule(ds.context_top_k, ds.query_pooling, ds.keyword_weight, ds.keyword_fusion)
        ranked = rank_chunks(qvec, self.chunks, exclude, rank, keyword=keyword, rows=scored, boost=total)
        moved = None
        if ds.prf_weight > 0 and ds.prf_depth > 0 and ranked.hits.idx.size:
            moved = rocchio(qvec, self.chunks[ranked.hits.idx[: ds.prf_depth]], ds.prf_weight)
            qvec = moved
            ranked = rank_chunks(qvec, self.chunks, exclude, rank, keyword=keyword, rows=scored, boost=total)
        rule = CutRule(
            ds.context_top_n,
            ds.context_include_score,
            ds.keyword_role,
            ds.context_min_ratio,
            ds.context_min_score,
            FILL_RATIO if name == "rules+references" else None,
        )
        grouped, found = cut(ranked, self.owner, rule, words=self.words, examples=examples)
        path: Literal["exact", "hnsw"] = "hnsw" if rows is not None else "exact"
        d = DomainTrace(name, ds, mask, exclude, keyword, path, ranked, grouped, found)
        d.ratio_base = ratio_base(ranked, examples, ds.keyword_role, grouped)
        d.boost, d.outcome, d.history = boost, outcome, history
        d.words, d.n_queries, d.queries = self.words, n_queries, moved
        if qvec.shape[0] > 1 and ds.min_representation_cap > 0:
            searched = (exclude, scored, keyword, ranked.by_query)
            d.promoted = self.represented(found, grouped, mask, qvec, ds, rule, searched)
        d.ranked = dataclasses.replace(ranked, by_query=None)  # [N, M]: not kept with the trace
        return d

    def represented(
        self,
        found: list[Selected],
        grouped: list[Selected],
        mask: np.ndarray,
        qvec: np.ndarray,
        ds: AgentSettings,
        rule: CutRule,
        searched: tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None],
    ) -> list[Selected]:
        """The items promoted for query sentences no chosen item represents: ``min_representation_floor``
        when set; else, with the no-filler rule (rules and references, ``context_min_score`` set), the
        best candidate of such a sentence when its evidence is not weak
        (:func:`~contextsieve.selection.ranking.represent_sentences`, at most
        :data:`~contextsieve.selection.ranking.SENTENCE_ITEMS`). ``searched``: the domain's excluded
        chunks, the rows an approximate index proposed (``None``: all), the keyword scores and the
        ranking's per-sentence scores of those rows (``None``: not kept; scored here)."""
        exclude, rows, keyword, by_query = searched
        if ds.min_representation_floor is not None:
            per, arg = item_query_scores(qvec, self.chunks, self.owner, mask)
            return min_representation(found, per, arg, floor=ds.min_representation_floor, cap=ds.min_representation_cap)
        if rule.fill_ratio is None or rule.min_score is None:
            return []
        missing = sorted(set(range(qvec.shape[0])) - {s.query_chunk for s in found})
        if not missing:
            return []  # every sentence has an item: nothing to score
        if by_query is None:  # the fused kernel (every row, no keyword term) kept no per-sentence scores
            by_query = np.full((self.chunks.shape[0], qvec.shape[0]), -np.inf, dtype=np.float32)
            by_query[:, missing] = query_scores(self.chunks, qvec[missing])
        sub = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        doubled, keywords_count = names_nothing(grouped, self.words)
        evidence = SentenceEvidence(
            rule.min_score, doubled, keywords_count, min(ds.min_representation_cap, SENTENCE_ITEMS)
        )
        return represent_sentences(
            found,
            by_query,
            self.owner[sub],
            ~exclude[sub],
            None if keyword is None else keyword[sub],
            evidence,
            rows=None if rows is None else np.asarray(rows, dtype=np.int64),
        )


def rocchio(queries: np.ndarray, feedback: np.ndarray, weight: float) -> np.ndarray:
    """Pseudo-relevance feedback (a shallow Rocchio step): each query vector plus ``weight`` x the mean
    of the ``feedback`` chunk vectors (the first search's best chunks), renormalised to unit length.
    The query keeps at least equal weight for ``weight <= 1`` (the condition under which feedback
    helps dense retrievers, arXiv 2108.11044)."""
    centroid = feedback.mean(axis=0, dtype=np.float64)
    moved = queries.astype(np.float64) + weight * centroid[None, :]
    norms = np.linalg.norm(moved, axis=1, keepdims=True)
    return (moved / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def keyword_query(query_chunks: Sequence[str]) -> str:
    """The keyword query of a message: its query chunks joined, leaving out a chunk that is part of an
    earlier one (a step's clause repeats words of its sentence; each word counts once as in the message)."""
    kept: list[str] = []
    for c in query_chunks:
        if not any(c in k for k in kept):
            kept.append(c)
    return " ".join(kept)


def _scored_rows(rows: np.ndarray | None, exclude: np.ndarray, examples: np.ndarray) -> np.ndarray | None:
    """The chunk rows a domain's ranking scores: an approximate index's ``rows`` and the candidate
    example rows (``examples``: the close examples a search reads; the index holds the items' own
    chunks only); else, with examples, the candidate rows only (most rows of a large agent are not
    candidates of a domain); else ``None``, every row. Both rank alike (ties by row either way)."""
    if not examples.any():
        return rows
    live = np.flatnonzero(~exclude)
    return live if rows is None else np.union1d(rows, live[examples[live]])


def _index_candidates(
    indexed: IndexedChunks,
    at: np.ndarray,
    qvec: np.ndarray,
    exclude: np.ndarray,
    keyword: np.ndarray | None,
    top_k: int,
    kinds: tuple[ItemKind, ...] | None,
) -> np.ndarray | None:
    """Chunk rows to score exactly: the index's nearest chunks (over-fetched until top-K of them are
    candidates) and the best keyword chunks; ``at``: where each row of the index's matrix is among the
    search's rows (:attr:`~contextsieve.selection.search_rows.SearchRows.base`). ``None``: too few
    candidates found, scan exactly."""
    live = indexed.live
    k = OVERFETCH * top_k
    while True:
        rows = at[indexed.nearest(qvec, min(k, live), kinds)]
        rows = rows[~exclude[rows]]
        if rows.size >= top_k or k >= live:
            break
        if k >= MAX_INDEX_CANDIDATES:
            return None
        k *= OVERFETCH
    if keyword is not None:
        kw = np.where(exclude, 0.0, keyword)
        n = min(max(KEYWORD_CANDIDATES, OVERFETCH * top_k), kw.size)
        best = np.argpartition(-kw, n - 1)[:n] if n < kw.size else np.arange(kw.size)
        rows = np.concatenate([rows, best[kw[best] > 0]])
    return np.unique(rows)


def _expand(
    store: ChunkStore,
    ds: AgentSettings,
    mask: np.ndarray,
    picked: list[int],
    priority: np.ndarray,
    chunks: np.ndarray,
    owner: np.ndarray,
    order: list[ItemKey],
) -> list[Expanded]:
    """Expansion passes in one domain: items of ``mask`` related to the picked items (of any domain)."""
    if ds.expansion_depth <= 0 or not picked or ds.expansion_top_n <= 0:
        return []
    pool = mask.copy()
    pool[picked] = False
    graph = (
        store.relation_graph(order, ds.relation_pooling, min(ds.expansion_threshold, 0.5))
        if ds.expansion_source != "pass2"
        else None
    )
    first = np.searchsorted(owner, np.arange(len(order)))
    out: list[Expanded] = []
    seeds = picked
    for _ in range(ds.expansion_depth):
        if graph is None:
            new = expand(
                chunks,
                owner,
                seeds,
                pool,
                threshold=ds.expansion_threshold,
                top_n=ds.expansion_top_n,
                chunk_cap=ds.expansion_chunk_cap,
                priority=priority,
            )
        else:
            also = (
                expansion_scores(chunks, owner, seeds, pool, chunk_cap=ds.expansion_chunk_cap, priority=priority)
                if ds.expansion_source == "hybrid"
                else None
            )
            new = graph_expand(
                graph, first, seeds, pool, threshold=ds.expansion_threshold, top_n=ds.expansion_top_n, also=also
            )
        out += new
        seeds = [x.item for x in new]
        pool[seeds] = False
        if not seeds:
            break
    return out
