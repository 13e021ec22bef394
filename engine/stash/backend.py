"""What a stash backend stores and answers; :class:`~contextsieve.stash.store.StashStore` does the rest
(validation, chunking, embedding, dedup, ranking, reference walks) the same way for every backend.

Two backends implement :class:`StashBackend`: :class:`~contextsieve.stash.sqlite.SqliteBackend` (one
file, the default) and :class:`~contextsieve.stash.postgres.PostgresBackend` (a PostgreSQL server
with pgvector).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

import numpy as np

from contextsieve.retrieval.bm25 import Bm25Config, tokenize
from contextsieve.stash.segment import ContextSegment, SegmentType

#: Okapi BM25's length normalisation, the backends' default (``Bm25Config``'s); retrieval passes its own.
OKAPI_B: float = Bm25Config().b

__all__ = [
    "Filters",
    "SegmentRow",
    "SegmentFields",
    "StashBackend",
    "Hit",
    "StoreMeta",
    "index_terms",
    "query_terms",
    "QUERY_FUNCTION_TERMS",
    "vector_digest",
]

#: Format tag written into every store; another value is refused on open, but for :data:`UPGRADES`.
#: 2: stemmed index terms; 3: CJK character bigrams; 4: times as integer microseconds since 1970 (3 kept
#: float seconds: microseconds were lost far from 1970) and a check of each row's fields.
FORMAT = "contextsieve-stash-4"
#: Formats a store is brought from to :data:`FORMAT` when opened (once, in one transaction).
UPGRADES = ("contextsieve-stash-3",)


_local = threading.local()


def _stemmer() -> Any:
    """This thread's English Snowball stemmer (a stemmer object keeps state while it works)."""
    st = getattr(_local, "stemmer", None)
    if st is None:
        import snowballstemmer  # type: ignore[import-untyped]

        st = _local.stemmer = snowballstemmer.stemmer("english")
    return st


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """``word``'s English Snowball stem (memoised: a query's words recur)."""
    return str(_stemmer().stemWord(word))


def index_terms(text: str) -> list[str]:
    """The keyword index's terms of ``text``: :func:`contextsieve.retrieval.bm25.tokenize`'s words reduced to
    their English Snowball stems (``named`` and ``name`` match; measured in ``benchmarks.stash_quality``),
    each non-ASCII term spelled as ``x`` + its UTF-8 hex so every backend's full-text tokenizer keeps
    it whole."""
    stems = [_stem(w) for w in tokenize(text)]
    return [t if t.isascii() else "x" + t.encode("utf-8").hex() for t in stems]


#: Auxiliary verbs left out of a query's keyword terms (the tokenizer's stopwords already drop
#: ``do``, ``does``, ``has``, ``have``, ``was``): in a question ("When did Maya ...", "What had he
#: been told?") they are grammar, not what is asked for, and a turn that happens to hold ``did``
#: would gain keyword score from it. Measured: conversation set R@5 0.721 -> 0.754, plays, RealMem
#: and SciFact within 0.02 (``python -m benchmarks.stash_quality``; :class:`RankConfig`'s
#: ``drop_query_auxiliaries`` turns it off).
QUERY_FUNCTION_TERMS = frozenset(index_terms("did done had having been being were would could must"))


def query_terms(query: str, drop_auxiliaries: bool = True) -> list[str]:
    """The keyword terms a retrieve searches for ``query``: its :func:`index_terms`, without
    :data:`QUERY_FUNCTION_TERMS` when ``drop_auxiliaries`` (default; stored segments keep every term)."""
    terms = index_terms(query)
    return [t for t in terms if t not in QUERY_FUNCTION_TERMS] if drop_auxiliaries else terms


