"""pytest-benchmark cases for the embedding hot paths (needs the bench extra's pytest-benchmark).

    python -m pytest benchmarks/speed/test_bench_embed.py --benchmark-only

Speed goals are read from these tables and ``benchmarks/speed/compare_embedders.py``; nothing here asserts
a time.
"""

from __future__ import annotations

import pytest

from benchmarks import workloads
from contextsieve import Embedder


@pytest.fixture(scope="module", params=["fp32", "int8"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return Embedder(variant=request.param)


def test_query(benchmark, embedder: Embedder) -> None:  # noqa: ANN001
    out = benchmark(embedder.embed, [workloads.QUERY])
    assert out.shape == (1, 384)


def test_151_chunks(benchmark, embedder: Embedder) -> None:  # noqa: ANN001
    chunks = list(workloads.doc_chunks())
    out = benchmark.pedantic(embedder.embed, args=(chunks,), rounds=3, iterations=1, warmup_rounds=1)
    assert out.shape == (151, 384)


def test_1000_sentences(benchmark, embedder: Embedder) -> None:  # noqa: ANN001
    sents = list(workloads.sentences())
    out = benchmark.pedantic(embedder.embed, args=(sents,), rounds=3, iterations=1, warmup_rounds=1)
    assert out.shape == (1000, 384)


def test_tokenize_151_chunks(benchmark, embedder: Embedder) -> None:  # noqa: ANN001
    chunks = list(workloads.doc_chunks())
    batches = benchmark(lambda: list(embedder.tokenizer.batches(chunks, 64, 512)))
    assert sum(len(b.index) for b in batches) == 151
