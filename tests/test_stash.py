"""The stash store (seed 004), one suite for every backend (``store`` is parametrised by backend)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing as mp
import os
import sqlite3
import time
import warnings
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from contextsieve.errors import InputError, StashError, StashIntegrityWarning, StashModelError, UnknownSegmentError
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.retrieval.fusion import spread_weights
from contextsieve.stash.backend import Filters, query_terms
from contextsieve.stash.config import StashConfig
from contextsieve.stash.options import RetrieveKeywords, RetrieveOptions
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import NewSegment, SegmentType
from contextsieve.stash.sqlite import SqliteBackend
from contextsieve.stash.store import StashStore
from contextsieve.stash.vectors import TableRow, VectorTable
from tests.fake_embedder import FakeEmbedder

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fake(model: str = "fake/1") -> FakeEmbedder:
    e = FakeEmbedder()
    e.model_id = model  # type: ignore[misc]
    return e


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_uri"))
    return str(tmp_path / "stash.db")


@pytest.fixture
def store(location: str):  # noqa: ANN201
    s = StashStore.open(location, fake())
    yield s
    s.close()


def count(store: StashStore) -> int:
    return int(str(store.stats()["segments"]))


def bm25(
    tf: Sequence[int], df: Sequence[int], n: int, length: int, avgdl: float, k1: float = 1.2, b: float = 0.75
) -> float:
    """The keyword oracle: Okapi BM25 of one document for distinct query terms, as SQLite FTS5's
    ``bm25()`` computes it: ``sum idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))`` with
    ``idf = ln((n - df + 0.5) / (df + 0.5))``, floored at 1e-6 (a term in over half the documents
    still counts a little).

    Args:
        tf / df: per query term, its count in the document and the documents holding it.
        n: documents in the store. length: terms in the document. avgdl: mean terms per document.
    """
    score = 0.0
    norm = k1 * (1.0 - b + b * length / max(avgdl, 1e-9))
    for f, d in zip(tf, df):
        if f <= 0:
            continue
        idf = math.log((n - d + 0.5) / (d + 0.5)) if n > 0 else 0.0
        score += max(idf, 1e-6) * f * (k1 + 1.0) / (f + norm)
    return score


# -- stash and get --------------------------------------------------------------------------------


def test_stash_and_get_keep_every_field(store: StashStore) -> None:
    r = store.stash(
        [
            NewSegment(
                "The login endpoint fails with a 500 when the token expired",
                type="error_log",
                id="err1",
                topic="auth",
                source="logs/app.log",
                timestamp=T0,
            ),
            {
                "text": "We decided to refresh JWT tokens on the client",
                "type": "decision",
                "references": ["err1"],
                "expires_in_days": 3,
                "protected": True,
            },
        ],
        session="s1",
    )
    assert r.stashed == 2 and r.duplicates == 0 and r.segment_ids[0] == "err1"
    a, b = store.get(list(r.segment_ids), session="s1")
    assert (a.type, a.topic, a.source, a.timestamp, a.session) == (
        SegmentType.ERROR_LOG,
        "auth",
        "logs/app.log",
        T0,
        "s1",
    )
    assert a.tokens == 11 + 2 and r.tokens == a.tokens + b.tokens
    assert a.referenced_by == (b.id,) and b.references == ("err1",) and a.references == ()
    assert b.protected and b.expires_at is not None
    assert abs((b.expires_at - b.stashed_at) - timedelta(days=3)) < timedelta(seconds=1)
    assert b.timestamp == b.stashed_at and b.timestamp.tzinfo is not None
    assert a.embedding_model == "fake/1" and a.chunks == 1


def test_exact_duplicates_return_the_stored_id_per_session(store: StashStore) -> None:
    first = store.stash(["alpha beta", "gamma"], session="s1")
    again = store.stash(["gamma", "alpha beta", "alpha beta"], session="s1")
    assert again.segment_ids == (first.segment_ids[1], first.segment_ids[0], first.segment_ids[0])
    assert again.stashed == 0 and again.duplicates == 3 and count(store) == 2
    other = store.stash(["gamma"], session="s2")  # another session keeps its own copy
    assert other.stashed == 1 and other.segment_ids[0] not in first.segment_ids


def test_near_duplicates_when_asked(location: str) -> None:
    with StashStore.open(location, fake(), StashConfig(near_duplicate=0.95)) as s:
        a = s.stash(["deploy the api server to staging"], session="s")
        b = s.stash(["Deploy the API server to staging!", "rotate database credentials"], session="s")
        assert b.segment_ids[0] == a.segment_ids[0] and b.stashed == 1


@pytest.mark.parametrize(
    "segment, message",
    [
        ({"text": ""}, "empty"),
        ({"text": "   \n"}, "empty"),
        ({"text": 5}, "must be a string"),
        ({"text": "x", "type": "memo"}, "must be one of"),
        ({"text": "x", "references": ["nope"]}, "not in session"),
        ({"text": "x", "timestamp": datetime(2026, 1, 1)}, "naive"),
        ({"text": "x", "timestamp": "2026-01-01T00:00:00"}, "naive"),
        ({"text": "abc \ud800"}, "surrogate"),
        ({"text": "x", "expires_in_days": 0}, "expires_in_days"),
        ({"text": "x", "expires_in_days": float("nan")}, "expires_in_days"),
        ({"text": "x", "protected": "yes"}, "protected"),
        ({"text": "x", "id": "bad id!"}, "id must be"),
        ({"text": "x", "colour": "red"}, "unknown fields"),
        ({"text": "x", "references": "abc"}, "list of segment ids"),
        ({"text": "x" * 1_000_001}, "at most"),
        ({"text": "x", "topic": ["a"]}, "must be a string"),
    ],
)
def test_bad_segments_are_refused_and_change_nothing(store: StashStore, segment: dict, message: str) -> None:
    store.stash(["kept"], session="s")
    with pytest.raises(InputError, match=message):
        store.stash(["fine one", segment], session="s")
    assert count(store) == 1


def test_ids_must_be_new_and_unique_within_their_session(store: StashStore) -> None:
    store.stash([{"text": "a", "id": "x1"}], session="s")
    with pytest.raises(InputError, match="already in use"):
        store.stash([{"text": "b", "id": "x1"}], session="s")
    with pytest.raises(InputError, match="same id"):
        store.stash([{"text": "b", "id": "y"}, {"text": "c", "id": "y"}], session="s")
    assert count(store) == 1


def test_chosen_ids_are_names_within_a_session(store: StashStore) -> None:
    """Issue 27 item 5: "segment ids already in use: ['plan-1']" told another session the id existed
    and let one session claim ids before another."""
    a = store.stash(
        [{"text": "plan of session a", "id": "plan-1"}, {"text": "a's step", "references": ["plan-1"]}], session="a"
    )
    b = store.stash([{"text": "plan of session b", "id": "plan-1"}], session="b")  # refused before
    assert a.segment_ids[0] == b.segment_ids[0] == "plan-1" and a.stashed == 2 and b.stashed == 1
    assert [x.text for x in store.get(["plan-1"], session="a")] == ["plan of session a"]
    assert [x.text for x in store.get(["plan-1"], session="b")] == ["plan of session b"]
    step = store.get([a.segment_ids[1]], session="a")[0]
    assert step.references == ("plan-1",)  # references are shown by the chosen id
    assert [x.id for x in store.retrieve_by_reference(a.segment_ids[1], session="a")] == [a.segment_ids[1], "plan-1"]
    hits = store.retrieve("plan of session", session="b")
    assert [h.segment.id for h in hits] == ["plan-1"] and hits[0].segment.text == "plan of session b"
    assert {x.id for x in store.list(session="a")} == {"plan-1", a.segment_ids[1]}
    with pytest.raises(UnknownSegmentError):
        store.get(["plan-1"], session="c")  # the same answer as for an id nobody used
    with pytest.raises(InputError, match="not in session"):
        store.stash([{"text": "c's", "references": ["plan-1"]}], session="c")
    assert store.merge(["plan-1"], session="b", keep=False).segments[0].id == "plan-1"
    assert [x.text for x in store.get(["plan-1"], session="a")] == ["plan of session a"]  # a's is untouched
    store.stash([{"text": "b's new plan", "id": "plan-1"}], session="b")  # free again in b


def test_bad_calls(store: StashStore) -> None:
    for bad in ("", 5, "x" * 2000, "a\udc00"):
        with pytest.raises(InputError):
            store.stash(["t"], session=bad)  # type: ignore[arg-type]
    store.stash(["t"], session="s")
    with pytest.raises(InputError):
        store.retrieve("", session="s")
    with pytest.raises(InputError):
        store.retrieve("t", session="s", top_k=0)
    with pytest.raises(InputError):
        store.retrieve("t", session="s", filters={"colour": "red"})
    with pytest.raises(InputError):
        store.retrieve("t", session="s", filters={"since": datetime(2026, 1, 1)})
    with pytest.raises(InputError):
        store.retrieve("t", session="s", min_similarity=float("nan"))
    with pytest.raises(InputError):
        store.get("abc", session="s") if False else store.get([5], session="s")  # type: ignore[list-item]
    with pytest.raises(InputError):
        store.cleanup_old(-1)
    assert store.stash([], session="s").segment_ids == ()


# -- retrieval ------------------------------------------------------------------------------------


def test_retrieve_takes_one_options_object_or_its_keywords(store: StashStore) -> None:
    """``retrieve(query, RetrieveOptions(...))`` and ``retrieve(query, **the same names)`` are one call;
    both at once, or options of another type, are refused; the keywords' TypedDict is the dataclass."""
    store.stash(["deploy the api on friday", "the cat sat on the mat", "rollback plan for the api"], session="s")
    now = T0 + timedelta(days=1)
    opts = RetrieveOptions(session="s", top_k=2, now=now)
    by_options = store.retrieve_traced("api deploy", opts)
    by_keywords = store.retrieve_traced("api deploy", session="s", top_k=2, now=now)
    assert by_options == by_keywords and len(by_options[0]) == 2
    assert store.retrieve("api deploy", opts) == by_options[0]
    assert [r.segment.id for r in store.retrieve("api deploy", RetrieveOptions(session="s"))] == [
        r.segment.id for r in store.retrieve("api deploy", session="s")
    ]
    with pytest.raises(InputError, match="not both"):
        store.retrieve("api", opts, top_k=1)
    with pytest.raises(InputError, match="RetrieveOptions"):
        store.retrieve("api", {"top_k": 1})  # type: ignore[arg-type]
    with pytest.raises(InputError):
        store.retrieve("api", RetrieveOptions(session="s", top_k=0))
    with pytest.raises(TypeError):
        store.retrieve("api", topk=1)  # type: ignore[call-arg]
    assert set(RetrieveKeywords.__annotations__) == {f.name for f in dataclasses.fields(RetrieveOptions)}


