"""Which of a request's query texts go through the model, and which are composed from the others.

A request searches with its message's sentences and, for tasks, their steps and clauses
(:func:`contextsieve.retrieval.text.split_query`), so a task's words appear in several query texts: "Find the
failing test and post it on Slack." is searched as itself and as its two clauses. Embedding every text
put each token through the model two or three times, and the batch was padded to the longest text:
a 300-character task cost four to eight one-sentence requests (``benchmarks.speed.task_cost``).

Here each token goes through the model about once: the *leaves* (texts that contain no other query
text) are embedded, and a text made of leaves gets the mean of its leaves' vectors weighted by their
length in words,
re-normalised (MiniLM pools by the mean of its token states, so the mean of the parts' vectors is close
to the vector of the whole; recall on the tuning sets is unchanged, see docs/performance.md). A text
whose leaves cover less than :data:`MIN_COVERAGE` of its characters is embedded itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_COVERAGE", "QueryPlan", "plan_query", "compose", "embed_planned"]

#: Share of a text's characters its leaves must cover for its vector to be composed from theirs.
MIN_COVERAGE = 0.6


@dataclass(frozen=True)
class QueryPlan:
    """How to get a vector for each query text.

    Attributes:
        embed: the texts that go through the model (unique, in first-seen order).
        parts: per input text, the indices into ``embed`` whose weighted mean is its vector (one index:
            the text itself).
        weights: per input text, the weight of each part (about its tokens: words, plus one per CJK
            character; word weights kept recall on both tool catalogs where character weights lost
            0.003-0.007, ``benchmarks.quality.tool_selection``).
    """

    embed: tuple[str, ...]
    parts: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[float, ...], ...]


def plan_query(texts: Sequence[str]) -> QueryPlan:
    """The :class:`QueryPlan` of ``texts`` (quadratic in their number: a request has a few dozen at most)."""
    uniq = list(dict.fromkeys(texts))
    inside = {t: [u for u in uniq if u != t and u and u in t] for t in uniq}
    composed: dict[str, list[str]] = {}
    for t in uniq:
        if not inside[t]:
            continue
        parts = [u for u in inside[t] if not inside[u]]
        if sum(len(u) for u in parts) >= MIN_COVERAGE * len(t):
            composed[t] = parts
    embed = [t for t in uniq if t not in composed]
    index = {t: i for i, t in enumerate(embed)}
    parts_out: list[tuple[int, ...]] = []
    weights_out: list[tuple[float, ...]] = []
    for t in texts:
        if t in composed:
            parts_out.append(tuple(index[u] for u in composed[t]))
            weights_out.append(tuple(_weight(u) for u in composed[t]))
        else:
            parts_out.append((index[t],))
            weights_out.append((1.0,))
    return QueryPlan(tuple(embed), tuple(parts_out), tuple(weights_out))


def _weight(text: str) -> float:
    """About the text's tokens: its words, plus one per CJK character (CJK text has no spaces)."""
    cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return float(max(1, len(text.split()) + cjk))


def compose(plan: QueryPlan, vectors: np.ndarray) -> np.ndarray:
    """Unit vectors ``[len(plan.parts), dim]`` from the vectors of ``plan.embed`` (unit rows, in order)."""
    out = np.empty((len(plan.parts), vectors.shape[1]), dtype=np.float32)
    for i, (parts, weights) in enumerate(zip(plan.parts, plan.weights)):
        if len(parts) == 1:
            out[i] = vectors[parts[0]]
            continue
        v = (vectors[list(parts)] * np.asarray(weights, dtype=np.float32)[:, None]).sum(axis=0)
        out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def embed_planned(texts: Sequence[str], embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """Vectors of ``texts`` through :func:`plan_query`: ``embed`` is called once, on the plan's texts."""
    plan = plan_query(texts)
    return compose(plan, embed(list(plan.embed)))
