"""Scoring kernels against the machine's memory bandwidth, in one run, one table.

    python -m benchmarks.speed.kernels_table [--sizes 1000,10000,100000,1000000] [--queries 1,2,4,8]

For each corpus size N (random unit 384-d float32 rows) and query count M: numpy (``C @ Q.T``,
``max``, ``argpartition`` top-20), the fused Numba kernel (score + max-pool + top-20 in one pass), and
the int8 corpus (fused the same way) and the fp16 corpus (score + pool in float32 blocks, then top-20).
``x bw`` = time / (bytes scanned / stream-read
bandwidth), the bandwidth being a parallel Numba read of the same fp32 array measured in this run
(1.0 = as fast as the memory allows). ``r@20`` is the int8 corpus' top-20 recall against exact.
Times are medians (200 repetitions below 100k rows, 30 at 100k, 7 at 1M).

A second table times :func:`~contextsieve.kernels.scoring.bm25_top_k` (the stash's keyword search)
on both paths over 100,000 rows, for queries of 6 terms whose postings total P (Zipf-like term
frequencies, half the rows allowed, top-20): where the Numba path starts to pay off sets
``BM25_TOPK_NUMBA_POSTINGS``. ``--bm25-only`` prints that table alone.

A third times :func:`~contextsieve.kernels.scoring.half_rows` (a history's recorded requests, float16
rows of one matrix, gathered and made float32 for their exact scores) on both paths: K random rows of
a 20,000 x 384 matrix of unit vectors; where the Numba path starts to pay off sets
``HALF_NUMBA_VALUES``. ``--half-only`` prints that table alone.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import cpu_line, median_time, recall_at_k
from contextsieve.kernels import scoring as K


def _stream_read_seconds(c: np.ndarray, reps: int) -> float:
    """Median time of a parallel Numba read of every element of ``c`` (a row sum, vectorised)."""
    from numba import njit, prange

    @njit(parallel=True, fastmath=True, cache=False)
    def touch(a: np.ndarray) -> float:
        acc = np.zeros(a.shape[0], dtype=np.float32)
        for i in prange(a.shape[0]):
            s = np.float32(0.0)
            for j in range(a.shape[1]):
                s += a[i, j]
            acc[i] = s
        return acc.sum()

    touch(c)
    return median_time(lambda: touch(c), reps)[0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--queries", default="1,2,4,8")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--bm25-only", action="store_true")
    ap.add_argument("--half-only", action="store_true")
    args = ap.parse_args(argv)
    import numba

    rng = np.random.default_rng(1)
    print(cpu_line())
    print(f"numba {numba.__version__}, {numba.get_num_threads()} threads; top-{args.k}; 384-d float32\n")
    if not args.half_only:
        bm25_table(rng, args.k)
    if not args.bm25_only:
        half_table(rng)
    if args.bm25_only or args.half_only:
        return
    print(
        "| N | M | stream-read ms | numpy ms | x bw | fused ms | x bw | int8 ms | x bw (int8 bytes) | r@20 int8 | "
        "fp16 ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in map(int, args.sizes.split(",")):
        c = rng.standard_normal((n, 384), dtype=np.float32)
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        reps = 200 if n < 100_000 else (30 if n < 1_000_000 else 7)
        bw = _stream_read_seconds(c, reps)
        bw8 = bw / 4  # int8 rows are a quarter of the bytes
        c8 = K.Int8Corpus.from_vectors(c)
        c16 = K.F16Corpus.from_vectors(c)
        for m in map(int, args.queries.split(",")):
            q = c[rng.integers(0, n, m)] + 0.05 * rng.standard_normal((m, 384), dtype=np.float32)

            def numpy_path() -> np.ndarray:
                s = (c @ q.T).max(axis=1) if m > 1 else c @ q[0]
                top = np.argpartition(-s, args.k)[: args.k]
                return top[np.argsort(-s[top])]

            saved = K.NUMBA_MIN_WORK
            K.NUMBA_MIN_WORK = 0
            K.score_pool_topk(q, c, args.k)  # compile / load cache
            t_np = median_time(numpy_path, reps)[0]
            t_fused = median_time(lambda: K.score_pool_topk(q, c, args.k), reps)[0]
            c8.score_pool_topk(q, args.k)
            t_8 = median_time(lambda: c8.score_pool_topk(q, args.k), reps)[0]
            t_16 = median_time(lambda: K.top_k(c16.score_pool(q)[0], args.k), max(3, reps // 10))[0]
            exact = set(K.score_pool_topk(q, c, args.k).idx.tolist())
            r8 = recall_at_k(c8.score_pool_topk(q, args.k).idx.tolist(), exact)
            K.NUMBA_MIN_WORK = saved
            print(
                f"| {n:,} | {m} | {bw * 1e3:.3f} | {t_np * 1e3:.3f} | {t_np / bw:.2f} | {t_fused * 1e3:.3f} | "
                f"{t_fused / bw:.2f} | "
                f"{t_8 * 1e3:.3f} | {t_8 / bw8:.2f} | {r8:.2f} | {t_16 * 1e3:.2f} |",
                flush=True,
            )


def bm25_table(rng: np.random.Generator, k: int, n: int = 100_000) -> None:
    """bm25_top_k's numpy and Numba paths side by side (see the module docstring)."""
    lengths = rng.integers(5, 200, n).astype(np.int32)
    allowed = rng.random(n) < 0.5
    print(f"bm25_top_k over {n:,} rows, 6 terms, top-{k} (ms, median of 200)\n")
    print("| postings | numpy ms | numba ms | numpy / numba |")
    print("| --- | --- | --- | --- |")
    for total in (600, 2_000, 4_000, 8_000, 16_000, 64_000, 200_000):
        share = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])  # a query's terms, common to rare
        sizes = np.clip((share * total).astype(int), 1, n)
        slots = np.concatenate([np.sort(rng.choice(n, size, replace=False)) for size in sizes]).astype(np.int32)
        tf = rng.integers(1, 4, slots.size).astype(np.uint32)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        idf = np.maximum(np.log((n - sizes + 0.5) / (sizes + 0.5)), 1e-6)  # floored as the stash does
        args = (slots, tf, offsets, idf, lengths, float(lengths.mean()), allowed, k)
        saved = K.BM25_TOPK_NUMBA_POSTINGS
        times = []
        for threshold in (10**18, 0):
            K.BM25_TOPK_NUMBA_POSTINGS = threshold
            K.bm25_top_k(*args)  # compile / load cache
            times.append(median_time(lambda: K.bm25_top_k(*args), 200)[0])
        K.BM25_TOPK_NUMBA_POSTINGS = saved
        print(
            f"| {slots.size:,} | {times[0] * 1e3:.3f} | {times[1] * 1e3:.3f} | {times[0] / times[1]:.1f} |", flush=True
        )
    print()