def test_retrieve_ranks_filters_and_previews(store: StashStore) -> None:
    store.stash(
        [
            {
                "text": "database migration failed on the users table",
                "type": "error_log",
                "topic": "db",
                "timestamp": T0,
            },
            {
                "text": "database backups run nightly at two",
                "type": "research",
                "topic": "ops",
                "timestamp": T0 + timedelta(days=10),
            },
            {"text": "the cat sat on the mat", "type": "message", "timestamp": T0 + timedelta(days=20)},
        ],
        session="s",
    )
    now = T0 + timedelta(days=30)
    hits = store.retrieve("database migration failed", session="s", top_k=3, now=now)
    assert hits[0].segment.text.startswith("database migration")
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].keyword == 1.0
    only = store.retrieve("database", session="s", filters={"type": "research"}, now=now)
    assert [h.segment.topic for h in only] == ["ops"]
    assert [h.segment.topic for h in store.retrieve("database", session="s", filters={"topic": ["db"]}, now=now)] == [
        "db"
    ]
    timed = store.retrieve(
        "database", session="s", filters={"since": T0 + timedelta(days=5), "until": T0 + timedelta(days=15)}, now=now
    )
    assert [h.segment.topic for h in timed] == ["ops"]
    assert store.retrieve("database", session="s", min_similarity=0.99, now=now) == []
    d = hits[0].to_dict()
    assert set(d) >= {"segment_id", "text", "type", "similarity", "score", "timestamp"}


def test_newer_segments_win_ties_by_the_decay_terms(store: StashStore) -> None:
    ids = store.stash(
        [
            {"text": "release notes draft", "timestamp": T0},
            {"text": "release notes draft v2", "timestamp": T0 + timedelta(days=60)},
        ],
        session="s",
    ).segment_ids
    now = T0 + timedelta(days=61)
    flat = StashConfig(rank=RankConfig(similarity_weight=0.0, keyword_weight=0.0, stashed_weight=0.0))
    hits = store.retrieve("release notes draft", session="s", now=now, top_k=2)
    assert hits[0].score > 0
    with StashStore.open(store.backend.location, fake(), flat) as s2:
        ranked = s2.retrieve("release notes draft", session="s", now=now, top_k=2)
        assert [h.segment.id for h in ranked] == [ids[1], ids[0]]
        assert ranked[0].score == pytest.approx(0.2 * 0.5 ** (1 / 30))


def test_keyword_length_norm_sets_how_much_length_discounts_a_keyword_match(store: StashStore) -> None:
    """``RankConfig.keyword_length_norm`` is BM25's b at retrieve time: at Okapi's 0.75 a short turn
    naming the word once outranks a long one naming it twice; without length normalisation (0) the
    long one ranks first. Out of [0, 1] it is an InputError."""
    filler = " ".join(f"filler{i}" for i in range(40))
    short, long = store.stash(["vault key", f"vault vault {filler}"], session="s").segment_ids
    for b, first in ((0.75, short), (0.25, long), (0.0, long)):
        rank = RankConfig(
            similarity_weight=0.0, keyword_weight=1.0, created_weight=0.0, stashed_weight=0.0, keyword_length_norm=b
        )
        with StashStore.open(store.backend.location, fake(), StashConfig(rank=rank)) as s2:
            got = s2.retrieve("vault", session="s", top_k=2, min_similarity=-1.0)
            assert [h.segment.id for h in got][0] == first, b
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(InputError, match="keyword_length_norm"):
            RankConfig(keyword_length_norm=bad)  # type: ignore[arg-type]


def _spread_oracle(values: list[float], top: int, power: float) -> float:
    """How far a scaled signal's best stands out, written out plainly (0 when nothing matched)."""
    best = sorted(values, reverse=True)[:top]
    return (1.0 - sum(best) / len(best)) ** power if best and best[0] == 1.0 else 0.0


def test_spread_weights_follow_each_signals_spread() -> None:
    """A flat signal (five near ties) loses weight to one whose best stands alone; the weights keep
    their sum; power 0, no spread anywhere, or one signal with no match behave as documented."""
    sims = np.array([1.0, 0.9, 0.9, 0.9, 0.9, 0.1])
    kws = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    cs, ck = _spread_oracle(list(sims), 5, 0.5), _spread_oracle(list(kws), 5, 0.5)
    mean = (0.6 * cs + 0.2 * ck) / 0.8
    got = spread_weights([sims, kws], [0.6, 0.2], 5, 0.5)
    assert got == pytest.approx([0.6 * cs / mean, 0.2 * ck / mean], rel=1e-12)
    assert sum(got) == pytest.approx(0.8) and got[1] > got[0]  # 0.389 / 0.411: the sharp keyword leads
    assert spread_weights([sims, kws], [0.6, 0.2], 5, 0.0) == [0.6, 0.2]
    assert spread_weights([np.ones(6), np.ones(6)], [0.6, 0.2], 5, 0.5) == [0.6, 0.2]  # nothing stands out
    assert spread_weights([sims, np.zeros(6)], [0.6, 0.2], 5, 0.5) == pytest.approx([0.8, 0.0])  # no keyword hit
    assert spread_weights([sims, kws], [0.0, 0.0], 5, 0.5) == [0.0, 0.0]
    rng = np.random.default_rng(11)
    for _ in range(200):  # random pools: the plain oracle and the sum kept
        n, top, power = int(rng.integers(1, 40)), int(rng.integers(1, 8)), float(rng.choice([0.5, 1.0, 2.0]))
        a, b = rng.random(n), rng.random(n) * (rng.random(n) < 0.3)
        a, b = a / a.max(), (b / b.max() if b.max() > 0 else b)
        w = [float(rng.random()), float(rng.random())]
        c = [_spread_oracle(list(a), top, power), _spread_oracle(list(b), top, power)]
        m = (w[0] * c[0] + w[1] * c[1]) / sum(w)
        want = [w[0] * c[0] / m, w[1] * c[1] / m] if m > 0 else w
        assert spread_weights([a, b], w, top, power) == pytest.approx(want, rel=1e-9)
    for bad in (-0.5, 5.0, float("nan"), True):
        with pytest.raises(InputError, match="spread_power"):
            RankConfig(spread_power=bad)  # type: ignore[arg-type]
    for bad_top in (0, 2.5, True):
        with pytest.raises(InputError, match="spread_top"):
            RankConfig(spread_top=bad_top)  # type: ignore[arg-type]


