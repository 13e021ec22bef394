"""The one BM25 of contextsieve: an incremental inverted index scored by the kernel
:func:`contextsieve.kernels.scoring.bm25_top_k`, for the agent's chunks and the stash alike.

Where the two sides differ they set it, they do not reimplement it (:class:`Bm25Config`): the agent's
chunks use Lucene's never-negative idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` and count a query
term each time it occurs; the stash uses SQLite FTS5's idf ``log((N - df + 0.5) / (df + 0.5))``
floored at 1e-6 (so its embedded and SQLite-free stores rank as its FTS-era stores did) and counts
each query term once. Both use ``k1`` 1.2 and ``b`` 0.75. The words come from :func:`tokenize` (the
stash stems them first: see :func:`contextsieve.stash.backend.index_terms`).

Slots are added in order and never reused; a removed slot's postings stay behind harmlessly: scores
are masked by the caller's live-and-allowed mask, and document frequencies, counts and lengths are
kept over live slots only.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from contextsieve.errors import InputError
from contextsieve.kernels.scoring import bm25_top_k

__all__ = ["STOPWORDS", "tokenize", "IdfRule", "Bm25Config", "TermIndex", "BM25Index", "LUCENE"]

IdfRule = Literal["log1p", "floored"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: Very common English words left out of the index (they carry no topic).
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its me my of on or our please "
    "should so that the their them there this to us was we what when where which who why will with you your".split()
)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: Scripts written without spaces between words: Han (CJK ideographs and extension A, compatibility
#: ideographs), Hiragana, Katakana, Hangul syllables.
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)")


def _cjk_terms(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run (``查询天气`` -> ``查询 询天 天气``); one character alone
    stays a term. The usual scheme for Chinese and Japanese keyword search without a word segmenter."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script), stopwords and 1-letter words removed,
    a trailing plural ``s`` dropped from words over 3 letters (``files`` and ``file`` match).
    Identifiers are split into words: ``searchIssues`` and ``search_issues`` give ``search``, ``issue``.
    Runs of CJK characters become overlapping character bigrams (see :func:`_cjk_terms`), so a Chinese
    task matches a Chinese description that shares a word with it."""
    text = _CAMEL.sub(" ", text)
    cjk = not text.isascii() and _CJK.search(text) is not None
    if cjk:
        text = _CJK.sub(r" \1 ", text)
    out = []
    for w in _WORD.findall(text.lower()):
        if cjk and _CJK.fullmatch(w):
            out.extend(_cjk_terms(w))
            continue
        if len(w) < 2 or w in STOPWORDS:
            continue
        if len(w) > 3 and w[-1] == "s" and w[-2] != "s":
            w = w[:-1]
        out.append(w)
    return out


@dataclass(frozen=True)
class Bm25Config:
    """How a :class:`TermIndex` scores.

    Attributes:
        k1: term-frequency saturation (default 1.2). b: length normalisation (default 0.75).
        idf: ``"floored"`` (default; FTS5's ``log((N - df + 0.5) / (df + 0.5))``, at least 1e-6) or
            ``"log1p"`` (Lucene's ``log(1 + (N - df + 0.5) / (df + 0.5))``).
        repeated_query_terms: a query term that occurs twice counts twice (Lucene's query-time term
            frequency; default False: each distinct term once, as FTS5).
    """

    k1: float = 1.2
    b: float = 0.75
    idf: IdfRule = "floored"
    repeated_query_terms: bool = False

    def __post_init__(self) -> None:
        if not (self.k1 >= 0 and 0 <= self.b <= 1):
            raise InputError(f"BM25 needs k1 >= 0 and b in [0, 1], got k1={self.k1}, b={self.b}")
        if self.idf not in ("log1p", "floored"):
            raise InputError(f"idf must be 'log1p' or 'floored', got {self.idf!r}")