def vector_digest(segment_id: str, model_id: str, vectors: np.ndarray) -> bytes:
    """16-byte BLAKE2b of a segment's id, model and float32 vectors: a stored vector that no longer
    matches it was changed on disk and is not used."""
    h = hashlib.blake2b(digest_size=16)
    h.update(segment_id.encode("utf-8") + b"\0" + model_id.encode("utf-8") + b"\0")
    h.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return h.digest()


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
#: The stored expiry time of a segment that never expires, in the in-memory table (not in SQL: NULL).
NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class SegmentFields:
    """The fields of a stored segment that never change after it is written, as stored: what
    :func:`fields_check` covers (the text is covered by its ``sha256``, the vectors by
    :func:`vector_digest`).

    Attributes:
        segment_id: the segment's stored id. session: its session. kind: its type
            (:class:`~contextsieve.stash.segment.SegmentType` value).
        created / stashed: its creation and stash times, microseconds since 1970 UTC (:func:`to_epoch`).
        tokens: its token count. topic: its topic label (None: none). source: its source label.
        sha256: the hex SHA-256 of its text. expires: its expiry time, microseconds since 1970
            (None: never expires).
        terms: its keyword index terms (:func:`index_terms` of its text), space-joined.
    """

    segment_id: str
    session: str
    kind: str
    created: int
    stashed: int
    tokens: int
    topic: str | None
    source: str
    sha256: str
    expires: int | None
    terms: str


def fields_check(fields: SegmentFields) -> bytes:
    """16-byte BLAKE2b of a stored segment's :class:`SegmentFields`: a row whose id, session, type,
    times, topic, source, token count or keyword index terms was changed on disk fails it on read, and
    is left out of search when a store loads it.

    The on-disk format: the digest is of ``repr`` of the tuple of the fields in exactly this order
    (UTF-8, lone surrogates kept); changing the tuple would fail every stored row."""
    f = fields
    parts = (
        f.segment_id,
        f.session,
        f.kind,
        f.created,
        f.stashed,
        f.tokens,
        f.topic,
        f.source,
        f.sha256,
        f.expires,
        f.terms,
    )
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def to_epoch(t: datetime) -> int:
    """``t`` (aware) as whole microseconds since 1970-01-01 UTC: exact for every datetime from year 1
    to 9999 (a float of seconds loses microseconds far from 1970), the one way times are stored and
    compared on every backend."""
    return (t - _EPOCH) // _MICROSECOND


def from_epoch(x: int) -> datetime:
    """The UTC datetime of ``x`` microseconds since 1970 (see :func:`to_epoch`)."""
    return _EPOCH + timedelta(microseconds=int(x))


@dataclass(frozen=True)
class Filters:
    """Which segments a search or listing may return (every field is ANDed; ``None``: no limit).

    Attributes:
        sessions: session names. types: segment types. topics / sources: exact labels.
        since / until: creation time range, inclusive (microseconds since 1970 UTC, :func:`to_epoch`).
        protected: only protected (True) or only unprotected (False) segments.
        alive_at: hide segments whose expiry (``expires_at``) is at or before this time
            (microseconds since 1970) unless they are protected.
        current: only segments no other segment supersedes (True) or only superseded ones (False).
    """

    sessions: tuple[str, ...] | None = None
    types: tuple[SegmentType, ...] | None = None
    topics: tuple[str, ...] | None = None
    sources: tuple[str, ...] | None = None
    since: int | None = None
    until: int | None = None
    protected: bool | None = None
    alive_at: int | None = None
    current: bool | None = None


@dataclass(frozen=True)
class SegmentRow:
    """One segment as written: its fields, its chunk vectors ``[chunks, dim]`` and its index terms."""

    segment: ContextSegment
    vectors: np.ndarray
    terms: list[str]


@dataclass(frozen=True)
class Hit:
    """A search result: segment id and score (dense: cosine of its best chunk; keyword: BM25)."""

    id: str
    score: float


@dataclass(frozen=True)
class StoreMeta:
    """What a store records about itself: its model id (``None`` while empty and new), vector width,
    and the model a rebuild is moving it to (``None`` when no rebuild is under way)."""

    model: str | None
    dim: int | None
    rebuild_to: str | None


