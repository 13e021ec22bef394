"""Every kernel against a plain float64 numpy / Python oracle, on both backends (numpy and Numba)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsieve.errors import InputError
from contextsieve.kernels import scoring as K
from contextsieve.kernels._jit import INT8_BLOCK_FROM

SIZES = [0, 1, 2, 7, 97, 1025]
# The backend fixture only sets a module constant, the same for every example: safe to share.
HYP = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(params=["numpy", "numba"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 0 if request.param == "numba" else 10**18)
    return request.param


def int_vectors(rng: np.random.Generator, n: int, d: int, dup: bool = True) -> np.ndarray:
    """Small-integer vectors: dot products are exact in float32 whatever the summation order, so
    ties are real ties on every backend; some rows are duplicated on purpose."""
    x = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    if dup and n > 3:
        x[n // 2] = x[1]
        x[-1] = x[0]
    return x


def oracle_pool(q: np.ndarray, c: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    n = c.shape[0]
    best = np.full(n, -np.inf)
    which = np.full(n, -1)
    for i in range(n):
        if exclude is not None and exclude[i]:
            continue
        for m in range(q.shape[0]):
            with np.errstate(invalid="ignore"):
                s = float(np.dot(c[i].astype(np.float64), q[m].astype(np.float64)))
            if s > best[i]:
                best[i], which[i] = s, m
    return best, which


def oracle_topk(s: np.ndarray, k: int) -> list[int]:
    idx = [i for i in range(len(s)) if s[i] > -np.inf]
    return sorted(idx, key=lambda i: (-s[i], i))[:k]


@given(
    n=st.sampled_from(SIZES),
    m=st.integers(0, 8),
    d=st.sampled_from([1, 3, 8, 33]),
    seed=st.integers(0, 2**16),
    excl=st.booleans(),
)
@HYP
def test_score_pool_matches_oracle(backend: str, n: int, m: int, d: int, seed: int, excl: bool) -> None:
    rng = np.random.default_rng(seed)
    c, q = int_vectors(rng, n, d), int_vectors(rng, m, d, dup=False)
    exclude = rng.random(n) < 0.3 if excl else None
    best, which = K.score_pool(q, c, exclude=exclude)
    ob, ow = oracle_pool(q, c, exclude)
    assert best.dtype == np.float32 and which.dtype == np.int32
    np.testing.assert_array_equal(best, ob.astype(np.float32))
    np.testing.assert_array_equal(which, ow)


@given(
    n=st.sampled_from(SIZES),
    m=st.integers(0, 8),
    k=st.sampled_from([0, 1, 5, 20, 2000]),
    seed=st.integers(0, 2**16),
    excl=st.booleans(),
)
@HYP
def test_score_pool_topk_matches_oracle(backend: str, n: int, m: int, k: int, seed: int, excl: bool) -> None:
    rng = np.random.default_rng(seed)
    c, q = int_vectors(rng, n, 8), int_vectors(rng, m, 8, dup=False)
    exclude = rng.random(n) < 0.3 if excl else None
    hits = K.score_pool_topk(q, c, k, exclude=exclude)
    ob, ow = oracle_pool(q, c, exclude)
    want = oracle_topk(ob, k)
    assert hits.idx.tolist() == want
    np.testing.assert_array_equal(hits.scores, ob[want].astype(np.float32))
    np.testing.assert_array_equal(hits.which, ow[want])


@given(n=st.sampled_from(SIZES[1:]), m=st.integers(1, 4), k=st.sampled_from([1, 5, 2000]), seed=st.integers(0, 2**16))
@HYP
def test_nan_and_inf_in_the_corpus_agree_on_both_backends(backend: str, n: int, m: int, k: int, seed: int) -> None:
    """A NaN score is no score (row -inf / -1, never a hit) and inf follows IEEE on both paths."""
    rng = np.random.default_rng(seed)
    c, q = int_vectors(rng, n, 8), int_vectors(rng, m, 8, dup=False)
    odd = rng.random(c.shape) < 0.05
    c[odd] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=int(odd.sum()))
    best, which = K.score_pool(q, c)
    ob, ow = oracle_pool(q, c, None)
    assert not np.isnan(best).any()
    np.testing.assert_array_equal(best, ob.astype(np.float32))
    np.testing.assert_array_equal(which, ow)
    hits = K.score_pool_topk(q, c, k)
    assert hits.idx.tolist() == oracle_topk(ob, k)


@given(n=st.sampled_from(SIZES), k=st.integers(0, 30), seed=st.integers(0, 2**16))
@HYP
def test_top_k_is_partial_but_exact(n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(-3, 4, n).astype(np.float32)  # many ties
    s[rng.random(n) < 0.1] = -np.inf
    assert K.top_k(s, k).tolist() == oracle_topk(s, k)


def test_real_valued_scores_agree_across_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    c = rng.standard_normal((3000, 384)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q = c[[5, 17, 99]] + 0.01 * rng.standard_normal((3, 384)).astype(np.float32)
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 0)
    b1, w1 = K.score_pool(q, c)
    h1 = K.score_pool_topk(q, c, 20)
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 10**18)
    b2, w2 = K.score_pool(q, c)
    h2 = K.score_pool_topk(q, c, 20)
    np.testing.assert_allclose(b1, b2, atol=1e-5)
    assert (w1 == w2).mean() > 0.999
    assert h1.idx[:3].tolist() == [5, 17, 99] and set(h1.idx.tolist()) == set(h2.idx.tolist())


@given(n=st.sampled_from(SIZES + [60_000]), items=st.integers(1, 50), seed=st.integers(0, 2**16))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_group_max_matches_oracle(n: int, items: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(-5, 6, n).astype(np.float32)
    s[rng.random(n) < 0.05] = -np.inf
    it = rng.integers(0, items, n)
    best, arg = K.group_max(s, it, items)
    for j in range(items):
        rows = [i for i in range(n) if it[i] == j and s[i] > -np.inf]
        if not rows:
            assert best[j] == -np.inf and arg[j] == -1
        else:
            top = max(rows, key=lambda i: (s[i], -i))
            assert arg[j] == top and best[j] == s[top]


@pytest.mark.parametrize("numba_path", [False, True])
def test_half_rows_converts_every_float16_value_as_numpy_does(
    numba_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every one of the 65,536 float16 bit patterns (zeros, subnormals, infinities, NaNs with their
    payloads), in rows taken in any order and more than once, against numpy's own conversion."""
    monkeypatch.setattr(K, "HALF_NUMBA_VALUES", 0 if numba_path else 10**12)
    if numba_path:
        K._kernels()  # the loop is taken once the kernels are loaded
    every = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(64, 1024)
    rng = np.random.default_rng(5)
    for rows in (np.arange(64), rng.integers(0, 64, 100), rng.integers(0, 64, 7).astype(np.int32), np.zeros(0, int)):
        got = K.half_rows(every, rows)
        assert got.dtype == np.float32 and got.shape == (rows.size, 1024)
        np.testing.assert_array_equal(got.view(np.uint32), every[rows].astype(np.float32).view(np.uint32))
    unit = rng.standard_normal((300, 384)).astype(np.float32)
    unit = (unit / np.linalg.norm(unit, axis=1, keepdims=True)).astype(np.float16)  # as a usage log keeps them
    rows = rng.integers(0, 300, 250)
    np.testing.assert_array_equal(
        K.half_rows(unit, rows).view(np.uint32), unit[rows].astype(np.float32).view(np.uint32)
    )
    swapped = every.astype(">f2")  # the other byte order: converted as numpy converts it
    back = rows % 64
    np.testing.assert_array_equal(
        K.half_rows(swapped, back).view(np.uint32), every[back].astype(np.float32).view(np.uint32)
    )


