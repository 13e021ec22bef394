"""What one search computed, kept with its request for explanations and tests: per domain the
candidates, the ranked chunks and the cut, and per item the numbers :mod:`contextsieve.session.explain`
puts in words. Chunk rows are the rows the search read
(:class:`~contextsieve.selection.search_rows.SearchRows`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from contextsieve.agent.items import ItemKey
from contextsieve.agent.settings import AgentSettings
from contextsieve.selection.ranking import Ranked, Selected, fuse, pooled_scores
from contextsieve.selection.search_rows import RowVectors

__all__ = ["SearchTrace", "DomainTrace", "ItemFacts"]


@dataclass
class DomainTrace:
    """What the search did in one domain (all items, or rules + references, or tools).

    Attributes:
        name: ``"all"``, ``"rules+references"`` or ``"tools"``.
        settings: the settings this domain was searched with.
        candidates: bool per item position: the items search could choose.
        exclude: bool per chunk row: chunks of items that were not candidates.
        keyword: per chunk, the keyword score normalised by the best candidate chunk (``None``: no term).
        path: ``"exact"`` (every chunk scored) or ``"hnsw"`` (the index proposed the chunks scored).
        ranked: the top-K chunks (rows, ranking scores, query chunks) and their similarities.
        grouped: every item those chunks grouped into (similarity > 0), best first.
        chosen: the items the cut-offs kept (include score, then top-N).
        promoted: items added for unrepresented query sentences (minimum representation).
        boost: per chunk, what its tool's server profile added to the ranking score (``None``: nothing).
        outcome: per chunk, what its tool's recorded misses took off the ranking score (a negative
            number or 0; ``None``: nothing; see ``outcome_weight``).
        n_queries: how many of the trace's query chunks this domain searched with (the first ones;
            ``None``: all).
        queries: the query vectors this domain searched with when they differ from the trace's
            (pseudo-relevance feedback moved them); ``None``: the trace's first ``n_queries``.
        history: per chunk, what the recorded-example scale changed in its ranking score (0 but for
            example chunks; ``None``: none searched; see :func:`_example_terms`).
        ratio_base: the ranking score ``context_min_ratio`` is relative to (the best top chunk that is an
            item's own text: :func:`~contextsieve.selection.ranking.ratio_base`).
        words: the message's words that are not stopwords, as the keyword tokenizer writes them (the
            evidence floor of :func:`~contextsieve.selection.ranking.cut` looks at short messages).
    """

    name: str
    settings: AgentSettings
    candidates: np.ndarray
    exclude: np.ndarray
    keyword: np.ndarray | None
    path: Literal["exact", "hnsw"]
    ranked: Ranked
    grouped: list[Selected]
    chosen: list[Selected]
    promoted: list[Selected] = field(default_factory=list)
    boost: np.ndarray | None = None
    outcome: np.ndarray | None = None
    n_queries: int | None = None
    words: tuple[str, ...] | None = None
    queries: np.ndarray | None = None
    ratio_base: float = 0.0
    history: np.ndarray | None = None

    def query_vectors(self, trace_queries: np.ndarray) -> np.ndarray:
        """The query vectors this domain searched with."""
        return self.queries if self.queries is not None else trace_queries[: self.n_queries]


@dataclass(frozen=True)
class ItemFacts:
    """One item's numbers in a search (read off the trace; see :meth:`SearchTrace.facts`).

    Attributes:
        domain: the domain that could choose it.
        scores: its best dense score against each query sentence.
        similarity: the dense score of its best chunk (what the include score is compared with).
        chunk_rank: 1-based rank of that chunk among the domain's candidate chunks by ranking score.
        in_top_k: whether that chunk was among the top-K chunks.
        item_rank: 1-based rank among the items the top-K chunks grouped into (``None``: not among them).
        keyword: what the keyword term added to its best chunk's ranking score (weighted fusion).
        server: what its server's profile added to that score (``server_weight``; 0 without).
        outcome: what its recorded misses took off that score (``outcome_weight``; 0 or negative).
    """

    domain: DomainTrace
    scores: tuple[float, ...]
    similarity: float
    chunk_rank: int
    in_top_k: bool
    item_rank: int | None
    keyword: float
    server: float = 0.0
    outcome: float = 0.0


@dataclass
class SearchTrace:
    """Everything one search computed, for explanations and tests.

    Attributes:
        query_chunks: the query sentences. order: item keys by position. rows: the chunk vectors
        searched, in parts (:class:`~contextsieve.selection.search_rows.RowVectors`; :attr:`chunks`
        reads them as one ``[N, D]`` matrix); owner: item position of each chunk; queries: ``[M, D]``
        query vectors. domains: one :class:`DomainTrace` per domain searched.
    """

    query_chunks: tuple[str, ...]
    order: list[ItemKey]
    rows: RowVectors
    owner: np.ndarray
    queries: np.ndarray
    domains: list[DomainTrace] = field(default_factory=list)
    _ranking: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def chunks(self) -> np.ndarray:
        """``[N, D]`` the chunk vectors searched (made again from :attr:`rows` when a history's close
        examples were among them: the trace keeps no copy of the store's matrix)."""
        return self.rows.rows()

    @property
    def path(self) -> str:
        """``"hnsw"`` if any domain was searched through the index, else ``"exact"``."""
        return "hnsw" if any(d.path == "hnsw" for d in self.domains) else "exact"

    def ranking(self, d: DomainTrace) -> np.ndarray:
        """The ranking score of every chunk in domain ``d`` (``-inf`` where excluded): kept from the
        search when it scored every chunk, else scored now the same way (an explanation's detail)."""
        if d.ranked.ranking is not None:
            return d.ranked.ranking
        key = id(d)
        if key not in self._ranking:
            s = d.settings
            dense = pooled_scores(d.query_vectors(self.queries), self.chunks, s.query_pooling)[0]
            ranking = fuse(dense, d.keyword, s.keyword_weight, s.keyword_fusion, d.exclude)
            if d.boost is not None:
                ranking += d.boost
            if d.outcome is not None:
                ranking += d.outcome
            if d.history is not None:
                ranking += d.history
            self._ranking[key] = ranking
        return self._ranking[key]

    def facts(self, key: ItemKey) -> ItemFacts | None:
        """The item's numbers in this search; ``None`` if no domain had it as a candidate."""
        pos = self.order.index(key)
        domain = next((d for d in self.domains if d.candidates[pos]), None)
        if domain is None:
            return None
        s = domain.settings
        rows = np.flatnonzero(self.owner == pos)
        pooled, dense = pooled_scores(domain.query_vectors(self.queries), self.rows.rows(rows), s.query_pooling)
        hit_rows = domain.ranked.hits.idx.tolist()
        in_hits = [i for i, r in enumerate(hit_rows) if self.owner[r] == pos]
        if in_hits:
            best_row = hit_rows[in_hits[0]]
            chunk_rank = in_hits[0] + 1
            best_score = float(domain.ranked.hits.scores[in_hits[0]])
        else:
            ranking = self.ranking(domain)
            local = int(np.argmax(ranking[rows]))
            best_row = int(rows[local])
            best_score = float(ranking[best_row])
            chunk_rank = int(np.sum(ranking > best_score) + np.sum(ranking[:best_row] == best_score)) + 1
        similarity = float(pooled[int(np.flatnonzero(rows == best_row)[0])])
        item_rank = next((i + 1 for i, sel in enumerate(domain.grouped) if sel.item == pos), None)
        server = float(domain.boost[best_row]) if domain.boost is not None else 0.0
        outcome = float(domain.outcome[best_row]) if domain.outcome is not None else 0.0
        history = float(domain.history[best_row]) if domain.history is not None else 0.0
        keyword = (
            best_score - similarity - server - outcome - history
            if domain.keyword is not None and s.keyword_fusion == "weighted" and s.keyword_weight
            else 0.0
        )
        return ItemFacts(
            domain,
            tuple(float(x) for x in dense.max(axis=0)),
            similarity,
            chunk_rank,
            bool(in_hits),
            item_rank,
            keyword,
            server,
            outcome,
        )
