"""The one chunk index: groups of chunk vectors (an agent's item, a stashed segment) stored as int8
rows, searched exactly or through one HNSW graph, with a filter applied before ranking.

A group is added under an integer key chosen by the caller (the agent's item id, the stash's store
row) and gets a *slot*; its chunk vectors get consecutive *chunk rows*. Searches take a per-slot
filter mask (which groups may be returned) and answer per chunk row (:meth:`ChunkIndex.search_chunks`,
what selection rescoring needs) or per group (:meth:`ChunkIndex.search`, a group scoring its best
chunk against its best query row, what the stash needs).

One threshold policy (:class:`IndexConfig`): exact up to ``hnsw_min_rows`` live chunk vectors, one
HNSW graph from there if hnswlib is installed (``pip install 'contextsieve[hnsw]'``) and only if the
graph passes a recall guard (recall@10 against the exact scan on a sample of the index's own rows,
raising ``ef`` up to 512 before giving up; tried again at twice the size). A filtered graph search
asks for more neighbours in proportion to the share of rows that pass and widens until it has ``k``;
when few rows pass, they are scored exactly instead.

Graph labels are stable across processes: ``chunk index within the group << KEY_BITS | key``
(:func:`graph_label`; the key in the low bits, since hnswlib's label map builds twice as slowly on
labels whose low bits are all zero), so a graph saved beside a store
(:mod:`contextsieve.retrieval.graphfile`) stays valid when the index is filled again in another
order, and a group added again under its key updates its own labels.

The storage (slots, chunk rows, masks, exact scoring of chosen slots) is
:class:`~contextsieve.retrieval.chunk_rows.ChunkRows`, the base of :class:`ChunkIndex`; this module
holds the settings, adding and removing (which keep the graph in step), the searches and the graph.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.choices import IndexBackend
from contextsieve.errors import InputError, MissingExtraError
from contextsieve.kernels.scoring import Hits, as_vectors, check_finite, group_max, top_k
from contextsieve.retrieval.chunk_rows import KEY_BITS, MAX_KEY, ChunkRows
from contextsieve.retrieval.hnsw import HnswIndex, add_to_graph, import_hnswlib, new_graph

__all__ = ["IndexConfig", "ChunkIndex", "HNSW_MIN_ROWS", "graph_label"]

#: Live chunk vectors from which ``backend="auto"`` builds HNSW. From about there a graph search
#: answers faster than the exact int8 scan (4.8 against 8.2 ms per stash retrieve at 100,000 in
#: ``benchmarks.stash_speed``); the graph costs about 1.7 KB of memory per chunk vector and one
#: build (about 20 s at 50,000; ``benchmarks.hnsw_table`` measures build, recall and latency).
HNSW_MIN_ROWS = 50_000


def graph_label(key: int, chunk: int) -> int:
    """The graph label of chunk number ``chunk`` of the group added under ``key``."""
    return (chunk << KEY_BITS) | key


@dataclass(frozen=True, kw_only=True)
class IndexConfig:
    """How the chunk index searches (the agent's chunks and the stash's alike).

    Attributes:
        backend: ``"auto"`` (exact, HNSW from ``hnsw_min_rows`` live chunk vectors when hnswlib is
            installed), ``"exact"`` or ``"hnsw"`` (from the first row; needs the ``hnsw`` extra).
        hnsw_min_rows: live chunk vectors from which ``auto`` builds HNSW (default :data:`HNSW_MIN_ROWS`,
            50,000).
        hnsw_m: graph degree (default 16).
        ef_construction: build beam (default 200).
        ef_search: search beam to start from (default 64; raised to the neighbours asked for, and by
            the recall guard if needed). On 100,000 real MiniLM vectors (``benchmarks.hnsw_table``)
            recall@10 against the exact scan was 0.987 at 64 and 0.994 at 128.
        exact_below: share of live chunk rows passing a search's filter under which the passing rows
            are scored exactly instead of through the graph (default 0.02).
        recall_guard: recall@10 against exact search a new graph must reach, else exact search is
            kept (default 0.95).
    """

    backend: IndexBackend = "auto"
    hnsw_min_rows: int = HNSW_MIN_ROWS
    hnsw_m: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    exact_below: float = 0.02
    recall_guard: float = 0.95

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "exact", "hnsw"):
            raise InputError(f"backend must be 'auto', 'exact' or 'hnsw', got {self.backend!r}")
        if self.hnsw_min_rows < 1 or self.hnsw_m < 2 or self.ef_construction < 1 or self.ef_search < 1:
            raise InputError("hnsw_min_rows, hnsw_m, ef_construction and ef_search must be positive")
        if not 0.0 <= self.exact_below <= 1.0:
            raise InputError(f"exact_below must be in [0, 1], got {self.exact_below}")
        if not 0.0 < self.recall_guard <= 1.0:
            raise InputError(f"recall_guard must be in (0, 1], got {self.recall_guard}")


_NO_HITS = Hits(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int32))


class ChunkIndex(ChunkRows):
    """Groups of int8 chunk rows under integer keys; exact or HNSW search with a per-slot filter.

    Not thread-safe: its owner (the agent's chunk store, the stash's table) holds a lock around it.

    Args:
        dim: vector width (384 for MiniLM).
        config: :class:`IndexConfig` (defaults documented there).
    """

    def __init__(self, dim: int = 384, config: IndexConfig | None = None) -> None:
        super().__init__(dim)
        self.config = config or IndexConfig()
        if self.config.backend == "hnsw":
            import_hnswlib()
        self._hnsw: HnswIndex | None = None
        self._ef = self.config.ef_search
        self._no_hnswlib = False  # auto found hnswlib missing (warned once): exact from then on
        self._guard_failed_at = 0  # live chunks when a graph last missed the recall guard (retried at 2x)
        self.defer_hnsw = False  # while True, `auto` does not build the graph (a store being opened)
        self.graph_built = 0  # times the graph was built from scratch (a saved graph is then stale)
        self.graph_changes = 0  # changes to the graph since it was built or loaded

    @property
    def backend(self) -> str:
        """The search in use: ``"exact"`` or ``"hnsw"``."""
        return "hnsw" if self._hnsw is not None else "exact"

    @property
    def ef(self) -> int:
        """The graph's search beam in use (``ef_search``, or what the recall guard raised it to; a
        search asking for more neighbours uses that many)."""
        return self._ef

    @ef.setter
    def ef(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"ef must be a positive int, got {value!r}")
        self._ef = value

    @property
    def missing_hnswlib(self) -> bool:
        """``backend="auto"`` wanted a graph but hnswlib is not installed (warned once; exact from then)."""
        return self._no_hnswlib

    # -- adding and removing ----------------------------------------------------------------------

    def add(self, groups: Sequence[tuple[int, object]], digests: Sequence[bytes] | None = None) -> np.ndarray:
        """Add groups ``(key, vectors [chunks, dim])``, quantising all their vectors in one call; a key
        already present is replaced (given twice: the last one counts). Returns their slots. Bad
        input (NaN/inf, wrong width, keys outside ``0 .. 2**43 - 1``, too many chunks) changes nothing.

        Args:
            groups: ``(key, vectors)`` pairs; vectors are unit length (not renormalised).
            digests: optional per group, a digest of its stored vectors that a saved graph is checked
                against (:meth:`graph_contents`).
        """
        last = self._checked(groups, digests)
        if not last:
            return np.zeros(0, np.int64)
        for key in last:
            if key in self.slot_of:
                self.remove(key)
        s0, c0, total = self._append(last)
        if self._hnsw is not None:
            self._hnsw_add(np.arange(c0, c0 + total))
        else:
            self._maybe_build()
        return np.arange(s0, s0 + len(last), dtype=np.int64)

    def remove(self, key: int) -> None:
        """Forget the group added under ``key`` (no-op when absent); its rows are never returned again."""
        rows = self._forget(key)
        if rows is None:
            return
        if self._hnsw is not None:
            self.graph_changes += 1
            for label in self.labels(rows).tolist():
                try:
                    self._hnsw.mark_deleted(label)
                except RuntimeError:
                    pass  # deleted already

    # -- search -----------------------------------------------------------------------------------

    def search_chunks(
        self,
        queries: object,
        k: int,
        *,
        slot_ok: np.ndarray | None = None,
        mask: tuple[np.ndarray, int] | None = None,
        exact: bool = False,
    ) -> Hits:
        """The ``k`` best chunk rows by max-pooled score over the query rows, best first (ties: lower
        row), with which query row gave each score.

        Args:
            queries: ``[M, dim]`` query vectors; M = 0 finds nothing.
            k: rows to return (fewer when fewer pass).
            slot_ok: which groups may be returned (``[slots]`` bools; default: all live).
            mask: :meth:`chunk_mask` of ``slot_ok``, when the caller keeps it (``slot_ok`` is then unused).
            exact: scan exactly even when a graph is in use (checks and explanations).
        """
        q = as_vectors(queries, "queries", self.dim)
        check_finite(q, "queries")
        chunk_ok, passing = mask if mask is not None else self.chunk_mask(slot_ok)
        if k <= 0 or passing == 0 or q.shape[0] == 0:
            return _NO_HITS
        if not exact and self._uses_graph(passing):
            found = self._graph_rows(q, k, chunk_ok, passing, groups=False)
            if found is not None:
                rows, sims, which = found
                order = np.lexsort((rows, -sims))[:k]
                return Hits(rows[order], sims[order], which[order])
        gathered, corpus, exclude = self._exact_corpus(chunk_ok, passing)
        hits = corpus.score_pool_topk(q, k, exclude=exclude)
        return Hits(gathered[hits.idx] if gathered is not None else hits.idx, hits.scores, hits.which)

    def search(
        self,
        queries: object,
        k: int,
        *,
        slot_ok: np.ndarray | None = None,
        mask: tuple[np.ndarray, int] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best slots ``(slot, score)``, a slot scoring its best (query row, chunk) pair,
        best first (ties: lower slot). Arguments as :meth:`search_chunks`."""
        q = as_vectors(queries, "queries", self.dim)
        check_finite(q, "queries")
        chunk_ok, passing = mask if mask is not None else self.chunk_mask(slot_ok)
        if k <= 0 or passing == 0 or q.shape[0] == 0:
            return []
        if self._uses_graph(passing):
            found = self._graph_rows(q, k, chunk_ok, passing, groups=True)
            if found is not None:  # each slot once, with its best row's score (a few dozen rows)
                rows, sims, _ = found
                slots = self._chunk_slot[rows]
                order = np.lexsort((slots, -sims))
                _, first = np.unique(slots[order], return_index=True)
                pick = order[first]
                pick = pick[np.lexsort((slots[pick], -sims[pick]))][:k]
                return [(int(s), float(x)) for s, x in zip(slots[pick].tolist(), sims[pick].tolist())]
        gathered, corpus, exclude = self._exact_corpus(chunk_ok, passing)
        best, _ = corpus.score_pool(q, exclude=exclude)
        slots = self._chunk_slot[gathered] if gathered is not None else self._chunk_slot[: self._chunks]
        seg, _ = group_max(best, slots, self._slots)
        order = top_k(seg, k)
        return [(int(s), float(seg[s])) for s in order if np.isfinite(seg[s])]

    # -- HNSW -------------------------------------------------------------------------------------

    def labels(self, chunk_rows: np.ndarray) -> np.ndarray:
        """The graph labels of chunk rows (int64)."""
        slots = self._chunk_slot[chunk_rows]
        return ((np.asarray(chunk_rows, np.int64) - self._firsts[slots]) << KEY_BITS) | self._key[slots]

    def rows_of_labels(self, labels: np.ndarray) -> np.ndarray:
        """The chunk rows of graph labels; ``-1`` for a label of no live group's chunk."""
        labels = np.asarray(labels, np.int64)
        keys = labels & MAX_KEY
        dense = self._slot_by_key
        if keys.size and int(keys.max()) < dense.shape[0]:
            slots = dense[keys].astype(np.int64)
        else:
            slot_of = self.slot_of
            slots = np.fromiter((slot_of.get(r, -1) for r in keys.tolist()), np.int64, keys.size)
        index = labels >> KEY_BITS
        ok = slots >= 0
        ok[ok] &= index[ok] < self._counts[slots[ok]]
        return np.where(ok, self._firsts[np.maximum(slots, 0)] + index, -1)

    def wants_hnsw(self) -> bool:
        """Whether the configuration asks for a graph at the index's current size."""
        cfg = self.config
        if cfg.backend == "exact" or self._no_hnswlib:
            return False
        if self._guard_failed_at and self.live_chunks < 2 * self._guard_failed_at:
            return False
        return cfg.backend == "hnsw" or self.live_chunks >= cfg.hnsw_min_rows

    def _maybe_build(self) -> None:
        if self.defer_hnsw or not self.wants_hnsw():
            return
        try:
            self.build_hnsw()
        except MissingExtraError:
            if self.config.backend == "hnsw":
                raise
            self._no_hnswlib = True
            warnings.warn(
                f"{self.live_chunks} chunk vectors are searched exactly because hnswlib is missing "
                "(pip install 'contextsieve[hnsw]' for faster search)",
                stacklevel=4,
            )

    def finish_loading(self) -> None:
        """End a deferred load: build the graph now if one is wanted and none was adopted."""
        self.defer_hnsw = False
        if self._hnsw is None:
            self._maybe_build()

    def build_hnsw(self) -> bool:
        """Build the graph over all live chunk rows and check the recall guard; returns whether the
        graph is kept (exact search stays, with a warning, when it misses the guard)."""
        import_hnswlib()  # MissingExtraError before anything changes
        live = np.flatnonzero(~self._chunk_gone[: self._chunks])
        index = new_graph(self.dim, 2 * live.size, ef_construction=self.config.ef_construction, m=self.config.hnsw_m)
        for start in range(0, live.size, 50_000):
            part = live[start : start + 50_000]
            index.add_items(self._dequantised(part), self.labels(part))
        self._hnsw = index
        if not self._passes_recall_guard():
            self._hnsw = None
            self._guard_failed_at = self.live_chunks
            warnings.warn(
                f"HNSW missed recall@10 >= {self.config.recall_guard} even at ef=512; exact search is kept",
                stacklevel=3,
            )
            return False
        self.graph_built += 1
        self.graph_changes = 0
        return True

    def _hnsw_add(self, rows: np.ndarray) -> None:
        index = self._hnsw
        assert index is not None
        index.set_ef(self._ef)
        add_to_graph(index, self._dequantised(rows), self.labels(rows))
        self.graph_changes += 1

    def _uses_graph(self, passing: int) -> bool:
        return self._hnsw is not None and passing >= self.config.exact_below * self.live_chunks

    def _graph_rows(
        self, q: np.ndarray, k: int, chunk_ok: np.ndarray, passing: int, *, groups: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Passing chunk rows the graph finds, max-pooled over the query rows ``(rows, scores, which)``,
        asking for more neighbours until ``k`` rows (or ``k`` groups) pass; ``None`` when the graph
        cannot give them (the caller scans exactly)."""
        index = self._hnsw
        assert index is not None
        live = self.live_chunks
        share = passing / max(live, 1)
        ask = 2 * k if groups else k  # groups: twice as many rows, as several may share a group
        want = min(live, max(ask, int(math.ceil(ask / share))))
        while True:
            index.set_ef(max(self._ef, want))
            try:
                labels, dist = index.knn_query(q, k=want, num_threads=1)
            except RuntimeError:
                return None  # fewer reachable live rows than asked
            rows = self.rows_of_labels(labels.ravel())
            sims = (1.0 - dist).ravel().astype(np.float32)  # hnswlib "ip" distance = 1 - dot
            which = np.repeat(np.arange(q.shape[0], dtype=np.int32), labels.shape[1])
            keep = rows >= 0
            keep[keep] &= chunk_ok[rows[keep]]
            rows, sims, which = rows[keep], sims[keep], which[keep]
            if q.shape[0] > 1:  # max-pool: each row once, with its best score (lower query on ties)
                order = np.lexsort((which, -sims, rows))
                first = np.ones(order.size, dtype=bool)
                first[1:] = rows[order[1:]] != rows[order[:-1]]
                pick = order[first]
                rows, sims, which = rows[pick], sims[pick], which[pick]
            found = np.unique(self._chunk_slot[rows]).size if groups else rows.size
            if found >= min(k, passing) or want >= live:
                return rows, sims, which
            if want >= 0.25 * live:
                return None
            want = min(live, want * 4)

    def _passes_recall_guard(self, samples: int = 64, k: int = 10) -> bool:
        live = np.flatnonzero(~self._chunk_gone[: self._chunks])
        if live.size <= k:
            return True
        rng = np.random.default_rng(0)
        pick = rng.choice(live, size=min(samples, live.size), replace=False)
        queries = self._dequantised(pick) + rng.standard_normal((pick.size, self.dim)).astype(np.float32) * 0.02
        every = self.chunk_mask(None)
        truth = [
            set(self.search_chunks(queries[i : i + 1], k, mask=every, exact=True).idx.tolist())
            for i in range(pick.size)
        ]
        for ef in sorted({self._ef, 128, 256, 512}):
            if ef < self._ef:
                continue
            self._ef = ef
            got = []
            for i in range(pick.size):
                found = self._graph_rows(queries[i : i + 1], k, every[0], every[1], groups=False)
                got.append(set() if found is None else set(found[0][np.lexsort((found[0], -found[1]))][:k].tolist()))
            recall = float(np.mean([len(g & t) / len(t) for g, t in zip(got, truth)]))
            if recall >= self.config.recall_guard:
                return True
        self._ef = self.config.ef_search
        return False

    # -- a saved graph ----------------------------------------------------------------------------

    @property
    def graph(self) -> HnswIndex | None:
        """The HNSW graph, if the index has one."""
        return self._hnsw

    def graph_contents(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the graph holds: per live group its key, chunk count and vector digest (``int64``,
        ``int64``, ``S16`` arrays, in slot order)."""
        live = np.flatnonzero(~self._gone[: self._slots])
        digests = np.array([self._digest[s] for s in live.tolist()], dtype="S16")
        return self._key[live].copy(), self._counts[live].copy(), digests

    def adopt_graph(self, index: HnswIndex, keys: np.ndarray, counts: np.ndarray, digests: np.ndarray) -> int:
        """Use a loaded graph that held the groups ``keys`` (with ``counts`` chunks and vector
        ``digests``) when it was saved: chunks of groups added since (or whose vectors changed) are
        added, labels of groups gone since are marked deleted. Returns the groups added or removed."""
        now_keys, now_counts, now_digests = self.graph_contents()
        saved = dict(zip(keys.tolist(), zip(counts.tolist(), digests.tolist())))
        changed = 0
        add: list[np.ndarray] = []
        gone: list[int] = []
        for r, c, d in zip(now_keys.tolist(), now_counts.tolist(), now_digests.tolist()):
            was = saved.pop(r, None)
            if was == (c, d):
                continue
            changed += 1
            add.append(self.chunk_rows(self.slot_of[r]))
            if was is not None:  # added again with fewer chunks: its extra labels go
                gone.extend(graph_label(r, i) for i in range(c, was[0]))
        for r, (c, _) in saved.items():  # groups removed since the graph was saved
            changed += 1
            gone.extend(graph_label(r, i) for i in range(c))
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
