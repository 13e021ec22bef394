"""The stash store on both backends: stash and get, duplicates, ids, retrieve and its ranking, sessions,
references, merge, expiry, listing, a model change and damaged stores."""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import warnings
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from contextsieve.errors import (
    InputError,
    StashError,
    StashIntegrityWarning,
    StashModelError,
    StashNotFoundError,
    UnknownSegmentError,
)
from contextsieve.retrieval.fusion import spread_weights
from contextsieve.stash.backend import query_terms
from contextsieve.stash.config import StashConfig
from contextsieve.stash.options import RetrieveKeywords, RetrieveOptions
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import NewSegment, SegmentType
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.stash_store import T0, UTC, count, fake, spread_oracle

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


def test_spread_weights_follow_each_signals_spread() -> None:
    """A flat signal (five near ties) loses weight to one whose best stands alone; the weights keep
    their sum; power 0, no spread anywhere, or one signal with no match behave as documented."""
    sims = np.array([1.0, 0.9, 0.9, 0.9, 0.9, 0.1])
    kws = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    cs, ck = spread_oracle(list(sims), 5, 0.5), spread_oracle(list(kws), 5, 0.5)
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
        c = [spread_oracle(list(a), top, power), spread_oracle(list(b), top, power)]
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
        rank = RankConfig(spread_power=power, created_weight=0.0, stashed_weight=0.0, day_weight=0.0)
        with StashStore.open(store.backend.location, fake(), StashConfig(rank=rank)) as s2:
            found, trace = s2.retrieve_traced("zebra harbour", session="s", top_k=8, min_similarity=-1.0)
            best = max(c.similarity for c in trace.candidates)
            sims = [c.similarity / best for c in trace.candidates]
            kws = [c.keyword for c in trace.candidates]
            cs, ck = spread_oracle(sims, 5, power), spread_oracle(kws, 5, power)
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


def test_a_store_opened_only_to_read_is_never_created_on_both_backends(location: str, tmp_path: Path) -> None:
    """Issue 47 defect 6: ``create=False`` (what ``stash stats`` / ``export`` / ``inspect --stash`` open
    with) finds no store at a missing path, an empty file or a database without the stash's tables: a
    StashNotFoundError naming it, and no file, folder or table made. A writer then makes the store, and
    it opens to read."""
    if location.startswith("postgresql://"):
        with pytest.raises(StashNotFoundError, match="no stash store at postgresql://.*no stash tables"):
            StashStore.open(location, fake(), create=False)
        import psycopg

        with psycopg.connect(location) as c:
            assert c.execute("SELECT to_regclass('stash_meta')").fetchone() == (None,)
    else:
        missing = tmp_path / "typo" / "stash.db"
        with pytest.raises(StashNotFoundError, match=f"no stash store at {re.escape(str(missing))} "):
            StashStore.open(missing, fake(), create=False)
        (tmp_path / "empty.db").touch()
        with pytest.raises(StashNotFoundError, match="an empty database"):
            StashStore.open(tmp_path / "empty.db", fake(), create=False)
        (tmp_path / "afile").touch()
        with pytest.raises(StashNotFoundError, match="a folder on its path is a file"):
            StashStore.open(tmp_path / "afile" / "stash.db", fake(), create=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "empty.db"]
        assert (tmp_path / "empty.db").stat().st_size == 0
    with StashStore.open(location, fake()) as s:
        s.stash(["kept"])
    with StashStore.open(location, fake(), create=False) as s:
        assert [x.text for x in s.list()] == ["kept"]


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
