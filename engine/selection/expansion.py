"""Context expansion: items related to the chosen ones, pulled in after the query search.

:func:`expand` runs a second search pass from the chosen items' chunks (``expansion_source="pass2"``);
:class:`RelationGraph` keeps each item's nearest items (``"graph"``) and :func:`graph_expand` walks it.
Either way an item needs ``expansion_threshold`` to be pulled in, and each pass adds at most
``expansion_top_n`` (``AgentSettings``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextsieve.choices import RelationPooling

__all__ = ["Expanded", "expand", "expansion_scores", "RelationGraph", "graph_expand"]


@dataclass(frozen=True)
class Expanded:
    """An item pulled in by expansion: its score, best chunk, and the item whose chunk matched it."""

    item: int
    score: float
    chunk: int
    source_item: int


def _best_expanded(
    score: np.ndarray, row: np.ndarray, source: np.ndarray, threshold: float, top_n: int
) -> list[Expanded]:
    """Items scoring ``>= threshold``, best first (lower position on ties), at most ``top_n``."""
    order = np.lexsort((np.arange(score.shape[0]), -score))
    keep = [int(i) for i in order[:top_n] if score[i] >= threshold]
    return [Expanded(i, float(score[i]), int(row[i]), int(source[i])) for i in keep]


def expansion_scores(
    chunks: np.ndarray,
    chunk_item: np.ndarray,
    seeds: list[int],
    candidates: np.ndarray,
    *,
    chunk_cap: int,
    priority: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item: best score of its chunks against the seeds' chunks (at most ``chunk_cap`` each, by
    ``priority``; ``-inf`` for non-candidates), that chunk's row, and the seed item whose chunk matched."""
    from contextsieve.kernels.relations import expansion_pass
    from contextsieve.kernels.scoring import group_max

    n = candidates.shape[0]
    if not seeds or not candidates.any():
        return np.full(n, -np.inf, np.float32), np.zeros(n, np.int64), np.full(n, -1, np.int64)
    res = expansion_pass(chunks, chunk_item, seeds, cap=chunk_cap, priority=priority, exclude=~candidates[chunk_item])
    best, row = group_max(res.scores, chunk_item, n)
    row = np.asarray(row, dtype=np.int64)
    source = np.where(np.isfinite(best), chunk_item[res.source[np.maximum(row, 0)]], -1)
    best = np.where(candidates, best, -np.inf).astype(np.float32)
    return best, row, source.astype(np.int64)


def expand(
    chunks: np.ndarray,
    chunk_item: np.ndarray,
    seeds: list[int],
    candidates: np.ndarray,
    *,
    threshold: float,
    top_n: int,
    chunk_cap: int,
    priority: np.ndarray | None = None,
) -> list[Expanded]:
    """One expansion pass: the chunks of ``seeds`` (at most ``chunk_cap`` each, by ``priority``) as queries
    against the chunks of the ``candidates`` items; items scoring ``>= threshold``, best first, at most ``top_n``."""
    if not seeds or top_n <= 0 or not candidates.any():
        return []
    best, row, source = expansion_scores(chunks, chunk_item, seeds, candidates, chunk_cap=chunk_cap, priority=priority)
    return _best_expanded(best, row, source, threshold, top_n)


class RelationGraph:
    """Item-item similarities above a floor, computed once from the chunk vectors (notes: "relationship
    graph"), and looked up after the query search instead of (or besides) an expansion pass.

    Args:
        chunks: ``[N, D]`` chunk vectors; chunk_item: item position of each chunk; n_items: item count.
        pooling: ``"mean_embedding"``, ``"best_pair"`` or ``"mean_pairs"`` (see
            :func:`contextsieve.kernels.relations.item_relations`).
        floor: smallest similarity kept (lookups with a lower threshold see only pairs above it).
    """

    def __init__(
        self, chunks: np.ndarray, chunk_item: np.ndarray, n_items: int, *, pooling: RelationPooling, floor: float
    ) -> None:
        from contextsieve.kernels.relations import item_relations

        rel = item_relations(chunks, chunk_item, n_items, pooling=pooling, threshold=floor)
        self.pooling, self.floor, self.n_items = pooling, floor, n_items
        src = np.concatenate([rel.i, rel.j])
        dst = np.concatenate([rel.j, rel.i])
        sim = np.concatenate([rel.sim, rel.sim])
        order = np.lexsort((dst, src))
        self._dst, self._sim = dst[order], sim[order]
        self._start = np.searchsorted(src[order], np.arange(n_items + 1))
        self.pairs = int(rel.i.shape[0])

    def neighbours(self, item: int) -> tuple[np.ndarray, np.ndarray]:
        """Related items of ``item`` and their similarities."""
        a, b = self._start[item], self._start[item + 1]
        return self._dst[a:b], self._sim[a:b]

    def best(self, seeds: list[int], candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per item, its best similarity to any seed (``-inf`` if none or not a candidate) and that seed."""
        score = np.full(self.n_items, -np.inf, dtype=np.float32)
        source = np.full(self.n_items, -1, dtype=np.int64)
        for s in seeds:
            nb, sim = self.neighbours(s)
            better = sim > score[nb]
            score[nb[better]] = sim[better]
            source[nb[better]] = s
        score[~candidates] = -np.inf
        return score, source


def graph_expand(
    graph: RelationGraph,
    first_chunk: np.ndarray,
    seeds: list[int],
    candidates: np.ndarray,
    *,
    threshold: float,
    top_n: int,
    also: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> list[Expanded]:
    """Expansion from the relationship graph: candidates related to a seed at ``>= threshold``, best first,
    at most ``top_n``; an item's chunk is its first one. ``also`` = (score, chunk row, source item) per
    item from an expansion pass, merged by the higher score (the "hybrid" source)."""
    if not seeds or top_n <= 0 or not candidates.any():
        return []
    score, source = graph.best(seeds, candidates)
    row = first_chunk.astype(np.int64).copy()
    if also is not None:
        a_score, a_row, a_source = also
        take = a_score > score
        score = np.where(take, a_score, score)
        row = np.where(take, a_row, row)
        source = np.where(take, a_source, source)
    return _best_expanded(score, row, source, threshold, top_n)