class StashBackend(Protocol):
    """Storage and search for :class:`~contextsieve.stash.store.StashStore`. Every method is atomic; a
    failing one changes nothing and raises :class:`~contextsieve.errors.StashError` (or
    :class:`~contextsieve.errors.InputError` for a conflict it detects inside its transaction)."""

    #: "sqlite" or "postgres"; ``location`` names the file or server (no password) in messages.
    kind: str
    location: str
    #: Whether the store is only read: an embedded store in a file or folder this user may not write,
    #: opened with ``create=False`` (its writes raise :class:`~contextsieve.errors.StashError`).
    read_only: bool

    def meta(self) -> StoreMeta: ...

    def reading(self) -> AbstractContextManager[None]:
        """A scope for the reads of one retrieve (no writes inside): the embedded backend checks for
        other processes' writes once, at its start, so its searches and reads see one state."""
        ...

    def set_meta(self, model: str | None, dim: int | None, rebuild_to: str | None) -> None: ...

    def setting(self, key: str) -> str | None:
        """A store-wide named value kept beside the segments (None when unset)."""
        ...

    def put_setting(self, key: str, value: str, *, replace: bool = True) -> str:
        """Store a named value (``replace=False``: only if unset, atomically); the value stored afterwards."""
        ...

    def close(self) -> None: ...

    def sessions_of(self, ids: Sequence[str]) -> dict[str, str]:
        """Session of each stored id among ``ids`` (absent ids are left out)."""
        ...

    def by_hash(self, session: str, hashes: Sequence[str]) -> dict[str, str]:
        """Stored segment id of each content hash in ``session`` (the oldest one if several)."""
        ...

    def insert(
        self, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> dict[int, str]:
        """Write the rows and their references in one transaction. With ``dedup``, a row whose
        (session, sha256) is already stored (by another writer since the caller looked) is skipped:
        returns ``{position in rows: stored id}`` for those. An id already in use raises InputError.
        ``supersede``: ``(old id, new id)`` pairs written in the same transaction (the old segment's
        ``superseded_by``; both of one session, else InputError; a new id of a skipped row stands for
        the stored one)."""
        ...

    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored chunk vectors (float32 ``[chunks, dim]``) of each of ``ids`` whose vectors pass
        their check (what an export with vectors writes)."""
        ...

    def successors(self, ids: Sequence[str]) -> dict[str, str]:
        """``superseded_by`` of each of ``ids`` that is superseded."""
        ...

    def get(self, ids: Sequence[str]) -> list[ContextSegment]:
        """The stored segments among ``ids``, in the order of ``ids``."""
        ...

    def ranking_facts(self, ids: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        """``(created, stashed, sha256)`` of each stored id among ``ids`` (microseconds since 1970): what the
        ranking needs, without texts and references."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete these segments (their references go with them); returns how many were stored."""
        ...

    def set_protected(self, ids: Sequence[str], protected: bool) -> int: ...

    def references(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Ids each of ``ids`` refers to (stored segments only)."""
        ...

    def select_ids(
        self,
        filters: Filters,
        *,
        expired_before: int | None = None,
        created_before: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        """Ids matching ``filters`` (newest first), optionally only those expired before a time or
        created before a time."""
        ...

    def dense(self, queries: np.ndarray, k: int, filters: Filters) -> list[Hit]:
        """The ``k`` best segments by the best (query row, chunk) cosine."""
        ...

    def keyword(
        self, terms: Sequence[str], k: int, filters: Filters, also: Sequence[str] = (), b: float = OKAPI_B
    ) -> list[Hit]:
        """The ``k`` best segments by Okapi BM25 (k1 1.2, length normalisation ``b``; the store passes
        ``RankConfig.keyword_length_norm``) of ``terms`` (index terms), best
        first; then the scores of the segments among ``also`` (ids; passing ``filters``, holding a
        term) that are not among those ``k``: a dense candidate gets its keyword score even when it
        is not among the best keyword matches."""
        ...

    def similarities(self, queries: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """The dense score (as :meth:`dense`) of each stored id among ``ids``."""
        ...

    def stats(self, filters: Filters) -> dict[str, object]: ...

    def sessions(self) -> list[tuple[str, int, int | None]]:
        """Every session holding segments, by name: ``(session, segments, latest stash time)``, the time
        in microseconds since 1970 (:func:`to_epoch`)."""
        ...

    def rename_session(self, old: str, new: str) -> int:
        """Move every segment of session ``old`` into ``new`` (kept with the segments already there), in
        one transaction; returns how many moved."""
        ...

    def stale(self, model: str, limit: int) -> list[ContextSegment]:
        """Up to ``limit`` segments whose vectors are not of ``model`` (for a rebuild)."""
        ...

    def replace_vectors(self, rows: Sequence[SegmentRow]) -> None:
        """Store new vectors (and model id) for existing segments, in one transaction."""
        ...
