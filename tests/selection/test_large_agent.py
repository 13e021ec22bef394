"""A 150,000-chunk agent: requests search through HNSW and choose what exact search chooses
(needs the ``hnsw`` extra, which the test install has)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, Tool
from contextsieve.engine import Engine
from contextsieve.retrieval.chunks import HNSW_MIN_ROWS, IndexConfig

DIM = 64
N_TOOLS = 150_000
VOCAB = [f"w{i}" for i in range(5000)]
_P = 1 / np.arange(1, len(VOCAB) + 1) ** 0.8
P = _P / _P.sum()  # Zipf-like word frequencies, as in real text


class WordEmbedder:
    """A fast deterministic embedder: the normalised sum of one random vector per word."""

    model_id = None

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one instance per test module
    def word(self, w: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            v = sum((self.word(w) for w in t.lower().replace(":", " ").split()), np.zeros(DIM, np.float32))
            n = np.linalg.norm(v)
            out[i] = v / n if n else self.word("")
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]


@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    rng = np.random.default_rng(1)
    words = rng.choice(len(VOCAB), (N_TOOLS, 8), p=P)
    servers = {f"s{i}": McpServer(f"s{i}", {}, IncludeMode.AGENT) for i in range(10)}
    tools = [Tool(f"s{i % 10}", f"t{i}", " ".join(VOCAB[j] for j in words[i])) for i in range(N_TOOLS)]
    agent = Agent("big", servers=servers, tools=tools)
    emb = WordEmbedder()
    return Engine(agent, embedder=emb), Engine(agent, embedder=emb, index=IndexConfig(backend="exact"))


def test_a_150k_chunk_agent_selects_through_hnsw_as_exact_search_does(engines: tuple[Engine, Engine]) -> None:
    hnsw, exact = engines
    report = hnsw.index()
    assert report.chunks >= 150_000 > HNSW_MIN_ROWS and report.search == "hnsw"
    assert exact.index().search == "exact"
    rng = np.random.default_rng(2)
    same = 0
    for _ in range(200):
        msg = " ".join(rng.choice(VOCAB, 4, p=P))
        a, b = hnsw.select(msg), exact.select(msg)
        assert a.trace is not None and b.trace is not None
        assert a.trace.path == "hnsw" and b.trace.path == "exact"  # which search ran
        same += a.context.keys() == b.context.keys()
    assert same >= 190, f"{same} of 200 requests chose the same items"


def test_the_index_follows_edits_without_a_rebuild(engines: tuple[Engine, Engine]) -> None:
    hnsw, _ = engines
    hnsw.index()
    index = hnsw.store.search_index(hnsw.agent.table().keys)
    assert index is not None
    before = index.chunks
    gone = hnsw.agent.get("tool:s1:t1").description
    assert "tool:s1:t1" in {str(k) for k in hnsw.select(gone).context.keys()}
    hnsw.agent.upsert(Tool("s0", "needle", "zebra quokka platypus"))
    hnsw.agent.delete("tool:s1:t1")
    req = hnsw.select("zebra quokka platypus")
    assert req.trace is not None and req.trace.path == "hnsw"
    assert req.context.keys()[0].name == "needle"
    assert index.index.chunks == before + 1 and hnsw.store.search_index(hnsw.agent.table().keys) is not None
    assert "tool:s1:t1" not in {str(k) for k in hnsw.select(gone).context.keys()}  # its rows are deleted
    ex = hnsw.session().explain("zebra quokka platypus", "tool:s0:needle")
    assert ex.included and any("HNSW" in r for r in ex.reasons)


def test_without_hnswlib_a_large_agent_stays_exact_and_keeps_no_index_copy(monkeypatch) -> None:  # noqa: ANN001
    import builtins
    import warnings

    real_import = builtins.__import__

    def no_hnswlib(name: str, *a: object, **k: object) -> object:
        if name == "hnswlib":
            raise ImportError("no hnswlib")
        return real_import(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_hnswlib)
    servers = {"s": McpServer("s", {}, IncludeMode.AGENT)}
    agent = Agent("mid", servers=servers, tools=[Tool("s", f"t{i}", f"w{i % 50} w{i % 7}") for i in range(300)])
    engine = Engine(agent, embedder=WordEmbedder(), index=IndexConfig(hnsw_min_rows=200))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = engine.index()
    assert report.search == "exact" and any("hnswlib is missing" in str(w.message) for w in caught)
    assert engine.store.index_config.backend == "exact" and engine.store._index is None
    req = engine.select("w3 w4")
    assert req.trace is not None and req.trace.path == "exact" and req.context.entries
