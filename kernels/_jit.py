"""Numba kernels (``@njit(cache=True)``). Imported only through :mod:`contextsieve.kernels.scoring`'s
dispatch on the first call that needs them, so ``import contextsieve`` never loads Numba (a few
hundred ms; ``benchmarks.speed.cold_start``).

All take float32 C-contiguous arrays (validated by the caller). Each float32 corpus row is scored
against the query rows one dot product at a time: the row stays in L1 between queries, and this plain
loop shape is the one LLVM vectorised best of those tried for float rows (interleaved accumulators,
integer dots). int8 rows are scored four queries at a time from three queries on (:func:`_row_best_int8`, a short
last block padded): converting an int8 value to float costs as much as the multiply-add, so each
converted value serves four queries; one or two queries are faster one at a time (1M rows, side by
side on Zen 5 and as compiled for AVX2: 1 query 7-8 ms one at a time against 15-16 ms in a block of
four; 4 queries 15-21 ms in a block against 18-30 ms one at a time), while the block made float
rows no faster (``benchmarks.speed.kernels_table`` measures the kernels).
Ties: strict ``>`` everywhere, so the lower query index and the lower row index win.

Every kernel is decorated by :func:`_njit`, which caches its machine code in
:func:`contextsieve.kernels.compiled.kernel_cache_dir` (``$NUMBA_CACHE_DIR`` when the user set it, else
``<contextsieve cache>/numba``), or compiles it in memory when that folder cannot be created or written
(:data:`CACHE_PROBLEM` says why).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import config as _numba_config
from numba import njit, prange

from contextsieve.kernels.compiled import kernel_cache_dir

#: Numba's settings module (its names are set at run time, so a type checker cannot see them).
numba_config: Any = _numba_config


def _cache_root() -> tuple[str | None, str | None]:
    """(the cache folder of these kernels, None), or (None, why it cannot be used).

    The user's ``NUMBA_CACHE_DIR`` (as Numba read it into ``numba.config.CACHE_DIR``) wins; else
    ``<contextsieve cache>/numba``. The folder must be creatable and writable, the test Numba's own
    locators make (``_CacheLocator.ensure_cache_path``: ``makedirs``, then a temp file in it): Numba
    never uses a cache folder it cannot write, and, without one that works, it would fall back to the
    package's own ``__pycache__`` (written inside the install when that is writable), then to
    ``~/.cache/numba``, and raise ``RuntimeError`` at decoration when none is writable. So when the folder
    fails this test the kernels are decorated without ``cache`` and compiled in memory instead, loading
    those a read-only folder holds (:data:`READ_ONLY_DIR`)."""
    root = numba_config.CACHE_DIR or str(kernel_cache_dir())
    try:
        os.makedirs(root, exist_ok=True)
        tempfile.TemporaryFile(dir=root).close()
    except OSError as e:  # the reason, without the name of the temp file tried
        return None, f"{root}: {e.strerror or e}"
    return root, None


#: The folder the kernels are cached in (Numba adds a subfolder per source folder), or None when
#: they are compiled in memory in every process, :data:`CACHE_PROBLEM` then saying why.
CACHE_DIR, CACHE_PROBLEM = _cache_root()


def _read_only_root() -> str | None:
    """The cache folder when it cannot be written but can be read (a read-only image whose kernels
    ``contextsieve build`` compiled when it was made): kernels found there are loaded, the others
    compiled in memory, nothing written. None when it is writable, missing or unreadable, or when the
    user chose Numba's cache locators (``NUMBA_CACHE_LOCATOR_CLASSES``)."""
    if CACHE_DIR is not None or numba_config.CACHE_LOCATOR_CLASSES:
        return None
    root = numba_config.CACHE_DIR or str(kernel_cache_dir())
    return root if os.path.isdir(root) and os.access(root, os.R_OK | os.X_OK) else None


#: The read-only cache folder the kernels are loaded from (:func:`_read_only_root`), or None.
READ_ONLY_DIR = _read_only_root()


