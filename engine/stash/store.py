"""The stash store (seed 004): an agent stashes pruned context segments, retrieves the relevant ones
by meaning and merges them back.

:class:`StashStore` is the one entry point; it does validation, chunking, embedding, dedup, ranking
and reference walks the same way over either backend (SQLite file or PostgreSQL + pgvector). It is a
façade: its state and shared steps are :class:`~contextsieve.stash.core.StashCore`'s, and each call is
one function of a role module: :mod:`~contextsieve.stash.write` (stash, dedup, supersession),
:mod:`~contextsieve.stash.retrieve` (retrieval and its trace, reference walks),
:mod:`~contextsieve.stash.records` (segments by id and listings) and :mod:`~contextsieve.stash.maintenance`
(cleanup, stats, rebuild). Named values are read and written here.

Sessions: every segment belongs to a session, and every call names the caller's session. A call sees
only its own session's segments unless it asks for more (``cross_session=True`` on retrieval);
segment ids of another session are treated as unknown.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contextsieve.errors import InputError, brief, check_text
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.retrieval.query import Query
from contextsieve.stash import maintenance, records, retrieve, write
from contextsieve.stash.backend import StashBackend, from_epoch
from contextsieve.stash.config import StashConfig
from contextsieve.stash.core import Progress, StashCore
from contextsieve.stash.options import DEFAULT_SESSION, RetrieveKeywords, RetrieveOptions, SegmentFilter
from contextsieve.stash.results import MergeResult, Namespace, Retrieved, RetrieveTrace, StashResult
from contextsieve.stash.segment import ContextSegment, check_session, no_nul

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["StashStore"]


def _value_key(key: object) -> str:
    """A named value's key: ``NAMESPACE:NAME`` (the store's own settings have no colon, so they cannot be
    named), at most 200 characters, no NUL."""
    if not isinstance(key, str) or ":" not in key or not 3 <= len(key) <= 200:
        raise InputError(f"a value's key must be a str NAMESPACE:NAME of 3-200 characters, got {brief(key)}")
    return no_nul(check_text(key, "the key"), "the key")


class StashStore(StashCore):
    """Stash, retrieve and merge context segments.

    Open one with :meth:`open` (a file path or a ``postgresql://`` URI) or from a backend. Thread-safe;
    several processes may share one store.

    Args:
        backend: where segments live. embedder: makes the vectors (its ``model_id`` is recorded).
        config: :class:`~contextsieve.stash.config.StashConfig`.
        rebuild: open a store of another model to re-embed it (:meth:`rebuild`); other calls refuse.

    Raises:
        StashModelError: the store's vectors are of another model (or a rebuild is under way).
    """

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        embedder: TextEmbedder | None = None,
        config: StashConfig | None = None,
        *,
        rebuild: bool = False,
        backend_config: Any = None,
        create: bool = True,
    ) -> "StashStore":
        """Open (creating when new) the store at ``location``: a SQLite file path, or a
        ``postgresql://user:password@host:port/db`` URI (the ``postgres`` extra). ``embedder``
        defaults to all-MiniLM-L6-v2 (``variant="auto"``). ``backend_config``: a
        :class:`~contextsieve.stash.sqlite.SqliteConfig` or
        :class:`~contextsieve.stash.postgres.PostgresConfig`. ``create=False`` opens an existing store
        only (what a command that reads one uses): no file, folder or table is made, and a location
        without a store is a :class:`~contextsieve.errors.StashNotFoundError` naming it."""
        loc = os.fspath(location)
        backend: StashBackend
        if isinstance(loc, str) and loc.startswith(("postgresql://", "postgres://")):
            from contextsieve.stash.postgres import PostgresBackend

            backend = PostgresBackend(loc, backend_config, create=create)
        else:
            from contextsieve.stash.sqlite import SqliteBackend

            backend = SqliteBackend(Path(loc), backend_config, create=create)
        if embedder is None:
            from contextsieve.models.embedder import Embedder

            embedder = Embedder()
        try:
            return cls(backend, embedder, config, rebuild=rebuild)
        except BaseException:
            backend.close()
            raise

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "StashStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stash ------------------------------------------------------------------------------------

    def stash(
        self,
        segments: Iterable[object],
        *,
        session: str = DEFAULT_SESSION,
        show_progress: bool = False,
        progress: Progress | None = None,
    ) -> StashResult:
        """Store segments (each a :class:`~contextsieve.stash.segment.NewSegment`, a mapping with
        its fields, or a plain string) in ``session``, all or none.

        Every segment is validated before anything is embedded or written; duplicates of stored
        segments (and of earlier ones in the batch) are not stored again. References may name stored
        segments of the session or segments earlier or later in the batch (by their given ``id``).

        ``show_progress`` draws a progress bar; ``progress(done, total)`` is called after each part of
        :data:`~contextsieve.stash.core.PROGRESS_PART` texts is embedded (the MCP server turns it into
        progress notifications).

        Raises:
            InputError: a bad segment (the message names which and why), an id already in use, or a
                reference to a segment that is not in the session. Nothing is stored.
        """
        return write.stash(self, segments, session, show_progress, progress)

    def add_supersessions(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Mark each stored segment ``old`` of ``(old, new)`` as superseded by ``new`` (stored ids, as
        :func:`~contextsieve.stash.transfer.import_store` restores them; both of one session, ``new``
        not itself superseded, else InputError and nothing changes). One transaction."""
        write.add_supersessions(self, pairs)

    def add_segments(
        self,
        segments: Sequence[ContextSegment],
        *,
        show_progress: bool = False,
        vectors: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Write whole segments as they are (ids, sessions, times, references, protection kept),
        embedded with this store's model in parts of :data:`~contextsieve.stash.core.PROGRESS_PART`,
        one transaction per part: what import and migration use (:mod:`contextsieve.stash.transfer`).
        The caller has checked them; ids must be new to the store. ``vectors``: chunk vectors by id,
        written instead of embedding those segments (the caller has checked them against this store's
        model)."""
        write.add_segments(self, segments, show_progress, vectors)

    # -- retrieval --------------------------------------------------------------------------------

    def retrieve(
        self, query: str | Query, options: RetrieveOptions | None = None, **keywords: Unpack[RetrieveKeywords]
    ) -> list[Retrieved]:
        """The ``top_k`` stashed segments best for ``query``, best first: :meth:`retrieve_traced`
        without its trace (the arguments are the same)."""
        return self.retrieve_traced(query, options, **keywords)[0]

    def retrieve_traced(
        self, query: str | Query, options: RetrieveOptions | None = None, **keywords: Unpack[RetrieveKeywords]
    ) -> tuple[list[Retrieved], RetrieveTrace]:
        """The ``top_k`` stashed segments best for ``query``, best first (see
        :mod:`contextsieve.stash.ranking` for the score), and the trace of every candidate ranked.

        Args:
            query: what the agent is looking for (a task, a question, recent messages), or a request's
                :class:`~contextsieve.retrieval.query.Query` (its text, searched with its sentences'
                vectors when they are of the store's model family).
            options: a :class:`~contextsieve.stash.options.RetrieveOptions` (session, top_k,
                min_similarity, filters, cross_session, now, query_vectors, include_superseded; its
                docstring gives each one's meaning and default), or None: the defaults, changed by
                ``keywords``.
            keywords: the same names as keyword arguments (``retrieve(query, top_k=3)``), instead of
                ``options``: passing both is an :class:`~contextsieve.errors.InputError`.
        """
        return retrieve.retrieve_traced(self, query, RetrieveOptions.given(options, keywords))

    def retrieve_by_reference(
        self, segment_id: str, *, session: str = DEFAULT_SESSION, max_hops: int = 2
    ) -> list[ContextSegment]:
        """The segment and those it refers to, breadth first up to ``max_hops`` references away
        (default 2; 0 gives the segment alone). Each segment once, cycles included."""
        return retrieve.retrieve_by_reference(self, segment_id, session, max_hops)

    # -- namespaces -------------------------------------------------------------------------------

    def namespaces(self) -> list[Namespace]:
        """Every session (namespace) holding segments, by name, with its segment count and last stash time
        (``contextsieve stash namespaces``)."""
        return [Namespace(s, n, None if t is None else from_epoch(t)) for s, n, t in self.backend.sessions()]

    def rename_namespace(self, old: str, new: str) -> int:
        """Move every segment of namespace ``old`` into ``new`` (merged with those already there; ids,
        references, supersessions, times and protection kept), in one transaction: all or nothing. Returns
        how many moved (0 when ``old`` holds none). An id chosen in ``old`` (a name within it) is the same
        name in ``new``, unless ``new`` has a segment of that name already: then ``new`` shows the moved
        one by its stored id (``name~<mark>``), which its references use too. Other processes on the store
        see the move at their next call. Named values that name a namespace (serve's session items) are
        not moved."""
        old, new = check_session(old), check_session(new)
        if old == new:
            return 0
        return self.backend.rename_session(old, new)

    # -- by id ------------------------------------------------------------------------------------

    def get(
        self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION, missing_ok: bool = False
    ) -> list[ContextSegment]:
        """The segments, in the order asked. Unknown ids (or ids of another session) raise
        :class:`UnknownSegmentError`, or with ``missing_ok=True`` are left out."""
        return records.get(self, segment_ids, session, missing_ok)

    def merge(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION, keep: bool = True) -> MergeResult:
        """The full segments to put back into the active context, and their tokens. ``keep=False``
        also deletes them from the stash (protected ones too: the caller asked for these ids)."""
        return records.merge(self, segment_ids, session, keep)

    def list(
        self,
        *,
        session: str = DEFAULT_SESSION,
        filters: SegmentFilter | Mapping[str, object] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[ContextSegment]:
        """The session's segments matching ``filters``, newest first (``limit`` 1-10000, default 100)."""
        return records.listing(self, session, filters, limit, offset)

    def delete(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        """Delete these segments (protected ones too: deletion by id is explicit); their references
        from and to other segments go with them. Returns how many were deleted."""
        return records.delete(self, segment_ids, session)

    def protect(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        """Mark segments protected: cleanup never removes them and expiry never hides them."""
        return records.set_protected(self, segment_ids, session, True)

    def unprotect(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        """Clear the protected mark of segments (see :meth:`protect`)."""
        return records.set_protected(self, segment_ids, session, False)

    # -- lifecycle --------------------------------------------------------------------------------

    def cleanup_expired(self, *, session: str | None = None, now: datetime | None = None) -> int:
        """Delete unprotected segments whose expiry has passed (in ``session``, or every session
        when None). Returns how many."""
        return maintenance.cleanup_expired(self, session, now)

    def cleanup_old(
        self, max_age: timedelta | float, *, session: str | None = None, now: datetime | None = None
    ) -> int:
        """Delete unprotected segments created more than ``max_age`` ago (a timedelta or days).
        Returns how many."""
        return maintenance.cleanup_old(self, max_age, session, now)

    def stats(self, *, session: str | None = None) -> dict[str, object]:
        """Counts (segments, tokens, protected, sessions, chunk vectors, by type), time range, model
        and search backend, for ``session`` or the whole store."""
        return maintenance.stats(self, session)

    # -- named values ------------------------------------------------------------------------------

    def read_value(self, key: str) -> str | None:
        """A named value kept in the store beside the segments (what every process on the store shares,
        e.g. the MCP server's handle key and session items); None when unset. ``key`` is
        ``NAMESPACE:NAME`` (at most 200 characters)."""
        return self.backend.setting(_value_key(key))

    def write_value(self, key: str, value: str, *, replace: bool = True) -> str:
        """Store a named value (see :meth:`read_value`; at most 1 MB). ``replace=False`` stores it only if
        the key is unset, atomically (two processes racing both get the one value stored). Returns the
        value stored afterwards."""
        if not isinstance(value, str):
            raise InputError(f"a stored value must be a str, got {type(value).__name__}")
        if len(value) > 1_000_000:
            raise InputError(f"a stored value has {len(value)} characters; the limit is 1,000,000")
        return self.backend.put_setting(
            _value_key(key), no_nul(check_text(value, "the value"), "the value"), replace=replace
        )

    # -- model change -----------------------------------------------------------------------------

    def rebuild(self, *, batch: int = 256, show_progress: bool = False) -> int:
        """Re-embed every segment whose vectors are not of this store's embedder (another model, or
        vectors that failed their checksum), ``batch`` segments per transaction. Resumable: a killed
        rebuild goes on where it stopped when run again. Returns how many segments were re-embedded."""
        return maintenance.rebuild(self, batch, show_progress)
