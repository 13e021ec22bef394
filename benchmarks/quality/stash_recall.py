"""Recall experiments for the stash, every variant on every set in one table (issue 28).

    python -m benchmarks.quality.stash_recall [--sets conv,plays,realmem,scifact] [--embeddings plain,type,...]
        [--rank-embedding type] [--rankings "default,bm25 b 0.25" | issue49] [--cache DIR] [--limit N]

What a variant changes is either the text embedded for a segment (the stored text stays the turn)
or the ranking. Embedding variants: ``plain`` (``"Speaker: text"``, as ``stash_quality`` stashes a
turn; a SciFact abstract is ``title + " " + text``), ``prev`` (the turn before it in its session as
a first line), ``first`` (the session's first user turn as a first line), ``date`` (the session date
first, ``2023-01-14 ...``), ``typedate`` (``message, 2023-01-14: ...``; a SciFact abstract
``research: ...``) and ``type`` (``message: ...``, a constant prefix: the control for the two
before). Ranking variants, over ``plain`` vectors: the default weights, keyword weight 0.3, no
creation-time decay, 50 candidates per signal, pseudo-relevance feedback (the query vector moved
half-way towards the mean of the top 3 and searched again), neighbour smoothing (each turn's
dense cosine raised by 0.2 x the better of its session neighbours' relevance), reciprocal rank
fusion (k 60) instead of the weighted sum, BM25's length normalisation b and k1 and Lucene's idf,
a session prior (each candidate raised by a share of the best score among its session's
candidates), session diversity (the top 10 picked greedily, each pick lowering the later candidates
of its session), which words of the query are keyword terms (the store leaves auxiliary verbs out:
kept, or further English function words, pronouns, speech verbs or modals left out too), the
signals scaled by min-max or z-score instead of their best, the keyword signal as the share of
the query's idf mass matched (``kwabs``; ``abs`` also leaves the cosine unscaled), each turn raised
by a share of the previous turn's fused score (``forward``) or BM25 (``kw forward``), a turn
raised when the query names its speaker, and a second pass (the query plus the best hit, in both
signals) filling places 6-10 (``hop``). Issue 41's (:mod:`benchmarks.quality.stash_stages`): a
second stage (``stage N``: the candidates of the N groups with the best candidates first), the session
prior grouped ``by day`` (the store's ``RankConfig.day_weight``: a store sees a turn's creation day, not
its dialogue session), a boost for segments dated near the date the question points to (``dates``:
"yesterday", "two weeks ago", "last month", "in May", "last Monday", relative to the time asked), the
question's names and quoted phrases found verbatim (``names``, the store's own
:func:`~contextsieve.stash.names.query_names`), and the second pass kept to other sessions or days than
the best hit's (``hop ... other``: multi-hop evidence sits in two scenes). Issue 49's, each added to
the store's default of issue 41 (row ``today``; ``49`` is the default since): a candidate raised when
the query names its speaker (``speaker``: the store's :func:`~contextsieve.stash.names.speaker_labels`
read off the turn as stashed, ``"Maya: ..."``), the dense cosine taken with the query moved towards
the query without its names once a candidate's speaker is named (``unnamed``: the store's
:func:`~contextsieve.stash.ranking.unnamed_query`; ``speakers' names only`` takes out only the
names that are speakers, ``+ terms`` takes them out of the keyword terms too), a spread of the top
over days for questions whose evidence spans sessions (``spread mmr W from P``: from place P on, each
pick lowers the later candidates of its day by W; ``spread floor F from P``: after place P, the best
candidate of each day not yet shown whose score is at least F times the best comes next), the turns
beside the best ten candidates raised by a share of their score (``neighbours``, ``next``: only the
turn after, ``same speaker``: only a turn of the same speaker), and a date the query writes ("April
12th", "8 May, 2023", "in June") matched against the dates a segment writes and its creation date
(``text dates``). The questions of the sets that label them (the conversations: single-hop and
multi-hop; the plays: single-hop, multi-hop, temporal, open-domain) are also scored by kind in a
second table. ``Ranking()`` is the store's default before issue 41 (no day stage, no names): the rows
before ``today`` each change one thing of it.
``--rank-embedding`` picks the vectors the ranking variants run over (``plain``, or ``type``, the
store's default form).

Ranking is an emulation of :class:`~contextsieve.stash.store.StashStore`'s default (dense cosine of the
whole query, the stash's BM25 over stemmed terms with FTS5's floored idf and the store's length
normalisation (``RankConfig.keyword_length_norm``) and without auxiliary verbs in the query's terms,
each signal divided by its best among the top 20 candidates of each and weighted by its spread
(:func:`contextsieve.retrieval.fusion.spread_weights`, the store's own function), plus
``0.2 x 0.5 ** (age / 30 days)``, one of identical texts shown), over vectors embedded once per
variant, so many variants cost one embedding each. It follows the store within a few hundredths
(docs/stash.md compares the two); a variant that wins here is then measured through the store's API
before it becomes a default.

Sets: ``conv`` (this project's conversation set, benchmarks/data/conversations: short turns, 240
factoid questions with one evidence turn and 32 multi-hop ones gathering one speaker's turns of two or
three sessions; ages flat), ``plays`` (real dialogue: four Shakespeare plays,
a scene per session, 120 questions of four kinds, benchmarks/data/plays; ages flat), ``realmem``
(../shared/eval/realmem, measured as ``stash_quality --realmem``: each request over the turns of
earlier sessions at its session's date; score: evidence sessions owning a top-k turn), ``scifact``
(../shared/eval/scifact test queries over 5,183 abstracts; undated). Scores: share of each
question's evidence in the top 5 / 10, averaged.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from benchmarks.common import recall_at_k
from benchmarks.quality import stash_stages as stages
from benchmarks.quality.stash_quality import DATA, realmem_sessions
from contextsieve.models.cpu import cpu_summary
from contextsieve.retrieval.bm25 import Bm25Config, TermIndex
from contextsieve.retrieval.fusion import spread_weights
from contextsieve.stash.backend import QUERY_FUNCTION_TERMS, index_terms
from contextsieve.stash.names import name_share, names_speaker, query_names, speaker_labels, without_names
from contextsieve.stash.ranking import RankConfig, group_best, unnamed_query
from tests.helpers import plays

EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval"
DAY = 86_400.0
EMBEDDINGS = ("plain", "prev", "first", "date", "typedate", "type")


@dataclasses.dataclass
class Doc:
    text: str
    speaker: str = ""
    date: str = ""  # ISO day, "" when undated
    prev: str = ""  # the turn before it in its session ("Speaker: text")
    first: str = ""  # the session's first user turn
    unit: str = ""  # what evidence names: a turn id, a session uuid, a document id
    at: float = 0.0  # epoch seconds of its date (0: undated)
    kind: str = "message"
    session: str = ""  # the dialogue session it belongs to (neighbours share it)


@dataclasses.dataclass
class Question:
    text: str
    evidence: set[str]
    visible: int  # how many of the group's docs (in order) it may retrieve
    now: float  # epoch seconds it is asked at (0: undated, ages flat)
    kind: str = ""  # the plays set's kind of question (single-hop, multi-hop, temporal, open-domain)


@dataclasses.dataclass
class Group:
    name: str
    docs: list[Doc]
    questions: list[Question]


def doc_text(d: Doc, variant: str) -> str:
    base = f"{d.speaker}: {d.text}" if d.speaker else d.text
    if variant == "prev":
        return f"{d.prev[-300:]}\n{base}" if d.prev else base
    if variant == "first":
        return f"{d.first[:200]}\n{base}" if d.first and d.first != d.text else base
    if variant == "date":
        return f"{d.date} {base}" if d.date else base
    if variant == "typedate":
        return f"{d.kind}, {d.date}: {base}" if d.date else f"{d.kind}: {base}"
    if variant == "type":
        return f"{d.kind}: {base}"
    return base


def _epoch(day: str) -> float:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=timezone.utc).timestamp()


def conv_groups(turns: list[dict] | None = None, questions: list[dict] | None = None) -> list[Group]:
    """This project's conversation set, or another set of the same form (``plays``)."""
    if turns is None or questions is None:
        turns = [json.loads(x) for x in (DATA / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
        questions = [json.loads(x) for x in (DATA / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    groups: dict[int, Group] = {}
    prev: dict[tuple[int, int], str] = {}
    first: dict[tuple[int, int], str] = {}
    for t in turns:
        g = groups.setdefault(t["conversation"], Group(f"conv{t['conversation']}", [], []))
        key = (t["conversation"], t["session"])
        first.setdefault(key, t["text"])
        g.docs.append(
            Doc(
                t["text"],
                t["speaker"],
                t["date"],
                prev.get(key, ""),
                first[key],
                t["id"],
                _epoch(t["date"]),
                session=str(key),
            )
        )
        prev[key] = f"{t['speaker']}: {t['text']}"
    for q in questions:
        g = groups[q["conversation"]]
        g.questions.append(Question(q["question"], set(q["evidence"]), len(g.docs), 0.0, q.get("kind", "")))
    return list(groups.values())


def realmem_groups(folder: Path, limit: int) -> list[Group]:
    out = []
    for f in sorted((folder / "dataset").glob("*_dialogues_256k.json"))[: limit or None]:
        sessions, requests = realmem_sessions(f)
        g = Group(f.stem, [], [])
        starts = []
        for s in sessions:
            starts.append(len(g.docs))
            turns = [(w, t) for w, t in s["turns"] if t.strip()]
            head = next((t for w, t in turns if w == "User"), "")
            before = ""
            for w, t in turns:
                day = s["date"].date().isoformat()
                g.docs.append(Doc(t, w, day, before, head, s["uuid"], s["date"].timestamp(), session=s["uuid"]))
                before = f"{w}: {t}"
        for r in requests:
            g.questions.append(
                Question(
                    r["text"], set(r["evidence"]), starts[r["session"]], sessions[r["session"]]["date"].timestamp()
                )
            )
        out.append(g)
    return out


def scifact_groups(folder: Path) -> list[Group]:
    from benchmarks.quality.beir_quality import load_beir

    corpus, queries, qrels = load_beir(folder, "test")
    docs = [Doc(text, unit=i, kind="research", session=i) for i, text in corpus.items()]
    qs = [Question(text, set(qrels[q]), len(docs), 0.0) for q, text in queries.items()]
    return [Group("scifact", docs, qs)]


@dataclasses.dataclass(frozen=True)
class Ranking:
    similarity: float = 0.6
    keyword: float = 0.2
    created: float = 0.2
    half_life_days: float = 30.0
    candidates: int = 20
    feedback: float = 0.0
    smooth: float = 0.0
    rrf: int = 0  # >0: reciprocal rank fusion with this k instead of the weighted max-scaled sum
    k1: float = 1.2
    b: float = RankConfig().keyword_length_norm
    idf: str = "floored"
    diversity: float = 0.0  # greedy top 10: each pick costs later candidates of its session this much
    query_stop: str = "aux"  # query terms left out: aux (the store's QUERY_FUNCTION_TERMS), none, or a group below
    session_prior: float = 0.0  # each candidate gains this x the best score of its session's candidates
    norm: str = "max"  # how each signal is scaled over the candidates: max, minmax, zscore, kwabs, abs
    spread_power: float = RankConfig().spread_power  # the store's per-query weights (norm max only)
    spread_top: int = RankConfig().spread_top
    forward: float = 0.0  # each turn gains this x the fused score of the turn before it in its session
    speaker: float = 0.0  # a turn whose speaker the query names gains this much (the store's speaker labels)
    strip: float = 0.0  # dense: this share of the cosine is the query's without the speaker names it holds
    strip_kw: bool = False  # keyword terms: the same
    strip_all: bool = True  # with strip: every name of the query out (the store's); False: the speakers' only
    kw_forward: float = 0.0  # each turn's BM25 gains this x its previous turn's (same session)
    hop: float = 0.0  # second pass (query + the best hit) fills places 6-10; its weight on the best hit
    hop_other: bool = False  # the second pass leaves out the best hit's group (multi-hop: another scene)
    group: str = "session"  # what session prior, stage and hop_other group by: session, or day (of the date)
    stage: int = 0  # >0: second stage, the candidates of the best N groups (by best score) first
    names: float = 0.0  # a candidate gains this x the share of the query's names / quoted phrases it holds
    names_not_spoken: bool = False  # the names part leaves out the names of speakers
    text_dates: float = 0.0  # a candidate gains this when a date the query writes is one it writes or was made on
    neighbour: float = 0.0  # the turns beside the best candidates gain this x the candidate's score
    neighbour_top: int = 10
    neighbour_side: str = "both"  # or "next"
    neighbour_same_speaker: bool = False
    spread: float = 0.0  # spread over days: the MMR weight, or the floor (spread_kind "floor")
    spread_kind: str = "mmr"
    spread_start: int = 0
    dates: float = 0.0  # a candidate gains this x its date's closeness to the date the query points to


#: The store's default since issue 41 (its day stage and names); the rows of issue 49 each add to it.
TODAY = Ranking(session_prior=0.1, group="day", names=0.05)


def _today(**change: object) -> Ranking:
    return dataclasses.replace(TODAY, **change)  # type: ignore[arg-type]


#: The store's default since issue 49: the speaker part and the query without its names (once it
#: names a candidate's speaker) added to :data:`TODAY`.
FORTY_NINE = _today(strip=0.75, speaker=0.1)


def _49(**change: object) -> Ranking:
    return dataclasses.replace(FORTY_NINE, **change)  # type: ignore[arg-type]


RANKINGS: dict[str, Ranking] = {
    "default": Ranking(),
    "keyword 0.3": Ranking(keyword=0.3),
    "no decay": Ranking(created=0.0),
    "50 candidates": Ranking(candidates=50),
    "feedback 0.5": Ranking(feedback=0.5),
    "neighbours 0.2": Ranking(smooth=0.2),
    "rrf 60": Ranking(rrf=60),
    "bm25 b 0.75": Ranking(b=0.75),
    "bm25 b 0.4": Ranking(b=0.4),
    "bm25 b 0.25": Ranking(b=0.25),
    "bm25 b 0.1": Ranking(b=0.1),
    "bm25 b 0.5": Ranking(b=0.5),
    "bm25 b 0.25 keyword 0.3": Ranking(b=0.25, keyword=0.3),
    "session prior 0.1": Ranking(session_prior=0.1),
    "bm25 k1 2.0": Ranking(k1=2.0),
    "bm25 log1p idf": Ranking(idf="log1p"),
    "session prior 0.2": Ranking(session_prior=0.2),
    "query auxiliaries kept": Ranking(query_stop="none"),
    "query function words out": Ranking(query_stop="all"),
    "query more auxiliaries out": Ranking(query_stop="more"),
    "query pronouns out too": Ranking(query_stop="pron"),
    "query speech verbs out too": Ranking(query_stop="speech"),
    "session diversity 0.1": Ranking(diversity=0.1),
    "session diversity 0.2": Ranking(diversity=0.2),
    "keyword 0.25": Ranking(keyword=0.25),
    "minmax": Ranking(norm="minmax"),
    "minmax keyword 0.3": Ranking(norm="minmax", keyword=0.3),
    "zscore": Ranking(norm="zscore"),
    "forward 0.1": Ranking(forward=0.1),
    "forward 0.2": Ranking(forward=0.2),
    "dense only": Ranking(keyword=0.0),
    "keyword only": Ranking(similarity=0.0),
    "fixed weights": Ranking(spread_power=0.0),
    "spread power 1": Ranking(spread_power=1.0),
    "spread top 3": Ranking(spread_top=3),
    "spread top 10": Ranking(spread_top=10),
    "spread power 1 top 10": Ranking(spread_power=1.0, spread_top=10),
    "kwabs 0.2": Ranking(norm="kwabs"),
    "kwabs 0.4": Ranking(norm="kwabs", keyword=0.4),
    "kwabs 0.6": Ranking(norm="kwabs", keyword=0.6),
    "kwabs 1.0": Ranking(norm="kwabs", keyword=1.0),
    "abs 0.4": Ranking(norm="abs", keyword=0.4),
    "abs 0.8": Ranking(norm="abs", keyword=0.8),
    "speaker 0.05": Ranking(speaker=0.05),
    "speaker 0.1": Ranking(speaker=0.1),
    "speaker 0.2": Ranking(speaker=0.2),
    "kw forward 0.3": Ranking(kw_forward=0.3),
    "kw forward 0.5": Ranking(kw_forward=0.5),
    "hop 0.5": Ranking(hop=0.5),
    "hop 1.0": Ranking(hop=1.0),
    "session prior 0.1 by day": Ranking(session_prior=0.1, group="day"),
    "session prior 0.05 by day": Ranking(session_prior=0.05, group="day"),
    "stage 1 session": Ranking(stage=1),
    "stage 2 sessions": Ranking(stage=2),
    "stage 3 sessions": Ranking(stage=3),
    "stage 2 days": Ranking(stage=2, group="day"),
    "stage 3 days": Ranking(stage=3, group="day"),
    "stage 5 days": Ranking(stage=5, group="day"),
    "names 0.05": Ranking(names=0.05),
    "names 0.1": Ranking(names=0.1),
    "names 0.2": Ranking(names=0.2),
    "dates 0.1": Ranking(dates=0.1),
    "dates 0.2": Ranking(dates=0.2),
    "hop 0.5 other session": Ranking(hop=0.5, hop_other=True),
    "hop 0.5 other day": Ranking(hop=0.5, hop_other=True, group="day"),
    "hop 1.0 other day": Ranking(hop=1.0, hop_other=True, group="day"),
    "session prior 0.15 by day": Ranking(session_prior=0.15, group="day"),
    "session prior 0.1 by day + names 0.05": Ranking(session_prior=0.1, group="day", names=0.05),
    "session prior 0.1 by day + names 0.1": Ranking(session_prior=0.1, group="day", names=0.1),
    "session prior 0.05 by day + names 0.05": Ranking(session_prior=0.05, group="day", names=0.05),
    "session prior 0.05 by day + names 0.1": Ranking(session_prior=0.05, group="day", names=0.1),
    # issue 49: each row adds to today's default (the day stage and names of issue 41)
    "today": TODAY,
    "today + speaker 0.1": _today(speaker=0.1),
    "today + speaker 0.2": _today(speaker=0.2),
    "today + unnamed 0.75": _today(strip=0.75),
    "today + unnamed 0.75 speakers' names only": _today(strip=0.75, strip_all=False, speaker=0.1),
    "today + unnamed 0.75 + terms": _today(strip=0.75, strip_kw=True, speaker=0.1),
    "49": FORTY_NINE,
    "49 speaker 0.05": _49(speaker=0.05),
    "49 speaker 0.2": _49(speaker=0.2),
    "49 unnamed 0.5": _49(strip=0.5),
    "49 unnamed 1.0": _49(strip=1.0),
    "49 day 0": _49(session_prior=0.0),
    "49 names 0": _49(names=0.0),
    "49 names not speakers": _49(names_not_spoken=True),
    "49 + spread mmr 0.05 from 1": _49(spread=0.05, spread_start=1),
    "49 + spread mmr 0.1 from 3": _49(spread=0.1, spread_start=3),
    "49 + spread mmr 0.05 from 5": _49(spread=0.05, spread_start=5),
    "49 + spread floor 0.9 from 1": _49(spread=0.9, spread_kind="floor", spread_start=1),
    "49 + spread floor 0.8 from 3": _49(spread=0.8, spread_kind="floor", spread_start=3),
    "49 + spread floor 0.7 from 5": _49(spread=0.7, spread_kind="floor", spread_start=5),
    "49 + neighbours 0.1": _49(neighbour=0.1),
    "49 + neighbours 0.1 next": _49(neighbour=0.1, neighbour_side="next"),
    "49 + neighbours 0.2 next": _49(neighbour=0.2, neighbour_side="next"),
    "49 + neighbours 0.1 same speaker": _49(neighbour=0.1, neighbour_same_speaker=True),
    "49 + text dates 0.1": _49(text_dates=0.1),
    "49 + text dates 0.2": _49(text_dates=0.2),
}


#: English function words beyond the tokenizer's stopwords (for the ``query_stop`` variant), as index terms.
_FUNCTION_TERMS = frozenset(
    index_terms(
        "did done doe had having been being were am he him his she her hers they their theirs about above after "
        "again against all also any because before below between both but could down during each few further "
        "here into just more most much must no nor not now off once only other out over own same say said says "
        "tell told some such than then these those through too under until up very would ever yet while one ones "
        "thing things something anything get got make made like know think"
    )
)

#: The query terms each ``query_stop`` value leaves out.
_GROUPS = {
    "none": frozenset(),
    "aux": QUERY_FUNCTION_TERMS,
    "all": _FUNCTION_TERMS | QUERY_FUNCTION_TERMS,
    "more": QUERY_FUNCTION_TERMS | frozenset(index_terms("am may might shall ought")),
    "pron": QUERY_FUNCTION_TERMS | frozenset(index_terms("he him his she her hers they their theirs one ones")),
    "speech": QUERY_FUNCTION_TERMS | frozenset(index_terms("say said says tell told think know")),
}


def evaluate(
    group: Group,
    vectors: np.ndarray,
    queries: np.ndarray,
    rank: Ranking,
    kinds: dict[str, list[float]] | None = None,
    stripped: np.ndarray | None = None,
    stripped_all: np.ndarray | None = None,
) -> tuple[float, float, int]:
    """Summed R@5, R@10 and the number of questions scored, for one group (and in ``kinds``, when
    given, the same sums per kind of question). ``stripped``: each question's vector without the
    speakers it names (:func:`speaker_stripped`), for ``Ranking.strip``."""
    texts = [doc_text(d, "plain") for d in group.docs]
    labels = [speaker_labels(t) for t in texts]
    written = [stages.written_dates(t) for t in texts] if rank.text_dates else []
    made = [datetime.fromtimestamp(d.at, timezone.utc) for d in group.docs] if rank.text_dates else []
    stamp = [(t.month, t.day, t.year) for t in made]  # each segment's creation date, for text_dates
    terms = [index_terms(t) for t in texts]
    units = [d.unit for d in group.docs]
    at = np.array([d.at for d in group.docs])
    same = np.array([d.session for d in group.docs])
    grp = same if rank.group == "session" else np.floor(at / DAY).astype(np.int64).astype(str)
    index = TermIndex(Bm25Config(k1=rank.k1, b=rank.b, idf="log1p" if rank.idf == "log1p" else "floored"))
    added = 0
    r5 = r10 = 0.0
    n = 0
    for qi in sorted(range(len(group.questions)), key=lambda i: group.questions[i].visible):
        q = group.questions[qi]
        lim = q.visible
        while added < lim:
            index.add(added, terms[added])
            added += 1
        if lim == 0:
            continue
        n += 1
        qv = queries[qi]
        qterms = index_terms(q.text)
        qterms = [t for t in qterms if t not in _GROUPS[rank.query_stop]]
        kws = index.scores(qterms)[:lim]
        if rank.kw_forward:
            before = np.r_[0.0, kws[:-1]]
            before[1:][same[1:lim] != same[: lim - 1]] = 0.0
            kws = kws + rank.kw_forward * before

        asked = stages.written_dates(q.text) if rank.text_dates else set()
        qnames = query_names(q.text)
        spoken: tuple[str, ...] = ()
        extra = np.zeros(0, dtype=np.int64)  # candidates added to the top of each signal (neighbours)
        unnamed: np.ndarray | None = None
        dense_top: np.ndarray | None = None  # with a speaker named: the top of the query as asked and without names
        if qnames and (rank.speaker or rank.strip or rank.strip_kw):  # the names that name a candidate's speaker
            sims0 = vectors[:lim] @ qv
            first = np.union1d(np.argsort(-sims0)[: rank.candidates], np.argsort(-kws)[: rank.candidates])
            spoken = tuple(m for m in qnames if any(names_speaker([m], labels[i]) for i in first))
            if spoken and rank.strip_kw:
                gone = set(index_terms(" ".join(spoken)))
                kws = index.scores([t for t in qterms if t not in gone])[:lim]
            if spoken and rank.strip and stripped is not None:  # the store's unnamed_query
                un = stripped_all[qi] if rank.strip_all and stripped_all is not None else stripped[qi]
                mixed = unnamed_query(qv[None, :], un[None, :], rank.strip)
                unnamed = None if mixed is None else mixed[0]
                if unnamed is not None:
                    dense_top = np.union1d(
                        np.argsort(-sims0)[: rank.candidates], np.argsort(-(vectors[:lim] @ unnamed))[: rank.candidates]
                    )

        def fuse(sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            top = np.argsort(-sims)[: rank.candidates] if dense_top is None else dense_top
            cand = np.union1d(np.union1d(top, np.argsort(-kws)[: rank.candidates]), extra)
            if rank.rrf:
                rs = np.empty(lim)
                rs[np.argsort(-sims, kind="stable")] = np.arange(lim)
                rk = np.empty(lim)
                rk[np.argsort(-kws, kind="stable")] = np.arange(lim)
                rk[kws <= 0] = np.inf
                s = 1.0 / (rank.rrf + 1 + rs[cand])
                k = 1.0 / (rank.rrf + 1 + rk[cand])
                best = 1.0 / (rank.rrf + 1)
                s, k = s / best, k / best
            elif rank.norm == "minmax":
                s, k = sims[cand], kws[cand]
                s = (s - s.min()) / max(float(s.max() - s.min()), 1e-9)
                k = (k - k.min()) / max(float(k.max() - k.min()), 1e-9)
            elif rank.norm in ("kwabs", "abs"):  # keyword: the share of the query's idf mass matched
                got = index._postings(qterms)
                mass = sum(got[3]) if got else 1.0
                s = sims[cand] if rank.norm == "abs" else sims[cand] / max(float(sims[cand].max()), 1e-9)
                k = kws[cand] / max(mass, 1e-9)
            elif rank.norm == "zscore":
                s, k = sims[cand], kws[cand]
                s = (s - s.mean()) / max(float(s.std()), 1e-9)
                k = (k - k.mean()) / max(float(k.std()), 1e-9)
            else:
                s = sims[cand] / max(float(sims[cand].max()), 1e-9)
                k = kws[cand] / max(float(kws[cand].max()), 1e-9)
            ws, wk = rank.similarity, rank.keyword
            if rank.norm == "max" and not rank.rrf:  # the store's per-query weights
                ws, wk = spread_weights([s, k], [ws, wk], rank.spread_top, rank.spread_power)
            score = ws * s + wk * k
            if rank.session_prior:  # the store's day_weight with group "day"
                score = score + rank.session_prior * group_best(score, grp[cand])
            if rank.names and found_names:
                score = score + rank.names * np.array([name_share(texts[i], found_names) for i in cand])
            if rank.text_dates and asked:
                got = [
                    1.0
                    if stages.dates_match(asked, written[i] | ({stamp[i]} if rank.group == "day" and at[i] else set()))
                    else 0.0
                    for i in cand
                ]
                score = score + rank.text_dates * np.array(got)
            if rank.dates and span is not None:
                score = score + rank.dates * stages.date_closeness(at[cand], span)
            if rank.speaker and spoken:  # the store's: a candidate whose speaker one of the query's names names
                said = [1.0 if names_speaker(qnames, labels[i]) else 0.0 for i in cand]
                score = score + rank.speaker * np.array(said)
            if rank.forward:
                full = np.zeros(lim)
                full[cand] = score
                before = np.r_[0.0, full[:-1]]
                before[1:][same[1:lim] != same[: lim - 1]] = 0.0
                score = score + rank.forward * before[cand]
            if rank.created and q.now:
                age = np.maximum(q.now - at[cand], 0.0) / DAY
                score = score + rank.created * 0.5 ** (age / rank.half_life_days)
            return cand, score

        found_names = query_names(q.text) if rank.names else ()
        if rank.names_not_spoken:
            found_names = tuple(m for m in found_names if m not in spoken)
        span = stages.time_span(q.text, q.now) if rank.dates else None
        sims = vectors[:lim] @ qv
        if unnamed is not None:
            sims = vectors[:lim] @ unnamed
            qv = unnamed
        if rank.smooth:
            rel = sims / max(float(sims.max()), 1e-9)
            left = np.r_[-np.inf, rel[:-1]]
            right = np.r_[rel[1:], -np.inf]
            left[1:][same[1:lim] != same[: lim - 1]] = -np.inf
            right[:-1][same[: lim - 1] != same[1:lim]] = -np.inf
            best = np.maximum(left, right)
            sims = sims + rank.smooth * np.where(np.isfinite(best), best, 0.0) * max(float(sims.max()), 1e-9)
        cand, score = fuse(sims)
        if rank.neighbour:  # the turns beside the best candidates join them and gain a share of their score
            top = cand[np.argsort(-score, kind="stable")[: rank.neighbour_top]]
            best = {int(i): float(score[cand == i][0]) for i in top}
            near: dict[int, float] = {}
            for i, sc in best.items():
                for j in (i - 1, i + 1) if rank.neighbour_side == "both" else (i + 1,):
                    if 0 <= j < lim and same[j] == same[i]:
                        if rank.neighbour_same_speaker and group.docs[j].speaker != group.docs[i].speaker:
                            continue
                        near[j] = max(near.get(j, 0.0), sc)
            extra = np.union1d(extra, np.array(sorted(near), dtype=np.int64))
            cand, score = fuse(sims)
            score = score + rank.neighbour * np.array([near.get(int(i), 0.0) for i in cand])
        if rank.feedback:
            top = cand[np.argsort(-score, kind="stable")[:3]]
            moved = qv + rank.feedback * vectors[top].mean(axis=0)
            cand, score = fuse(vectors[:lim] @ (moved / np.linalg.norm(moved)))
        order = [int(i) for i in cand[np.argsort(-score, kind="stable")]]
        if rank.hop:
            moved = qv + rank.hop * vectors[order[0]]
            kws_first = kws
            kws = index.scores(qterms + terms[order[0]])[:lim]
            cand2, score2 = fuse(vectors[:lim] @ (moved / np.linalg.norm(moved)))
            kws = kws_first
            second = [int(i) for i in cand2[np.argsort(-score2, kind="stable")] if int(i) not in order[:5]]
            if rank.hop_other:
                second = [i for i in second if grp[i] != grp[order[0]]]
            order = order[:5] + second + [i for i in order[5:] if i not in second]
        elif rank.stage:
            order = stages.staged(order, dict(zip(cand.tolist(), score.tolist())), grp, rank.stage)
        elif rank.spread:
            sc = dict(zip(cand.tolist(), score.tolist()))
            fn = stages.spread_mmr if rank.spread_kind == "mmr" else stages.spread_floor
            order = fn(order, sc, grp, rank.spread, rank.spread_start)
        elif rank.diversity:
            left = dict(zip(cand.tolist(), score.tolist()))
            order = []
            taken: dict[str, int] = {}
            while left:
                best = max(left, key=lambda i: (left[i] - rank.diversity * taken.get(same[i], 0), -i))
                order.append(best)
                taken[same[best]] = taken.get(same[best], 0) + 1
                del left[best]
        found = []
        shown: set[str] = set()
        for i in order:  # the store returns one of identical texts
            if len(found) < 10 and texts[i] not in shown:
                shown.add(texts[i])
                found.append(units[i])
        r5 += recall_at_k(found, q.evidence, 5)
        r10 += recall_at_k(found, q.evidence, 10)
        if kinds is not None and q.kind:
            k = kinds.setdefault(q.kind, [0.0, 0.0, 0])
            k[0] += recall_at_k(found, q.evidence, 5)
            k[1] += recall_at_k(found, q.evidence, 10)
            k[2] += 1
    return r5, r10, n


def speaker_stripped(group: Group, every: bool = False) -> list[str]:
    """Each question of ``group`` without the names of the group's speakers it holds (``every``: without
    all its names once one is a speaker's; :func:`~contextsieve.stash.names.without_names`): what
    ``Ranking.strip`` embeds."""
    labels = {lab for d in group.docs for lab in speaker_labels(doc_text(d, "plain"))}
    out = []
    for q in group.questions:
        names = query_names(q.text)
        named = [m for m in names if names_speaker([m], tuple(labels))]
        out.append(without_names(q.text, names if every else named) if named else q.text)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="conv,plays,realmem,scifact")
    ap.add_argument("--embeddings", default=",".join(EMBEDDINGS), help="embedding variants (default all)")
    ap.add_argument("--cache", type=Path, default=None, help="keep vectors here between runs (default: a temp dir)")
    ap.add_argument(
        "--rank-embedding", default="plain", help="the embedding the ranking variants run over (default plain)"
    )
    ap.add_argument(
        "--rankings", default="", help="ranking variants, comma-separated (default all; issue49: the rows of issue 49)"
    )
    ap.add_argument("--limit", type=int, default=0, help="RealMem: the first N conversations (default all)")
    args = ap.parse_args(argv)
    from contextsieve.models.embedder import Embedder

    loaders: dict[str, Callable[[], list[Group]]] = {
        "conv": conv_groups,
        "plays": lambda: conv_groups(plays.turns(), plays.questions()),
        "realmem": lambda: realmem_groups(EVAL / "realmem", args.limit),
        "scifact": lambda: scifact_groups(EVAL / "scifact"),
    }
    names = [s for s in args.sets.split(",") if s]
    variants = [v for v in args.embeddings.split(",") if v]
    emb = Embedder()
    tmp = tempfile.TemporaryDirectory()
    cache = args.cache or Path(tmp.name)
    cache.mkdir(parents=True, exist_ok=True)

    def embedded(texts: list[str]) -> np.ndarray:
        key = hashlib.sha256(("\x00".join(texts) + emb.model_id).encode()).hexdigest()[:24]
        path = cache / f"{key}.npy"
        if path.exists():
            return np.load(path)
        v = np.asarray(emb.embed(texts), dtype=np.float32)
        np.save(path, v)
        return v

    rows: dict[str, dict[str, tuple[float, float]]] = {}
    by_kind: dict[str, dict[str, tuple[float, float]]] = {}  # the plays' kinds of question, per ranking
    t0 = time.perf_counter()
    for name in names:
        groups = loaders[name]()
        queries = [embedded([q.text for q in g.questions]) for g in groups]
        stripped = [embedded(speaker_stripped(g)) for g in groups]
        stripped_all = [embedded(speaker_stripped(g, True)) for g in groups]
        plain = None
        for v in variants:
            vecs = [embedded([doc_text(d, v) for d in g.docs]) for g in groups]
            if v == "plain":
                plain = vecs
            tot = [0.0, 0.0, 0]
            kinds: dict[str, list[float]] = {}
            for g, d, q in zip(groups, vecs, queries):
                r = evaluate(g, d, q, Ranking(), kinds)
                tot = [tot[0] + r[0], tot[1] + r[1], tot[2] + r[2]]
            rows.setdefault(f"embed {v}", {})[name] = (tot[0] / tot[2], tot[1] / tot[2])
            for kind, (k5, k10, kn) in sorted(kinds.items()):
                by_kind.setdefault(f"embed {v}", {})[f"{name} {kind}"] = (k5 / kn, k10 / kn)
        if plain is None or args.rank_embedding != "plain":
            plain = [embedded([doc_text(d, args.rank_embedding) for d in g.docs]) for g in groups]
        chosen = [r for r in args.rankings.split(",") if r] or list(RANKINGS)
        if chosen == ["issue49"]:  # the rows of issue 49: today's default and each change of it
            chosen = list(RANKINGS)[list(RANKINGS).index("today") :]
        for rname, rank in RANKINGS.items():
            if rname not in chosen or (rname == "default" and f"embed {args.rank_embedding}" in rows):
                continue
            tot = [0.0, 0.0, 0]
            kinds = {}
            for g, d, q, sq, sa in zip(groups, plain, queries, stripped, stripped_all):
                r = evaluate(g, d, q, rank, kinds, sq, sa)
                tot = [tot[0] + r[0], tot[1] + r[1], tot[2] + r[2]]
            rows.setdefault(f"rank {rname}", {})[name] = (tot[0] / tot[2], tot[1] / tot[2])
            for kind, (k5, k10, kn) in sorted(kinds.items()):
                by_kind.setdefault(f"rank {rname}", {})[f"{name} {kind}"] = (k5 / kn, k10 / kn)
    print(f"# stash_recall: sets {', '.join(names)}; {time.perf_counter() - t0:.0f} s; {cpu_summary()}")
    print(f"{'variant':<22}" + "".join(f" {n + ' R@5':>13} {n + ' R@10':>13}" for n in names))
    for variant, per in rows.items():
        print(f"{variant:<22}" + "".join(f" {per[n][0]:>13.3f} {per[n][1]:>13.3f}" for n in names))
    cols = sorted({c for per in by_kind.values() for c in per})
    if cols:  # R@5 / R@10 by kind of question
        print(f"\n{'variant':<22}" + "".join(f" {c:>22}" for c in cols))
        for variant, per in by_kind.items():
            print(f"{variant:<22}" + "".join(f" {per[c][0]:>10.3f} / {per[c][1]:.3f}" for c in cols))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
