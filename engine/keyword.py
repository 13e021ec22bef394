"""Keyword search words and the agent's BM25 index: re-exported from the one BM25 of the retrieval core
(:mod:`contextsieve.retrieval.bm25`), where they live."""

from contextsieve.retrieval.bm25 import STOPWORDS, BM25Index, tokenize

__all__ = ["tokenize", "BM25Index", "STOPWORDS"]
