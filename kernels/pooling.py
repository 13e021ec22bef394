"""Pooling of token states into sentence vectors (numpy; used for user-supplied token-output graphs)."""

from __future__ import annotations

import numpy as np

__all__ = ["mean_pool_normalize"]


def mean_pool_normalize(hidden: np.ndarray, mask: np.ndarray, *, normalize: bool = True) -> np.ndarray:
    """Masked mean over the sequence axis, then L2 normalisation, like sentence-transformers.

    Args:
        hidden: ``[batch, seq, dim]`` token states.
        mask: ``[batch, seq]``, 1 for real tokens, 0 for padding.
        normalize: divide each row by ``max(norm, 1e-12)``.

    Returns:
        ``[batch, dim]`` float32.
    """
    m = mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32, copy=False) * m).sum(axis=1)
    pooled = summed / np.maximum(m.sum(axis=1), 1e-9)
    if normalize:
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return pooled.astype(np.float32, copy=False)
