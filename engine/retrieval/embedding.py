"""What retrieval needs from an embedder, and the check every embedder's output passes.

:class:`TextEmbedder` is the protocol the agent's chunk store and the stash both take
(:class:`contextsieve.Embedder` is one); :func:`checked_vectors` is the one check of what an embedder
returned (shape, finite unit rows) before a vector is stored or searched with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from contextsieve.errors import EmbedderOutputError

__all__ = ["TextEmbedder", "NORM_TOLERANCE", "unit_rows", "checked_vectors"]

#: How far from 1.0 an embedder's (and a stored) vector's L2 norm may be.
NORM_TOLERANCE = 1e-3


@runtime_checkable
class TextEmbedder(Protocol):
    """What the engine needs from an embedder (:class:`contextsieve.Embedder` is one).

    Attributes:
        model_id: identity of the vectors (two embedders with the same id give interchangeable vectors);
            the persistent embedding cache is keyed by it. ``None``: vectors are kept in memory only.
    """

    @property
    def model_id(self) -> str | None: ...

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Unit vectors ``[len(texts), dim]``, float32, in input order; a progress bar when asked."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Model tokens per text."""
        ...


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Mask of rows that are finite with an L2 norm within :data:`NORM_TOLERANCE` of 1."""
    v = np.asarray(vectors, dtype=np.float64)
    finite: np.ndarray = np.asarray(np.isfinite(v).all(axis=1), dtype=bool)
    v = np.where(finite[:, None], v, 0.0)
    return finite & (np.abs(np.sqrt(np.einsum("ij,ij->i", v, v)) - 1.0) <= NORM_TOLERANCE)


def checked_vectors(vectors: np.ndarray, n: int) -> np.ndarray:
    """The embedder's output as float32 ``[n, dim]`` if its rows are finite unit vectors (tolerance
    :data:`NORM_TOLERANCE`), else :class:`EmbedderOutputError` saying what is wrong."""
    arr = np.asarray(vectors)
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] == 0:
        raise EmbedderOutputError(f"the embedder returned shape {arr.shape} for {n} texts; expected ({n}, dim)")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    ok = unit_rows(arr)
    if not ok.all():
        raise EmbedderOutputError(
            f"the embedder returned {int((~ok).sum())} vector(s) that are not finite unit vectors "
            f"(first for text {int(np.argmin(ok))}); embedders must return L2-normalised rows"
        )
    return arr
