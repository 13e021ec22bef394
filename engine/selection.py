"""Semantic selection of agent-mode items for one request, in the reference system's exact order.

Notes §2.1 "Scoring": score every candidate chunk against the query chunks (max over query chunks),
keep the ``top_k`` best *chunks*, drop scores ``<= 0``, group by item keeping each item's best chunk,
sort items by score, keep every item at or above ``include_score`` (even past ``top_n``), then fill up
to ``top_n`` with the best of the rest. Ties are broken by collection order (rules, references, tools,
then chunk index), which is also what the reference's stable sort does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextsieve.kernels.scoring import score_pool_topk

__all__ = ["Selected", "select_items"]


@dataclass(frozen=True)
class Selected:
    """One chosen item: its position among the candidates, score, best chunk row, and query chunk."""

    item: int
    score: float
    chunk: int
    query_chunk: int


def select_items(
    queries: np.ndarray,
    chunks: np.ndarray,
    chunk_item: np.ndarray,
    candidates: np.ndarray,
    *,
    top_k: int,
    top_n: int,
    include_score: float,
) -> list[Selected]:
    """Choose items for a request.

    Args:
        queries: ``[M, D]`` query-chunk vectors (M = 0 selects nothing).
        chunks: ``[N, D]`` chunk vectors of all indexed items.
        chunk_item: item position of each chunk, ``[N]``.
        candidates: bool per item position: which items may be selected.
        top_k: chunks kept before grouping. top_n: items to aim for. include_score: always-keep threshold.

    Returns:
        The selected items, best first.
    """
    if queries.shape[0] == 0 or chunks.shape[0] == 0:
        return []
    hits = score_pool_topk(queries, chunks, top_k, exclude=~candidates[chunk_item])
    best: dict[int, Selected] = {}
    for row, score, q in zip(hits.idx.tolist(), hits.scores.tolist(), hits.which.tolist()):
        if score <= 0:
            continue
        item = int(chunk_item[row])
        if item not in best:  # hits are sorted best first, so the first chunk of an item is its best
            best[item] = Selected(item, float(score), int(row), int(q))
    ranked = sorted(best.values(), key=lambda s: -s.score)  # stable: ties keep first-seen order
    high = [s for s in ranked if s.score >= include_score]
    other = [s for s in ranked if s.score < include_score]
    return high + other[: max(0, top_n - len(high))]
