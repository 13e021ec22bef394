"""How the stash embeds a segment (issue 28, recall on conversations): a segment is embedded as
``<type>: <text>`` (StashConfig.embed_type), its stored text unchanged; the form is a property of the
store, kept across opens, and a store made before it keeps embedding as it did. Both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from contextsieve.errors import InputError
from contextsieve.stash.config import StashConfig
from contextsieve.stash.segment import NewSegment
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder


class Recording(FakeEmbedder):
    """Remembers every text it embedded."""

    model_id = "fake/recording"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.seen.extend(texts)
        return super().embed(texts, show_progress=show_progress)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_uri"))
    return str(tmp_path / "stash.db")


def test_segments_are_embedded_with_their_type_and_stored_as_given(location: str) -> None:
    emb = Recording()
    store = StashStore.open(location, emb)
    try:
        assert store.embed_type  # a new store embeds types
        r = store.stash(
            [NewSegment("Maya: I moved to Lisbon in May.", type="message"), {"text": "x = 1", "type": "code_block"}]
        )
        assert "message: Maya: I moved to Lisbon in May." in emb.seen and "code_block: x = 1" in emb.seen
        assert [s.text for s in store.get(list(r.segment_ids))] == ["Maya: I moved to Lisbon in May.", "x = 1"]
        emb.seen.clear()
        store.retrieve("where did Maya move?")
        # the query is embedded as it is, and without its names (RankConfig.unnamed_weight), never with a type
        assert emb.seen == ["where did Maya move?", "where did move?"]
        emb.seen.clear()
        store.retrieve("where did she move?")
        assert emb.seen == ["where did she move?"]  # no name: once
    finally:
        store.close()
    again = StashStore.open(location, emb, StashConfig(embed_type=None))
    try:
        assert again.embed_type  # kept by the store
        with pytest.raises(InputError, match="embed_type"):
            StashStore.open(location, emb, StashConfig(embed_type=False))
    finally:
        again.close()


def test_a_store_can_be_made_without_types_and_keeps_that(location: str) -> None:
    emb = Recording()
    store = StashStore.open(location, emb, StashConfig(embed_type=False))
    try:
        store.stash(["Jonas: the train was late again."])
        assert emb.seen == ["Jonas: the train was late again."]
    finally:
        store.close()
    again = StashStore.open(location, emb)
    try:
        assert not again.embed_type
        emb.seen.clear()
        again.stash(["Maya: mine too."])
        assert emb.seen == ["Maya: mine too."]
    finally:
        again.close()


def test_a_store_made_before_the_form_was_recorded_embeds_as_it_did(tmp_path: Path) -> None:
    emb = Recording()
    path = tmp_path / "old.db"
    store = StashStore.open(path, emb)
    store.stash(["Maya: the garden is behind the house."])
    store.close()
    with sqlite3.connect(path) as db:  # what a store written by the previous version holds: no form key
        db.execute("DELETE FROM meta WHERE key = 'stash:embed-form'")
    old = StashStore.open(path, emb)
    try:
        assert not old.embed_type
        emb.seen.clear()
        old.stash(["Jonas: and the shed?"])
        assert emb.seen == ["Jonas: and the shed?"]  # its vectors stay comparable with what it holds
        with pytest.raises(InputError, match="embed_type"):
            StashStore.open(path, emb, StashConfig(embed_type=True))
    finally:
        old.close()
    with pytest.raises(InputError):
        StashConfig(embed_type="yes")  # type: ignore[arg-type]
