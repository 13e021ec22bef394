"""A request's message as one value: split once, embedded once, read by everything downstream.

A :class:`Query` carries the message, the texts it is searched with (its sentences, then a task's
steps), how many of them are sentences, the note when sentences were left out, and, once embedded,
one vector per text with the id of the model that made them. The search over an agent's items reads
it, the stash retrieves with its sentences and their vectors (no second split, no second model call
when the stash's model family is the same), a task's carry ranks its first message with one, and the
request context records its texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contextsieve.errors import InputError
from contextsieve.retrieval.text import query_chunks, split_query

__all__ = ["Query", "capped"]


@dataclass(frozen=True)
class Query:
    """A message as a request searches it.

    Attributes:
        text: the message as searched (a session's ``@rule:`` / ``@ref:`` mentions removed).
        chunks: the texts searched: the message's sentences (:func:`~contextsieve.retrieval.text.split_query`),
            then, for a search by steps, its steps.
        n_sentences: how many of ``chunks`` are sentences (the rest are steps).
        cap_note: why some sentences were left out (see :meth:`split`); ``""`` when none were.
        vectors: one unit row per chunk (float32 ``[len(chunks), dim]``); ``None`` until embedded (and
            for a request that searches nothing).
        model_id: the model that made ``vectors`` (``None``: not embedded, or an embedder without an id).
        complete: whether the sentences are all of the text's, as
            :func:`~contextsieve.retrieval.text.query_chunks` gives them (no cap cut one, no caller
            chose them): only then may another search (the stash's) take them and their vectors as the
            text's own.
    """

    text: str
    chunks: tuple[str, ...]
    n_sentences: int
    cap_note: str = ""
    vectors: np.ndarray | None = field(default=None, compare=False, repr=False)
    model_id: str | None = None
    complete: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.n_sentences <= len(self.chunks):
            raise InputError(f"n_sentences must be in 0..{len(self.chunks)}, got {self.n_sentences}")
        v = self.vectors
        if v is not None and (v.ndim != 2 or v.shape[0] != len(self.chunks)):
            raise InputError(f"a query's vectors must be [{len(self.chunks)}, dim], got {v.shape}")

    @classmethod
    def split(cls, text: str, *, steps: bool = False, cap: int | None = None) -> Query:
        """The query of ``text``: its sentences and, with ``steps``, its steps
        (:func:`~contextsieve.retrieval.text.split_query`). With ``cap``, at most ``cap`` sentences
        (:func:`capped`: the first and the last half of that many, with a note; then no steps) and at
        most ``cap`` steps."""
        chunks, n = split_query(text, steps=steps)
        if cap is None:
            return cls(text, tuple(chunks), n)
        sentences, note = capped(chunks[:n], cap)
        if note:
            return cls(text, tuple(sentences), len(sentences), note, complete=False)
        return cls(text, tuple(sentences + chunks[n:][:cap]), n)

    @classmethod
    def of_texts(cls, text: str, chunks: Sequence[str]) -> Query:
        """A query of ``chunks`` given as they are, all of them sentences (a tool search, a tool
        result's pieces); :attr:`complete` only when they are ``query_chunks(text)``."""
        chunks = tuple(chunks)
        return cls(text, chunks, len(chunks), complete=list(chunks) == query_chunks(text))

    @property
    def sentences(self) -> tuple[str, ...]:
        """The sentences searched (the first :attr:`n_sentences` chunks)."""
        return self.chunks[: self.n_sentences]

    def sentence_vectors(self) -> np.ndarray | None:
        """The vectors of :attr:`sentences` (``None`` before the query is embedded)."""
        return None if self.vectors is None else self.vectors[: self.n_sentences]

    def embedded(self, vectors: np.ndarray, model_id: str | None) -> Query:
        """This query with ``vectors`` (one row per chunk) made by the model ``model_id``."""
        return dataclasses.replace(self, vectors=vectors, model_id=model_id)


def capped(chunks: list[str], cap: int) -> tuple[list[str], str]:
    """At most ``cap`` query sentences: the first half and the last half of that many; and a note when cut."""
    if len(chunks) <= cap:
        return chunks, ""
    head = (cap + 1) // 2
    kept = chunks[:head] + chunks[len(chunks) - (cap - head) :]
    note = (
        f"the message has {len(chunks)} sentences; the first {head} and the last {cap - head} were searched "
        f"(max_query_chunks {cap})"
    )
    return kept, note
