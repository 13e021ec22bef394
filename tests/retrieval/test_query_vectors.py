"""Query texts made of other query texts are composed from their vectors, not embedded again."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from contextsieve.retrieval.query_vectors import MIN_COVERAGE, compose, embed_planned, plan_query


def test_a_sentence_of_clauses_is_composed_from_them() -> None:
    texts = ["Find the failing test and post it on Slack.", "Find the failing test", "post it on Slack"]
    plan = plan_query(texts)
    assert plan.embed == ("Find the failing test", "post it on Slack")
    assert plan.parts == ((0, 1), (0,), (1,))
    assert plan.weights[0] == (4.0, 4.0)  # words


def test_poorly_covered_texts_and_repeats_are_embedded_once_each() -> None:
    long = "Summarise the incident report from last night for the on-call channel"
    texts = [long, "last night", long, "Check the deploy"]
    plan = plan_query(texts)
    assert len("last night") < MIN_COVERAGE * len(long)
    assert plan.embed == (long, "last night", "Check the deploy")
    assert plan.parts == ((0,), (1,), (0,), (2,))
    assert plan_query([]).embed == ()


def test_compose_is_the_weighted_mean_renormalised() -> None:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    plan = plan_query(["ab cd and ef gh ij", "ab cd", "ef gh ij"])
    out = compose(plan, v)
    want = 2 * v[0] + 3 * v[1]
    np.testing.assert_allclose(out[0], want / np.linalg.norm(want), rtol=1e-6)
    np.testing.assert_array_equal(out[1:], v)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


class Counting:
    model_id = "counting/x/0/b1"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, hash(t) % 4] = 1.0
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def test_the_store_sends_only_the_leaves_through_the_model() -> None:
    from contextsieve.agent.agent import Agent
    from contextsieve.engine import Engine

    emb = Counting()
    engine = Engine(Agent(name="a"), embedder=emb, cache_dir=False)
    texts = ["Find the failing test and post it on Slack.", "Find the failing test", "post it on Slack"]
    vecs = engine.store.embed_query(texts)
    assert emb.calls == [["Find the failing test", "post it on Slack"]]
    np.testing.assert_allclose(vecs, embed_planned(texts, lambda t: Counting().embed(t)))
    engine.store.embed_query(texts)  # memo: nothing embedded again
    assert len(emb.calls) == 1


@pytest.mark.parametrize("texts", [["x"], ["a b", "a b"], ["one two three", "two three", "one"]])
def test_every_text_gets_a_unit_vector(texts: list[str]) -> None:
    out = embed_planned(texts, lambda t: Counting().embed(t))
    assert out.shape == (len(texts), 4)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
