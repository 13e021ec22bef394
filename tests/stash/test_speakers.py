"""The speaker a query names. A candidate whose speaker (its source, its topic or a leading
``Name:`` of its text) the query names gains ``RankConfig.speaker_weight``, and once a candidate's
speaker is named the dense signal compares the segments with the query moved towards the query
without its names (``RankConfig.unnamed_weight``). Checked through the store's API (both
backends) against plain oracles, each off at 0, and the parsing of speakers and names."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import numpy as np
import pytest

from contextsieve.errors import InputError
from contextsieve.stash.names import names_speaker, query_names, speaker_labels, without_names
from contextsieve.stash.ranking import RankConfig, unnamed_query
from contextsieve.stash.store import StashStore
from tests.helpers.stash_store import fake

T = datetime(2024, 3, 1, 12, tzinfo=timezone.utc)
#: Dense alone (no keywords, day stage or names), so each test sees the stage it is about.
DENSE = dict(keyword_weight=0.0, day_weight=0.0, name_weight=0.0)


def _ranked(store: StashStore, query: str, rank: RankConfig, k: int = 3) -> list[str]:
    store.config = dataclasses.replace(store.config, rank=rank)
    return [r.segment.id for r in store.retrieve(query, top_k=k, min_similarity=-1.0)]


def test_the_defaults_and_their_checks() -> None:
    r = RankConfig()
    assert (r.speaker_weight, r.unnamed_weight) == (0.1, 0.75)
    for bad in (-0.1, float("nan"), True, "0.1"):
        with pytest.raises(InputError, match="speaker_weight"):
            RankConfig(speaker_weight=bad)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="unnamed_weight"):
            RankConfig(unnamed_weight=bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unnamed_weight"):
        RankConfig(unnamed_weight=1.5)


def test_speaker_labels_are_the_source_the_topic_and_a_leading_name() -> None:
    assert speaker_labels("Maya: I moved to Lisbon.") == ("Maya",)
    assert speaker_labels("Lady Macbeth: Out, damned spot!") == ("Lady Macbeth",)
    assert speaker_labels("Rosencrantz and Guildenstern: We will.") == ("Rosencrantz and Guildenstern",)
    assert speaker_labels("I moved to Lisbon.", source="Maya", topic="trips") == ("Maya", "trips")
    assert speaker_labels("I moved to Lisbon.") == ()
    # a label is capitalised words at the start, followed by a colon and a space
    for text in ("note: call the bank", "At 10:30 we met", "Maya said: hi", "https://example.org", "Maya:no space"):
        assert speaker_labels(text) == (), text


def test_a_name_names_a_speaker_as_a_whole_word_with_its_case() -> None:
    assert names_speaker(("Maya",), ("Maya",))
    assert names_speaker(("Macbeth",), ("Lady Macbeth",))
    assert not names_speaker(("Maya",), ("Mayan",)) and not names_speaker(("maya",), ("Maya",))
    assert not names_speaker((), ("Maya",)) and not names_speaker(("Maya",), ())


def test_without_names_takes_the_names_and_their_possessives_out() -> None:
    assert without_names("When are Jonas's music lessons?", ("Jonas",)) == "When are music lessons?"
    assert without_names("What did Maya tell Jonas?", ("Maya", "Jonas")) == "What did tell?"
    assert without_names("Mayan ruins near Maya", ("Maya",)) == "Mayan ruins near"
    assert without_names("Maya", ("Maya",)) == "Maya" and without_names("Maya?", ("Maya",)) == "Maya?"  # nothing left


def test_unnamed_query_ranks_as_the_mix_of_the_two_cosines() -> None:
    """For a one-sentence query, ranking by the cosine with the mixed, normalised query is ranking by
    ``(1 - share) * cosine as asked + share * cosine unnamed`` (the plain oracle), which is what the
    stash's max-scaled dense signal sees."""
    rng = np.random.default_rng(49)
    docs = rng.standard_normal((200, 16))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    for share in (0.25, 0.75, 1.0):
        asked, unnamed = (v / np.linalg.norm(v) for v in rng.standard_normal((2, 16)))
        mix = unnamed_query(asked[None, :], unnamed[None, :], share)
        assert mix is not None and mix.shape == (1, 16)
        assert np.linalg.norm(mix[0]) == pytest.approx(1.0, abs=1e-6)
        oracle = (1 - share) * docs @ asked + share * docs @ unnamed
        got = docs @ mix[0]
        assert np.allclose(got / got.max(), oracle / oracle.max(), atol=1e-5)  # equal once scaled by the best
    one = np.ones((1, 16), np.float32) / 4
    assert unnamed_query(one, one, 0.0) is None  # off
    assert unnamed_query(np.ones((2, 16)), one, 0.5) is None  # taking a name out ended a sentence


def _stash_turns(store: StashStore) -> None:
    store.stash(
        [
            {"text": "Maya: haha", "id": "filler", "timestamp": T},
            {
                "text": "Maya: that marathon left my legs sore for days afterwards, honestly my knees still ache a "
                "little every single morning now",
                "id": "answer",
                "timestamp": T,
            },
            {"text": "Jonas: lunch at noon", "id": "other", "timestamp": T},
        ]
    )


def test_the_unnamed_query_puts_what_is_said_before_the_name(store: StashStore) -> None:
    """``"Maya: haha"`` is embedded mostly as the name, so asked as it is the query finds it first;
    once Maya is matched as the speaker, the cosine taken without the name puts the answer first."""
    _stash_turns(store)
    query = "When did Maya run the marathon?"
    assert _ranked(store, query, RankConfig(**DENSE), 2) == ["answer", "filler"]
    assert _ranked(store, query, RankConfig(unnamed_weight=0.0, **DENSE), 2) == ["filler", "answer"]


