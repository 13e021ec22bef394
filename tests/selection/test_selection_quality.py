"""Selection features for real MCP catalogs (issue 14): keyword evidence that adds, adaptive size,
multi-step messages, CJK keyword terms, tool documents with their parameters."""

from __future__ import annotations

import numpy as np
import pytest

from contextsieve.agent.items import IncludeMode, Tool
from contextsieve.errors import InputError
from contextsieve.kernels.scoring import Hits
from contextsieve.retrieval.bm25 import BM25Index, tokenize
from contextsieve.retrieval.text import query_chunks
from contextsieve.selection.chunking import ChunkConfig, chunk_item, schema_text
from contextsieve.selection.ranking import Ranked
from contextsieve.selection.search import keyword_query
from tests.helpers.ranking import cut


def test_cjk_runs_become_character_bigrams() -> None:
    assert tokenize("查询北京天气") == ["查询", "询北", "北京", "京天", "天气"]
    assert tokenize("weather 北京 x 雨") == ["weather", "北京", "雨"]
    # a Chinese task finds the Chinese description sharing a word with it
    index = BM25Index(["查询火车票余票信息", "获取天气预报", "search code on GitHub"])
    scores = index.scores("帮我查一下明天北京的天气")
    assert int(np.argmax(scores)) == 1 and scores[0] == 0 and scores[2] == 0


def test_steps_split_lists_semicolons_cjk_and_joined_clauses() -> None:
    from contextsieve.retrieval.text import split_query

    msg = "Find the issue about the timeout and post a summary on Slack."
    assert split_query(msg) == ([msg], 1)
    assert split_query(msg, steps=True) == ([msg, "Find the issue about the timeout", "post a summary on Slack"], 1)
    chunks, n = split_query("Tasks:\n1. fetch the page\n2. save it; then commit it", steps=True)
    assert n == 3 and chunks[3:] == ["Tasks:", "fetch the page", "save it", "then commit it"]
    assert query_chunks("Lies die Datei und dann schick sie an Maria.", steps=True)[1:] == [
        "Lies die Datei",
        "schick sie an Maria",
    ]
    assert split_query("查询北京的天气，然后写入文件。发给张三", steps=True) == (
        [
            "查询北京的天气，然后写入文件。发给张三",
            "查询北京的天气，然后写入文件。",
            "查询北京的天气",
            "写入文件。",
            "发给张三",
        ],
        1,
    )
    # one-word pieces are not steps; a sentence without joins has no clauses
    assert query_chunks("Open and close.", steps=True) == ["Open and close."]
    assert split_query("", steps=True) == ([], 0)


def test_documents_search_by_sentence_and_tools_by_step() -> None:
    from contextsieve.agent.settings import AgentSettings

    s = AgentSettings()
    assert (s.query_split, s.for_tools().query_split) == ("sentences", "steps")
    assert AgentSettings(tool_settings={"query_split": "sentences"}).for_tools().query_split == "sentences"
    assert AgentSettings(tool_domain="shared").for_tools().query_split == "sentences"


def test_keyword_query_counts_each_word_once() -> None:
    chunks = ["Find the issue and post it on Slack.", "Find the issue", "post it on Slack", "Also email Bob."]
    assert keyword_query(chunks) == "Find the issue and post it on Slack. Also email Bob."


def _ranked(rows: list[int], scores: list[float], sims: list[float], kw: list[float] | None) -> Ranked:
    hits = Hits(np.array(rows), np.array(scores, np.float32), np.zeros(len(rows), np.int32))
    return Ranked(hits, np.array(sims, np.float32), None, None if kw is None else np.array(kw, np.float32))


def test_keyword_evidence_adds_only_with_the_add_role() -> None:
    owner = np.array([0, 1, 2])
    # row 1: the model scores it below 0, BM25 matches strongly; row 2: no evidence at all
    ranked = _ranked([1, 0, 2], [0.27, 0.2, -0.05], [-0.03, 0.2, -0.05], [1.0, 0.0, 0.0])
    _, rerank = cut(ranked, owner, top_n=5, include_score=0.7)
    _, add = cut(ranked, owner, top_n=5, include_score=0.7, keyword_role="add")
    assert [s.item for s in rerank] == [0]
    assert [s.item for s in add] == [1, 0]
    assert add[0].sim == pytest.approx(-0.03)  # the include score still compares the similarity


