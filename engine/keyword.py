"""Keyword search: a BM25 index over chunks' embedding texts.

The scorer is :func:`contextsieve.kernels.scoring.bm25_scores`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from contextsieve.kernels.scoring import bm25_scores

__all__ = ["tokenize", "BM25Index", "STOPWORDS"]

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


class BM25Index:
    """BM25 over a fixed list of texts (one row per text).

    Args:
        texts: the documents (chunks).
        k1: term-frequency saturation (default 1.2). b: length normalisation (default 0.75).
    """

    def __init__(self, texts: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.vocab: dict[str, int] = {}
        postings: dict[int, dict[int, int]] = {}
        lengths = []
        vocab = self.vocab
        for row, text in enumerate(texts):
            toks = tokenize(text)
            lengths.append(len(toks))
            for t, n in Counter(toks).items():
                tid = vocab.setdefault(t, len(vocab))
                postings.setdefault(tid, {})[row] = n
        self.doc_len = np.asarray(lengths, dtype=np.float32).reshape(len(texts))
        self.indptr = np.zeros(len(self.vocab) + 1, dtype=np.int64)
        rows: list[int] = []
        tfs: list[int] = []
        for tid in range(len(self.vocab)):
            p = postings.get(tid, {})
            rows.extend(p.keys())
            tfs.extend(p.values())
            self.indptr[tid + 1] = self.indptr[tid] + len(p)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.tf = np.asarray(tfs, dtype=np.float32)

    def __len__(self) -> int:
        return int(self.doc_len.shape[0])

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for ``query`` (words not in the index are ignored)."""
        terms = np.array([self.vocab[t] for t in tokenize(query) if t in self.vocab], dtype=np.int64)
        return bm25_scores(terms, self.indptr, self.rows, self.tf, self.doc_len, k1=self.k1, b=self.b)
