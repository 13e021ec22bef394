"""pytest-benchmark cases for selection's hot paths at agent sizes (1k and 10k chunks).

    python -m pytest benchmarks/speed/test_bench_kernels.py --benchmark-only

Both backends are timed explicitly (the dispatch picks numpy below ``NUMBA_MIN_WORK``); nothing here
asserts a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from contextsieve.kernels import scoring as K
from contextsieve.kernels.relations import expansion_pass
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig


@pytest.fixture(scope="module", params=[1_000, 10_000])
def corpus(request: pytest.FixtureRequest) -> np.ndarray:
    rng = np.random.default_rng(0)
    c = rng.standard_normal((request.param, 384), dtype=np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_score_pool_topk(benchmark, corpus: np.ndarray, m: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 0 if backend == "numba" else 10**18)
    q = corpus[:m] + 0.01
    hits = benchmark(K.score_pool_topk, q, corpus, 20)
    assert len(hits) == 20


def test_index_search_with_filter(benchmark, corpus: np.ndarray) -> None:  # noqa: ANN001
    idx = ChunkIndex(384, IndexConfig(backend="exact"))
    idx.add([(g, corpus[5 * g : 5 * g + 5]) for g in range(len(corpus) // 5)])
    ok = np.arange(idx.slots) % 3 == 2  # a third of the groups pass
    hits = benchmark(idx.search_chunks, corpus[:2], 20, slot_ok=ok)
    assert len(hits) == 20


def test_group_max(benchmark, corpus: np.ndarray) -> None:  # noqa: ANN001
    scores = corpus[:, 0].copy()
    items = np.arange(len(corpus)) // 5
    best, _ = benchmark(K.group_max, scores, items, len(corpus) // 5)
    assert best.shape == (len(corpus) // 5,)


def test_expansion_pass(benchmark, corpus: np.ndarray) -> None:  # noqa: ANN001
    items = np.arange(len(corpus)) // 5
    res = benchmark(expansion_pass, corpus, items, [1, 7, 42], cap=3)
    assert res.query_rows.size == 9