def test_a_retrieve_weighs_its_signals_by_their_spread_and_says_so(store: StashStore) -> None:
    """The parts a result reports are this query's weights (checked against the plain oracle over the
    retrieve's own trace); with ``spread_power`` 0 they are the configured 0.6 / 0.2."""
    texts = ["the harbour at sunset", "a zebra crossing downtown"] + [f"harbour walk number {i}" for i in range(6)]
    store.stash(texts, session="s")
    for power in (0.5, 0.0):
        rank = RankConfig(spread_power=power, created_weight=0.0, stashed_weight=0.0)
        with StashStore.open(store.backend.location, fake(), StashConfig(rank=rank)) as s2:
            found, trace = s2.retrieve_traced("zebra harbour", session="s", top_k=8, min_similarity=-1.0)
            best = max(c.similarity for c in trace.candidates)
            sims = [c.similarity / best for c in trace.candidates]
            kws = [c.keyword for c in trace.candidates]
            cs, ck = _spread_oracle(sims, 5, power), _spread_oracle(kws, 5, power)
            mean = (0.6 * cs + 0.2 * ck) / 0.8
            ws, wk = (0.6 * cs / mean, 0.2 * ck / mean) if power and mean > 0 else (0.6, 0.2)
            if power:
                assert abs(wk - 0.2) > 0.01  # the weights did move for this query
            for hit in found:
                assert hit.parts["keyword"] == pytest.approx(hit.keyword * wk, abs=1e-9)
                assert hit.parts["dense"] == pytest.approx(hit.similarity / best * ws, abs=1e-9)
                assert hit.score == pytest.approx(hit.parts["dense"] + hit.parts["keyword"], abs=1e-9)


def test_a_querys_auxiliary_verbs_are_not_keywords(store: StashStore) -> None:
    """``When did Maya ...``: the turn that only shares ``did`` with the question gains no keyword
    score (``RankConfig.drop_query_auxiliaries``, default on), so the turn naming what was asked ranks
    first by keywords; kept, ``did`` outweighs the common word. Stored terms are untouched: a query
    for ``did`` alone still finds the turn when the option is off. Non-bool: an InputError."""
    assert query_terms("When did Maya say she had been hiking?") == ["maya", "say", "she", "hike"]
    assert query_terms("When did Maya say", drop_auxiliaries=False) == ["did", "maya", "say"]
    turns = ["Maya: the hike was fun", "Maya: another hike soon", "Jonas: did you?"]
    turns += [f"Maya: lunch on day {i}" for i in range(5)]
    ids = store.stash(turns, session="s").segment_ids
    keywords = dict(similarity_weight=0.0, created_weight=0.0, stashed_weight=0.0, keyword_weight=1.0)
    for drop in (True, False):
        rank = RankConfig(**keywords, keyword_length_norm=0.0, drop_query_auxiliaries=drop)  # type: ignore[arg-type]
        with StashStore.open(store.backend.location, fake(), StashConfig(rank=rank)) as s2:
            got = s2.retrieve("When did the hike happen?", session="s", top_k=3, min_similarity=-1.0)
            if drop:  # "hike" alone: the two hike turns first, "did you?" has no keyword score
                assert {h.segment.id for h in got[:2]} == set(ids[:2])
                assert {h.segment.id: h.keyword for h in got}.get(ids[2], 0.0) == 0.0
            else:  # "did" is rarer than "hike": the turn that only says "did" wins
                assert got[0].segment.id == ids[2] and got[0].keyword == 1.0
            alone = s2.retrieve("did", session="s", top_k=8, min_similarity=-1.0)
            assert {h.segment.id: h.keyword for h in alone}[ids[2]] == (0.0 if drop else 1.0)
    with pytest.raises(InputError, match="drop_query_auxiliaries"):
        RankConfig(drop_query_auxiliaries="no")  # type: ignore[arg-type]


def test_long_segments_are_chunked_and_found_by_their_end(location: str, int8) -> None:  # noqa: ANN001
    body = " ".join(f"Paragraph {i} talks about gardening tomatoes and watering schedules." for i in range(60))
    tail = "The production database password rotation happens every ninety days."
    with StashStore.open(location, int8) as s:
        r = s.stash([{"text": body + "\n\n" + tail, "type": "file_content"}, "Tomatoes need sun."], session="s")
        seg = s.get([r.segment_ids[0]], session="s")[0]
        assert seg.chunks > 3 and seg.tokens > 600
        hit = s.retrieve("when are database passwords rotated", session="s", top_k=1, min_similarity=0.2)
        assert hit and hit[0].segment.id == seg.id


# -- sessions -------------------------------------------------------------------------------------


def test_sessions_are_isolated_unless_asked(store: StashStore) -> None:
    a = store.stash(["kubernetes pod crash loop"], session="alice").segment_ids[0]
    store.stash(["kubernetes pod crash loop", "kubernetes node pressure"], session="bob")
    assert all(h.segment.session == "bob" for h in store.retrieve("kubernetes pod", session="bob"))
    assert store.retrieve("kubernetes", session="carol") == []
    for call in (store.get, store.delete, store.protect, store.merge):
        with pytest.raises(UnknownSegmentError):
            call([a], session="bob")  # type: ignore[operator]
    with pytest.raises(UnknownSegmentError):
        store.retrieve_by_reference(a, session="bob")
    with pytest.raises(InputError, match="not in session"):
        store.stash([{"text": "x", "references": [a]}], session="bob")
    both = store.retrieve("kubernetes pod crash loop", session="bob", cross_session=True, top_k=5)
    assert len([h for h in both if h.segment.text == "kubernetes pod crash loop"]) == 1  # same content once
    assert {h.segment.session for h in both} <= {"alice", "bob"} and len(both) == 2
    assert count(store) == 3


# -- references -----------------------------------------------------------------------------------


def test_reference_chains_with_cycles(store: StashStore) -> None:
    store.stash(
        [
            {"text": "a", "id": "A", "references": ["B"]},
            {"text": "b", "id": "B", "references": ["C"]},
            {"text": "c", "id": "C", "references": ["A", "D"]},
            {"text": "d", "id": "D"},
        ],
        session="s",
    )
    ids = lambda hops: [x.id for x in store.retrieve_by_reference("A", session="s", max_hops=hops)]  # noqa: E731
    assert ids(0) == ["A"] and ids(1) == ["A", "B"] and ids(2) == ["A", "B", "C"] and ids(10) == ["A", "B", "C", "D"]
    assert store.get(["A"], session="s")[0].referenced_by == ("C",)
    store.delete(["C"], session="s")
    b, d = store.get(["B", "D"], session="s")
    assert b.references == () and d.referenced_by == ()
    assert ids(5) == ["A", "B"]
    with pytest.raises(InputError):
        store.retrieve_by_reference("A", session="s", max_hops=-1)


def test_merge_keeps_or_drops(store: StashStore) -> None:
    ids = store.stash(["one two three", "four five"], session="s").segment_ids
    m = store.merge(list(ids), session="s")
    assert [s.text for s in m.segments] == ["one two three", "four five"] and m.tokens == 5 + 4 and not m.removed
    assert count(store) == 2
    m = store.merge([ids[0]], session="s", keep=False)
    assert m.removed and count(store) == 1
    assert m.to_dict()["tokens_added"] == 5


# -- lifecycle ------------------------------------------------------------------------------------


def test_expiry_and_cleanup_never_touch_protected(store: StashStore) -> None:
    now = datetime.now(UTC)
    r = store.stash(
        [
            {"text": "short lived note", "expires_at": now + timedelta(hours=1)},
            {"text": "short lived but protected", "expires_at": now + timedelta(hours=1), "protected": True},
            {"text": "old note", "timestamp": now - timedelta(days=90)},
            {"text": "old protected note", "timestamp": now - timedelta(days=90), "protected": True},
            {"text": "fresh note"},
        ],
        session="s",
    ).segment_ids
    later = now + timedelta(hours=2)
    texts = {h.segment.text for h in store.retrieve("note", session="s", top_k=10, now=later)}
    assert "short lived note" not in texts and "short lived but protected" in texts
    assert store.cleanup_expired(now=later) == 1
    assert store.cleanup_old(30, now=later) == 1
    assert {s.text for s in store.list(session="s")} == {
        "short lived but protected",
        "old protected note",
        "fresh note",
    }
    store.unprotect([r[3]], session="s")
    assert store.cleanup_old(timedelta(days=30), now=later) == 1
    store.protect([r[4]], session="s")
    assert store.cleanup_old(0, now=later + timedelta(days=1)) == 0
    assert store.stats(session="s")["protected"] == 2


