"""The one way contextsieve makes and grows an HNSW graph (hnswlib, the ``hnsw`` extra).

The chunk index (:class:`contextsieve.retrieval.chunks.ChunkIndex`, which the agent's chunks and the
stash both use) builds its graph here, with inner product over unit vectors, a fixed seed and one
growth rule; :mod:`contextsieve.retrieval.graphfile` saves and loads it.
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np

from contextsieve.errors import MissingExtraError

__all__ = ["HnswIndex", "HnswModule", "SEED", "import_hnswlib", "new_graph", "add_to_graph"]

#: Seed of every graph (builds are repeatable).
SEED = 100


class HnswIndex(Protocol):
    """What contextsieve uses of an ``hnswlib.Index``."""

    ef: int
    element_count: int

    def init_index(
        self,
        max_elements: int,
        ef_construction: int = ...,
        M: int = ...,
        random_seed: int = ...,
        allow_replace_deleted: bool = ...,
    ) -> None: ...
    def add_items(self, data: np.ndarray, ids: np.ndarray) -> None: ...
    def mark_deleted(self, label: int) -> None: ...
    def knn_query(self, data: np.ndarray, k: int = ..., num_threads: int = ...) -> tuple[np.ndarray, np.ndarray]: ...
    def set_ef(self, ef: int) -> None: ...
    def get_current_count(self) -> int: ...
    def get_max_elements(self) -> int: ...
    def resize_index(self, new_size: int) -> None: ...
    def save_index(self, path: str) -> None: ...
    def load_index(self, path: str, max_elements: int = ...) -> None: ...
    def get_ids_list(self) -> list[int]: ...


class HnswModule(Protocol):
    """What contextsieve uses of the ``hnswlib`` module."""

    def Index(self, space: str, dim: int) -> HnswIndex: ...  # noqa: N802 - hnswlib's name


def import_hnswlib() -> HnswModule:
    """The ``hnswlib`` module, or :class:`MissingExtraError` naming the extra that installs it."""
    try:
        import hnswlib
    except ImportError as e:
        raise MissingExtraError("HNSW search needs hnswlib: pip install 'contextsieve[hnsw]'") from e
    return cast(HnswModule, hnswlib)


def new_graph(dim: int, capacity: int, *, ef_construction: int, m: int) -> HnswIndex:
    """An empty inner-product graph for ``dim``-wide unit vectors with room for ``max(capacity, 1024)``
    elements (it grows as :func:`add_to_graph` needs), seeded with :data:`SEED`."""
    index = import_hnswlib().Index(space="ip", dim=dim)
    index.init_index(max_elements=max(int(capacity), 1024), ef_construction=ef_construction, M=m, random_seed=SEED)
    return index


def add_to_graph(index: HnswIndex, vectors: np.ndarray, labels: np.ndarray) -> None:
    """Add ``vectors`` under ``labels``, first doubling the graph's capacity past what it needs when full."""
    if index.get_current_count() + len(labels) > index.get_max_elements():
        index.resize_index(2 * (index.get_current_count() + len(labels)))
    index.add_items(vectors, labels)
