"""How retrieved segments are ranked: seed 004's multi-signal score plus a keyword term.

``score = similarity_weight * sim + keyword_weight * keyword
        + created_weight * 0.5 ** (age / created_half_life) + stashed_weight * 0.5 ** (stash age / stashed_half_life)``

``sim`` is the cosine of the segment's best chunk with the query's best sentence and ``keyword`` its
BM25 score, each min-max normalised over the candidates of this retrieval (so both lie in [0, 1] and
the weights mean the same whatever the spread of the model's cosines; Bruch et al. 2022 found
normalised convex fusion robust). Ages are taken at the retrieval time, in days (a segment from the
future counts as age 0). The defaults were chosen with ``python -m benchmarks.stash_quality``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError

__all__ = ["RankConfig", "combined_scores", "min_max"]

_DAY = 86_400.0


@dataclass(frozen=True)
class RankConfig:
    """Weights of the retrieval score (see the module docstring).

    Attributes:
        similarity_weight: weight of the normalised dense cosine (default 0.6, seed 004).
        keyword_weight: weight of the normalised BM25 score (default 0.25: 0.3 of the relevance
            weight, as the selection engine's keyword term). On this project's conversation set dense
            alone is strong and 0.1-0.2 scores best, on the held-out benchmark the issue cites BM25
            beats dense; 0.25 sits between (``benchmarks.stash_quality`` prints the sweep).
        created_weight / stashed_weight: weights of the creation-time and stash-time decays (default
            0.2 each, seed 004; measured: with ages at a conversation's end they cost nothing and
            gain a little over no decay).
        created_half_life_days / stashed_half_life_days: days after which each decay term halves
            (defaults 30 and 7, seed 004's time constants).
        candidates: segments taken from each of dense and keyword search before the combined ranking
            (default 100; at least ``top_k``).
    """

    similarity_weight: float = 0.6
    keyword_weight: float = 0.25
    created_weight: float = 0.2
    stashed_weight: float = 0.2
    created_half_life_days: float = 30.0
    stashed_half_life_days: float = 7.0
    candidates: int = 100

    def __post_init__(self) -> None:
        for name in ("similarity_weight", "keyword_weight", "created_weight", "stashed_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"{name} must be a finite number >= 0, got {v!r}")
        for name in ("created_half_life_days", "stashed_half_life_days"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise InputError(f"{name} must be a positive number of days, got {v!r}")
        if (
            not isinstance(self.candidates, int)
            or isinstance(self.candidates, bool)
            or not 1 <= self.candidates <= 10_000
        ):
            raise InputError(f"candidates must be an int in 1..10000, got {self.candidates!r}")


def decay(age_seconds: np.ndarray, half_life_days: float) -> np.ndarray:
    """``0.5 ** (age / half life)``, age clipped at 0."""
    age_days = np.maximum(np.asarray(age_seconds, dtype=np.float64), 0.0) / _DAY
    return np.power(0.5, age_days / half_life_days)


def min_max(values: np.ndarray) -> np.ndarray:
    """``values`` scaled to [0, 1] by their minimum and maximum (all zeros when they are all equal)."""
    x = np.asarray(values, dtype=np.float64)
    if not x.size:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def combined_scores(
    similarity: np.ndarray,
    keyword: np.ndarray,
    created: np.ndarray,
    stashed: np.ndarray,
    now: float,
    config: RankConfig,
) -> np.ndarray:
    """The score of each candidate.

    Args:
        similarity: dense cosines. keyword: BM25 scores (0 where none). Both are min-max normalised here.
        created / stashed: epoch seconds. now: the retrieval time (epoch seconds). config: the weights.
    """
    return (
        config.similarity_weight * min_max(similarity)
        + config.keyword_weight * min_max(keyword)
        + config.created_weight * decay(now - np.asarray(created, dtype=np.float64), config.created_half_life_days)
        + config.stashed_weight * decay(now - np.asarray(stashed, dtype=np.float64), config.stashed_half_life_days)
    )
