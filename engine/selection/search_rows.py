"""The chunk rows one search reads: every item's own chunks (the rows of
:meth:`~contextsieve.selection.chunk_store.ChunkStore.matrix`) and, of a tool's recorded example
requests, only those close to the request.

A year of history is tens of thousands of example requests, and an example speaks for its tool only
for requests like itself (:data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`). So the store keeps
no chunk row of an example: a search finds the close ones among the recorded requests
(:meth:`~contextsieve.selection.recorded_requests.RequestVectors.near`) and reads them as rows of its
own, placed where they sit among every chunk (:class:`ChunkLayout`: each item's own chunks, then its
examples), so the ranking, its ties and a result's chunk index are those of a search over every chunk
with the far examples excluded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.selection.recorded_requests import NearRequests, RecordedRequests

__all__ = ["ChunkLayout", "RowVectors", "SearchRows"]


@dataclass(frozen=True)
class ChunkLayout:
    """Every chunk of a store's items in order (each item's own chunks, then a tool's recorded example
    requests), against the rows of :meth:`~contextsieve.selection.chunk_store.ChunkStore.matrix` (the
    own chunks only).

    Attributes:
        base: the chunk row of each matrix row (``[N]``, ascending).
        owner: the item position of each chunk row (``[F]``).
        first: the first chunk row of each item (``[items]``): a chunk's index in its item is its row
            minus this.
    """

    base: np.ndarray
    owner: np.ndarray
    first: np.ndarray


@dataclass(frozen=True)
class RowVectors:
    """The vectors of a search's rows, in parts: the store's matrix of own chunks (shared with the store,
    never copied) and the close examples' unit vectors, placed among them when read. What a request's
    trace keeps: with a year of history the rows as one matrix are a copy of the own chunk matrix with
    the close examples among it (about 2 MB for a 500-tool agent), which every request kept by a host
    (a gateway keeps each conversation's latest) would otherwise hold.

    Attributes:
        matrix: ``[N, D]`` the own chunks' vectors (:meth:`~contextsieve.selection.chunk_store.ChunkStore.matrix`).
        base: ``[N]`` where each row of ``matrix`` is among the rows (ascending).
        close: ``[K]`` where each close example is among the rows (ascending).
        vectors: the close recorded requests' unit vectors (float32), as the search scored them
            (:attr:`~contextsieve.selection.recorded_requests.NearRequests.vectors`: the search holds
            them anyway, so the rows are made without another copy).
        pick: ``[K]`` each close example's row of ``vectors`` (its request's).
    """

    matrix: np.ndarray
    base: np.ndarray
    close: np.ndarray
    vectors: np.ndarray
    pick: np.ndarray

    def __len__(self) -> int:
        return int(self.base.size + self.close.size)

    def rows(self, at: np.ndarray | None = None) -> np.ndarray:
        """``[len(at), D]`` the vectors of the rows ``at`` (positions among the rows; default every row,
        in order: the store's matrix itself when no example is close), bit for bit those the search read."""
        if not self.close.size:
            return self.matrix if at is None else self.matrix[at]
        if at is None:
            out = np.empty((len(self), self.matrix.shape[1]), dtype=np.float32)
            out[self.base] = self.matrix
            out[self.close] = self.vectors[self.pick]
            return out
        at = np.asarray(at, dtype=np.int64)
        out = np.empty((at.size, self.matrix.shape[1]), dtype=np.float32)
        i = np.minimum(np.searchsorted(self.base, at), max(self.base.size - 1, 0))
        own = (self.base[i] == at) if self.base.size else np.zeros(at.size, dtype=bool)
        out[own] = self.matrix[i[own]]
        out[~own] = self.vectors[self.pick[np.searchsorted(self.close, at[~own])]]
        return out


@dataclass(frozen=True)
class SearchRows:
    """The rows of one search.

    Attributes:
        chunks: ``[P, D]`` their vectors (the store's matrix itself when no example is close).
        owner: ``[P]`` the item position of each.
        rows: ``[P]`` the chunk row (:class:`ChunkLayout`) of each, ascending.
        first: the first chunk row of each item (:attr:`ChunkLayout.first`).
        parts: the same vectors in parts (:class:`RowVectors`): what the search's trace keeps.
    """

    chunks: np.ndarray
    owner: np.ndarray
    rows: np.ndarray
    first: np.ndarray
    parts: RowVectors

    @property
    def base(self) -> np.ndarray:
        """``[N]`` where each row of the store's matrix is among these rows (:attr:`RowVectors.base`)."""
        return self.parts.base

    @classmethod
    def of(
        cls,
        matrix: np.ndarray,
        layout: ChunkLayout,
        recorded: RecordedRequests | None,
        near: NearRequests | None,
        gate: float | None = None,
    ) -> SearchRows:
        """The own chunks of ``matrix`` and the example chunks whose request ``near`` holds at the
        example ``gate`` (default :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`) for one of its
        query vectors."""
        gate = agent_settings.EXAMPLE_SIMILARITY if gate is None else gate
        base = layout.base
        close = np.zeros(0, np.int64)
        if recorded is not None and near is not None and near.rows.size:
            of_request = np.full(len(recorded.requests), -1, dtype=np.int64)  # a request's place in ``near``
            close_enough = near.scores.max(axis=1) >= gate
            of_request[near.rows[close_enough]] = np.flatnonzero(close_enough)
            at = of_request[recorded.example_request]  # one gather per example, not a search
            hit = at >= 0
            close = recorded.example_rows[hit]
        if not close.size:
            where = np.arange(base.size, dtype=np.int64)
            none = np.zeros((0, matrix.shape[1]), dtype=np.float32)
            parts = RowVectors(matrix, where, np.zeros(0, np.int64), none, np.zeros(0, np.int64))
            return cls(matrix, layout.owner[base], base, layout.first, parts)
        rows = np.sort(np.concatenate([base, close]))
        where = np.searchsorted(rows, base)
        parts = RowVectors(matrix, where, np.searchsorted(rows, close), near.vectors, at[hit])  # type: ignore[union-attr]
        return cls(parts.rows(), layout.owner[rows], rows, layout.first, parts)

    def chunk_index(self, row: int) -> int:
        """The index among its item's chunks of the chunk at ``row`` of these rows."""
        r = int(self.rows[row])
        return r - int(self.first[int(self.owner[row])])
