"""The context engine on small hand-built agents whose right answers are known (fake embedder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.choices import QueryPooling
from contextsieve.engine import Engine
from contextsieve.errors import InputError, SessionFileError, UnknownItemError
from contextsieve.retrieval.text import query_chunks, split_text
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.chunking import ChunkConfig, chunk_item
from contextsieve.selection.ranking import CutRule, RankRule, Selected, select_items
from contextsieve.session.requests import TokenCounts
from contextsieve.session.session import Session
from tests.helpers.agents import make_agent
from tests.helpers.fake_embedder import FakeEmbedder

A, M, G = IncludeMode.ALWAYS, IncludeMode.MANUAL, IncludeMode.AGENT


@pytest.fixture()
def agent() -> Agent:
    return make_agent()


@pytest.fixture()
def store() -> ChunkStore:
    return ChunkStore(FakeEmbedder())


# -- chunking ----------------------------------------------------------------------------------


def pick(
    q: np.ndarray,
    chunks: np.ndarray,
    owner: np.ndarray,
    allowed: np.ndarray,
    *,
    top_k: int,
    top_n: int,
    include_score: float,
    pooling: QueryPooling = "max",
    keyword: np.ndarray | None = None,
    keyword_weight: float = 0.0,
) -> list[Selected]:
    """:func:`select_items` with the reference's three settings named as the seeds name them."""
    rank = RankRule(top_k, pooling, keyword_weight)
    return select_items(q, chunks, owner, allowed, rank, CutRule(top_n, include_score), keyword=keyword)


def test_split_keeps_punctuation_and_packs_sentences() -> None:
    para = " ".join(f"Sentence number {i} is here!" for i in range(40))  # > 500 chars
    chunks = split_text(para + "\n\nShort one.\n  \n\nAnother?")
    assert all(len(c) <= 500 for c in chunks[:-2])
    assert chunks[-2:] == ["Short one.", "Another?"]
    assert all(c.endswith("!") for c in chunks[:-2])  # the reference lost these
    assert " ".join(chunks[:-2]) == para


def test_token_limit_is_never_exceeded() -> None:
    count = FakeEmbedder().count_tokens
    long_sentence = "word " * 700  # one sentence, no punctuation, far over 256 tokens
    chunks = split_text(long_sentence, ChunkConfig().text, count)
    assert len(chunks) == 3 and max(count(chunks)) <= 256
    assert " ".join(chunks).split() == long_sentence.split()


def test_item_chunks_header_first_and_prefixed() -> None:
    rule = Rule("refunds", "Refunds take ten days.\n\nShipping is free.", "refund policy")
    ch = chunk_item(rule)
    assert [c.text for c in ch] == ["refunds: refund policy", "Refunds take ten days.", "Shipping is free."]
    assert ch[1].embed_text == "refunds: refund policy\n\nRefunds take ten days."
    assert [c.index for c in ch] == [0, 1, 2]
    assert [c.text for c in chunk_item(Tool("fs", "read_file", "read a file"))] == ["read_file: read a file"]
    assert chunk_item(Rule("x", "body", ""))[0].text == "x"
    assert chunk_item(Rule("x", "body", ""), ChunkConfig(header_prefix=False))[1].embed_text == "body"


def test_query_chunks() -> None:
    assert query_chunks("Hi there. How are you?  Fine!") == ["Hi there.", "How are you?", "Fine!"]
    assert query_chunks("   ") == [] and query_chunks("x" * 800) == ["x" * 500]


# -- selection order ---------------------------------------------------------------------------


