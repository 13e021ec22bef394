"""Expansion and item-relationship kernels against brute-force oracles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsieve.errors import InputError
from contextsieve.kernels.relations import POOLINGS, cap_rows_per_item, expansion_pass, item_relations


def data(seed: int, n: int, items: int, d: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(-2, 3, (n, d)).astype(np.float32), rng.integers(0, items, n)


@given(
    seed=st.integers(0, 9999),
    n=st.sampled_from([1, 5, 40, 200]),
    items=st.integers(1, 12),
    cap=st.sampled_from([None, 1, 2]),
)
@settings(max_examples=40, deadline=None, derandomize=True)
def test_expansion_matches_oracle(seed: int, n: int, items: int, cap: int | None) -> None:
    c, it = data(seed, n, items)
    rng = np.random.default_rng(seed + 1)
    seeds = rng.choice(items, size=min(2, items), replace=False)
    prio = rng.integers(0, 5, n).astype(np.float32)
    extra = rng.random(n) < 0.1
    res = expansion_pass(c, it, seeds, cap=cap, priority=prio, exclude=extra)
    # oracle: the query rows are each seed's chunks, best `cap` by priority (then lower row)
    q = []
    for s in sorted(seeds):
        rows = sorted([r for r in range(n) if it[r] == s], key=lambda r: (-prio[r], r))
        q += rows[:cap] if cap else rows
    q = sorted(q)
    assert res.query_rows.tolist() == q
    for r in range(n):
        if it[r] in seeds or extra[r] or not q:
            assert res.scores[r] == -np.inf and res.source[r] == -1
            continue
        dots = [float(c[r] @ c[k]) for k in q]
        best = max(dots)
        assert res.scores[r] == best
        assert res.source[r] == q[dots.index(best)]  # the first query chunk reaching the max


def test_cap_rows_per_item() -> None:
    it = np.array([0, 0, 0, 1, 1, 2])
    assert cap_rows_per_item(np.arange(6), it, 2).tolist() == [0, 1, 3, 4, 5]
    assert cap_rows_per_item(np.arange(6), it, 1, np.array([0, 5, 1, 0, 0, 9.0])).tolist() == [1, 3, 5]
    with pytest.raises(InputError):
        cap_rows_per_item(np.arange(6), it, 0)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_item_relations_match_oracle(pooling: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((60, 16)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    items = 9
    it = rng.integers(0, items - 1, 60)  # the last item has no chunk
    rel = item_relations(c, it, items, pooling=pooling, threshold=-1.0)
    got = {(int(i), int(j)): float(s) for i, j, s in zip(rel.i, rel.j, rel.sim)}
    for a in range(items):
        for b in range(a + 1, items):
            A, B = c[it == a].astype(np.float64), c[it == b].astype(np.float64)
            if len(A) == 0 or len(B) == 0:
                assert (a, b) not in got
                continue
            if pooling == "best_pair":
                want = (A @ B.T).max()
            elif pooling == "mean_pairs":
                want = (A @ B.T).mean()
            else:
                ma, mb = A.mean(0), B.mean(0)
                want = ma @ mb / (np.linalg.norm(ma) * np.linalg.norm(mb))
            assert got[(a, b)] == pytest.approx(want, abs=1e-5)
    high = item_relations(c, it, items, pooling=pooling, threshold=0.3)
    assert all(s >= 0.3 for s in high.sim) and len(high) == sum(1 for s in got.values() if s >= 0.3)


def test_relations_neighbours_and_errors() -> None:
    c = np.array([[1, 0], [1, 0.01], [0, 1]], dtype=np.float32)
    rel = item_relations(c, np.array([0, 1, 2]), 3, threshold=0.9)
    assert [(int(i), int(j)) for i, j in zip(rel.i, rel.j)] == [(0, 1)]
    assert rel.neighbours(1)[0][0] == 0 and rel.neighbours(2) == []
    with pytest.raises(InputError, match="pooling"):
        item_relations(c, np.array([0, 1, 2]), 3, pooling="median")
    with pytest.raises(InputError, match="item_of"):
        item_relations(c, np.array([0, 1, 5]), 3)
