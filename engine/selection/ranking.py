"""Semantic selection of agent-mode items for one request, in the reference system's exact order.

Notes §2.1 "Scoring": score every candidate chunk against the query chunks (max over query chunks),
keep the ``top_k`` best *chunks*, drop scores ``<= 0``, group by item keeping each item's best chunk,
sort items by score, keep every item at or above ``include_score`` (even past ``top_n``), then fill up
to ``top_n`` with the best of the rest. Ties are broken by collection order (rules, references, tools,
then chunk index), which is also what the reference's stable sort does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from contextsieve.choices import KeywordFusion, KeywordRole, QueryPooling
from contextsieve.kernels.scoring import Hits, query_scores, score_pool_topk
from contextsieve.kernels.scoring import top_k as top_rows
from contextsieve.retrieval.bm25 import tokenize
from contextsieve.retrieval.fusion import reciprocal_rank, weighted_sum

__all__ = [
    "Selected",
    "Ranked",
    "RankRule",
    "CutRule",
    "rank_chunks",
    "cut",
    "select_items",
    "fuse",
    "item_query_scores",
    "min_representation",
    "represent_sentences",
    "SentenceEvidence",
    "SENTENCE_ITEMS",
]


@dataclass(frozen=True)
class Selected:
    """One chosen item: its position among the candidates, ranking score, best chunk row, query chunk,
    and similarity (the dense score of that chunk, which the include-score threshold is compared with;
    equal to ``score`` unless a keyword term is added)."""

    item: int
    score: float
    chunk: int
    query_chunk: int
    similarity: float | None = None
    keyword: bool = False  # a chunk of the item among the top chunks matches a keyword of the message
    keyword_score: float = 0.0  # the best normalised keyword score of those chunks

    @property
    def sim(self) -> float:
        return self.score if self.similarity is None else self.similarity


@dataclass(frozen=True)
class Ranked:
    """The top-k candidate chunks of one search.

    Attributes:
        hits: chunk rows best first (ties: lower row), their ranking scores, and the query chunk that
            gave each its dense score.
        sims: the dense (pooled) similarity of each hit, which the ``> 0`` filter and the include
            score are compared with.
        ranking: the ranking score of every chunk (``-inf`` where excluded), when it was computed
            whole (``None`` after the fused kernel or a search limited to some rows).
        keyword: the normalised keyword score of each hit (``None`` without a keyword term).
        by_query: ``[N, M]`` each scored chunk's similarity to each query chunk (rows as ``ranking``,
            or the rows a limited search scored, in their order), when the ranking computed it; the
            search reads it for :func:`represent_sentences` and then drops it (``None``).
    """

    hits: Hits
    sims: np.ndarray
    ranking: np.ndarray | None = None
    keyword: np.ndarray | None = None
    by_query: np.ndarray | None = None


@dataclass(frozen=True)
class RankRule:
    """How :func:`rank_chunks` scores chunks (a domain's settings: ``context_top_k``, ``query_pooling``,
    ``keyword_weight``, ``keyword_fusion``).

    Attributes:
        top_k: how many chunks to keep, best first.
        pooling: ``"max"`` (the reference, default) or ``"mean"`` over the query chunks.
        keyword_weight: weight of the keyword term joined by ``fusion`` (default 0: none; see :func:`fuse`).
        fusion: ``"weighted"`` (default) or ``"rrf"``.
    """

    top_k: int
    pooling: QueryPooling = "max"
    keyword_weight: float = 0.0
    fusion: KeywordFusion = "weighted"


def rank_chunks(
    queries: np.ndarray,
    chunks: np.ndarray,
    exclude: np.ndarray,
    rule: RankRule,
    *,
    keyword: np.ndarray | None = None,
    rows: np.ndarray | None = None,
    boost: np.ndarray | None = None,
) -> Ranked:
    """The ``rule.top_k`` chunks by ranking score (dense, pooled over the query chunks, plus the keyword term).

    Args:
        queries: ``[M, D]`` query-chunk vectors. chunks: ``[N, D]`` chunk vectors.
        exclude: bool per chunk: rows that may not be returned.
        rule: the :class:`RankRule` (top-k, pooling, keyword weight and fusion).
        keyword: optional per-chunk keyword scores in [0, 1], joined by ``rule.fusion`` (see :func:`fuse`).
        rows: score only these chunk rows (candidates found by an approximate index); default all.
        boost: optional per-chunk amount added to the ranking score (e.g. its server's match), never to
            the similarity.
    """
    top_k, pooling, keyword_weight, fusion = rule.top_k, rule.pooling, rule.keyword_weight, rule.fusion
    if rows is None and pooling == "max" and (keyword is None or keyword_weight == 0) and boost is None:
        hits = score_pool_topk(queries, chunks, top_k, exclude=exclude)
        return Ranked(hits, hits.scores)
    every = rows is None or (len(rows) == chunks.shape[0] and bool((np.asarray(rows) == np.arange(len(rows))).all()))
    # every row (a domain of every chunk, a year of history's search): the matrix itself, not a copy of it
    dense, s = pooled_scores(queries, chunks if every else chunks[rows], pooling)
    kw = keyword if keyword is None or rows is None else keyword[rows]
    ranking = fuse(dense, kw, keyword_weight, fusion, exclude if rows is None else exclude[rows])
    if boost is not None:
        ranking += boost if rows is None else boost[rows]
    idx = top_rows(ranking, top_k)
    idx = idx[np.isfinite(ranking[idx])]
    which = s[idx].argmax(axis=1).astype(np.int32)
    real = idx if rows is None else np.asarray(rows, dtype=np.int64)[idx]
    if rows is not None:  # lower row first on ties, as a whole-matrix search orders them
        order = np.lexsort((real, -ranking[idx]))
        idx, real, which = idx[order], real[order], which[order]
    hit_kw = None if kw is None or not keyword_weight else np.asarray(kw, dtype=np.float32)[idx]
    return Ranked(Hits(real, ranking[idx], which), dense[idx], ranking if rows is None else None, hit_kw, s)


def pooled_scores(queries: np.ndarray, chunks: np.ndarray, pooling: QueryPooling) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk's dense score pooled over the query chunks (``[N]`` float32) and the full ``[N, M]``
    score matrix it came from."""
    s = query_scores(chunks, queries)
    return (s.mean(axis=1) if pooling == "mean" else s.max(axis=1)).astype(np.float32), s


@dataclass(frozen=True)
class CutRule:
    """The cut-offs :func:`cut` applies (a domain's settings: ``context_top_n``,
    ``context_include_score``, ``keyword_role``, ``context_min_ratio``, ``context_min_score``, and the
    no-filler ratio).

    Attributes:
        top_n: items filled up to (past it only items at or above ``include_score``).
        include_score: a similarity at or above which an item always stays.
        keyword_role: ``"rerank"`` (the reference's rule, default) or ``"add"``.
        min_ratio: keep only items whose ranking score is at least this times the best's (default ``None``: no rule).
        min_score: the evidence floor, a similarity (default ``None``: none).
        fill_ratio: the no-filler ratio for items of weak evidence (default ``None``: no such rule).
    """

    top_n: int
    include_score: float
    keyword_role: KeywordRole = "rerank"
    min_ratio: float | None = None
    min_score: float | None = None
    fill_ratio: float | None = None


def cut(
    ranked: Ranked,
    chunk_item: np.ndarray,
    rule: CutRule,
    *,
    words: tuple[str, ...] | None = None,
    examples: np.ndarray | None = None,
) -> tuple[list[Selected], list[Selected]]:
    """Group the top chunks by item and apply the reference's cut-offs.

    Chunks with similarity ``<= 0`` are dropped unless ``keyword_role`` is ``"add"`` and the chunk has
    a keyword match (then keyword evidence alone can bring an item in; with ``"rerank"``, the
    reference's rule, a keyword term only re-ranks). Each item keeps its best chunk, items are ranked
    by score; every item at or above ``include_score`` (a similarity) stays, even past ``top_n``; then
    the best of the rest fill up to ``top_n``, and with ``min_ratio`` only those whose ranking score is
    at least ``min_ratio`` times the best item's (adaptive size: ``top_n`` becomes a cap), and with
    ``min_score`` only those with some evidence: a chunk among the top chunks that matches a keyword
    of the message, or a similarity of at least ``min_score``; for a short message (``words``, its
    words that are not stopwords, at most :data:`SHORT_MESSAGE_WORDS`) that names nothing here
    (:func:`names_nothing`) twice that, and for small talk keyword matches do not count. An
    absolute floor: small talk ("hi", "thanks!", "good morning": similarities up to 0.27) selects
    nothing; a request that names a tool's words keeps it however low the model scores it; a longer
    request phrased in other words than the items' keeps its items from ``min_score`` up.
    ``examples`` (bool per chunk row: a tool's recorded example requests) keeps ``min_ratio`` relative to
    the best item matched by its own text, so a close example adds its tool without cutting the others.
    ``fill_ratio`` (no filler): an item of weak evidence (a similarity under twice ``min_score`` and no
    keyword match of at least :data:`FILL_KEYWORD` of the best) stays only with a ranking score of at
    least ``fill_ratio`` times the best; ``None``: no such rule.

    Returns:
        ``(grouped, chosen)``: every item the top chunks grouped into, ranked, and the chosen ones.
    """
    top_n, include_score, keyword_role = rule.top_n, rule.include_score, rule.keyword_role
    min_ratio, min_score, fill_ratio = rule.min_ratio, rule.min_score, rule.fill_ratio
    hits = ranked.hits
    matches = ranked.keyword.tolist() if ranked.keyword is not None else [0.0] * len(hits.idx)
    kw = matches if keyword_role == "add" and ranked.keyword is not None else None
    best: dict[int, Selected] = {}
    matched: set[int] = set()
    strongest: dict[int, float] = {}  # per item, its best keyword score among the top chunks
    for i, (row, score, q, sim) in enumerate(
        zip(hits.idx.tolist(), hits.scores.tolist(), hits.which.tolist(), ranked.sims.tolist())
    ):
        if sim <= 0 and (kw is None or kw[i] <= 0):
            continue
        item = int(chunk_item[row])
        if matches[i] > 0:
            matched.add(item)
            strongest[item] = max(strongest.get(item, 0.0), float(matches[i]))
        if item not in best:  # hits are sorted best first, so the first chunk of an item is its best
            best[item] = Selected(item, float(score), int(row), int(q), float(sim))
    if matched:
        best = {
            i: dataclasses.replace(x, keyword=True, keyword_score=strongest[i]) if i in matched else x
            for i, x in best.items()
        }
    grouped = sorted(best.values(), key=lambda s: -s.score)  # stable: ties keep first-seen order
    # The include score is a similarity threshold: a keyword term changes the ranking, not what clears it.
    high = [s for s in grouped if s.sim >= include_score]
    other = [s for s in grouped if s.sim < include_score]
    base = ratio_base(ranked, examples, keyword_role, grouped)
    if min_ratio is not None and grouped and base > 0:
        floor = min_ratio * base
        other = [s for s in other if s.score >= floor]
        if min_score is not None and fill_ratio is not None:  # weak: a low similarity, no strong keyword
            fill = max(min_ratio, fill_ratio) * base
            other = [s for s in other if s.score >= fill or not weak_evidence(s, min_score)]
    if min_score is not None:
        doubled, keywords_count = names_nothing(grouped, words)
        floor = 2 * min_score if doubled else min_score
        other = [s for s in other if s.sim >= floor or (s.keyword and keywords_count)]
    room = max(0, top_n - len(high))
    if examples is None or HISTORY_EXTRA <= 0:
        return grouped, high + other[:room]
    # history adds: an item found through an example takes no place of one the request's words found,
    # whether it stays at the include score (then it frees the place it took) or fills a place
    freed = min(HISTORY_EXTRA, sum(1 for s in high if examples[s.chunk]))
    room = max(0, top_n - len(high) + freed)
    learned = [s for s in other if examples[s.chunk]][: HISTORY_EXTRA - freed]
    taken = {id(s) for s in learned}
    rest = [s for s in other if id(s) not in taken]
    # the request's own best items keep their places: further items found through history fill the others
    guard = max(0, min(OWN_KEPT, top_n) - sum(1 for s in high if not examples[s.chunk]))
    own = {id(s) for s in [s for s in rest if not examples[s.chunk]][: min(room, guard)]}
    kept = {id(s) for s in [s for s in rest if id(s) not in own][: room - len(own)]} | own | taken
    return grouped, high + [s for s in other if id(s) in kept]


#: Items found through a recorded example (their best chunk an example) that :func:`cut` keeps beyond
#: ``top_n``: history adds them instead of taking the place of an item the request's own words found.
#: 1 lifted mcp_tasks' loop at ``tool_top_n=5`` with history from 0.947 to 0.959 (cold 0.951) for +0.2
#: tools; 2 added tools and no recall (``tool_loop`` / ``tool_selection --history-folds 2``).
HISTORY_EXTRA = 1
#: How many of a request's best items found by its own words (their best chunk their own text) no item
#: found through history takes the place of, the items at the include score counted: one recorded
#: request of another task, close to this one, could fill every place with its tools (a Spanish
#: chart request lost its SQLite and chart tools to a login task's browser tools).
OWN_KEPT = 3

#: Words (not stopwords) up to which a message is short: small talk has 0-2 ("thanks!", "good
#: morning", "see you tomorrow").
SHORT_MESSAGE_WORDS = 2

#: Conversational words (greetings, thanks, acknowledgements, farewells, fillers; English, German,
#: French, Spanish), as the keyword tokenizer writes them. A short message made of them only is
#: small talk: it names nothing, whatever item text happens to contain "good", "sure" or "day".
CHAT_WORDS = frozenset(
    tokenize(
        "hi hello hey hiya howdy yo greetings morning afternoon evening night good day great nice cool "
        "awesome perfect fine ok okay alright sure yes yeah yep no nope thanks thank thx cheers welcome "
        "appreciate much lot bye goodbye later see soon tomorrow take care up sup going doing well lol "
        "haha wow hmm sounds sound agreed never mind got it done right exactly indeed "
        "hallo danke bitte tschüss gut guten morgen tag abend merci bonjour salut bonsoir oui "
        "hola gracias adiós buenos buenas días tardes noches vale"
    )
)


#: ``fill_ratio`` of the rules and references (:func:`cut`): a rule or reference of weak evidence stays
#: only from 0.55 of the best match's ranking score up, so a small agent's places are not filled with
#: items that merely score least badly (``python -m benchmarks.quality.small_talk``, docs/selection.md).
#: Tools keep ``min_ratio`` alone: any higher floor lowered tool recall on every catalog measured.
#: With :data:`FILL_KEYWORD` chosen where the bundled agent's requests select the same items with the
#: fp32 graph and both int8 weight types, and with either value moved by 0.03 (at 0.5 and 0.5 the
#: pull-request request's weak rules sat within 0.005 of the cut, so the CPU's kernels decided).
FILL_RATIO = 0.55
#: A keyword match at least this share of the best candidate chunk's is evidence on its own.
FILL_KEYWORD = 0.33


def weak_evidence(s: Selected, min_score: float) -> bool:
    """Whether an item's evidence is weak: a similarity under twice ``min_score`` and no keyword match of
    at least :data:`FILL_KEYWORD` of the best candidate chunk's."""
    return s.sim < 2 * min_score and s.keyword_score < FILL_KEYWORD


def ratio_base(
    ranked: Ranked,
    examples: np.ndarray | None,
    keyword_role: KeywordRole = "rerank",
    grouped: list[Selected] | None = None,
) -> float:
    """What ``min_ratio`` in :func:`cut` is relative to: the best ranking score of a top chunk that is an
    item's own text, not a recorded example (``examples``: bool per chunk row), among the chunks
    :func:`cut` groups (similarity above 0, or a keyword match with ``keyword_role="add"``). A tool
    found through an example still sets the base with its own text when that ranks among the top
    chunks, so an example's score never lowers the floor for the others. The best chunk's score when
    every one is an example; 0 when none is grouped. ``grouped``: :func:`cut`'s grouped items, when
    known (without an example among the top chunks the base is the best of them)."""
    if grouped is not None and (examples is None or not examples[ranked.hits.idx].any()):
        return grouped[0].score if grouped else 0.0
    kept = ranked.sims > 0
    if keyword_role == "add" and ranked.keyword is not None:
        kept |= ranked.keyword > 0
    scores = ranked.hits.scores[kept]
    if scores.size == 0:
        return 0.0
    if examples is not None:
        own = scores[~examples[ranked.hits.idx[kept]]]
        if own.size:
            return float(own[0])
    return float(scores[0])


def names_nothing(grouped: list[Selected], words: tuple[str, ...] | None) -> tuple[bool, bool]:
    """Whether the evidence floor doubles for a message of content ``words`` (``None``: unknown,
    taken as long), and whether keyword matches still count as evidence: a short message (at most
    :data:`SHORT_MESSAGE_WORDS` words) of conversational words only (:data:`CHAT_WORDS`) is small
    talk, whose keyword matches are no evidence; a short message of which no item matches a keyword
    names nothing here. Returns ``(doubled, keywords_count)``."""
    if words is None or len(words) > SHORT_MESSAGE_WORDS:
        return False, True
    if all(w in CHAT_WORDS for w in words):
        return True, False
    return not any(s.keyword for s in grouped), True


def select_items(
    queries: np.ndarray,
    chunks: np.ndarray,
    chunk_item: np.ndarray,
    candidates: np.ndarray,
    rank: RankRule,
    rule: CutRule,
    *,
    keyword: np.ndarray | None = None,
) -> list[Selected]:
    """Choose items for a request: :func:`rank_chunks` by ``rank`` over every chunk, then :func:`cut`
    by ``rule``.

    ``chunk_item`` is the item position of each chunk and ``candidates`` a bool per item position.
    M = 0 query chunks or no chunks select nothing. Returns the selected items, best first.
    """
    if queries.shape[0] == 0 or chunks.shape[0] == 0:
        return []
    ranked = rank_chunks(queries, chunks, ~candidates[chunk_item], rank, keyword=keyword)
    return cut(ranked, chunk_item, rule)[1]


def fuse(
    dense: np.ndarray, keyword: np.ndarray | None, weight: float, fusion: KeywordFusion, exclude: np.ndarray
) -> np.ndarray:
    """The ranking score of each chunk (``-inf`` where ``exclude``), by the retrieval core's fusion
    (:mod:`contextsieve.retrieval.fusion`).

    ``"weighted"``: ``dense + weight * keyword``. ``"rrf"``: ``1 / (60 + dense rank) + weight /
    (60 + keyword rank)``, ranks among the candidate chunks (chunks without a keyword match get no
    keyword term). Without a keyword term the dense score itself.
    """
    if keyword is None or not weight:
        ranking = weighted_sum([(dense, 1.0)], np.float32)
    elif fusion == "rrf":
        ranking = reciprocal_rank(dense, keyword, weight, ~exclude)
    else:
        ranking = weighted_sum([(dense, 1.0), (keyword, weight)], np.float32)
    ranking[exclude] = -np.inf
    return ranking


def item_query_scores(
    queries: np.ndarray, chunks: np.ndarray, chunk_item: np.ndarray, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each item's best score per query chunk, ``[n_items, M]`` (``-inf`` for non-candidates), and the
    chunk row that gave it. ``chunk_item`` must be sorted (an item's chunks are contiguous)."""
    n_items = candidates.shape[0]
    s = query_scores(chunks, queries)  # [N, M]
    counts = np.bincount(chunk_item, minlength=n_items)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    per = np.full((n_items, queries.shape[0]), -np.inf, dtype=np.float32)
    arg = np.full((n_items, queries.shape[0]), -1, dtype=np.int64)
    if s.size:
        idx = np.flatnonzero(has)
        per[idx] = np.maximum.reduceat(s, starts[idx], axis=0)
        for i in idx:  # best row per item and query chunk (first on ties); agent-sized loops
            arg[i] = starts[i] + np.argmax(s[starts[i] : starts[i] + counts[i]], axis=0)
    per[~candidates] = -np.inf
    return per, arg


def min_representation(
    chosen: list[Selected], per: np.ndarray, arg: np.ndarray, *, floor: float, cap: int
) -> list[Selected]:
    """Items to add so that every query chunk whose best candidate scores ``>= floor`` has an item.

    A query chunk is represented when a chosen item got its score from it. For each one that is not
    (in query order), the best candidate not yet chosen is added, up to ``cap`` items.
    """
    represented = {s.query_chunk for s in chosen}
    taken = {s.item for s in chosen}
    out: list[Selected] = []
    for m in range(per.shape[1]):
        if len(out) >= cap:
            break
        if m in represented:
            continue
        col = per[:, m].copy()
        col[list(taken)] = -np.inf
        best = int(np.argmax(col))
        if col[best] >= floor:
            out.append(Selected(best, float(col[best]), int(arg[best, m]), m))
            taken.add(best)
            represented.add(m)
    return out


@dataclass(frozen=True)
class SentenceEvidence:
    """What :func:`represent_sentences` asks of a sentence's best candidate (the request's evidence rule).

    Attributes:
        min_score: the evidence floor, a similarity (``context_min_score``).
        floor_doubled: the floor doubles (a short message that names nothing here, as in :func:`cut`).
        keywords_count: keyword matches are evidence (not for small talk).
        cap: most items added per request.
    """

    min_score: float
    floor_doubled: bool = False
    keywords_count: bool = True
    cap: int = 1


def represent_sentences(
    chosen: list[Selected],
    scores: np.ndarray,
    owner: np.ndarray,
    allowed: np.ndarray,
    keyword: np.ndarray | None,
    evidence: SentenceEvidence,
    rows: np.ndarray | None = None,
) -> list[Selected]:
    """The no-filler rule's counterpart: a query sentence that none of ``chosen`` got its score from
    gets its best candidate when that candidate's evidence for it is not weak, at most ``evidence.cap``
    items.

    Not weak (:func:`weak_evidence`): a similarity to the sentence of at least twice ``min_score``, or a
    keyword match of at least :data:`FILL_KEYWORD` of the best candidate chunk's (``keyword``: each
    chunk's normalised keyword score, the item's best counts; ``None``: no keyword term; not counted
    unless ``keywords_count``), and in either case a similarity of at least ``min_score`` (twice that
    when ``floor_doubled``). "How many orders were refunded last month? Write the SQL for it." keeps the
    rule about database queries for its second sentence, which the first sentence's better scores had
    pushed past top-N.

    Args:
        scores: ``[N, M]`` each chunk's similarity to each query sentence (a column is read only for a
            sentence without an item). owner: the item of each chunk. allowed: bool per chunk: the
            chunks that may be chosen (the domain's candidates). keyword: per chunk, as ``scores``.
        evidence: the rule (:class:`SentenceEvidence`).
        rows: the chunk row of each of the ``N`` (the rows a limited search scored); default ``None``:
            the ``N`` are every chunk, in order.
    """
    min_score, cap = evidence.min_score, evidence.cap
    represented = {s.query_chunk for s in chosen}
    taken = np.zeros(int(max(owner.max(initial=-1), *(s.item for s in chosen), -1)) + 1, dtype=bool)
    taken[[s.item for s in chosen]] = True
    floor = 2 * min_score if evidence.floor_doubled else min_score
    out: list[Selected] = []
    for m in range(scores.shape[1]):
        if len(out) >= cap:
            break
        if m in represented or scores.shape[0] == 0:
            continue
        col = np.where(allowed & ~taken[owner], scores[:, m], -np.inf)
        at = int(np.argmax(col))  # the best chunk's item is the best item (an item scores its best chunk)
        sim, item = float(col[at]), int(owner[at])
        kw = float(keyword[owner == item].max()) if keyword is not None and evidence.keywords_count else 0.0
        if sim >= floor and (sim >= 2 * min_score or kw >= FILL_KEYWORD):
            row = at if rows is None else int(rows[at])
            out.append(Selected(item, sim, row, m, sim, kw > 0, kw))
            taken[item] = True
            represented.add(m)
    return out


#: Items :func:`represent_sentences` adds to the rules and references of one request (the default when
#: ``min_representation_floor`` is unset; ``min_representation_cap`` 0 turns it off): one, so a message
#: of two requests keeps each one's rule without the offer growing with the sentences.
SENTENCE_ITEMS = 1
