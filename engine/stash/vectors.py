"""The embedded backend's in-memory search table: the segment fields filters need as arrays, the
keyword terms, and the segments' chunk vectors in the one chunk index
(:class:`contextsieve.retrieval.chunks.ChunkIndex`, keyed by store row), which applies the filters
before ranking, exactly or through its HNSW graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.retrieval.bm25 import TermIndex
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig
from contextsieve.stash.backend import NEVER, OKAPI_B, Filters
from contextsieve.stash.segment import SegmentType

__all__ = ["VectorTable", "TableRow"]

_TYPES = {t: i for i, t in enumerate(SegmentType)}


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
    and expiry times (microseconds since 1970), protection, chunk vectors ``[chunks, dim]``, keyword terms, stash
    time (default: the creation time), text sha256 and the stored vectors' digest (what a saved HNSW
    graph is checked against when the store is opened again)."""

    row: int
    segment_id: str
    session: str
    kind: SegmentType
    topic: str | None
    source: str
    created: int
    expires: int | None
    protected: bool
    vectors: np.ndarray
    terms: Sequence[str] = ()
    stashed: int | None = None
    sha256: str = ""
    digest: bytes = b""
    superseded: bool = False  # another segment supersedes it


class VectorTable:
    """Segments (slots) with their filter fields, keyword terms and chunk vectors. Not thread-safe:
    the backend holds its lock around it.

    Args:
        dim: vector width.
        config: the chunk index's settings (:class:`~contextsieve.retrieval.chunks.IndexConfig`).
    """

    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.chunks = ChunkIndex(dim, config)
        self.dim = dim
        self.ids: list[str] = []  # slot -> segment id
        self.slot_of_id: dict[str, int] = {}  # live segment id -> slot
        self._sessions, self._topics, self._sources = _Codes(), _Codes(), _Codes()
        n = 0
        self._session = np.zeros(n, np.int32)
        self._topic = np.zeros(n, np.int32)
        self._source = np.zeros(n, np.int32)
        self._type = np.zeros(n, np.int8)
        self._created = np.zeros(n, np.int64)  # microseconds since 1970 (backend.to_epoch)
        self._stashed = np.zeros(n, np.int64)
        self._expires = np.zeros(n, np.int64)  # NEVER: no expiry
        self._protected = np.zeros(n, np.bool_)
        self._superseded = np.zeros(n, np.bool_)
        self._row = np.zeros(n, np.int64)  # slot -> store row (a listing's order after the creation time)
        self._sha: list[str] = []  # slot -> sha256 of the text
        self._mutations = 0  # changes since the table was made (the filter masks' memo key)
        self._allowed_memo: tuple[Filters, int, np.ndarray] | None = None
        self._chunk_memo: tuple[Filters, int, np.ndarray, int] | None = None
        self._expiring_memo: tuple[int, np.ndarray] | None = None
        self._terms = TermIndex()

    # -- contents ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def config(self) -> IndexConfig:
        return self.chunks.config

    @property
    def slot_of(self) -> dict[int, int]:
        """Store row -> slot of the live segments."""
        return self.chunks.slot_of

    @property
    def live_chunks(self) -> int:
        return self.chunks.live_chunks

    @property
    def backend(self) -> str:
        return self.chunks.backend

    def _grow(self, need: int) -> None:
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
            "_expires",
            "_protected",
            "_superseded",
            "_row",
        ):
            old = getattr(self, name)
            grown = np.zeros(new, old.dtype)
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
        for r in rows:
            old = self.chunks.slot_of.get(r.row)
            if old is not None:
                self._forget(old)
        slots = self.chunks.add([(r.row, r.vectors) for r in rows], [r.digest for r in rows])
        self._mutations += 1
        self._grow(self.chunks.slots)
        for s, r in zip(slots.tolist(), rows):
            assert s == len(self.ids)
            self._session[s] = self._sessions.of(r.session)
            self._topic[s] = self._topics.of(r.topic)
            self._source[s] = self._sources.of(r.source)
            self._type[s] = _TYPES[r.kind]
            self._created[s] = r.created
            self._stashed[s] = r.created if r.stashed is None else r.stashed
            self._expires[s] = NEVER if r.expires is None else r.expires
            self._protected[s] = r.protected
            self._superseded[s] = r.superseded
            self._row[s] = r.row
            self._sha.append(r.sha256)
            self.ids.append(r.segment_id)
            self.slot_of_id[r.segment_id] = s
            self._terms.add(s, r.terms)

    def _forget(self, s: int) -> None:
        if self.slot_of_id.get(self.ids[s]) == s:
            del self.slot_of_id[self.ids[s]]
        self._terms.remove(s)

    def remove(self, row: int) -> None:
        """Forget the segment stored under ``row`` (no-op when absent)."""
        s = self.chunks.slot_of.get(row)
        if s is None:
            return
        self._mutations += 1
        self._forget(s)
        self.chunks.remove(row)

    def set_flags(self, row: int, protected: bool, superseded: bool) -> None:
        """The flags a stored row can change after it is written (see :class:`TableRow`)."""
        s = self.chunks.slot_of.get(row)
        if s is not None:
            self._mutations += 1
            self._protected[s] = protected
            self._superseded[s] = superseded

    def facts(self, ids: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        """Creation and stash times (microseconds since 1970) and text sha256 of the live segments
        among ``ids``."""
        out: dict[str, tuple[int, int, str]] = {}
        for i in ids:
            s = self.slot_of_id.get(i)
            if s is not None:
                out[i] = (int(self._created[s]), int(self._stashed[s]), self._sha[s])
        return out

    # -- filters ----------------------------------------------------------------------------------

    def allowed(self, f: Filters) -> np.ndarray:
        """Per slot: passes the filters and is live (read-only). The mask without the expiry
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

    def _expired(self, at: int | None) -> np.ndarray:
        """Slots (live, unprotected) whose expiry time is at or before ``at``."""
        if at is None:
            return np.zeros(0, np.int64)
        memo = self._expiring_memo
        if memo is None or memo[0] != self._mutations:
            n = self.chunks.slots
            with_expiry = np.flatnonzero((self._expires[:n] != NEVER) & self.chunks.live_slots() & ~self._protected[:n])
            memo = self._expiring_memo = (self._mutations, with_expiry)
        slots = memo[1]
        return slots[self._expires[slots] <= at] if slots.size else slots

    def _allowed(self, f: Filters) -> np.ndarray:
        """The mask of every condition of ``f`` but the expiry time (see :meth:`allowed`)."""
        n = self.chunks.slots
        ok = self.chunks.live_slots()
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
        if f.current is not None:
            ok &= self._superseded[:n] != f.current
        return ok  # the expiry condition (alive_at) is applied by allowed()

    def listing_agrees(self, f: Filters, ids: Sequence[str], limit: int | None, offset: int) -> bool:
        """Whether ``ids`` can be what a store lists of the segments passing ``f``, newest first (creation
        time, then store row, descending), from ``offset`` and at most ``limit`` long (None: all), given
        what this table holds: each id it holds is listed once, passes ``f`` and comes in that order, and
        none of its passing segments is missing between the first and the last of them, before them
        beyond ``offset``, or after them when the listing is shorter than ``limit``. Ids the table does
        not hold (left out when it loaded, written since) may be anywhere. Costs a pass over the
        passing segments (the filter mask is :meth:`allowed`'s)."""
        if len(set(ids)) != len(ids):
            return False
        ok = self.allowed(f)
        passing = np.flatnonzero(ok)
        created, rows = self._created[passing], self._row[passing]
        held = [(i, self.slot_of_id[x]) for i, x in enumerate(ids) if x in self.slot_of_id]
        keys = [(int(self._created[s]), int(self._row[s])) for _, s in held]
        if not all(ok[s] for _, s in held) or any(a <= b for a, b in zip(keys, keys[1:])):
            return False
        short = limit is None or len(ids) < limit
        if not held:
            return not short or passing.size <= offset + len(ids)

        def listed_before(key: tuple[int, int]) -> np.ndarray:  # the passing segments newer than ``key``
            return (created > key[0]) | ((created == key[0]) & (rows > key[1]))

        above_first = listed_before(keys[0])
        from_last = listed_before(keys[-1]) | ((created == keys[-1][0]) & (rows == keys[-1][1]))
        if int(np.count_nonzero(above_first)) > offset + held[0][0]:
            return False  # more of them come before the listing's first than the offset and its own
        if int(np.count_nonzero(from_last & ~above_first)) != len(held):
            return False  # one between the first and the last is missing
        return not short or bool(from_last.all())  # a short listing reached the end

    def _chunks_allowed(self, f: Filters) -> tuple[np.ndarray, int]:
        """Per chunk row: its segment passes ``f`` and it is live; and how many do (kept as the slot
        mask is: without the expiry condition, which is applied to the few expired segments after)."""
        base_f = dataclasses.replace(f, alive_at=None)
        memo = self._chunk_memo
        if memo is not None and memo[1] == self._mutations and memo[0] == base_f:
            chunk_ok, passing = memo[2], memo[3]
        else:
            chunk_ok, passing = self.chunks.chunk_mask(self.allowed(base_f))
            chunk_ok.setflags(write=False)
            self._chunk_memo = (base_f, self._mutations, chunk_ok, passing)
        expired = self._expired(f.alive_at)
        if expired.size:
            rows = np.concatenate([self.chunks.chunk_rows(s) for s in expired.tolist()])
            rows = rows[chunk_ok[rows]]
            if rows.size:
                chunk_ok = chunk_ok.copy()
                chunk_ok[rows] = False
                chunk_ok.setflags(write=False)
                passing -= int(rows.size)
        return chunk_ok, passing

    # -- search -----------------------------------------------------------------------------------

    def search(self, queries: np.ndarray, k: int, f: Filters) -> list[tuple[int, float]]:
        """The ``k`` best slots (slot, score) by their best (query row, chunk) dot product, best first."""
        if k <= 0 or self.chunks.chunks == 0 or queries.shape[0] == 0:
            return []
        return self.chunks.search(queries, k, mask=self._chunks_allowed(f))

    def keyword(
        self, terms: Sequence[str], k: int, f: Filters, also: Sequence[int] = (), b: float = OKAPI_B
    ) -> list[tuple[int, float]]:
        """The ``k`` best slots passing ``f`` by BM25 (length normalisation ``b``) over their keyword
        terms, best first; then the scores of the slots in ``also`` (passing ``f``, holding a term) that
        are not among them."""
        return self._terms.search(terms, k, self.allowed(f), also, b)

    def scores(self, queries: np.ndarray, slots: list[int]) -> list[float]:
        """The dense score of each slot (its best chunk against the best query row), in one kernel call."""
        return self.chunks.scores(queries, slots)
