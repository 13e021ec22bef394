"""Scoring kernels: pure array functions, numpy for small inputs and Numba for large ones.

Every function here takes explicit arrays and returns arrays; no I/O, no model, and one note only (a
:func:`contextsieve.progress.note` before the kernels compile, once per machine). Vectors
are float32 and C-contiguous; float64/float16 or strided input is converted once, anything else
(ints, wrong rank, wrong width) raises :class:`~contextsieve.errors.InputError`. Ties are broken the
same way everywhere: the lower query index and the lower row index win.

The backend is chosen in this module alone: numpy/BLAS while the work is small (no JIT, no Numba
import), Numba above a size; :func:`use_numba` decides for the vector kernels, float32 and int8 rows
alike (from
:data:`NUMBA_MIN_WORK` multiply-adds), one constant each for the others (:data:`GROUP_NUMBA_ROWS`,
:data:`BM25_TOPK_NUMBA_POSTINGS`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from contextsieve.errors import CacheFolderWarning, InputError
from contextsieve.kernels import threads

__all__ = [
    "NUMBA_MIN_WORK",
    "GEMV_MAX_ROWS",
    "query_scores",
    "Hits",
    "as_vectors",
    "check_finite",
    "use_numba",
    "score_pool",
    "top_k",
    "score_pool_topk",
    "group_max",
    "half_rows",
    "Int8Corpus",
    "F16Corpus",
    "bm25_top_k",
]

#: Multiply-adds (rows x queries x dim) from which Numba is used: below it numpy's gemv is as fast or
#: faster and a small case costs little either way, while Numba's import and cache load cost a few
#: hundred ms once; above it the fused kernel wins (``benchmarks/speed/kernels_table.py``).
NUMBA_MIN_WORK = 4_000_000

#: Rows from which :func:`group_max` uses its Numba loop (numpy's lexsort is fine below).
GROUP_NUMBA_ROWS = 50_000
#: Postings from which :func:`bm25_top_k` uses its Numba loop: below it the numpy path's fixed cost is
#: small and Numba is not imported for a small store (``benchmarks.speed.kernels_table``).
BM25_TOPK_NUMBA_POSTINGS = 4_096
#: Values (rows x dim) from which :func:`half_rows` converts with its Numba loop: numpy converts float16
#: at 2-3.7 ns a value, the loop 1.6-3.2x as fast from 32 rows of 384
#: (``python -m benchmarks.speed.kernels_table --half-only``).
HALF_NUMBA_VALUES = 16_384

_jit: ModuleType | None = None


def _kernels() -> ModuleType:
    """The Numba kernels, imported on first use."""
    global _jit
    if _jit is not None:
        return _jit
    with threads.load_lock():  # once, whichever thread calls first (a second wrapper would not take turns)
        if _jit is None:
            _jit = _load_kernels()
    return _jit


def _load_kernels() -> ModuleType:
    """Start the thread pool, then import (and compile, the first time on a machine) the kernels."""
    from contextsieve.kernels.compiled import kernels_compiled

    compiled = kernels_compiled()
    if not compiled:  # a few seconds, once per machine: say so (contextsieve.progress)
        from contextsieve.progress import note

        note("compiling the scoring kernels for this CPU (once per machine, a few seconds)")
    threads.start_threads()  # before a kernel loads: loading one starts Numba's threading layer
    from contextsieve.kernels import _jit as mod

    if mod.CACHE_PROBLEM is not None and not compiled:
        warnings.warn(
            f"the scoring kernels cannot be cached ({mod.CACHE_PROBLEM}): they are compiled in this process "
            "(about 10 s on 2 cores) and again in the next; run `contextsieve build` once with "
            "$CONTEXTSIEVE_CACHE naming a folder this user may write (a read-only image: when it is made)",
            CacheFolderWarning,
            stacklevel=4,
        )
    return threads.serialized(mod)  # the pool started (contextsieve.kernels.threads)


#: Up to this many rows, :func:`query_scores` stays on one OpenBLAS thread: its matrix-vector product
#: does not wake BLAS threads at these sizes, whose idle spinning (~0.1 s on the other core, where ONNX
#: Runtime is embedding the next message) a matrix-matrix product would cause from about 1,000 rows
#: (``benchmarks.speed.request_latency``: request p50 9.8 -> ~6 ms back to back). Kept as the documented
#: size the no-spinning test checks.
GEMV_MAX_ROWS = 2048


def query_scores(corpus: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``corpus @ queries.T`` (``[N, M]`` float32), every query by the same arithmetic.

    A matrix-matrix product would score the queries of a short last column block through BLAS edge
    kernels that round differently, so an equal query would get other bits at another position
    (``test_equal_queries_get_bit_equal_scores_wherever_they_sit``). So: below :func:`use_numba`'s work,
    one matrix-vector product per query (which also never wakes BLAS threads for small corpora, see
    :data:`GEMV_MAX_ROWS`); above it, the Numba kernel that reads each row once for all queries, four
    queries per loaded value (80k rows, 10 queries, side by side: 10.8 ms against 17.5 for the matrix
    product and 23.4 for one matrix-vector product per query; 2 queries: 6.2 / 15.8 / 5.0 ms).
    Inputs are float32 2-D arrays, validated by the caller."""
    n, m = corpus.shape[0], queries.shape[0]
    if m and n and corpus.dtype == np.float32 and queries.dtype == np.float32 and use_numba(n, m, corpus.shape[1]):
        out = np.empty((n, m), dtype=np.float32)
        _kernels().score_matrix(np.ascontiguousarray(queries), np.ascontiguousarray(corpus), out)
        return out
    res = np.empty((m, n), dtype=np.result_type(corpus, queries))
    for k in range(m):
        np.matmul(corpus, queries[k], out=res[k])
    return res.T