def test_selection_follows_the_reference_order() -> None:
    # 4 items; item 0 has two chunks. Scores against the single query: 0.9, 0.8 | 0.75 | 0.3 | -0.2
    q = np.array([[1.0, 0.0]], dtype=np.float32)

    def vec(s: float) -> list[float]:
        return [s, float(np.sqrt(1 - s * s))]

    chunks = np.array([vec(0.9), vec(0.8), vec(0.75), vec(0.3), vec(-0.2)], dtype=np.float32)
    owner = np.array([0, 0, 1, 2, 3])
    allowed = np.ones(4, dtype=bool)
    sel = pick(q, chunks, owner, allowed, top_k=20, top_n=2, include_score=0.7)
    assert [(s.item, round(s.score, 2)) for s in sel] == [(0, 0.9), (1, 0.75)]
    sel = pick(q, chunks, owner, allowed, top_k=20, top_n=3, include_score=0.7)
    assert [s.item for s in sel] == [0, 1, 2]  # filled to topN below the threshold; never <= 0
    sel = pick(q, chunks, owner, allowed, top_k=20, top_n=1, include_score=0.7)
    assert [s.item for s in sel] == [0, 1]  # every item >= includeScore is kept past topN
    sel = pick(q, chunks, owner, allowed, top_k=2, top_n=5, include_score=0.7)
    assert [s.item for s in sel] == [0]  # topK counts chunks: item 0 used both slots
    sel = pick(q, chunks, owner, allowed, top_k=20, top_n=5, include_score=0.75)
    assert 1 in [s.item for s in sel if s.score >= 0.75]  # inclusive threshold
    allowed[0] = False
    assert [s.item for s in pick(q, chunks, owner, allowed, top_k=20, top_n=5, include_score=0.7)] == [1, 2]
    assert pick(q[:0], chunks, owner, allowed, top_k=20, top_n=5, include_score=0.7) == []


def test_ties_break_by_collection_order() -> None:
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    chunks = np.array([[0.6, 0.8]] * 4, dtype=np.float32)
    owner = np.array([2, 0, 1, 3])  # chunk order = collection order; items by first chunk
    sel = pick(q, chunks, owner, np.ones(4, dtype=bool), top_k=20, top_n=3, include_score=0.9)
    assert [s.item for s in sel] == [2, 0, 1]


# -- agent and session -------------------------------------------------------------------------


def test_agent_lookups_and_modes(agent: Agent) -> None:
    assert [r.name for r in agent.rules] == ["legal", "tone", "escalate", "refunds"]  # priority, then name
    assert agent.include_mode(agent.get("tool:fs:read_file")) is G  # server default
    assert agent.include_mode(agent.get("tool:fs:write_file")) is M  # tool's own
    assert agent.include_mode(agent.get("tool:web:fetch")) is A  # no default: always
    with pytest.raises(UnknownItemError, match="rule:nope"):
        agent.get("rule:nope")
    with pytest.raises(InputError):
        Agent(rules=[Rule("a", "x"), Rule("a", "y")])
    with pytest.raises(InputError, match="priorityLevel"):
        Rule("a", "x", priority=1000)
    with pytest.raises(InputError, match="name"):
        Rule("bad name", "x")