def test_list_and_stats(store: StashStore) -> None:
    store.stash([{"text": f"note {i}", "type": "research" if i % 2 else "message"} for i in range(7)], session="s")
    assert len(store.list(session="s", limit=3)) == 3
    assert len(store.list(session="s", limit=10, offset=5)) == 2
    assert [s.type for s in store.list(session="s", filters={"types": ["research"]})] == [SegmentType.RESEARCH] * 3
    st = store.stats(session="s")
    assert st["segments"] == 7 and st["by_type"] == {"message": 4, "research": 3} and st["model"] == "fake/1"


# -- model change ---------------------------------------------------------------------------------


class Exploding(FakeEmbedder):
    def __init__(self, model: str, after: int) -> None:
        super().__init__()
        self.model_id = model  # type: ignore[misc]
        self.after = after

    def embed(self, texts, *, show_progress=False):  # noqa: ANN001, ANN201
        if self.calls >= self.after:
            raise RuntimeError("killed")
        return super().embed(texts)


def test_model_change_is_refused_then_rebuilt_resumably(location: str) -> None:
    with StashStore.open(location, fake("fake/1")) as s:
        s.stash([f"segment number {i}" for i in range(10)], session="s")
    with pytest.raises(StashModelError, match="stash rebuild"):
        StashStore.open(location, fake("fake/2"))
    with StashStore.open(location, Exploding("fake/2", after=2), rebuild=True) as s:
        with pytest.raises(RuntimeError):
            s.rebuild(batch=3)
    with pytest.raises(StashModelError, match="being re-embedded"):
        StashStore.open(location, fake("fake/1"))
    with StashStore.open(location, fake("fake/2"), rebuild=True) as s:
        assert s.rebuild(batch=3) == 4  # 6 were done before the "kill"
    with StashStore.open(location, fake("fake/2")) as s:
        assert {x.embedding_model for x in s.list(session="s")} == {"fake/2"}
        assert s.retrieve("segment number 3", session="s")[0].segment.text == "segment number 3"


def test_int8_and_fp32_of_one_model_share_a_store(location: str, int8, fp32) -> None:  # noqa: ANN001
    with StashStore.open(location, int8) as s:
        s.stash(["vectors of the same weights"], session="s")
    with StashStore.open(location, fp32) as s:
        assert s.retrieve("same weights", session="s")[0].similarity > 0.5


# -- files ----------------------------------------------------------------------------------------


def test_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "text.db").write_text("hello")
    with pytest.raises(StashError, match="not a SQLite"):
        StashStore.open(tmp_path / "text.db", fake())
    with pytest.raises(StashError, match="not a regular file"):
        StashStore.open(tmp_path, fake())
    os.mkfifo(tmp_path / "fifo.db")
    with pytest.raises(StashError, match="not a regular file"):
        StashStore.open(tmp_path / "fifo.db", fake())
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("create table t (x)")
    other.commit()
    other.close()
    with pytest.raises(StashError, match="something else"):
        StashStore.open(tmp_path / "other.db", fake())


def test_tampered_vectors_are_left_out_then_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with StashStore.open(path, fake()) as s:
        ids = s.stash(["alpha beta gamma", "delta epsilon"], session="s").segment_ids
    db = sqlite3.connect(path)
    blob = bytearray(db.execute("SELECT vectors FROM segments WHERE id = ?", (ids[0],)).fetchone()[0])
    blob[5] ^= 0x40
    db.execute("UPDATE segments SET vectors = ? WHERE id = ?", (bytes(blob), ids[0]))
    db.commit()
    db.close()
    with StashStore.open(path, fake()) as s:
        with pytest.warns(StashIntegrityWarning):
            assert [h.segment.id for h in s.retrieve("alpha beta gamma", session="s", min_similarity=0.5)] == []
        assert s.stats()["failed_checksum"] == 1
    with StashStore.open(path, fake(), rebuild=True) as s, pytest.warns(StashIntegrityWarning):
        assert s.rebuild() == 1
    with StashStore.open(path, fake()) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert s.retrieve("alpha beta gamma", session="s")[0].segment.id == ids[0]


# -- processes ------------------------------------------------------------------------------------


def _writer(path: str, n: int, worker: int, out: "mp.Queue[list[str]]") -> None:
    acked: list[str] = []
    with StashStore.open(path, fake()) as s:
        for i in range(n):
            r = s.stash([f"worker {worker} note {i} about topic {i % 7}"], session="shared")
            acked.extend(r.segment_ids)
            s.retrieve(f"topic {i % 7}", session="shared", top_k=3)
    out.put(acked)