def _read_only_cache(py_func: Callable[..., Any]) -> Any:
    """A Numba ``FunctionCache`` of ``py_func`` in :data:`READ_ONLY_DIR` that loads and never saves.

    Numba's own locators accept a folder only when a temp file can be made in it, and its cache saves
    each compiled signature; so this locator (``UserProvidedCacheLocator``'s path, built while
    ``numba.config.CACHE_DIR`` names the folder, as :func:`_njit` does) skips that test, and the cache's
    ``save_overload`` does nothing."""
    from numba.core import caching as numba_caching

    caching: Any = numba_caching  # its names differ between releases: read at run time
    user_provided = getattr(caching, "UserProvidedCacheLocator", None) or caching._UserProvidedCacheLocator

    class Locator(user_provided):  # type: ignore[misc,valid-type]
        @classmethod
        def from_function(cls, func: Any, py_file: str) -> Any:
            return cls(func, py_file) if os.path.exists(py_file) else None

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    class ReadOnlyCache(caching.FunctionCache):
        _impl_class = Impl

        def save_overload(self, sig: Any, data: Any) -> None:
            return None  # the folder cannot be written: compiled in memory for this process

    saved = numba_config.CACHE_DIR
    numba_config.CACHE_DIR = READ_ONLY_DIR
    try:
        return ReadOnlyCache(py_func)
    finally:
        numba_config.CACHE_DIR = saved


def _njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)`` caching in :data:`CACHE_DIR`, for these kernels alone
    (``cache=False`` when :data:`CACHE_DIR` is None).

    Why setting ``numba.config.CACHE_DIR`` around each decoration is enough and touches nothing else
    (read in the installed Numba 0.68's numba/core/caching.py and dispatcher.py; releases before 0.68
    name the locator ``_UserProvidedCacheLocator`` and work the same way): ``njit(cache=True)`` calls
    ``Dispatcher.enable_caching``, which builds the function's ``FunctionCache`` at once; its
    ``CacheImpl`` takes the first locator class that accepts the function, the first being
    ``UserProvidedCacheLocator``, which accepts it when ``config.CACHE_DIR`` is set (and the folder is
    writable) and joins that folder into the path it keeps. Every later load and save uses the kept
    path, whatever ``config.CACHE_DIR`` says then. So the setting is needed only during the decoration,
    and is restored at once: the environment is never changed, the user's own ``cache=True`` functions
    (decorated before or after) get Numba's default, and ``config.reload_config()`` (which the compiler
    runs, and which resets ``config.CACHE_DIR`` from the environment when a ``NUMBA_*`` variable
    changed) has nothing of ours to undo. A function another thread decorates during these
    microseconds would see the setting too."""

    def decorate(fn: Callable[..., Any]) -> Any:
        if CACHE_DIR is None:
            disp = njit(cache=False, **options)(fn)
            if READ_ONLY_DIR is not None:
                disp._cache = _read_only_cache(disp.py_func)  # what Dispatcher.enable_caching sets
            return disp
        saved = numba_config.CACHE_DIR
        numba_config.CACHE_DIR = CACHE_DIR
        try:
            return njit(cache=True, **options)(fn)
        finally:
            numba_config.CACHE_DIR = saved

    return decorate


_NEG = -np.inf
#: fastmath without ``nnan``/``ninf``: sums may be reordered (SIMD), but a NaN score stays NaN and
#: never wins a ``>`` comparison, as on the numpy path (see :func:`contextsieve.kernels.scoring.score_pool`).
FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}


@_njit(fastmath=FAST, inline="always")
def _row_best(q: np.ndarray, c: np.ndarray, i: int) -> tuple[float, int]:
    """max over query rows m of q[m] · c[i] and the first m reaching it (``c`` float32 or int8)."""
    best = _NEG
    which = -1
    for m in range(q.shape[0]):
        s = np.float32(0.0)
        for j in range(c.shape[1]):
            s += np.float32(c[i, j]) * q[m, j]
        if s > best:
            best, which = s, m
    return best, which


#: From this many queries, int8 rows are scored four queries at a time (:func:`_row_best_int8`).
INT8_BLOCK_FROM = 3


@_njit(fastmath=FAST, inline="always")
def _row_best_int8(q: np.ndarray, c: np.ndarray, i: int) -> tuple[float, int]:
    """:func:`_row_best` for int8 rows. One or two queries are scored one at a time; from
    :data:`INT8_BLOCK_FROM` on, in blocks of four that share each int8-to-float conversion.

    Within a call every query goes through the same loop at every position: a short last block
    repeats the last query in its unused lanes (their scores are ignored) instead of going through a
    narrower loop, so equal queries get bit-equal scores wherever they sit, whichever SIMD width LLVM
    picks (a block-of-two or single-query tail rounded differently on AVX2). The width depends on the
    query count alone, so a query's bits are the same in every call of the same width class.
    Ties: strict ``>``, lower query first."""
    n_q = q.shape[0]
    if n_q < INT8_BLOCK_FROM:
        return _row_best(q, c, i)
    best = _NEG
    which = -1
    d = c.shape[1]
    last = n_q - 1
    for m in range(0, n_q, 4):
        m1 = min(m + 1, last)
        m2 = min(m + 2, last)
        m3 = min(m + 3, last)
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for j in range(d):
            x = np.float32(c[i, j])
            s0 += x * q[m, j]
            s1 += x * q[m1, j]
            s2 += x * q[m2, j]
            s3 += x * q[m3, j]
        if s0 > best:
            best, which = s0, m
        if m + 1 <= last and s1 > best:
            best, which = s1, m + 1
        if m + 2 <= last and s2 > best:
            best, which = s2, m + 2
        if m + 3 <= last and s3 > best:
            best, which = s3, m + 3
    return best, which


@_njit(parallel=True, fastmath=FAST)
def score_matrix(q: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    """out[i, m] = q[m] · c[i] for float32 rows, rows in parallel, queries four at a time sharing each
    loaded value; a short last block repeats the last query in its unused lanes (ignored), so every
    query goes through the same loop (bit-equal scores for equal queries wherever they sit)."""
    nq = q.shape[0]
    last = nq - 1
    for i in prange(c.shape[0]):
        for m in range(0, nq, 4):
            m1 = min(m + 1, last)
            m2 = min(m + 2, last)
            m3 = min(m + 3, last)
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for j in range(c.shape[1]):
                x = c[i, j]
                s0 += x * q[m, j]
                s1 += x * q[m1, j]
                s2 += x * q[m2, j]
                s3 += x * q[m3, j]
            out[i, m] = s0
            if m + 1 <= last:
                out[i, m + 1] = s1
            if m + 2 <= last:
                out[i, m + 2] = s2
            if m + 3 <= last:
                out[i, m + 3] = s3


@_njit(parallel=True, fastmath=FAST)
def score_pool(
    q: np.ndarray, c: np.ndarray, scale: np.ndarray, exclude: np.ndarray, best: np.ndarray, which: np.ndarray
) -> None:
    """best[i] = scale[i] * max_m q[m]·c[i] (scale empty = 1), which[i] = argmax (lowest m);
    excluded rows get -inf / -1. ``c`` is float32, or int8 with per-row ``scale``."""
    scaled = scale.shape[0] > 0
    for i in prange(c.shape[0]):
        if exclude.shape[0] and exclude[i]:
            best[i] = _NEG
            which[i] = -1
        elif scaled:  # int8 rows
            b, w = _row_best_int8(q, c, i)
            best[i] = b * scale[i]
            which[i] = w
        else:
            b, w = _row_best(q, c, i)
            best[i] = b
            which[i] = w


@_njit(inline="always")
def _worst(ts: np.ndarray, ti: np.ndarray) -> int:
    """Slot of the smallest kept score; on ties the later row (rows arrive in order, so it loses)."""
    worst = 0
    for t in range(1, ts.shape[0]):
        if ts[t] < ts[worst] or (ts[t] == ts[worst] and ti[t] > ti[worst]):
            worst = t
    return worst


@_njit(inline="always")
def _push(
    ts: np.ndarray, ti: np.ndarray, tw: np.ndarray, filled: int, worst: int, b: float, i: int, w: int
) -> tuple[int, int]:
    """Offer row ``i`` (score ``b``, query ``w``) to a block's top-k; returns the new (filled, worst)."""
    k = ts.shape[0]
    if filled < k:
        ts[filled] = b
        ti[filled] = i
        tw[filled] = w
        filled += 1
        if filled == k:
            worst = _worst(ts, ti)
    elif b > ts[worst]:
        ts[worst] = b
        ti[worst] = i
        tw[worst] = w
        worst = _worst(ts, ti)
    return filled, worst


