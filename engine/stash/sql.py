"""The SQL both stash backends run, written once: a :class:`Dialect` says how each database spells
what differs (placeholders, table names, lists of ids, booleans, upserts), :func:`where` turns
:class:`~contextsieve.stash.backend.Filters` into conditions, :func:`segment_of` maps a row to a
:class:`~contextsieve.stash.segment.ContextSegment`, and :class:`SqlBackend` holds the reads and the
statements of the writes. What really differs stays in :mod:`contextsieve.stash.sqlite` (the
connection, ``BEGIN IMMEDIATE`` writes, the change log and the in-memory vector table) and
:mod:`contextsieve.stash.postgres` (pgvector chunks, advisory locks, the BM25 term counts).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from contextsieve.errors import InputError, StashError, StashIntegrityError
from contextsieve.stash.backend import (
    FORMAT,
    UPGRADES,
    Filters,
    SegmentRow,
    StoreMeta,
    fields_check,
    from_epoch,
    index_terms,
    to_epoch,
    vector_digest,
)
from contextsieve.stash.segment import ContextSegment, SegmentType, content_hash

__all__ = ["Dialect", "SqlBackend", "guarded", "reads", "segment_of", "where"]

_BATCH = 500  # ids per IN (...) list where a dialect has no array parameters
_P = ParamSpec("_P")
_R = TypeVar("_R")
_B = TypeVar("_B", bound="SqlBackend")

#: The columns :func:`segment_of` maps, in its order.
SEGMENT_COLUMNS = (
    "id, session, text, type, created, stashed, tokens, topic, source, sha256, model, expires, protected, chunks, "
    "fields, superseded_by"
)


@dataclass(frozen=True)
class Dialect:
    """How one database spells what differs between the backends.

    Attributes:
        mark: the parameter placeholder (``?`` or ``%s``).
        segments / refs / meta: table names.
        true / false: boolean literals (SQLite's booleans are the integers 1 and 0).
        arrays: a list of values is one array parameter (``= ANY(%s)``); else ``IN (?, ...)`` lists
            of at most 500 values, one statement per batch.
        returning: ``UPDATE`` / ``DELETE`` / ``INSERT`` take ``RETURNING`` (else a ``SELECT`` before
            the change, or the cursor's ``lastrowid``: SQLite before 3.35 has no ``RETURNING``).
        lock_row: what follows a ``SELECT`` of a row the transaction is about to change.
        ignore: ``INSERT`` that skips a row whose key is taken (``{table}``, ``{values}``).
        replace: ``INSERT`` that replaces the row of a taken key (``{table}``, ``{values}``, ``{key}``,
            ``{value}``: the key column and the column set again).
        casts: (column, value expression) for the columns written through a function or cast.
    """

    mark: str
    segments: str
    refs: str
    meta: str
    true: str
    false: str
    arrays: bool
    returning: bool
    lock_row: str
    ignore: str
    replace: str
    casts: tuple[tuple[str, str], ...] = ()

    def marks(self, n: int) -> str:
        return ", ".join([self.mark] * n)

    def batches(self, values: Sequence[Any]) -> Iterator[list[Any]]:
        """``values`` in the lists one statement takes (with arrays: all of them, even none)."""
        if self.arrays:
            yield list(values)
            return
        for i in range(0, len(values), _BATCH):
            yield list(values[i : i + _BATCH])

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the condition and its parameters."""
        if self.arrays:
            return f"{column} = ANY({self.mark})", [list(values)]
        if not values:
            return self.false, []
        return f"{column} IN ({self.marks(len(values))})", list(values)

    def value(self, column: str) -> str:
        """The expression a value of ``column`` is written as."""
        return dict(self.casts).get(column, self.mark)

    def insert_ignore(self, table: str, n: int) -> str:
        return self.ignore.format(table=table, values=self.marks(n))

    def upsert(self, table: str, key: str, value: str) -> str:
        return self.replace.format(table=table, values=self.marks(2), key=key, value=value)


def where(d: Dialect, f: Filters, alias: str = "") -> tuple[str, list[Any]]:
    """SQL conditions (ANDed) and parameters for ``f`` over the segments table (columns prefixed by
    ``alias``, e.g. ``"s."``)."""
    p, m = alias, d.mark
    conds: list[str] = []
    args: list[Any] = []
    for column, values in (
        ("session", f.sessions),
        ("type", None if f.types is None else [t.value for t in f.types]),
        ("topic", f.topics),
        ("source", f.sources),
    ):
        if values is not None:
            cond, vals = d.any_of(p + column, list(values))
            conds.append(cond)
            args.extend(vals)
    if f.since is not None:
        conds.append(f"{p}created >= {m}")
        args.append(f.since)
    if f.until is not None:
        conds.append(f"{p}created <= {m}")
        args.append(f.until)
    if f.protected is not None:
        conds.append(f"{p}protected = {m}")
        args.append(f.protected)  # a bool: SQLite binds it as the integer it stores
    if f.alive_at is not None:
        conds.append(f"({p}expires IS NULL OR {p}expires > {m} OR {p}protected = {d.true})")
        args.append(f.alive_at)
    if f.current is not None:
        conds.append(f"{p}superseded_by IS {'' if f.current else 'NOT '}NULL")
    return (" AND ".join(conds) or d.true), args


def segment_of(r: Sequence[Any], references: Sequence[str], referenced_by: Sequence[str]) -> ContextSegment:
    """A segment from a row of :data:`SEGMENT_COLUMNS` and its references both ways."""
    sid, session, text, kind, created, stashed, tokens, topic, source, sha, model, expires, prot, nch, check, newer = r
    if not isinstance(text, str) or content_hash(text) != sha:  # a flipped bit on disk, an edited row
        raise StashIntegrityError(
            f"segment {sid!r} failed its check on read: its text no longer matches its sha256 (the store's "
            "file or table was changed outside contextsieve); delete the segment or restore the store"
        )
    fields = _fields_of(r)
    ok = isinstance(check, bytes) and fields == check and isinstance(model, str) and isinstance(nch, int)
    if not ok or prot not in (0, 1) or not isinstance(newer, (str, type(None))):
        raise StashIntegrityError(
            f"segment {str(sid)[:200]!r} failed its check on read: its fields no longer match the row's check "
            "or hold values of the wrong type (the store's file or table was changed outside contextsieve); "
            "delete the segment or restore the store"
        )
    return ContextSegment(
        id=sid,
        session=session,
        text=text,
        type=SegmentType(kind),
        timestamp=from_epoch(created),
        stashed_at=from_epoch(stashed),
        tokens=int(tokens),
        topic=topic,
        source=source,
        references=tuple(references),
        referenced_by=tuple(sorted(referenced_by)),
        embedding_model=model,
        chunks=int(nch),
        expires_at=None if expires is None else from_epoch(expires),
        protected=bool(prot),
        sha256=sha,
        superseded_by=newer if isinstance(newer, str) else None,
    )


def _fields_of(r: Sequence[Any]) -> bytes | None:
    """:func:`fields_check` of a row of :data:`SEGMENT_COLUMNS` (None when a field has a type no
    written row has: a changed row)."""
    sid, session, text, kind, created, stashed, tokens, topic, source, sha, _model, expires = r[:12]
    return checked_fields(sid, session, text, kind, created, stashed, tokens, topic, source, sha, expires, None)


def checked_fields(
    sid: Any,
    session: Any,
    text: Any,
    kind: Any,
    created: Any,
    stashed: Any,
    tokens: Any,
    topic: Any,
    source: Any,
    sha: Any,
    expires: Any,
    terms: Any,
) -> bytes | None:
    """:func:`fields_check` of stored values as read (the index terms from ``terms``, the stored
    space-joined form, or else from ``text``); None when a value has a type no written row has."""
    if not all(isinstance(x, str) for x in (sid, session, kind, source, sha)) or not isinstance(
        topic, (str, type(None))
    ):
        return None
    if not all(isinstance(x, int) for x in (created, stashed, tokens)) or not isinstance(expires, (int, type(None))):
        return None
    if terms is None:
        if not isinstance(text, str):
            return None
        terms = " ".join(index_terms(text))
    if not isinstance(terms, str):
        return None
    return fields_check(sid, session, kind, created, stashed, tokens, topic, source, sha, expires, terms)


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


class SqlBackend:
    """The reads and write statements both backends share (see the module docstring). A subclass sets
    ``dialect``, ``location``, ``lock`` (held around every statement), ``_db`` (the connection) and
    the driver's exception classes ``_conflict`` (a unique key taken) and ``_failure`` (any other)."""

    dialect: Dialect
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
                sid, session, text, kind, created, stashed, tokens, topic, source, sha, expires, None
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
            return [r[0] for r in self._db.execute(q, args)]

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

    # -- write statements (each backend runs them inside its own transaction) ---------------------

    # Where a backend keeps what the shared columns do not hold: SQLite keeps the vectors in the
    # segment's row (``_stored_vectors``), PostgreSQL in ``stash_chunks`` rows (``_write_chunks``).

    def _stored_vectors(self, v: np.ndarray) -> dict[str, Any]:
        """Columns of the segment's row that hold its float32 vectors ``v`` (none: see _write_chunks)."""
        return {}

    def _stored_terms(self, terms: list[str]) -> dict[str, Any]:
        """Columns of the segment's row that hold its index terms."""
        raise NotImplementedError

    def _write_chunks(self, db: Any, row: int, v: np.ndarray, replace: bool) -> None:
        """Store the vectors of the segment at ``row`` outside it, right after its row is written
        (``replace``: they replace the ones stored)."""

    def _insert_rows(
        self, db: Any, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> tuple[dict[int, str], list[tuple[int, SegmentRow]], list[int]]:
        """Insert the rows and their references (see :meth:`StashBackend.insert`): returns the skipped
        ``{position: stored id}`` and ``(row, SegmentRow)`` of each row written."""
        d, m = self.dialect, self.dialect.mark
        skipped: dict[int, str] = {}
        remap: dict[str, str] = {}
        added: list[tuple[int, SegmentRow]] = []
        for pos, r in enumerate(rows):
            s = r.segment
            if dedup:
                hit = db.execute(
                    f"SELECT id FROM {d.segments} WHERE session = {m} AND sha256 = {m} ORDER BY row LIMIT 1",
                    (s.session, s.sha256),
                ).fetchone()
                if hit is not None:
                    skipped[pos] = remap[s.id] = hit[0]
                    continue
            v = np.ascontiguousarray(r.vectors, dtype=np.float32)
            created, stashed = to_epoch(s.timestamp), to_epoch(s.stashed_at)
            expires = None if s.expires_at is None else to_epoch(s.expires_at)
            columns: dict[str, Any] = {
                "id": s.id,
                "session": s.session,
                "text": s.text,
                "type": s.type.value,
                "created": created,
                "stashed": stashed,
                "tokens": s.tokens,
                "topic": s.topic,
                "source": s.source,
                "sha256": s.sha256,
                "model": s.embedding_model,
                "expires": expires,
                "protected": s.protected,
                "chunks": v.shape[0],
                "digest": vector_digest(s.id, s.embedding_model, v),
                "fields": fields_check(
                    s.id,
                    s.session,
                    s.type.value,
                    created,
                    stashed,
                    s.tokens,
                    s.topic,
                    s.source,
                    s.sha256,
                    expires,
                    " ".join(r.terms),
                ),
                **self._stored_vectors(v),
                **self._stored_terms(r.terms),
            }
            q = f"INSERT INTO {d.segments} ({', '.join(columns)}) VALUES ({', '.join(d.value(c) for c in columns)})"
            if d.returning:
                row = int(db.execute(q + " RETURNING row", list(columns.values())).fetchone()[0])
            else:
                row = int(db.execute(q, list(columns.values())).lastrowid or 0)
            self._write_chunks(db, row, v, False)
            added.append((row, r))
        for pos, r in enumerate(rows):  # references once every row of the batch is in
            s = r.segment
            if pos in skipped:
                continue
            for n, dst in enumerate(dict.fromkeys(remap.get(x, x) for x in s.references)):
                found = db.execute(f"SELECT session FROM {d.segments} WHERE id = {m}", (dst,)).fetchone()
                if found is None or found[0] != s.session:
                    raise InputError(f"segment {s.id!r} refers to {dst!r}, which is not in its session")
                db.execute(d.insert_ignore(d.refs, 3), (s.id, dst, n))
        return skipped, added, self._supersede(db, [(old, remap.get(new, new)) for old, new in supersede])

    def _supersede(self, db: Any, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Mark each old segment of ``pairs`` as superseded by the new one (both stored, one session;
        else InputError); returns the rows changed."""
        d, m = self.dialect, self.dialect.mark
        changed: list[int] = []
        for old, new in pairs:
            if old == new:
                continue  # a segment that duplicates one it supersedes: nothing to mark
            both = {
                i: (row, session, newer)
                for i, row, session, newer in db.execute(
                    f"SELECT id, row, session, superseded_by FROM {d.segments} WHERE id IN ({m}, {m})", (old, new)
                ).fetchall()
            }
            if old not in both or new not in both or both[old][1] != both[new][1]:
                raise InputError(f"segment {new!r} cannot supersede {old!r}: both must be stored in one session")
            if both[old][2] == new:
                continue  # already so (an import run again)
            if both[new][2] is not None:  # so no chain ever loops
                raise InputError(
                    f"segment {new!r} is itself superseded (by {both[new][2]!r}); it cannot supersede others"
                )
            db.execute(f"UPDATE {d.segments} SET superseded_by = {m} WHERE id = {m}", (new, old))
            changed.append(int(both[old][0]))
        return changed

    def _delete_rows(self, db: Any, ids: Sequence[str], returning: str) -> tuple[list[tuple[Any, ...]], list[int]]:
        """Delete these segments and their references both ways; returns the ``returning`` columns
        of each deleted segment, and the rows of the segments they superseded (current again)."""
        d = self.dialect
        gone: list[tuple[Any, ...]] = []
        freed: list[int] = []
        for batch in d.batches(ids):
            cond, args = d.any_of("id", batch)
            if d.returning:
                gone += db.execute(f"DELETE FROM {d.segments} WHERE {cond} RETURNING {returning}", args).fetchall()
            else:
                gone += db.execute(f"SELECT {returning} FROM {d.segments} WHERE {cond}", args).fetchall()
                db.execute(f"DELETE FROM {d.segments} WHERE {cond}", args)
            src, src_args = d.any_of("src", batch)
            dst, dst_args = d.any_of("dst", batch)
            db.execute(f"DELETE FROM {d.refs} WHERE {src} OR {dst}", [*src_args, *dst_args])
            newer, newer_args = d.any_of("superseded_by", batch)
            freed += [int(r[0]) for r in db.execute(f"SELECT row FROM {d.segments} WHERE {newer}", newer_args)]
            db.execute(f"UPDATE {d.segments} SET superseded_by = NULL WHERE {newer}", newer_args)  # current again
        return gone, freed

    def _set_protected(self, db: Any, ids: Sequence[str], protected: bool) -> list[int]:
        """Set the flag of these segments; returns the rows of those stored."""
        d = self.dialect
        rows: list[int] = []
        for batch in d.batches(ids):
            cond, args = d.any_of("id", batch)
            update = f"UPDATE {d.segments} SET protected = {d.mark} WHERE {cond}"
            if d.returning:
                rows += [int(r[0]) for r in db.execute(update + " RETURNING row", [protected, *args])]
            else:
                rows += [int(r[0]) for r in db.execute(f"SELECT row FROM {d.segments} WHERE {cond}", args)]
                db.execute(update, [protected, *args])
        return rows

    def _replace_vectors(self, db: Any, rows: Sequence[SegmentRow]) -> list[int]:
        """Store new vectors and model id of the segments of ``rows`` (those deleted meanwhile are
        skipped); returns the rows changed."""
        d, m = self.dialect, self.dialect.mark
        changed: list[int] = []
        for r in rows:
            s = r.segment
            v = np.ascontiguousarray(r.vectors, dtype=np.float32)
            found = db.execute(f"SELECT row FROM {d.segments} WHERE id = {m}{d.lock_row}", (s.id,)).fetchone()
            if found is None:
                continue  # deleted meanwhile
            row = int(found[0])
            columns = {"model": s.embedding_model, "chunks": v.shape[0], **self._stored_vectors(v)}
            columns["digest"] = vector_digest(s.id, s.embedding_model, v)
            sets = ", ".join(f"{c} = {d.value(c)}" for c in columns)
            db.execute(f"UPDATE {d.segments} SET {sets} WHERE row = {m}", [*columns.values(), row])
            self._write_chunks(db, row, v, True)
            changed.append(row)
        return changed