def test_four_processes_write_and_read_one_store(location: str) -> None:
    path = location
    StashStore.open(path, fake()).close()
    ctx = mp.get_context("spawn")  # a forked child may inherit a busy Numba / ORT thread pool
    q: mp.Queue[list[str]] = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, 40, w, q)) for w in range(4)]
    for p in procs:
        p.start()
    acked = [x for _ in procs for x in q.get(timeout=300)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with StashStore.open(path, fake()) as s:
        assert count(s) == 160 and len(set(acked)) == 160
        assert len(s.get(acked, session="shared")) == 160
        hits = s.retrieve("worker 3 note 39 about topic 4", session="shared", top_k=1)
        assert hits[0].segment.text == "worker 3 note 39 about topic 4"
        if isinstance(s.backend, SqliteBackend):
            assert s.backend.integrity_check() == "ok"


def test_a_second_process_sees_new_writes(location: str) -> None:
    path = location
    reader = StashStore.open(path, fake())
    writer = StashStore.open(path, fake())
    assert reader.retrieve("fresh words", session="s") == []
    writer.stash(["fresh words here"], session="s")
    assert reader.retrieve("fresh words", session="s")[0].segment.text == "fresh words here"
    writer.delete([reader.list(session="s")[0].id], session="s")
    assert reader.retrieve("fresh words", session="s") == []
    reader.close()
    writer.close()


def test_a_read_scope_sees_one_state_of_the_store(tmp_path: Path) -> None:
    """What one retrieve sees (``backend.reading()``): the embedded store checks for other
    processes' writes once, at the scope's start; a write of its own inside ends the pin."""
    from contextsieve.stash.backend import index_terms

    path = tmp_path / "s.db"
    reader, writer = StashStore.open(path, fake()), StashStore.open(path, fake())
    reader.stash(["alpha words"], session="s")
    be = reader.backend

    def hits() -> int:
        return len(be.keyword(index_terms("alpha"), 10, Filters(sessions=("s",))))

    with be.reading():
        writer.stash(["alpha words again here"], session="s")
        assert hits() == 1  # the other handle's write is not seen inside the scope
        with be.reading():
            assert hits() == 1
        reader.stash(["alpha third one"], session="s")
        assert hits() == 3
    writer.stash(["alpha fourth one"], session="s")
    assert hits() == 4
    assert len(reader.retrieve("alpha", session="s", top_k=10)) == 4
    reader.close()
    writer.close()


# -- the in-memory table against a plain oracle ---------------------------------------------------


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_vector_table_matches_a_numpy_oracle(backend: str) -> None:
    rng = np.random.default_rng(7)
    dim, n = 32, 3000
    t = VectorTable(dim, IndexConfig(backend=backend, ef_search=400, exact_below=0.0))
    vecs, meta = [], []
    for row in range(n):
        chunks = 1 + int(rng.integers(0, 3))
        v = rng.standard_normal((chunks, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        kind = list(SegmentType)[row % 3]
        sess = f"s{row % 4}"
        t.add(TableRow(row, f"id{row}", sess, kind, None, "", float(row), None, row % 5 == 0, v))
        vecs.append(v)
        meta.append((sess, kind, row % 5 == 0))
    for row in range(0, n, 10):
        t.remove(row)
    q = rng.standard_normal((2, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    for f in (
        Filters(),
        Filters(sessions=("s1",)),
        Filters(types=(SegmentType.MESSAGE,), protected=False),
        Filters(since=100.0, until=2000.0),
    ):
        ok = t.allowed(f)
        oracle = []
        for row in range(n):
            if ok[row]:
                oracle.append((float((vecs[row] @ q.T).max()), row))
        assert sum(ok) == len(oracle)
        expect = [r for _, r in sorted(oracle, key=lambda x: (-x[0], x[1]))[:10]]
        got = [s for s, _ in t.search(q, 10, f)]
        true = {r: sc for sc, r in oracle}
        tenth = true[expect[-1]]
        assert got[0] == expect[0] and len(got) == 10
        assert all(true[r] >= tenth - 0.01 for r in got)  # int8 rounding may swap near-ties
        assert len(set(got) & set(expect)) >= 9
        removed = {r for r in range(0, n, 10)}
        assert not removed & set(got)
    some = [5, 1, 2999, 7, 1234]  # one kernel call for many segments of 1-3 chunks each, in the order asked
    expect_scores = [float((vecs[r] @ q.T).max()) for r in some]
    assert np.allclose(t.scores(q, some), expect_scores, atol=0.02)
    assert t.scores(q, []) == []
    assert t.backend == backend


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_expiry_masks_follow_the_retrieval_time(backend: str) -> None:
    """Segments with expiry times, some protected: the masks at several times (one remembered base
    mask, the expiry applied after) equal a plain oracle, for keyword and dense search alike."""
    rng = np.random.default_rng(17)
    dim, n = 16, 400
    t = VectorTable(dim, IndexConfig(backend=backend, ef_search=400, exact_below=0.0))
    expires: list[float | None] = []
    protected = []
    vecs = []
    for row in range(n):
        e = None if row % 3 == 0 else float(rng.integers(0, 100))
        v = rng.standard_normal((1 + row % 2, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        t.add(TableRow(row, f"id{row}", "s", SegmentType.MESSAGE, None, "", 0.0, e, row % 7 == 0, v, ["common"]))
        expires.append(e)
        protected.append(row % 7 == 0)
        vecs.append(v)
    t.remove(5)
    q = rng.standard_normal((1, dim)).astype(np.float32)
    for at in (None, 0.0, 30.0, 30.0, 99.0, 1000.0, 30.0):
        alive = [
            r != 5 and (at is None or expires[r] is None or expires[r] > at or protected[r])  # type: ignore[operator]
            for r in range(n)
        ]
        f = Filters(sessions=("s",), alive_at=at)
        assert t.allowed(f).tolist() == alive
        got = {s for s, _ in t.keyword(["common"], n, f)}
        assert got == {r for r in range(n) if alive[r]}
        dense = [s for s, _ in t.search(q, 20, f)]
        scores = sorted(((float((vecs[r] @ q.T).max()), r) for r in range(n) if alive[r]), reverse=True)[:20]
        assert all(alive[s] for s in dense) and dense[0] == scores[0][1]


def test_keyword_scores_equal_a_bm25_oracle(store: StashStore) -> None:
    """Both backends' BM25 (in memory for SQLite, in SQL for PostgreSQL) against ``bm25()`` computed
    here over every stored segment, after batches that share terms, a delete and another session, at
    Okapi's length normalisation and at the weaker ones :class:`RankConfig` may set."""
    from collections import Counter

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(4)
    words = ["deploy", "vault", "timeout", "checkout", "rollback"] + [f"w{i}" for i in range(40)]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(2, 25)))) for _ in range(120)})
    ids = store.stash(texts[:60], session="a").segment_ids + store.stash(texts[60:], session="a").segment_ids
    store.stash(["deploy vault vault elsewhere"], session="b")
    store.delete(list(ids[:10]), session="a")
    live = dict(zip(ids[10:], texts[10:]))
    everyone = [*texts[10:], "deploy vault vault elsewhere"]
    docs = [Counter(index_terms(t)) for t in everyone]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    for query, b in itertools.product(("deploy vault", "timeout w3 w3 rollback", "checkout"), (0.75, 0.3, 0.0)):
        terms = list(dict.fromkeys(index_terms(query)))
        df = [sum(1 for d in docs if t in d) for t in terms]
        oracle = {}
        for i, text in live.items():
            tf = Counter(index_terms(text))
            x = bm25([tf.get(t, 0) for t in terms], df, len(docs), sum(tf.values()), avgdl, b=b)
            if x > 0:
                oracle[i] = x
        got = store.backend.keyword(terms, 500, Filters(sessions=("a",)), b=b)
        assert {h.id for h in got} == set(oracle), (query, b)
        assert np.allclose([h.score for h in got], [oracle[h.id] for h in got], rtol=1e-6), (query, b)
        assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)


def test_postgres_store_of_an_older_version_gets_its_term_counts_again(postgres_uri: str) -> None:
    """A PostgreSQL store written before the store-wide counts (and with the old per-batch term
    counts): opening it counts every term again, so BM25 equals that of a freshly written store."""
    import psycopg

    from contextsieve.stash.backend import index_terms

    texts = [f"deploy vault {i} note{i % 3}" for i in range(20)] + ["vault only", "checkout rollback"]
    s = StashStore.open(postgres_uri, fake())
    s.stash(texts, session="a")
    f = Filters(sessions=("a",))
    want = [(h.id, round(h.score, 9)) for h in s.backend.keyword(index_terms("deploy vault note1"), 50, f)]
    s.close()
    with psycopg.connect(postgres_uri, autocommit=True) as c:  # as an older version left it
        c.execute("DELETE FROM stash_terms WHERE term LIKE ' %'")
        c.execute("UPDATE stash_terms SET df = 1")
    again = StashStore.open(postgres_uri, fake())
    got = [(h.id, round(h.score, 9)) for h in again.backend.keyword(index_terms("deploy vault note1"), 50, f)]
    assert sorted(got) == sorted(want) and len(got) == 21  # equal scores may come in either order
    again.close()


def test_keyword_scores_of_dense_candidates_outside_the_top_k(store: StashStore) -> None:
    """``keyword(..., also=ids)``: after the k best, the segments among ``also`` that hold a term get
    the score a full keyword search gives them; those without a term, of another session or unknown
    get none."""
    from contextsieve.stash.backend import index_terms

    texts = [f"deploy {' '.join(['vault'] * (i % 5 + 1))} note{i}" for i in range(30)] + ["nothing in common"]
    ids = store.stash(texts, session="a").segment_ids
    other = store.stash(["deploy vault elsewhere"], session="b").segment_ids
    f = Filters(sessions=("a",))
    terms = index_terms("deploy vault")
    full = {h.id: h.score for h in store.backend.keyword(terms, 100, f)}
    assert len(full) == 30
    top = store.backend.keyword(terms, 3, f)
    below = [i for i in full if i not in {h.id for h in top}][-4:]
    got = store.backend.keyword(terms, 3, f, also=[ids[-1], *below, other[0], "seg_unknown", top[0].id])
    assert [h.id for h in got[:3]] == [h.id for h in top]
    assert [h.id for h in got[3:]] == below
    assert np.allclose([h.score for h in got[3:]], [full[i] for i in below], rtol=1e-6)


def test_combined_ranking_matches_an_oracle_and_not_the_candidate_count(tmp_path: Path) -> None:
    """retrieve's order equals the ranking formula computed over every segment by hand (weights moved
    by each signal's spread over its best five), and stays the same with fewer candidates fetched
    (each signal is scaled by its best candidate, not by the weakest one fetched, and its best five
    are fetched whatever the count)."""
    import dataclasses

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(21)
    words = [f"w{i}" for i in range(80)]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(3, 12)))) for _ in range(300)})
    s = StashStore.open(tmp_path / "r.db", fake())
    s.stash(texts, session="a")
    flat = dict(created_weight=0.0, stashed_weight=0.0)
    everything = Filters(sessions=("a",))
    for query in [" ".join(rng.choice(words, size=3)) for _ in range(20)]:
        qv = s.embed_query(query)
        sims = {h.id: h.score for h in s.backend.dense(qv, 1000, everything)}
        b = RankConfig().keyword_length_norm
        bm = {h.id: h.score for h in s.backend.keyword(index_terms(query), 1000, everything, b=b)}
        best_s, best_k = max(sims.values()), max(bm.values(), default=0.0)
        # this query's weights: each signal's spread over its best 5 (RankConfig.spread_power, spread_top)
        cs = _spread_oracle([v / best_s for v in sims.values()], 5, 0.5)
        ck = _spread_oracle([v / best_k for v in bm.values()] if best_k else [0.0], 5, 0.5)
        mean = (0.6 * cs + 0.2 * ck) / 0.8
        ws, wk = (0.6 * cs / mean, 0.2 * ck / mean) if mean > 0 else (0.6, 0.2)
        oracle = sorted(
            sims,
            key=lambda i: (-(ws * sims[i] / best_s + wk * (bm.get(i, 0.0) / best_k if best_k else 0.0)), -sims[i], i),
        )
        orders = []
        for cand in (300, 100):
            s.config = dataclasses.replace(s.config, rank=RankConfig(candidates=cand, **flat))
            orders.append([h.segment.id for h in s.retrieve(query, session="a", top_k=5, min_similarity=-1.0)])
        assert orders[0] == oracle[:5], query
        assert orders[1] == orders[0], (query, 100)
    s.close()


