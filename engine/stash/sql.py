"""The SQL both stash backends run, written once: :class:`SqlBackend` holds the one guard of driver
errors (:func:`guarded`, :func:`reads`), the store's meta and format upgrade, and the reads; its base
:class:`~contextsieve.stash.sql_writes.SqlWrites` holds the write statements, and
:mod:`contextsieve.stash.dialect` how each database spells them and how a row maps to a segment. What
really differs stays in :mod:`contextsieve.stash.sqlite` (the connection, ``BEGIN IMMEDIATE`` writes,
the change log and the in-memory vector table) and :mod:`contextsieve.stash.postgres` (pgvector chunks,
advisory locks, the BM25 term counts).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from contextsieve.errors import InputError, StashError, StashIntegrityError
from contextsieve.stash.backend import FORMAT, UPGRADES, Filters, StoreMeta, from_epoch
from contextsieve.stash.dialect import SEGMENT_COLUMNS, StoredFields, checked_fields, segment_of, where
from contextsieve.stash.segment import ContextSegment
from contextsieve.stash.sql_writes import SqlWrites

__all__ = ["SqlBackend", "guarded", "reads"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_B = TypeVar("_B", bound="SqlBackend")


def guarded(fn: Callable[Concatenate[_B, _P], _R]) -> Callable[Concatenate[_B, _P], _R]:
    """Run a backend method inside :meth:`SqlBackend._guard` (its driver errors become the project's),
    on a live connection: one that broke since the last call is replaced first (nothing of this call
    has been sent yet, so that is always safe). A write is never retried: if the connection breaks
    during it, the caller gets the error (the server rolls back what it had not committed)."""

    @functools.wraps(fn)
    def run(self: _B, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._guard():
            self._reconnect_if_lost()
            return fn(self, *args, **kwargs)

    return run


def reads(fn: Callable[Concatenate[_B, _P], _R]) -> Callable[Concatenate[_B, _P], _R]:
    """:func:`guarded` for a method that only reads: if the connection is lost during it (a database
    restart, a dropped connection), it runs once more on a fresh one."""

    @functools.wraps(fn)
    def run(self: _B, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for attempt in (1, 2):
            try:
                with self._guard():
                    self._reconnect_if_lost()
                    return fn(self, *args, **kwargs)
            except StashError:
                if attempt == 2 or not self._connection_lost():
                    raise
        raise AssertionError("unreachable")

    return run


def _one(cursor: Any) -> tuple[Any, ...]:
    row = cursor.fetchone()
    if row is None:  # an aggregate always returns a row
        raise StashError("the server returned no row for an aggregate")
    return tuple(row)


class SqlBackend(SqlWrites):
    """The reads both backends share, and through :class:`~contextsieve.stash.sql_writes.SqlWrites` the
    write statements (see the module docstring). A subclass sets ``dialect``, ``location``, ``lock``
    (held around every statement), ``_db`` (the connection) and the driver's exception classes
    ``_conflict`` (a unique key taken) and ``_failure`` (any other)."""

    location: str
    lock: threading.RLock
    _db: Any
    _conflict: type[Exception]
    _failure: type[Exception]

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """The one place the driver's exceptions become the project's (the cause kept)."""
        try:
            yield
        except self._conflict as e:
            raise InputError(f"the stash {self.location} refused the write: {e}") from e
        except self._failure as e:
            raise StashError(f"stash {self.location}: {e}") from e
        except UnicodeDecodeError as e:  # a stored text whose bytes were changed into invalid UTF-8
            raise StashIntegrityError(f"stash {self.location}: a stored text is not valid UTF-8 ({e.reason})") from e

    def _connection_lost(self) -> bool:
        """Whether the connection broke (a database restart): the next call opens a new one."""
        return False

    def _reconnect_if_lost(self) -> None:
        """Replace a lost connection (no-op where connections cannot be lost, as SQLite's file)."""

    def _where(self, f: Filters, alias: str = "") -> tuple[str, list[Any]]:
        return where(self.dialect, f, alias)

    def _search_stats(self) -> tuple[str, int]:
        """``stats``' ``search`` (how dense search runs) and ``failed_checksum``."""
        raise NotImplementedError

    # -- meta -------------------------------------------------------------------------------------

    def _format(self, db: Any) -> Any:
        """The row ``(value,)`` of the store's format tag, None when it has none."""
        return db.execute(f"SELECT value FROM {self.dialect.meta} WHERE key = 'format'").fetchone()

    def _write_format(self, db: Any, fmt: str) -> None:
        """Record the format tag unless the store has one."""
        db.execute(self.dialect.insert_ignore(self.dialect.meta, 2), ("format", fmt))

    def _upgrade(self, db: Any, found: str) -> str:
        """Bring a store of an older format in :data:`UPGRADES` to :data:`FORMAT` inside ``db``'s write
        transaction (the caller holds it; a failure rolls everything back and the store stays as it
        was). Returns the format the store has afterwards. From format 3: float seconds become integer
        microseconds (rounded: what float seconds kept) and every row gets its fields check."""
        if found not in UPGRADES:
            return found
        d, m = self.dialect, self.dialect.mark
        self._integer_times(db)
        rows = db.execute(
            f"SELECT row, id, session, text, type, created, stashed, tokens, topic, source, sha256, expires "
            f"FROM {d.segments}"
        ).fetchall()
        for row, sid, session, text, kind, created, stashed, tokens, topic, source, sha, expires in rows:
            check = checked_fields(
                StoredFields(sid, session, text, kind, created, stashed, tokens, topic, source, sha, expires)
            )
            db.execute(f"UPDATE {d.segments} SET fields = {m} WHERE row = {m}", (check, row))
        self._fields_required(db)
        db.execute(d.upsert(d.meta, "key", "value"), ("format", FORMAT))
        return FORMAT

    def _integer_times(self, db: Any) -> None:
        """Format 3 -> 4, the part each database spells its own way: the time columns become 64-bit
        integers of microseconds (``round(seconds * 1e6)``) and a nullable ``fields`` column is added."""
        raise NotImplementedError

    def _fields_required(self, db: Any) -> None:
        """After :meth:`_upgrade` filled it: make ``fields`` NOT NULL where the database can."""

    @reads
    def meta(self) -> StoreMeta:
        q = f"SELECT key, value FROM {self.dialect.meta} WHERE key IN ('model', 'dim', 'rebuild_to')"
        with self.lock:
            d: dict[str, str] = dict(self._db.execute(q).fetchall())
        return StoreMeta(d.get("model"), int(d["dim"]) if d.get("dim") else None, d.get("rebuild_to"))

    @reads
    def setting(self, key: str) -> str | None:
        """See :meth:`StashBackend.setting`."""
        d = self.dialect
        with self.lock:
            row = self._db.execute(f"SELECT value FROM {d.meta} WHERE key = {d.mark}", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _put_setting(self, db: Any, key: str, value: str, replace: bool) -> str:
        """Write one setting in ``db``'s transaction; the value stored afterwards."""
        d = self.dialect
        db.execute(d.upsert(d.meta, "key", "value") if replace else d.insert_ignore(d.meta, 2), (key, value))
        return str(_one(db.execute(f"SELECT value FROM {d.meta} WHERE key = {d.mark}", (key,)))[0])

    def _write_meta(self, db: Any, model: str | None, dim: int | None, rebuild_to: str | None) -> None:
        d = self.dialect
        for key, value in (("model", model), ("dim", dim), ("rebuild_to", rebuild_to)):
            if value is None:
                db.execute(f"DELETE FROM {d.meta} WHERE key = {d.mark}", (key,))
            else:
                db.execute(d.upsert(d.meta, "key", "value"), (key, str(value)))

    # -- reads ------------------------------------------------------------------------------------

    @reads
    def sessions_of(self, ids: Sequence[str]) -> dict[str, str]:
        d = self.dialect
        out: dict[str, str] = {}
        with self.lock:
            for batch in d.batches(ids):
                cond, args = d.any_of("id", batch)
                out.update(self._db.execute(f"SELECT id, session FROM {d.segments} WHERE {cond}", args).fetchall())
        return out

    @reads
    def successors(self, ids: Sequence[str]) -> dict[str, str]:
        """See :meth:`StashBackend.successors`."""
        d = self.dialect
        out: dict[str, str] = {}
        with self.lock:
            for batch in d.batches(ids):
                cond, args = d.any_of("id", batch)
                q = f"SELECT id, superseded_by FROM {d.segments} WHERE {cond} AND superseded_by IS NOT NULL"
                out.update(self._db.execute(q, args).fetchall())
        return out

    @reads
    def by_hash(self, session: str, hashes: Sequence[str]) -> dict[str, str]:
        d = self.dialect
        out: dict[str, str] = {}
        with self.lock:
            for batch in d.batches(hashes):
                cond, args = d.any_of("sha256", batch)
                q = f"SELECT sha256, id FROM {d.segments} WHERE session = {d.mark} AND {cond} ORDER BY row DESC"
                out.update(self._db.execute(q, [session, *args]).fetchall())  # the oldest row comes last: it wins
        return out

    def _segments(self, condition: str, args: Sequence[Any]) -> list[ContextSegment]:
        """The segments of ``SELECT ... WHERE condition`` (which may end in ORDER BY / LIMIT), with
        their references; the caller holds the lock."""
        d = self.dialect
        rows = self._db.execute(f"SELECT {SEGMENT_COLUMNS} FROM {d.segments} WHERE {condition}", list(args)).fetchall()
        ids = [r[0] for r in rows]
        refs: dict[str, list[str]] = {i: [] for i in ids}
        back: dict[str, list[str]] = {i: [] for i in ids}
        older: dict[str, list[str]] = {i: [] for i in ids}  # the segments each one superseded
        for batch in d.batches(ids):
            src, src_args = d.any_of("src", batch)
            for a, b in self._db.execute(f"SELECT src, dst FROM {d.refs} WHERE {src} ORDER BY src, pos", src_args):
                refs[a].append(b)
            dst, dst_args = d.any_of("dst", batch)
            for a, b in self._db.execute(f"SELECT src, dst FROM {d.refs} WHERE {dst}", dst_args):
                back[b].append(a)
            newer, newer_args = d.any_of("superseded_by", batch)
            for a, b in self._db.execute(f"SELECT id, superseded_by FROM {d.segments} WHERE {newer}", newer_args):
                older[b].append(a)
        return [
            dataclasses.replace(segment_of(r, refs[r[0]], back[r[0]]), supersedes=tuple(sorted(older[r[0]])))
            if older[r[0]]
            else segment_of(r, refs[r[0]], back[r[0]])
            for r in rows
        ]

    @reads
    def get(self, ids: Sequence[str]) -> list[ContextSegment]:
        found: dict[str, ContextSegment] = {}
        with self.lock:
            for batch in self.dialect.batches(ids):
                found.update((s.id, s) for s in self._segments(*self.dialect.any_of("id", batch)))
            missing = [i for i in ids if i not in found]
            if missing:
                self._check_unindexed(missing)
        return [found[i] for i in ids if i in found]

    def _check_unindexed(self, ids: Sequence[str]) -> None:
        """Called with ids a lookup did not find (the lock held): a backend whose index can disagree
        with its table after damage raises StashIntegrityError when the table holds any of them."""

    def _stale(self, model: str, limit: int) -> list[ContextSegment]:
        """Up to ``limit`` segments whose vectors are not of ``model``, oldest first (lock held)."""
        m = self.dialect.mark
        return self._segments(f"model <> {m} ORDER BY row LIMIT {m}", [model, limit])

    @reads
    def references(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        d = self.dialect
        out: dict[str, list[str]] = {}
        with self.lock:
            for batch in d.batches(ids):
                cond, args = d.any_of("src", batch)
                for src, dst in self._db.execute(f"SELECT src, dst FROM {d.refs} WHERE {cond} ORDER BY src, pos", args):
                    out.setdefault(src, []).append(dst)
        return {k: tuple(v) for k, v in out.items()}

    @reads
    def select_ids(
        self,
        filters: Filters,
        *,
        expired_before: int | None = None,
        created_before: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        d, m = self.dialect, self.dialect.mark
        cond, args = self._where(filters)
        if expired_before is not None:
            cond += f" AND expires IS NOT NULL AND expires <= {m}"
            args.append(expired_before)
        if created_before is not None:
            cond += f" AND created < {m}"
            args.append(created_before)
        q = f"SELECT id FROM {d.segments} WHERE {cond} ORDER BY created DESC, row DESC"
        if limit is not None:
            q += f" LIMIT {m} OFFSET {m}"
            args.extend([limit, offset])
        with self.lock:
            ids = [r[0] for r in self._db.execute(q, args)]
            if expired_before is None and created_before is None:  # a listing (a session's, an export's)
                self._check_listing(filters, ids, limit, offset)
            return ids

    def _check_listing(self, filters: Filters, ids: list[str], limit: int | None, offset: int) -> None:
        """Called with a listing (:meth:`select_ids` without a time bound; the lock held) as read through
        the indexes the database chose: a backend whose indexes can disagree with its table after
        damage raises StashIntegrityError when one hides, adds or moves a row (see the embedded
        backend's)."""

    @reads
    def sessions(self) -> list[tuple[str, int, int | None]]:
        with self.lock:
            rows = self._db.execute(
                f"SELECT session, count(*), max(stashed) FROM {self.dialect.segments} GROUP BY session ORDER BY session"
            ).fetchall()
        return [(str(s), int(n), None if t is None else int(t)) for s, n, t in rows]

    @reads
    def stats(self, filters: Filters) -> dict[str, object]:
        d = self.dialect
        cond, args = self._where(filters)
        with self.lock:
            n, tokens, prot, oldest, newest, chunks, sessions = _one(
                self._db.execute(
                    f"SELECT count(*), coalesce(sum(tokens), 0), count(CASE WHEN protected = {d.true} THEN 1 END), "
                    "min(created), max(created), coalesce(sum(chunks), 0), count(DISTINCT session) "
                    f"FROM {d.segments} WHERE {cond}",
                    args,
                )
            )
            by_type: dict[str, int] = dict(
                self._db.execute(f"SELECT type, count(*) FROM {d.segments} WHERE {cond} GROUP BY type", args)
            )
            search, failed = self._search_stats()
        return {
            "segments": int(n),
            "tokens": int(tokens),
            "protected": int(prot),
            "sessions": int(sessions),
            "chunk_vectors": int(chunks),
            "by_type": {str(k): int(v) for k, v in sorted(by_type.items())},
            "oldest": from_epoch(oldest).isoformat() if oldest is not None else None,
            "newest": from_epoch(newest).isoformat() if newest is not None else None,
            "search": search,
            "failed_checksum": failed,
        }
