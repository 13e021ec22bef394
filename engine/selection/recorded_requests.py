"""The requests an agent's history recorded (its tools' examples and misses), each request once, and how
close a new request is to each.

A year of history is tens of thousands of recorded requests, and a search needs only those close to
the request it serves (an example counts from :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`
cosine, a miss from :data:`~contextsieve.agent.settings.MISS_SIMILARITY`). So every request is scanned
as int8 (:class:`~contextsieve.kernels.scoring.Int8Corpus`: a quarter of float32's memory and
bandwidth), and those the scan cannot rule out (its score plus its error bound reaches the floor) are
scored exactly, from the vectors the usage log keeps (float16 as the file holds them, made unit float32
vectors as the example chunks are: :func:`~contextsieve.agent.stored_vectors.unit_vector`). Requests below the
floor score ``-inf``: the same ranking as scoring every request in float32, at a fraction of the cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.agent.example_records import Example
from contextsieve.agent.items import ItemKey
from contextsieve.kernels.scoring import Int8Corpus, half_rows, query_scores
from contextsieve.selection.chunk_plans import example_chunk_text
from contextsieve.selection.chunking import Chunk

__all__ = [
    "RecordedRequests",
    "RequestVectors",
    "KeptVectors",
    "MatrixRows",
    "NearRequests",
    "near_floor",
    "SCAN_BLOCK",
    "WEAK_REQUESTS",
]
#: Requests made int8 per block when the scan is built (bounds the float32 copy it needs to this many
#: rows). Small, so that the blocks freed meanwhile (under 1 MB) do not raise glibc's mmap threshold to
#: their size: at 4,096 rows (6 MB) the heap kept about 14 MB more of later requests' temporaries
#: (``python -m benchmarks.speed.history_memory``: 67 MB against 53 MB at the caps).
SCAN_BLOCK = 512
#: A wide offer's gate is lower than a narrow one's (:data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`
#: against :data:`~contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY`); of the recorded requests
#: between the two, a search reads at most this many, the closest (:meth:`NearRequests.capped`): a year
#: of history holds thousands of requests near a message in a busy domain, each a row of the search and
#: of the request a host keeps, and the few closest carry what the band adds.
WEAK_REQUESTS = 50
#: Added to the int8 error bound: float32 rounding of the scan's sums (fastmath) and of the unit vectors.
_ROUNDING = 1e-4


def near_floor(gate: float | None = None) -> float:
    """The lowest cosine at which a recorded request counts for a search: the lower of an example's gate
    (``gate``, default :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`) and a miss's
    (:data:`~contextsieve.agent.settings.MISS_SIMILARITY`)."""
    return min(agent_settings.EXAMPLE_SIMILARITY if gate is None else gate, agent_settings.MISS_SIMILARITY)


@dataclass(frozen=True)
class MatrixRows:
    """Which vectors of a list are rows of a float16 matrix they share (views of one C-contiguous 2-D
    array: a log's read keeps its vectors so, :class:`~contextsieve.agent.usage.UsageLog`), so that a set
    of them is gathered with one index per matrix (:func:`~contextsieve.kernels.scoring.half_rows`)
    instead of one copy per vector.

    Attributes:
        matrices: the matrices.
        matrix: per vector, its matrix in :attr:`matrices` (-1: a vector of no matrix, copied alone).
        row: per vector, its row in its matrix.
    """

    matrices: tuple[np.ndarray, ...]
    matrix: np.ndarray
    row: np.ndarray

    @classmethod
    def of(cls, vectors: Sequence[np.ndarray]) -> MatrixRows:
        """Where each of ``vectors`` sits (a vector is a row of the array its memory belongs to when it
        is one whole row of it)."""
        found: dict[int, tuple[int, int]] = {}  # id of a matrix -> its number, the address of its data
        matrices: list[np.ndarray] = []
        matrix = np.full(len(vectors), -1, dtype=np.int64)
        row = np.zeros(len(vectors), dtype=np.int64)
        for j, v in enumerate(vectors):
            m = v.base
            if not (
                isinstance(m, np.ndarray)
                and m.ndim == 2
                and v.ndim == 1
                and m.dtype == v.dtype == np.float16
                and m.flags.c_contiguous
                and m.shape[1] == v.shape[0]
                and v.strides[0] == m.itemsize
            ):
                continue
            if id(m) not in found:
                found[id(m)] = (len(matrices), m.__array_interface__["data"][0])
                matrices.append(m)
            k, start = found[id(m)]
            at, off = divmod(v.__array_interface__["data"][0] - start, m.strides[0])
            if off == 0 and 0 <= at < m.shape[0]:
                matrix[j], row[j] = k, at
        return cls(tuple(matrices), matrix, row)

    def gather(self, vectors: Sequence[np.ndarray], which: np.ndarray, dim: int) -> np.ndarray:
        """``[len(which), dim]`` float32: the vectors ``which`` (positions in ``vectors``), in that order;
        bit for bit the vectors converted to float32 one by one."""
        of = self.matrix[which]
        if of.size and of[0] >= 0 and (of == of[0]).all():  # the common case: rows of one matrix
            return half_rows(self.matrices[int(of[0])], self.row[which])
        out = np.empty((which.size, dim), np.float32)
        for k in np.unique(of).tolist():
            at = np.flatnonzero(of == k)
            if k < 0:
                for i in at.tolist():
                    out[i] = vectors[int(which[i])]
            else:
                out[at] = half_rows(self.matrices[k], self.row[which[at]])
        return out


class KeptVectors(Sequence[np.ndarray]):
    """Recorded requests' vectors as :class:`RequestVectors` keeps them: each one that is a row of a
    matrix as its place there (:class:`MatrixRows`; a view is made when it is read: a year of history
    is tens of thousands of them, about 100 bytes a view), the others as they are.

    Args:
        rows: where ``vectors`` sit.
        vectors: the vectors.
    """

    __slots__ = ("rows", "loose")

    def __init__(self, rows: MatrixRows, vectors: Sequence[np.ndarray]) -> None:
        self.rows = rows
        self.loose = {j: vectors[j] for j in np.flatnonzero(rows.matrix < 0).tolist()}

    def __len__(self) -> int:
        return int(self.rows.matrix.size)

    @overload
    def __getitem__(self, j: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, j: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, j: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(j, slice):
            return tuple(self[i] for i in range(*j.indices(len(self))))
        m = int(self.rows.matrix[j])  # an IndexError past the end
        if m < 0:
            return self.loose[j % len(self)]
        return self.rows.matrices[m][self.rows.row[j]]


@dataclass(frozen=True)
class RequestVectors:
    """Recorded requests' vectors, each once, and their int8 scan.

    Attributes:
        vectors: each request's vector as kept (float16 from a file, float32 recorded in memory or
            embedded): :class:`KeptVectors`, the rows of the log's matrix where they are (no copy).
        scan: the unit vectors as int8 rows with one scale each.
        slack: per request, how far its int8 score may be from the exact one for a unit query
            (``scale * sqrt(D) / 2``, plus rounding).
        norms: per request, the float32 norm :func:`~contextsieve.agent.stored_vectors.unit_vector` divides its
            vector by (so the near ones are made unit vectors at once, bit for bit as one by one).
        rows: where the vectors that are rows of one matrix sit (a log's read keeps them so), for
            :meth:`near` to gather the close ones at once: :class:`MatrixRows`.
    """

    vectors: Sequence[np.ndarray]
    scan: Int8Corpus
    slack: np.ndarray
    norms: np.ndarray
    rows: MatrixRows

    @classmethod
    def of(cls, vectors: Sequence[np.ndarray]) -> RequestVectors:
        """The scan of ``vectors`` (each non-zero and finite, one length), built :data:`SCAN_BLOCK` rows at a time."""
        kept = tuple(vectors)
        none = np.zeros(0, np.float32)
        if not kept:
            rows = MatrixRows.of(kept)
            return cls(KeptVectors(rows, kept), Int8Corpus(np.zeros((0, 1), np.int8), none), none, none, rows)
        # the scan's arrays made once and filled block by block: parts concatenated would leave a hole
        # of the scan's size in the heap, which glibc keeps resident (a year of history: 7.6 MB)
        scan = Int8Corpus(np.empty((len(kept), kept[0].shape[0]), np.int8), np.empty(len(kept), np.float32))
        for lo in range(0, len(kept), SCAN_BLOCK):
            block = np.stack([np.asarray(v, dtype=np.float32) for v in kept[lo : lo + SCAN_BLOCK]])
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            part = Int8Corpus.from_vectors(block)
            scan.q8[lo : lo + len(block)] = part.q8
            scan.scale[lo : lo + len(block)] = part.scale
        slack = (scan.scale * np.float32(np.sqrt(scan.q8.shape[1]) / 2) + np.float32(_ROUNDING)).astype(np.float32)
        norms = np.array([np.linalg.norm(np.asarray(v).astype(np.float32)) for v in kept], dtype=np.float32)
        rows = MatrixRows.of(kept)
        return cls(KeptVectors(rows, kept), scan, slack, norms, rows)

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
        rows = self.rows.gather(self.vectors, maybe, dim)
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

    def capped(self, strong: float, keep: int) -> NearRequests:
        """These requests with those whose best cosine is under ``strong`` cut to the ``keep`` closest
        (ties: the earlier request), each kept one as it was: ``self`` when nothing is cut."""
        best = self.scores.max(axis=1) if self.rows.size else np.zeros(0, np.float32)
        weak = np.flatnonzero(best < strong)
        if weak.size <= keep:
            return self
        order = np.lexsort((self.rows[weak], -best[weak]))  # closest first, then the earlier request
        kept = np.ones(self.rows.size, dtype=bool)
        kept[weak[order[keep:]]] = False
        return NearRequests(self.rows[kept], np.ascontiguousarray(self.scores[kept]), self.vectors[kept])

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
        miss_start: per request, where its misses start in :attr:`miss_order` (``[R + 1]``; made from
            :attr:`miss_request`).
        miss_order: the misses, by request (stable; made from :attr:`miss_request`).
    """

    requests: RequestVectors
    example_rows: np.ndarray
    example_request: np.ndarray
    miss_request: np.ndarray
    miss_item: np.ndarray
    miss_start: np.ndarray = field(init=False, repr=False)
    miss_order: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.requests)
        start = np.zeros(n + 1, np.int64)
        if self.miss_request.size:
            np.cumsum(np.bincount(self.miss_request, minlength=n), out=start[1:])
        object.__setattr__(self, "miss_start", start)
        object.__setattr__(self, "miss_order", np.argsort(self.miss_request, kind="stable").astype(np.int64))

    @classmethod
    def gather(
        cls,
        records: Iterable[tuple[int, Chunk, Example | None]],
        examples: np.ndarray,
        misses: Mapping[ItemKey, Sequence[Example]],
        order: Sequence[ItemKey],
        embed: Callable[[list[str]], np.ndarray],
    ) -> RecordedRequests:
        """The requests of the example chunks ``records`` (each chunk's row, the chunk and its record, in
        row order; ``examples``: their rows) and of the ``misses`` of the tools in ``order``, each request
        once (by its chunk text); a request kept without a vector of this model embedded with ``embed``."""
        first: dict[str, int] = {}  # a request's chunk text -> its row
        vectors: list[np.ndarray] = []
        unkept: dict[int, str] = {}  # requests kept without a vector of this model -> the text to embed
        example_request = np.empty(examples.size, np.int64)  # filled in row order, as ``examples`` runs
        for i, (_, chunk, e) in enumerate(records):
            text = example_chunk_text(e) if e is not None else None
            j = first.get(text) if text is not None else None
            if j is None:  # a new request (an example chunk without a record counts alone)
                j = len(vectors)
                vectors.append(e.vector if e is not None and e.vector is not None else np.zeros(0, np.float32))
                if e is None or e.vector is None:
                    unkept[j] = chunk.embed_text  # what the example chunk embeds
                if text is not None:
                    first[text] = j
            example_request[i] = j
        pos = {k: i for i, k in enumerate(order)}
        miss_request: list[int] = []
        miss_item: list[int] = []
        for k, kept in misses.items():
            if k in pos:
                for e in kept:
                    text = example_chunk_text(e)
                    if text not in first:
                        first[text] = len(vectors)
                        vectors.append(e.vector if e.vector is not None else np.zeros(0, np.float32))
                        if e.vector is None:
                            unkept[first[text]] = text
                    miss_request.append(first[text])
                    miss_item.append(pos[k])
        if unkept:
            for j, v in zip(unkept, embed(list(unkept.values()))):
                vectors[j] = v
        return cls(
            RequestVectors.of(vectors),
            examples,
            example_request,
            np.array(miss_request, np.int64),
            np.array(miss_item, np.int64),
        )

    def misses_of(self, requests: np.ndarray) -> np.ndarray:
        """The recorded misses (positions in :attr:`miss_request`) of ``requests`` (positions among the
        requests, each in ``0 .. R - 1``), request by request."""
        lo, hi = self.miss_start[requests], self.miss_start[requests + 1]
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.zeros(0, np.int64)
        first = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return self.miss_order[first + np.arange(total)]

    def example_scores(self, request_scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The score of the request of each example row of ``rows`` (rows of :attr:`example_rows`),
        from ``request_scores`` (:meth:`NearRequests.best`)."""
        return request_scores[self.example_request[np.searchsorted(self.example_rows, rows)]]