class TermIndex:
    """Postings (slot, term frequency) per term, scored with BM25 (see :class:`Bm25Config`)."""

    def __init__(self, config: Bm25Config | None = None) -> None:
        self.config = config or Bm25Config()
        self._ids: dict[str, int] = {}
        self._slots: list[array] = []  # term id -> slots holding it ('i')
        self._tf: list[array] = []  # term id -> the term's count in each of those slots ('I')
        self._df: list[int] = []  # term id -> live slots holding it
        self._flat = array("i")  # per slot, its distinct term ids, one after the other
        self._start = array("q", [0])  # slot -> offset into _flat (slot + 1 -> end)
        self._length = array("i")  # slot -> terms in it
        self._live = 0
        self._total = 0

    @classmethod
    def from_texts(
        cls, texts: Sequence[str], tokenizer: Callable[[str], list[str]], config: Bm25Config | None = None
    ) -> TermIndex:
        """An index of ``texts`` (slot ``i`` = ``texts[i]``), each cut into terms by ``tokenizer``."""
        index = cls(config)
        for slot, text in enumerate(texts):
            index.add(slot, tokenizer(text))
        return index

    def __len__(self) -> int:
        """Slots added (removed ones included)."""
        return len(self._length)

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

    def _idf(self, df: int) -> float:
        ratio = (self._live - df + 0.5) / (df + 0.5)
        if self.config.idf == "log1p":
            return math.log1p(ratio)
        x = math.log(ratio)
        return x if x > 0 else 1e-6

    def _postings(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]] | None:
        """The query terms' postings laid out for the kernel, or None when no term is indexed."""
        slot_parts: list[np.ndarray] = []
        tf_parts: list[np.ndarray] = []
        idf: list[float] = []
        for term in terms if self.config.repeated_query_terms else dict.fromkeys(terms):
            t = self._ids.get(term)
            if t is None or self._df[t] <= 0:
                continue
            idf.append(self._idf(self._df[t]))
            slot_parts.append(np.frombuffer(self._slots[t], dtype=np.int32))
            tf_parts.append(np.frombuffer(self._tf[t], dtype=np.uint32))
        if not idf:
            return None
        offsets = np.zeros(len(idf) + 1, np.int64)
        np.cumsum([p.size for p in slot_parts], out=offsets[1:])
        return np.concatenate(slot_parts), np.concatenate(tf_parts), offsets, idf

    def _run(
        self, terms: Sequence[str], k: int, allowed: np.ndarray, also: Sequence[int], config: Bm25Config
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        n = len(self._length)
        if k <= 0 or not n or self._live <= 0:
            return None
        got = self._postings(terms)
        if got is None:
            return None
        slots, tf, offsets, idf = got
        want = np.asarray(also, dtype=np.int64)
        rows, scores, also_scores = bm25_top_k(
            slots,
            tf,
            offsets,
            idf,
            np.frombuffer(self._length, dtype=np.int32),
            self._total / self._live,
            allowed[:n],
            k,
            want,
            k1=config.k1,
            b=config.b,
        )
        return rows, scores, want, also_scores

    def search(
        self, terms: Sequence[str], k: int, allowed: np.ndarray, also: Sequence[int] = (), b: float | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best slots among ``allowed`` (a bool mask over slots, live ones only) holding any
        of ``terms``, by BM25, best first (ties by slot); then the scores of the slots in ``also``
        that hold a term and are not among those ``k`` (in the order given). ``b``: the length
        normalisation of this search (default: the index's :class:`Bm25Config`)."""
        got = self._run(terms, k, allowed, also, self.config if b is None else replace(self.config, b=b))
        if got is None:
            return []
        rows, scores, want, also_scores = got
        out = list(zip(rows.tolist(), scores.tolist()))
        if want.size:
            taken = set(rows.tolist())
            out.extend((r, v) for r, v in zip(want.tolist(), also_scores.tolist()) if v > 0 and r not in taken)
        return out

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """BM25 of every slot for ``terms`` (float32 ``[len(self)]``; 0 for slots holding none)."""
        n = len(self._length)
        out = np.zeros(n, dtype=np.float32)
        got = self._run(terms, n, np.ones(n, dtype=np.bool_), (), self.config)
        if got is not None:
            rows, scores, _, _ = got
            out[rows] = scores
        return out


#: The agent's chunks' settings: Lucene's idf, query-time term frequency.
LUCENE = Bm25Config(idf="log1p", repeated_query_terms=True)


class BM25Index:
    """BM25 over a fixed list of texts (one row per text): a :class:`TermIndex` of their
    :func:`tokenize` words with :data:`LUCENE`'s settings, for the agent's chunks.

    Args:
        texts: the documents (chunks).
        k1: term-frequency saturation (default 1.2). b: length normalisation (default 0.75).
        terms: each text's :func:`tokenize` terms when the caller has them (e.g. kept from the last
            build); ``None``: tokenized here.
    """

    def __init__(
        self, texts: Sequence[str], *, k1: float = 1.2, b: float = 0.75, terms: Sequence[list[str]] | None = None
    ) -> None:
        self.k1, self.b = k1, b
        config = Bm25Config(k1, b, LUCENE.idf, LUCENE.repeated_query_terms)
        if terms is None:
            self._index = TermIndex.from_texts(texts, tokenize, config)
        else:  # the texts' :func:`tokenize` terms, already known (one list per text)
            if len(terms) != len(texts):
                raise InputError(f"{len(terms)} term lists for {len(texts)} texts")
            self._index = TermIndex(config)
            for slot, words in enumerate(terms):
                self._index.add(slot, words)

    def __len__(self) -> int:
        return len(self._index)

    def add(self, terms: Sequence[str]) -> int:
        """Index one more text by its :func:`tokenize` ``terms``; returns its row."""
        row = len(self._index)
        self._index.add(row, terms)
        return row

    def remove(self, row: int) -> None:
        """Take ``row`` out of the statistics (its score is meaningless from then on: never read it)."""
        self._index.remove(row)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for ``query`` (float32; words not in the index are ignored)."""
        return self._index.scores(tokenize(query))
