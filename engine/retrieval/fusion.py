"""The one fusion step: how a dense score and a keyword score (and, for the stash, time decays) become
one ranking score, for the agent's chunks and the stash alike.

The two sides weigh different signals, each a setting, through the same functions: the agent's
chunks add ``weight x keyword`` to the raw cosine (:func:`weighted_sum` in float32) or fuse ranks
(:func:`reciprocal_rank`); the stash scales cosine and keyword score by their best
(:func:`max_scaled`), weighs each by how far its best candidates stand out for this query
(:func:`spread_weights`) and adds two recency decays (:func:`decay`), in float64
(:func:`contextsieve.stash.ranking.combined_scores`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["RRF_K", "weighted_sum", "max_scaled", "spread_weights", "decay", "ranks", "reciprocal_rank"]

#: The constant of reciprocal-rank fusion (Cormack et al. 2009).
RRF_K = 60
_DAY = 86_400.0


def weighted_sum(parts: Sequence[tuple[np.ndarray, float]], dtype: type = np.float64) -> np.ndarray:
    """``sum(weight * values)`` over ``parts``, left to right, in ``dtype`` (a weight of 1 keeps its
    values exact)."""
    if not parts:
        raise ValueError("weighted_sum needs at least one part")
    out: np.ndarray | None = None
    for values, weight in parts:
        x: np.ndarray = np.asarray(values).astype(dtype, copy=False)
        term = x.copy() if weight == 1 else dtype(weight) * x
        out = term if out is None else out + term
    assert out is not None
    return out


def max_scaled(values: np.ndarray) -> np.ndarray:
    """``values`` divided by their maximum, so the best is 1 and order and ratios are kept. When the
    maximum is not positive (every cosine at or below 0), shifted so the best is 0 instead."""
    x = np.asarray(values, dtype=np.float64)
    if not x.size:
        return x
    hi = float(x.max())
    return x / hi if hi > 0 else x - hi


def spread_weights(scaled: Sequence[np.ndarray], weights: Sequence[float], top: int, power: float) -> list[float]:
    """This query's weights of signals already :func:`max_scaled` over the same candidates: each
    weight times ``(1 - mean of the signal's best top values) ** power``, how far its best stands
    out from the next ones (0 when ``top`` candidates tie at the best, towards 1 when one stands
    alone; 0 for a signal whose best is not 1, i.e. nothing matched), then all rescaled so they keep
    their sum. A signal that separates its candidates weighs more for this query, a flat one less.
    ``power`` 0 returns ``weights`` unchanged, as does a query where no signal stands out."""
    if power == 0 or not scaled or not scaled[0].size:
        return list(weights)
    spread: list[float] = []
    for x in scaled:
        best = np.sort(np.asarray(x, dtype=np.float64))[::-1][:top]
        spread.append(float(1.0 - best.mean()) ** power if best[0] == 1.0 else 0.0)
    total = float(sum(weights))
    mean = sum(w * c for w, c in zip(weights, spread)) / total if total > 0 else 0.0
    if mean <= 0:
        return list(weights)
    return [w * c / mean for w, c in zip(weights, spread)]


def decay(age_seconds: np.ndarray, half_life_days: float) -> np.ndarray:
    """``0.5 ** (age / half life)``, age clipped at 0."""
    age_days = np.maximum(np.asarray(age_seconds, dtype=np.float64), 0.0) / _DAY
    return np.power(0.5, age_days / half_life_days)


def ranks(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """1-based rank of each kept row by ``scores`` (best first, lower row first on ties); 0 elsewhere."""
    rows = np.flatnonzero(keep)
    order = rows[np.lexsort((rows, -scores[rows]))]
    rank = np.zeros(scores.shape[0], dtype=np.float64)
    rank[order] = np.arange(1, order.size + 1)
    return rank


def reciprocal_rank(dense: np.ndarray, keyword: np.ndarray, weight: float, keep: np.ndarray) -> np.ndarray:
    """Reciprocal-rank fusion (float32): ``1 / (RRF_K + dense rank) + weight / (RRF_K + keyword rank)``,
    ranks among the ``keep`` rows; rows without a keyword match get no keyword term."""
    ranking = (1.0 / (RRF_K + ranks(dense, keep))).astype(np.float32)
    matched = keep & (keyword > 0)
    ranking[matched] += np.float32(weight) / (RRF_K + ranks(keyword, matched)[matched]).astype(np.float32)
    return ranking
