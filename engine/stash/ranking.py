"""How retrieved segments are ranked: seed 004's multi-signal score plus a keyword term.

``score = similarity_weight * similarity + keyword_weight * keyword
        + created_weight * 0.5 ** (age / created_half_life) + stashed_weight * 0.5 ** (stash age / stashed_half_life)``

``similarity`` is the cosine of the segment's best chunk with the query's best sentence; ``keyword``
is the segment's BM25 score divided by the best BM25 score among the candidates (so in [0, 1]);
ages are taken at the retrieval time, in days (a segment from the future counts as age 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError

__all__ = ["RankConfig", "combined_scores"]

_DAY = 86_400.0


@dataclass(frozen=True)
class RankConfig:
    """Weights of the retrieval score (see the module docstring).

    Attributes:
        similarity_weight: weight of the dense cosine (default 0.6, seed 004).
        keyword_weight: weight of the normalised BM25 score (default 0.3 * 0.6 = 0.18: the selection
            engine's keyword term, 0.3 of the dense weight).
        created_weight / stashed_weight: weights of the creation-time and stash-time decays (default
            0.2 each, seed 004).
        created_half_life_days / stashed_half_life_days: days after which each decay term halves
            (defaults 30 and 7, seed 004's time constants).
        candidates: segments taken from each of dense and keyword search before the combined ranking
            (default 100; at least ``top_k``).
    """

    similarity_weight: float = 0.6
    keyword_weight: float = 0.18
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
        similarity: dense cosines. keyword: BM25 scores (0 where none); normalised here by their maximum.
        created / stashed: epoch seconds. now: the retrieval time (epoch seconds). config: the weights.
    """
    kw = np.asarray(keyword, dtype=np.float64)
    top = float(kw.max()) if kw.size else 0.0
    kw = kw / top if top > 0 else np.zeros_like(kw)
    return (
        config.similarity_weight * np.asarray(similarity, dtype=np.float64)
        + config.keyword_weight * kw
        + config.created_weight * decay(now - np.asarray(created, dtype=np.float64), config.created_half_life_days)
        + config.stashed_weight * decay(now - np.asarray(stashed, dtype=np.float64), config.stashed_half_life_days)
    )
