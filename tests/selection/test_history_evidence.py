"""What history may change in a selection: a recorded example speaks for its tool only for requests
like itself, it adds tools without narrowing what the request's own words found, a task's steps are
learned under the task's message and are not steered by what the task itself taught, a rule or
reference of weak evidence does not fill a small agent's places, and a sentence with evidence of its
own keeps its rule."""

from __future__ import annotations

import numpy as np
import pytest

from contextsieve.agent import settings as agent_settings
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.kernels.scoring import Hits
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.ranking import (
    FILL_KEYWORD,
    Ranked,
    Selected,
    SentenceEvidence,
    ratio_base,
    represent_sentences,
)
from contextsieve.session.session import Session
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.ranking import cut

G = IncludeMode.AGENT
TOOLS = [
    ("files", "zip_folder", "compress a folder into a zip archive"),
    ("files", "unzip_archive", "extract a zip archive into a folder"),
    ("files", "list_folder", "list the files of a folder"),
    ("mail", "send_mail", "send an email message to a person"),
    ("mail", "read_inbox", "list the newest email messages"),
    ("ops", "restart_service", "restart a running service"),
]
SEND = ItemKey(ItemKind.TOOL, "send_mail", "mail")
RESTART = ItemKey(ItemKind.TOOL, "restart_service", "ops")
EXAMPLE = "quokka lemur narwhal ocelot tapir"  # no tool's words: only an example can find a tool for it


def agent() -> Agent:
    return Agent(
        servers={s: McpServer(s, default_include=G) for s in {t[0] for t in TOOLS}},
        tools=[Tool(s, n, d) for s, n, d in TOOLS],
    )


def session(**settings: object) -> Session:
    return Session(agent(), ChunkStore(FakeEmbedder()), **settings)  # type: ignore[arg-type]


def tools_of(request: object) -> list[ItemKey]:
    return [e.key for e in request.context.entries if e.key.kind is ItemKind.TOOL]  # type: ignore[attr-defined]


def cosine(a: str, b: str) -> float:
    v = FakeEmbedder().embed([a, b])
    return float(v[0] @ v[1])


def test_an_example_speaks_only_for_requests_like_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    near, far = EXAMPLE, "quokka walrus yak heron ibis"  # the same words / one word in five shared
    assert cosine(EXAMPLE, near) > 0.99 and cosine(EXAMPLE, far) < agent_settings.EXAMPLE_SIMILARITY
    s = session()
    s.record_tool_calls(EXAMPLE, [SEND])
    assert SEND in tools_of(s.build_request(near))
    assert SEND not in tools_of(s.build_request(far))
    monkeypatch.setattr(agent_settings, "EXAMPLE_SIMILARITY", -1.0)  # no gate: the loose example pulls it in
    assert SEND in tools_of(session_with(s, EXAMPLE).build_request(far))


def test_a_tasks_first_request_counts_an_example_from_the_request_gate_its_later_steps_from_the_steps() -> None:
    """An example at cosine 0.43 (between the two gates) finds its tool for a request on its own and for a
    task's first request, not for a later step of a task nor for an offer of fewer than WIDE_OFFER tools:
    a narrow offer's few places stay the request's own."""
    from contextsieve.session.task_tools import TaskState, example_gate

    request = "quokka lemur narwhal yak heron ibis"  # three of the example's five words
    gates = agent_settings.EXAMPLE_SIMILARITY, agent_settings.NARROW_EXAMPLE_SIMILARITY
    assert gates[0] <= cosine(EXAMPLE, request) < gates[1]
    assert example_gate(None) == gates[0] and example_gate(TaskState()) == gates[0]
    s = session()
    s.record_tool_calls(EXAMPLE, [RESTART])
    assert RESTART in tools_of(s.build_request(request))  # a session's first request
    assert RESTART in tools_of(s.build_request(request))  # no reply since: a task of its own, its first request
    s.new_task()
    first = s.build_request("list the files of a folder")
    assert RESTART not in tools_of(first)  # nor among the tools the task carries into its steps
    s.record_reply(first, "Listed.")
    assert RESTART not in tools_of(s.build_request(request))  # a later step of the task: the steps' gate
    later = TaskState(message="list the files of a folder", requests=1, replied=True)
    assert example_gate(later) == gates[1]
    narrow = session(tool_top_n=agent_settings.WIDE_OFFER - 1)  # a narrow offer: the narrow gate
    narrow.record_tool_calls(EXAMPLE, [RESTART])
    assert RESTART not in tools_of(narrow.build_request(request))
    assert RESTART in tools_of(narrow.build_request(EXAMPLE))  # a close example still counts


