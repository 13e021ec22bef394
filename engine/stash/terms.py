"""An in-memory inverted index of the embedded store's keyword terms, scored with BM25 as SQLite FTS5
computes it (:func:`contextsieve.stash.backend.bm25`), by the kernel
:func:`contextsieve.kernels.scoring.bm25_top_k` over the query terms' postings.

Slots are the :class:`~contextsieve.stash.vectors.VectorTable`'s (append-only, never reused), so a
removed slot's postings stay behind harmlessly: scores are masked by the caller's live-and-allowed
mask, and document frequencies, counts and lengths are kept over live slots only.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence

import numpy as np

from contextsieve.kernels.scoring import bm25_top_k

__all__ = ["TermIndex"]


class TermIndex:
    """Postings (slot, term frequency) per term; BM25 with ``k1`` 1.2 and ``b`` 0.75 (FTS5's)."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._ids: dict[str, int] = {}
        self._slots: list[array] = []  # term id -> slots holding it ('i')
        self._tf: list[array] = []  # term id -> the term's count in each of those slots ('I')
        self._df: list[int] = []  # term id -> live slots holding it
        self._flat = array("i")  # per slot, its distinct term ids, one after the other
        self._start = array("q", [0])  # slot -> offset into _flat (slot + 1 -> end)
        self._length = array("i")  # slot -> terms in it
        self._live = 0
        self._total = 0

    def add(self, slot: int, terms: Sequence[str]) -> None:
        """Index ``terms`` under ``slot`` (slots are added in order: 0, 1, 2, ...)."""
        if slot != len(self._length):
            raise ValueError(f"slot {slot} added out of order (next is {len(self._length)})")
        for term, tf in Counter(terms).items():
            t = self._ids.get(term)
            if t is None:
                t = self._ids[term] = len(self._slots)
                self._slots.append(array("i"))
                self._tf.append(array("I"))
                self._df.append(0)
            self._slots[t].append(slot)
            self._tf[t].append(tf)
            self._df[t] += 1
            self._flat.append(t)
        self._start.append(len(self._flat))
        self._length.append(len(terms))
        self._live += 1
        self._total += len(terms)

    def remove(self, slot: int) -> None:
        """Take ``slot`` out of the counts (its postings are masked from then on)."""
        for t in self._flat[self._start[slot] : self._start[slot + 1]]:
            self._df[t] -= 1
        self._live -= 1
        self._total -= self._length[slot]

    def search(
        self, terms: Sequence[str], k: int, allowed: np.ndarray, also: Sequence[int] = ()
    ) -> list[tuple[int, float]]:
        """The ``k`` best slots among ``allowed`` (a bool mask over slots, live ones only) holding any
        of ``terms``, by BM25, best first (ties by slot); then the scores of the slots in ``also``
        that hold a term and are not among those ``k`` (in the order given)."""
        n = len(self._length)
        if k <= 0 or not n or self._live <= 0:
            return []
        slot_parts: list[np.ndarray] = []
        tf_parts: list[np.ndarray] = []
        idf: list[float] = []
        for term in dict.fromkeys(terms):
            t = self._ids.get(term)
            if t is None or self._df[t] <= 0:
                continue
            df = self._df[t]
            x = math.log((self._live - df + 0.5) / (df + 0.5))
            idf.append(x if x > 0 else 1e-6)
            slot_parts.append(np.frombuffer(self._slots[t], dtype=np.int32))
            tf_parts.append(np.frombuffer(self._tf[t], dtype=np.uint32))
        if not idf:
            return []
        offsets = np.zeros(len(idf) + 1, np.int64)
        np.cumsum([p.size for p in slot_parts], out=offsets[1:])
        want = np.asarray(also, dtype=np.int64)
        rows, scores, also_scores = bm25_top_k(
            np.concatenate(slot_parts),
            np.concatenate(tf_parts),
            offsets,
            idf,
            np.frombuffer(self._length, dtype=np.int32),
            self._total / self._live,
            allowed[:n],
            k,
            want,
            k1=self.k1,
            b=self.b,
        )
        out = list(zip(rows.tolist(), scores.tolist()))
        if want.size:
            taken = set(rows.tolist())
            out.extend((r, v) for r, v in zip(want.tolist(), also_scores.tolist()) if v > 0 and r not in taken)
        return out
