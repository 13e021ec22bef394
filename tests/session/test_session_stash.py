"""Sessions with a stash (seeds 000 + 004): stash messages and tool results, keep the history under a
budget, bring relevant stashed segments back into requests as include mode ``stash``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextsieve.agent.items import IncludeMode
from contextsieve.errors import InputError, UnknownSegmentError
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import RequestContext, StashedEntry
from contextsieve.session.session import Session
from contextsieve.session.stash_link import SessionStash, StashSettings
from contextsieve.stash.store import StashStore
from tests.helpers.agents import make_agent
from tests.helpers.fake_embedder import FakeEmbedder


@pytest.fixture(params=["sqlite", "postgres"])
def stash(request: pytest.FixtureRequest, tmp_path: Path):  # noqa: ANN201
    location = str(request.getfixturevalue("postgres_uri")) if request.param == "postgres" else str(tmp_path / "s.db")
    e = FakeEmbedder()
    e.model_id = "fake/1"  # type: ignore[misc]
    s = StashStore.open(location, e)
    yield s
    s.close()


def session(
    stash: StashStore, stash_session: str | None = None, stash_settings: StashSettings | None = None, **kw: object
) -> Session:
    link = SessionStash(stash, stash_session, stash_settings)
    return Session(make_agent(), ChunkStore(FakeEmbedder()), stash=link, **kw)  # type: ignore[arg-type]


def test_stashed_segments_come_back_as_their_own_include_mode(stash: StashStore) -> None:
    s = session(stash, stash_settings=StashSettings(top_k=2, min_similarity=0.2))
    r = s.stash(
        [
            {"text": "the deploy key for the staging cluster is in vault path ops/staging", "type": "decision"},
            {"text": "lunch order: two pizzas and a salad", "type": "message"},
            {"text": "staging cluster deploy failed with a timeout on the vault", "type": "error_log"},
        ]
    )
    assert r.stashed == 3
    req = s.build_request("where is the staging deploy key in vault")
    got = [e.segment_id for e in req.context.stashed]
    assert got == [r.segment_ids[0], r.segment_ids[2]]  # best first; the pizza is not related
    assert all(e.mode is IncludeMode.STASH and e.score > 0 and 0.2 <= e.similarity <= 1 for e in req.context.stashed)
    assert req.context.stashed[0].score >= req.context.stashed[1].score
    # the texts are sent, oldest first, right after the history and before the user message
    sent = [m["content"] for m in req.messages]
    stashed_msgs = [c for c in sent if c.startswith("Stashed context (")]
    assert len(stashed_msgs) == 2 and "vault path ops/staging" in stashed_msgs[0]
    assert sent[-1] == "where is the staging deploy key in vault"
    assert sent.index(stashed_msgs[0]) < sent.index("Reference: Passwords are reset from the security page.")
    # recorded in the reference shape, summary and grouped view; the JSON round-trips
    d = req.context.to_dict()
    stash_items = [i for i in d["items"] if i["type"] == "stash"]
    assert [i["name"] for i in stash_items] == got and stash_items[0]["includeMode"] == "stash"
    assert stash_items[0]["contextsieve"]["segment_type"] == "decision"
    assert "2 stashed segments" in d["summary"] and "Stashed (2):" in req.context.grouped_text()
    back = RequestContext.from_dict(json.loads(req.context.to_json()))
    assert back == req.context
    # a rebuilt request fetches the texts again; a deleted segment is left out
    assert s.request_for(back, req.message).messages == req.messages
    stash.delete([got[0]], session=s.stash_session)
    rebuilt = [m["content"] for m in s.request_for(back, req.message).messages]
    assert sum(c.startswith("Stashed context (") for c in rebuilt) == 1


def test_explain_says_why_a_segment_is_or_is_not_brought_back(stash: StashStore) -> None:
    s = session(stash, stash_settings=StashSettings(top_k=1, min_similarity=0.0))
    ids = s.stash(["postgres vacuum settings for the orders table", "postgres vacuum ran on orders last night"])
    msg = "postgres vacuum settings orders table"
    included = s.explain(msg, f"stash:{ids.segment_ids[0]}")
    assert included.included and included.mode == "stash" and included.item_rank == 1
    other = s.explain(msg, f"stash:{ids.segment_ids[1]}")
    assert not other.included and other.item_rank == 2 and "below the top_k 1" in other.reasons[0]
    with pytest.raises(UnknownSegmentError):
        s.explain(msg, "stash:nope")
    # explain leaves the session as it was
    assert s.history == [] and s.build_request(msg).context.stashed[0].segment_id == ids.segment_ids[0]


def test_history_budget_stashes_the_oldest_messages_never_the_latest_turn(stash: StashStore) -> None:
    s = session(stash, stash_settings=StashSettings(history_budget=40))
    for i in range(6):
        req = s.build_request(f"question {i} about the billing export format number {i}")
        s.add_message("tool", f"export {i} has columns id amount currency", name="billing_export")
        s.record_reply(req, f"answer {i}: the export is a csv with three columns")
    counts = [len(m.content.split()) + 2 for m in s.history]  # FakeEmbedder.count_tokens
    assert sum(counts) <= 40
    assert s.history[-3].role == "user" and s.history[-3].content.startswith("question 5")  # the latest turn kept
    stored = stash.list(session=s.stash_session, limit=100)
    assert len(stored) == 18 - len(s.history)
    sources = {seg.source for seg in stored}
    assert sources == {"session:user", "session:assistant", "tool:billing_export"}
    # the next request says what was moved, and can bring it back
    req = s.build_request("what columns did export 0 have")
    assert any("moved to the stash" in n for n in req.context.notes)
    assert req.context.stashed and "Tool result (billing_export)" not in req.messages[1]["content"]
    # a single latest turn over the budget is kept, with a note
    t = session(stash, stash_settings=StashSettings(history_budget=3))
    t.add_message("user", "a very long latest question that is over the budget on its own")
    assert len(t.history) == 1
    assert "never stashed" in t.build_request("x").context.notes[0]


def test_stash_history_moves_all_but_the_latest_turn_all_or_nothing(stash: StashStore) -> None:
    s = session(stash)
    s.add_message("user", "first question")
    s.add_message("assistant", "first answer")
    s.add_message("user", "second question")
    r = s.stash_history()
    assert r.stashed == 2 and [m.content for m in s.history] == ["second question"]
    assert s.stash_history().stashed == 0  # the latest turn is never stashed
    s.add_message("assistant", "second answer")
    s.add_message("user", "third question")
    with pytest.raises(InputError):
        s.stash_history(-1)
    before = list(s.history)
    stash.close()
    with pytest.raises(Exception):  # noqa: B017, PT011  (a closed store refuses; the history is unchanged)
        s.stash_history()
    assert s.history == before


def test_sessions_see_only_their_own_stash_unless_cross_session(stash: StashStore) -> None:
    a = session(stash, stash_session="alice", stash_settings=StashSettings(min_similarity=0.0))
    b = session(stash, stash_session="bob", stash_settings=StashSettings(min_similarity=0.0))
    a.stash("alice's api key rotation happens every monday")
    assert b.build_request("api key rotation monday").context.stashed == ()
    crossed = session(
        stash, stash_session="carol", stash_settings=StashSettings(min_similarity=0.0, cross_session=True)
    )
    assert len(crossed.build_request("api key rotation monday").context.stashed) == 1
    with pytest.raises(UnknownSegmentError):
        b.explain("api key", f"stash:{stash.list(session='alice')[0].id}")


def test_budgets_cut_stashed_segments_lowest_score_first(stash: StashStore) -> None:
    s = session(stash, stash_settings=StashSettings(top_k=3, min_similarity=0.0, max_tokens=12))
    s.stash(["refund policy ten days parcel", "refund policy ten days parcel arrives late", "refund form"])
    ctx = s.build_request("refund policy ten days parcel").context
    assert [e.tokens for e in ctx.stashed] == [7, 4]  # best first while they fit: 7 + 9 > 12, then 7 + 4
    [cut] = [d for d in ctx.dropped if isinstance(d.entry, StashedEntry)]
    assert cut.tokens == 9 and cut.reason.startswith("stash max_tokens")
    # token_budget drops stashed segments like agent items (lowest score first), never session items
    t = session(
        stash,
        stash_session=s.stash_session,
        stash_settings=StashSettings(top_k=3, min_similarity=0.0),
        token_budget=1,
    )
    c = t.build_request("refund policy ten days parcel").context
    assert c.stashed == () and any(isinstance(d.entry, StashedEntry) for d in c.dropped)
    assert all(e.mode in (IncludeMode.ALWAYS, IncludeMode.MANUAL) for e in c.entries)


def test_session_file_keeps_its_stash_session(stash: StashStore, tmp_path: Path) -> None:
    s = session(stash)
    s.stash("the nightly backup job writes to bucket b7")
    s.add_message("tool", "backup ok", name="backup")
    s.save(tmp_path / "s.json")
    again = Session.load(tmp_path / "s.json", s.agent, s.store, stash=stash)
    assert again.stash_session == s.stash_session and again.history[0].name == "backup"
    assert len(again.build_request("nightly backup bucket").context.stashed) == 1


def test_bad_stash_use_is_a_typed_error(stash: StashStore) -> None:
    for bad in ({"top_k": -1}, {"top_k": True}, {"min_similarity": 2}, {"history_budget": 0}, {"cross_session": 1}):
        with pytest.raises(InputError):
            StashSettings(**bad)  # type: ignore[arg-type]
    plain = Session(make_agent(), ChunkStore(FakeEmbedder()))
    with pytest.raises(InputError, match="no stash"):
        plain.stash("x")
    assert plain.build_request("anything").context.stashed == ()
    s = session(stash)
    for role, content in (("system", "x"), ("user", 3), ("user", "bad \ud800")):
        with pytest.raises(InputError):
            s.add_message(role, content)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        s.add_message("user", "x", name="t")
    for name in ("", "  ", 7, "x" * 5000):
        with pytest.raises(InputError):
            session(stash, stash_session=name)
    assert s.history == []


def test_a_request_embeds_its_message_once_for_items_and_stash(stash: StashStore) -> None:
    """The stash searches with the sentence vectors the request already has (same model family):
    no second model call, and the same segments as a retrieve that embeds the message itself."""
    shared = stash.embedder
    s = Session(make_agent(), ChunkStore(shared), stash=SessionStash(stash, settings=StashSettings(top_k=2)))
    s.stash(["the deploy key for the staging cluster is in vault", "lunch order: two pizzas"])
    s.build_request("warm up")  # the items are embedded on the first request
    message = "Where is the staging deploy key? It was in vault."
    own = [r.segment.id for r in stash.retrieve(message, session=s.stash_session, top_k=2)]
    before = shared.calls
    req = s.build_request(message)
    assert shared.calls == before + 1  # one call: the message's texts, for items and stash alike
    assert [e.segment_id for e in req.context.stashed] == own
    with pytest.raises(InputError, match="query_vectors must be float"):
        stash.retrieve(message, query_vectors=[[1.0, 0.0]])


def test_another_model_family_embeds_the_message_itself(stash: StashStore) -> None:
    other = FakeEmbedder()
    other.model_id = "other/2"  # type: ignore[misc]
    s = Session(make_agent(), ChunkStore(other), stash=SessionStash(stash, settings=StashSettings(top_k=2)))
    s.stash(["the deploy key for the staging cluster is in vault"])
    before = stash.embedder.calls  # type: ignore[attr-defined]
    s.build_request("Where is the staging deploy key?")
    assert stash.embedder.calls == before + 1  # type: ignore[attr-defined]


def test_the_retrieve_trace_ranks_every_candidate_and_agrees_with_the_results(stash: StashStore) -> None:
    ids = stash.stash(
        [
            "the staging deploy key lives in vault",
            "the production deploy key lives in vault too",
            "lunch: two pizzas and a salad",
            "the staging deploy key lives in vault",  # a duplicate: stored once
        ],
        session="t",
    ).segment_ids
    found, trace = stash.retrieve_traced("where is the staging deploy key", session="t", top_k=1)
    assert [r.segment.id for r in found] == [ids[0]]
    assert trace.top_k == 1 and trace.pool == len(trace.candidates) >= 2
    ranked = [c for c in trace.candidates if c.rank]
    assert [c.rank for c in ranked] == list(range(1, len(ranked) + 1))
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)
    assert trace.find(ids[0]).outcome == "retrieved" and trace.find(ids[1]).outcome == "below top_k"
    assert trace.find("nope") is None
    strict, trace2 = stash.retrieve_traced("where is the staging deploy key", session="t", min_similarity=0.99)
    assert strict == [] and {c.outcome for c in trace2.candidates} == {"below min_similarity"}


def test_explaining_a_stashed_segment_reads_the_trace_and_searches_once(stash: StashStore) -> None:
    s = session(stash, stash_settings=StashSettings(top_k=1, min_similarity=0.0))
    ids = s.stash(["the staging deploy key lives in vault", "the production deploy key lives in vault"]).segment_ids
    calls = []
    real = stash.retrieve_traced

    def counting(*a: object, **k: object):  # noqa: ANN202
        calls.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    stash.retrieve_traced = counting  # type: ignore[method-assign]
    try:
        why = s.explain("where is the staging deploy key", f"stash:{ids[1]}")
    finally:
        del stash.retrieve_traced
    assert calls == [1]  # the request's own retrieve: no wider second search
    assert not why.included and why.item_rank == 2 and "below the top_k 1" in why.reasons[0]
    # the same stash session, a stricter threshold
    strict = session(stash, stash_session=s.stash_session, stash_settings=StashSettings(top_k=1, min_similarity=0.95))
    low = strict.explain("where is the staging deploy key", f"stash:{ids[1]}")
    assert not low.included and "below min_similarity 0.95" in low.reasons[0]


def test_selection_goes_on_without_stashed_items_while_the_store_is_down(postgres_uri: str) -> None:
    """Issue 27 item 3: a stash outage never takes selection down; the request says why it has no
    stashed items, and they come back with the store."""
    from tests.helpers.stash_store import drop_connections as _drop_connections

    e = FakeEmbedder()
    e.model_id = "fake/1"  # type: ignore[misc]
    with StashStore.open(postgres_uri, e) as stash:
        s = session(stash, stash_settings=StashSettings(top_k=2, min_similarity=0.0))
        s.stash(["the staging deploy key is in vault"])
        _drop_connections(postgres_uri, allow=False)
        try:
            down = s.build_request("where is the staging deploy key")
        finally:
            _drop_connections(postgres_uri, allow=True)
        assert down.context.entries and not down.context.stashed
        assert any("stash is unavailable" in n for n in down.context.notes)
        back = s.build_request("where is the staging deploy key")
        assert [x.segment_id for x in back.context.stashed] and not any("unavailable" in n for n in back.context.notes)
