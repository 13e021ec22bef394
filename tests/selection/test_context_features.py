"""Contextual embeddings, the relationship graph and per-domain settings on small agents (fake embedder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.errors import InputError, SummarizerError
from contextsieve.retrieval.bm25 import tokenize
from contextsieve.retrieval.text import heading_sections
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.chunking import ChunkConfig, chunk_item, split_identifier
from contextsieve.selection.expansion import RelationGraph, graph_expand
from contextsieve.session.session import Session
from tests.helpers.fake_embedder import FakeEmbedder

A, G = IncludeMode.ALWAYS, IncludeMode.AGENT

DOC = """Intro line.

# Setup

Install the package.

## Linux

Use apt.

```
# not a heading
```

# Usage

Run it.
"""


@pytest.fixture()
def store() -> ChunkStore:
    return ChunkStore(FakeEmbedder())


def words(texts: list[str]) -> list[int]:
    return [len(t.split()) + 2 for t in texts]


# -- contextual embeddings -------------------------------------------------------------------------


def test_heading_sections_nest_and_skip_fenced_code() -> None:
    got = heading_sections(DOC)
    assert got == [
        ((), "Intro line."),
        (("Setup",), "Install the package."),
        (("Setup", "Linux"), "Use apt.\n\n```\n# not a heading\n```"),
        (("Usage",), "Run it."),
    ]
    assert heading_sections("plain text") == [((), "plain text")]
    assert heading_sections("# Only a heading") == []
    assert heading_sections("") == []


def test_heading_paths_go_into_the_embedding_text_only() -> None:
    ref = Reference("guide", DOC, "the install guide")
    chunks = chunk_item(ref)
    assert chunks[0].text == chunks[0].embed_text == "guide: the install guide"
    by_text = {c.text: c.embed_text for c in chunks[1:]}
    assert (
        by_text["Use apt.\n\n```\n# not a heading\n```".split("\n\n")[0]]
        == "guide: the install guide\nSetup > Linux\n\nUse apt."
    )
    assert by_text["Install the package."] == "guide: the install guide\nSetup\n\nInstall the package."
    assert by_text["Intro line."] == "guide: the install guide\n\nIntro line."
    assert not any(c.text.startswith("#") for c in chunks)  # heading lines are context, not chunk text
    assert [c.index for c in chunks] == list(range(len(chunks)))
    plain = Reference("p", "no headings here.\n\nSecond paragraph.", "d")
    assert chunk_item(plain) == chunk_item(plain, ChunkConfig(heading_paths=False))


def test_tool_context_and_identifier_splitting() -> None:
    tool = Tool("github", "searchIssues", "Search issues and pull requests")
    assert split_identifier("searchIssues") == "search Issues"
    assert split_identifier("get_file_contents") == "get file contents"
    assert split_identifier("HTTPServer-v2") == "HTTP Server v2"
    assert split_identifier("__") == "__"
    [c] = chunk_item(tool)
    assert c.text == "searchIssues: Search issues and pull requests"  # shown as it is
    assert c.embed_text == "github\n\nsearchIssues: Search issues and pull requests"
    [c] = chunk_item(tool, ChunkConfig(split_identifiers=True))
    assert c.text == "searchIssues: Search issues and pull requests"
    assert c.embed_text == "github\n\nsearch Issues: Search issues and pull requests"
    [c] = chunk_item(tool, ChunkConfig(tool_context="none"))
    assert c.embed_text == c.text  # the reference system's tool text
    [c] = chunk_item(tool, ChunkConfig(tool_context="server+description"), server_description="GitHub: code and issues")
    assert c.embed_text.startswith("github: GitHub: code and issues\n\nsearchIssues")
    [c] = chunk_item(tool, ChunkConfig(tool_context="server+description"))  # no description: the name alone
    assert c.embed_text.startswith("github\n\n")
    with pytest.raises(InputError, match="tool_context"):
        ChunkConfig(tool_context="everything")
    with pytest.raises(InputError, match="max_summary_tokens"):
        ChunkConfig(max_summary_tokens=0)


def test_item_summaries_prefix_the_embedding_never_the_text(store: ChunkStore) -> None:
    rule = Rule(
        "jwt", "It expires after 24 hours.", "tokens", summary="JWT token expiry in the auth service", include=G
    )
    chunks = chunk_item(rule)
    assert chunks[1].text == "It expires after 24 hours."
    assert chunks[1].embed_text == "jwt: tokens\nJWT token expiry in the auth service\n\nIt expires after 24 hours."
    [t] = chunk_item(Tool("auth", "refresh", "Refresh", summary="renews an expired JWT"))
    assert t.embed_text == "auth\nrenews an expired JWT\n\nrefresh: Refresh" and t.text == "refresh: Refresh"
    agent = Agent(rules=[rule])
    req = Session(agent, store, context_include_score=0.0).build_request("when does the jwt token expire")
    assert [e.key.name for e in req.context.entries] == ["jwt"]
    assert all("auth service" not in m["content"] for m in req.messages)  # the summary is never sent


def test_summarizer_adds_chunk_context_with_clean_fallback() -> None:
    calls: list[tuple[str, list[str]]] = []

    def summarize(item, texts):  # noqa: ANN001, ANN202
        calls.append((item.name, list(texts)))
        return [f"about {item.name} part {i}" if i % 2 == 0 else None for i in range(len(texts))]

    ref = Reference("doc", "First part.\n\nSecond part.\n\nThird part.", "a doc")
    emb = FakeEmbedder()
    store = ChunkStore(emb, summarizer=summarize)
    store.sync([ref])
    got = [c.embed_text for c in store.chunks_of(ref.key).chunks]
    assert got[0] == "doc: a doc"  # the header chunk is its own context
    assert got[1] == "doc: a doc\nabout doc part 0\n\nFirst part."
    assert got[2] == "doc: a doc\n\nSecond part."  # None: the context the item already has
    assert got[3] == "doc: a doc\nabout doc part 2\n\nThird part."
    assert calls == [("doc", ["First part.", "Second part.", "Third part."])]
    store.sync([ref])
    store.sync([Reference("doc", "First part.\n\nSecond part.\n\nThird part.", "a doc")])  # same content
    assert len(calls) == 1  # called again only when the item changes

    def broken(item, texts):  # noqa: ANN001, ANN202
        raise RuntimeError("LLM down")

    with pytest.raises(SummarizerError, match="LLM down") as err:
        ChunkStore(emb, summarizer=broken).sync([ref])
    assert isinstance(err.value.__cause__, RuntimeError)
    with pytest.raises(SummarizerError, match="one str or None per chunk"):
        ChunkStore(emb, summarizer=lambda item, texts: ["x"]).sync([ref])
    with pytest.raises(SummarizerError):
        ChunkStore(emb, summarizer=lambda item, texts: [1] * len(texts)).sync([ref])


def test_context_never_breaks_the_token_window() -> None:
    long_summary = " ".join(["context"] * 500)
    text = "\n\n".join(" ".join(f"w{i}x{j}" for j in range(300)) for i in range(3))
    ref = Reference("big", f"# {' '.join(['head'] * 200)}\n\n{text}", " ".join(["desc"] * 200), summary=long_summary)
    cfg = ChunkConfig(max_tokens=128)
    chunks = chunk_item(ref, cfg, words, summarizer=lambda item, texts: [long_summary] * len(texts))
    assert len(chunks) > 3
    assert max(words([c.embed_text for c in chunks])) <= 128
    tool = Tool("s" * 300, "t", " ".join(["word"] * 400), summary=long_summary)
    assert max(words([c.embed_text for c in chunk_item(tool, cfg, words)])) <= 128


def test_server_description_change_reembeds_only_that_servers_tools() -> None:
    emb = FakeEmbedder()
    store = ChunkStore(emb, ChunkConfig(tool_context="server+description"))
    items = [Tool("a", "x", "one"), Tool("b", "y", "two"), Rule("r", "text")]
    assert store.sync(items, server_descriptions={"a": "first", "b": "second"}) == 3
    assert store.sync(items, server_descriptions={"a": "first", "b": "second"}) == 0
    assert store.sync(items, server_descriptions={"a": "changed", "b": "second"}) == 1
    assert store.chunks_of(ItemKey(ItemKind.TOOL, "x", "a")).chunks[0].embed_text.startswith("a: changed")


def test_agent_file_round_trips_summaries_and_server_descriptions(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "agent.yaml"
    path.write_text(
        "name: a\nrules:\n  - name: r\n    text: body\n    summary: what r is about\n"
        "mcpServers:\n  gh:\n    type: stdio\n    command: gh\n    description: GitHub issues\n"
        "    tools:\n      search:\n        description: Search\n        summary: finds issues\n",
        encoding="utf-8",
    )
    agent = load_agent(path)
    assert agent.rules[0].summary == "what r is about"
    assert agent.servers["gh"].description == "GitHub issues"
    assert agent.tools[0].summary == "finds issues"
    save_agent(agent, tmp_path / "again.yaml")
    again = load_agent(tmp_path / "again.yaml")
    assert again.rules[0].summary == "what r is about" and again.servers["gh"].description == "GitHub issues"
    assert again.tools[0].summary == "finds issues"
    saved = (tmp_path / "again.yaml").read_text()
    assert saved.count("summary:") == 2  # the rule's and the tool override's, nothing added
    save_agent(Agent(name="plain", rules=[Rule("r", "body")]), tmp_path / "plain.yaml")
    assert "summary" not in (tmp_path / "plain.yaml").read_text()  # empty summaries are not written


def test_keyword_tokens_split_identifiers() -> None:
    assert tokenize("searchIssues") == tokenize("search_issues") == ["search", "issue"]
    assert tokenize("HTTPServer") == ["http", "server"]


# -- relationship graph ----------------------------------------------------------------------------


def _oracle_mean_sims(chunks: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    means = np.stack([chunks[owner == i].astype(np.float64).mean(0) for i in range(n)])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    return means @ means.T


def test_relation_graph_matches_a_numpy_oracle() -> None:
    rng = np.random.default_rng(7)
    n, owner = 12, np.repeat(np.arange(12), rng.integers(1, 4, 12))
    chunks = rng.standard_normal((owner.size, 16)).astype(np.float32)
    chunks[:, 0] += 2.0  # shared direction: plenty of pairs above the floor
    chunks /= np.linalg.norm(chunks, axis=1, keepdims=True)
    sims = _oracle_mean_sims(chunks, owner, n)
    graph = RelationGraph(chunks, owner, n, pooling="mean_embedding", floor=0.3)
    for i in range(n):
        nb, s = graph.neighbours(i)
        want = [j for j in range(n) if j != i and sims[i, j] >= 0.3]
        assert nb.tolist() == want
        np.testing.assert_allclose(s, sims[i, want], atol=1e-5)
    seeds, cand = [0, 3], np.ones(n, dtype=bool)
    cand[seeds] = False
    cand[5] = False
    best, src = graph.best(seeds, cand)
    for j in range(n):
        vals = [sims[s, j] for s in seeds if sims[s, j] >= 0.3]
        if not cand[j] or not vals:
            assert best[j] == -np.inf
        else:
            assert (
                best[j] == pytest.approx(max(vals), abs=1e-5)
                and src[j] == seeds[int(np.argmax([sims[s, j] if sims[s, j] >= 0.3 else -9 for s in seeds]))]
            )
    first = np.searchsorted(owner, np.arange(n))
    got = graph_expand(graph, first, seeds, cand, threshold=0.5, top_n=3)
    want = sorted((j for j in range(n) if cand[j] and best[j] >= 0.5), key=lambda j: (-best[j], j))[:3]
    assert [x.item for x in got] == want
    assert all(x.chunk == first[x.item] for x in got)
    # hybrid: another source's higher score wins, with its chunk and seed
    also = (np.where(np.arange(n) == 11, 0.99, -np.inf).astype(np.float32), np.arange(n) * 0 + 7, np.full(n, 3))
    mixed = graph_expand(graph, first, seeds, cand, threshold=0.5, top_n=1, also=also)
    assert [(x.item, x.score, x.chunk, x.source_item) for x in mixed] == [(11, pytest.approx(0.99), 7, 3)]
    assert graph_expand(graph, first, [], cand, threshold=0.0, top_n=3) == []


def graph_agent(fetch_mode: IncludeMode = G) -> Agent:
    return Agent(
        rules=[
            Rule("auth", "authenticate authenticate then fetch the token endpoint", include=G),
            Rule("paint", "paint the house blue", include=G),
        ],
        servers={"web": McpServer("web")},
        tools=[
            Tool("web", "fetch_url", "fetch the token endpoint", include=fetch_mode),
            Tool("web", "colors", "list paint colors", include=G),
        ],
    )


@pytest.mark.parametrize("source", ["graph", "hybrid"])
def test_graph_expansion_in_a_session(source: str) -> None:
    store = ChunkStore(FakeEmbedder(), ChunkConfig(tool_context="none"))
    base = {"context_top_n": 1, "context_include_score": 0.99, "keyword_weight": 0.0, "tool_domain": "shared"}
    s = Session(
        graph_agent(),
        store,
        **base,
        expansion_depth=1,
        expansion_threshold=0.3,
        expansion_top_n=3,
        expansion_source=source,
    )
    ctx = s.build_request("authenticate").context
    assert [e.key.name for e in ctx.entries if e.via == "query"] == ["auth"]
    exp = [e for e in ctx.entries if e.mode is IncludeMode.EXPANSION]
    assert exp and exp[0].key.name == "fetch_url" and exp[0].pulled_by.name == "auth" and exp[0].score >= 0.3
    assert "colors" not in [e.key.name for e in exp]  # unrelated to auth
    # never re-adds a session item, however low the threshold
    s2 = Session(
        graph_agent(fetch_mode=A),
        store,
        **base,
        expansion_depth=2,
        expansion_threshold=-1.0,
        expansion_top_n=5,
        expansion_source=source,
    )
    keys = [e.key for e in s2.build_request("authenticate").context.entries]
    assert keys.count(ItemKey(ItemKind.TOOL, "fetch_url", "web")) == 1 and len(keys) == len(set(keys))
    with pytest.raises(InputError, match="expansion_source"):
        Session(graph_agent(), store, expansion_source="magic")


def test_graph_is_built_once_and_rebuilt_after_a_change() -> None:
    store = ChunkStore(FakeEmbedder())
    agent = graph_agent()
    s = Session(agent, store, expansion_depth=1, expansion_source="graph")
    s.build_request("authenticate")
    order = [it.key for it in agent.all_items()]
    g1 = store.relation_graph(order, "mean_embedding", 0.5)
    s.build_request("paint")
    assert store.relation_graph(order, "mean_embedding", 0.5) is g1
    agent.upsert(Rule("paint", "paint the fence red", include=G))
    s.build_request("paint")
    assert store.relation_graph(order, "mean_embedding", 0.5) is not g1


# -- per-domain settings ---------------------------------------------------------------------------


def test_per_domain_keyword_weight_and_save_load(tmp_path) -> None:  # noqa: ANN001
    store = ChunkStore(FakeEmbedder())
    agent = graph_agent()
    s = Session(agent, store, tool_settings={"keyword_weight": 0.0, "expansion_depth": 1})
    assert s.settings.for_tools().keyword_weight == 0.0 and s.settings.keyword_weight == 0.3
    assert s.settings.for_tools().expansion_depth == 1 and s.settings.expansion_depth == 0
    s.build_request("authenticate")
    s.save(tmp_path / "s.json")
    back = Session.load(tmp_path / "s.json", agent, store)
    assert dict(back.settings.tool_settings) == {"keyword_weight": 0.0, "expansion_depth": 1}
    assert json.loads((tmp_path / "s.json").read_text())["settings"]["tool_settings"] == {
        "keyword_weight": 0.0,
        "expansion_depth": 1,
    }


def test_agent_file_carries_contextsieve_settings(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "agent.yaml"
    path.write_text(
        "name: a\nsettings:\n  contextTopN: 4\n  contextsieve:\n    keyword_weight: 0.5\n"
        "    tool_settings: {context_top_n: 8, expansion_depth: 1}\n",
        encoding="utf-8",
    )
    agent = load_agent(path)
    assert agent.settings.context_top_n == 4 and agent.settings.keyword_weight == 0.5
    assert agent.settings.for_tools().context_top_n == 8 and agent.settings.for_tools().expansion_depth == 1
    save_agent(agent, tmp_path / "again.yaml")
    again = load_agent(tmp_path / "again.yaml")
    assert again.settings == agent.settings
    from contextsieve.errors import AgentFileError

    for bad in ("    nonsense: 1\n", "    keyword_weight: -1\n", "    context_top_n: 3\n"):
        path.write_text("name: a\nsettings:\n  contextsieve:\n" + bad, encoding="utf-8")
        with pytest.raises(AgentFileError, match="settings"):
            load_agent(path)
    plain = tmp_path / "plain.yaml"
    save_agent(Agent(name="p"), plain)
    assert "contextsieve" not in plain.read_text()  # defaults are not written


def test_server_context_only_when_it_tells_tools_apart() -> None:
    store = ChunkStore(FakeEmbedder())
    one = [Tool("a", "x", "one"), Tool("a", "y", "two")]
    store.sync(one)
    assert store.chunks_of(one[0].key).chunks[0].embed_text == "x: one"  # one server: no prefix
    two = [*one, Tool("b", "z", "three")]
    assert store.sync(two) == 3  # a second server: every tool gets its server
    assert [store.chunks_of(t.key).chunks[0].embed_text for t in two] == ["a\n\nx: one", "a\n\ny: two", "b\n\nz: three"]


def test_index_builds_the_graph_when_settings_expand_from_it() -> None:
    from contextsieve.agent.settings import AgentSettings
    from contextsieve.engine import Engine

    agent = graph_agent()
    agent.settings = AgentSettings(tool_settings={"expansion_depth": 1, "expansion_source": "hybrid"})
    engine = Engine(agent, embedder=FakeEmbedder(), cache_dir=False)
    stats = engine.index()
    assert stats.graphs == 1 and stats.items == 4
    order = [it.key for it in agent.all_items()]
    g = engine.store.relation_graph(order, "mean_embedding", 0.5)
    engine.session().build_request("authenticate")
    assert engine.store.relation_graph(order, "mean_embedding", 0.5) is g  # built once, at index time


def test_conservative_preset_expands() -> None:
    from contextsieve.agent.settings import AgentSettings

    s = AgentSettings().with_overrides("conservative")
    assert (s.context_top_n, s.expansion_depth, s.expansion_threshold) == (8, 1, 0.75)
    assert AgentSettings().with_overrides("aggressive").expansion_depth == 0
    assert AgentSettings().with_overrides("conservative", expansion_depth=0).expansion_depth == 0  # explicit wins


# -- keyword fusion --------------------------------------------------------------------------------


def test_fuse_matches_plain_oracles() -> None:
    from contextsieve.retrieval.fusion import RRF_K
    from contextsieve.selection.ranking import fuse

    rng = np.random.default_rng(3)
    dense = rng.standard_normal(40).astype(np.float32)
    dense[5] = dense[6]  # a tie: the lower row ranks first
    kw = np.where(rng.random(40) < 0.5, rng.random(40), 0.0).astype(np.float32)
    exclude = rng.random(40) < 0.2
    w = fuse(dense, kw, 0.3, "weighted", exclude)
    np.testing.assert_allclose(w[~exclude], dense[~exclude] + 0.3 * kw[~exclude], rtol=1e-6)
    assert np.all(np.isneginf(w[exclude]))
    r = fuse(dense, kw, 0.5, "rrf", exclude)
    kept = [i for i in range(40) if not exclude[i]]
    d_rank = {i: k + 1 for k, i in enumerate(sorted(kept, key=lambda i: (-dense[i], i)))}
    matched = [i for i in kept if kw[i] > 0]
    k_rank = {i: k + 1 for k, i in enumerate(sorted(matched, key=lambda i: (-kw[i], i)))}
    for i in kept:
        want = 1 / (RRF_K + d_rank[i]) + (0.5 / (RRF_K + k_rank[i]) if i in k_rank else 0.0)
        assert r[i] == pytest.approx(want, rel=1e-5)
    assert np.all(np.isneginf(r[exclude]))
    np.testing.assert_array_equal(fuse(dense, None, 0.3, "rrf", exclude)[~exclude], dense[~exclude])


def test_rrf_sessions_select_and_explain_consistently(store: ChunkStore) -> None:
    agent = graph_agent()
    s = Session(
        agent,
        store,
        keyword_fusion="rrf",
        keyword_weight=1.0,
        context_top_n=2,
        context_include_score=0.99,
        tool_domain="shared",
    )
    ctx = s.build_request("fetch the token endpoint").context
    names = [e.key.name for e in ctx.entries]
    assert len(names) == 2 and all(
        e.score is not None and e.score > 0 for e in ctx.entries
    )  # similarities, not RRF scores
    for item in agent.all_items():
        assert s.explain("fetch the token endpoint", item.key).included == (item.name in names)
    with pytest.raises(InputError, match="keyword_fusion"):
        Session(agent, store, keyword_fusion="sum")


@pytest.mark.parametrize("seed", range(12))
def test_explanations_agree_with_the_selection_under_any_settings(seed: int) -> None:
    """Random settings (domains, fusion, pooling, expansion source, min-representation): for every item,
    ``explain`` says included exactly when the request has it, and explaining changes nothing."""
    import random

    rng = random.Random(seed)
    words_ = "fetch token endpoint paint house blue url colors list authenticate refund parcel outage deploy".split()
    rules = [
        Rule(f"r{i}", " ".join(rng.choices(words_, k=6)), " ".join(rng.choices(words_, k=2)), include=G)
        for i in range(6)
    ]
    refs = [
        Reference(
            f"d{i}",
            "# A\n\n" + " ".join(rng.choices(words_, k=8)) + "\n\n## B\n\n" + " ".join(rng.choices(words_, k=5)),
            include=G,
        )
        for i in range(4)
    ]
    tools = [Tool(f"s{i % 2}", f"t{i}", " ".join(rng.choices(words_, k=4))) for i in range(6)]
    agent = Agent(
        rules=rules,
        references=refs,
        servers={"s0": McpServer("s0", default_include=G), "s1": McpServer("s1", default_include=G)},
        tools=tools,
    )
    settings = {
        "context_top_k": rng.choice([3, 10, 20]),
        "context_top_n": rng.choice([1, 3, 5]),
        "context_include_score": rng.choice([0.3, 0.7, 0.99]),
        "keyword_weight": rng.choice([0.0, 0.3, 1.0]),
        "keyword_fusion": rng.choice(["weighted", "rrf"]),
        "query_pooling": rng.choice(["max", "mean"]),
        "expansion_depth": rng.choice([0, 1, 2]),
        "expansion_threshold": rng.choice([0.2, 0.5]),
        "expansion_source": rng.choice(["pass2", "graph", "hybrid"]),
        "min_representation_floor": rng.choice([None, 0.1]),
        "keyword_role": rng.choice(["rerank", "add"]),
        "context_min_ratio": rng.choice([None, 0.5, 0.9]),
        "query_split": rng.choice(["sentences", "steps"]),
        "tool_query_split": rng.choice(["sentences", "steps"]),
        "server_weight": rng.choice([0.0, 0.2]),
        "tool_domain": rng.choice(["shared", "own"]),
        "prf_weight": rng.choice([0.0, 0.5]),
    }
    if rng.random() < 0.5:
        settings["tool_settings"] = {"context_top_n": rng.choice([1, 2]), "keyword_weight": rng.choice([0.0, 0.5])}
    s = Session(agent, ChunkStore(FakeEmbedder()), **settings)
    msg = " ".join(rng.choices(words_, k=5)) + " and then " + " ".join(rng.choices(words_, k=3)) + "."
    chosen = {e.key for e in s.build_request(msg).context.entries}
    before = s.items()
    for item in agent.all_items():
        ex = s.explain(msg, item.key)
        assert ex.included == (item.key in chosen), (settings, str(ex))
        assert ex.reasons
    assert s.items() == before


def test_keyword_index_sees_the_chunk_context() -> None:
    """A section body that never names its parent is still found by the parent's name (heading path)."""
    from contextsieve.agent.settings import AgentSettings

    ref = Reference(
        "runbook", "# Redis\n\nStop the server and copy the snapshot.\n\n# Kafka\n\nFail over the consumers.", "ops"
    )
    store = ChunkStore(FakeEmbedder())
    store.sync([ref])
    order = [ref.key]
    scores = store.keyword_index(order).scores("redis")
    texts = [c.text for c in store.chunks_of(ref.key).chunks]
    assert texts[int(np.argmax(scores))] == "Stop the server and copy the snapshot."
    assert AgentSettings().keyword_weight > 0  # the default uses it


