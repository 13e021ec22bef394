"""The embedded backend's in-memory search table: every segment's chunk vectors as an int8 corpus,
the segment fields filters need as arrays, and an HNSW graph once the table is large.

Filters are applied before ranking: exact search scores only the rows that pass (gathered when few
pass, masked otherwise); HNSW search asks the graph for more neighbours than needed in proportion to
the share of rows that pass, keeps those that pass, and widens until it has ``k`` segments (or
scores the passing rows exactly when they are too few for a graph search to pay).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError, MissingExtraError
from contextsieve.kernels.scoring import Int8Corpus, group_max, top_k
from contextsieve.retrieval.bm25 import TermIndex
from contextsieve.retrieval.hnsw import HnswIndex, add_to_graph, import_hnswlib, new_graph
from contextsieve.stash.backend import Filters
from contextsieve.stash.segment import SegmentType

__all__ = ["VectorConfig", "VectorTable", "TableRow"]

_TYPES = {t: i for i, t in enumerate(SegmentType)}
#: Bits of a graph label that hold the chunk's index within its segment (the rest: the store row).
LABEL_SHIFT = 20
_CHUNK_MASK = (1 << LABEL_SHIFT) - 1


@dataclass(frozen=True)
class VectorConfig:
    """Search settings of the embedded store.

    Attributes:
        backend: ``"auto"`` (exact, HNSW from ``hnsw_min_rows`` live chunks when hnswlib is installed),
            ``"exact"`` or ``"hnsw"`` (from the first row; needs the ``hnsw`` extra).
        hnsw_min_rows: live chunk vectors from which ``auto`` builds HNSW (default 50,000: from about
            there a graph search answers faster than the exact int8 scan, 4.8 against 8.2 ms per
            retrieve at 100,000 in ``benchmarks.stash_speed``; the graph costs about 1.7 KB per chunk
            vector of memory and one build, about 20 s at 50,000, saved beside the store after).
        hnsw_m: graph degree (default 16). ef_construction: build beam (default 200).
        ef_search: search beam (default 64, as the agent index's; raised to the number of neighbours
            asked for). On 100,000 real MiniLM vectors (``benchmarks.hnsw_table``) the dense search's
            recall@10 against the exact scan was 0.987 at 64 (0.44 ms) and 0.994 at 128 (0.68 ms).
        exact_below: share of rows passing the filters under which search scores the passing rows
            exactly instead of using the graph (default 0.02).
    """

    backend: str = "auto"
    hnsw_min_rows: int = 50_000
    hnsw_m: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    exact_below: float = 0.02

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "exact", "hnsw"):
            raise InputError(f"backend must be 'auto', 'exact' or 'hnsw', got {self.backend!r}")
        if self.hnsw_min_rows < 1 or self.hnsw_m < 2 or self.ef_construction < 1 or self.ef_search < 1:
            raise InputError("hnsw_min_rows, hnsw_m, ef_construction and ef_search must be positive")
        if not 0.0 <= self.exact_below <= 1.0:
            raise InputError(f"exact_below must be in [0, 1], got {self.exact_below}")


def _among(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``np.isin`` with a fast path for one code (the usual filter: one session, one topic)."""
    return values == codes[0] if codes.size == 1 else np.isin(values, codes)