def use_numba(rows: int, queries: int, dim: int) -> bool:
    """The one backend decision: Numba when ``rows * queries * dim >= NUMBA_MIN_WORK``, except in a child
    forked after its parent started GNU OpenMP's threads (:func:`~contextsieve.kernels.threads.parallel_usable`)
    and where Numba's JIT is off (:func:`~contextsieve.kernels.threads.jit_disabled`)."""
    return rows * max(queries, 1) * dim >= NUMBA_MIN_WORK and not threads.jit_disabled() and threads.parallel_usable()


@dataclass(frozen=True)
class Hits:
    """Top-k result: row indices (best first), their pooled scores, and which query row gave each."""

    idx: np.ndarray  # int64 [k]
    scores: np.ndarray  # float32 [k]
    which: np.ndarray  # int32 [k]

    def __len__(self) -> int:
        return int(self.idx.shape[0])

    def to_list(self) -> list[tuple[int, float, int]]:
        return [(int(i), float(s), int(w)) for i, s, w in zip(self.idx, self.scores, self.which)]


def as_vectors(x: object, name: str, dim: int | None = None) -> np.ndarray:
    """``x`` as a float32 C-contiguous 2-D array (converted once if needed), or :class:`InputError`."""
    a = np.asarray(x)
    if a.ndim == 1 and a.size == 0 and dim is not None:
        a = a.reshape(0, dim)
    if a.ndim != 2:
        raise InputError(f"{name} must be 2-D [rows, dim], got shape {a.shape}")
    if a.dtype.kind != "f":
        raise InputError(f"{name} must hold floats, got dtype {a.dtype}")
    if dim is not None and a.shape[1] != dim:
        raise InputError(f"{name} has width {a.shape[1]}, expected {dim}")
    return np.ascontiguousarray(a, dtype=np.float32)


def check_finite(x: np.ndarray, name: str) -> None:
    """Raise :class:`InputError` naming the first rows that hold NaN or inf."""
    bad = ~np.isfinite(x)
    if bad.any():
        rows = np.flatnonzero(bad.reshape(x.shape[0], -1).any(axis=1))[:5].tolist()
        raise InputError(f"{name} holds NaN or inf in rows {rows}")