def test_min_ratio_makes_top_n_a_cap() -> None:
    owner = np.arange(5)
    ranked = _ranked([0, 1, 2, 3, 4], [0.8, 0.7, 0.5, 0.39, 0.3], [0.8, 0.7, 0.5, 0.39, 0.3], None)
    assert [s.item for s in cut(ranked, owner, top_n=4, include_score=0.9)[1]] == [0, 1, 2, 3]
    assert [s.item for s in cut(ranked, owner, top_n=4, include_score=0.9, min_ratio=0.5)[1]] == [0, 1, 2]
    assert [s.item for s in cut(ranked, owner, top_n=2, include_score=0.9, min_ratio=0.5)[1]] == [0, 1]
    # items at or above the include score stay whatever the ratio says
    assert [s.item for s in cut(ranked, owner, top_n=1, include_score=0.3, min_ratio=0.99)[1]] == [0, 1, 2, 3, 4]


def test_min_score_keeps_items_with_some_evidence_only() -> None:
    """Issue 27 item 15: the absolute floor. Item 0 clears it; item 1 is below it but a keyword of the
    message matches it; item 2 is below it with no keyword match; item 3 is above the include score."""
    owner = np.arange(4)
    ranked = _ranked([3, 0, 1, 2], [0.9, 0.3, 0.25, 0.12], [0.9, 0.3, -0.03, 0.12], [0.0, 0.0, 1.0, 0.0])
    grouped, free = cut(ranked, owner, top_n=5, include_score=0.7, keyword_role="add")
    assert [s.item for s in free] == [3, 0, 1, 2]
    assert [s.keyword for s in grouped] == [False, False, True, False]
    _, floored = cut(ranked, owner, top_n=5, include_score=0.7, keyword_role="add", min_score=0.15)
    assert [s.item for s in floored] == [3, 0, 1]
    _, high = cut(ranked, owner, top_n=5, include_score=0.7, keyword_role="add", min_score=0.95)
    assert [s.item for s in high] == [3, 1]  # the include score wins; keyword evidence still counts
    # no keyword evidence anywhere: a short message (small talk) needs twice the floor, a long one not
    silent = _ranked([3, 0, 1, 2], [0.9, 0.3, 0.25, 0.12], [0.9, 0.3, 0.25, 0.12], [0.0, 0.0, 0.0, 0.0])
    short = dict(top_n=5, include_score=0.7, words=("jury", "summons"))
    assert [s.item for s in cut(silent, owner, min_score=0.15, **short)[1]] == [3, 0]  # type: ignore[arg-type]
    assert [s.item for s in cut(silent, owner, min_score=0.16, **short)[1]] == [3]  # type: ignore[arg-type]
    long = dict(top_n=5, include_score=0.7, words=("received", "jury", "duty", "summon", "california", "obligation"))
    assert [s.item for s in cut(silent, owner, min_score=0.15, **long)[1]] == [3, 0, 1]  # type: ignore[arg-type]
    # small talk: its keyword matches ("good" in some item's text) are no evidence
    chat = dict(top_n=5, include_score=0.7, keyword_role="add", words=("good", "morning"))
    got = cut(ranked, owner, min_score=0.15, **chat)[1]
    assert [s.item for s in got] == [3, 0]  # item 1 had only its keyword match


