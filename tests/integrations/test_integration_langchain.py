"""contextsieve.integrations.langchain / langgraph_store with LangChain's own agent loop (create_agent),
an offline scripted chat model (no network, no LLM) and the real MiniLM: the tools each model call
gets are what contextsieve chose, and the stash works as a LangGraph store."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from contextsieve import InputError, MissingExtraError, OfferConfig, Rule, StashStore
from contextsieve.integrations.langchain import ContextSieveMiddleware, tool_specs
from contextsieve.integrations.langgraph_store import StashMemoryStore
from contextsieve.integrations.selector import ToolSelector

# (name, description): a catalog where each user request needs one tool the others do not serve
CATALOG = [
    ("get_weather", "Get the current weather and the forecast for a city"),
    ("convert_currency", "Convert an amount of money from one currency to another at today's exchange rate"),
    ("search_flights", "Search airline flights between two airports on a date"),
    ("book_hotel", "Reserve a hotel room in a city for given dates"),
    ("send_email", "Send an email message to a recipient"),
    ("create_calendar_event", "Create an event in the user's calendar with a title, start and end time"),
    ("translate_text", "Translate text from one language into another"),
    ("query_database", "Run a read-only SQL query against the analytics database"),
    ("create_github_issue", "Open a new issue in a GitHub repository"),
    ("merge_pull_request", "Merge an approved pull request in a GitHub repository"),
    ("restart_service", "Restart a production service in the Kubernetes cluster"),
    ("read_file", "Read a file from the local disk"),
    ("write_file", "Write text to a file on the local disk"),
    ("stock_quote", "Get the latest stock price for a ticker symbol"),
    ("calculator", "Evaluate an arithmetic expression"),
    ("play_music", "Play a song or playlist on the user's speakers"),
    ("order_food", "Order food delivery from a nearby restaurant"),
    ("track_package", "Track the delivery status of a parcel by its tracking number"),
]

CALLED: list[str] = []


def _tool(name: str, description: str) -> BaseTool:
    def run(query: str) -> str:
        CALLED.append(name)
        return {
            "get_weather": "Paris: light rain, 12 C; tomorrow sunny, 18 C.",
            "convert_currency": "250 EUR = 271.40 USD",
        }.get(name, "ok")

    return StructuredTool.from_function(run, name=name, description=description)


class ScriptedModel(BaseChatModel):
    """Calls the tool its script names for a user turn if (and only if) that tool was offered, then
    answers after the tool result. Records the tool names of every call."""

    script: dict[str, str]
    seen: list[list[str]]
    systems: list[str]

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        names = [t["function"]["name"] for t in kw.get("tools") or []]
        self.seen.append(names)
        self.systems.append(str(messages[0].content) if isinstance(messages[0], SystemMessage) else "")
        last = messages[-1]
        wanted = next((tool for words, tool in self.script.items() if words in str(last.content)), None)
        if isinstance(last, HumanMessage) and wanted in names:
            msg = AIMessage(
                content="",
                tool_calls=[{"name": wanted, "args": {"query": str(last.content)}, "id": f"c{len(self.seen)}"}],
            )
        else:
            msg = AIMessage(content=f"answered with {len(names)} tools")
        return ChatResult(generations=[ChatGeneration(message=msg)])

    @property
    def _llm_type(self) -> str:
        return "scripted"


@pytest.fixture
def tools() -> list[BaseTool]:
    CALLED.clear()
    return [_tool(n, d) for n, d in CATALOG]


def test_each_model_call_gets_the_tools_contextsieve_chose_and_the_model_calls_one_only_it_offered(
    int8: Any, tools: list[BaseTool]
) -> None:
    model = ScriptedModel(script={"rain": "get_weather", "euros": "convert_currency"}, seen=[], systems=[])
    mw = ContextSieveMiddleware(always_include=["calculator"], max_tools=3, embedder=int8, cache_dir=False)
    agent = create_agent(model, tools=tools, middleware=[mw], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "Will it rain in Paris tomorrow?"}]}, config)
    out = agent.invoke({"messages": [{"role": "user", "content": "How many dollars are 250 euros?"}]}, config)

    # four model calls: turn 1 (call, answer), turn 2 (call, answer); each got what was chosen for it
    records = out["contextsieve"]
    assert len(model.seen) == len(records) == 4
    assert [r["tools"] for r in records] == model.seen
    assert [c.tools for c in mw.choices] == [tuple(s) for s in model.seen]
    for names in model.seen:
        assert names[0] == "calculator"  # always_include, first
        assert len(names) <= 1 + 3  # max_tools besides it
        assert not {"merge_pull_request", "restart_service", "play_music", "create_github_issue"} & set(names)
    assert "get_weather" in model.seen[0] and "convert_currency" not in model.seen[0]
    assert "convert_currency" in model.seen[2] and "get_weather" not in model.seen[2]
    assert len(set(model.seen[0])) < len(tools)  # selection, not everything
    # the model called the tools only the selection had offered, and they ran
    assert CALLED == ["get_weather", "convert_currency"]
    assert "271.40 USD" in str(out["messages"][-2].content)
    assert out["messages"][-1].content.startswith("answered with")
    # the record says why: the context has the chosen tool with a score
    ctx = records[0]["context"]
    items = {i["name"]: i for i in ctx["items"] if i["type"] == "tool"}
    assert items["get_weather"]["includeMode"] == "agent" and items["get_weather"]["similarityScore"] > 0.3
    assert items["calculator"]["includeMode"] == "always"


def test_tool_results_pull_in_the_tools_they_point_to(int8: Any, tools: list[BaseTool]) -> None:
    selector = ToolSelector.from_tools(tool_specs(tools), embedder=int8, cache_dir=False)
    plain = selector.choose("What is the weather in Paris?")
    after = selector.choose(
        "What is the weather in Paris?",
        tool_results=["Paris: rain. Your parcel 1Z999 is out for delivery; track the package status online."],
    )
    assert "track_package" not in plain.tools
    assert "track_package" in after.tools and "track_package" in after.proposed


def test_rules_of_the_agent_go_into_the_system_message(int8: Any, tools: list[BaseTool]) -> None:
    rule = Rule(
        "currency-rounding", "Round converted amounts to two decimals and name both currencies.", include="agent"
    )
    selector = ToolSelector.from_tools(tool_specs(tools), rules=[rule], embedder=int8, cache_dir=False)
    model = ScriptedModel(script={}, seen=[], systems=[])
    agent = create_agent(
        model, tools=tools, system_prompt="You are helpful.", middleware=[ContextSieveMiddleware(selector)]
    )
    agent.invoke({"messages": [{"role": "user", "content": "Convert 250 euros to dollars please"}]})
    assert model.systems[0].startswith("You are helpful.\n\nRule: Round converted amounts")
    agent.invoke({"messages": [{"role": "user", "content": "Play some jazz music"}]})
    assert model.systems[1] == "You are helpful."


def test_a_stable_offer_keeps_the_tools_array_within_a_task(int8: Any, tools: list[BaseTool]) -> None:
    model = ScriptedModel(script={}, seen=[], systems=[])
    mw = ContextSieveMiddleware(offer=OfferConfig(mode="stable", budget=8), embedder=int8, cache_dir=False)
    agent = create_agent(model, tools=tools, middleware=[mw], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    for text in ("Will it rain in Paris?", "And is it going to rain in Lyon?", "Any rain expected in Nice?"):
        agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
    first = model.seen[0]
    assert "get_weather" in first
    for later in model.seen[1:]:
        assert later[: len(first)] == first  # only grows, in place
        assert len(later) <= 8


def test_changed_tools_are_synced_and_bad_arguments_are_typed(int8: Any, tools: list[BaseTool]) -> None:
    model = ScriptedModel(script={"rain": "get_weather"}, seen=[], systems=[])
    mw = ContextSieveMiddleware(embedder=int8, cache_dir=False)
    create_agent(model, tools=tools, middleware=[mw]).invoke(
        {"messages": [{"role": "user", "content": "rain in Oslo?"}]}
    )
    extra = _tool("get_tide_times", "Get the high and low tide times for a harbour")
    model2 = ScriptedModel(script={}, seen=[], systems=[])
    create_agent(model2, tools=[*tools, extra], middleware=[mw]).invoke(
        {"messages": [{"role": "user", "content": "When is high tide in Brest harbour?"}]}
    )
    assert "get_tide_times" in model2.seen[0]
    with pytest.raises(InputError):
        ContextSieveMiddleware(max_tools=0)
    with pytest.raises(InputError):
        ContextSieveMiddleware(always_include="calculator")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        ContextSieveMiddleware(selector="not a selector")  # type: ignore[arg-type]


def test_without_langchain_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain.agents.middleware.types", None)
    monkeypatch.delitem(sys.modules, "contextsieve.integrations.langchain")
    with pytest.raises(MissingExtraError, match=r"contextsieve\[langchain\]"):
        importlib.import_module("contextsieve.integrations.langchain")
    monkeypatch.undo()
    importlib.import_module("contextsieve.integrations.langchain")


def test_the_stash_as_a_langgraph_store(int8: Any, tmp_path: Path) -> None:
    from contextsieve.stash.config import StashConfig

    path = tmp_path / "memory.sqlite"
    stash = StashStore.open(path, embedder=int8, config=StashConfig())
    store = StashMemoryStore(stash)
    ns = ("memories", "user/1")
    store.put(ns, "food", {"text": "I love spicy Thai food, especially green curry"})
    store.put(ns, "pet", {"text": "My dog Biscuit is a beagle"})
    store.put(ns, "work", {"text": "I work as a nurse on night shifts"})
    store.put(("memories", "user/2"), "pet", {"text": "I have a parrot"})
    assert store.get(ns, "pet").value == {"text": "My dog Biscuit is a beagle"}  # type: ignore[union-attr]
    hits = store.search(ns, query="which animal lives with them?", limit=2)
    assert [h.key for h in hits][0] == "pet" and len(hits) == 2 and hits[0].score is not None
    assert all(h.namespace == ns for h in hits)  # the other user's parrot is another namespace
    store.put(ns, "pet", {"text": "My cat Miso is a tabby"})  # overwrite
    store.put(ns, "pet", {"text": "My cat Miso is a tabby"})  # the same again: nothing changes
    assert store.get(ns, "pet").value == {"text": "My cat Miso is a tabby"}  # type: ignore[union-attr]
    assert len(stash.list(session="langgraph/memories/user%2F1")) == 3
    store.delete(ns, "food")
    assert store.get(ns, "food") is None
    assert sorted(i.key for i in store.search(ns)) == ["pet", "work"]
    assert [i.key for i in store.search(ns, filter={"text": "I work as a nurse on night shifts"})] == ["work"]
    stash.close()
    # it survives a restart
    again = StashMemoryStore(StashStore.open(path, embedder=int8))
    assert again.get(ns, "pet").value == {"text": "My cat Miso is a tabby"}  # type: ignore[union-attr]
    with pytest.raises(InputError):
        again.put(ns, "bad", {"x": float("nan")})
    with pytest.raises(InputError):
        again.list_namespaces()
    with pytest.raises(NotImplementedError):  # LangGraph's own check (supports_ttl = False)
        again.put(ns, "t", {"a": 1}, ttl=5)
    assert again.get(ns, "bad") is None
    again.store.close()


def test_a_choice_names_tools_as_the_framework_lists_them(int8: Any) -> None:
    from contextsieve.integrations.selector import ToolSpec

    specs = [ToolSpec(n, d, server="travel") for n, d in CATALOG[:6]]
    selector = ToolSelector.from_tools(specs, embedder=int8, cache_dir=False)
    prefixed = [f"travel_{n}" for n, _ in CATALOG[:6]]  # a framework that prefixes the server
    choice = selector.choose("Will it rain in Paris tomorrow?", available=prefixed)
    assert "travel_get_weather" in choice.tools and set(choice.tools) <= set(prefixed)
    assert [str(k) for k in choice.keys][choice.tools.index("travel_get_weather")] == "tool:travel:get_weather"
    own = selector.choose("Will it rain in Paris tomorrow?", available=[n for n, _ in CATALOG[:6]])
    assert "get_weather" in own.tools
    with pytest.raises(InputError):
        ToolSelector(selector.session, min_proposal=2.0)


def test_the_async_agent_loop_chooses_in_a_worker_thread(int8: Any, tools: list[BaseTool]) -> None:
    """awrap_model_call: the same choice through ainvoke (the CPU-bound choice runs off the event loop)."""
    import asyncio
    import threading

    model = ScriptedModel(script={"rain": "get_weather"}, seen=[], systems=[])
    mw = ContextSieveMiddleware(always_include=["calculator"], max_tools=3, embedder=int8, cache_dir=False)
    agent = create_agent(model, tools=tools, middleware=[mw])

    async def main() -> Any:
        loop_thread = threading.get_ident()
        seen_threads: list[int] = []
        choose = mw._prepare

        def spy(request: Any) -> Any:
            seen_threads.append(threading.get_ident())
            return choose(request)

        mw._prepare = spy  # type: ignore[method-assign]
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "Will it rain in Paris tomorrow?"}]})
        return out, loop_thread, seen_threads

    out, loop_thread, seen_threads = asyncio.run(main())
    assert CALLED == ["get_weather"] and len(model.seen) == 2
    assert model.seen[0][0] == "calculator" and "get_weather" in model.seen[0]
    assert [r["tools"] for r in out["contextsieve"]] == model.seen
    assert seen_threads and loop_thread not in seen_threads  # chosen in worker threads, not on the loop


def test_the_tools_the_model_calls_are_learned_as_examples_of_their_message(int8: Any, tools: list[BaseTool]) -> None:
    """The middleware records what the model called after each choice (ToolSelector.record_calls):
    the call's message becomes an example of the tool, no misses, and nothing for an answer."""
    from contextsieve import ItemKey

    model = ScriptedModel(script={"rain": "get_weather"}, seen=[], systems=[])
    mw = ContextSieveMiddleware(embedder=int8, cache_dir=False)
    agent = create_agent(model, tools=tools, middleware=[mw], checkpointer=InMemorySaver())
    message = "Will it rain in Paris tomorrow?"
    agent.invoke({"messages": [{"role": "user", "content": message}]}, {"configurable": {"thread_id": "t"}})
    assert mw.selector is not None and CALLED == ["get_weather"]
    store = mw.selector.session.store
    learned = {str(k): [e.text for e in v] for k, v in store.examples.items()}
    weather = next(k for k in learned if k.endswith(":get_weather"))
    assert learned == {weather: [message]} and not store.misses
    assert mw.selector.record_calls(mw.choices[0], ["not_offered"]) == []
    with pytest.raises(InputError):
        mw.selector.record_calls(mw.choices[0], "get_weather")
    assert isinstance(ItemKey.parse(weather), ItemKey)