def _k(k: object) -> int:
    """``k`` as a non-negative int (numpy ints too; not bool), or :class:`InputError`."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise InputError(f"k must be an int, got {type(k).__name__}")
    if k < 0:
        raise InputError(f"k must be >= 0, got {k}")
    return int(min(int(k), 2**62))


def _mask(exclude: object, n: int) -> np.ndarray:
    if exclude is None:
        return np.zeros(0, dtype=np.bool_)
    m = np.asarray(exclude)
    if m.shape != (n,) or m.dtype != np.bool_:
        raise InputError(f"exclude must be a bool array of shape ({n},), got {m.dtype} {m.shape}")
    return m


_NO_SCALE = np.zeros(0, dtype=np.float32)


def _prepare(queries: object, corpus: object) -> tuple[np.ndarray, np.ndarray]:
    c = as_vectors(corpus, "corpus")
    q = as_vectors(queries, "queries", c.shape[1])
    check_finite(q, "queries")
    return q, c


def _pool_setup(
    queries: object, n: int, d: int, exclude: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validated queries, the exclusion mask, and ``best`` / ``which`` filled with -inf / -1."""
    q = as_vectors(queries, "queries", d)
    check_finite(q, "queries")
    return q, _mask(exclude, n), np.full(n, -np.inf, dtype=np.float32), np.full(n, -1, dtype=np.int32)


def _no_hits() -> Hits:
    return Hits(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int32))


def score_pool(queries: object, corpus: object, *, exclude: object = None) -> tuple[np.ndarray, np.ndarray]:
    """Max-pooled scores of every corpus row over the query rows.

    Args:
        queries: ``[M, D]`` query vectors (M may be 0).
        corpus: ``[N, D]`` vectors.
        exclude: optional bool ``[N]``; excluded rows score ``-inf``.

    Returns:
        ``(best float32 [N], which int32 [N])``: ``best[i] = max_m queries[m] · corpus[i]`` and the lowest
        ``m`` reaching it; ``-inf`` / ``-1`` for excluded rows and when M = 0.

    A NaN score (a corpus row holding NaN, or ``inf - inf``) counts as no score: a row whose every
    score is NaN or ``-inf`` gets ``-inf`` / ``-1``, as an excluded row, on both backends. Queries must
    be finite (:class:`InputError`); the corpus is not scanned for NaN (that would double the cost).
    """
    c = as_vectors(corpus, "corpus")
    n = c.shape[0]
    q, mask, best, which = _pool_setup(queries, n, c.shape[1], exclude)
    m = q.shape[0]
    if m == 0 or n == 0:
        return best, which
    if use_numba(n, m, c.shape[1]):
        _kernels().score_pool(q, c, _NO_SCALE, mask, best, which)
        return best, which
    with np.errstate(invalid="ignore"):
        s = np.array(query_scores(c, q))  # [N, M], writable
    nan = np.isnan(s)
    if nan.any():
        s[nan] = -np.inf
    best = s.max(axis=1).astype(np.float32, copy=False)
    which = s.argmax(axis=1).astype(np.int32)
    which[best == -np.inf] = -1
    if mask.shape[0]:
        best[mask] = -np.inf
        which[mask] = -1
    return best, which


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest finite scores, best first, lower index first on ties.

    Partial selection (``argpartition``), then an exact ordering of the candidates: every row tied with
    the k-th score is considered, so the result does not depend on the partition's arbitrary order.
    ``-inf`` rows (excluded) are never returned, so fewer than ``k`` may come back.
    """
    s = np.asarray(scores)
    if s.ndim != 1:
        raise InputError(f"scores must be 1-D, got shape {s.shape}")
    k = _k(k)
    cand = np.flatnonzero(s > -np.inf)
    if k == 0 or cand.size == 0:
        return np.zeros(0, dtype=np.int64)
    if k < cand.size:
        sc = s[cand]
        part = np.argpartition(-sc, k - 1)[:k]
        cand = cand[sc >= sc[part].min()]
    order = np.lexsort((cand, -s[cand]))[:k]
    return cand[order].astype(np.int64, copy=False)


def score_pool_topk(queries: object, corpus: object, k: int, *, exclude: object = None) -> Hits:
    """The top ``k`` rows by max-pooled score in one pass (Numba) or score + partial select (numpy).

    Same semantics as ``top_k(score_pool(...)[0], k)``, with each hit's query row.
    """
    q, c = _prepare(queries, corpus)
    n, m = c.shape[0], q.shape[0]
    mask = _mask(exclude, n)
    k = min(_k(k), n)  # never more slots than rows
    if m == 0 or n == 0 or k == 0:
        return _no_hits()
    if use_numba(n, m, c.shape[1]):
        return _merge_blocks(_kernels().score_pool_topk(q, c, _NO_SCALE, mask, int(k), _blocks(n, k)), k)
    best, which = score_pool(q, c, exclude=mask if mask.shape[0] else None)
    idx = top_k(best, k)
    return Hits(idx, best[idx], which[idx])


def _blocks(n: int, k: int) -> int:
    """Row blocks for the fused top-k: several per Numba thread, each holding at least k rows."""
    return int(max(1, min(n // max(k, 1), 8 * threads.count())))


def _merge_blocks(blocks: tuple[np.ndarray, np.ndarray, np.ndarray], k: int) -> Hits:
    """Merge per-block top-k lists into one, ordered by score then row (exact, as a full sort would)."""
    bs, bi, bw = (b.ravel() for b in blocks)
    keep = bi >= 0
    bs, bi, bw = bs[keep], bi[keep], bw[keep]
    order = np.lexsort((bi, -bs))[:k]
    return Hits(bi[order], bs[order], bw[order])


def group_max(scores: np.ndarray, item_of: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Best score and best row per item (segment max; lower row wins ties).

    Args:
        scores: float ``[N]``.
        item_of: int ``[N]``, the item of each row, in ``0 .. n_items - 1``.
        n_items: number of items.

    Returns:
        ``(best float32 [n_items], row int64 [n_items])``; ``-inf`` / ``-1`` for items with no row.
    """
    s = np.ascontiguousarray(scores, dtype=np.float32)
    it = np.asarray(item_of)
    if s.ndim != 1 or it.shape != s.shape:
        raise InputError(f"scores and item_of must be 1-D of one length, got {s.shape} and {it.shape}")
    if it.dtype.kind not in "iu":
        raise InputError(f"item_of must hold ints, got {it.dtype}")
    if s.size and (it.min() < 0 or it.max() >= n_items):
        raise InputError(f"item_of must lie in 0..{n_items - 1}")
    if s.size >= GROUP_NUMBA_ROWS and not threads.jit_disabled():
        return _kernels().group_max(s, np.ascontiguousarray(it, dtype=np.int64), int(n_items))
    best = np.full(n_items, -np.inf, dtype=np.float32)
    arg = np.full(n_items, -1, dtype=np.int64)
    if s.size:
        order = np.lexsort((np.arange(s.size), -s, it))  # by item, then best score, then lower row
        first = np.ones(order.size, dtype=bool)
        first[1:] = it[order[1:]] != it[order[:-1]]
        rows = order[first]
        rows = rows[s[rows] > -np.inf]
        best[it[rows]] = s[rows]
        arg[it[rows]] = rows
    return best, arg