def test_session_starts_with_always_items_in_order(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    assert s.items() == [
        (ItemKey(ItemKind.REFERENCE, "faq"), A),
        (ItemKey(ItemKind.RULE, "tone"), A),
        (ItemKey(ItemKind.TOOL, "fetch", "web"), A),
    ]


def test_removed_always_stays_removed_and_comes_back_manual(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    s.remove("rule:tone")
    assert ItemKey(ItemKind.RULE, "tone") not in dict(s.items())
    req = s.build_request("be polite please")
    assert ItemKey(ItemKind.RULE, "tone") not in req.context.keys()  # not an agent item, so not searched
    s.add("rule:tone")
    assert dict(s.items())[ItemKey(ItemKind.RULE, "tone")] is M
    with pytest.raises(UnknownItemError):
        s.add("rule:missing")


def test_mentions_add_manual_items_and_are_stripped(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    req = s.build_request("Hi   @rule:legal can you help @ref:pricing ?")
    assert req.message == "Hi can you help ?"
    modes = dict(s.items())
    assert modes[ItemKey(ItemKind.RULE, "legal")] is M and modes[ItemKey(ItemKind.REFERENCE, "pricing")] is M


def test_agent_items_are_for_this_request_only(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    req = s.build_request("how many days until my refunds arrive after the parcel arrives")
    ctx = {e.key: e for e in req.context.entries}
    refunds = ctx[ItemKey(ItemKind.RULE, "refunds")]
    assert refunds.mode is G and refunds.score is not None and refunds.score > 0
    assert ItemKey(ItemKind.RULE, "refunds") not in dict(s.items())
    assert all(e.mode is G for e in req.context.entries[3:])  # session items first, then agent items
    scores = [e.score for e in req.context.entries if e.mode is G]
    assert scores == sorted(scores, reverse=True)


def test_session_settings_override_only_the_session(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, context_top_n=1, context_include_score=1.0, tool_domain="shared")
    assert s.settings.context_top_n == 1 and agent.settings.context_top_n == 5
    req = s.build_request("refunds parcel outage escalate engineer prices")
    assert len([e for e in req.context.entries if e.mode is G]) == 1
    with pytest.raises(InputError, match="unknown settings"):
        Session(agent, store, context_topn=3)
    with pytest.raises(InputError, match="context_top_k"):
        AgentSettings(context_top_k=0)


def test_messages_in_reference_order_and_shapes(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    first = s.build_request("refunds after the parcel arrives")
    s.record_reply(first, "Ten days.")
    req = s.build_request("@rule:legal what does the team plan cost in dollars")
    roles = [m["role"] for m in req.messages]
    assert roles[0] == "system" and req.messages[1:3] == [
        {"role": "user", "content": "refunds after the parcel arrives"},
        {"role": "assistant", "content": "Ten days."},
    ]
    contents = [m["content"] for m in req.messages]
    ref_at = [i for i, c in enumerate(contents) if c.startswith("Reference: ")]
    rule_at = [i for i, c in enumerate(contents) if c.startswith("Rule: ")]
    assert (
        ref_at and rule_at and max(ref_at) < min(rule_at) and contents[-1] == "what does the team plan cost in dollars"
    )
    assert "Reference: Passwords are reset from the security page." in contents
    names = [t["name"] for t in req.tools]
    assert "web_fetch" in names
    anth = req.anthropic()
    assert anth["system"] == "You are a support agent." and all(m["role"] != "system" for m in anth["messages"])
    oa = req.openai()
    assert oa["tools"][0]["type"] == "function" and oa["messages"][0]["role"] == "system"


def test_autonomous_sessions_drop_tools_that_need_approval(store: ChunkStore) -> None:
    agent = make_agent()
    agent.autonomous = True
    agent.servers["web"] = McpServer("web", default_permission_required=False)
    s = Session(agent, store)
    names = [t["name"] for t in s.build_request("fetch the url page").tools]
    assert names == ["web_fetch"]  # fs tools need approval (default), web's do not
    s.update_settings(tool_permission="always")
    assert s.build_request("fetch the url page").tools == []


# -- the chunk store ---------------------------------------------------------------------------


def test_store_embeds_in_one_batch_and_only_what_changed(agent: Agent) -> None:
    emb = FakeEmbedder()
    store = ChunkStore(emb)
    n = store.sync(agent.all_items())
    assert n == 9 and emb.calls == 1  # every item, one call
    assert store.sync(agent.all_items()) == 0 and emb.calls == 1
    agent.upsert(Rule("refunds", "Refunds take five days now.", "refund policy", 500, G))  # a hand edit looks the same
    assert store.sync(agent.all_items()) == 1 and emb.calls == 2
    agent.delete("reference:pricing")
    store.sync(agent.all_items())
    with pytest.raises(KeyError):
        store.chunks_of(ItemKey(ItemKind.REFERENCE, "pricing"))


def test_empty_agent_and_empty_message(store: ChunkStore) -> None:
    s = Session(Agent(), store)
    req = s.build_request("")
    assert req.context.entries == () and req.messages[-1] == {"role": "user", "content": ""}
    with pytest.raises(InputError):
        s.build_request(None)  # type: ignore[arg-type]


# -- request context views and persistence -----------------------------------------------------


def test_summary_grouped_view_and_json(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, tool_domain="shared", context_min_ratio=None, context_min_score=None)
    s.add("rule:legal")
    req = s.build_request("outage escalate engineer refunds parcel")
    assert (
        req.context.summary()
        == "4 rules (2 agent, 1 always, 1 manual), 2 references (1 agent, 1 always), 2 tools (1 agent, 1 always)"
    )
    from contextsieve.selection.context import ContextEntry, RequestContext

    hand = RequestContext(
        (
            ContextEntry(ItemKey(ItemKind.TOOL, "a", "s"), M),
            ContextEntry(ItemKey(ItemKind.TOOL, "b", "s"), M),
            ContextEntry(ItemKey(ItemKind.REFERENCE, "r"), A),
        )
    )
    assert hand.summary() == "0 rules, 1 reference (all always), 2 tools (all manual)"
    text = req.context.grouped_text()
    assert (
        text.splitlines()[0] == "Context Used:" and "  • tone (priority 100) [Always]" in text and "[Agent - 0." in text
    )
    lines = text.splitlines()
    assert lines.index("  • tone (priority 100) [Always]") < lines.index("  • legal (priority 10) [Manual]")
    back = type(req.context).from_dict(json.loads(req.context.to_json()))
    assert back == req.context


def test_rebuilt_request_shows_later_edits(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store)
    req = s.build_request("hello")
    agent.upsert(Reference("faq", "Passwords are reset by support.", "common questions", 300, A))
    again = s.request_for(req.context, req.message)
    assert "Reference: Passwords are reset by support." in [m["content"] for m in again.messages]


def test_session_save_and_load(tmp_path, agent: Agent, store: ChunkStore) -> None:  # noqa: ANN001
    s = Session(agent, store, context_top_n=2)
    s.remove("rule:tone")
    req = s.build_request("refunds after the parcel arrives")
    s.record_reply(req, "ok")
    p = tmp_path / "s.json"
    s.save(p)
    back = Session.load(p, agent, store)
    assert back.items() == s.items() and back.settings == s.settings
    assert back.history[-1].context == req.context
    p.write_text("{broken")
    with pytest.raises(SessionFileError, match="cannot load session"):
        Session.load(p, agent, store)


# -- presets and token budget ------------------------------------------------------------------


def test_presets_and_explicit_settings_win(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, preset="aggressive")
    assert (s.settings.context_top_k, s.settings.context_top_n, s.settings.context_include_score) == (10, 3, 0.8)
    s = Session(agent, store, preset="conservative", context_top_n=2)
    assert (s.settings.context_top_k, s.settings.context_top_n) == (40, 2)
    s.update_settings(preset="normal")
    assert s.settings.context_top_n == 5
    with pytest.raises(InputError, match="unknown preset"):
        Session(agent, store, preset="extreme")


def words(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def test_token_budget_drops_lowest_scored_agent_items_first(agent: Agent, store: ChunkStore) -> None:
    free = Session(agent, store, token_counter=words).build_request(
        "refunds parcel days outage escalate engineer prices dollars"
    )
    agent_entries = [e for e in free.context.entries if e.mode is G]
    assert len(agent_entries) >= 3
    costs = {e.key: TokenCounts(words, store).item(agent, e.key) for e in free.context.entries}
    full = sum(costs.values())
    lowest = agent_entries[-1]
    s = Session(agent, store, token_counter=words, token_budget=full - 1)
    req = s.build_request("refunds parcel days outage escalate engineer prices dollars")
    assert [d.entry.key for d in req.context.dropped] == [lowest.key]
    assert req.context.tokens == full - costs[lowest.key] <= full - 1
    assert lowest.key not in req.context.keys() and "Dropped: " in req.context.grouped_text()
    assert all(e.key in req.context.keys() for e in free.context.entries if e.mode is not G)


def test_token_budget_never_cuts_always_or_manual_and_says_so(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, token_counter=words, token_budget=3)
    s.add("rule:legal")
    req = s.build_request("refunds parcel outage")
    assert all(e.mode is not G for e in req.context.entries)  # every agent item dropped
    assert {str(k) for k in req.context.keys()} >= {"rule:tone", "reference:faq", "rule:legal", "tool:web:fetch"}
    assert req.context.notes and "never cut" in req.context.notes[0]
    back = type(req.context).from_dict(json.loads(req.context.to_json()))
    assert back == req.context
    with pytest.raises(InputError, match="token_budget"):
        Session(agent, store, token_budget=-5)


# -- minimum representation and expansion ------------------------------------------------------


def rep_agent() -> Agent:
    return Agent(
        rules=[
            Rule("a1", "alpha gamma", include=G),
            Rule("a2", "alpha gamma delta", include=G),
            Rule("a3", "alpha delta", include=G),
            Rule("b", "beta epsilon zeta eta", include=G),
            Rule("c", "omega sigma tau", include=G),
        ]
    )


def test_min_representation_promotes_the_missing_sentence(store: ChunkStore) -> None:
    q = "alpha gamma. beta epsilon. omega."
    base = Session(rep_agent(), store, context_top_n=2, context_include_score=0.99, min_representation_cap=0)
    assert [e.key.name for e in base.build_request(q).context.entries] == ["a1", "a2"]  # both from sentence 0
    default = Session(rep_agent(), store, context_top_n=2, context_include_score=0.99).build_request(q).context
    # by default: the best item of the first sentence without one, when its evidence is not weak
    assert [(e.key.name, e.query_chunk) for e in default.entries if e.via == "min-representation"] == [("b", 1)]
    s = Session(
        rep_agent(),
        store,
        context_top_n=2,
        context_include_score=0.99,
        min_representation_floor=0.2,
        min_representation_cap=1,
    )
    ctx = s.build_request(q).context
    promoted = [e for e in ctx.entries if e.via == "min-representation"]
    assert [(e.key.name, e.query_chunk) for e in promoted] == [("b", 1)]  # the cap stops sentence 2's item
    both = (
        Session(
            rep_agent(),
            store,
            context_top_n=2,
            context_include_score=0.99,
            min_representation_floor=0.2,
            min_representation_cap=5,
        )
        .build_request(q)
        .context
    )
    assert [(e.key.name, e.query_chunk) for e in both.entries if e.via == "min-representation"] == [("b", 1), ("c", 2)]
    strict = (
        Session(rep_agent(), store, context_top_n=2, context_include_score=0.99, min_representation_floor=0.95)
        .build_request(q)
        .context
    )
    assert not [e for e in strict.entries if e.via == "min-representation"]  # below the floor: nothing


def exp_agent(fetch_mode: IncludeMode = G) -> Agent:
    return Agent(
        rules=[
            Rule("auth", "authenticate authenticate then fetch the token endpoint", include=G),
            Rule("paint", "paint the house blue", include=G),
        ],
        servers={"web": McpServer("web")},
        tools=[
            Tool("web", "fetch_url", "fetch token endpoint url", include=fetch_mode),
            Tool("web", "colors", "list paint colors", include=G),
        ],
    )


def test_expansion_pulls_related_items_and_records_who(store: ChunkStore) -> None:
    q = "authenticate"
    off = (
        Session(exp_agent(), store, context_top_n=1, context_include_score=0.99, tool_domain="shared")
        .build_request(q)
        .context
    )
    assert [e.key.name for e in off.entries] == ["auth"]
    s = Session(
        exp_agent(),
        store,
        context_top_n=1,
        context_include_score=0.99,
        tool_domain="shared",
        expansion_depth=1,
        expansion_threshold=0.3,
        expansion_top_n=3,
    )
    ctx = s.build_request(q).context
    exp = [e for e in ctx.entries if e.mode is IncludeMode.EXPANSION]
    assert [(e.key.name, e.pulled_by.name) for e in exp] == [("fetch_url", "auth")]
    assert exp[0].score >= 0.3 and "Expansion - " in ctx.grouped_text() and "via auth" in ctx.grouped_text()
    assert "1 tool (all expansion)" in ctx.summary()
    assert type(ctx).from_dict(json.loads(ctx.to_json())) == ctx
    assert ItemKey(ItemKind.TOOL, "fetch_url", "web") not in dict(s.items())  # for this request only


def test_expansion_never_readds_a_session_item(store: ChunkStore) -> None:
    s = Session(
        exp_agent(fetch_mode=A),
        store,
        context_top_n=1,
        context_include_score=0.99,
        expansion_depth=2,
        expansion_threshold=0.0,
        expansion_top_n=5,
    )
    ctx = s.build_request("authenticate").context
    keys = [e.key for e in ctx.entries]
    assert keys.count(ItemKey(ItemKind.TOOL, "fetch_url", "web")) == 1
    assert all(e.mode is not IncludeMode.EXPANSION or e.key.name != "fetch_url" for e in ctx.entries)


def test_expansion_is_not_an_item_setting() -> None:
    with pytest.raises(InputError, match="not expansion"):
        Rule("x", "y", include=IncludeMode.EXPANSION)


# -- why / why not -----------------------------------------------------------------------------


def test_explanations_agree_with_the_selection(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, context_top_n=2, context_include_score=0.99)
    msg = "how many days until refunds arrive after the parcel arrives? who escalates outages"
    req = s.build_request(msg)
    before = s.items()
    chosen = {e.key for e in req.context.entries}
    for item in agent.all_items():
        ex = s.explain(msg, item.key)
        assert ex.included == (item.key in chosen), str(ex)
        assert ex.reasons, str(ex)
    assert s.items() == before  # explaining changed nothing
    tone = s.explain(msg, "rule:tone")
    assert tone.mode == "always" and "session" in tone.reasons[0]
    legal = s.explain(msg, "rule:legal")
    assert not legal.included and "include mode is manual" in legal.reasons[0]
    top = next(e for e in req.context.entries if e.mode is G)
    ex = s.explain(msg, top.key)
    assert ex.via == "query" and ex.item_rank == 1 and abs(ex.best_score - top.score) < 1e-5 and len(ex.scores) == 2
    left_out = [it for it in agent.all_items() if agent.include_mode(it) is G and it.key not in chosen]
    ex = s.explain(msg, left_out[0].key)
    assert not ex.included and any("top-N" in r or "top-K" in r or "not above 0" in r for r in ex.reasons), str(ex)
    tight = Session(agent, store, token_counter=words, token_budget=3)
    dropped = tight.build_request(msg).context.dropped
    assert dropped and "dropped: token budget" in " ".join(tight.explain(msg, dropped[0].entry.key).reasons)


def test_mean_pooling_and_keyword_weight_change_the_scores_as_specified(agent: Agent, store: ChunkStore) -> None:
    q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    chunks = np.array([[0.9, 0.1], [0.5, 0.5]], dtype=np.float32)
    owner = np.array([0, 1])
    ok = np.ones(2, dtype=bool)
    mx = pick(q, chunks, owner, ok, top_k=5, top_n=2, include_score=2.0)
    mean = pick(q, chunks, owner, ok, top_k=5, top_n=2, include_score=2.0, pooling="mean")
    assert [s.item for s in mx] == [0, 1] and [round(s.score, 3) for s in mean] == [0.5, 0.5]
    kw = pick(
        q, chunks, owner, ok, top_k=5, top_n=2, include_score=2.0, keyword=np.array([0.0, 1.0]), keyword_weight=0.5
    )
    assert [(s.item, round(s.score, 3), round(s.sim, 3)) for s in kw] == [(1, 1.0, 0.5), (0, 0.9, 0.9)]
    # the include score is compared with the similarity, not with the keyword-boosted ranking score
    thr = pick(
        q, chunks, owner, ok, top_k=5, top_n=1, include_score=0.8, keyword=np.array([0.0, 1.0]), keyword_weight=0.5
    )
    assert [s.item for s in thr] == [0]
    s = Session(agent, store, keyword_weight=0.5, query_pooling="mean")
    ctx = s.build_request("refunds parcel arrives").context
    assert any(e.key.name == "refunds" for e in ctx.entries)
    with pytest.raises(InputError, match="query_pooling"):
        Session(agent, store, query_pooling="median")


def test_expand_from_a_tool_result_proposes_items_without_changing_the_session(agent: Agent, store: ChunkStore) -> None:
    s = Session(agent, store, context_top_n=1, context_include_score=0.99)
    before = s.items()
    result = (
        "ERROR: outage detected on checkout. The on-call engineer must be paged.\n\n"
        "Escalate outages to the on-call engineer now."
    )
    ctx = s.expand_from(result)
    assert [e.key.name for e in ctx.entries] == ["escalate"] and ctx.entries[0].via == "tool-result"
    assert ctx.settings["source"] == "tool-result"
    assert ctx.query_chunks == (
        "ERROR: outage detected on checkout.",
        "The on-call engineer must be paged.",
        "Escalate outages to the on-call engineer now.",
    )
    assert len(s.expand_from(result, max_chunks=1).query_chunks) == 1
    assert s.items() == before
    assert s.expand_from("").entries == ()
    with pytest.raises(InputError, match="max_chunks"):
        s.expand_from(result, max_chunks=0)
    with pytest.raises(InputError):
        s.expand_from(42)  # type: ignore[arg-type]


def test_tools_as_their_own_domain(store: ChunkStore) -> None:
    agent = Agent(
        rules=[
            Rule("r1", "fetch the web page url now", include=G),
            Rule("r2", "fetch web page url carefully", include=G),
        ],
        servers={"web": McpServer("web", default_include=G)},
        tools=[Tool("web", "fetch", "fetch a url"), Tool("web", "paint", "paint colors")],
    )
    q = "fetch the web page url"
    shared = (
        Session(agent, store, context_top_n=1, context_include_score=0.99, tool_domain="shared")
        .build_request(q)
        .context
    )
    assert [e.key.kind for e in shared.entries] == [ItemKind.RULE]  # the tool is crowded out
    own = Session(agent, store, context_top_n=1, tool_top_n=1, context_include_score=0.99).build_request(q).context
    assert sorted(e.key.kind.value for e in own.entries) == ["rule", "tool"]  # the default: tools their own domain
    split = (
        Session(agent, store, context_top_n=1, context_include_score=0.99, tool_settings={"context_top_n": 1})
        .build_request(q)
        .context
    )
    assert sorted(e.key.kind.value for e in split.entries) == ["rule", "tool"]
    assert [e.key.name for e in split.entries if e.key.kind is ItemKind.TOOL] == ["fetch"]
    scores = [e.score for e in split.entries]
    assert scores == sorted(scores, reverse=True)
    with pytest.raises(InputError, match="tool_settings: setting context_top_n"):
        Session(agent, store, tool_settings={"context_top_n": 0})
    with pytest.raises(InputError, match="may set only"):
        Session(agent, store, tool_settings={"temperature": 0.1})
    # a domain's settings apply to it alone: the tools' include score 0 keeps every tool scoring above 0
    wide = (
        Session(agent, store, context_top_n=1, context_include_score=0.99, tool_settings={"context_include_score": 0.0})
        .build_request(q)
        .context
    )
    tool_entries = [e for e in wide.entries if e.key.kind is ItemKind.TOOL]
    assert tool_entries and all(e.score > 0 for e in tool_entries) and tool_entries[0].key.name == "fetch"
    assert [e.key.kind for e in wide.entries].count(ItemKind.RULE) == 1
    exp = Session(agent, store, context_top_n=1, context_include_score=0.99, tool_settings={"context_top_n": 1})
    explained = exp.explain(q, "tool:web:fetch")
    assert explained.included and explained.via == "query" and "within top-N 1" in " ".join(explained.reasons)


def test_index_with_progress_through_a_custom_embedder(capsys) -> None:  # noqa: ANN001
    """Failed before the fix: the store passed show_progress to an embedder whose protocol had none."""
    from contextsieve.retrieval.embedding import TextEmbedder

    emb = FakeEmbedder()
    assert isinstance(emb, TextEmbedder)
    engine = Engine(make_agent(), embedder=emb)
    report = engine.index(show_progress=True)
    assert report.embedded == emb.texts > 0 and report.items == len(list(engine.agent.all_items()))


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"settings": {}, "items": [{"key": "rule:gone", "mode": "manual"}], "history": []}',
        '{"settings": {"context_top_k": "x"}, "items": [], "history": []}',
        "[" * 100_000,
    ],
)
def test_bad_session_files_raise_session_file_error(tmp_path, text) -> None:  # noqa: ANN001
    """Failed before: AttributeError / RecursionError escaped, or an unknown item loaded."""
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(SessionFileError, match="cannot load session"):
        Engine(make_agent(), embedder=FakeEmbedder()).load_session(p)


def test_a_request_with_nothing_to_search_embeds_nothing() -> None:
    """As the reference: no candidate items (or no query text) means no embedding, so no model loads."""
    agent = make_agent()
    emb = FakeEmbedder()
    engine = Engine(agent, embedder=emb)
    req = engine.select("   ")
    assert emb.calls == 0 and req.trace is not None and req.trace.domains == []
    for item in list(agent.all_items()):
        if agent.include_mode(item) is IncludeMode.AGENT:
            agent.delete(item.key)
    assert engine.select("how do refunds work").context.entries and emb.calls == 0


@pytest.mark.parametrize("where", ["build_request", "explain", "expand_from", "rule", "tool"])
def test_lone_surrogates_are_a_typed_input_error_everywhere_text_enters(where: str) -> None:
    """Failed before: a raw TypeError from the tokenizer (issue 10 item 3). Nothing is changed."""
    bad = "abc \ud800 def"
    engine = Engine(make_agent(), embedder=FakeEmbedder())
    session = engine.session()
    before = session.items()
    calls = {
        "build_request": lambda: session.build_request(bad),
        "explain": lambda: session.explain(bad, "rule:refunds"),
        "expand_from": lambda: session.expand_from(bad),
        "rule": lambda: Rule("r9", bad),
        "tool": lambda: Tool("s", "t", bad),
    }
    with pytest.raises(InputError, match="lone surrogate"):
        calls[where]()
    assert session.items() == before and session.history == []


def test_a_huge_message_is_searched_with_at_most_max_query_chunks() -> None:
    """Failed before: a 1 MB message of short sentences meant ~7,000 query chunks (issue 10 item 7)."""
    emb = FakeEmbedder()
    session = Engine(make_agent(), embedder=emb).session()
    message = "Refunds take days. " * 50_000 + "Where is my parcel?"
    emb.texts = 0
    req = session.build_request(message)
    assert len(req.context.query_chunks) == 32 and req.context.query_chunks[-1] == "Where is my parcel?"
    assert emb.texts <= 32 + 20  # the query sentences (and the items, embedded once)
    assert any("50001 sentences" in n and "max_query_chunks 32" in n for n in req.context.notes)
    small = Engine(make_agent(), embedder=FakeEmbedder()).session(max_query_chunks=3).build_request("A. B. C. D. E.")
    assert small.context.query_chunks == ("A.", "B.", "E.")
