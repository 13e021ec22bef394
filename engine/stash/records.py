"""Segments by id and by listing: :func:`get`, :func:`merge` (hand segments back for the active
context), :func:`listing` (newest first, filtered), :func:`delete` and :func:`set_protected`, each
within the caller's session. Each takes the store's :class:`~contextsieve.stash.core.StashCore`;
:class:`~contextsieve.stash.store.StashStore` documents the calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contextsieve.errors import InputError, brief
from contextsieve.stash.core import StashCore, check_count
from contextsieve.stash.ids import shown
from contextsieve.stash.options import SegmentFilter
from contextsieve.stash.results import MergeResult
from contextsieve.stash.segment import ContextSegment, check_ids, check_session

__all__ = ["get", "merge", "listing", "delete", "set_protected", "MAX_OFFSET"]

#: Largest ``offset`` of a listing (SQLite integers are 64-bit).
MAX_OFFSET = 2**62


def get(store: StashCore, segment_ids: Sequence[str], session: str, missing_ok: bool) -> list[ContextSegment]:
    """See :meth:`StashStore.get <contextsieve.stash.store.StashStore.get>`."""
    store.check_usable()
    session = check_session(session)
    if not missing_ok:
        return [shown(x) for x in store.backend.get(store.owned(segment_ids, session))]
    wanted = check_ids([segment_ids] if isinstance(segment_ids, str) else segment_ids, "segment_ids")
    stored = list(store.resolve(wanted, session).values())
    found = store.backend.sessions_of(stored) if stored else {}
    return [shown(x) for x in store.backend.get([i for i in stored if found.get(i) == session])]


def merge(store: StashCore, segment_ids: Sequence[str], session: str, keep: bool) -> MergeResult:
    """See :meth:`StashStore.merge <contextsieve.stash.store.StashStore.merge>`."""
    store.check_usable()
    if not isinstance(keep, bool):
        raise InputError(f"keep must be true or false, got {brief(keep)}")
    session = check_session(session)
    ids = store.owned(segment_ids, session)
    segs = store.backend.get(ids)
    if not keep:
        store.backend.delete(ids)
    return MergeResult(tuple(shown(x) for x in segs), sum(x.tokens for x in segs), not keep)


def listing(
    store: StashCore, session: str, filters: SegmentFilter | Mapping[str, object] | None, limit: int, offset: int
) -> list[ContextSegment]:
    """See :meth:`StashStore.list <contextsieve.stash.store.StashStore.list>`."""
    store.check_usable()
    session = check_session(session)
    lim = check_count(limit, "limit", 10_000)
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise InputError(f"offset must be an int from 0 to {MAX_OFFSET}, got {brief(offset)}")
    f = SegmentFilter.coerce(filters).resolve((session,), None)
    return [shown(x) for x in store.backend.get(store.backend.select_ids(f, limit=lim, offset=offset))]


def delete(store: StashCore, segment_ids: Sequence[str], session: str) -> int:
    """See :meth:`StashStore.delete <contextsieve.stash.store.StashStore.delete>`."""
    session = check_session(session)
    return store.backend.delete(store.owned(segment_ids, session))


def set_protected(store: StashCore, segment_ids: Sequence[str], session: str, protected: bool) -> int:
    """See :meth:`StashStore.protect <contextsieve.stash.store.StashStore.protect>`."""
    session = check_session(session)
    return store.backend.set_protected(store.owned(segment_ids, session), protected)
