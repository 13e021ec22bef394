"""Numba kernels (``@njit(cache=True)``). Imported only through :mod:`contextsieve.kernels.scoring`'s
dispatch on the first call that needs them, so ``import contextsieve`` never loads Numba (~300 ms).

All take float32 C-contiguous arrays (validated by the caller). Query rows are processed four at a
time per corpus row (four accumulators), so a corpus row is read once for up to four queries.
Ties: strict ``>`` everywhere, so the lower query index and the lower row index win.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_NEG = -np.inf


@njit(fastmath=True, cache=True, inline="always")
def _row_best(q: np.ndarray, c: np.ndarray, i: int) -> tuple[float, int]:
    """max over query rows of dot(q[m], c[i]) and the first m reaching it (q has a multiple of 4 rows)."""
    d = c.shape[1]
    best = _NEG
    which = -1
    for m in range(0, q.shape[0], 4):
        s0 = np.float32(0.0)
        s1 = np.float32(0.0)
        s2 = np.float32(0.0)
        s3 = np.float32(0.0)
        for j in range(d):
            x = c[i, j]
            s0 += x * q[m, j]
            s1 += x * q[m + 1, j]
            s2 += x * q[m + 2, j]
            s3 += x * q[m + 3, j]
        if s0 > best:
            best, which = s0, m
        if s1 > best:
            best, which = s1, m + 1
        if s2 > best:
            best, which = s2, m + 2
        if s3 > best:
            best, which = s3, m + 3
    return best, which


@njit(fastmath=True, cache=True, inline="always")
def _row_best1(q: np.ndarray, c: np.ndarray, i: int) -> tuple[float, int]:
    s = np.float32(0.0)
    for j in range(c.shape[1]):
        s += c[i, j] * q[0, j]
    return s, 0


@njit(parallel=True, fastmath=True, cache=True)
def score_pool(q: np.ndarray, c: np.ndarray, exclude: np.ndarray, best: np.ndarray, which: np.ndarray) -> None:
    """best[i] = max_m q[m]·c[i], which[i] = argmax (lowest m); excluded rows get -inf / -1."""
    n = c.shape[0]
    single = q.shape[0] == 1
    for i in prange(n):
        if exclude.shape[0] and exclude[i]:
            best[i] = _NEG
            which[i] = -1
            continue
        if single:
            b, w = _row_best1(q, c, i)
        else:
            b, w = _row_best(q, c, i)
        best[i] = b
        which[i] = w


@njit(parallel=True, fastmath=True, cache=True)
def score_pool_topk(q: np.ndarray, c: np.ndarray, exclude: np.ndarray, k: int, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-block top-k of the pooled scores in one pass over ``c``; the caller merges the blocks."""
    n = c.shape[0]
    single = q.shape[0] == 1
    out_s = np.full((blocks, k), _NEG, dtype=np.float32)
    out_i = np.full((blocks, k), -1, dtype=np.int64)
    out_w = np.full((blocks, k), -1, dtype=np.int32)
    step = (n + blocks - 1) // blocks
    for blk in prange(blocks):
        lo = blk * step
        hi = min(n, lo + step)
        ts = out_s[blk]
        ti = out_i[blk]
        tw = out_w[blk]
        filled = 0
        worst = 0  # slot of the smallest kept score (latest index on ties, since rows come in order)
        for i in range(lo, hi):
            if exclude.shape[0] and exclude[i]:
                continue
            if single:
                b, w = _row_best1(q, c, i)
            else:
                b, w = _row_best(q, c, i)
            if filled < k:
                ts[filled] = b
                ti[filled] = i
                tw[filled] = w
                filled += 1
                if filled == k:
                    worst = 0
                    for t in range(1, k):
                        if ts[t] < ts[worst] or (ts[t] == ts[worst] and ti[t] > ti[worst]):
                            worst = t
            elif b > ts[worst]:
                ts[worst] = b
                ti[worst] = i
                tw[worst] = w
                worst = 0
                for t in range(1, k):
                    if ts[t] < ts[worst] or (ts[t] == ts[worst] and ti[t] > ti[worst]):
                        worst = t
    return out_s, out_i, out_w


@njit(parallel=True, fastmath=True, cache=True)
def score_pool_i8(q: np.ndarray, c8: np.ndarray, scale: np.ndarray, exclude: np.ndarray, best: np.ndarray, which: np.ndarray) -> None:
    """As :func:`score_pool` over an int8 corpus: dot = scale[i] * sum(c8[i, j] * q[m, j])."""
    n, d = c8.shape
    for i in prange(n):
        if exclude.shape[0] and exclude[i]:
            best[i] = _NEG
            which[i] = -1
            continue
        b = _NEG
        w = -1
        for m in range(0, q.shape[0], 4):
            s0 = np.float32(0.0)
            s1 = np.float32(0.0)
            s2 = np.float32(0.0)
            s3 = np.float32(0.0)
            for j in range(d):
                x = np.float32(c8[i, j])
                s0 += x * q[m, j]
                s1 += x * q[m + 1, j]
                s2 += x * q[m + 2, j]
                s3 += x * q[m + 3, j]
            if s0 > b:
                b, w = s0, m
            if s1 > b:
                b, w = s1, m + 1
            if s2 > b:
                b, w = s2, m + 2
            if s3 > b:
                b, w = s3, m + 3
        best[i] = b * scale[i]
        which[i] = w


@njit(cache=True)
def group_max(scores: np.ndarray, item_of: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Best score and best row per item (lower row wins ties; -inf / -1 for items with no row)."""
    best = np.full(n_items, _NEG, dtype=np.float32)
    arg = np.full(n_items, -1, dtype=np.int64)
    for i in range(scores.shape[0]):
        it = item_of[i]
        if scores[i] > best[it]:
            best[it] = scores[i]
            arg[it] = i
    return best, arg


@njit(cache=True)
def bm25(terms: np.ndarray, indptr: np.ndarray, rows: np.ndarray, tf: np.ndarray, doc_len: np.ndarray, idf: np.ndarray, k1: float, b: float, avgdl: float, out: np.ndarray) -> None:
    """Okapi BM25 over a term-major CSR postings matrix; adds each query term's contribution to ``out``."""
    for t in terms:
        w = idf[t]
        for p in range(indptr[t], indptr[t + 1]):
            r = rows[p]
            f = tf[p]
            out[r] += w * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * doc_len[r] / avgdl))
