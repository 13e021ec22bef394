"""HNSW vs exact search on real MiniLM vectors: recall@10, single-query latency, build time.

    python -m benchmarks.speed.hnsw_table [--n 100000] [--queries 200]

Texts: distinct docstring sentences (20-200 characters) of the standard library and then of the
installed site-packages (so the corpus depends on what is installed), shuffled with seed 1234; the
first ``n`` are the corpus, the next ``queries`` the queries. Vectors come from contextsieve int8
and are kept in the temp folder for reruns. Latency is measured through
:meth:`ChunkIndex.search_chunks` of the one chunk index (what a large agent's requests call; int8
rows, one group per sentence) with one query vector, single-threaded HNSW, after 10 warm-ups;
medians and p99.

A second table does the same through the stash's in-memory table
(:class:`contextsieve.stash.vectors.VectorTable`, one segment per sentence, a session filter, on the
same chunk index): its dense search asks for 20 segments (20 candidates per signal, the default) at
each ``ef``; recall@10 is against the table's exact scan. ``--no-stash`` leaves it out.
"""

from __future__ import annotations

import argparse
import ast
import random
import re
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import p50_p99, recall_at_k, timed
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig


def docstring_sentences(n: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    for root in roots:
        for p in sorted(root.rglob("*.py")):
            if root == roots[0] and "site-packages" in p.parts:
                continue
            try:
                tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
            except (SyntaxError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    d = ast.get_docstring(node)
                    for s in re.split(r"(?<=[.!?])\s+", " ".join(d.split())) if d else []:
                        if 20 <= len(s) <= 200 and s not in seen:
                            seen.add(s)
                            out.append(s)
            if len(out) >= 1.5 * n:
                break
    random.Random(1234).shuffle(out)
    if len(out) < n:
        raise SystemExit(f"only {len(out)} sentences found, {n} asked")
    return out


def latency(f: object, reps: int) -> tuple[float, float]:
    for _ in range(10):
        f(0)  # type: ignore[operator]
    return p50_p99([timed(lambda i=i: f(i)) for i in range(reps)], 1e3)  # type: ignore[operator]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--no-stash", action="store_true")
    args = ap.parse_args(argv)
    cache = Path(tempfile.gettempdir()) / f"contextsieve-hnsw-{args.n}-{args.queries}.npz"
    if cache.exists():
        z = np.load(cache)
        corpus, queries = z["corpus"], z["queries"]
    else:
        from contextsieve import Embedder

        texts = docstring_sentences(args.n + args.queries)
        emb = Embedder(variant="int8")
        t = time.perf_counter()
        corpus = emb.embed(texts[: args.n], show_progress=True)
        print(f"embedded {args.n} sentences in {time.perf_counter() - t:.0f} s")
        queries = emb.embed(texts[args.n : args.n + args.queries])
        np.savez(cache, corpus=corpus, queries=queries)
    groups = [(i, corpus[i : i + 1]) for i in range(len(corpus))]
    exact = ChunkIndex(384, IndexConfig(backend="exact"))
    exact.add(groups)
    truth = [set(exact.search_chunks(q[None], 10).idx.tolist()) for q in queries]
    e50, e99 = latency(lambda i: exact.search_chunks(queries[i % len(queries)][None], 10), len(queries))
    t = time.perf_counter()
    hnsw = ChunkIndex(384, IndexConfig(backend="hnsw"))
    hnsw.add(groups)
    build = time.perf_counter() - t
    print(
        f"\n{len(corpus):,} real MiniLM vectors, {len(queries)} queries, top-10; HNSW M=16, ef_construction=200, "
        f"built in {build:.1f} s (with the recall guard, which chose ef={hnsw.ef})\n"
    )
    print("| search | ef | recall@10 | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| exact (fused kernel) | - | 1.000 | {e50:.3f} | {e99:.3f} |")
    for ef in (32, 64, 128, 256):
        hnsw.ef = ef
        got = [hnsw.search_chunks(q[None], 10).idx.tolist() for q in queries]
        rec = float(np.mean([recall_at_k(g, t, 10) for g, t in zip(got, truth)]))
        h50, h99 = latency(lambda i: hnsw.search_chunks(queries[i % len(queries)][None], 10), len(queries))
        print(f"| HNSW | {ef} | {rec:.3f} | {h50:.3f} | {h99:.3f} |", flush=True)
    if not args.no_stash:
        stash_table(corpus, queries)


def stash_table(corpus: np.ndarray, queries: np.ndarray) -> None:
    """The stash's dense search over the same vectors, exact against HNSW at several ``ef_search``."""
    from contextsieve.stash.backend import Filters
    from contextsieve.stash.segment import SegmentType
    from contextsieve.stash.vectors import TableRow, VectorTable

    def table(backend: str) -> VectorTable:
        t = VectorTable(corpus.shape[1], IndexConfig(backend=backend))  # type: ignore[arg-type]
        t.add_many(
            [
                TableRow(i, f"s{i}", "bench", SegmentType.MESSAGE, None, "", 0.0, None, False, corpus[i : i + 1])
                for i in range(len(corpus))
            ]
        )
        return t

    f = Filters(sessions=("bench",))
    exact = table("exact")
    truth = [{s for s, _ in exact.search(q[None], 10, f)} for q in queries]
    e50, e99 = latency(lambda i: exact.search(queries[i % len(queries)][None], 20, f), len(queries))
    t = time.perf_counter()
    hnsw = table("hnsw")
    build = time.perf_counter() - t
    print(f"\nthe stash's dense search (VectorTable, 20 candidates asked), graph built in {build:.1f} s\n")
    print("| search | ef | recall@10 | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| exact (int8 rows) | - | 1.000 | {e50:.3f} | {e99:.3f} |")
    for ef in (32, 64, 96, 128):
        hnsw.chunks.ef = ef
        got = [[s for s, _ in hnsw.search(q[None], 20, f)] for q in queries]
        rec = float(np.mean([recall_at_k(g, t, 10) for g, t in zip(got, truth)]))
        h50, h99 = latency(lambda i: hnsw.search(queries[i % len(queries)][None], 20, f), len(queries))
        print(f"| HNSW | {ef} | {rec:.3f} | {h50:.3f} | {h99:.3f} |", flush=True)


if __name__ == "__main__":
    main()
