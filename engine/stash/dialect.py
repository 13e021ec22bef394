"""How the two stash databases spell the SQL they share, and what a row of it means: a
:class:`Dialect` says how each database spells what differs (placeholders, table names, lists of ids,
booleans, upserts), :func:`where` turns :class:`~contextsieve.stash.backend.Filters` into conditions,
and :func:`segment_of` maps a row of :data:`SEGMENT_COLUMNS` to a
:class:`~contextsieve.stash.segment.ContextSegment` after checking it against its text digest and its
fields check (:func:`checked_fields`). The statements themselves are :mod:`contextsieve.stash.sql`'s
(reads) and :mod:`contextsieve.stash.sql_writes`'s (writes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from contextsieve.errors import StashIntegrityError
from contextsieve.stash.backend import Filters, SegmentFields, fields_check, from_epoch, index_terms
from contextsieve.stash.segment import ContextSegment, SegmentType, content_hash

__all__ = ["Dialect", "where", "segment_of", "checked_fields", "StoredFields", "SEGMENT_COLUMNS"]

_BATCH = 500  # ids per IN (...) list where a dialect has no array parameters

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
    return checked_fields(StoredFields(sid, session, text, kind, created, stashed, tokens, topic, source, sha, expires))


class StoredFields(NamedTuple):
    """A segment's :class:`~contextsieve.stash.backend.SegmentFields` as read from a row, before
    :func:`checked_fields` checks their types (each ``Any``: a row changed on disk may hold anything).
    The same values as :class:`~contextsieve.stash.backend.SegmentFields` (``sid``: its ``segment_id``,
    ``sha``: its ``sha256``; times in microseconds since 1970), but the index terms: ``terms`` is their
    stored space-joined form, or None to derive them from ``text`` (the stored text; None when not read)."""

    sid: Any
    session: Any
    text: Any
    kind: Any
    created: Any
    stashed: Any
    tokens: Any
    topic: Any
    source: Any
    sha: Any
    expires: Any
    terms: Any = None


def checked_fields(stored: StoredFields) -> bytes | None:
    """:func:`fields_check` of ``stored``, values as read (the index terms from ``stored.terms``, or
    else from ``stored.text``); None when a value has a type no written row has."""
    v = stored
    if not all(isinstance(x, str) for x in (v.sid, v.session, v.kind, v.source, v.sha)) or not isinstance(
        v.topic, (str, type(None))
    ):
        return None
    if not all(isinstance(x, int) for x in (v.created, v.stashed, v.tokens)) or not isinstance(
        v.expires, (int, type(None))
    ):
        return None
    terms = v.terms
    if terms is None:
        if not isinstance(v.text, str):
            return None
        terms = " ".join(index_terms(v.text))
    if not isinstance(terms, str):
        return None
    return fields_check(
        SegmentFields(
            v.sid, v.session, v.kind, v.created, v.stashed, v.tokens, v.topic, v.source, v.sha, v.expires, terms
        )
    )
