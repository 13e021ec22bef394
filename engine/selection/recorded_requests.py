"""The requests an agent's history recorded (its tools' examples and misses), each request once, and how
close a new request is to each.

A year of history is tens of thousands of recorded requests, and a search needs only those close to
the request it serves (an example counts from :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`
cosine, a miss from :data:`~contextsieve.agent.settings.MISS_SIMILARITY`). So every request is scanned
as int8 (:class:`~contextsieve.kernels.scoring.Int8Corpus`: a quarter of float32's memory and
bandwidth), and those the scan cannot rule out (its score plus its error bound reaches the floor) are
scored exactly, from the vectors the usage log keeps (float16 as the file holds them, made unit float32
vectors as the example chunks are: :func:`~contextsieve.agent.usage.unit_vector`). Requests below the
floor score ``-inf``: the same ranking as scoring every request in float32, at a fraction of the cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.kernels.scoring import Int8Corpus, query_scores

__all__ = ["RecordedRequests", "RequestVectors", "NearRequests", "near_floor", "SCAN_BLOCK"]
#: Requests made int8 per block when the scan is built (bounds the float32 copy it needs to this many
#: rows). Small, so that the blocks freed meanwhile (under 1 MB) do not raise glibc's mmap threshold to
#: their size: at 4,096 rows (6 MB) the heap kept about 14 MB more of later requests' temporaries
#: (``python -m benchmarks.speed.history_memory``: 67 MB against 53 MB at the caps).
SCAN_BLOCK = 512
#: Added to the int8 error bound: float32 rounding of the scan's sums (fastmath) and of the unit vectors.
_ROUNDING = 1e-4


def near_floor() -> float:
    """The lowest cosine at which a recorded request counts for a search: the lower of an example's gate
    (:data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`) and a miss's
    (:data:`~contextsieve.agent.settings.MISS_SIMILARITY`)."""
    return min(agent_settings.EXAMPLE_SIMILARITY, agent_settings.MISS_SIMILARITY)


@dataclass(frozen=True)
class RequestVectors:
    """Recorded requests' vectors, each once, and their int8 scan.

    Attributes:
        vectors: each request's vector as kept (float16 from a file, float32 recorded in memory or
            embedded), shared with the log's :class:`~contextsieve.agent.usage.Example` records: no copy.
        scan: the unit vectors as int8 rows with one scale each.
        slack: per request, how far its int8 score may be from the exact one for a unit query
            (``scale * sqrt(D) / 2``, plus rounding).
        norms: per request, the float32 norm :func:`~contextsieve.agent.usage.unit_vector` divides its
            vector by (so the near ones are made unit vectors at once, bit for bit as one by one).
    """

    vectors: tuple[np.ndarray, ...]
    scan: Int8Corpus
    slack: np.ndarray
    norms: np.ndarray

    @classmethod
    def of(cls, vectors: Sequence[np.ndarray]) -> RequestVectors:
        """The scan of ``vectors`` (each non-zero and finite, one length), built :data:`SCAN_BLOCK` rows at a time."""
        kept = tuple(vectors)
        none = np.zeros(0, np.float32)
        if not kept:
            return cls(kept, Int8Corpus(np.zeros((0, 1), np.int8), none), none, none)
        parts: list[Int8Corpus] = []
        for lo in range(0, len(kept), SCAN_BLOCK):
            block = np.stack([np.asarray(v, dtype=np.float32) for v in kept[lo : lo + SCAN_BLOCK]])
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            parts.append(Int8Corpus.from_vectors(block))
        scan = Int8Corpus(
            np.ascontiguousarray(np.concatenate([p.q8 for p in parts])), np.concatenate([p.scale for p in parts])
        )
        slack = (scan.scale * np.float32(np.sqrt(scan.q8.shape[1]) / 2) + np.float32(_ROUNDING)).astype(np.float32)
        norms = np.array([np.linalg.norm(np.asarray(v).astype(np.float32)) for v in kept], dtype=np.float32)
        return cls(kept, scan, slack, norms)

    def __len__(self) -> int:
        return len(self.vectors)

    def near(self, queries: np.ndarray, floor: float | None = None) -> NearRequests:
        """The requests whose best cosine with one of the ``queries`` (``[M, D]`` float32) is at least
        ``floor`` (default :func:`near_floor`), each scored exactly against every query. Exact for every
        request the int8 scan cannot rule out."""
        floor = near_floor() if floor is None else floor
        dim = self.scan.q8.shape[1]
        if not len(self.vectors) or not queries.shape[0]:
            return NearRequests.none(queries.shape[0], dim)
        approx, _ = self.scan.score_pool(queries)
        reach = float(np.linalg.norm(queries, axis=1).max())  # the bound grows with the query's length
        maybe = np.flatnonzero(approx + reach * self.slack >= floor)
        if not maybe.size:
            return NearRequests.none(queries.shape[0], dim)
        rows = np.empty((maybe.size, dim), np.float32)
        for i, j in enumerate(maybe.tolist()):  # each converted into its row: a third of np.stack's time
            rows[i] = self.vectors[j]
        rows /= self.norms[maybe, None]
        scores = query_scores(rows, queries)
        keep = scores.max(axis=1) >= floor
        return NearRequests(maybe[keep], np.ascontiguousarray(scores[keep]), rows[keep])


@dataclass(frozen=True)
class NearRequests:
    """The recorded requests close to a request's query vectors (:meth:`RequestVectors.near`).

    Attributes:
        rows: the requests (ascending).
        scores: ``[K, M]`` each one's exact cosine with each query vector.
        vectors: ``[K, D]`` their unit vectors (float32).
    """

    rows: np.ndarray
    scores: np.ndarray
    vectors: np.ndarray

    @classmethod
    def none(cls, queries: int, dim: int) -> NearRequests:
        return cls(np.zeros(0, np.int64), np.zeros((0, queries), np.float32), np.zeros((0, dim), np.float32))

    def best(self, size: int, n_queries: int, floor: float | None = None) -> np.ndarray:
        """``[size]`` per request its best cosine with the first ``n_queries`` query vectors when at
        least ``floor`` (default :func:`near_floor`), else ``-inf``."""
        floor = near_floor() if floor is None else floor
        out = np.full(size, -np.inf, dtype=np.float32)
        if self.rows.size and n_queries:
            best = self.scores[:, :n_queries].max(axis=1)
            out[self.rows] = np.where(best >= floor, best, -np.inf)
        return out


@dataclass(frozen=True)
class RecordedRequests:
    """An agent's recorded requests as a search reads them.

    Attributes:
        requests: every request once (a request recorded for several tools, or as an example of one
            tool and a miss of another, is one row).
        example_rows: the chunk rows (among every chunk of the items:
            :class:`~contextsieve.selection.search_rows.ChunkLayout`) that are example chunks (ascending).
        example_request: per example row, its request.
        miss_request: per recorded miss, its request.
        miss_item: per recorded miss, its tool's position in the item order.
    """

    requests: RequestVectors
    example_rows: np.ndarray
    example_request: np.ndarray
    miss_request: np.ndarray
    miss_item: np.ndarray

    def example_scores(self, request_scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The score of the request of each example row of ``rows`` (rows of :attr:`example_rows`),
        from ``request_scores`` (:meth:`NearRequests.best`)."""
        return request_scores[self.example_request[np.searchsorted(self.example_rows, rows)]]