def test_a_reference_request_context_loads_and_rebuilds_a_request() -> None:
    """The reference system's chat files keep ``requestContext`` ({items, timestamp}) on assistant
    messages; contextsieve reads that shape (and its own older one) and rebuilds the request."""
    from contextsieve.agent.agentfile import example_agent_path, load_agent
    from contextsieve.engine import Engine
    from contextsieve.selection.context import ContextEntry, RequestContext
    from tests.helpers.fake_embedder import FakeEmbedder

    recorded = {
        "items": [
            {"type": "rule", "name": "tone", "includeMode": "always"},
            {"type": "reference", "name": "style-guide", "includeMode": "manual"},
            {
                "type": "tool",
                "name": "create_pull_request",
                "serverName": "github",
                "includeMode": "agent",
                "similarityScore": 0.61,
            },
        ],
        "timestamp": "2026-11-20T10:00:00.000Z",
    }
    ctx = RequestContext.from_dict(recorded)
    assert [str(k) for k in ctx.keys()] == ["rule:tone", "reference:style-guide", "tool:github:create_pull_request"]
    engine = Engine(load_agent(example_agent_path()), embedder=FakeEmbedder(), cache_dir=False)
    req = engine.session().request_for(ctx, "Open the PR please.")
    assert [t["name"] for t in req.tools] == ["github_create_pull_request"]
    assert any(m["content"].startswith("Reference: ") for m in req.messages)
    # contextsieve's own shape round-trips, extras included; the older key/mode shape still loads
    e = ContextEntry.from_dict(ctx.entries[2].to_dict())
    assert e == ctx.entries[2] and RequestContext.from_dict(ctx.to_dict()).entries == ctx.entries
    old = ContextEntry.from_dict({"key": "rule:tone", "mode": "always"})
    assert str(old.key) == "rule:tone"