@pytest.mark.parametrize(
    "matrix, rows",
    [
        (np.zeros((4, 8), np.float32), np.arange(2)),  # not float16
        (np.zeros(8, np.float16), np.arange(2)),  # not 2-D
        (np.zeros((4, 8), np.float16), np.array([0.0, 1.0])),  # rows not ints
        (np.zeros((4, 8), np.float16), np.array([4])),  # past the last row
        (np.zeros((4, 8), np.float16), np.array([-1])),
        (np.zeros((4, 8), np.float16), np.zeros((1, 1), int)),
    ],
)
def test_half_rows_refuses_what_is_not_float16_rows(matrix: np.ndarray, rows: np.ndarray) -> None:
    with pytest.raises(InputError):
        K.half_rows(matrix, rows)


def test_int8_and_f16_corpora_stay_close() -> None:
    rng = np.random.default_rng(2)
    centers = rng.standard_normal((50, 384)).astype(np.float32)
    c = centers[rng.integers(0, 50, 5000)] + 0.3 * rng.standard_normal((5000, 384)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q = c[rng.integers(0, 5000, 4)] + 0.05 * rng.standard_normal((4, 384)).astype(np.float32)
    exact, _ = K.score_pool(q, c)
    for corpus, tol in ((K.Int8Corpus.from_vectors(c), 0.02), (K.F16Corpus.from_vectors(c), 2e-3)):
        approx, which = corpus.score_pool(q)
        assert np.abs(approx - exact).max() < tol
        recall = len(set(K.top_k(approx, 20).tolist()) & set(K.top_k(exact, 20).tolist())) / 20
        assert recall >= 0.95
    c8 = K.Int8Corpus.from_vectors(c)
    approx, which = c8.score_pool(q)
    for k in (1, 20, 6000):
        hits = c8.score_pool_topk(q, k)
        want = K.top_k(approx, k)
        assert hits.idx.tolist() == want.tolist()
        np.testing.assert_array_equal(hits.scores, approx[want])
        np.testing.assert_array_equal(hits.which, which[want])
    excl = np.zeros(5000, dtype=bool)
    excl[:10] = True
    assert not set(c8.score_pool_topk(q, 50, exclude=excl).idx.tolist()) & set(range(10))
    b8, w8 = K.Int8Corpus.from_vectors(c).score_pool(q, exclude=excl)
    assert np.isneginf(b8[:10]).all() and (w8[:10] == -1).all()
    b1, _ = K.Int8Corpus.from_vectors(c).score_pool(q[:1])
    e1, _ = K.score_pool(q[:1], c)
    assert np.abs(b1 - e1).max() < 0.02


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("n_queries", [1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_int8_rows_score_like_their_dequantised_oracle_for_every_query_count(
    n_queries: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The int8 kernel scores queries in blocks of 4, 2 and 1, the numpy path (small stores, which never
    compile Numba) one query at a time: every count gives the oracle's pooled scores and the first query
    reaching each best (a repeated query never wins over its first copy)."""
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 0 if backend == "numba" else 10**18)
    rng = np.random.default_rng(n_queries)
    c = rng.standard_normal((3000, 384)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q = rng.standard_normal((n_queries, 384)).astype(np.float32)
    if n_queries > 1:
        q[-1] = q[0]  # a tie between the first and the last query
    c8 = K.Int8Corpus.from_vectors(c)
    s = (c8.q8.astype(np.float64) @ q.T.astype(np.float64)) * c8.scale[:, None]
    best, which = c8.score_pool(q)
    np.testing.assert_allclose(best, s.max(axis=1), rtol=1e-5, atol=1e-6)
    distinct = s[:, :-1] if n_queries > 1 else s  # the last query repeats the first
    ranked = np.sort(distinct, axis=1)
    clear = ranked[:, -1] - (ranked[:, -2] if distinct.shape[1] > 1 else -np.inf) > 1e-4
    assert (which[clear] == distinct.argmax(axis=1)[clear]).all()
    assert n_queries == 1 or (which < n_queries - 1).all()
    hits = c8.score_pool_topk(q, 25)
    assert hits.idx.tolist() == K.top_k(best, 25).tolist()


ARRANGEMENTS = ("as given", "reversed", "each twice", "rolled by one")


def _arrange(q: np.ndarray, how: str) -> np.ndarray:
    if how == "reversed":
        return q[::-1].copy()
    if how == "each twice":
        return np.concatenate([q, q])
    if how == "rolled by one":
        return np.roll(q, 1, axis=0)
    return q


@pytest.mark.parametrize("rows", [1000, 3000])
@pytest.mark.parametrize("corpus_kind", ["float32-numpy", "float32-numba", "int8", "int8-numpy"])
@pytest.mark.parametrize("n_queries", [1, 2, 3, 4, 5, 6, 7, 9])
def test_equal_queries_get_bit_equal_scores_wherever_they_sit(
    corpus_kind: str, n_queries: int, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Determinism across blocking: a query's scores do not depend on its position among the queries
    or on how many come with it (the int8 kernel's short last block, BLAS edge kernels). The pooled
    best of any arrangement is bit-equal to the max of the queries scored alone in a call of the same
    width class, and ``which`` names the first position reaching it."""
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 10**18 if corpus_kind.endswith("-numpy") else 0)
    rng = np.random.default_rng(100 + n_queries)
    c = rng.standard_normal((rows, 384)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q = rng.standard_normal((n_queries, 384)).astype(np.float32)
    if corpus_kind.startswith("int8"):
        c8 = K.Int8Corpus.from_vectors(c)
        pool = c8.score_pool
        topk = c8.score_pool_topk
    else:
        pool = lambda x: K.score_pool(x, c)  # noqa: E731
        topk = lambda x, k: K.score_pool_topk(x, c, k)  # noqa: E731

    def alone(m: int, count: int) -> np.ndarray:
        """Query m's own scores, from a call of ``count`` copies of it (all lanes the same query)."""
        return pool(np.repeat(q[m : m + 1], count, axis=0))[0]

    for how in ARRANGEMENTS:
        arr = _arrange(q, how)
        # int8 rows: one loop shape below INT8_BLOCK_FROM queries, another from it; a call of the same
        # class (1 copy / INT8_BLOCK_FROM copies) gives the oracle bits. Float rows: one shape always.
        count = 1 if len(arr) < INT8_BLOCK_FROM or not corpus_kind.startswith("int8") else INT8_BLOCK_FROM
        single = np.stack([alone(m, count) for m in range(n_queries)], axis=1)  # [rows, M]
        per_position = np.stack([single[:, int(np.flatnonzero((q == a).all(axis=1))[0])] for a in arr], axis=1)
        best, which = pool(arr)
        np.testing.assert_array_equal(best, per_position.max(axis=1), err_msg=how)
        np.testing.assert_array_equal(which, per_position.argmax(axis=1), err_msg=how)
        hits = topk(arr, 25)
        assert hits.idx.tolist() == K.top_k(best, 25).tolist(), how
        np.testing.assert_array_equal(hits.scores, best[hits.idx])
        np.testing.assert_array_equal(hits.which, which[hits.idx])


def bm25_oracle(docs: list[list[int]], query: list[int], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    out = np.zeros(n)
    for t in query:
        df = sum(1 for d in docs if t in d)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            f = d.count(t)
            if f:
                out[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avgdl))
    return out


@pytest.mark.parametrize("numba_path", [False, True])
def test_term_index_scores_every_row_like_the_oracle(numba_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one BM25 (:class:`contextsieve.retrieval.bm25.TermIndex`) with the agent's settings (Lucene's
    idf, repeated query terms count again) against plain loops, on both kernel paths."""
    from contextsieve.retrieval.bm25 import LUCENE, TermIndex

    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 30, rng.integers(1, 40)).tolist() for _ in range(200)]
    monkeypatch.setattr(K, "BM25_TOPK_NUMBA_POSTINGS", 0 if numba_path else 10**18)
    index = TermIndex.from_texts([" ".join(f"t{t}" for t in d) for d in docs], str.split, LUCENE)
    for query in ([3, 7, 7, 29], [0], [], [31]):
        got = index.scores([f"t{t}" for t in query])
        assert got.dtype == np.float32 and got.shape == (200,)
        np.testing.assert_allclose(got, bm25_oracle(docs, query), rtol=1e-5, atol=1e-6)


def top_k_oracle(docs: list[list[int]], query: list[int], allowed: list[bool], k: int) -> list[tuple[int, float]]:
    """BM25 of every allowed row (FTS5's idf floor, the stash's formula) by plain loops, sorted."""
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    scores: dict[int, float] = {}
    for t in dict.fromkeys(query):
        df = sum(1 for d in docs if t in d)
        if not df:
            continue
        idf = max(float(np.log((n - df + 0.5) / (df + 0.5))), 1e-6)
        for i, d in enumerate(docs):
            f = d.count(t)
            if f and allowed[i]:
                scores[i] = scores.get(i, 0.0) + idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len(d) / avgdl))
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def top_k_inputs(docs: list[list[int]], query: list[int]) -> tuple[np.ndarray, ...]:
    """The postings of ``query``'s distinct terms as :func:`bm25_top_k` takes them."""
    n = len(docs)
    slots, tfs, offsets, idf = [], [], [0], []
    for t in dict.fromkeys(query):
        rows = [i for i, d in enumerate(docs) if t in d]
        if not rows:
            continue
        idf.append(max(float(np.log((n - len(rows) + 0.5) / (len(rows) + 0.5))), 1e-6))
        slots += rows
        tfs += [docs[i].count(t) for i in rows]
        offsets.append(len(slots))
    return (np.array(slots, np.int32), np.array(tfs, np.uint32), np.array(offsets, np.int64), np.array(idf))


@pytest.mark.parametrize("numba_path", [False, True])
def test_bm25_top_k_matches_oracle(numba_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows, scores, tie order and ``also`` scores against plain loops; rows repeat on purpose, so
    equal scores tie and the lower row must come first on both paths."""
    monkeypatch.setattr(K, "BM25_TOPK_NUMBA_POSTINGS", 0 if numba_path else 10**18)
    rng = np.random.default_rng(11)
    base = [rng.integers(0, 40, rng.integers(1, 30)).tolist() for _ in range(60)]
    docs = [base[i % 60] for i in range(300)]  # every row five times: real ties
    lengths = np.array([len(d) for d in docs], np.int32)
    avgdl = float(lengths.mean())
    for trial in range(30):
        query = rng.integers(0, 45, rng.integers(1, 8)).tolist()  # ids 40-44 are in no row
        allowed = rng.random(300) < (1.0 if trial % 3 == 0 else 0.4)
        k = int(rng.integers(1, 40))
        also = rng.integers(0, 300, 12)
        slots, tf, offsets, idf = top_k_inputs(docs, query)
        rows, scores, also_scores = K.bm25_top_k(slots, tf, offsets, idf, lengths, avgdl, allowed, k, also)
        want = top_k_oracle(docs, query, allowed.tolist(), k)
        assert rows.tolist() == [r for r, _ in want]
        np.testing.assert_allclose(scores, [v for _, v in want], rtol=1e-12)
        every = dict(top_k_oracle(docs, query, allowed.tolist(), 10**6))
        np.testing.assert_allclose(also_scores, [every.get(int(a), 0.0) for a in also], rtol=1e-12)


def test_bm25_top_k_paths_agree_bit_for_bit_and_refuse_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(12)
    docs = [rng.integers(0, 50, rng.integers(1, 60)).tolist() for _ in range(2000)]
    lengths = np.array([len(d) for d in docs], np.int32)
    args = (*top_k_inputs(docs, [1, 2, 3, 5, 8]), lengths, float(lengths.mean()), rng.random(2000) < 0.7, 25)
    # a tie whose lower row arrives later (term 7's postings after term 9's): the lower row wins
    tie = [[1, 2], [1, 2], [7, 3], [1, 2], [4, 4], [9, 3], [1, 2]]
    tie_len = np.array([len(d) for d in tie], np.int32)
    for threshold in (0, 10**18):
        monkeypatch.setattr(K, "BM25_TOPK_NUMBA_POSTINGS", threshold)
        top = K.bm25_top_k(*top_k_inputs(tie, [9, 7]), tie_len, 2.0, np.ones(7, bool), 1)
        assert top[0].tolist() == [2]
    got = []
    for threshold in (0, 10**18):
        monkeypatch.setattr(K, "BM25_TOPK_NUMBA_POSTINGS", threshold)
        got.append(K.bm25_top_k(*args, np.arange(0, 2000, 7)))
    for a, b in zip(*got):
        assert a.tolist() == b.tolist()  # the same floats: summed in the same order
    slots, tf, offsets, idf, lengths, avgdl, allowed, k = args
    for bad, match in [
        ((slots + 5000, tf, offsets, idf, lengths, avgdl, allowed, k), "rows in"),
        ((slots, tf, offsets[:-1], idf, lengths, avgdl, allowed, k), "one query"),
        ((slots, tf * 0, offsets, idf, lengths, avgdl, allowed, k), "tf must"),
        ((slots, tf, offsets, idf, lengths, float("nan"), allowed, k), "avgdl"),
        ((slots, tf, offsets, idf, lengths[:5], avgdl, allowed, k), "bool mask"),
        ((slots, tf, offsets, idf, lengths, avgdl, allowed.astype(int), k), "bool mask"),
        ((slots, tf, offsets, idf, lengths, avgdl, allowed, -1), "k"),
    ]:
        with pytest.raises(InputError, match=match):
            K.bm25_top_k(*bad)
    monkeypatch.setattr(K, "BM25_TOPK_NUMBA_POSTINGS", 0)
    huge = K.bm25_top_k(slots, tf, offsets, idf, lengths, avgdl, allowed, 10**12)  # k capped, no 8 TB buffer
    assert huge[0].size == np.unique(slots[allowed[slots]]).size
    empty = K.bm25_top_k(
        np.zeros(0, np.int32), np.zeros(0), np.zeros(1, np.int64), np.zeros(0), lengths, avgdl, allowed, 5
    )
    assert [x.size for x in empty] == [0, 0, 0]


def test_layouts_and_dtypes(backend: str) -> None:
    rng = np.random.default_rng(4)
    c64 = rng.integers(-2, 3, (50, 16)).astype(np.float64)
    q = rng.integers(-2, 3, (3, 16)).astype(np.float32)
    b64, _ = K.score_pool(q, c64)  # float64 converted once
    strided = np.repeat(c64.astype(np.float32), 2, axis=0)[::2]  # non-contiguous rows
    assert not strided.flags.c_contiguous
    bs, _ = K.score_pool(q, strided)
    np.testing.assert_array_equal(b64, bs)
    with pytest.raises(InputError, match="floats"):
        K.score_pool(q, c64.astype(np.int32))
    with pytest.raises(InputError, match="width"):
        K.score_pool(q[:, :8], c64)
    with pytest.raises(InputError, match="2-D"):
        K.score_pool(q, c64[0])
    bad = q.copy()
    bad[1, 3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        K.score_pool(bad, c64)
    with pytest.raises(InputError, match="exclude"):
        K.score_pool(q, c64, exclude=np.zeros(49, dtype=bool))
    with pytest.raises(InputError, match="item_of"):
        K.group_max(np.zeros(3), np.array([0, 1, 5]), 3)


def test_import_does_not_load_numba() -> None:
    """Nor do small calls; half_rows not even past its size (its loop waits for the kernels: a small
    store's close requests would import Numba, a few hundred ms and about 100 MB once, to save microseconds)."""
    code = (
        "import sys, numpy as np; import contextsieve, contextsieve.kernels.scoring as K; "
        "K.score_pool(np.ones((2, 8), np.float32), np.ones((100, 8), np.float32)); "
        "K.score_pool_topk(np.ones((2, 8), np.float32), np.ones((100, 8), np.float32), 5); "
        "got = K.half_rows(np.ones((300, 384), np.float16), np.arange(300)); "
        "assert got.dtype == np.float32 and (got == 1).all(); "
        "print('numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_bm25_index_matches_the_oracle_on_words() -> None:
    from contextsieve.retrieval.bm25 import BM25Index, tokenize

    docs = [
        "Read a file from disk",
        "Write files to the disk",
        "Fetch a web page by its URL",
        "Search the web for pages",
    ]
    assert tokenize("Reads the FILES, quickly!") == ["read", "file", "quickly"]
    idx = BM25Index(docs)
    vocab: dict[str, int] = {}
    as_ids = [[vocab.setdefault(t, len(vocab)) for t in tokenize(d)] for d in docs]
    for q in ("files on disk", "web pages", "nothing matches zzz", "", "disk disk"):
        qids = [vocab[t] for t in tokenize(q) if t in vocab]
        np.testing.assert_allclose(idx.scores(q), bm25_oracle(as_ids, qids), rtol=1e-5, atol=1e-6)
    assert int(np.argmax(idx.scores("web page url"))) == 2


@pytest.mark.parametrize("rows", [0, 1, 987, K.GEMV_MAX_ROWS, K.GEMV_MAX_ROWS + 1])
@pytest.mark.parametrize("n_queries", [1, 3, 65])
def test_query_scores_is_the_matrix_product(rows: int, n_queries: int) -> None:
    rng = np.random.default_rng(rows + n_queries)
    c = rng.standard_normal((rows, 384)).astype(np.float32)
    q = rng.standard_normal((n_queries, 384)).astype(np.float32)
    got = K.query_scores(c, q)
    assert got.shape == (rows, n_queries) and got.dtype == np.float32
    np.testing.assert_allclose(got, c.astype(np.float64) @ q.T.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_query_scores_leave_no_blas_thread_spinning() -> None:
    """A request's chunk scores must not leave numpy's BLAS threads busy-waiting on the other core
    (where ONNX Runtime embeds the next message)."""
    import time

    rng = np.random.default_rng(0)
    c = rng.standard_normal((987, 384)).astype(np.float32)
    q = rng.standard_normal((3, 384)).astype(np.float32)
    time.sleep(0.5)  # threads woken by earlier tests' products stop spinning first
    idle = 0.0
    for _ in range(3):
        K.query_scores(c, q)
        before = time.process_time()
        time.sleep(0.1)
        idle += time.process_time() - before
    assert idle < 0.05, idle  # c @ q.T here: about 0.1 s of spinning per 0.1 s of sleep


@pytest.mark.parametrize("numba_path", [False, True])
@pytest.mark.parametrize("n_queries", [1, 2, 3, 5, 9])
def test_query_scores_give_equal_queries_equal_bits_on_both_paths(
    numba_path: bool, n_queries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full score matrix (what selection fuses with keywords): each column is the matrix product's
    within float32 rounding, and a query's column does not depend on where it sits in the call."""
    monkeypatch.setattr(K, "NUMBA_MIN_WORK", 0 if numba_path else 10**18)
    rng = np.random.default_rng(7 + n_queries)
    c = rng.standard_normal((3000, 384)).astype(np.float32)
    q = rng.standard_normal((n_queries, 384)).astype(np.float32)
    got = K.query_scores(c, q)
    np.testing.assert_allclose(got, c.astype(np.float64) @ q.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    for how in ARRANGEMENTS:
        arr = _arrange(q, how)
        s = K.query_scores(c, arr)
        for col, a in enumerate(arr):
            first = int(np.flatnonzero((arr == a).all(axis=1))[0])
            np.testing.assert_array_equal(s[:, col], s[:, first], err_msg=how)