@pytest.mark.parametrize("message", ["hi", "thanks!", "ok", "good morning"])
def test_small_talk_selects_nothing_beyond_always_items(int8, message: str) -> None:  # noqa: ANN001
    """Issue 27 item 15: "hi" selected 4 rules, 3 references and 9 tools (scores 0.05-0.16) before."""
    from contextsieve import Engine, example_agent_path
    from contextsieve.agent.items import IncludeMode

    engine = Engine.from_file(example_agent_path(), embedder=int8, cache_dir=False)
    entries = engine.session().build_request(message).context.entries
    agent_mode = [str(e.key) for e in entries if e.mode is IncludeMode.AGENT and e.key.server]
    assert agent_mode == [], agent_mode  # no tools at all
    assert len([e for e in entries if e.mode is IncludeMode.AGENT]) <= 1
    free = engine.session(context_min_score=None).build_request(message).context.entries
    assert len([e for e in free if e.mode is IncludeMode.AGENT]) >= 5  # the floor is what changed


SCHEMA = {
    "type": "object",
    "properties": {
        "owner": {"type": "string", "description": "Repository  owner"},
        "headBranch": {"type": "string"},
        "draft": {"type": "boolean", "description": 3},
    },
}


def test_schema_text_names_parameters_in_words() -> None:
    assert schema_text(SCHEMA) == "owner: Repository owner; head branch; draft"
    assert schema_text({}) == schema_text({"properties": []}) == schema_text(None) == ""


def test_tool_schema_modes() -> None:
    tool = Tool("github", "create_pull_request", "Open a pull request", SCHEMA)
    (plain,) = chunk_item(tool, ChunkConfig(tool_context="none"))
    (text,) = chunk_item(tool, ChunkConfig(tool_context="none", tool_schema="text"))
    first, params = chunk_item(tool, ChunkConfig(tool_context="none", tool_schema="chunk"))
    assert plain.embed_text == "create_pull_request: Open a pull request"
    assert text.embed_text == "create_pull_request: Open a pull request\nowner: Repository owner; head branch; draft"
    assert text.text == first.text == plain.text  # the text shown never changes
    assert params.embed_text == "create_pull_request parameters: owner: Repository owner; head branch; draft"
    with pytest.raises(InputError, match="tool_schema"):
        ChunkConfig(tool_schema="all")  # type: ignore[arg-type]


def test_schema_text_is_cut_to_the_window() -> None:
    schema = {"properties": {f"p{i}": {"description": "word " * 40} for i in range(40)}}
    tool = Tool("s", "t", "d " * 10, schema)
    (c,) = chunk_item(tool, ChunkConfig(tool_context="none", tool_schema="text", max_schema_tokens=20))
    assert len(c.embed_text.split("\n", 1)[1]) <= 4 * 20


@pytest.mark.parametrize(
    ("message", "wanted"),
    [
        ("Please open a pull request for the cart rounding fix.", {("github", "create_pull_request")}),
        ("How many orders from Canada were refunded last month? Write the SQL for it.", {("postgres", "run_query")}),
        ("Find the open tickets and reply to the customer.", {("helpdesk", "list_open_tickets")}),
    ],
)
def test_the_demo_messages_select_their_obvious_tools(int8, message: str, wanted: set) -> None:  # noqa: ANN001
    """With the defaults, on the bundled agent (the real model)."""
    from contextsieve import Engine, example_agent_path

    engine = Engine.from_file(example_agent_path(), embedder=int8, cache_dir=False)
    entries = engine.session().build_request(message).context.entries
    tools = {(e.key.server, e.key.name) for e in entries if e.key.server}
    assert wanted <= tools, tools


def test_server_profile_breaks_ties_between_servers() -> None:
    from contextsieve.agent.agent import Agent, McpServer
    from contextsieve.agent.items import IncludeMode
    from contextsieve.selection.chunk_store import ChunkStore
    from contextsieve.session.session import Session
    from tests.helpers.fake_embedder import FakeEmbedder

    G = IncludeMode.AGENT
    agent = Agent(
        servers={
            "gh": McpServer("gh", default_include=G, description="code hosting repositories"),
            "jr": McpServer("jr", default_include=G, description="ticket tracker sprints boards"),
        },
        tools=[Tool("gh", "create_issue", "create an issue"), Tool("jr", "create_issue", "create an issue")],
    )
    store = ChunkStore(FakeEmbedder(), ChunkConfig(tool_context="none"))
    q = "create an issue in the ticket tracker for the sprint"
    plain = Session(agent, store, tool_top_n=1, keyword_weight=0.0).build_request(q).context.entries
    assert [e.key.server for e in plain] == ["gh"]  # a tie: collection order
    boosted = Session(agent, store, tool_top_n=1, keyword_weight=0.0, server_weight=0.3)
    entries = boosted.build_request(q).context.entries
    assert [e.key.server for e in entries] == ["jr"]
    assert entries[0].score == plain[0].score  # entries report the similarity, not the boost
    ex = boosted.explain(q, entries[0].key)
    assert any("server's profile" in r for r in ex.reasons)
    profiles, of_item = store.server_profiles(agent.table().keys)
    assert profiles.shape[0] == 2 and sorted(of_item.tolist()) == [0, 1]