class _Codes:
    """Strings to small ints (``-1``: none)."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}

    def of(self, value: str | None) -> int:
        if value is None:
            return -1
        return self.code.setdefault(value, len(self.code))

    def find(self, values: tuple[str, ...]) -> np.ndarray:
        return np.array([self.code[v] for v in values if v in self.code], dtype=np.int32)


@dataclass(frozen=True)
class TableRow:
    """One segment for :meth:`VectorTable.add`: its store row, id, session, type, topic, source, creation
    and expiry times (epoch seconds), protection, chunk vectors ``[chunks, dim]``, keyword terms, stash
    time (default: the creation time), text sha256 and the stored vectors' digest (what a saved HNSW
    graph is checked against when the store is opened again)."""

    row: int
    segment_id: str
    session: str
    kind: SegmentType
    topic: str | None
    source: str
    created: float
    expires: float | None
    protected: bool
    vectors: np.ndarray
    terms: Sequence[str] = ()
    stashed: float | None = None
    sha256: str = ""
    digest: bytes = b""


class VectorTable:
    """Segments (slots) with their chunk rows. Not thread-safe: the backend holds its lock around it."""

    def __init__(self, dim: int, config: VectorConfig | None = None) -> None:
        self.dim = dim
        self.config = config or VectorConfig()
        if self.config.backend == "hnsw":
            import_hnswlib()
        self.ids: list[str] = []
        self.slot_of: dict[int, int] = {}  # store row -> slot
        self._sessions, self._topics, self._sources = _Codes(), _Codes(), _Codes()
        n = 0
        self._session = np.zeros(n, np.int32)
        self._topic = np.zeros(n, np.int32)
        self._source = np.zeros(n, np.int32)
        self._type = np.zeros(n, np.int8)
        self._created = np.zeros(n, np.float64)
        self._stashed = np.zeros(n, np.float64)
        self._row = np.zeros(n, np.int64)  # slot -> store row
        self._firsts = np.zeros(n, np.int64)  # slot -> first chunk row
        self._counts = np.zeros(n, np.int64)  # slot -> chunk rows
        self._sha: list[str] = []  # slot -> sha256 of the text
        self._digest: list[bytes] = []  # slot -> digest of the stored vectors
        self.slot_of_id: dict[str, int] = {}  # live segment id -> slot
        self._mutations = 0  # changes since the table was made (the filter mask memo's key)
        self._allowed_memo: tuple[Filters, int, np.ndarray] | None = None
        self._chunk_memo: tuple[Filters, int, np.ndarray, int] | None = None
        self._expiring_memo: tuple[int, np.ndarray] | None = None
        self._expires = np.zeros(n, np.float64)
        self._protected = np.zeros(n, np.bool_)
        self._gone = np.zeros(n, np.bool_)
        self._slots = 0
        self._q8 = np.zeros((0, dim), np.int8)
        self._scale = np.zeros(0, np.float32)
        self._chunk_slot = np.zeros(0, np.int32)
        self._chunk_gone = np.zeros(0, np.bool_)
        self._gone_chunks = 0  # how many of _chunk_gone are set (live_chunks is read by every search)
        self._chunks = 0
        self._hnsw: HnswIndex | None = None
        self._hnsw_failed = False
        self.defer_hnsw = False  # while True, `auto` does not build the graph (a store being opened)
        self.graph_built = 0  # times the graph was built from scratch (a saved graph is then stale)
        self.graph_changes = 0  # changes to the graph since it was built or loaded
        self._terms = TermIndex()

    # -- contents ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._slots - self._gone[: self._slots].sum())

    @property
    def live_chunks(self) -> int:
        return self._chunks - self._gone_chunks

    @property
    def backend(self) -> str:
        return "hnsw" if self._hnsw is not None else "exact"

    def _grow_slots(self, need: int) -> None:
        cap = self._session.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap, 256)
        for name in (
            "_session",
            "_topic",
            "_source",
            "_type",
            "_created",
            "_stashed",
            "_row",
            "_firsts",
            "_counts",
            "_expires",
            "_protected",
            "_gone",
        ):
            old = getattr(self, name)
            grown = np.zeros(new, old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)

    def _grow_chunks(self, need: int) -> None:
        cap = self._q8.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap, 1024)
        for name in ("_q8", "_scale", "_chunk_slot", "_chunk_gone"):
            old = getattr(self, name)
            grown = np.zeros((new,) + old.shape[1:], old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)

    def add(self, row: TableRow) -> None:
        """Add one segment (its ``row`` is its store key; adding a present row replaces it)."""
        self.add_many([row])

    def add_many(self, rows: Sequence[TableRow]) -> None:
        """Add segments (a present row is replaced), quantising all their vectors in one call (opening
        a store loads every segment this way)."""
        rows = list({r.row: r for r in rows}.values())  # a row given twice: the last one
        if not rows:
            return
        vecs = [np.asarray(r.vectors, np.float32).reshape(-1, self.dim) for r in rows]
        if max(v.shape[0] for v in vecs) > _CHUNK_MASK:
            raise InputError(f"a segment may have at most {_CHUNK_MASK} chunk vectors")
        for r in rows:
            if r.row in self.slot_of:
                self.remove(r.row)
        self._mutations += 1
        q = Int8Corpus.from_vectors(np.concatenate(vecs) if len(vecs) > 1 else vecs[0])
        s0, c0 = self._slots, self._chunks
        total = sum(v.shape[0] for v in vecs)
        self._grow_slots(s0 + len(rows))
        self._grow_chunks(c0 + total)
        self._q8[c0 : c0 + total] = q.q8
        self._scale[c0 : c0 + total] = q.scale
        self._chunk_gone[c0 : c0 + total] = False
        c = c0
        for j, (r, v) in enumerate(zip(rows, vecs)):
            s = s0 + j
            self._session[s] = self._sessions.of(r.session)
            self._topic[s] = self._topics.of(r.topic)
            self._source[s] = self._sources.of(r.source)
            self._type[s] = _TYPES[r.kind]
            self._created[s] = r.created
            self._stashed[s] = r.created if r.stashed is None else r.stashed
            self._expires[s] = math.inf if r.expires is None else r.expires
            self._protected[s] = r.protected
            self._gone[s] = False
            self._sha.append(r.sha256)
            self._digest.append(r.digest)
            self._row[s] = r.row
            self.slot_of_id[r.segment_id] = s
            self.ids.append(r.segment_id)
            self.slot_of[r.row] = s
            self._chunk_slot[c : c + v.shape[0]] = s
            self._firsts[s] = c
            self._counts[s] = v.shape[0]
            self._terms.add(s, r.terms)
            c += v.shape[0]
        self._slots = s0 + len(rows)
        self._chunks = c0 + total
        if self._hnsw is not None:
            self._hnsw_add(np.arange(c0, c0 + total))
        else:
            self._maybe_build()

    def remove(self, row: int) -> None:
        """Forget the segment stored under ``row`` (no-op when absent)."""
        s = self.slot_of.pop(row, None)
        if s is None:
            return
        self._mutations += 1
        if self.slot_of_id.get(self.ids[s]) == s:
            del self.slot_of_id[self.ids[s]]
        self._gone[s] = True
        self._terms.remove(s)
        first, count = int(self._firsts[s]), int(self._counts[s])
        self._chunk_gone[first : first + count] = True
        self._gone_chunks += count
        if self._hnsw is not None:
            self.graph_changes += 1
            for label in self.labels(np.arange(first, first + count)).tolist():
                try:
                    self._hnsw.mark_deleted(label)
                except RuntimeError:
                    pass

    def set_protected(self, row: int, protected: bool) -> None:
        s = self.slot_of.get(row)
        if s is not None:
            self._mutations += 1
            self._protected[s] = protected

    def facts(self, ids: Sequence[str]) -> dict[str, tuple[float, float, str]]:
        """Creation and stash times (epoch seconds) and text sha256 of the live segments among ``ids``."""
        out: dict[str, tuple[float, float, str]] = {}
        for i in ids:
            s = self.slot_of_id.get(i)
            if s is not None:
                out[i] = (float(self._created[s]), float(self._stashed[s]), self._sha[s])
        return out

    # -- filters ----------------------------------------------------------------------------------

    def allowed(self, f: Filters) -> np.ndarray:
        """Per slot: passes the filters and is not gone (read-only). The mask without the expiry
        condition is kept until the filters or the table change, so one retrieve's dense and keyword
        searches, and retrieves with the same filters at other times, compute it once; the expiry
        condition (``alive_at``) is then applied to the slots that have an expiry time, if any."""
        base_f = dataclasses.replace(f, alive_at=None)
        memo = self._allowed_memo
        if memo is not None and memo[1] == self._mutations and memo[0] == base_f:
            ok = memo[2]
        else:
            ok = self._allowed(base_f)
            ok.setflags(write=False)
            self._allowed_memo = (base_f, self._mutations, ok)
        expired = self._expired(f.alive_at)
        if expired.size:
            expired = expired[ok[expired]]
        if expired.size:
            ok = ok.copy()
            ok[expired] = False
            ok.setflags(write=False)
        return ok

    def _expired(self, at: float | None) -> np.ndarray:
        """Slots (live, unprotected) whose expiry time is at or before ``at``."""
        if at is None:
            return np.zeros(0, np.int64)
        memo = self._expiring_memo
        if memo is None or memo[0] != self._mutations:
            n = self._slots
            with_expiry = np.flatnonzero(np.isfinite(self._expires[:n]) & ~self._gone[:n] & ~self._protected[:n])
            memo = self._expiring_memo = (self._mutations, with_expiry)
        slots = memo[1]
        return slots[self._expires[slots] <= at] if slots.size else slots

    def _allowed(self, f: Filters) -> np.ndarray:
        """The mask of every condition of ``f`` but the expiry time (see :meth:`allowed`)."""
        n = self._slots
        ok = ~self._gone[:n]
        if f.sessions is not None:
            ok &= _among(self._session[:n], self._sessions.find(f.sessions))
        if f.types is not None:
            ok &= _among(self._type[:n], np.array([_TYPES[t] for t in f.types], np.int8))
        if f.topics is not None:
            ok &= _among(self._topic[:n], self._topics.find(f.topics))
        if f.sources is not None:
            ok &= _among(self._source[:n], self._sources.find(f.sources))
        if f.since is not None:
            ok &= self._created[:n] >= f.since
        if f.until is not None:
            ok &= self._created[:n] <= f.until
        if f.protected is not None:
            ok &= self._protected[:n] == f.protected
        return ok  # the expiry condition (alive_at) is applied by allowed()

    # -- search -----------------------------------------------------------------------------------

    def search(self, queries: np.ndarray, k: int, f: Filters) -> list[tuple[int, float]]:
        """The ``k`` best slots (slot, score) by their best (query row, chunk) dot product, best first."""
        n = self._chunks
        if k <= 0 or n == 0 or queries.shape[0] == 0:
            return []
        chunk_ok, passing = self._chunks_allowed(f)
        if passing == 0:
            return []
        if self._hnsw is not None and passing >= self.config.exact_below * self.live_chunks:
            found = self._search_hnsw(queries, k, chunk_ok, passing)
            if found is not None:
                return found
        if passing < 0.25 * n:
            rows = np.flatnonzero(chunk_ok)
            best, _ = Int8Corpus(np.ascontiguousarray(self._q8[rows]), self._scale[rows]).score_pool(queries)
            slots = self._chunk_slot[rows]
        else:
            best, _ = Int8Corpus(self._q8[:n], self._scale[:n]).score_pool(queries, exclude=~chunk_ok)
            slots = self._chunk_slot[:n]
        seg, _ = group_max(best, slots.astype(np.int64), self._slots)
        order = top_k(seg, k)
        return [(int(s), float(seg[s])) for s in order if np.isfinite(seg[s])]

    def _chunks_allowed(self, f: Filters) -> tuple[np.ndarray, int]:
        """Per chunk row: its segment passes ``f`` and it is live; and how many do (kept as the slot
        mask is: without the expiry condition, which is applied to the few expired segments after)."""
        base_f = dataclasses.replace(f, alive_at=None)
        memo = self._chunk_memo
        if memo is not None and memo[1] == self._mutations and memo[0] == base_f:
            chunk_ok, passing = memo[2], memo[3]
        else:
            n = self._chunks
            chunk_ok = self.allowed(base_f)[self._chunk_slot[:n]] & ~self._chunk_gone[:n]
            chunk_ok.setflags(write=False)
            passing = int(chunk_ok.sum())
            self._chunk_memo = (base_f, self._mutations, chunk_ok, passing)
        expired = self._expired(f.alive_at)
        if expired.size:
            rows = np.concatenate([np.arange(self._firsts[s], self._firsts[s] + self._counts[s]) for s in expired])
            rows = rows[chunk_ok[rows]]
            if rows.size:
                chunk_ok = chunk_ok.copy()
                chunk_ok[rows] = False
                chunk_ok.setflags(write=False)
                passing -= int(rows.size)
        return chunk_ok, passing

    def keyword(self, terms: Sequence[str], k: int, f: Filters, also: Sequence[int] = ()) -> list[tuple[int, float]]:
        """The ``k`` best slots passing ``f`` by BM25 over their keyword terms, best first; then the
        scores of the slots in ``also`` (passing ``f``, holding a term) that are not among them."""
        return self._terms.search(terms, k, self.allowed(f), also)

    def scores(self, queries: np.ndarray, slots: list[int]) -> list[float]:
        """The dense score of each slot (its best chunk against the best query row), in one kernel call."""
        if not slots:
            return []
        idx = np.asarray(slots, dtype=np.int64)
        firsts, counts = self._firsts[idx], self._counts[idx]
        owner = np.repeat(np.arange(idx.size), counts)
        rows = np.repeat(firsts, counts) + (np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts))
        if rows.size <= 4096:  # a few candidates: one BLAS product beats waking the kernel's thread pool
            q = np.asarray(queries, np.float32)
            best = ((self._q8[rows].astype(np.float32) @ q.T) * self._scale[rows, None]).max(axis=1)
        else:
            best, _ = Int8Corpus(np.ascontiguousarray(self._q8[rows]), self._scale[rows]).score_pool(queries)
        out = np.full(idx.size, -math.inf)
        np.maximum.at(out, owner, best.astype(np.float64))
        return [float(x) for x in out]

    # -- HNSW -------------------------------------------------------------------------------------
    #
    # Graph labels are stable across processes and re-openings: ``store row << LABEL_SHIFT | chunk
    # index``, so a graph saved beside the store (:mod:`contextsieve.stash.graphfile`) stays valid
    # when the table is loaded again in another order, and a segment stored again under its row (a
    # rebuild) updates its own labels.

    def labels(self, chunk_rows: np.ndarray) -> np.ndarray:
        """The graph labels of chunk rows (int64)."""
        slots = self._chunk_slot[chunk_rows]
        return (self._row[slots] << LABEL_SHIFT) | (np.asarray(chunk_rows, np.int64) - self._firsts[slots])

    def chunk_rows(self, labels: np.ndarray) -> np.ndarray:
        """The chunk rows of graph labels; ``-1`` for a label of no live segment's chunk."""
        labels = np.asarray(labels, np.int64)
        rows = (labels >> LABEL_SHIFT).tolist()
        slot_of = self.slot_of
        slots = np.fromiter((slot_of.get(r, -1) for r in rows), np.int64, len(rows))
        index = labels & _CHUNK_MASK
        ok = slots >= 0
        ok[ok] &= index[ok] < self._counts[slots[ok]]
        return np.where(ok, self._firsts[np.maximum(slots, 0)] + index, -1)

    def _maybe_build(self) -> None:
        if self._hnsw_failed or self.defer_hnsw or not self.wants_hnsw():
            return
        try:
            self.build_hnsw()
        except MissingExtraError:
            self._hnsw_failed = True
            warnings.warn(
                f"the stash has {self.live_chunks} chunk vectors; exact search is used because hnswlib is "
                "missing (pip install 'contextsieve[hnsw]' for faster search)",
                stacklevel=4,
            )

    def wants_hnsw(self) -> bool:
        """Whether the configuration asks for a graph at the table's current size."""
        cfg = self.config
        return cfg.backend == "hnsw" or (cfg.backend == "auto" and self.live_chunks >= cfg.hnsw_min_rows)

    def finish_loading(self) -> None:
        """End a deferred load: build the graph now if one is wanted and none was adopted."""
        self.defer_hnsw = False
        if self._hnsw is None:
            self._maybe_build()

    def _dequantised(self, rows: np.ndarray) -> np.ndarray:
        return self._q8[rows].astype(np.float32) * self._scale[rows, None]

    def build_hnsw(self) -> None:
        """Build the graph over all live chunk rows."""
        live = np.flatnonzero(~self._chunk_gone[: self._chunks])
        index = new_graph(self.dim, 2 * live.size, ef_construction=self.config.ef_construction, m=self.config.hnsw_m)
        for start in range(0, live.size, 50_000):
            part = live[start : start + 50_000]
            index.add_items(self._dequantised(part), self.labels(part))
        self._hnsw = index
        self.graph_built += 1
        self.graph_changes = 0

    def _hnsw_add(self, rows: np.ndarray) -> None:
        index = self._hnsw
        assert index is not None
        add_to_graph(index, self._dequantised(rows), self.labels(rows))
        self.graph_changes += 1

    # -- a saved graph ----------------------------------------------------------------------------

    @property
    def graph(self) -> HnswIndex | None:
        """The HNSW graph, if the table has one."""
        return self._hnsw

    def graph_contents(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the graph holds: per live segment its store row, chunk count and vector digest
        (``int64``, ``int64``, ``S16`` arrays, in slot order)."""
        live = np.flatnonzero(~self._gone[: self._slots])
        digests = np.array([self._digest[s] for s in live.tolist()], dtype="S16")
        return self._row[live].copy(), self._counts[live].copy(), digests

    def adopt_graph(self, index: HnswIndex, rows: np.ndarray, counts: np.ndarray, digests: np.ndarray) -> int:
        """Use a loaded graph that held the segments ``rows`` (with ``counts`` chunks and vector
        ``digests``) when it was saved: chunks of segments stored since (or whose vectors changed)
        are added, labels of segments gone since are marked deleted. Returns the segments added or
        removed."""
        now_rows, now_counts, now_digests = self.graph_contents()
        saved = dict(zip(rows.tolist(), zip(counts.tolist(), digests.tolist())))
        changed = 0
        add: list[np.ndarray] = []
        gone: list[int] = []
        for r, c, d in zip(now_rows.tolist(), now_counts.tolist(), now_digests.tolist()):
            was = saved.pop(r, None)
            if was == (c, d):
                continue
            changed += 1
            first = int(self._firsts[self.slot_of[r]])
            add.append(np.arange(first, first + c))
            if was is not None:  # stored again with fewer chunks: its extra labels go
                gone.extend((r << LABEL_SHIFT) | i for i in range(c, was[0]))
        for r, (c, _) in saved.items():  # segments removed since the graph was saved
            changed += 1
            gone.extend((r << LABEL_SHIFT) | i for i in range(c))
        for label in gone:
            try:
                index.mark_deleted(label)
            except RuntimeError:
                pass  # deleted already
        self._hnsw = index
        self.graph_changes = 0
        if add:
            self._hnsw_add(np.concatenate(add))
        return changed

    def _search_hnsw(
        self, queries: np.ndarray, k: int, chunk_ok: np.ndarray, passing: int
    ) -> list[tuple[int, float]] | None:
        index = self._hnsw
        assert index is not None
        live = self.live_chunks
        share = passing / max(live, 1)
        want = min(live, max(2 * k, int(math.ceil(2 * k / share))))
        while True:
            index.set_ef(max(self.config.ef_search, want))
            try:
                labels, dist = index.knn_query(queries, k=want, num_threads=1)
            except RuntimeError:
                return None  # fewer reachable live rows than asked: score exactly
            rows = self.chunk_rows(labels.ravel())
            sims = (1.0 - dist).ravel().astype(np.float32)
            keep = rows >= 0
            keep[keep] &= chunk_ok[rows[keep]]
            rows, sims = rows[keep], sims[keep]
            slots = self._chunk_slot[rows]
            best: dict[int, float] = {}
            for s, v in zip(slots.tolist(), sims.tolist()):
                if v > best.get(s, -math.inf):
                    best[s] = v
            if len(best) >= k or want >= live:
                ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
                return ranked[:k]
            if want >= 0.25 * live:
                return None
            want = min(live, want * 4)
