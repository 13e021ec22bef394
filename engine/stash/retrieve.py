"""The stash's retrieval: :func:`retrieve_traced` (checks the arguments, embeds the query, then ranks
the dense and keyword candidates in one read scope, see :mod:`contextsieve.stash.ranking`) with the
trace of every candidate it ranked, and :func:`retrieve_by_reference` (a breadth-first walk of
references). Each takes the store's :class:`~contextsieve.stash.core.StashCore`;
:class:`~contextsieve.stash.store.StashStore` documents the calls."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError, brief
from contextsieve.retrieval.query import Query
from contextsieve.stash.backend import Filters, query_terms, to_epoch
from contextsieve.stash.core import StashCore, check_count, utc_now
from contextsieve.stash.ids import public_id, shown
from contextsieve.stash.names import name_share, names_speaker, query_names, speaker_labels, without_names
from contextsieve.stash.options import RetrieveOptions, SegmentFilter
from contextsieve.stash.ranking import Scores, combined_scores, unnamed_query
from contextsieve.stash.results import Candidate, Retrieved, RetrieveTrace
from contextsieve.stash.segment import ContextSegment, aware, check_session

__all__ = ["retrieve_traced", "retrieve_by_reference"]


def _sessions(session: str, cross_session: bool) -> tuple[str, ...] | None:
    if not isinstance(cross_session, bool):
        raise InputError(f"cross_session must be true or false, got {brief(cross_session)}")
    return None if cross_session else (session,)


def retrieve_traced(
    store: StashCore, query: str | Query, options: RetrieveOptions
) -> tuple[list[Retrieved], RetrieveTrace]:
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
    query = query.text if isinstance(query, Query) else query
    rank = store.config.rank
    terms = query_terms(query, rank.drop_query_auxiliaries) if rank.keyword_weight > 0 else []
    uses_names = rank.name_weight > 0 or rank.speaker_weight > 0 or rank.unnamed_weight > 0
    names = query_names(query) if uses_names else ()
    unnamed = without_names(query, names) if names and rank.unnamed_weight > 0 else query
    q_un = unnamed_query(q, store.embed_query(unnamed), rank.unnamed_weight) if unnamed != query else None
    with store.backend.reading():  # one state of the store for every search and read below
        found, trace = _ranked(store, _Search(q, q_un, terms, names, k, float(min_similarity), f, at))
    out = [dataclasses.replace(r, segment=shown(r.segment)) for r in found]
    cands = tuple(dataclasses.replace(c, segment_id=public_id(c.segment_id, session)) for c in trace.candidates)
    return out, dataclasses.replace(trace, candidates=cands)


@dataclass(frozen=True)
class _Search:
    """What one retrieve searches for, as :func:`retrieve_traced` resolved it from the query and options.

    Attributes:
        q: the query's embedding rows (float32 ``[rows, dim]``).
        q_un: the rows of the query moved towards the query without its names
            (:func:`~contextsieve.stash.ranking.unnamed_query`), searched too and ranked by when the
            query names the speaker of one of the candidates found with ``q``; None: the query has no
            names (or ``RankConfig.unnamed_weight`` is 0).
        terms: the keyword index terms (:func:`~contextsieve.stash.backend.query_terms`; empty when
            ``RankConfig.keyword_weight`` is 0).
        names: the query's names (:func:`~contextsieve.stash.names.query_names`; empty when no names
            weight is set).
        k: how many segments to return (``top_k``).
        min_similarity: the least dense cosine a result may have, in [-1, 1].
        filters: which segments may be returned.
        at: the time of the retrieve, microseconds since 1970 UTC (recency and expiry).
    """

    q: np.ndarray
    q_un: np.ndarray | None
    terms: list[str]
    names: tuple[str, ...]
    k: int
    min_similarity: float
    filters: Filters
    at: int


@dataclass(frozen=True)
class _Pool:
    """The candidates of one retrieve, before the ``min_similarity`` threshold and the ranking.

    Attributes:
        ids: the candidate ids: those the query as asked finds (dense, then keyword), then, when the
            query names a candidate's speaker, those found only with ``q_un``.
        sims: the dense score (cosine) of each candidate: with ``q``, or with ``q_un`` when the
            query names a candidate's speaker (may hold ids that are not candidates).
        kw: the BM25 score of each candidate holding a keyword term (unscaled).
        facts: ``(created, stashed, sha256)`` of each stored candidate (times in microseconds since 1970).
        read: the segments of the stored candidates by id, read only when the query has names (else empty).
        spoken: whether the query names the speaker of each segment in ``read``.
    """

    ids: list[str]
    sims: dict[str, float]
    kw: dict[str, float]
    facts: dict[str, tuple[int, int, str]]
    read: dict[str, ContextSegment]
    spoken: dict[str, bool]


def _ranked(store: StashCore, s: _Search) -> tuple[list[Retrieved], RetrieveTrace]:
    """The ``s.k`` best segments for the search ``s``, and the trace (see :func:`retrieve_traced`).
    Texts are read for the winners only, or for every candidate when the query has names."""
    pool = _candidates(store, s)
    low = [i for i in pool.ids if pool.sims.get(i, -math.inf) < s.min_similarity]
    ids = [i for i in pool.ids if pool.sims.get(i, -math.inf) >= s.min_similarity]
    if not ids:
        return [], _trace(s.k, s.min_similarity, len(pool.ids), [], low, pool.sims, pool.kw)
    ids = [i for i in ids if i in pool.facts]
    sim, parts = _scores(store, s, pool, ids)
    scores = parts.total
    order = sorted(range(len(ids)), key=lambda j: (-scores[j], -sim[j], ids[j]))
    chosen, outcome = _chosen(order, ids, pool.facts, s.k)
    segs = pool.read or {x.id: x for x in store.backend.get([ids[j] for j in chosen])}
    ranked = [
        Candidate(ids[j], float(sim[j]), float(parts.keyword_scaled[j]), float(scores[j]), r, outcome[j])
        for r, j in enumerate(order, 1)
    ]
    found = [
        Retrieved(segs[ids[j]], float(sim[j]), float(parts.keyword_scaled[j]), float(scores[j]), _parts(parts, j))
        for j in chosen
        if ids[j] in segs
    ]
    return found, _trace(s.k, s.min_similarity, len(pool.ids), ranked, low, pool.sims, pool.kw)


def _candidates(store: StashCore, s: _Search) -> _Pool:
    """The candidates of ``s``: the best ``max(RankConfig.candidates, k)`` by dense score and by
    keyword score, with their dense and keyword scores, times and hashes (and texts when the query has
    names); those found with ``q_un`` join them when the query names one of their speakers."""
    rank = store.config.rank
    n = max(rank.candidates, s.k)
    f, q, q_un = s.filters, s.q, s.q_un
    dense = {h.id: h.score for h in store.backend.dense(q, n, f)}
    dense_un = {h.id: h.score for h in store.backend.dense(q_un, n, f)} if q_un is not None else {}
    hits = (
        store.backend.keyword(s.terms, n, f, also=[*dense, *dense_un], b=rank.keyword_length_norm)
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
    read = {x.id: x for x in store.backend.get([i for i in pool if i in facts])} if s.names else {}
    spoken = {i: names_speaker(s.names, speaker_labels(r.text, r.source, r.topic)) for i, r in read.items()}
    sims: dict[str, float] = dense
    if q_un is not None and any(spoken.get(i, False) for i in first):  # the query names a candidate's speaker
        rest = [i for i in pool if i not in dense_un]
        if rest:
            dense_un.update(store.backend.similarities(q_un, rest))
        sims = dense_un
    else:
        pool = first
    return _Pool(pool, sims, {i: v for i, v in kw.items() if i in pool}, facts, read, spoken)


def _scores(store: StashCore, s: _Search, pool: _Pool, ids: list[str]) -> tuple[np.ndarray, Scores]:
    """The dense score (cosine) of each of ``ids`` (candidates with facts, in order) and their
    combined scores (:func:`~contextsieve.stash.ranking.combined_scores` with the store's ``RankConfig``)."""
    names, read = s.names, pool.read
    sim = np.array([pool.sims.get(i, 0.0) for i in ids])
    key = np.array([pool.kw.get(i, 0.0) for i in ids])
    created = np.array([pool.facts[i][0] for i in ids], np.int64)
    stashed = np.array([pool.facts[i][1] for i in ids], np.int64)
    shares = np.array([name_share(read[i].text, names) if i in read else 0.0 for i in ids]) if names else None
    speakers = np.array([1.0 if pool.spoken.get(i) else 0.0 for i in ids]) if names else None
    return sim, combined_scores(sim, key, created, stashed, s.at, store.config.rank, shares, speakers)


def _chosen(
    order: list[int], ids: list[str], facts: Mapping[str, tuple[int, int, str]], k: int
) -> tuple[list[int], dict[int, str]]:
    """The positions (in ``ids``) of the at most ``k`` results, best first, and what became of each
    position in ``order`` (best first): ``"retrieved"``, ``"below top_k"`` or ``"duplicate"`` (content,
    by its sha256 in ``facts``, that ranked higher already)."""
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
    return chosen, outcome


def _parts(parts: Scores, j: int) -> dict[str, float]:
    """The parts of candidate ``j``'s combined score, as :attr:`Retrieved.parts` reports them (recency:
    what the others leave of the total)."""
    p = parts
    return {
        "dense": float(p.dense[j]),
        "keyword": float(p.keyword[j]),
        "day": float(p.day[j]),
        "names": float(p.names[j]),
        "speaker": float(p.speaker[j]),
        "recency": float(p.total[j] - p.dense[j] - p.keyword[j] - p.day[j] - p.names[j] - p.speaker[j]),
    }


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