def test_recorded_tool_calls_teach_selection_and_persist(tmp_path) -> None:  # noqa: ANN001
    from contextsieve.agent.agent import Agent, McpServer
    from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind
    from contextsieve.engine import Engine
    from contextsieve.errors import UnknownItemError
    from tests.helpers.fake_embedder import FakeEmbedder

    class Named(FakeEmbedder):
        model_id = "fake-for-usage"  # a model id: the disk cache and the usage log are used

    G = IncludeMode.AGENT

    def agent() -> Agent:
        return Agent(
            name="ops",
            servers={"k8s": McpServer("k8s", default_include=G), "ci": McpServer("ci", default_include=G)},
            tools=[
                Tool("k8s", "kubectl_rollout", "manage the rollout of a resource"),
                Tool("ci", "rerun", "rerun the bad release pipeline of checkout"),
            ],
        )

    msg = "undo the bad release of checkout"
    e = Engine(
        agent(), embedder=Named(), cache_dir=tmp_path, remember_requests=True, history=tmp_path / "history.sqlite"
    )
    before = [x.key.name for x in e.session(tool_top_n=1, keyword_weight=0.0).build_request(msg).context.entries]
    assert before == ["rerun"]
    e.record_tool_calls(msg, ["k8s:kubectl_rollout"])
    s = e.session(tool_top_n=1, keyword_weight=0.0)
    entries = s.build_request("undo the bad release of checkout please").context.entries
    assert [x.key.name for x in entries] == ["kubectl_rollout", "rerun"]  # learned first, in a place of its own
    chunks = e.store.chunks_of(ItemKey(ItemKind.TOOL, "kubectl_rollout", "k8s")).chunks
    assert chunks[-1].text == f"example request: {msg}"
    # persisted in its history file: a new engine on the same file knows the example
    e2 = Engine(
        agent(), embedder=Named(), cache_dir=tmp_path, remember_requests=True, history=tmp_path / "history.sqlite"
    )
    again = e2.session(tool_top_n=1, keyword_weight=0.0).build_request(msg).context.entries
    assert [x.key.name for x in again] == ["kubectl_rollout", "rerun"] and (tmp_path / "history.sqlite").exists()
    # bad calls record nothing
    with pytest.raises(UnknownItemError):
        e2.record_tool_calls("deploy it", ["k8s:kubectl_rollout", "k8s:nope"])
    with pytest.raises(InputError):
        e2.record_tool_calls("  ", ["k8s:kubectl_rollout"])
    with pytest.raises(InputError):
        e2.record_tool_calls("deploy it", ["rule:x"])
    assert e2.store.usage().examples("ops", 20) == {ItemKey(ItemKind.TOOL, "kubectl_rollout", "k8s"): (msg,)}
    assert e2.store.usage().forget("ops") == 1


