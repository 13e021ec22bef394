"""The stash's retrieval: :func:`retrieve_traced` (checks the arguments, embeds the query, then ranks
the dense and keyword candidates in one read scope, see :mod:`contextsieve.stash.ranking`) with the
trace of every candidate it ranked, and :func:`retrieve_by_reference` (a breadth-first walk of
references). Each takes the store's :class:`~contextsieve.stash.core.StashCore`;
:class:`~contextsieve.stash.store.StashStore` documents the calls."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from contextsieve.errors import InputError, brief
from contextsieve.stash.backend import Filters, query_terms, to_epoch
from contextsieve.stash.core import StashCore, check_count, utc_now
from contextsieve.stash.ids import public_id, shown
from contextsieve.stash.names import name_share, names_speaker, query_names, speaker_labels, without_names
from contextsieve.stash.options import RetrieveOptions, SegmentFilter
from contextsieve.stash.ranking import combined_scores, unnamed_query
from contextsieve.stash.results import Candidate, Retrieved, RetrieveTrace
from contextsieve.stash.segment import ContextSegment, aware, check_session

__all__ = ["retrieve_traced", "retrieve_by_reference"]


def _sessions(session: str, cross_session: bool) -> tuple[str, ...] | None:
    if not isinstance(cross_session, bool):
        raise InputError(f"cross_session must be true or false, got {brief(cross_session)}")
    return None if cross_session else (session,)


def retrieve_traced(store: StashCore, query: str, options: RetrieveOptions) -> tuple[list[Retrieved], RetrieveTrace]:
    """See :meth:`StashStore.retrieve_traced <contextsieve.stash.store.StashStore.retrieve_traced>`
    (``options``: :meth:`RetrieveOptions.given`)."""
    o = options
    store.check_usable()
    session = check_session(o.session)
    k = check_count(o.top_k, "top_k")
    min_similarity = o.min_similarity
    if isinstance(min_similarity, bool) or not isinstance(min_similarity, (int, float)):
        raise InputError(f"min_similarity must be a number, got {brief(min_similarity)}")
    if not -1 <= min_similarity <= 1:  # compared as given: float() of a huge int overflows
        raise InputError(f"min_similarity must be in [-1, 1], got {brief(min_similarity)}")
    when = utc_now() if o.now is None else aware(o.now, "now")
    at = to_epoch(when)
    if not isinstance(o.include_superseded, bool):
        raise InputError(f"include_superseded must be true or false, got {brief(o.include_superseded)}")
    current = None if o.include_superseded else True  # the newest of each supersession chain only
    f = SegmentFilter.coerce(o.filters).resolve(_sessions(session, o.cross_session), at, current)
    q = store.embed_query(query, o.query_vectors)  # before the read scope: embedding never holds the store's lock
    rank = store.config.rank
    terms = query_terms(query, rank.drop_query_auxiliaries) if rank.keyword_weight > 0 else []
    uses_names = rank.name_weight > 0 or rank.speaker_weight > 0 or rank.unnamed_weight > 0
    names = query_names(query) if uses_names else ()
    unnamed = without_names(query, names) if names and rank.unnamed_weight > 0 else query
    q_un = unnamed_query(q, store.embed_query(unnamed), rank.unnamed_weight) if unnamed != query else None
    with store.backend.reading():  # one state of the store for every search and read below
        found, trace = _ranked(store, q, q_un, terms, names, k, float(min_similarity), f, at)
    out = [dataclasses.replace(r, segment=shown(r.segment)) for r in found]
    cands = tuple(dataclasses.replace(c, segment_id=public_id(c.segment_id, session)) for c in trace.candidates)
    return out, dataclasses.replace(trace, candidates=cands)


def _ranked(
    store: StashCore,
    q: np.ndarray,
    q_un: np.ndarray | None,
    terms: list[str],
    names: tuple[str, ...],
    k: int,
    min_similarity: float,
    f: Filters,
    at: int,
) -> tuple[list[Retrieved], RetrieveTrace]:
    """The ``k`` best segments for the query rows ``q``, keyword ``terms`` and ``names``
    (:func:`~contextsieve.stash.names.query_names`), and the trace (see :func:`retrieve_traced`).
    ``q_un``: the rows of the query moved towards the query without its names
    (:func:`~contextsieve.stash.ranking.unnamed_query`), searched too and ranked by when the query
    names the speaker of one of the candidates found with ``q``; None: the query has no names.
    Texts are read for the winners only, or for every candidate when the query has names."""
    rank = store.config.rank
    n = max(rank.candidates, k)
    dense = {h.id: h.score for h in store.backend.dense(q, n, f)}
    dense_un = {h.id: h.score for h in store.backend.dense(q_un, n, f)} if q_un is not None else {}
    hits = (
        store.backend.keyword(terms, n, f, also=[*dense, *dense_un], b=rank.keyword_length_norm)
        if rank.keyword_weight > 0
        else []
    )
    kw = {h.id: h.score for h in hits}  # the best n first, then the scores of the other dense candidates
    first = list(dict.fromkeys([*dense, *(h.id for h in hits[:n])]))  # the query as asked finds these
    missing = [i for i in first if i not in dense]
    if missing:
        dense.update(store.backend.similarities(q, missing))
    pool = list(dict.fromkeys([*first, *dense_un]))
    facts = store.backend.ranking_facts(pool)  # times and hashes only: texts are read for the winners
    read = {s.id: s for s in store.backend.get([i for i in pool if i in facts])} if names else {}
    spoken = {i: names_speaker(names, speaker_labels(r.text, r.source, r.topic)) for i, r in read.items()}
    sims: dict[str, float] = dense
    if q_un is not None and any(spoken.get(i, False) for i in first):  # the query names a candidate's speaker
        rest = [i for i in pool if i not in dense_un]
        if rest:
            dense_un.update(store.backend.similarities(q_un, rest))
        sims = dense_un
    else:
        pool = first
    kw = {i: v for i, v in kw.items() if i in pool}
    ids = [i for i in pool if sims.get(i, -math.inf) >= min_similarity]
    low = [i for i in pool if sims.get(i, -math.inf) < min_similarity]
    if not ids:
        return [], _trace(k, min_similarity, len(pool), [], low, sims, kw)
    ids = [i for i in ids if i in facts]
    sim = np.array([sims.get(i, 0.0) for i in ids])
    key = np.array([kw.get(i, 0.0) for i in ids])
    created = np.array([facts[i][0] for i in ids], np.int64)
    stashed = np.array([facts[i][1] for i in ids], np.int64)
    shares = np.array([name_share(read[i].text, names) if i in read else 0.0 for i in ids]) if names else None
    speakers = np.array([1.0 if spoken.get(i) else 0.0 for i in ids]) if names else None
    parts = combined_scores(sim, key, created, stashed, at, rank, shares, speakers)
    scores, kw_norm, dense_part, kw_part = parts.total, parts.keyword_scaled, parts.dense, parts.keyword
    order = sorted(range(len(ids)), key=lambda j: (-scores[j], -sim[j], ids[j]))
    chosen: list[int] = []
    seen: set[str] = set()
    outcome: dict[int, str] = {}
    for j in order:
        sha = facts[ids[j]][2]
        if len(chosen) == k:
            outcome[j] = "below top_k"
        elif sha in seen:  # the same content stashed in several sessions
            outcome[j] = "duplicate"
        else:
            seen.add(sha)
            chosen.append(j)
            outcome[j] = "retrieved"
    segs = read or {s.id: s for s in store.backend.get([ids[j] for j in chosen])}
    ranked = [
        Candidate(ids[j], float(sim[j]), float(kw_norm[j]), float(scores[j]), r, outcome[j])
        for r, j in enumerate(order, 1)
    ]
    found = [
        Retrieved(
            segs[ids[j]],
            float(sim[j]),
            float(kw_norm[j]),
            float(scores[j]),
            {
                "dense": float(dense_part[j]),
                "keyword": float(kw_part[j]),
                "day": float(parts.day[j]),
                "names": float(parts.names[j]),
                "speaker": float(parts.speaker[j]),
                "recency": float(
                    scores[j] - dense_part[j] - kw_part[j] - parts.day[j] - parts.names[j] - parts.speaker[j]
                ),
            },
        )
        for j in chosen
        if ids[j] in segs
    ]
    return found, _trace(k, min_similarity, len(pool), ranked, low, sims, kw)


def _trace(
    k: int,
    min_similarity: float,
    pool: int,
    ranked: list[Candidate],
    low: list[str],
    dense: Mapping[str, float],
    kw: Mapping[str, float],
) -> RetrieveTrace:
    best_kw = max(kw.values(), default=0.0)
    under = [
        Candidate(
            i,
            float(dense.get(i, 0.0)),
            float(kw.get(i, 0.0)) / best_kw if best_kw > 0 else 0.0,
            0.0,
            0,
            "below min_similarity",
        )
        for i in low
    ]
    return RetrieveTrace(k, min_similarity, pool, tuple(ranked + under))


def retrieve_by_reference(store: StashCore, segment_id: str, session: str, max_hops: int) -> list[ContextSegment]:
    """See :meth:`StashStore.retrieve_by_reference <contextsieve.stash.store.StashStore.retrieve_by_reference>`."""
    store.check_usable()
    session = check_session(session)
    if isinstance(max_hops, bool) or not isinstance(max_hops, int) or not 0 <= max_hops <= 100:
        raise InputError(f"max_hops must be an int in 0..100, got {brief(max_hops)}")
    start = store.owned([segment_id], session)[0]
    order = [start]
    seen = {start}
    frontier = [start]
    for _ in range(max_hops):
        refs = store.backend.references(frontier)
        frontier = [r for f in frontier for r in refs.get(f, ()) if r not in seen]
        frontier = list(dict.fromkeys(frontier))
        seen.update(frontier)
        order.extend(frontier)
        if not frontier:
            break
    segs = {s.id: s for s in store.backend.get(order)}
    return [shown(segs[i]) for i in order if i in segs and segs[i].session == session]
