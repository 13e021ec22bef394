"""A message as one value (:class:`~contextsieve.retrieval.query.Query`): split once, with the cap's
note, and trusted by another search (the stash's) only when its sentences are the whole text's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextsieve.retrieval.query import Query
from contextsieve.retrieval.text import query_chunks
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder


class Named(FakeEmbedder):
    model_id = "fake/query-value"  # a stash keeps vectors under a model id


def test_a_split_query_knows_whether_a_cap_cut_its_sentences() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(6))
    whole = Query.split(text, steps=True, cap=8)
    assert whole.complete and list(whole.sentences) == query_chunks(text) and not whole.cap_note
    cut = Query.split(text, cap=4)
    assert not cut.complete and len(cut.sentences) == 4 and "first 2 and the last 2" in cut.cap_note
    assert Query.of_texts(text, query_chunks(text)).complete
    assert not Query.of_texts(text, query_chunks(text)[:2]).complete


def test_the_stash_embeds_the_text_itself_when_the_query_is_not_all_of_it(tmp_path: Path) -> None:
    emb = Named()
    store = StashStore.open(tmp_path / "stash.db", emb)
    try:
        store.stash(["the deploy key is in the vault", "lunch is at noon"])
        text = "Where is the deploy key? Lunch at noon."
        part = Query.of_texts(text, ["Lunch at noon."])
        part = part.embedded(np.asarray(emb.embed(list(part.chunks))), emb.model_id)
        whole = Query.of_texts(text, query_chunks(text))
        whole = whole.embedded(np.asarray(emb.embed(list(whole.chunks))), emb.model_id)
        plain = [r.segment.id for r in store.retrieve(text, top_k=2)]
        assert [r.segment.id for r in store.retrieve(part, top_k=2)] == plain  # not the part's vectors
        before = emb.calls
        assert [r.segment.id for r in store.retrieve(whole, top_k=2)] == plain
        assert emb.calls == before  # the whole text's own vectors: no model call
    finally:
        store.close()
