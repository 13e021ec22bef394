"""The stash's upkeep: cleanup (:func:`cleanup_expired`, :func:`cleanup_old`; never protected
segments), :func:`stats`, and :func:`rebuild` (re-embedding every segment whose vectors are not of the
store's model, resumable). Each takes the store's :class:`~contextsieve.stash.core.StashCore`;
:class:`~contextsieve.stash.store.StashStore` documents the calls."""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

from tqdm.auto import tqdm

from contextsieve.errors import InputError, brief
from contextsieve.stash.backend import Filters, SegmentRow, to_epoch
from contextsieve.stash.core import StashCore, check_count, utc_now, with_model
from contextsieve.stash.segment import aware, check_session

__all__ = ["cleanup_expired", "cleanup_old", "stats", "rebuild", "MAX_AGE_DAYS"]

#: Largest ``max_age`` of :func:`cleanup_old`, in days (about 10,000 years: every time a store can hold).
MAX_AGE_DAYS = 3_660_000


def _scope(session: str | None) -> tuple[str, ...] | None:
    return None if session is None else (check_session(session),)


def cleanup_expired(store: StashCore, session: str | None, now: datetime | None) -> int:
    """See :meth:`StashStore.cleanup_expired <contextsieve.stash.store.StashStore.cleanup_expired>`."""
    at = to_epoch(utc_now() if now is None else aware(now, "now"))
    f = Filters(sessions=_scope(session), protected=False)
    return store.backend.delete(store.backend.select_ids(f, expired_before=at))


def cleanup_old(store: StashCore, max_age: timedelta | float, session: str | None, now: datetime | None) -> int:
    """See :meth:`StashStore.cleanup_old <contextsieve.stash.store.StashStore.cleanup_old>`."""
    most = timedelta(days=MAX_AGE_DAYS)
    if isinstance(max_age, (int, float)) and not isinstance(max_age, bool):
        if not 0 <= max_age <= MAX_AGE_DAYS:  # compared as given (NaN fails): float() of a huge int overflows
            raise InputError(f"max_age must be a number of days from 0 to {MAX_AGE_DAYS}, got {brief(max_age)}")
        max_age = timedelta(days=float(max_age))
    if not isinstance(max_age, timedelta) or not timedelta(0) <= max_age <= most:
        raise InputError(f"max_age must be a timedelta or days from 0 to {MAX_AGE_DAYS} days, got {brief(max_age)}")
    at = utc_now() if now is None else aware(now, "now")
    f = Filters(sessions=_scope(session), protected=False)
    try:
        cutoff = to_epoch(at - max_age)
    except (OverflowError, ValueError, OSError):  # before year 1: every segment is younger
        return 0
    return store.backend.delete(store.backend.select_ids(f, created_before=cutoff))


def stats(store: StashCore, session: str | None) -> dict[str, object]:
    """See :meth:`StashStore.stats <contextsieve.stash.store.StashStore.stats>`."""
    out = store.backend.stats(Filters(sessions=_scope(session)))
    meta = store.backend.meta()
    out.update({"model": meta.model, "store": store.backend.location, "backend": store.backend.kind})
    return out


def rebuild(store: StashCore, batch: int, show_progress: bool) -> int:
    """See :meth:`StashStore.rebuild <contextsieve.stash.store.StashStore.rebuild>`."""
    check_count(batch, "batch", 100_000)
    meta = store.backend.meta()
    todo = list(store.backend.stale(store.model_id, batch))
    if not todo and meta.model == store.model_id and meta.dim is not None and meta.rebuild_to is None:
        return 0  # nothing to do, and nothing written (a store this user may only read passes too)
    store.backend.set_meta(meta.model, meta.dim, store.model_id)
    done = 0
    recent: deque[str] = deque(maxlen=batch)
    # at most every segment is stale; a store with none shows no bar at all (not "0/1")
    total = int(str(store.backend.stats(Filters())["segments"])) if todo else 0
    bar = tqdm(total=total, desc="re-embedding", unit="seg", disable=not show_progress or not todo)
    try:
        while True:
            if not todo:
                break
            vectors, _ = store.segment_vectors([s.text for s in todo], [s.type for s in todo], False)
            rows = [SegmentRow(with_model(s, store.model_id, v.shape[0]), v, []) for s, v in zip(todo, vectors)]
            store.backend.replace_vectors(rows)
            recent.extend(s.id for s in todo)
            done += len(todo)
            bar.update(len(todo))
            todo = [s for s in store.backend.stale(store.model_id, batch) if s.id not in recent]
    finally:
        if todo == [] and done:
            bar.total = done  # the segments that were stale, not every segment
            bar.refresh()
        bar.close()
    dim = store.embed(["dimension probe"]).shape[1]
    store.backend.set_meta(store.model_id, dim, None)
    store.rebuilding = False
    return done