def test_in_memory_keyword_search_ranks_as_the_bm25_oracle(tmp_path: Path) -> None:
    """The embedded store's BM25 (an in-memory term index) against :func:`bm25` over the stored texts
    (every session counts for N, df and the mean length, as an FTS5 index over the store did), after
    deletes and from a second handle's view (which loads its table from the file)."""
    from collections import Counter

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(60)] + ["deploy", "checkout", "timeout", "vault"]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(2, 30)))) for _ in range(400)})
    s = StashStore.open(tmp_path / "k.db", fake())
    ids = s.stash(texts, session="a").segment_ids
    s.stash(["deploy vault timeout elsewhere"], session="b")
    s.delete(list(ids[:40]), session="a")
    other = StashStore.open(tmp_path / "k.db", fake())  # loads the table from the file
    docs = [Counter(index_terms(t)) for t in [*texts[40:], "deploy vault timeout elsewhere"]]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    for query in ("deploy timeout", "w3 w7 w7 checkout", "vault", "nothing here"):
        terms = index_terms(query)
        uniq = list(dict.fromkeys(terms))
        df = [sum(1 for d in docs if t in d) for t in uniq]
        scored = [
            (bm25([d.get(t, 0) for t in uniq], df, len(docs), sum(d.values()), avgdl), pos, i)
            for pos, (i, d) in enumerate(zip(ids[40:], docs))  # pos: the row order breaks ties
            if any(t in d for t in uniq)
        ]
        oracle = [(i, x) for x, _, i in sorted(scored, key=lambda e: (-e[0], e[1]))][:20]
        for store in (s, other):
            got = store.backend.keyword(terms, 20, Filters(sessions=("a",)))
            assert [h.id for h in got][:10] == [i for i, _ in oracle][:10] or np.allclose(
                [h.score for h in got][:10], [x for _, x in oracle][:10], rtol=1e-6
            )
            assert np.allclose([h.score for h in got], [x for _, x in oracle if x > 0], rtol=1e-6)
            assert not {h.id for h in got} & set(ids[:40])
    s.close()
    other.close()


def test_a_store_with_the_old_fts5_table_opens_and_works(tmp_path: Path) -> None:
    """A store made when the schema had an FTS5 table (written on every insert and delete, never
    read): it opens, takes writes and deletes, searches, and its ``fts`` is left as it was."""
    from contextsieve.stash.backend import index_terms

    path = tmp_path / "old.db"
    with StashStore.open(path, fake()) as s:
        kept = s.stash(["deploy the vault", "rotate the keys"], session="s").segment_ids
    db = sqlite3.connect(path)
    db.execute(
        "CREATE VIRTUAL TABLE fts USING fts5 (terms, content='segments', content_rowid='row', "
        "tokenize='unicode61 remove_diacritics 0')"
    )
    db.execute("INSERT INTO fts (fts) VALUES ('rebuild')")
    db.commit()
    before = db.execute("SELECT count(*) FROM fts_docsize").fetchone()
    db.close()
    with StashStore.open(path, fake()) as s:
        new = s.stash(["deploy again tomorrow", "vault audit"], session="s").segment_ids
        assert s.delete([kept[1], new[1]], session="s") == 2
        hits = s.backend.keyword(index_terms("deploy vault"), 10, Filters(sessions=("s",)))
        assert {h.id for h in hits} == {kept[0], new[0]}
        assert [x.text for x in s.get([new[0], kept[0]], session="s")] == ["deploy again tomorrow", "deploy the vault"]
        assert count(s) == 2 and s.protect([new[0]], session="s") == 1
        assert isinstance(s.backend, SqliteBackend) and s.backend.integrity_check() == "ok"
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM fts_docsize").fetchone() == before  # neither written nor dropped
    db.close()
    fresh = sqlite3.connect(tmp_path / "new.db")
    StashStore.open(tmp_path / "new.db", fake()).close()
    names = {r[0] for r in fresh.execute("SELECT name FROM sqlite_master")}
    fresh.close()
    assert "fts" not in names and {"meta", "segments", "refs", "changes"} <= names


