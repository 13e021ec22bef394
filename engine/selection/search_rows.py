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

__all__ = ["ChunkLayout", "SearchRows"]


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
class SearchRows:
    """The rows of one search.

    Attributes:
        chunks: ``[P, D]`` their vectors (the store's matrix itself when no example is close).
        owner: ``[P]`` the item position of each.
        rows: ``[P]`` the chunk row (:class:`ChunkLayout`) of each, ascending.
        base: ``[N]`` where each row of the store's matrix is among them.
        first: the first chunk row of each item (:attr:`ChunkLayout.first`).
    """

    chunks: np.ndarray
    owner: np.ndarray
    rows: np.ndarray
    base: np.ndarray
    first: np.ndarray

    @classmethod
    def of(
        cls,
        matrix: np.ndarray,
        layout: ChunkLayout,
        recorded: RecordedRequests | None,
        near: NearRequests | None,
    ) -> SearchRows:
        """The own chunks of ``matrix`` and the example chunks whose request ``near`` holds at the
        example gate for one of its query vectors."""
        base = layout.base
        close = np.zeros(0, np.int64)
        if recorded is not None and near is not None and near.rows.size:
            of_request = np.full(len(recorded.requests), -1, dtype=np.int64)  # a request's place in ``near``
            close_enough = near.scores.max(axis=1) >= agent_settings.EXAMPLE_SIMILARITY
            of_request[near.rows[close_enough]] = np.flatnonzero(close_enough)
            at = of_request[recorded.example_request]  # one gather per example, not a search
            hit = at >= 0
            close = recorded.example_rows[hit]
        if not close.size:
            return cls(matrix, layout.owner[base], base, np.arange(base.size, dtype=np.int64), layout.first)
        rows = np.sort(np.concatenate([base, close]))
        chunks = np.empty((rows.size, matrix.shape[1]), dtype=np.float32)
        where = np.searchsorted(rows, base)
        chunks[where] = matrix
        chunks[np.searchsorted(rows, close)] = near.vectors[at[hit]]  # type: ignore[union-attr]
        return cls(chunks, layout.owner[rows], rows, where, layout.first)

    def chunk_index(self, row: int) -> int:
        """The index among its item's chunks of the chunk at ``row`` of these rows."""
        r = int(self.rows[row])
        return r - int(self.first[int(self.owner[row])])
