"""The keyword index built from terms already known equals the one that tokenizes its texts, and the
chunk store's keyword index after a recorded example (kept in step, not rebuilt) equals a fresh index
of the same texts."""

from __future__ import annotations

import random

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, Tool
from contextsieve.errors import InputError
from contextsieve.retrieval.bm25 import BM25Index, tokenize
from contextsieve.selection.chunk_store import ChunkStore
from tests.helpers.fake_embedder import FakeEmbedder

WORDS = "deploy rollback ticket refund invoice branch commit page search Straße 查询 run the a of".split()


def test_an_index_from_known_terms_scores_as_one_that_tokenizes() -> None:
    rng = random.Random(7)
    texts = [" ".join(rng.choices(WORDS, k=rng.randrange(1, 12))) for _ in range(200)]
    plain, known = BM25Index(texts), BM25Index(texts, terms=[tokenize(t) for t in texts])
    for _ in range(30):
        q = " ".join(rng.choices(WORDS, k=3))
        np.testing.assert_array_equal(plain.scores(q), known.scores(q))
    with pytest.raises(InputError):
        BM25Index(texts, terms=[tokenize(t) for t in texts[:-1]])


def test_the_rebuild_after_a_recorded_example_equals_a_fresh_index() -> None:
    tools = [Tool("s0" if i % 2 else "s1", f"t{i}", " ".join(random.Random(i).choices(WORDS, k=6))) for i in range(12)]
    agent = Agent(servers={s: McpServer(s, default_include=IncludeMode.AGENT) for s in ("s0", "s1")}, tools=tools)
    store = ChunkStore(FakeEmbedder())
    order = agent.table().keys
    store.sync(agent.table().items, server_descriptions={})
    store.keyword_index(order)
    store.record_examples("roll the deploy back now", [tools[3].key])
    store.sync(agent.table().items, server_descriptions={})
    rebuilt = store.keyword_index(order)
    texts = [c.embed_text for k in order for c in store.chunks_of(k).chunks]
    assert any(t == "roll the deploy back now" for t in texts)  # the example is a chunk now
    fresh = BM25Index(texts)
    for q in ("deploy rollback", "roll back", "refund invoice page", "查询"):
        np.testing.assert_array_equal(rebuilt.scores(q), fresh.scores(q))
