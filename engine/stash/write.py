"""The stash's writes: :func:`stash` (validation, redaction, session-scoped ids, exact and near
duplicates, references, supersessions and their proposals, then one transaction), and the writes
import and migration use (:func:`add_segments`, :func:`add_supersessions`). Each takes the store's
:class:`~contextsieve.stash.core.StashCore`; :class:`~contextsieve.stash.store.StashStore` documents
the calls."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from contextsieve.errors import InputError, brief
from contextsieve.stash.backend import Filters, SegmentRow, index_terms
from contextsieve.stash.core import PROGRESS_PART, Progress, StashCore, utc_now, with_model
from contextsieve.stash.ids import new_id, public_id, qualified
from contextsieve.stash.redact import redact
from contextsieve.stash.results import StashResult
from contextsieve.stash.segment import (
    CheckedSegment,
    ContextSegment,
    NewSegment,
    check_segment,
    check_session,
    content_hash,
)

__all__ = ["stash", "add_segments", "add_supersessions"]


@dataclass
class _Plan:
    checked: list[CheckedSegment] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # final id per input (stored id for duplicates)
    new: list[int] = field(default_factory=list)  # inputs to store


def stash(
    store: StashCore,
    segments: Iterable[object],
    session: str,
    show_progress: bool,
    progress: Progress | None,
) -> StashResult:
    """See :meth:`StashStore.stash <contextsieve.stash.store.StashStore.stash>`."""
    store.check_usable()
    session = check_session(session)
    if isinstance(segments, (str, bytes, Mapping, NewSegment)):
        segments = [segments]
    if not isinstance(segments, Iterable):
        raise InputError(f"segments must be a segment or a list of them, got {brief(segments)}")
    items = list(segments)
    if not items:
        return StashResult((), 0, 0, 0)
    now = utc_now()
    plan = _Plan()
    secrets: Counter[str] = Counter()
    for i, raw in enumerate(items):
        given_seg = NewSegment.coerce(raw, f"segments[{i}]")
        checked = check_segment(given_seg, f"segments[{i}]", now, store.config.max_segment_chars)
        if store.config.redact:  # before anything is hashed, embedded or stored
            r = redact(checked.text)
            if r.counts:
                secrets.update(r.counts)
                checked = dataclasses.replace(checked, text=r.text, sha256=content_hash(r.text))
        plan.checked.append(checked)
    given = [c.id for c in plan.checked if c.id is not None]
    if len(set(given)) != len(given):
        raise InputError("two segments of the batch have the same id")
    mine = {g: qualified(session, g) for g in given}  # chosen ids are names within the session
    taken = store.backend.sessions_of(list(mine.values()))
    if taken:
        used = sorted(g for g, q in mine.items() if q in taken)
        raise InputError(f"segment ids already in use in session {session!r}: {used[:5]}")
    seen: dict[str, str] = {}
    stored = store.backend.by_hash(session, [c.sha256 for c in plan.checked]) if store.config.dedup else {}
    alias: dict[str, str] = {}  # given id of a duplicate -> the id it resolves to
    for i, c in enumerate(plan.checked):
        dup = (stored.get(c.sha256) or seen.get(c.sha256)) if store.config.dedup else None
        if dup is not None:
            plan.ids.append(dup)
            if c.id is not None:
                alias[mine[c.id]] = dup
            continue
        sid = mine[c.id] if c.id is not None else new_id()
        plan.ids.append(sid)
        plan.new.append(i)
        seen[c.sha256] = sid
    batch_ids = {plan.ids[i] for i in plan.new}
    named = {r for c in plan.checked for r in c.references}
    stored_refs = store.resolve([r for r in named if r not in mine], session)
    ref_of = {**stored_refs, **mine}  # public reference -> stored id
    outside = sorted({alias.get(ref_of[r], ref_of[r]) for r in named} - batch_ids - set(alias.values()))
    if outside:
        found = store.backend.sessions_of(outside)
        missing = [public_id(r, session) for r in outside if found.get(r) != session]
        if missing:
            raise InputError(f"references to segments not in session {session!r}: {missing[:5]}")
    supersede = _supersessions(store, plan, mine, alias, session)
    texts = [plan.checked[i].text for i in plan.new]
    types = [plan.checked[i].type for i in plan.new]
    vectors, tokens = store.segment_vectors(texts, types, show_progress, progress)
    if store.config.near_duplicate is not None:
        plan, vectors, tokens = _near_duplicates(store, plan, vectors, tokens, session)
    proposals = _proposals(store, plan, vectors, session, supersede)
    rows: list[SegmentRow] = []
    for j, i in enumerate(plan.new):
        c = plan.checked[i]
        seg = ContextSegment(
            id=plan.ids[i],
            session=session,
            text=c.text,
            type=c.type,
            timestamp=c.timestamp,
            stashed_at=now,
            tokens=tokens[j],
            topic=c.topic,
            source=c.source,
            references=tuple(dict.fromkeys(alias.get(ref_of[r], ref_of[r]) for r in c.references)),
            referenced_by=(),
            embedding_model=store.model_id,
            chunks=int(vectors[j].shape[0]),
            expires_at=c.expires_at,
            protected=c.protected,
            sha256=c.sha256,
        )
        rows.append(SegmentRow(seg, vectors[j], index_terms(c.text)))
    skipped = store.insert(rows, store.config.dedup, supersede)
    raced = {rows[pos].segment.id: existing for pos, existing in skipped.items()}
    ids = [public_id(raced.get(i, i), session) for i in plan.ids]
    new_ids = {r.segment.id for p, r in enumerate(rows) if p not in skipped}
    new_tokens = sum(r.segment.tokens for p, r in enumerate(rows) if p not in skipped)
    close = {public_id(n, session): public_id(o, session) for n, o in proposals.items() if n in new_ids}
    return StashResult(tuple(ids), len(new_ids), len(items) - len(new_ids), new_tokens, dict(secrets), close)


def _proposals(
    store: StashCore, plan: _Plan, vectors: list[np.ndarray], session: str, supersede: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """``{new stored id: stored id}`` of :attr:`~contextsieve.stash.config.StashConfig.propose_supersede`
    (before the write)."""
    threshold = store.config.propose_supersede
    if threshold is None or not plan.new:
        return {}
    already = set(supersede)
    out: dict[str, str] = {}
    current = Filters(sessions=(session,), current=True)
    for j, i in enumerate(plan.new):
        for hit in store.backend.dense(vectors[j][:1], 1, current):
            if hit.score >= threshold and (hit.id, plan.ids[i]) not in already:
                out[plan.ids[i]] = hit.id
    return out


def _supersessions(
    store: StashCore, plan: _Plan, mine: Mapping[str, str], alias: Mapping[str, str], session: str
) -> list[tuple[str, str]]:
    """``(old stored id, new stored id)`` of each ``supersedes`` of the batch: the old ones are
    stored segments of the session or segments of the batch (by their given id); a segment that
    is a duplicate of a stored one makes that one supersede them. InputError names any other."""
    named = {r for c in plan.checked for r in c.supersedes}
    if not named:
        return []
    old_of = {**store.resolve([r for r in named if r not in mine], session), **mine}
    batch = set(plan.ids)
    outside = sorted({old_of[r] for r in named} - batch)
    found = store.backend.sessions_of(outside) if outside else {}
    missing = [public_id(r, session) for r in outside if found.get(r) != session]
    if missing:
        raise InputError(f"supersedes segments not in session {session!r}: {missing[:5]}")
    pairs: list[tuple[str, str]] = []
    for i, c in enumerate(plan.checked):
        for r in c.supersedes:
            old = alias.get(old_of[r], old_of[r])
            if old != plan.ids[i]:
                pairs.append((old, plan.ids[i]))
    return list(dict.fromkeys(pairs))


def add_supersessions(store: StashCore, pairs: Sequence[tuple[str, str]]) -> None:
    """See :meth:`StashStore.add_supersessions <contextsieve.stash.store.StashStore.add_supersessions>`."""
    store.check_usable()
    pairs = [(str(a), str(b)) for a, b in pairs]
    if pairs:
        store.insert([], False, pairs)


def add_segments(
    store: StashCore,
    segments: Sequence[ContextSegment],
    show_progress: bool,
    vectors: Mapping[str, np.ndarray] | None,
) -> None:
    """See :meth:`StashStore.add_segments <contextsieve.stash.store.StashStore.add_segments>`."""
    store.check_usable()
    given = vectors or {}
    bar = tqdm(total=len(segments), desc="writing", unit="segment", disable=not show_progress)
    try:
        for lo in range(0, len(segments), PROGRESS_PART):
            part = segments[lo : lo + PROGRESS_PART]
            todo = [x for x in part if x.id not in given]
            fresh, _ = (
                store.segment_vectors([x.text for x in todo], [x.type for x in todo], False) if todo else ([], [])
            )
            made = dict(zip((x.id for x in todo), fresh))
            vectors_of = [given[x.id] if x.id in given else made[x.id] for x in part]
            tokens = store.embedder.count_tokens([x.text for x in part])
            rows = [
                SegmentRow(
                    dataclasses.replace(with_model(x, store.model_id, int(v.shape[0])), tokens=n),
                    v,
                    index_terms(x.text),
                )
                for x, v, n in zip(part, vectors_of, tokens)
            ]
            store.insert(rows, False)
            bar.update(len(part))
    finally:
        bar.close()


def _near_duplicates(
    store: StashCore, plan: _Plan, vectors: list[np.ndarray], tokens: list[int], session: str
) -> tuple[_Plan, list[np.ndarray], list[int]]:
    threshold = store.config.near_duplicate
    assert threshold is not None
    keep_new: list[int] = []
    keep_vec: list[np.ndarray] = []
    keep_tok: list[int] = []
    filters = Filters(sessions=(session,))
    for j, i in enumerate(plan.new):
        hits = store.backend.dense(vectors[j][:1], 1, filters)
        twin = hits[0].id if hits and hits[0].score >= threshold else None
        if twin is None:
            for jj, v in zip(keep_new, keep_vec):
                if float(v[0] @ vectors[j][0]) >= threshold:
                    twin = plan.ids[jj]
                    break
        if twin is not None:
            plan.ids[i] = twin
            continue
        keep_new.append(i)
        keep_vec.append(vectors[j])
        keep_tok.append(tokens[j])
    plan.new = keep_new
    return plan, keep_vec, keep_tok