def test_batch_loading_equals_adding_one_by_one() -> None:
    from contextsieve.stash.segment import SegmentType

    rng = np.random.default_rng(11)
    rows = []
    for i in range(40):
        v = rng.standard_normal((1 + i % 3, 16)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        kind = list(SegmentType)[i % len(SegmentType)]
        rows.append(
            TableRow(
                i,
                f"s{i}",
                f"sess{i % 2}",
                kind,
                f"t{i % 4}",
                "src",
                100 + i,
                None,
                i % 5 == 0,
                v,
                [f"w{i % 7}", "common"],
                200 + i,
                f"sha{i}",
            )
        )
    one, many = VectorTable(16), VectorTable(16)
    for r in rows:
        one.add(r)
    many.add_many(rows[:25])
    many.add_many(rows[25:] + [rows[3]])  # a row given again replaces the first one
    one.add(rows[3])
    q = rng.standard_normal((2, 16)).astype(np.float32)
    for f in (Filters(), Filters(sessions=("sess0",)), Filters(topics=("t1", "t2"), protected=False)):
        got = [(one.ids[s], round(x, 5)) for s, x in one.search(q, 8, f)]
        assert got == [(many.ids[s], round(x, 5)) for s, x in many.search(q, 8, f)]
        assert [one.ids[s] for s, _ in one.keyword(["w3", "common"], 5, f)] == [
            many.ids[s] for s, _ in many.keyword(["w3", "common"], 5, f)
        ]
    ids = [f"s{i}" for i in range(40)]
    assert one.facts(ids) == many.facts(ids) and one.facts(["s5"]) == {"s5": (105, 205, "sha5")}
    many.remove(5)
    assert "s5" not in many.facts(ids) and len(many) == 39


EDGE_CASES = [
    ("not a list", lambda s: s.stash(None), "must be a segment or a list"),  # type: ignore[arg-type]
    (
        "expiry past year 9999 in UTC",
        lambda s: s.stash(
            [{"text": "x", "expires_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))}]
        ),
        "out of range",
    ),
    (
        "time before year 1 in UTC",
        lambda s: s.stash([{"text": "y", "timestamp": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))}]),
        "out of range",
    ),
    ("filter past year 9999", lambda s: s.retrieve("x", filters={"end_time": "9999-12-31T23:00:00-05:00"}), "range"),
    ("offset past 64 bits", lambda s: s.list(offset=2**63), "offset must be"),
    ("min_similarity past a float", lambda s: s.retrieve("x", min_similarity=10**400), "min_similarity must be"),
    ("lone surrogate in a filter", lambda s: s.list(filters={"topics": ["a\udfff"]}), "lone surrogate"),
    ("lone surrogate in a query", lambda s: s.retrieve("why \ud800"), "lone surrogate"),
    ("max_age of 1e308 days", lambda s: s.cleanup_old(1e308), "max_age must be"),
    ("max_age of timedelta.max", lambda s: s.cleanup_old(timedelta.max), "max_age must be"),
    ("max_age past a float", lambda s: s.cleanup_old(10**400), "max_age must be"),
    ("NUL in the text", lambda s: s.stash(["a\x00b"]), "NUL"),
    ("NUL in the topic", lambda s: s.stash([{"text": "ok", "topic": "t\x00"}]), "NUL"),
    ("NUL in the session", lambda s: s.stash(["ok"], session="s\x00"), "NUL"),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_values_are_typed_errors_that_change_nothing_on_both_backends(store: StashStore, case) -> None:  # noqa: ANN001
    """Issue 27 items 6-7: times out of range, huge offsets and ages, None, NUL characters: the same
    InputError on SQLite and PostgreSQL (NUL used to be stored by one and a storage error on the
    other), nothing written."""
    _, call, match = case
    store.stash(["a segment that stays"])
    with pytest.raises(InputError, match=match):
        call(store)
    assert [s.text for s in store.list()] == ["a segment that stays"]
    assert store.cleanup_old(3_000_000) == 0  # the largest ages are fine: nothing is that old


def _tamper(location: str, sql: str, args: tuple) -> None:
    """Change a stored row behind the store's back (as a flipped bit or an edit would)."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as c:
            c.execute(sql.replace("segments", "stash_segments").replace("?", "%s"), args)
    else:
        db = sqlite3.connect(location)
        with db:
            db.execute(sql, args)
        db.close()


FAR_TIMES = [
    datetime(1, 1, 2, 0, 0, 0, 999_999, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    datetime(2026, 3, 1, 12, 30, 45, 123_457, tzinfo=UTC),
    datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC),
]


def test_times_keep_every_microsecond_far_from_1970_on_both_backends(location: str, tmp_path: Path) -> None:
    """Issue 27 item 6: times are integer microseconds on both backends (float seconds turned
    0001-01-02T00:00:00.999999 into 00:00:01); filters are exact to the microsecond; an export and
    import keeps them."""
    from contextsieve.stash.transfer import export_store, import_store

    with StashStore.open(location, fake()) as s:
        ids = s.stash(
            [{"text": f"moment {i}", "timestamp": t, "expires_at": FAR_TIMES[-1]} for i, t in enumerate(FAR_TIMES)]
        ).segment_ids
        assert [seg.timestamp for seg in s.get(ids)] == FAR_TIMES
        assert {seg.expires_at for seg in s.get(ids)} == {FAR_TIMES[-1]}
        for i, t in enumerate(FAR_TIMES):
            one = timedelta(microseconds=1)
            exact = s.list(filters={"start_time": t.isoformat(), "end_time": t.isoformat()})
            assert [seg.id for seg in exact] == [ids[i]]
            assert ids[i] not in {seg.id for seg in s.list(filters={"start_time": (t + one).isoformat()})}
            assert ids[i] not in {seg.id for seg in s.list(filters={"end_time": (t - one).isoformat()})}
        found = s.retrieve("moment", top_k=4, now=FAR_TIMES[2])  # ages from -8,000 to +8,000 years rank
        assert sorted(r.segment.id for r in found) == sorted(ids)
        assert export_store(s, tmp_path / "out.jsonl") == 4
    with StashStore.open(tmp_path / "copy.db", fake()) as c:
        import_store(c, tmp_path / "out.jsonl")
        assert sorted(seg.timestamp for seg in c.list()) == FAR_TIMES


def test_fields_changed_behind_the_store_are_a_typed_error_naming_the_segment(location: str) -> None:
    """Issue 27 item 4, metadata: a row whose topic, source, times or token count changed on disk
    fails its fields check on read (both backends); the other rows still read."""
    from contextsieve.errors import StashIntegrityError

    with StashStore.open(location, fake()) as s:
        ids = s.stash([{"text": "release on friday", "topic": "plans"}, "lunch: two pizzas"]).segment_ids
    for column, value in (("topic", "other"), ("created", 1), ("tokens", 999), ("source", "elsewhere")):
        with StashStore.open(location, fake()) as s:
            before = s.get([ids[0]])[0]
        _tamper(location, f"UPDATE segments SET {column} = ? WHERE id = ?", (value, ids[0]))
        with StashStore.open(location, fake()) as s:
            with pytest.raises(StashIntegrityError, match=ids[0]):
                s.get([ids[0]])
            assert [seg.text for seg in s.get([ids[1]])] == ["lunch: two pizzas"]
        _tamper(location, f"UPDATE segments SET {column} = ? WHERE id = ?", (_column_value(before, column), ids[0]))
        with StashStore.open(location, fake()) as s:
            assert s.get([ids[0]])[0] == before  # restored: it reads again


def _column_value(seg, column: str):  # noqa: ANN001, ANN202
    from contextsieve.stash.backend import to_epoch

    return {"topic": seg.topic, "created": to_epoch(seg.timestamp), "tokens": seg.tokens, "source": seg.source}[column]


def _as_format_3(location: str) -> None:
    """Turn a store into what contextsieve wrote before format 4 (float seconds, no fields check),
    the way that version's schema held it."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as c:
            c.execute(
                "ALTER TABLE stash_segments DROP COLUMN fields, DROP COLUMN superseded_by, "
                + ", ".join(
                    f"ALTER COLUMN {col} TYPE double precision USING {col} / 1000000.0"
                    for col in ("created", "stashed", "expires")
                )
            )
            c.execute("UPDATE stash_meta SET value = 'contextsieve-stash-3' WHERE key = 'format'")
        return
    db = sqlite3.connect(location)
    with db:
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'segments'").fetchone()[0]
        db.execute(
            """CREATE TABLE old (row INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, session TEXT NOT NULL,
            text TEXT NOT NULL, type TEXT NOT NULL, created REAL NOT NULL, stashed REAL NOT NULL, tokens INTEGER
            NOT NULL, topic TEXT, source TEXT NOT NULL, sha256 TEXT NOT NULL, model TEXT NOT NULL, expires REAL,
            protected INTEGER NOT NULL, chunks INTEGER NOT NULL, vectors BLOB NOT NULL, digest BLOB NOT NULL,
            terms TEXT NOT NULL)"""
        )
        db.execute(
            "INSERT INTO old SELECT row, id, session, text, type, created / 1000000.0, stashed / 1000000.0, tokens, "
            "topic, source, sha256, model, expires / 1000000.0, protected, chunks, vectors, digest, terms FROM segments"
        )
        db.execute("DROP TABLE segments")
        db.execute("ALTER TABLE old RENAME TO segments")
        db.execute("CREATE INDEX segments_created ON segments (created)")
        db.execute("UPDATE meta SET value = 'contextsieve-stash-3' WHERE key = 'format'")
        db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'segments'", (seq,))
    db.close()


def test_a_format_3_store_is_upgraded_on_open_keeping_everything(location: str) -> None:
    """A store written before times were integers (format 3: float seconds) is upgraded once when
    opened, in one transaction: texts, times (to what float seconds kept: exact near today), ids,
    references and search all stay; new segments continue its row numbers; the tag says format 4."""
    from contextsieve.stash.backend import FORMAT

    t = datetime(2025, 6, 1, 8, 0, 0, 250_001, tzinfo=UTC)
    with StashStore.open(location, fake()) as s:
        first = s.stash([{"text": "the deploy runs on friday", "timestamp": t}]).segment_ids
        later = s.stash([{"text": "see the deploy note", "references": first}, "a segment deleted later"])
        s.delete([later.segment_ids[1]])
        before = s.list()
    _as_format_3(location)
    with StashStore.open(location, fake()) as s:
        assert s.list() == before and s.get(first)[0].timestamp == t
        assert s.retrieve("deploy friday", top_k=1)[0].segment.id == first[0]
        assert s.backend.setting("format") == FORMAT
        new = s.stash(["a segment after the upgrade"]).segment_ids
        assert {seg.id for seg in s.list()} == {*[b.id for b in before], *new}
        assert new[0] not in {b.id for b in before} and s.get(new)[0].text == "a segment after the upgrade"
    with StashStore.open(location, fake()) as s:  # opened again: nothing more to do
        assert len(s.list()) == 3


def test_a_stored_text_changed_behind_the_store_is_a_typed_error_naming_it(location: str) -> None:
    """Issue 27 item 4: every read checks a segment's text against its sha256 (both backends)."""
    from contextsieve.errors import StashIntegrityError

    with StashStore.open(location, fake()) as s:
        ids = s.stash(["the deploy key is in vault", "lunch: two pizzas"]).segment_ids
    _tamper(location, "UPDATE segments SET text = ? WHERE id = ?", ("the deploy key is in a drawer", ids[0]))
    with StashStore.open(location, fake()) as s:
        with pytest.raises(StashIntegrityError, match=ids[0]):
            s.get([ids[0]])
        assert [seg.text for seg in s.get([ids[1]])] == ["lunch: two pizzas"]  # the others still read
        with pytest.raises(StashIntegrityError):
            s.list()


def _drop_connections(uri: str, *, allow: bool | None = None) -> None:
    """From another connection: optionally allow or refuse new connections to the store's database,
    then end every other connection to it (what clients see when the server restarts)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    db = str(conninfo_to_dict(uri)["dbname"])
    with psycopg.connect(make_conninfo(uri, dbname="postgres"), autocommit=True) as c:
        if allow is not None:
            c.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS {"true" if allow else "false"}')
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db,),
        )
        for _ in range(100):  # termination is asynchronous: wait until they are gone
            left = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
            ).fetchone()
            if left is not None and left[0] == 0:
                break
            time.sleep(0.05)


def test_postgres_store_reconnects_after_its_connection_is_dropped(postgres_uri: str) -> None:
    """Issue 27 item 3: reads run again on a fresh connection; a write reconnects when the loss is
    known before it is sent, else it is an error with nothing stored; the next write works; what is
    stored is exactly what was acknowledged."""
    with StashStore.open(postgres_uri, fake()) as s:
        first = s.stash(["the deploy key is in vault"]).segment_ids
        _drop_connections(postgres_uri)
        assert [r.segment.id for r in s.retrieve("deploy key")] == list(first)  # the read reconnected
        acked = ["the deploy key is in vault"]
        for text in ("written while the connection was gone", "written after"):
            _drop_connections(postgres_uri)
            try:  # a loss found before sending reconnects first; one found during the write is an error
                s.stash([text])
                acked.append(text)
            except StashError:
                pass
        s.stash(["written last"])  # whatever happened above, the next write works
        acked.append("written last")
        assert sorted(x.text for x in s.list()) == sorted(acked)  # exactly what was acknowledged, once each


def test_postgres_store_down_then_back(postgres_uri: str) -> None:
    with StashStore.open(postgres_uri, fake()) as s:
        s.stash(["the deploy key is in vault"])
        _drop_connections(postgres_uri, allow=False)
        try:
            with pytest.raises(StashError, match="cannot connect"):
                s.retrieve("deploy key")
        finally:
            _drop_connections(postgres_uri, allow=True)
        assert [r.segment.text for r in s.retrieve("deploy key")] == ["the deploy key is in vault"]


def test_a_result_says_why_it_ranked(store: StashStore) -> None:
    """Issue 28 (also): results carry what a host needs to decide without a second call."""
    store.stash([{"text": "the deploy broke the queue", "source": "ci"}, "lunch at noon"], session="s")
    hit = store.retrieve("deploy queue", session="s")[0]
    assert sum(hit.parts.values()) == pytest.approx(hit.score)
    assert set(hit.parts) == {"dense", "keyword", "recency"} and hit.parts["keyword"] > 0
    d = hit.to_dict()
    assert d["why"] == {k: round(v, 4) for k, v in hit.parts.items()} and d["source"] == "ci"
    assert {"keyword", "stashed_at", "timestamp", "tokens", "type"} <= set(d)


def test_a_newer_segment_supersedes_older_ones_on_both_backends(location: str, tmp_path: Path) -> None:
    """Issue 28, supersession: ``supersedes`` hides the old segments from default retrieval (the
    newest of a chain competes), says so both ways (``supersedes`` / ``superseded_by``), keeps the old
    ones retrievable with ``include_superseded``; deleting the newer one makes the older current again;
    bad supersessions are typed errors that write nothing; an export and import keeps the chains."""
    from contextsieve.stash.transfer import export_store, import_store

    with StashStore.open(location, fake()) as s:
        s.stash([{"text": "the release is on friday", "id": "plan-1"}, "lunch is at noon"])
        b = s.stash([{"text": "the release moved to monday", "id": "plan-2", "supersedes": ["plan-1"]}])
        assert b.segment_ids == ("plan-2",)
        found = {r.segment.id: r.segment for r in s.retrieve("release", top_k=5)}
        assert "plan-1" not in found and found["plan-2"].supersedes == ("plan-1",)
        every = {r.segment.id: r for r in s.retrieve("release", top_k=5, include_superseded=True)}
        assert every["plan-1"].segment.superseded_by == "plan-2"
        assert every["plan-1"].to_dict()["superseded_by"] == "plan-2"
        assert every["plan-2"].to_dict()["supersedes"] == ["plan-1"]
        assert {x.id: x.superseded_by for x in s.list()}["plan-1"] == "plan-2"
        # a chain: the newest wins; the middle one is superseded too
        s.stash([{"text": "the release is on tuesday after all", "id": "plan-3", "supersedes": ["plan-2"]}])
        assert [r.segment.id for r in s.retrieve("release", top_k=5) if "release" in r.segment.text] == ["plan-3"]
        n = count(s)
        for bad, match in (
            ({"text": "x", "supersedes": ["no-such-id"]}, "not in session"),
            ({"text": "y", "supersedes": "plan-3"}, "list of segment ids"),
            ({"text": "z", "supersedes": [None]}, "non-empty string"),
        ):
            with pytest.raises(InputError, match=match):
                s.stash([bad])
        with pytest.raises(InputError, match="not in session"):
            s.stash([{"text": "other session", "supersedes": ["plan-3"]}], session="elsewhere")
        with pytest.raises(InputError, match="itself superseded"):  # no loops: the same text as the
            s.stash([{"text": "the release is on friday", "supersedes": ["plan-3"]}])  # superseded plan-1
        assert count(s) == n
        export_store(s, tmp_path / "out.jsonl")
        s.delete(["plan-3"])  # the one it superseded is current again
        assert "plan-2" in {r.segment.id for r in s.retrieve("release", top_k=5)}
    other = str(tmp_path / "copy.db") if location.startswith("postgresql://") else None
    if other is not None:  # PostgreSQL -> SQLite; SQLite -> a fresh SQLite otherwise
        target = other
    else:
        target = str(tmp_path / "copy2.db")
    with StashStore.open(target, fake()) as c:
        import_store(c, tmp_path / "out.jsonl")
        import_store(c, tmp_path / "out.jsonl")  # run again: nothing changes, no error
        chains = {x.id: x.superseded_by for x in c.list()}
        assert chains["plan-1"] == "plan-2" and chains["plan-2"] == "plan-3" and chains["plan-3"] is None
        assert [r.segment.id for r in c.retrieve("release", top_k=5) if "release" in r.segment.text] == ["plan-3"]


def test_supersession_reaches_another_process_of_the_same_sqlite_store(tmp_path: Path) -> None:
    """The in-memory table of a second store on the same file learns of a supersession (and of its
    undoing) through the change log."""
    path = tmp_path / "shared.db"
    with StashStore.open(path, fake()) as a, StashStore.open(path, fake()) as b:
        a.stash([{"text": "the release is on friday", "id": "p1"}])
        assert [r.segment.id for r in b.retrieve("release")] == ["p1"]
        a.stash([{"text": "the release moved to monday", "id": "p2", "supersedes": ["p1"]}])
        assert [r.segment.id for r in b.retrieve("release")] == ["p2"]
        a.delete(["p2"])
        assert [r.segment.id for r in b.retrieve("release")] == ["p1"]


def test_a_close_restatement_is_proposed_as_superseding(location: str) -> None:
    """``propose_supersede``: a new segment whose meaning is that close to a current one of its
    session is reported (not marked); stashing it again with ``supersedes`` marks it (a duplicate of
    a stored text makes the stored one supersede)."""
    from contextsieve.stash.config import StashConfig

    with StashStore.open(location, fake(), StashConfig(propose_supersede=0.9)) as s:
        s.stash([{"text": "the release date is friday the fifth", "id": "d1"}, "lunch is at noon"])
        r = s.stash(["the release date is friday the fifth again"])
        (new,) = r.segment_ids
        assert r.may_supersede == {new: "d1"}
        assert s.stash(["pizza for lunch today"]).may_supersede == {}
        again = s.stash([{"text": "the release date is friday the fifth again", "supersedes": ["d1"]}])
        assert again.segment_ids == (new,) and again.stashed == 0
        assert s.get(["d1"])[0].superseded_by == new


def test_changed_index_terms_or_a_null_field_are_caught_not_served(tmp_path: Path) -> None:
    """Issue 27 item 4 (found by benchmarks.robustness.tamper): the fields check covers the keyword index terms, so
    a store that loads a row whose terms changed leaves it out of search with a warning (its text still
    reads); a value of another type where a count was is a StashIntegrityError, not a TypeError."""
    from contextsieve.errors import StashIntegrityError, StashIntegrityWarning

    path = str(tmp_path / "s.db")
    with StashStore.open(path, fake()) as s:
        ids = s.stash(["the deploy key is in vault", "lunch: two pizzas"]).segment_ids
    _tamper(path, "UPDATE segments SET terms = ? WHERE id = ?", ("pizza pizza pizza", ids[0]))
    with pytest.warns(StashIntegrityWarning, match="fail their check"):
        with StashStore.open(path, fake()) as s:
            assert [r.segment.id for r in s.retrieve("pizza", top_k=5)] == [ids[1]]
            assert s.get([ids[0]])[0].text == "the deploy key is in vault"
    _tamper(path, "UPDATE segments SET chunks = ? WHERE id = ?", ("two", ids[1]))  # as a flipped type byte reads
    with StashStore.open(path, fake()) as s:
        with pytest.raises(StashIntegrityError, match=ids[1]):
            s.get([ids[1]])