def test_a_narrow_offer_selects_as_a_search_at_the_narrow_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first request aiming for fewer than WIDE_OFFER tools reads the examples down to the request gate
    and counts them from the narrow one: the same entries, scores and chunks as a search whose every gate
    is the narrow one (the oracle)."""
    recorded = [
        (EXAMPLE, [RESTART]),
        ("quokka lemur narwhal yak heron", [SEND]),
        ("zip the quokka folder", [ItemKey(ItemKind.TOOL, "unzip_archive", "files")]),
        ("send mail to the lemur", [RESTART, SEND]),
    ]
    messages = [
        "quokka lemur narwhal yak heron ibis",
        "quokka lemur walrus yak heron",
        "zip the lemur folder and send mail",
        "restart the quokka service",
    ]

    def run() -> list[list[tuple[str, float, int | None, str | None]]]:
        s = session(tool_top_n=5)
        for text, tools in recorded:
            s.record_tool_calls(text, tools)
        out = []
        for m in messages:
            s.new_task()
            r = s.build_request(m)
            out.append([(e.key.name, round(float(e.score or 0.0), 6), e.chunk, e.via) for e in r.context.entries])
        return out

    got = run()
    assert any(got), "the messages select something"
    monkeypatch.setattr(agent_settings, "EXAMPLE_SIMILARITY", agent_settings.NARROW_EXAMPLE_SIMILARITY)
    assert run() == got


def session_with(old: Session, example: str) -> Session:
    """A fresh session on a fresh store that recorded ``example`` for send_mail."""
    s = Session(old.agent, ChunkStore(FakeEmbedder()))
    s.record_tool_calls(example, [SEND])
    return s


def test_an_example_scores_by_how_close_the_request_is() -> None:
    from contextsieve.selection.chunk_terms import example_score

    gate, low = agent_settings.EXAMPLE_SIMILARITY, agent_settings.EXAMPLE_SCORE
    got = example_score(np.array([gate, (gate + 1) / 2, 1.0], np.float32))
    np.testing.assert_allclose(got, [low, (low + 1) / 2, 1.0], atol=1e-6)


def test_history_adds_tools_and_never_narrows_the_offer() -> None:
    message = "compress the folder into a zip archive and list the folder files"
    cold = session(tool_top_n=10)
    base = set(tools_of(cold.build_request(message)))
    warm = session(tool_top_n=10)
    warm.record_tool_calls(message, [RESTART])  # an exact earlier request: its tool scores 1.0
    got = tools_of(warm.build_request(message))
    assert RESTART in got and base <= set(got)


def _ranked(scores: list[float], sims: list[float], keyword: list[float]) -> Ranked:
    n = len(scores)
    hits = Hits(np.arange(n, dtype=np.int64), np.array(scores, np.float32), np.zeros(n, np.int32))
    return Ranked(hits, np.array(sims, np.float32), None, np.array(keyword, np.float32))


def test_the_ratio_floor_is_relative_to_the_best_own_text_match() -> None:
    ranked = _ranked([1.0, 0.4, 0.25], [1.0, 0.4, 0.25], [0.0, 0.0, 0.0])
    items = np.arange(3)
    examples = np.array([True, False, False])
    assert ratio_base(_ranked([], [], []), examples) == 0.0
    _, plain = cut(ranked, items, top_n=5, include_score=0.9, min_ratio=0.7)
    _, learned = cut(ranked, items, top_n=5, include_score=0.9, min_ratio=0.7, examples=examples)
    assert [s.item for s in plain] == [0]  # 0.4 < 0.7 x 1.0: the example's score cut the others
    assert [s.item for s in learned] == [0, 1]  # 0.7 x 0.4 (the best own-text match)


def test_a_tool_found_through_its_example_still_sets_the_floor_with_its_own_text() -> None:
    """Row 0 is tool 0's example (1.0), row 1 its own description (0.6): the floor is 0.7 x 0.6, so a
    recorded call never lets a weaker tool in that its own text would have kept out."""
    ranked = _ranked([1.0, 0.6, 0.4, 0.25], [1.0, 0.6, 0.4, 0.25], [0.0, 0.0, 0.0, 0.0])
    items = np.array([0, 0, 1, 2])
    examples = np.array([True, False, False, False])
    assert ratio_base(ranked, examples) == pytest.approx(0.6)
    _, learned = cut(ranked, items, top_n=5, include_score=0.9, min_ratio=0.7, examples=examples)
    _, cold = cut(
        _ranked([0.6, 0.4, 0.25], [0.6, 0.4, 0.25], [0.0] * 3), np.arange(3), top_n=5, include_score=0.9, min_ratio=0.7
    )
    assert [s.item for s in learned] == [s.item for s in cold] == [0]  # 0.4 < 0.42: as without the example


def test_weak_rules_do_not_fill_places() -> None:
    # best 0.5; item 1 weak (sim 0.2, no keyword) at 0.2 < 0.5 x 0.5; item 2 the same but named by a
    # strong keyword; item 3 weak but at 0.26 >= 0.25; item 4 a similarity of twice the floor
    ranked = _ranked([0.5, 0.2, 0.22, 0.26, 0.31], [0.5, 0.2, 0.1, 0.26, 0.31], [0, 0, FILL_KEYWORD, 0, 0])
    items = np.arange(5)
    common = {"top_n": 5, "include_score": 0.9, "min_ratio": 0.3, "min_score": 0.15, "keyword_role": "add"}
    _, filled = cut(ranked, items, **common)
    _, kept = cut(ranked, items, **common, fill_ratio=0.5)
    assert [s.item for s in filled] == [0, 4, 3, 2, 1]
    assert [s.item for s in kept] == [0, 4, 3, 2]


@pytest.mark.parametrize("graph", ["fp32", "int8"])
def test_the_demo_request_for_a_pull_request_gets_no_refund_or_shipping_rules(
    graph: str, request: pytest.FixtureRequest
) -> None:
    """The bundled agent: "open a pull request" names git-hygiene and code-review (keywords); the refund
    and shipping rules it used to get scored 0.16-0.24 on the model alone, and explain says why. With
    either graph (int8: this CPU's weight type): at the first cut values an AVX2 machine kept them."""
    from contextsieve.agent.agentfile import example_agent_path
    from contextsieve.engine import Engine

    embedder = request.getfixturevalue(graph)
    session = Engine.from_file(example_agent_path(), history=False, embedder=embedder, cache_dir=False).session()
    message = "@ref:style-guide Please open a pull request for the cart rounding fix."
    rules = [e.key.name for e in session.build_request(message).context.entries if e.key.kind is ItemKind.RULE]
    assert {"git-hygiene", "code-review"} <= set(rules)
    assert not {"refunds-approval", "shipping-delays"} & set(rules)
    assert "evidence is weak" in str(session.explain(message, "rule:refunds-approval"))


def test_a_sentence_with_evidence_of_its_own_keeps_its_item() -> None:
    # items 0 and 1 (two chunks each) were chosen for sentence 0; sentence 1's best candidate is item 2
    chosen = [Selected(0, 0.5, 0, 0, 0.5), Selected(1, 0.45, 2, 0, 0.45)]
    owner = np.array([0, 0, 1, 1, 2, 2, 3, 4])

    def promoted(sim2: float, kw2: float = 0.0, **rule: object) -> list[tuple[int, int, int]]:
        scores = np.array(
            [[0.5, 0.1], [0.3, 0.6], [0.45, 0.05], [0.2, 0.0], [0.1, sim2], [0.0, 0.1], [0.05, 0.12], [0.0, 0.11]],
            dtype=np.float32,
        )
        keyword = np.array([0.9, 0.0, 0.2, 0.0, 0.0, kw2, 0.0, 0.0], dtype=np.float32)  # item 2's 2nd chunk
        evidence = SentenceEvidence(**{"min_score": 0.15, **rule})  # type: ignore[arg-type]
        got = represent_sentences(chosen, scores, owner, np.ones(owner.size, dtype=bool), keyword, evidence)
        return [(s.item, s.chunk, s.query_chunk) for s in got]

    assert promoted(0.35) == [(2, 4, 1)]  # a similarity of twice the floor: evidence; a chosen item's 0.6 is not
    assert promoted(0.25) == []  # weak: under twice the floor, no keyword
    assert promoted(0.25, FILL_KEYWORD) == [(2, 4, 1)]  # a keyword match of half the best's (any chunk of it)
    assert promoted(0.25, FILL_KEYWORD, keywords_count=False) == []  # small talk: keywords are no evidence
    assert promoted(0.25, FILL_KEYWORD, floor_doubled=True) == []  # under the doubled floor
    assert promoted(0.12, 1.0) == []  # under the floor itself, whatever the keyword
    assert promoted(0.35, cap=0) == []


def test_sentence_representation_matches_a_plain_loop() -> None:
    """The vectorised pick (the best chunk's item) against a loop over items and their chunks."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n_items, m = int(rng.integers(2, 9)), int(rng.integers(2, 5))
        owner = np.sort(rng.integers(0, n_items, size=int(rng.integers(n_items, 3 * n_items))))
        scores = rng.uniform(-0.2, 0.7, size=(owner.size, m)).astype(np.float32)
        keyword = rng.uniform(0, 1, size=owner.size).astype(np.float32) * (rng.random(owner.size) < 0.4)
        allowed = rng.random(owner.size) < 0.8
        chosen = [Selected(int(i), 0.5, 0, int(rng.integers(0, m)), 0.5) for i in rng.choice(owner, 2)]
        got = represent_sentences(chosen, scores, owner, allowed, keyword, SentenceEvidence(0.15, cap=2))
        represented, taken, want = {c.query_chunk for c in chosen}, {c.item for c in chosen}, []
        for q in range(m):
            if len(want) >= 2 or q in represented:
                continue
            free = [r for r in range(owner.size) if allowed[r] and owner[r] not in taken]
            best = max(((float(scores[r, q]), -r, int(owner[r])) for r in free), default=None)
            if best is None:
                break
            sim, item = best[0], best[2]
            kw = max(float(keyword[r]) for r in range(owner.size) if owner[r] == item)
            if sim >= 0.15 and (sim >= 0.3 or kw >= FILL_KEYWORD):
                want.append((item, q))
                taken.add(item)
        assert [(s.item, s.query_chunk) for s in got] == want


def test_the_demo_sql_question_keeps_the_database_rule() -> None:
    """The bundled agent: "... refunded last month? Write the SQL for it." The first sentence's rules and
    references fill the five places; the second sentence's best rule, sql-safety (0.29, and "sql" in its
    name), gets a place of its own, and explain says why. Off with ``min_representation_cap=0``."""
    from contextsieve.agent.agentfile import example_agent_path
    from contextsieve.engine import Engine

    engine = Engine.from_file(example_agent_path(), history=False)
    message = "How many orders from Canada were refunded last month? Write the SQL for it."
    entries = engine.session().build_request(message).context.entries
    promoted = [(e.key.name, e.query_chunk) for e in entries if e.via == "min-representation"]
    assert promoted == [("sql-safety", 1)]
    assert "query sentence 2" in str(engine.session().explain(message, "rule:sql-safety"))
    off = engine.session(min_representation_cap=0).build_request(message).context.entries
    assert "sql-safety" not in {e.key.name for e in off}
    one = engine.session().build_request("How many orders from Canada were refunded last month?").context.entries
    assert not [e for e in one if e.via == "min-representation"]  # one sentence: nothing to represent


def test_a_step_is_learned_under_its_task_message() -> None:
    s = session()
    task = "compress the folder into a zip archive"
    first = s.build_request(task)
    s.record_reply(first, "")
    step = s.build_request("then send it")
    assert step.context.settings.get("task_step") == 1
    recorded = s.record_outcome(step, [SEND])
    assert recorded["examples"] == [str(SEND)] and recorded["misses"] == []
    assert [e.text for e in s.store.examples[SEND]] == [task]
    s.record_tool_calls("then send it", [RESTART])  # the latest step's message: the task's too
    assert [e.text for e in s.store.examples[RESTART]] == [task]
    s.record_tool_calls("some other message", [RESTART])  # not the step's: kept as said
    assert sorted(e.text for e in s.store.examples[RESTART]) == sorted([task, "some other message"])


def test_what_a_task_teaches_does_not_steer_its_own_steps() -> None:
    s = session()
    first = s.build_request(EXAMPLE)
    s.record_outcome(first, [SEND])  # learned during the task: EXAMPLE -> send_mail
    s.record_reply(first, "")
    step = s.build_request(EXAMPLE)  # a step that repeats the task's words
    assert step.context.settings.get("task_step") == 1
    assert SEND not in tools_of(step)
    s.new_task()
    assert SEND in tools_of(s.build_request(EXAMPLE))  # the next task finds it


ZIP = ItemKey(ItemKind.TOOL, "zip_folder", "files")


def test_relations_are_read_off_the_examples_in_their_order() -> None:
    from contextsieve.agent.tool_relations import relations

    s = session()
    s.record_tool_calls("pack the report and mail it", [ZIP, SEND])
    s.record_tool_calls("pack the logs then mail them", [ZIP, SEND, RESTART])
    s.record_tool_calls("restart the web service", [RESTART])
    rel = relations(s.store.examples)
    assert rel.uses == {ZIP: 2, SEND: 2, RESTART: 2}
    assert rel.next_to[ZIP] == {SEND: 2} and rel.next_to[SEND] == {ZIP: 2, RESTART: 1}
    assert rel.companions(SEND, 0.5) == [(ZIP, 1.0), (RESTART, 0.5)] and rel.companions(SEND, 0.6) == [(ZIP, 1.0)]
    assert s.store.relations() == rel


def test_a_companion_fills_a_free_place_and_never_takes_one() -> None:
    message = "compress the folder into a zip archive"
    cold = tools_of(session().build_request(message))
    assert cold[0] == ZIP and SEND not in cold
    s = session()
    s.record_tool_calls("pack the report and mail it", [ZIP, SEND])
    request = s.build_request(message)
    companions = [e for e in request.context.entries if e.via == "companion"]
    assert [(e.key, e.pulled_by, e.score) for e in companions] == [(SEND, ZIP, 1.0)]
    assert tools_of(request) == cold + [SEND]
    assert "used it right before or after tool:files:zip_folder" in str(s.explain(message, str(SEND)))
    full = Session(s.agent, s.store, tool_top_n=len(cold))  # no free place: nothing joins
    assert tools_of(full.build_request(message)) == cold
    off = Session(s.agent, s.store, companion_tools=0)
    assert tools_of(off.build_request(message)) == cold


def test_a_step_seeds_companions_with_the_tool_its_task_called_last() -> None:
    """In a later step, what the task called last is the first seed: the history says what comes right
    after it. A tool the task already called is no companion."""
    s = session(task_tools=0)
    s.record_tool_calls("restart the web service and mail the team", [RESTART, SEND])
    s.new_task()
    first = s.build_request("restart the web service")
    s.record_reply(first, "")
    s.record_outcome(first, [RESTART])
    step = s.build_request(EXAMPLE)  # words no tool has: only the history can say what follows
    companions = [(e.key, e.pulled_by) for e in step.context.entries if e.via == "companion"]
    assert companions == [(SEND, RESTART)]
    assert RESTART not in [k for k, _ in companions]
    # the same words as a task of its own: no tool was called in it, nothing follows
    s.new_task()
    assert [e for e in s.build_request(EXAMPLE).context.entries if e.via == "companion"] == []


def test_a_tool_called_again_is_the_tasks_latest_call() -> None:
    s = session(task_tools=0)
    first = s.build_request("restart the web service and mail the team")
    s.record_reply(first, "")
    for tool in (RESTART, SEND, RESTART):
        s.record_tool_calls(first.message, [tool])
    assert s._task.called == [SEND, RESTART]  # companions of the next step start from RESTART


def test_a_tool_found_through_its_example_adds_a_place_instead_of_taking_one() -> None:
    """Items 0 and 1 by their own text, item 2 through its example (row 2): with top_n 2 the example's
    tool joins them (history adds, HISTORY_EXTRA) instead of pushing item 1 out; cold, top_n holds."""
    from contextsieve.selection.ranking import HISTORY_EXTRA

    ranked = _ranked([0.9, 0.8, 0.85], [0.9, 0.8, 0.85], [0.0, 0.0, 0.0])
    items = np.arange(3)
    examples = np.array([False, False, True])
    _, cold = cut(ranked, items, top_n=2, include_score=0.95)
    _, learned = cut(ranked, items, top_n=2, include_score=0.95, examples=examples)
    assert HISTORY_EXTRA == 1
    assert [s.item for s in cold] == [0, 2]
    assert [s.item for s in learned] == [0, 2, 1]  # ranking order; 1 keeps its place


def test_tools_found_through_history_never_take_the_places_of_the_requests_own_best() -> None:
    """Items 0-2 by their own text; items 3-6 (rows 3-6) through the examples of one close recorded request,
    ranked above them. With top_n 4 one history item joins (HISTORY_EXTRA) and one fills the place past
    the own best three (OWN_KEPT); the others took the places of items 1 and 2 before."""
    ranked = _ranked([0.5, 0.45, 0.4, 0.7, 0.69, 0.68, 0.67], [0.5, 0.45, 0.4, 0.7, 0.69, 0.68, 0.67], [0.0] * 7)
    items = np.arange(7)
    examples = np.array([False, False, False, True, True, True, True])
    _, learned = cut(ranked, items, top_n=4, include_score=0.95, examples=examples)
    assert [s.item for s in learned] == [3, 4, 0, 1, 2]  # 3 added, 4 in the free place, 0-2 kept
    _, small = cut(ranked, items, top_n=2, include_score=0.95, examples=examples)
    assert [s.item for s in small] == [3, 0, 1]  # top_n 2: both own places kept, history adds one


def test_a_close_request_of_another_task_adds_one_tool_and_keeps_the_requests_own_top_three() -> None:
    """One recorded request past the gate (cosine 0.5-0.55) with three unrelated tools pushed two of the
    request's own top three out of a three-tool offer (the hostile probe's minimal case)."""
    own = [
        ("f", "zip_folder", "zip up a directory into an archive file"),
        ("f", "list_invoices", "show every invoice of a customer"),
        ("f", "move_folder", "move a folder somewhere else"),
    ]
    other = [
        ("f", "send_fax", "send a fax"),
        ("f", "print_label", "print a shipping label"),
        ("f", "call_taxi", "call a taxi"),
    ]
    tools = [Tool(s, n, d) for s, n, d in own + other + [("f", "book_room", "book a meeting room")]]

    def fresh() -> Session:
        a = Agent(servers={"f": McpServer("f", default_include=G)}, tools=list(tools))
        return Session(a, ChunkStore(FakeEmbedder()), tool_top_n=3)  # type: ignore[arg-type]

    request, recorded = "archive the quarterly invoices folder", "archive the quarterly zebra mango"
    assert agent_settings.EXAMPLE_SIMILARITY <= cosine(request, recorded) < 0.55
    cold = tools_of(fresh().build_request(request))
    warm = fresh()
    warm.record_tool_calls(recorded, [f"{s}:{n}" for s, n, _ in other])
    got = tools_of(warm.build_request(request))
    assert [k.name for k in cold] == ["zip_folder", "list_invoices", "move_folder"]
    assert set(cold) <= set(got) and len(got) == 4  # one added, none of the own three pushed out