def half_table(rng: np.random.Generator, n: int = 20_000) -> None:
    """half_rows' numpy and Numba paths side by side (see the module docstring)."""
    c = rng.standard_normal((n, 384), dtype=np.float32)
    matrix = (c / np.linalg.norm(c, axis=1, keepdims=True)).astype(np.float16)
    K._kernels()  # half_rows takes its Numba loop only once the kernels are loaded (a search's scan loads them)
    print(f"half_rows: K rows of a {n:,} x 384 float16 matrix as float32 (ms, median of 300)\n")
    print("| K | values | numpy ms | numba ms | numpy / numba | ns a value (numpy) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for rows in (8, 32, 64, 256, 1024):
        which = np.sort(rng.choice(n, rows, replace=False))
        saved = K.HALF_NUMBA_VALUES
        times = []
        for threshold in (10**18, 0):
            K.HALF_NUMBA_VALUES = threshold
            K.half_rows(matrix, which)  # compile / load cache
            times.append(median_time(lambda: K.half_rows(matrix, which), 300)[0])
        K.HALF_NUMBA_VALUES = saved
        print(
            f"| {rows:,} | {rows * 384:,} | {times[0] * 1e3:.3f} | {times[1] * 1e3:.3f} | {times[0] / times[1]:.1f} | "
            f"{times[0] / (rows * 384) * 1e9:.2f} |",
            flush=True,
        )
    print()


if __name__ == "__main__":
    main()