@_njit(parallel=True, fastmath=FAST)
def score_pool_topk(
    q: np.ndarray, c: np.ndarray, scale: np.ndarray, exclude: np.ndarray, k: int, blocks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-block top-k of the pooled (and scaled, as in :func:`score_pool`) scores in one pass over
    ``c``; the caller merges the blocks."""
    n = c.shape[0]
    scaled = scale.shape[0] > 0
    out_s = np.full((blocks, k), _NEG, dtype=np.float32)
    out_i = np.full((blocks, k), -1, dtype=np.int64)
    out_w = np.full((blocks, k), -1, dtype=np.int32)
    step = (n + blocks - 1) // blocks
    for blk in prange(blocks):
        filled, worst = 0, 0
        for i in range(blk * step, min(n, (blk + 1) * step)):
            if not (exclude.shape[0] and exclude[i]):
                if scaled:  # int8 rows
                    b, w = _row_best_int8(q, c, i)
                    b = b * scale[i]
                else:
                    b, w = _row_best(q, c, i)
                if b > _NEG:  # rows with no score (NaN / -inf) are never hits, as in top_k
                    filled, worst = _push(out_s[blk], out_i[blk], out_w[blk], filled, worst, b, i, w)
    return out_s, out_i, out_w


@_njit(inline="always")
def _half_bits_edge(h: np.uint32) -> np.uint32:
    """The float32 bits of the float16 ``h`` whose exponent is all zeros or all ones: a signed zero, a
    subnormal (``m * 2**-24``, made normal: its leading bit becomes the implicit one), an infinity or a
    NaN (its payload kept)."""
    sign = (h & 0x8000) << 16
    m = h & 0x3FF
    if h & 0x7C00:  # all ones
        return np.uint32(sign | 0x7F800000 | (m << 13))
    if m == 0:
        return np.uint32(sign)
    e = np.uint32(113)  # 127 - 15 + 1: the exponent of a float16 whose leading bit is bit 10
    while m & 0x400 == 0:
        m <<= 1
        e -= 1
    return np.uint32(sign | (e << 23) | ((m & 0x3FF) << 13))


@_njit()
def half_rows(bits: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out[i] = the float32 bits of the float16 row ``bits[rows[i]]`` (float16 as its uint16 bits, float32
    as uint32: Numba has no float16 on the CPU), bit for bit numpy's conversion of every value. A row
    is converted with integer operations LLVM vectorises; when it holds a value of an edge exponent
    (a zero, a subnormal, an infinity, a NaN), those are converted again one by one."""
    d = bits.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        edge = np.uint32(0)
        for j in range(d):
            h = np.uint32(bits[r, j])
            e = h & 0x7C00
            edge |= np.uint32(e == 0) | np.uint32(e == 0x7C00)
            out[i, j] = ((h & 0x8000) << 16) | (((h & 0x7FFF) << 13) + np.uint32(112 << 23))
        if edge:
            for j in range(d):
                h = np.uint32(bits[r, j])
                e = h & 0x7C00
                if e == 0 or e == 0x7C00:
                    out[i, j] = _half_bits_edge(h)


@_njit()
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


@_njit(inline="always")
def _offer(ts: np.ndarray, ti: np.ndarray, filled: int, worst: int, v: float, r: int) -> tuple[int, int]:
    """Offer row ``r`` (score ``v``) to a top-k whose rows arrive in any order: it enters when the top-k
    is not full or it beats the worst kept by score, then by the lower row; returns (filled, worst)."""
    k = ts.shape[0]
    if filled < k:
        ts[filled] = v
        ti[filled] = r
        filled += 1
        if filled == k:
            worst = _worst(ts, ti)
    elif v > ts[worst] or (v == ts[worst] and r < ti[worst]):
        ts[worst] = v
        ti[worst] = r
        worst = _worst(ts, ti)
    return filled, worst


@_njit(nogil=True)
def bm25_top_k(
    slots: np.ndarray,
    tf: np.ndarray,
    offsets: np.ndarray,
    idf: np.ndarray,
    lengths: np.ndarray,
    avgdl: float,
    k1: float,
    b: float,
    allowed: np.ndarray,
    k: int,
    also: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BM25 of the allowed rows holding a query term, summed term by term in posting order (as
    ``np.bincount`` sums), the ``k`` best kept in one pass over the rows touched; then the scores of
    the rows in ``also`` (0 for a row with no allowed posting). Unordered top-k: the caller sorts it."""
    n = allowed.shape[0]
    acc = np.zeros(n, dtype=np.float64)
    seen = np.zeros(n, dtype=np.bool_)
    touched = np.empty(slots.shape[0], dtype=np.int64)
    nt = 0
    for t in range(offsets.shape[0] - 1):
        w = idf[t]
        for p in range(offsets[t], offsets[t + 1]):
            s = slots[p]
            if allowed[s]:
                f = tf[p]
                acc[s] += w * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * lengths[s] / avgdl))
                if not seen[s]:
                    seen[s] = True
                    touched[nt] = s
                    nt += 1
    ts = np.full(k, _NEG, dtype=np.float64)
    ti = np.full(k, -1, dtype=np.int64)
    filled, worst = 0, 0
    worst_v, worst_r = _NEG, -1  # the worst kept once full, in locals: the test below rejects most rows
    for j in range(nt):
        s = touched[j]
        v = acc[s]
        if v > 0.0 and (filled < k or v > worst_v or (v == worst_v and s < worst_r)):
            filled, worst = _offer(ts, ti, filled, worst, v, s)
            if filled == k:
                worst_v, worst_r = ts[worst], ti[worst]
    also_scores = np.zeros(also.shape[0], dtype=np.float64)
    for j in range(also.shape[0]):
        also_scores[j] = acc[also[j]]
    return ti[:filled], ts[:filled], also_scores
