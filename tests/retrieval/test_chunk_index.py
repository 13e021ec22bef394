"""The one chunk index (contextsieve.retrieval.chunks): exact search against a float64 oracle of the
stored int8 rows, per-slot filters, groups, deletion, bad input, HNSW recall and the threshold policy."""

from __future__ import annotations

import builtins
import itertools
import random

import numpy as np
import pytest

from contextsieve.errors import InputError, MissingExtraError
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig, graph_label


def unit(rng: np.random.Generator, n: int, d: int = 384) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def stored(vec: np.ndarray) -> np.ndarray:
    """The vectors as the index stores them (int8 with one scale per row), dequantised in float64."""
    scale = np.maximum(np.abs(vec).max(axis=1) / 127.0, 1e-12).astype(np.float32)
    q8 = np.clip(np.rint(vec / scale[:, None]), -127, 127)
    return q8.astype(np.float64) * scale[:, None].astype(np.float64)


def oracle_rows(vec: np.ndarray, keep: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    s = (stored(vec) @ q.T.astype(np.float64)).max(axis=1)
    rows = [i for i in range(len(vec)) if keep[i]]
    return sorted(rows, key=lambda i: (-s[i], i))[:k]


def one_per_group(vec: np.ndarray, start: int = 0) -> list[tuple[int, np.ndarray]]:
    return [(start + i, vec[i : i + 1]) for i in range(len(vec))]


def test_exact_search_with_slot_filter_groups_and_removal() -> None:
    rng = np.random.default_rng(0)
    idx = ChunkIndex(384, IndexConfig(backend="exact"))
    v = unit(rng, 600)
    slots = idx.add([(g, v[4 * g : 4 * g + 4]) for g in range(150)])  # 150 groups of 4 chunks
    assert slots.tolist() == list(range(150)) and len(idx) == 150 and idx.chunks == 600
    idx.remove(2)  # chunk rows 8..11
    ok = np.arange(150) % 3 != 1
    q = v[[3, 50]] + 0.01
    hits = idx.search_chunks(q, 20, slot_ok=ok)
    keep = (np.arange(600) // 4 % 3 != 1) & ~np.isin(np.arange(600), [8, 9, 10, 11])
    assert hits.idx.tolist() == oracle_rows(v, keep, q, 20)
    s = (stored(v) @ q.T.astype(np.float64)).max(axis=1)
    np.testing.assert_allclose(hits.scores, s[hits.idx], atol=2e-6)
    # per group: the best chunk of each, best first
    best = {g: max(s[4 * g : 4 * g + 4]) for g in range(150) if keep[4 * g]}
    want = sorted(best, key=lambda g: (-best[g], g))[:7]
    got = idx.search(q, 7, slot_ok=ok)
    assert [g for g, _ in got] == want
    np.testing.assert_allclose([x for _, x in got], [best[g] for g in want], atol=2e-6)
    assert idx.scores(q, want[:3]) == pytest.approx([best[g] for g in want[:3]], abs=2e-6)


def test_adding_a_key_again_replaces_its_group() -> None:
    rng = np.random.default_rng(1)
    idx = ChunkIndex(16)
    v = unit(rng, 40, 16)
    idx.add(one_per_group(v[:30]))
    idx.add([(5, v[30:33])])  # key 5 now holds three other vectors
    assert len(idx) == 30 and idx.live_chunks == 32
    assert idx.search(v[31:32], 1) == [(idx.slot_of[5], pytest.approx(float(stored(v[31:32])[0] @ v[31]), abs=1e-5))]
    assert all(s != idx.slot_of[5] or x < 0.99 for s, x in idx.search(v[5:6], 3))
    assert idx.key(idx.slot_of[5]) == 5 and idx.labels(idx.chunk_rows(idx.slot_of[5]))[2] == graph_label(5, 2)


def test_bad_input_changes_nothing() -> None:
    idx = ChunkIndex(8)
    idx.add(one_per_group(np.eye(8, dtype=np.float32)))
    bad = np.eye(8, dtype=np.float32)[:2].copy()
    bad[1, 2] = np.inf
    for groups, match in (
        ([(20, bad)], "NaN or inf"),
        ([(21, np.eye(8, dtype=np.float32)), (22, np.ones((1, 9), np.float32))], "width"),
        ([(2**70, np.eye(8, dtype=np.float32)[:1])], "keys must lie"),
        ([(-1, np.eye(8, dtype=np.float32)[:1])], "keys must lie"),
        ([(1.5, np.eye(8, dtype=np.float32)[:1])], "keys must be ints"),
        ([(True, np.eye(8, dtype=np.float32)[:1])], "keys must be ints"),
    ):
        with pytest.raises(InputError, match=match):
            idx.add(groups)  # type: ignore[arg-type]
        assert len(idx) == 8 and idx.chunks == 8
    with pytest.raises(InputError, match="width"):
        idx.search(np.ones((1, 9), np.float32), 3)
    with pytest.raises(InputError, match="slot mask"):
        idx.search(np.ones((1, 8), np.float32), 3, slot_ok=np.ones(3, bool))
    assert idx.search(np.zeros((0, 8), np.float32), 5) == []
    assert idx.search_chunks(np.eye(8, dtype=np.float32)[:1], 0).idx.size == 0


def test_missing_hnswlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def fake(name: str, *a: object, **kw: object) -> object:
        if name == "hnswlib":
            raise ImportError("no hnswlib")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingExtraError, match=r"contextsieve\[hnsw\]"):
        ChunkIndex(8, IndexConfig(backend="hnsw"))
    idx = ChunkIndex(8, IndexConfig(hnsw_min_rows=4))
    with pytest.warns(UserWarning, match="hnswlib is missing"):
        idx.add(one_per_group(np.eye(8, dtype=np.float32)))
    assert idx.backend == "exact" and idx.missing_hnswlib and not idx.wants_hnsw()


@pytest.fixture(scope="module")
def real_vectors(int8) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """MiniLM embeddings of 3,000 generated support/dev sentences and 100 queries like them."""
    rnd = random.Random(7)
    subjects = [
        "the billing page",
        "a failed deploy",
        "the login form",
        "our API client",
        "the nightly backup",
        "a refund request",
        "the search index",
        "an expired token",
        "the mobile app",
        "a slow database query",
        "the CSV export",
        "two-factor setup",
    ]
    verbs = [
        "breaks when",
        "times out after",
        "needs review because",
        "was fixed once",
        "should log why",
        "is blocked until",
        "retries silently if",
        "crashes only when",
        "gets slower as",
        "returns 500 if",
    ]
    tails = [
        "the user changes region",
        "the cache is cold",
        "a webhook fires twice",
        "the disk fills up",
        "the locale is German",
        "the session expires",
        "the payload exceeds 1 MB",
        "two admins edit at once",
        "the VPN drops",
        "the clock skews",
    ]
    leads = ["Bug:", "Note:", "Customer says"]
    sents = [f"{lead} {s} {v} {t}" for lead, s, v, t in itertools.product(leads, subjects, verbs, tails)]
    rnd.shuffle(sents)
    assert len(sents) == 3600
    corpus, queries = sents[:3000], [f"why {s}?" for s in sents[3000:3100]]
    return int8.embed(corpus), int8.embed(queries)


def test_hnsw_recall_and_filters_against_exact_on_real_embeddings(real_vectors) -> None:  # noqa: ANN001
    corpus, queries = real_vectors
    exact = ChunkIndex(384, IndexConfig(backend="exact"))
    hnsw = ChunkIndex(384, IndexConfig(backend="hnsw", exact_below=0.0))
    for idx in (exact, hnsw):
        idx.add([(g, corpus[3 * g : 3 * g + 3]) for g in range(1000)])  # groups of three sentences
    assert hnsw.backend == "hnsw" and exact.backend == "exact"

    def recall(a: list[list[int]], b: list[list[int]]) -> float:
        return float(np.mean([len(set(x) & set(y)) / max(len(y), 1) for x, y in zip(a, b)]))

    chunks = recall(
        [hnsw.search_chunks(q[None], 10).idx.tolist() for q in queries],
        [exact.search_chunks(q[None], 10).idx.tolist() for q in queries],
    )
    ok = np.arange(1000) % 4 == 0  # a quarter of the groups pass
    groups = recall(
        [[s for s, _ in hnsw.search(q[None], 10, slot_ok=ok)] for q in queries],
        [[s for s, _ in exact.search(q[None], 10, slot_ok=ok)] for q in queries],
    )
    assert chunks >= 0.95 and groups >= 0.95, (chunks, groups)
    assert all(ok[s] for q in queries[:10] for s, _ in hnsw.search(q[None], 10, slot_ok=ok))
    gone = hnsw.search(queries[:1], 1)[0][0]
    hnsw.remove(hnsw.key(gone))
    assert gone not in [s for s, _ in hnsw.search(queries[:1], 10)]


def test_auto_switches_to_hnsw_at_the_threshold(real_vectors) -> None:  # noqa: ANN001
    corpus, _ = real_vectors
    idx = ChunkIndex(384, IndexConfig(hnsw_min_rows=2000))
    idx.add(one_per_group(corpus[:1500]))
    assert idx.backend == "exact" and not idx.wants_hnsw()
    idx.add(one_per_group(corpus[1500:], 1500))
    assert idx.backend == "hnsw" and idx.graph_built == 1
    assert idx.search_chunks(corpus[2500:2501], 1).idx.tolist() == [2500]


def test_failed_recall_guard_keeps_exact_and_does_not_rebuild_every_add(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    idx = ChunkIndex(16, IndexConfig(hnsw_min_rows=50))
    calls = []
    monkeypatch.setattr(ChunkIndex, "_passes_recall_guard", lambda self: calls.append(self.live_chunks) or False)
    with pytest.warns(UserWarning, match="recall"):
        idx.add(one_per_group(unit(rng, 60, 16)))
    assert idx.backend == "exact" and calls == [60] and idx.graph_built == 0
    idx.add(one_per_group(unit(rng, 30, 16), 100))  # 90 < 2 x 60: no new attempt
    assert calls == [60]
    with pytest.warns(UserWarning, match="recall"):
        idx.add(one_per_group(unit(rng, 40, 16), 200))  # 130 >= 120: one more attempt
    assert calls == [60, 130]
    probe = unit(np.random.default_rng(5), 60, 16)[7:8]
    assert idx.search_chunks(probe, 1).idx.tolist() == [7]


def test_graph_answers_map_back_for_small_and_huge_keys() -> None:
    """Keys below 2**23 are mapped back through an array, larger ones through the dict: both paths
    must give the exact scan's answer (keys up to 2**43 - 1 are allowed)."""
    rng = np.random.default_rng(9)
    v = unit(rng, 400, 16)
    for base in (0, 2**40):
        exact, graph = (
            ChunkIndex(16, IndexConfig(backend="exact")),
            ChunkIndex(16, IndexConfig(backend="hnsw", exact_below=0.0)),
        )
        for idx in (exact, graph):
            idx.add([(base + 3 * g, v[2 * g : 2 * g + 2]) for g in range(200)])
            idx.remove(base + 3 * 7)
        assert graph.backend == "hnsw"
        for q in v[:20]:
            got, want = graph.search(q[None], 5), exact.search(q[None], 5)
            assert [graph.key(s) for s, _ in got] == [exact.key(s) for s, _ in want]
            assert base + 21 not in [graph.key(s) for s, _ in got]
