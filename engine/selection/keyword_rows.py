"""The keyword index as a search reads it: BM25 over the chunks that have words, scored per row of
the chunk matrix (a recorded example kept as a vector only has none), and kept in step with the chunks
as they change (a recorded example adds a text; nothing is rebuilt)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.retrieval.bm25 import BM25Index, tokenize

__all__ = ["KeywordRows", "KeywordDocs"]


@dataclass(frozen=True)
class KeywordRows:
    """A BM25 index of the chunks that have words, scored per row of the chunk matrix.

    Attributes:
        index: BM25 over texts (some rows of it may be removed ones). rows: the matrix rows with words.
        slots: the index row of each of ``rows``. n: all matrix rows.
    """

    index: BM25Index
    rows: np.ndarray
    slots: np.ndarray
    n: int

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every matrix row for ``query`` (float32; 0 for a row without words)."""
        got = self.index.scores(query)
        out = np.zeros(self.n, dtype=np.float32)
        out[self.rows] = got[self.slots]
        return out


class KeywordDocs:
    """One BM25 index over a changing multiset of texts: :meth:`rows` removes the texts that went and
    adds the new ones (the statistics are those of a fresh index of the same texts), and builds afresh
    once more than half its rows are removed ones."""

    def __init__(self) -> None:
        self.index: BM25Index | None = None
        self._slots: dict[str, list[int]] = {}  # text -> its live index rows
        self._terms: dict[str, list[str]] = {}  # text -> its terms (live texts only)
        self._dead = 0

    def rows(self, texts: Sequence[str]) -> KeywordRows:
        """The index for matrix rows ``texts`` (``""``: a row without words)."""
        rows = [i for i, t in enumerate(texts) if t]
        need = Counter(texts[i] for i in rows)
        if self.index is None or self._dead > len(self.index) // 2:
            self._build(need)
        else:
            self._update(need)
        assert self.index is not None
        free = {t: iter(s) for t, s in self._slots.items()}
        slots = np.fromiter((next(free[texts[i]]) for i in rows), dtype=np.int64, count=len(rows))
        return KeywordRows(self.index, np.asarray(rows, dtype=np.int64), slots, len(texts))

    def _build(self, need: Counter[str]) -> None:
        self.index = BM25Index([], terms=[])
        self._slots, self._dead = {}, 0
        self._terms = {t: self._terms.get(t) or tokenize(t) for t in need}
        for text, n in need.items():
            self._slots[text] = [self.index.add(self._terms[text]) for _ in range(n)]

    def _update(self, need: Counter[str]) -> None:
        assert self.index is not None
        for text in list(self._slots):
            slots = self._slots[text]
            while len(slots) > need.get(text, 0):
                self.index.remove(slots.pop())
                self._dead += 1
            if not slots:
                del self._slots[text]
                self._terms.pop(text, None)
        for text, n in need.items():
            slots = self._slots.setdefault(text, [])
            if len(slots) < n:
                terms = self._terms.setdefault(text, tokenize(text))
                slots.extend(self.index.add(terms) for _ in range(n - len(slots)))