def test_a_result_s_similarity_is_its_cosine_with_the_mixed_query(store: StashStore) -> None:
    _stash_turns(store)
    emb = fake()
    query = "When did Maya run the marathon?"
    for share in (0.0, 0.5, 0.75, 1.0):
        store.config = dataclasses.replace(store.config, rank=RankConfig(unnamed_weight=share, **DENSE))
        got = store.retrieve(query, top_k=3, min_similarity=-1.0)
        q = emb.embed([query])
        mix = q if share == 0 else unnamed_query(q, emb.embed(["When did run the marathon?"]), share)
        assert mix is not None
        for r in got:
            v = emb.embed([f"message: {r.segment.text}"])[0]  # the store embeds a segment with its type
            assert r.similarity == pytest.approx(float(v @ mix[0]), abs=3e-3)  # int8 rows
        want = sorted(got, key=lambda r: -r.similarity)
        assert [r.segment.id for r in got] == [r.segment.id for r in want]


def test_a_named_speaker_s_turns_gain_the_speaker_weight(store: StashStore) -> None:
    store.stash(
        [
            {"text": "Jonas: tomatoes grow on the balcony", "id": "jonas", "timestamp": T},
            {"text": "Maya: my tomatoes sprouted at last", "id": "maya", "timestamp": T},
            {"text": "my tomatoes need water", "source": "Maya", "id": "by-source", "timestamp": T},
            {"text": "tomatoes again", "topic": "Maya", "id": "by-topic", "timestamp": T},
            {"text": "lunch at noon", "id": "lunch", "timestamp": T},
        ]
    )
    query = "What tomatoes is Maya growing on the balcony?"
    plain = RankConfig(unnamed_weight=0.0, speaker_weight=0.0, **DENSE)
    off = _ranked(store, query, plain, 5)
    on = _ranked(store, query, dataclasses.replace(plain, speaker_weight=0.3), 5)
    assert off.index("jonas") < off.index("maya") and on.index("maya") < on.index("jonas")
    for w in (0.0, 0.1, 0.3):
        store.config = dataclasses.replace(store.config, rank=dataclasses.replace(plain, speaker_weight=w))
        got = {r.segment.id: r for r in store.retrieve(query, top_k=5, min_similarity=-1.0)}
        assert {i: r.parts["speaker"] for i, r in got.items()} == {
            "jonas": 0.0,
            "maya": w,
            "by-source": w,
            "by-topic": w,
            "lunch": 0.0,
        }
        for r in got.values():
            assert sum(r.parts.values()) == pytest.approx(r.score, abs=1e-12)


def test_a_query_that_names_no_speaker_ranks_as_without_the_stage(store: StashStore) -> None:
    """Names that are nobody's label (a place, a product) leave the ranking as it was with both stages
    off: same results, scores and similarities."""
    store.stash(
        [
            {"text": "the Lisbon trip cost too much", "id": "a", "timestamp": T},
            {"text": "Lisbon was sunny", "id": "b", "timestamp": T},
            {"text": "a trip to the coast", "id": "c", "timestamp": T},
        ]
    )
    query = "What did the Lisbon trip cost?"
    assert query_names(query) == ("Lisbon",)
    store.config = dataclasses.replace(store.config, rank=RankConfig())
    on = store.retrieve(query, top_k=3, min_similarity=-1.0, now=T)
    store.config = dataclasses.replace(store.config, rank=RankConfig(speaker_weight=0.0, unnamed_weight=0.0))
    off = store.retrieve(query, top_k=3, min_similarity=-1.0, now=T)
    assert [(r.segment.id, r.score, r.similarity) for r in on] == [(r.segment.id, r.score, r.similarity) for r in off]
    assert all(r.parts["speaker"] == 0.0 for r in on)


def test_off_at_zero_the_query_is_embedded_once(location: str) -> None:
    emb = fake()
    rank = RankConfig(speaker_weight=0.0, unnamed_weight=0.0)
    s = StashStore.open(location, emb)
    try:
        _stash_turns(s)
        s.config = dataclasses.replace(s.config, rank=rank)
        calls = emb.calls
        got = s.retrieve("When did Maya run the marathon?", top_k=3, min_similarity=-1.0)
        assert emb.calls == calls + 1
        assert all(r.parts["speaker"] == 0.0 for r in got)
        q = emb.embed(["When did Maya run the marathon?"])[0]
        vecs = emb.embed([f"message: {r.segment.text}" for r in got])
        assert [r.similarity for r in got] == pytest.approx((vecs @ q).tolist(), abs=3e-3)  # int8 rows
    finally:
        s.close()


def test_the_unnamed_query_s_own_candidates_join_once_a_speaker_is_named(store: StashStore) -> None:
    """With one candidate per search, the answer is found only by the query without the name: it
    joins the candidates when the first candidate's speaker is named, and not otherwise."""
    _stash_turns(store)
    one = RankConfig(candidates=1, **DENSE)
    assert _ranked(store, "When did Maya run the marathon?", one, 1) == ["answer"]
    assert _ranked(store, "When did Maya run the marathon?", dataclasses.replace(one, unnamed_weight=0.0), 1) == [
        "filler"
    ]
    store.config = dataclasses.replace(store.config, rank=one)
    _, trace = store.retrieve_traced("When did Maya run the marathon?", top_k=1, min_similarity=-1.0)
    assert {c.segment_id for c in trace.candidates} == {"filler", "answer"}
