"""A large agent's chunk index (HNSW) as requests search it: :class:`IndexedChunks`, made by
:meth:`contextsieve.selection.chunk_store.ChunkStore.search_index` for one chunk matrix."""

from __future__ import annotations

import numpy as np

from contextsieve.agent.items import ItemKind
from contextsieve.retrieval.chunks import ChunkIndex

__all__ = ["IndexedChunks", "KINDS"]

#: Item kinds by their code in an index's slot kinds.
KINDS = list(ItemKind)


class IndexedChunks:
    """A large agent's chunk index as requests search it, for one chunk matrix: the nearest chunks
    of a domain as rows of the matrix (the store makes a new one when the matrix or index changes)."""

    def __init__(self, index: ChunkIndex, matrix: object, rowmap: np.ndarray, slot_kind: np.ndarray) -> None:
        self.index = index
        self.matrix = matrix
        self.chunks = index.chunks
        self._rowmap = rowmap  # index chunk row -> matrix row (-1: a removed item's)
        self._slot_kind = slot_kind
        self._masks: dict[tuple[ItemKind, ...] | None, tuple[np.ndarray, int]] = {}

    @property
    def live(self) -> int:
        """Live chunk vectors in the index."""
        return self.index.live_chunks

    def nearest(self, queries: np.ndarray, k: int, kinds: tuple[ItemKind, ...] | None) -> np.ndarray:
        """Matrix rows of the ``k`` nearest chunks (max-pooled over the query rows) among items of
        ``kinds`` (``None``: all), best first."""
        mask = self._masks.get(kinds)
        if mask is None:
            slot_ok = None if kinds is None else np.isin(self._slot_kind, [KINDS.index(x) for x in kinds])
            mask = self._masks[kinds] = self.index.chunk_mask(slot_ok)
        rows = self._rowmap[self.index.search_chunks(queries, k, mask=mask).idx]
        return rows[rows >= 0]
