"""The checks of the embedded stash backend's own data (:class:`SqliteChecks`, a base of
:class:`~contextsieve.stash.sqlite.SqliteBackend`): each row's vectors against their digest as the
in-memory table loads them, a lookup's missing ids against the table (a damaged id index), each listing
against the table or the indexes it is read through (a damaged session or creation-time index), and
SQLite's own ``PRAGMA integrity_check``. A failing segment is left out of search with one warning per
store; a damaged index is a StashIntegrityError naming it and ``REINDEX``.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from contextsieve.errors import StashIntegrityError, StashIntegrityWarning
from contextsieve.stash.backend import Filters, vector_digest
from contextsieve.stash.sql import SqlBackend, guarded
from contextsieve.stash.vectors import VectorTable

__all__ = ["SqliteChecks"]

#: The indexes of ``segments`` a listing is read through (a session's, the whole store's in time order)
#: and the columns each holds before the row: checked against the table (:meth:`SqliteChecks._check_indexes`).
_LISTING_INDEXES = {"segments_session_hash": ("session", "sha256"), "segments_created": ("created",)}


class SqliteChecks(SqlBackend):
    """The checks (see the module docstring); the subclass sets what :class:`SqlBackend` asks for, and
    ``corrupt`` (the ids failing a check on load), ``_warned``, ``_indexes_checked``, ``_table`` and
    ``_sync`` (the in-memory table, loaded by a search, and the call that brings it up to date)."""

    corrupt: set[str]
    _warned: bool
    _indexes_checked: bool  # the listing indexes matched the table (checked once, on a listing)
    _table: VectorTable | None

    def _sync(self) -> VectorTable:
        """The in-memory table, brought up to date with every committed write (any process)."""
        raise NotImplementedError

    def _vectors_of(self, r: sqlite3.Row | tuple[Any, ...], dim: int) -> np.ndarray | None:
        """A row's vectors if they match their digest; else None (and the id is marked corrupt)."""
        row_id, seg_id, model, chunks, blob, digest = r
        v = np.frombuffer(blob, dtype=np.float32) if isinstance(blob, bytes) else np.zeros(0, np.float32)
        if v.size == chunks * dim and chunks > 0:
            v = v.reshape(chunks, dim)
            if vector_digest(seg_id, model, v) == digest and bool(np.isfinite(v).all()):
                self.corrupt.discard(seg_id)
                return v
        self._flag(seg_id, "has vectors that fail their checksum")
        return None

    def _flag(self, seg_id: object, what: str) -> None:
        """Mark a segment as failing a check on load (left out of search) and warn once per store."""
        self.corrupt.add(str(seg_id))
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"stash {self.location}: segment {str(seg_id)[:200]!r} {what}; such segments are left out of search "
                "(vectors: `contextsieve stash rebuild` re-embeds them; other fields: reading the segment names it)",
                StashIntegrityWarning,
                stacklevel=6,
            )

    def _check_unindexed(self, ids: Sequence[str]) -> None:
        """See :meth:`SqlBackend._check_unindexed`: a segment the id index does not find but the table
        holds (a flipped bit in its id or in the index) would vanish from every read without a word."""
        for batch in self.dialect.batches(ids):
            cond, args = self.dialect.any_of("id", batch)
            hidden = [r[0] for r in self._db.execute(f"SELECT id FROM segments NOT INDEXED WHERE {cond}", args)]
            if hidden:
                raise StashIntegrityError(
                    f"the stash {self.location} is damaged: segment {str(hidden[0])[:200]!r} is in the table but not "
                    "in its id index (the file was changed outside contextsieve); run `sqlite3 FILE 'REINDEX'` "
                    "or restore the store"
                )

    def _check_listing(self, filters: Filters, ids: list[str], limit: int | None, offset: int) -> None:
        """See :meth:`SqlBackend._check_listing`: a listing is read through an index (a session's through
        the session index, the whole store's through the creation time's), where a flipped bit can hide
        a row, move it or point at another session's without a word. Once a search has loaded the
        in-memory table, the listing is held against it, brought up to date first
        (:meth:`VectorTable.listing_agrees`: one pass over the passing rows in memory). Before that,
        the first listing of the open store checks those indexes against the table once
        (:meth:`_check_indexes`); so does a listing the table disagrees with (another process wrote
        since, or an index is damaged)."""
        if self._table is not None:
            if self._sync().listing_agrees(filters, ids, limit, offset):
                return
        elif self._indexes_checked:
            return
        self._check_indexes()

    def _check_indexes(self) -> None:
        """Compare the entries of the indexes a listing reads through (:data:`_LISTING_INDEXES`) with the
        table's rows, in one snapshot: StashIntegrityError naming the first index that differs. A scan
        of the table and of each index, once per open store while no search has loaded the table (0.5 s at
        100,000 segments, 10 ms at 2,000)."""
        db = self._db
        columns = ["row", *dict.fromkeys(c for cs in _LISTING_INDEXES.values() for c in cs)]
        db.execute("BEGIN")  # one snapshot for every read
        try:
            rows = db.execute(f"SELECT {', '.join(columns)} FROM segments NOT INDEXED").fetchall()
            for name, held in _LISTING_INDEXES.items():
                entry = itemgetter(*[columns.index(c) for c in held], 0)  # an index entry: its columns, the row
                table = Counter(map(entry, rows))
                index = Counter(db.execute(f"SELECT {', '.join(held)}, row FROM segments INDEXED BY {name}"))
                if index != table:
                    row = next(iter((index - table) or (table - index)))[-1]
                    raise StashIntegrityError(
                        f"the stash {self.location} is damaged: its index {name} does not match its table (row "
                        f"{row!r}), so listings would hide or move segments (the file was changed outside "
                        "contextsieve); run `sqlite3 FILE 'REINDEX'` or restore the store"
                    )
        finally:
            db.execute("COMMIT")
        self._indexes_checked = True

    @guarded
    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when the file is sound)."""
        with self.lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])