def half_rows(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of a float16 matrix as float32, bit for bit numpy's conversion (``matrix[rows].astype(np.float32)``,
    the path for small inputs and the oracle). The Numba loop is taken from :data:`HALF_NUMBA_VALUES`
    values, and only once the kernels are loaded (a search that scans with them): this alone never
    imports Numba, whose import and cache load cost a few hundred ms and about 100 MB once.

    Args:
        matrix: float16 ``[R, D]`` (either byte order).
        rows: int ``[K]`` in ``0 .. R - 1``.

    Returns:
        float32 ``[K, D]``, a new array.
    """
    m = np.asarray(matrix)
    r = np.asarray(rows)
    if m.dtype.kind != "f" or m.dtype.itemsize != 2 or m.ndim != 2:
        raise InputError(f"matrix must be a 2-D float16 array, got {m.ndim}-D {m.dtype}")
    if r.ndim != 1 or (r.size and r.dtype.kind not in "iu"):
        raise InputError(f"rows must be a 1-D array of ints, got {r.ndim}-D {r.dtype}")
    if r.size and (int(r.min()) < 0 or int(r.max()) >= m.shape[0]):
        raise InputError(f"rows must lie in 0..{m.shape[0] - 1}")
    if (
        r.size * m.shape[1] >= HALF_NUMBA_VALUES
        and _jit is not None
        and m.dtype == np.float16
        and m.flags.c_contiguous
        and not threads.jit_disabled()
    ):
        out = np.empty((r.size, m.shape[1]), dtype=np.uint32)
        _kernels().half_rows(m.view(np.uint16), np.ascontiguousarray(r, dtype=np.int64), out)
        return out.view(np.float32)
    return m[r.astype(np.int64)].astype(np.float32)


@dataclass(frozen=True)
class Int8Corpus:
    """Corpus rows stored as int8 with one float32 scale per row (4x less memory and bandwidth).

    ``row ≈ q8[i] * scale[i]``; scores against it are within ``|q| * scale[i] / 2 * sqrt(dim)`` of exact.
    """

    q8: np.ndarray  # int8 [N, D]
    scale: np.ndarray  # float32 [N]

    @classmethod
    def from_vectors(cls, corpus: object) -> "Int8Corpus":
        c = as_vectors(corpus, "corpus")
        check_finite(c, "corpus")
        scale = (
            np.maximum(np.abs(c).max(axis=1) / 127.0, 1e-12).astype(np.float32)
            if c.size
            else np.zeros(c.shape[0], np.float32)
        )
        q8 = np.clip(np.rint(c / scale[:, None]), -127, 127).astype(np.int8) if c.size else np.zeros(c.shape, np.int8)
        return cls(np.ascontiguousarray(q8), scale)

    def score_pool(self, queries: object, *, exclude: object = None) -> tuple[np.ndarray, np.ndarray]:
        """As :func:`score_pool`, against the int8 rows."""
        n, d = self.q8.shape
        q, mask, best, which = _pool_setup(queries, n, d, exclude)
        if q.shape[0] and n:
            if not use_numba(n, q.shape[0], d):
                return self._numpy_pool(q, mask)
            _kernels().score_pool(q, self.q8, self.scale, mask, best, which)
        return best, which

    def _numpy_pool(self, q: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The numpy path of :meth:`score_pool` (below :func:`use_numba`'s work: a small store never
        imports or compiles Numba): the rows as float32, pooled by :func:`score_pool`, then scaled
        (``scale > 0``, so scaling after the max picks the same query row)."""
        best, which = score_pool(q, self.q8.astype(np.float32), exclude=mask if mask.shape[0] else None)
        return (best * self.scale).astype(np.float32, copy=False), which

    def score_pool_topk(self, queries: object, k: int, *, exclude: object = None) -> Hits:
        """As :func:`score_pool_topk` (one fused pass), against the int8 rows."""
        n, d = self.q8.shape
        q, mask, _, _ = _pool_setup(queries, n, d, exclude)
        k = min(_k(k), n)
        if q.shape[0] == 0 or n == 0 or k == 0:
            return _no_hits()
        if not use_numba(n, q.shape[0], d):
            best, which = self._numpy_pool(q, mask)
            idx = top_k(best, k)
            return Hits(idx, best[idx], which[idx])
        return _merge_blocks(_kernels().score_pool_topk(q, self.q8, self.scale, mask, int(k), _blocks(n, k)), k)


