"""Expansion and item-relationship kernels over chunk vectors (pure numpy + the scoring kernels).

Rows (chunks) belong to items through ``item_of`` (int ``[N]``, values ``0 .. n_items - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError
from contextsieve.kernels.scoring import as_vectors, score_pool

__all__ = ["Expansion", "expansion_pass", "cap_rows_per_item", "Relations", "item_relations", "POOLINGS"]

POOLINGS = ("mean_embedding", "best_pair", "mean_pairs")


def _items(item_of: object, n: int) -> np.ndarray:
    it = np.asarray(item_of)
    if it.shape != (n,) or it.dtype.kind not in "iu":
        raise InputError(f"item_of must be an int array of shape ({n},), got {it.dtype} {it.shape}")
    if n and it.min() < 0:
        raise InputError("item_of must be >= 0")
    return it.astype(np.int64, copy=False)


def cap_rows_per_item(
    rows: np.ndarray, item_of: np.ndarray, cap: int, priority: np.ndarray | None = None
) -> np.ndarray:
    """Keep at most ``cap`` of ``rows`` per item: the highest ``priority`` first (then lower row).

    Without ``priority`` the first ``cap`` rows of each item (document order) are kept.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if cap < 1:
        raise InputError(f"cap must be >= 1, got {cap}")
    if rows.size == 0:
        return rows
    it = item_of[rows]
    pr = np.zeros(rows.size) if priority is None else -np.asarray(priority, dtype=np.float64)[rows]
    order = np.lexsort((rows, pr, it))
    sorted_items = it[order]
    start = np.r_[0, np.flatnonzero(sorted_items[1:] != sorted_items[:-1]) + 1]
    rank = np.arange(order.size) - np.repeat(start, np.diff(np.r_[start, order.size]))
    return np.sort(rows[order[rank < cap]])


@dataclass(frozen=True)
class Expansion:
    """Result of :func:`expansion_pass` for every row.

    Attributes:
        scores: float32 ``[N]``, best similarity to any query chunk; ``-inf`` for excluded rows.
        source: int64 ``[N]``, the query chunk (a row id) that gave it; ``-1`` where excluded.
        query_rows: the chunks that were used as queries (after the cap).
    """

    scores: np.ndarray
    source: np.ndarray
    query_rows: np.ndarray


def expansion_pass(
    corpus: object,
    item_of: object,
    seeds: object,
    *,
    cap: int | None = None,
    priority: np.ndarray | None = None,
    exclude: np.ndarray | None = None,
) -> Expansion:
    """Score every chunk against the chunks of the ``seeds`` items in one max-pooled pass.

    Args:
        corpus: ``[N, D]`` chunk vectors.
        item_of: item of each chunk.
        seeds: item ids selected so far; their chunks are the queries and are excluded as candidates.
        cap: use at most this many chunks per seed item (by ``priority``, e.g. their pass-1 scores).
        priority: float ``[N]`` used with ``cap``.
        exclude: optional bool ``[N]``, more rows that must not be candidates (e.g. session items).
    """
    c = as_vectors(corpus, "corpus")
    n = c.shape[0]
    it = _items(item_of, n)
    seed_rows_mask = np.isin(it, np.asarray(seeds, dtype=np.int64).reshape(-1))
    qrows = np.flatnonzero(seed_rows_mask)
    if cap is not None:
        qrows = cap_rows_per_item(qrows, it, cap, priority)
    mask = seed_rows_mask if exclude is None else (seed_rows_mask | np.asarray(exclude, dtype=np.bool_))
    best, which = score_pool(c[qrows], c, exclude=mask)
    source = np.where(which >= 0, qrows[np.maximum(which, 0)] if qrows.size else -1, -1).astype(np.int64)
    return Expansion(best, source, qrows)


@dataclass(frozen=True)
class Relations:
    """Sparse symmetric item-item similarities at or above a threshold, each pair once (``i < j``)."""

    i: np.ndarray  # int64
    j: np.ndarray  # int64
    sim: np.ndarray  # float32

    def __len__(self) -> int:
        return int(self.i.shape[0])

    def neighbours(self, item: int) -> list[tuple[int, float]]:
        """Related items of ``item``, most similar first."""
        a = [(int(j), float(s)) for i, j, s in zip(self.i, self.j, self.sim) if i == item]
        a += [(int(i), float(s)) for i, j, s in zip(self.i, self.j, self.sim) if j == item]
        return sorted(a, key=lambda t: (-t[1], t[0]))


def item_relations(
    corpus: object, item_of: object, n_items: int, *, pooling: str = "mean_embedding", threshold: float = 0.75
) -> Relations:
    """Item-item similarity from chunk vectors, kept where ``>= threshold``.

    Poolings (``a``, ``b`` items with chunk sets ``A``, ``B``):
        - ``mean_embedding``: cosine of the items' mean chunk vectors.
        - ``best_pair``: max over chunk pairs of ``a_k · b_l`` (O(N^2 D): meant for agent-sized indexes).
        - ``mean_pairs``: mean over chunk pairs of ``a_k · b_l``, which equals ``mean(A) · mean(B)``.
    Items without chunks relate to nothing.
    """
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    c = as_vectors(corpus, "corpus")
    it = _items(item_of, c.shape[0])
    if c.shape[0] and it.max() >= n_items:
        raise InputError(f"item_of must lie in 0..{n_items - 1}")
    counts = np.bincount(it, minlength=n_items).astype(np.float64)
    has = counts > 0
    if pooling == "best_pair":
        sim = np.full((n_items, n_items), -np.inf, dtype=np.float32)
        order = np.argsort(it, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(it, minlength=n_items))]
        for a in np.flatnonzero(has):
            block = c[order[bounds[a] : bounds[a + 1]]] @ c.T  # [n_a, N]
            col = block.max(axis=0)
            np.maximum.at(sim[a], it, col)
    else:
        sums = np.zeros((n_items, c.shape[1]), dtype=np.float64)
        np.add.at(sums, it, c.astype(np.float64))
        means = sums / np.maximum(counts, 1)[:, None]
        if pooling == "mean_embedding":
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        sim = (means @ means.T).astype(np.float32)
    ii, jj = np.triu_indices(n_items, k=1)
    keep = has[ii] & has[jj] & (sim[ii, jj] >= threshold)
    return Relations(ii[keep].astype(np.int64), jj[keep].astype(np.int64), sim[ii, jj][keep].astype(np.float32))
