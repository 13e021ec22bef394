"""The keyword index kept in step with the chunks scores every row as a fresh BM25 index of the same
texts would (a plain oracle), through any sequence of added, removed and repeated texts, and rows
without words score 0."""

from __future__ import annotations

import random

import numpy as np
import pytest

from contextsieve.retrieval.bm25 import BM25Index
from contextsieve.selection.keyword_rows import KeywordDocs

WORDS = "branch commit merge pull request issue refund parcel late payment deploy rollback status".split()


def fresh(texts: list[str], query: str) -> np.ndarray:
    """The oracle: one BM25 index of the rows with words, built now, scattered to every row."""
    rows = [i for i, t in enumerate(texts) if t]
    out = np.zeros(len(texts), np.float32)
    if rows:
        out[rows] = BM25Index([texts[i] for i in rows]).scores(query)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_an_index_kept_in_step_scores_as_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    docs = KeywordDocs()
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(12)]
    for _ in range(30):
        move = rng.random()
        if move < 0.4:  # a recorded example with words, or a repeated text
            texts.insert(rng.randrange(len(texts) + 1), rng.choice([*texts, " ".join(rng.choices(WORDS, k=3))]))
        elif move < 0.6:  # one kept as a vector only: no words
            texts.insert(rng.randrange(len(texts) + 1), "")
        elif move < 0.9 and len(texts) > 2:  # a tool removed or changed
            texts.pop(rng.randrange(len(texts)))
        else:
            texts[rng.randrange(len(texts))] = " ".join(rng.choices(WORDS, k=4))
        got = docs.rows(texts)
        for query in ("refund the late parcel", "merge the pull request", "status"):
            np.testing.assert_allclose(got.scores(query), fresh(texts, query), rtol=1e-5, atol=1e-6)
        assert all(got.scores("branch")[i] == 0 for i, t in enumerate(texts) if not t)


def test_a_text_kept_as_a_vector_changes_no_score() -> None:
    docs = KeywordDocs()
    texts = ["open a pull request", "refund a payment", "track a late parcel"]
    before = docs.rows(texts).scores("refund the parcel")
    after = docs.rows([texts[0], "", texts[1], "", texts[2]]).scores("refund the parcel")
    np.testing.assert_array_equal(after[[0, 2, 4]], before)
    assert docs.index is not None and len(docs.index) == 3  # nothing added, nothing rebuilt
