"""ChunkIndex: exact search against the kernel oracle, scopes, deletion, persistence, HNSW recall."""

from __future__ import annotations

import builtins
import io
import itertools
import random

import numpy as np
import pytest

from contextsieve.errors import IndexFileError, InputError, MissingExtraError
from contextsieve.index import ChunkIndex, IndexConfig, Scope


def unit(rng: np.random.Generator, n: int, d: int = 384) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def oracle(vec: np.ndarray, keep: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    s = (vec.astype(np.float64) @ q.T.astype(np.float64)).max(axis=1)
    rows = [i for i in range(len(vec)) if keep[i]]
    return sorted(rows, key=lambda i: (-s[i], i))[:k]


def test_exact_search_with_scopes_and_deletions() -> None:
    rng = np.random.default_rng(0)
    idx = ChunkIndex(384, IndexConfig(backend="exact"))
    v = unit(rng, 600)
    scopes = [list(Scope)[i % 3] for i in range(600)]
    rows = idx.add(v, np.arange(600) // 4, scopes)
    assert rows.tolist() == list(range(600)) and len(idx) == 600
    idx.remove([3, 10, 11])
    q = v[[3, 50]] + 0.01
    hits = idx.search(q, 20, scopes=["rules", Scope.TOOLS])
    keep = np.array([s in (Scope.RULES, Scope.TOOLS) for s in scopes]) & ~np.isin(np.arange(600), [3, 10, 11])
    assert hits.idx.tolist() == oracle(v, keep, q, 20)
    assert 3 not in hits.idx.tolist() and len(idx) == 597
    assert idx.items()[hits.idx[0]] == hits.idx[0] // 4


def test_add_grows_and_search_sees_new_rows() -> None:
    rng = np.random.default_rng(1)
    idx = ChunkIndex(16)
    for start in range(0, 300, 37):
        idx.add(unit(rng, 37, 16), np.full(37, start), "references")
    assert len(idx) == 37 * 9
    target = idx.vectors()[200]
    assert idx.search(target[None], 1).idx.tolist() == [200]


def test_bad_input_changes_nothing() -> None:
    idx = ChunkIndex(8)
    idx.add(np.eye(8, dtype=np.float32), range(8), "rules")
    bad = np.eye(8, dtype=np.float32)[:2].copy()
    bad[1, 2] = np.inf
    with pytest.raises(InputError, match="NaN or inf"):
        idx.add(bad, [1, 2], "rules")
    with pytest.raises(InputError, match="item ids"):
        idx.add(np.eye(8, dtype=np.float32), range(3), "rules")
    with pytest.raises(ValueError):
        idx.add(np.eye(8, dtype=np.float32), range(8), "nonsense")
    with pytest.raises(InputError, match="width"):
        idx.search(np.ones((1, 9), np.float32), 3)
    assert len(idx) == 8
    assert idx.search(np.zeros((0, 8), np.float32), 5).idx.size == 0


def test_save_load_round_trip_and_corruption(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(2)
    idx = ChunkIndex(32)
    idx.add(unit(rng, 100, 32), range(100), "tools")
    idx.remove([5])
    p = tmp_path / "i.csidx"
    idx.save(p)
    back = ChunkIndex.load(p)
    q = unit(rng, 3, 32)
    a, b = idx.search(q, 10), back.search(q, 10)
    assert a.idx.tolist() == b.idx.tolist() and len(back) == 99
    data = bytearray(p.read_bytes())
    data[-100] ^= 1
    p.write_bytes(bytes(data))
    with pytest.raises(IndexFileError, match="sha256"):
        ChunkIndex.load(p)
    p.write_bytes(b"garbage")
    with pytest.raises(IndexFileError, match="not a contextsieve index"):
        ChunkIndex.load(p)
    with pytest.raises(IndexFileError, match="no index file"):
        ChunkIndex.load(tmp_path / "missing")


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
        idx.add(np.eye(8, dtype=np.float32), range(8), "rules")
    assert idx.backend == "exact"


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


def test_hnsw_recall_against_exact_on_real_embeddings(real_vectors, tmp_path) -> None:  # noqa: ANN001
    corpus, queries = real_vectors
    exact = ChunkIndex(384, IndexConfig(backend="exact"))
    exact.add(corpus, range(len(corpus)), "references")
    hnsw = ChunkIndex(384, IndexConfig(backend="hnsw"))
    hnsw.add(corpus, range(len(corpus)), "references")
    assert hnsw.backend == "hnsw"
    recall = np.mean(
        [
            len(set(hnsw.search(q[None], 10).idx.tolist()) & set(exact.search(q[None], 10).idx.tolist())) / 10
            for q in queries
        ]
    )
    assert recall >= 0.95, recall
    hnsw.remove([int(hnsw.search(queries[:1], 1).idx[0])])
    p = tmp_path / "h.csidx"
    hnsw.save(p)
    back = ChunkIndex.load(p)
    assert back.backend == "hnsw"
    for q in queries[:20]:
        assert back.search(q[None], 10).idx.tolist() == hnsw.search(q[None], 10).idx.tolist()


def test_auto_switches_to_hnsw_above_threshold(real_vectors) -> None:  # noqa: ANN001
    corpus, _ = real_vectors
    idx = ChunkIndex(384, IndexConfig(hnsw_min_rows=2000))
    idx.add(corpus[:1500], range(1500), "tools")
    assert idx.backend == "exact"
    idx.add(corpus[1500:], range(1500, len(corpus)), "tools")
    assert idx.backend == "hnsw"
    assert idx.search(corpus[2500:2501], 1).idx.tolist() == [2500]


def test_failed_recall_guard_keeps_exact_and_does_not_rebuild_every_add(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    idx = ChunkIndex(16, IndexConfig(hnsw_min_rows=50))
    calls = []
    monkeypatch.setattr(ChunkIndex, "_passes_recall_guard", lambda self: calls.append(len(self)) or False)
    with pytest.warns(UserWarning, match="recall"):
        idx.add(unit(rng, 60, 16), range(60), "rules")
    assert idx.backend == "exact" and calls == [60]
    idx.add(unit(rng, 30, 16), range(30), "rules")  # 90 < 2 x 60: no new attempt
    assert calls == [60]
    with pytest.warns(UserWarning, match="recall"):
        idx.add(unit(rng, 40, 16), range(40), "rules")  # 130 >= 120: one more attempt
    assert calls == [60, 130]
    assert idx.search(idx.vectors()[100:101], 1).idx.tolist() == [100]


def test_bad_ids_and_scopes_are_refused_and_change_nothing() -> None:
    """Failed before: 2**70 raised OverflowError, 1.5 and True deleted row 1, "rules" was read as r, u, l, e, s."""
    from contextsieve.errors import InputError

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((4, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = ChunkIndex(8, IndexConfig(backend="exact"))
    index.add(vecs, [0, 1, 2, 3], ["rules", "rules", "tools", "references"])
    for bad in ([2**70], [1.5], [True]):
        with pytest.raises(InputError, match="item ids"):
            index.add(vecs[:1], bad, "rules")
        with pytest.raises(InputError, match="row ids"):
            index.remove(bad)
    with pytest.raises(InputError, match="unknown scope"):
        index.add(vecs[:1], [9], "rule")
    assert len(index) == 4 and index.rows == 4
    hits = index.search(vecs[:1], 4, scopes="rules")
    assert sorted(hits.idx.tolist()) == [0, 1]
    with pytest.raises(InputError, match="unknown scope"):
        index.search(vecs[:1], 4, scopes=["r"])


def _resign(path, arrays=None, body=None) -> None:  # noqa: ANN001
    """Rewrite an index file with new contents and a valid checksum (a crafted, not a damaged, file)."""
    import hashlib

    if body is None:
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        body = buf.getvalue()
    magic = path.read_bytes()[:8]
    path.write_bytes(magic + hashlib.sha256(body).digest() + body)


def test_crafted_index_files_with_valid_checksums_are_refused(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("hnswlib")
    import json

    rng = np.random.default_rng(4)
    idx = ChunkIndex(16, IndexConfig(backend="hnsw"))
    idx.add(unit(rng, 300, 16), range(300), "rules")
    p = tmp_path / "i.csidx"
    idx.save(p)
    good = dict(np.load(io.BytesIO(p.read_bytes()[40:])))
    assert "hnsw0" in good and ChunkIndex.load(p).backend == "hnsw"

    def variant(**changes) -> dict:  # noqa: ANN003
        out = {k: v.copy() for k, v in good.items()}
        out.update(changes)
        return {k: v for k, v in out.items() if v is not None}

    nan_vec = good["vec"].copy()
    nan_vec[7, 3] = np.nan
    scope9 = good["scope"].copy()
    scope9[0] = 9
    meta = json.loads(bytes(good["meta"]))
    bad_meta = lambda m: np.frombuffer(json.dumps(m).encode(), np.uint8)  # noqa: E731
    graph = good["hnsw0"]
    cases = {
        "NaN": variant(vec=nan_vec),
        "scope code 9": variant(scope=scope9),
        "arrays do not match": variant(item=good["item"][:-1]),
        "vectors of shape": variant(vec=good["vec"][:, :8]),
        "ef": variant(meta=bad_meta({**meta, "ef": -1})),
        "unreadable contents": variant(meta=np.frombuffer(b"\xff[", np.uint8)),
        "unknown scope": variant(hnsw7=graph),
        "graph of scope 0 is unreadable": variant(hnsw0=rng.integers(0, 256, 5000).astype(np.uint8)),
        "scope 0 is unreadable": variant(hnsw0=graph[: graph.size // 2]),
    }
    for expect, arrays in cases.items():
        _resign(p, arrays)
        with pytest.raises(IndexFileError, match=expect):
            ChunkIndex.load(p)
    # a graph of another scope's rows: valid hnswlib, wrong labels
    other = ChunkIndex(16, IndexConfig(backend="hnsw"))
    other.add(unit(rng, 400, 16), range(400), "rules")
    other.save(tmp_path / "o.csidx")
    foreign = dict(np.load(io.BytesIO((tmp_path / "o.csidx").read_bytes()[40:])))["hnsw0"]
    _resign(p, variant(hnsw0=foreign))
    with pytest.raises(IndexFileError, match="names rows it does not hold"):
        ChunkIndex.load(p)
    for body in (b"", b"PK\x03\x04garbage", b"\x00" * 100):
        _resign(p, body=body)
        with pytest.raises(IndexFileError):
            ChunkIndex.load(p)