@dataclass(frozen=True)
class F16Corpus:
    """Corpus rows stored as float16 (2x less memory and bandwidth; ~1e-3 relative score error)."""

    c16: np.ndarray  # float16 [N, D]

    @classmethod
    def from_vectors(cls, corpus: object) -> "F16Corpus":
        c = as_vectors(corpus, "corpus")
        check_finite(c, "corpus")
        return cls(np.ascontiguousarray(c.astype(np.float16)))

    def score_pool(
        self, queries: object, *, exclude: object = None, block: int = 1024
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :func:`score_pool`, against the float16 rows (converted ``block`` rows at a time, then BLAS).

        Numba has no float16 on the CPU, so this trades the kernel for cache-sized float32 blocks: the
        memory saving is kept, the bandwidth saving is not.
        """
        n, d = self.c16.shape
        q, mask, best, which = _pool_setup(queries, n, d, exclude)
        if q.shape[0] and n:
            for lo in range(0, n, block):
                s = self.c16[lo : lo + block].astype(np.float32) @ q.T
                best[lo : lo + block] = s.max(axis=1)
                which[lo : lo + block] = s.argmax(axis=1)
            if mask.shape[0]:
                best[mask] = -np.inf
                which[mask] = -1
        return best, which


def bm25_top_k(
    slots: object,
    tf: object,
    offsets: object,
    idf: object,
    lengths: object,
    avgdl: float,
    allowed: object,
    k: int,
    also: object = None,
    *,
    k1: float = 1.2,
    b: float = 0.75,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best allowed rows by Okapi BM25 over one query's postings, without scoring every row.

    Args:
        slots: int ``[P]``: the row of each posting, the query's terms one after the other.
        tf: ``[P]``: the term's count in that row (>= 1).
        offsets: int ``[T+1]``: term ``t``'s postings are ``offsets[t] .. offsets[t+1]``.
        idf: ``[T]``: each term's inverse document frequency (the caller's formula; > 0).
        lengths: ``[n]``: terms per row. avgdl: the mean row length (> 0).
        allowed: bool ``[n]``: the rows that may score.
        k: how many rows to return (>= 0).
        also: int rows (default none) whose scores are wanted as well, wherever they rank.
        k1: term-frequency saturation (default 1.2). b: length normalisation (default 0.75).

    Returns:
        ``(rows, scores, also_scores)``: int64 rows and float64 scores of the at most ``k`` allowed rows
        scoring above 0, best first, the lower row first on ties; and each ``also`` row's score (0 for a
        row with no allowed posting). A posting adds ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b *
        length / avgdl))``, summed in posting order on both paths (Numba from
        :data:`BM25_TOPK_NUMBA_POSTINGS` postings, numpy below), so both give the same floats.
    """
    s = np.asarray(slots)
    f = np.asarray(tf, dtype=np.float64)
    off = np.asarray(offsets)
    w = np.asarray(idf, dtype=np.float64)
    ok = np.asarray(allowed)
    lens = np.asarray(lengths)
    extra = np.zeros(0, np.int64) if also is None else np.asarray(also)
    k = _k(k)
    n = ok.shape[0]
    if ok.ndim != 1 or ok.dtype != np.bool_ or lens.shape != ok.shape or lens.dtype.kind not in "iuf":
        raise InputError("allowed must be a 1-D bool mask and lengths numbers of the same length")
    for name, a in (("slots", s), ("offsets", off), ("also", extra)):
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise InputError(f"{name} must be a 1-D int array")
    if f.shape != s.shape or off.size != w.size + 1 or (off.size and (off[0] != 0 or off[-1] != s.size)):
        raise InputError("slots, tf, offsets and idf do not describe one query's postings")
    if off.size > 1 and (np.diff(off) < 0).any():
        raise InputError("offsets must not decrease")
    for name, a in (("slots", s), ("also", extra)):
        if a.size and (a.min() < 0 or a.max() >= n):
            raise InputError(f"{name} must be rows in 0..{n - 1}")
    if (f.size and not f.min() >= 1) or (w.size and not w.min() > 0) or not avgdl > 0 or not math.isfinite(avgdl):
        raise InputError("tf must be >= 1, idf > 0 and avgdl a positive number")
    k = min(k, s.size)  # never more rows than postings (a huge k allocates nothing)
    if s.size >= BM25_TOPK_NUMBA_POSTINGS and k > 0 and not threads.jit_disabled():
        rows, scores, also_scores = _kernels().bm25_top_k(
            s.astype(np.int64, copy=False),
            f,
            off.astype(np.int64, copy=False),
            w,
            lens if lens.dtype in (np.int32, np.int64, np.float64) else lens.astype(np.float64),
            float(avgdl),
            float(k1),
            float(b),
            ok,
            k,
            extra.astype(np.int64, copy=False),
        )
        order = np.lexsort((rows, -scores))
        return rows[order], scores[order], also_scores
    keep = ok[s]
    term = np.repeat(np.arange(w.size), np.diff(off))[keep]
    s, f = s[keep].astype(np.int64), f[keep]
    weight = w[term] * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * lens[s] / avgdl))
    hit, where = np.unique(s, return_inverse=True)
    score = np.bincount(where, weights=weight, minlength=hit.size)
    at = np.minimum(np.searchsorted(hit, extra), max(hit.size - 1, 0))
    also_scores = np.where(hit[at] == extra, score[at], 0.0) if hit.size else np.zeros(extra.size)
    live = score > 0
    hit, score = hit[live], score[live]
    best = top_k(score, k)
    return hit[best], score[best], also_scores.astype(np.float64)