def test_recorded_requests_stay_off_disk_unless_asked(tmp_path) -> None:  # noqa: ANN001
    """Issue 28: the usage log kept every recorded message's text on disk. By default learning from use
    now keeps them in the engine's memory: it still learns, and no file holds the text."""
    from contextsieve.agent.agent import Agent, McpServer
    from contextsieve.engine import Engine
    from tests.helpers.fake_embedder import FakeEmbedder

    class Named(FakeEmbedder):
        model_id = "fake-for-usage"  # a model id: the disk cache is used

    def agent() -> Agent:
        g = IncludeMode.AGENT
        tools = [Tool("k8s", "kubectl_rollout", "manage the rollout"), Tool("ci", "rerun", "rerun the pipeline")]
        return Agent(name="ops", servers={s: McpServer(s, default_include=g) for s in ("k8s", "ci")}, tools=tools)

    secret = "undo the release of checkout for customer Zyxwvut-4242"
    e = Engine(agent(), embedder=Named(), cache_dir=tmp_path)
    e.record_tool_calls(secret, ["k8s:kubectl_rollout"])
    assert e.store.usage().examples(e.store.usage_scope, 5)  # learned, in memory
    assert not (tmp_path / "usage.sqlite").exists()
    for f in tmp_path.rglob("*"):
        assert not f.is_file() or b"Zyxwvut" not in f.read_bytes(), f
    fresh = Engine(agent(), embedder=Named(), cache_dir=tmp_path)
    assert fresh.store.usage().examples(fresh.store.usage_scope, 5) == {}  # nothing kept across processes
    with pytest.raises(InputError):
        Engine(agent(), embedder=Named(), cache_dir=tmp_path, remember_requests="yes")  # type: ignore[arg-type]


def test_usage_log_keeps_the_newest_examples_and_creates_its_file_on_first_record(tmp_path) -> None:  # noqa: ANN001
    from contextsieve.agent.items import ItemKey, ItemKind
    from contextsieve.agent.usage import UsageLog

    path = tmp_path / "u" / "usage.sqlite"
    log = UsageLog(path, keep_text=True)
    assert log.examples("a", 5) == {} and not path.exists()  # reading creates nothing
    k = ItemKey(ItemKind.TOOL, "t", "s")
    for i in range(4):
        log.record("a", f"message {i}", [k])
    log.record("a", "message 1", [k])  # again: renewed, not duplicated
    assert log.examples("a", 3) == {k: ("message 1", "message 3", "message 2")}
    assert UsageLog(path).examples("a", 10)[k][0] == "message 1" and UsageLog(path).examples("b", 10) == {}
    with pytest.raises(InputError, match="needs the request's vector"):
        UsageLog(path).record("a", "no text kept, no vector given", [k])
    for bad in ("", "x \ud800"):
        with pytest.raises(InputError):
            log.record("a", bad, [k])
    with pytest.raises(InputError):
        log.record("a", "ok", [ItemKey(ItemKind.RULE, "r")])
    assert len(UsageLog(path).examples("a", 10)[k]) == 4
    memory = UsageLog()
    memory.record("a", "hello there", [k])
    assert memory.examples("a", 1) == {k: ("hello there",)} and memory.forget("a", k) == 1


def test_rocchio_moves_the_query_toward_the_feedback_and_keeps_unit_length() -> None:
    from contextsieve.selection.search import rocchio

    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 8)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    fb = rng.standard_normal((3, 8)).astype(np.float32)
    moved = rocchio(q, fb, 0.5)
    want = q + 0.5 * fb.mean(axis=0)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(moved, want, rtol=1e-5, atol=1e-6)
    centroid = fb.mean(axis=0) / np.linalg.norm(fb.mean(axis=0))
    assert np.all(moved @ centroid > q @ centroid)
    np.testing.assert_allclose(rocchio(q, fb, 0.0), q, atol=1e-6)


def test_hostile_messages_split_without_hanging() -> None:
    import signal

    from contextsieve.retrieval.text import split_query

    def hung(*_: object) -> None:
        raise TimeoutError("split_query hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)  # a guard against a hang (a quadratic regex took 53 s here), not a speed test
    try:
        assert split_query(" " * 200_000, steps=True) == ([], 0)
        chunks, n = split_query(" " * 200_000 + "fetch it\n- save it; then mail it", steps=True)
        assert n == 1 and chunks[1:] == ["fetch it", "save it", "then mail it"]
        assert split_query("\n" * 100_000 + ";" * 100_000, steps=True) == ([";" * 500], 1)  # cut at max_chars
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
