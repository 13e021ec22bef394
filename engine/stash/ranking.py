"""How retrieved segments are ranked: seed 004's multi-signal score plus a keyword term.

``score = relevance + day_weight * best relevance of its creation day + name_weight * names
        + speaker_weight * speaker
        + created_weight * 0.5 ** (age / created_half_life) + stashed_weight * 0.5 ** (stash age / stashed_half_life)``

where ``relevance = similarity_weight * sim + keyword_weight * keyword``.

``sim`` is the cosine of the segment's best chunk with the query's best sentence (when the query
names a candidate's speaker, ``unnamed_weight`` of it is the cosine with the query without its
names, :func:`unnamed_query`) and ``keyword`` its BM25 score, each divided by the best value among
the candidates of this retrieval (so the best candidate of each signal scores 1, whatever the spread
of the model's cosines or the scale of BM25 for this query; a convex combination of normalised
scores, as Bruch et al. 2022 recommend). Dividing by the best rather than min-max scaling keeps the
score independent of which other candidates happened to be fetched: min-max takes its minimum from
the weakest candidate, often a keyword-only match with a low cosine, and moved recall@5 on the
conversation set by up to 0.12 with the candidate count or tie order (0.48 at 50 candidates, 0.60 at
100); with max scaling recall@5 is the same within 0.003 from 10 to 200 candidates on both sets
measured. Ages are taken at the retrieval time, in days (a segment from the future counts as age 0).
The two relevance weights are this query's: each moved by how far its signal's best five candidates
stand out from one another (:func:`combined_scores`; their sum stays ``similarity_weight +
keyword_weight``). The top five of each signal are among the candidates whatever their count, so
this too does not depend on how many were fetched. ``day_weight`` is a second stage by conversation
session: a turn of the day whose best candidate is most relevant rises beside it (the day of its
creation time, UTC, stands for the session it was said in: what a store of turns can see). ``names``
is the share of the query's names and quoted phrases the segment holds verbatim
(:mod:`contextsieve.stash.names`), and ``speaker`` 1 when the query names the segment's speaker (its
source, its topic or a leading ``Name:`` of its text,
:func:`~contextsieve.stash.names.speaker_labels`), else 0. The defaults were chosen with ``python -m
benchmarks.stash_quality`` on four sets (see :class:`RankConfig` and docs/stash.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contextsieve.errors import InputError
from contextsieve.retrieval.fusion import decay, max_scaled, spread_weights, weighted_sum

__all__ = [
    "RankConfig",
    "Scores",
    "combined_scores",
    "group_best",
    "unnamed_query",
]

_DAY = 86_400.0
_DAY_US = 86_400_000_000  # microseconds in a day


@dataclass(frozen=True, kw_only=True)
class RankConfig:
    """Weights of the retrieval score (see the module docstring).

    Attributes:
        similarity_weight: weight of the normalised dense cosine (default 0.6, seed 004).
        keyword_weight: weight of the normalised BM25 score (default 0.2: a quarter of the relevance
            weight). Measured with ``benchmarks.stash_quality`` on two sets that pull opposite ways:
            this project's conversation set, where dense alone is strong (a keyword share of 0.15-0.2
            scores best), and SciFact through the stash, where BM25 is as strong as dense (0.35 and
            more scores best); a quarter costs each about 0.01 recall@5 against its best.
        created_weight / stashed_weight: weights of the creation-time and stash-time decays (default
            0.2 each, seed 004; measured: with ages at a conversation's end they cost nothing and
            gain a little over no decay).
        created_half_life_days / stashed_half_life_days: days after which each decay term halves
            (defaults 30 and 7, seed 004's time constants).
        keyword_length_norm: BM25's ``b``, how much a segment's keyword score is discounted for being
            longer than the store's mean (0: not at all, 1: fully; default 0.1). Okapi's 0.75 buried the
            long turn that holds the answer under short ones that name a word once: with
            ``benchmarks.stash_quality`` (R@5, 0.75 -> 0.1) the conversation set 0.658 -> 0.721, the plays
            (real dialogue) 0.242 -> 0.404, RealMem 0.529 -> 0.542, SciFact 0.791 -> 0.797; 0.0 scored
            within 0.013 of 0.1 on each but leaves a long file's repeated terms undiscounted in a store
            that mixes kinds (at 0.1 one occurrence in a segment 100 times the mean length scores about a
            sixth of one in a segment of mean length).
        spread_power / spread_top: how much this query's similarity and keyword weights follow
            the spread of their signal (see :func:`contextsieve.retrieval.fusion.spread_weights`: each
            weight times ``(1 - mean of its best spread_top scaled scores) ** spread_power``, the two
            rescaled to keep their sum, 0.8 by default); defaults 0.5 and 5; 0 turns it off (fixed
            weights). Where a question's words pick out a few turns and its cosines are flat, keywords
            weigh more, and the other way round. With ``benchmarks.stash_quality`` (R@5, 0 -> 0.5): the conversation
            set 0.754 -> 0.742, the plays 0.388 -> 0.433, RealMem 0.544 -> 0.550, SciFact 0.797 -> 0.798
            (R@10 0.853 -> 0.866); power 1 cost the conversation set 0.037 (docs/stash.md).
        drop_query_auxiliaries: leave auxiliary verbs (``did``, ``had``, ``were``, ``would``, ...: the
            stash's ``QUERY_FUNCTION_TERMS``) out of the query's keyword terms (default True; stored
            segments keep every term). In a question they are grammar: "When did Maya ..." gave keyword
            score to every turn that says "did". With ``benchmarks.stash_quality`` (R@5, kept -> left
            out, fixed weights) the conversation set 0.721 -> 0.754, the plays 0.404 -> 0.388, RealMem
            0.542 -> 0.544, SciFact unchanged (docs/stash.md).
        candidates: segments taken from each of dense and keyword search before the combined ranking
            (default 20; at least ``top_k``; recall@5 on both sets moved by at most 0.003 between 10
            and 200; 20 instead of 50 took 0.6 ms off a retrieve at 100,000 segments).
        day_weight: each candidate gains this times the best relevance (the weighted dense + keyword
            parts) among the candidates created on its UTC day, its own included (default 0.1; 0 turns
            it off). A conversation's session is a day's turns; the turn that answers sits in the
            session that talks about the question, beside turns that match it better on their own.
            Days are UTC calendar days of ``created`` (a session that crosses midnight UTC counts as
            two; segments stashed at once without a timestamp share one day, where the stage adds the
            same to each and ranks nothing differently). Cost: one grouping of the candidates.
            Measured (issue 41, ``benchmarks.quality.stash_recall`` row ``session prior 0.1 by day``, R@5):
            conversations +0.025, plays +0.008, RealMem -0.008, SciFact unchanged; with
            ``name_weight`` through the store in docs/stash.md.
        name_weight: each candidate gains this times the share of the query's names and quoted
            phrases (:func:`contextsieve.stash.names.query_names`) its text holds verbatim (default
            0.05; 0 turns it off, and a query without names reads no candidate texts). Measured
            (``stash_recall`` row ``names 0.05``, R@5): conversations +0.017, plays 0, RealMem 0
            (R@10 +0.004), SciFact +0.003.
        speaker_weight: a candidate whose speaker the query names gains this much (default 0.1; 0 turns
            it off). Its speaker is its ``source``, its ``topic`` or a leading ``Name:`` of its text
            (a conversation's turn stashed as ``{"text": ..., "source": "Maya"}`` or as ``"Maya: ..."``),
            a name one of the query's names (:func:`~contextsieve.stash.names.query_names`) is a whole
            word of (:func:`~contextsieve.stash.names.names_speaker`). A soft preference, not a
            filter: in conversations most questions about a person are answered by that person's own
            turns, but not all. Measured (issue 49, ``benchmarks.quality.stash_quality`` rows ``default``
            against ``default, speaker off``, R@5): conversations 0.786 -> 0.808 (with the speaker as the
            source, ``--speaker source``, 0.751 -> 0.765), plays 0.475 -> 0.487 (0.354 -> 0.412), RealMem and
            SciFact unchanged (docs/stash.md).
        unnamed_weight: once the query names a candidate's speaker, this share of each candidate's
            dense cosine is taken with the query without its names
            (:func:`~contextsieve.stash.names.without_names`; default 0.75, in [0, 1]; 0 turns it off).
            A turn stashed as ``"Maya: ..."`` is embedded with the name, so "What race did Maya
            complete?" is nearest to Maya's shortest turns ("Maya: That's wild."), whose vectors are
            mostly the name; the speaker is matched apart by ``speaker_weight``, and the rest of the
            cosine compares what is said. Each sentence's vector is moved this share of the way to the
            unnamed one (:func:`unnamed_query`): a result's ``similarity`` is its cosine with that mix,
            and ``min_similarity`` applies to it. A query whose names are no candidate's speaker ranks as
            with 0. Cost: a query holding a name is embedded twice and searched twice, and the mix's best
            ``candidates`` join the candidates when a speaker is named. Measured (``stash_quality`` rows
            ``default`` against ``default, unnamed off``, R@5 / R@10): conversations 0.686 / 0.746 -> 0.808
            / 0.884 (speaker as the source 0.711 -> 0.765 R@5), plays 0.429 -> 0.487 (0.279 -> 0.412),
            RealMem unchanged, SciFact 0.797 -> 0.800; 0.5 and 1.0 trade the conversations against the
            plays (docs/stash.md).
    """

    similarity_weight: float = 0.6
    keyword_weight: float = 0.2
    created_weight: float = 0.2
    stashed_weight: float = 0.2
    created_half_life_days: float = 30.0
    stashed_half_life_days: float = 7.0
    keyword_length_norm: float = 0.1
    candidates: int = 20
    drop_query_auxiliaries: bool = True
    spread_power: float = 0.5
    spread_top: int = 5
    day_weight: float = 0.1
    name_weight: float = 0.05
    speaker_weight: float = 0.1
    unnamed_weight: float = 0.75

    def __post_init__(self) -> None:
        weights = ("similarity_weight", "keyword_weight", "created_weight", "stashed_weight")
        for name in (*weights, "day_weight", "name_weight", "speaker_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"{name} must be a finite number >= 0, got {v!r}")
        for name in ("created_half_life_days", "stashed_half_life_days"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise InputError(f"{name} must be a positive number of days, got {v!r}")
        for name, hi in (("keyword_length_norm", 1), ("spread_power", 4), ("unnamed_weight", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
                raise InputError(f"{name} must be a number in [0, {hi}], got {v!r}")
        for name, hi in (("spread_top", 1000), ("candidates", 10_000)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
                raise InputError(f"{name} must be an int in 1..{hi}, got {v!r}")
        if not isinstance(self.drop_query_auxiliaries, bool):
            raise InputError(f"drop_query_auxiliaries must be true or false, got {self.drop_query_auxiliaries!r}")


@dataclass(frozen=True)
class Scores:
    """The combined score of each candidate and its parts (float64 arrays, candidate order):
    ``dense`` and ``keyword`` are each signal's scaled value times this query's weight; ``day`` the
    day stage's part (``day_weight`` x its day's best relevance), ``names`` the names' part and
    ``speaker`` the speaker's; ``keyword_scaled`` the BM25 scores divided by their best (what a result
    reports as its keyword score). The recency part is ``total - dense - keyword - day - names - speaker``."""

    total: np.ndarray
    dense: np.ndarray
    keyword: np.ndarray
    keyword_scaled: np.ndarray
    day: np.ndarray
    names: np.ndarray
    speaker: np.ndarray


def group_best(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """For each entry, the largest of ``values`` among the entries of its group (``groups``: one
    key per entry, any sortable dtype)."""
    v = np.asarray(values, dtype=np.float64)
    if not v.size:
        return v
    keys, inverse = np.unique(np.asarray(groups), return_inverse=True)
    best = np.full(keys.size, -np.inf)
    np.maximum.at(best, inverse.reshape(-1), v)
    return best[inverse.reshape(-1)]


def combined_scores(
    similarity: np.ndarray,
    keyword: np.ndarray,
    created: np.ndarray,
    stashed: np.ndarray,
    now: int,
    config: RankConfig,
    names: np.ndarray | None = None,
    speakers: np.ndarray | None = None,
) -> Scores:
    """The score of each candidate and its parts.

    Args:
        similarity: dense cosines. keyword: BM25 scores (0 where none). Both are scaled by
            :func:`max_scaled` here and weighted by this query's spread of each
            (:func:`contextsieve.retrieval.fusion.spread_weights`, see :class:`RankConfig`).
        created / stashed: microseconds since 1970 (int64); ``created``'s UTC day also groups the
            candidates for ``day_weight``. now: the retrieval time (microseconds since 1970). config:
            the weights. names: each candidate's share of the query's names (:func:`name_share
            <contextsieve.stash.names.name_share>`); None: no names part. speakers: 1 where the
            query names the candidate's speaker, else 0; None: no speaker part.
    """
    created_age = (now - np.asarray(created, dtype=np.int64)).astype(np.float64) / 1e6  # seconds, exact int difference
    stashed_age = (now - np.asarray(stashed, dtype=np.int64)).astype(np.float64) / 1e6
    sim, kw = max_scaled(similarity), max_scaled(keyword)
    sim_weight, kw_weight = spread_weights(
        [sim, kw], [config.similarity_weight, config.keyword_weight], config.spread_top, config.spread_power
    )
    dense, key = sim * sim_weight, kw * kw_weight
    day = np.zeros(sim.shape)
    if config.day_weight > 0:
        day = config.day_weight * group_best(dense + key, np.asarray(created, dtype=np.int64) // _DAY_US)
    named = np.zeros(sim.shape) if names is None else config.name_weight * np.asarray(names, dtype=np.float64)
    spoken = np.zeros(sim.shape) if speakers is None else config.speaker_weight * np.asarray(speakers, dtype=np.float64)
    total = weighted_sum(
        [
            (sim, sim_weight),
            (kw, kw_weight),
            (day, 1.0),
            (named, 1.0),
            (spoken, 1.0),
            (decay(created_age, config.created_half_life_days), config.created_weight),
            (decay(stashed_age, config.stashed_half_life_days), config.stashed_weight),
        ],
        np.float64,
    )
    return Scores(total, dense, key, kw, day, named, spoken)


def unnamed_query(asked: np.ndarray, unnamed: np.ndarray, share: float) -> np.ndarray | None:
    """The query rows a retrieve ranks by once the query names a candidate's speaker: each row of the
    query as asked (``asked``, ``[sentences, dim]``) moved ``share`` of the way to the same row of the
    query without its names (``unnamed``) and normalised, so a segment's dense score is its cosine
    with that mix (a single-sentence query's ranking is that of ``(1 - share) * cosine as asked + share
    * cosine unnamed``: the signal is divided by its best, so the norm drops out). None when the two
    have different numbers of sentences (taking a name out ended one) or ``share`` is 0."""
    a = np.asarray(asked, dtype=np.float32)
    u = np.asarray(unnamed, dtype=np.float32)
    if share <= 0 or a.shape != u.shape:
        return None
    mix = (1.0 - share) * a + share * u
    norms = np.linalg.norm(mix, axis=1, keepdims=True)
    return (mix / np.maximum(norms, 1e-12)).astype(np.float32)
