"""The day stage (a candidate raised by the best relevance among the candidates created on
its UTC day) and the names boost (the query's names and quoted phrases found verbatim), checked
through the store's API against plain oracles, and the names' parsing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from contextsieve.errors import InputError
from contextsieve.stash.names import NOT_NAMES, name_share, query_names
from contextsieve.stash.ranking import RankConfig, group_best
from contextsieve.stash.segment import ContextSegment, NewSegment
from contextsieve.stash.store import StashStore
from tests.helpers.stash_store import fake

UTC = timezone.utc
DAY1 = datetime(2024, 3, 1, 12, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=7)
NOW = DAY2 + timedelta(days=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StashStore]:
    s = StashStore.open(tmp_path / "stash.db", fake())
    yield s
    s.close()


def _ranked(store: StashStore, query: str, rank: RankConfig, k: int) -> list[str]:
    store.config = dataclasses.replace(store.config, rank=rank)
    return [r.segment.id for r in store.retrieve(query, top_k=k, now=NOW, min_similarity=-1.0)]


def test_the_defaults_and_their_checks() -> None:
    r = RankConfig()
    assert (r.day_weight, r.name_weight) == (0.1, 0.05)
    for bad in (-0.1, float("nan"), True, "0.1"):
        with pytest.raises(InputError, match="day_weight"):
            RankConfig(day_weight=bad)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="name_weight"):
            RankConfig(name_weight=bad)  # type: ignore[arg-type]


def test_query_names_are_quoted_phrases_and_capitalised_words_inside_a_sentence() -> None:
    assert query_names("Where does Maya keep the garden?") == ("Maya",)
    assert query_names('What did "Pay Yourself First" mean to Jonas\'s sister Ines?') == (
        "Pay Yourself First",
        "Jonas",
        "Ines",
    )
    # sentence openers, question words, pronouns and weekdays are not names; "I" never is
    assert query_names("Maya said it. Then I left on Monday. What did He do?") == ()
    assert query_names("tell me about “KudiFlow” and the WhatsApp tool, then Lisbon") == (
        "KudiFlow",
        "WhatsApp",
        "Lisbon",
    )
    assert query_names("") == ()


def test_name_share_counts_whole_words_verbatim() -> None:
    names = ("Maya", "Pay Yourself First")
    assert name_share("Maya: I use the Pay Yourself First method", names) == 1.0
    assert name_share("Mayan ruins; pay yourself first", names) == 0.0  # not a whole word, not the same case
    assert name_share("I met Maya.", names) == 0.5
    assert name_share("anything", ()) == 0.0


def test_group_best_matches_a_plain_oracle() -> None:
    rng = np.random.default_rng(41)
    values = rng.standard_normal(50)
    groups = rng.integers(0, 7, 50)
    want = [max(v for v, h in zip(values, groups) if h == g) for g in groups]
    assert group_best(values, groups).tolist() == want
    assert group_best(np.array([]), np.array([])).size == 0


def _stash_two_days(store: StashStore) -> None:
    store.stash(
        [
            NewSegment("kitten vet visit", timestamp=DAY1, id="a"),
            NewSegment("the vet visit went fine", timestamp=DAY1, id="x"),
            NewSegment("the vet visit again", timestamp=DAY2, id="y"),
            NewSegment("lunch at noon", timestamp=DAY2, id="d"),
        ]
    )


def test_the_day_stage_lifts_a_turn_of_the_day_that_answers(store: StashStore) -> None:
    """``x`` and ``y`` match the query alike (``y`` a little better); ``x`` was said on the day whose
    turn ``a`` answers it, so the day stage puts it first of the two; off, ``y`` leads."""
    _stash_two_days(store)
    assert _ranked(store, "kitten vet visit", RankConfig(), 3) == ["a", "x", "y"]
    assert _ranked(store, "kitten vet visit", RankConfig(day_weight=0.0), 3) == ["a", "y", "x"]


def test_the_day_part_is_its_weight_times_its_days_best_relevance(store: StashStore) -> None:
    _stash_two_days(store)
    got = store.retrieve("kitten vet visit", top_k=4, now=NOW, min_similarity=-1.0)  # every candidate
    assert len(got) == 4
    day = {r.segment.id: r.segment.timestamp.date() for r in got}
    relevance = {r.segment.id: r.parts["dense"] + r.parts["keyword"] for r in got}
    for r in got:
        best = max(relevance[i] for i in relevance if day[i] == day[r.segment.id])
        assert r.parts["day"] == pytest.approx(0.1 * best, abs=1e-12)
        assert sum(r.parts.values()) == pytest.approx(r.score, abs=1e-12)
    assert {r.segment.id: r.parts["names"] for r in got} == dict.fromkeys("axyd", 0.0)


def test_a_quoted_phrase_found_verbatim_lifts_its_segment(store: StashStore) -> None:
    store.stash(
        [
            {"text": "the Pay Yourself First method works well for my friends", "id": "p1"},
            {"text": "pay yourself first and save", "id": "p2"},
            {"text": "lunch at noon", "id": "l"},
        ]
    )
    query = 'tell me about "Pay Yourself First" again'
    assert _ranked(store, query, RankConfig(), 2) == ["p1", "p2"]
    assert _ranked(store, query, RankConfig(name_weight=0.0), 2) == ["p2", "p1"]
    store.config = dataclasses.replace(store.config, rank=RankConfig(name_weight=0.2))
    parts = {r.segment.id: r.parts for r in store.retrieve(query, top_k=3, min_similarity=-1.0)}
    assert parts["p1"]["names"] == pytest.approx(0.2) and parts["p2"]["names"] == 0.0


def test_only_a_query_with_names_reads_the_candidates_texts(store: StashStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.stash([f"note {i} about the deploy queue" for i in range(30)] + ["Maya fixed the deploy queue"])
    read: list[int] = []
    get = store.backend.get

    def counted(ids: Sequence[str]) -> list[ContextSegment]:
        read.append(len(ids))
        return get(ids)

    monkeypatch.setattr(store.backend, "get", counted)
    store.retrieve("what broke the deploy queue", top_k=3)
    assert read == [3]  # the winners only
    read.clear()
    got = store.retrieve("what did Maya do to the deploy queue", top_k=3)
    assert len(read) == 1 and read[0] > 3  # every candidate once, the winners among them
    assert got[0].segment.text == "Maya fixed the deploy queue"


def _names_oracle(query: str) -> tuple[str, ...]:
    """query_names written plainly: a word opens a sentence when the text before it, stripped of
    white space, is empty or ends in . ! ? or :."""
    import re

    quoted = re.compile(r"[\"“”]([^\"“”]{2,80})[\"“”]")
    out = [m.group(1).strip() for m in quoted.finditer(query)]
    rest = quoted.sub(" ", query)
    for m in re.finditer(r"[A-Za-z][\w'’-]*", rest):
        word = re.sub(r"['’]s?$", "", m.group(0))
        before = rest[: m.start()].rstrip()
        if len(word) > 1 and word[0].isupper() and before and before[-1] not in ".!?:" and word not in NOT_NAMES:
            out.append(word)
    return tuple(dict.fromkeys(x for x in out if x))


def test_query_names_agrees_with_a_plain_oracle_and_stays_linear_on_a_long_query() -> None:
    """Random queries of names, common words, punctuation and white space give the oracle's names;
    a 320,000-character query is read in one pass (it sliced the text before every word: 1.4 s)."""
    import random

    rng = random.Random(41)
    pieces = ["Maya", "the", "What", "Bob's", "said", ".", "?", ":", "\n", "  ", '"Pay Yourself First"', "I", "x"]
    for _ in range(300):
        q = " ".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        assert query_names(q) == _names_oracle(q), q
    long = " ".join(["word Alice said"] * 20000)
    assert query_names(long) == ("Alice",)
