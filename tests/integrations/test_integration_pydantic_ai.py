"""contextsieve in Pydantic AI: runs of a real ``Agent`` on offline models (``FunctionModel``), the
tools chosen by the real MiniLM (int8) and checked as the model received them, step by step."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import CombinedToolset, FunctionToolset

from contextsieve.agent.items import IncludeMode, Rule
from contextsieve.errors import InputError, MissingExtraError, ToolChoiceError
from contextsieve.integrations.pydantic_ai import (
    SelectedToolset,
    SelectorOptions,
    stash_toolset,
)
from contextsieve.integrations.selector import ToolSelector, ToolSpec
from contextsieve.session.offer import OfferConfig
from contextsieve.stash.store import StashStore

# -- a realistic agent: 20 tools, each recording its calls ---------------------------------------------


def make_tools(calls: list[tuple[str, dict[str, Any]]], weather: str = "{city}: 80% chance of rain tomorrow, 17 C"):
    """20 tools of an assistant; each call is appended to ``calls``."""

    def rec(name: str, result: str, **args: Any) -> str:
        calls.append((name, args))
        return result

    def get_weather(city: str) -> str:
        """Current weather and the forecast for a city: temperature, rain, wind."""
        return rec("get_weather", weather.format(city=city), city=city)

    def convert_currency(amount: float, from_currency: str, to_currency: str) -> str:
        """Convert an amount of money from one currency to another at today's exchange rate."""
        return rec("convert_currency", f"{amount * 0.92:.2f} {to_currency}", amount=amount)

    def search_flights(origin: str, destination: str, date: str) -> str:
        """Search airline flights between two airports on a date."""
        return rec("search_flights", "TP207 departs 09:40", origin=origin, destination=destination)

    def book_hotel(city: str, check_in: str, check_out: str) -> str:
        """Book a hotel room in a city for check-in and check-out dates."""
        return rec("book_hotel", "booked", city=city)

    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email message to a recipient with a subject and body."""
        return rec("send_email", "sent", to=to)

    def create_calendar_event(title: str, start: str) -> str:
        """Create a calendar event with a title and a start time."""
        return rec("create_calendar_event", "created", title=title)

    def get_stock_price(ticker: str) -> str:
        """Latest stock market price of a ticker symbol."""
        return rec("get_stock_price", "101.5", ticker=ticker)

    def translate_text(text: str, target_language: str) -> str:
        """Translate text from one language into another."""
        return rec("translate_text", text, target_language=target_language)

    def run_sql_query(query: str) -> str:
        """Run a read-only SQL query against the analytics database."""
        return rec("run_sql_query", "[]", query=query)

    def get_time() -> str:
        """The current date and time."""
        return rec("get_time", "2025-04-30T08:00:00Z")

    def create_github_issue(repo: str, title: str, body: str) -> str:
        """Open a new issue in a GitHub repository."""
        return rec("create_github_issue", "#12", repo=repo)

    def list_pull_requests(repo: str) -> str:
        """List the open pull requests of a GitHub repository."""
        return rec("list_pull_requests", "#7 Fix login redirect; #9 Bump numpy", repo=repo)

    def restart_service(name: str) -> str:
        """Restart a systemd service on the production server."""
        return rec("restart_service", "restarted", name=name)

    def get_cpu_usage(host: str) -> str:
        """CPU and memory usage of a server host."""
        return rec("get_cpu_usage", "5%", host=host)

    def order_pizza(size: str, toppings: list[str]) -> str:
        """Order a pizza for delivery."""
        return rec("order_pizza", "ordered", size=size)

    def set_reminder(text: str, when: str) -> str:
        """Set a reminder that notifies the user at a given time."""
        return rec("set_reminder", "set", text=text)

    def calculate_mortgage(principal: float, rate: float, years: int) -> str:
        """Monthly payment of a mortgage loan."""
        return rec("calculate_mortgage", "1000", principal=principal)

    def lookup_definition(word: str) -> str:
        """Dictionary definition of an English word."""
        return rec("lookup_definition", "...", word=word)

    def play_music(song: str) -> str:
        """Play a song on the user's speakers."""
        return rec("play_music", "playing", song=song)

    def read_file(path: str) -> str:
        """Read a text file from the workspace."""
        return rec("read_file", "", path=path)

    return [
        get_weather,
        convert_currency,
        search_flights,
        book_hotel,
        send_email,
        create_calendar_event,
        get_stock_price,
        translate_text,
        run_sql_query,
        get_time,
        create_github_issue,
        list_pull_requests,
        restart_service,
        get_cpu_usage,
        order_pizza,
        set_reminder,
        calculate_mortgage,
        lookup_definition,
        play_music,
        read_file,
    ]


ALL_TOOLS = {f.__name__ for f in make_tools([])}

#: what the scripted model calls for a user prompt that mentions the key, if the tool is offered to it
PLAN: dict[str, tuple[str, dict[str, Any]]] = {
    "rain": ("get_weather", {"city": "Lisbon"}),
    "euros": ("convert_currency", {"amount": 250, "from_currency": "USD", "to_currency": "EUR"}),
    "pull requests": ("list_pull_requests", {"repo": "acme/web"}),
    "Tokyo": ("get_current_time", {"timezone": "Asia/Tokyo"}),
}
#: what it calls after a tool return that mentions the key
FOLLOW_UP: dict[str, tuple[str, dict[str, Any]]] = {
    "another flight": ("search_flights", {"origin": "LIS", "destination": "OPO", "date": "2025-05-01"}),
}


class Scripted:
    """A ``FunctionModel`` function that records the tools it is sent at every step and calls the one
    its plan names for the user's topic (only if it was sent), then answers with the tool's return."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.instructions: list[str | None] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = [t.name for t in info.function_tools]
        self.sent.append(names)
        self.instructions.append(info.instructions)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        plan = PLAN
        if returns:
            text = returns[-1].model_response_str()
            plan = FOLLOW_UP
        else:
            text = str(last.parts[-1].content)  # the user prompt
        for key, (tool, args) in plan.items():
            if key in text and tool in names:
                return ModelResponse(parts=[ToolCallPart(tool, args)])
        return ModelResponse(parts=[TextPart(f"answer: {text}")])


@pytest.fixture
def calls() -> list[tuple[str, dict[str, Any]]]:
    return []


@pytest.fixture
def selection_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Learning from use off (its tests: test_integrations_learning.py). The tests using this pin each
    step's tools as the selection chooses them for the conversation alone; with learning, the step
    after a call finds its message as a recorded example of the called tool (score 1.0) and its offer
    is ordered and filled around that tool (e.g. book_hotel instead of set_reminder in the time-server
    test), which the learning tests cover."""
    monkeypatch.setattr(ToolSelector, "record_calls", lambda self, choice, called: [])


def selected(int8, tools: list[Callable[..., Any]], **kw: Any) -> SelectedToolset[Any]:  # noqa: ANN001
    return SelectedToolset(FunctionToolset(tools), embedder=int8, cache_dir=False, **kw)


# -- choosing per step -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("selection_only")
def test_multi_turn_run_sends_only_the_chosen_tools(int8, calls) -> None:  # noqa: ANN001
    toolset = selected(int8, make_tools(calls), always_include=["get_time"])
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset])

    history: list[ModelMessage] = []
    outputs = []
    for prompt in (
        "Will it rain in Lisbon tomorrow?",
        "Convert 250 US dollars to euros",
        "Which pull requests are open on acme/web?",
        "Tell me a joke",
    ):
        result = agent.run_sync(prompt, message_history=history)
        history = result.all_messages()
        outputs.append(result.output)

    # two steps per tool-using turn (the call, then the answer with its return), one for the last turn;
    # the second step also gets what the tool's return points to
    assert model.sent == [
        ["get_time", "get_weather"],
        ["get_time", "get_weather"],
        ["get_time", "convert_currency"],
        ["get_time", "convert_currency"],
        ["get_time", "list_pull_requests"],
        ["get_time", "list_pull_requests"],
        ["get_time"],
    ]
    # short returns ("230.00 EUR") point to nothing above ToolSelector's min_proposal
    assert [c.proposed for c in toolset.choices] == [()] * 7
    # the tools were executed, each only in its own turn, with the model's arguments
    assert calls == [
        ("get_weather", {"city": "Lisbon"}),
        ("convert_currency", {"amount": 250.0}),
        ("list_pull_requests", {"repo": "acme/web"}),
    ]
    assert outputs == [
        "answer: Lisbon: 80% chance of rain tomorrow, 17 C",
        "answer: 230.00 EUR",
        "answer: #7 Fix login redirect; #9 Bump numpy",
        "answer: Tell me a joke",
    ]
    returns = [p for m in history for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [r.tool_name for r in returns] == ["get_weather", "convert_currency", "list_pull_requests"]
    # always_include is sent at every step; nothing unrelated ever is
    assert all(step[0] == "get_time" for step in model.sent)
    never = ALL_TOOLS - set().union(*model.sent)
    assert len(never) == 16 and {"send_email", "order_pizza", "play_music", "restart_service"} <= never
    # one choice per step, recorded in the order the model got its tools, with why
    assert [list(c.tools) for c in toolset.choices] == model.sent
    last = toolset.last_choice
    assert last is not None and last.tools == ("get_time",)
    assert last.to_dict()["summary"] == "0 rules, 0 references, 1 tool (all always)"
    assert toolset.choices[0].request.context.query == "Will it rain in Lisbon tomorrow?"
    assert model.instructions == [None] * 7  # no rules or references: nothing added


@pytest.mark.usefixtures("selection_only")
def test_a_tool_return_brings_the_tool_it_points_to(int8, calls) -> None:  # noqa: ANN001
    weather = (
        "Storm warning for {city} tomorrow: the airport is closed and every flight is cancelled; "
        "search for another flight."
    )
    toolset = selected(int8, make_tools(calls, weather), always_include=["get_time"])
    model = Scripted()
    result = Agent(FunctionModel(model), toolsets=[toolset]).run_sync("Will it rain in Lisbon tomorrow?")

    assert model.sent == [
        ["get_time", "get_weather"],
        ["get_time", "get_weather", "search_flights"],  # proposed by the storm warning
        ["get_time", "get_weather", "search_flights"],  # still pointed to; the departure time points to nothing
    ]
    assert [c.proposed for c in toolset.choices] == [(), ("search_flights",), ("search_flights",)]
    assert [name for name, _ in calls] == ["get_weather", "search_flights"]
    assert calls[1] == ("search_flights", {"origin": "LIS", "destination": "OPO"})
    assert result.output == "answer: TP207 departs 09:40"


def test_rules_chosen_for_the_step_go_into_the_instructions(int8, calls) -> None:  # noqa: ANN001
    rules = [
        Rule(
            "currency-rounding",
            "Round converted money amounts to two decimals and name both currencies.",
            include=IncludeMode.AGENT,
        ),
        Rule("weather-units", "Give temperatures in Celsius and wind in km/h.", include=IncludeMode.AGENT),
    ]
    toolset = selected(int8, make_tools(calls), always_include=["get_time"], rules=rules)
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset], instructions="You are a travel assistant.")
    agent.run_sync("Convert 250 US dollars to euros")
    agent.run_sync("Will it rain in Lisbon tomorrow?")
    money = "Rule: Round converted money amounts to two decimals and name both currencies."
    units = "Rule: Give temperatures in Celsius and wind in km/h."
    assert model.instructions == [
        f"You are a travel assistant.\n\n{money}",
        f"You are a travel assistant.\n\n{money}",
        f"You are a travel assistant.\n\n{units}",
        f"You are a travel assistant.\n\n{units}",
    ]
    assert toolset.last_choice is not None and toolset.last_choice.instructions == units


def test_a_given_selector_and_max_tools(int8, calls) -> None:  # noqa: ANN001
    tools = make_tools(calls)
    specs = [ToolSpec(f.__name__, f.__doc__ or "") for f in tools]
    selector = ToolSelector.from_tools(specs, max_tools=1, embedder=int8, cache_dir=False)
    toolset = SelectedToolset(FunctionToolset(tools), selector)
    model = Scripted()
    Agent(FunctionModel(model), toolsets=[toolset]).run_sync("How many euros is 250 US dollars?")
    assert toolset.selector is selector
    assert model.sent == [["convert_currency"], ["convert_currency"]]
    assert toolset.choices[0].dropped == ("calculate_mortgage",)  # selected, cut by max_tools=1
    assert calls == [("convert_currency", {"amount": 250.0})]


def test_tools_added_to_the_wrapped_toolset_are_synced(int8, calls) -> None:  # noqa: ANN001
    tools = FunctionToolset(make_tools(calls))
    toolset = SelectedToolset(tools, embedder=int8, cache_dir=False)
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    agent.run_sync("Water the basil plants in the garden")
    assert model.sent == [[]] and toolset.selector is not None

    def water_plants(plant: str, litres: float) -> str:
        """How much and how often to water a garden or house plant."""
        return "0.2 litres every two days"

    tools.add_function(water_plants)
    del tools.tools["play_music"]
    agent.run_sync("Water the basil plants in the garden")
    assert model.sent[1] == ["water_plants"]
    names = {t.name for t in toolset.selector.session.agent.tools}
    assert "water_plants" in names and "play_music" not in names and len(names) == 20


@pytest.mark.usefixtures("selection_only")
def test_a_stable_offer_only_grows_within_the_task(int8, calls) -> None:  # noqa: ANN001
    toolset = selected(int8, make_tools(calls), offer=OfferConfig(mode="stable"))
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    history = agent.run_sync("Will it rain in Lisbon tomorrow?").all_messages()
    agent.run_sync("Convert 250 US dollars to euros", message_history=history)
    assert model.sent == [
        ["get_weather"],
        ["get_weather"],
        # the second turn's tool is appended; what was offered stays, in its place
        ["get_weather", "convert_currency"],
        ["get_weather", "convert_currency"],  # nothing new needed: the same array (the prompt cache holds)
    ]


def test_pending_tool_calls_of_a_resumed_history_stay_callable(int8, calls) -> None:  # noqa: ANN001
    toolset = selected(int8, make_tools(calls))
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    history: list[ModelMessage] = [
        ModelRequest.user_text_prompt("Tell me a joke"),
        ModelResponse(parts=[ToolCallPart("order_pizza", {"size": "large", "toppings": ["basil"]}, tool_call_id="c1")]),
    ]
    result = agent.run_sync(message_history=history)
    assert calls == [("order_pizza", {"size": "large"})]  # not chosen for the prompt, but already called
    assert result.output == "answer: ordered"


def test_test_model_calls_only_offered_tools(int8, calls) -> None:  # noqa: ANN001
    """Pydantic AI's TestModel calls every tool it is given: here only the chosen ones."""
    toolset = selected(int8, make_tools(calls), always_include=["get_time"])
    Agent(TestModel(seed=0), toolsets=[toolset]).run_sync("Will it rain in Lisbon tomorrow?")
    assert sorted(name for name, _ in calls) == ["get_time", "get_weather"]


# -- an MCP server ---------------------------------------------------------------------------------------


#: the launcher of the real time server with a pinned clock, and the instant its clock reads
DATA = Path(__file__).resolve().parent.parent / "data"
PINNED_NOW = "2027-03-17T14:00:00+00:00"


@pytest.mark.usefixtures("selection_only")
def test_an_mcp_server_among_function_tools(int8, calls) -> None:  # noqa: ANN001
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset  # Pydantic AI's own MCP toolset (the extra's [mcp])

    # The real time server, its clock pinned (tests/data/time_server_at.py): the model calls its
    # get_current_time, and the result's date and weekday are part of what the next step's choice
    # reads, so with the wall clock the second request changed with the day and hour (search_flights
    # scored 0.29-0.31 against min_proposal 0.3: issue 47). At this instant the result proposes
    # search_flights at 0.3137 (0.0137 above min_proposal), the next tool not yet sent, book_hotel, is
    # at 0.211, and search_flights is 5th of the result's top 5 tools, 0.030 above the 6th: of 17,520
    # hours of 2026-2027 scanned, among the farthest from every cut, so the int8 kernels of other CPUs
    # (scores a few thousandths apart) choose the same.
    args = [str(DATA / "time_server_at.py"), PINNED_NOW, "--local-timezone", "UTC"]
    server = MCPToolset(StdioTransport(command=sys.executable, args=args))
    toolset = SelectedToolset(
        CombinedToolset([FunctionToolset(make_tools(calls)), server]), embedder=int8, cache_dir=False
    )
    model = Scripted()
    agent = Agent(FunctionModel(model), toolsets=[toolset])

    async def main() -> Any:  # the run enters the toolsets (starts the server) and exits them
        return await agent.run("What time is it in Tokyo right now?")

    result = anyio.run(main)
    first = ["get_current_time", "get_time", "convert_time", "create_calendar_event", "set_reminder"]
    first += ["get_weather", "get_stock_price"]
    assert model.sent == [first, [*first, "search_flights"]]  # the server's tool first, by score
    assert [c.proposed for c in toolset.choices] == [(), ("search_flights",)]  # by the time result
    returns = [p for m in result.all_messages() for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [r.tool_name for r in returns] == ["get_current_time"]
    # the server's answer is the pinned instant in Tokyo (the pin works)
    assert returns[0].content == {
        "timezone": "Asia/Tokyo",
        "datetime": "2027-03-17T23:00:00+09:00",
        "day_of_week": "Wednesday",
        "is_dst": False,
    }
    assert calls == []
    spec = toolset.selector.session.agent.get("tool:tools:get_current_time")  # synced as one of the tools
    assert "timezone" in spec.description.lower()


# -- the stash ---------------------------------------------------------------------------------------------


def test_stash_toolset_stash_retrieve_merge(int8, tmp_path: Path) -> None:  # noqa: ANN001
    store = StashStore.open(tmp_path / "stash.db", int8)
    blocker = "The billing service deploy is blocked until schema migration 42 is merged."
    lunch = "The team prefers sushi for the Friday lunch."
    seen: list[ModelRequest] = []
    found: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        seen.append(last)
        assert sorted(t.name for t in info.function_tools) == [
            "merge_stashed_context",
            "retrieve_stashed_context",
            "stash_context",
        ]
        step = len(seen)
        if step == 1:
            segments = [{"text": blocker, "type": "decision", "topic": "deploys"}, {"text": lunch}]
            return ModelResponse(parts=[ToolCallPart("stash_context", {"segments": segments})])
        if step == 2:
            query = "why can't we ship billing yet?"
            return ModelResponse(parts=[ToolCallPart("retrieve_stashed_context", {"query": query, "top_k": 2})])
        if step == 3:
            found.update(last.parts[0].content)
            ids = [found["segments"][0]["segment_id"], "no-such-segment"]
            return ModelResponse(parts=[ToolCallPart("merge_stashed_context", {"segment_ids": ids})])
        if step == 4:  # the unknown id came back as a retry: merge the found one alone
            return ModelResponse(
                parts=[ToolCallPart("merge_stashed_context", {"segment_ids": [found["segments"][0]["segment_id"]]})]
            )
        return ModelResponse(parts=[TextPart(last.parts[0].content["segments"][0]["text"])])

    try:
        result = Agent(FunctionModel(model), toolsets=[stash_toolset(store, session="alice")]).run_sync("go")
        stashed = seen[1].parts[0].content
        assert stashed["stashed_count"] == 2 and stashed["duplicates"] == 0 and len(stashed["segment_ids"]) == 2
        assert [s["text"] for s in found["segments"]] == [blocker, lunch]  # best first
        assert found["total_found"] == 2 and found["segments"][0]["type"] == "decision"
        assert found["segments"][0]["topic"] == "deploys"
        retry = seen[3].parts[0]  # the unknown id went back to the model to retry (ModelRetry)
        assert isinstance(retry, ToolReturnPart) and retry.outcome == "retried"
        assert retry.content == "no segment ['no-such-segment'] in session 'alice'"
        assert result.output == blocker
        # in the toolset's session, nowhere else
        assert [h.segment.text for h in store.retrieve("billing deploy", session="alice", top_k=1)] == [blocker]
        assert store.retrieve("billing deploy", top_k=1) == []
    finally:
        store.close()


def test_stash_tools_are_the_shared_definitions(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """Issue 37 item 2: the model reads the same names, descriptions and argument schemas as over MCP
    (contextsieve.session.agent_tools), and an argument out of the schema's range is a retry that says why."""
    from contextsieve.session.stash_agent_tools import STASH_TOOLS

    with StashStore.open(tmp_path / "s.db", int8) as store:
        tools = stash_toolset(store, session="alice")
        defs = {name: t.function_schema.json_schema for name, t in tools.tools.items()}
        shared = {t.name: t for t in STASH_TOOLS}
        assert list(defs) == ["stash_context", "retrieve_stashed_context", "merge_stashed_context"]
        for name, schema in defs.items():
            assert schema == shared[name].input_schema()
            assert tools.tools[name].description == shared[name].description
        assert len(stash_toolset(store, session="alice", tools=[t.name for t in STASH_TOOLS]).tools) == 6
        with pytest.raises(InputError, match="stash tools"):
            stash_toolset(store, session="alice", tools=["drop_everything"])
        calls: list[ModelRequest] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            calls.append(last)
            if len(calls) == 1:
                return ModelResponse(parts=[ToolCallPart("retrieve_stashed_context", {"query": "x", "top_k": 5000})])
            return ModelResponse(parts=[TextPart("done")])

        Agent(FunctionModel(model), toolsets=[tools]).run_sync("go")
        retry = calls[1].parts[0]
        assert isinstance(retry, ToolReturnPart) and retry.outcome == "retried"
        assert "top_k must be from 1 to 1000" in str(retry.content)


# -- errors ------------------------------------------------------------------------------------------------


def test_bad_arguments_are_input_errors(int8, tmp_path: Path) -> None:  # noqa: ANN001
    tools = FunctionToolset(make_tools([]))
    selector = ToolSelector.from_tools([ToolSpec("get_time")], embedder=int8, cache_dir=False)
    bad: list[Callable[[], Any]] = [
        lambda: SelectedToolset("not a toolset"),  # type: ignore[arg-type]
        lambda: SelectedToolset(tools, "not a selector"),  # type: ignore[arg-type]
        lambda: SelectedToolset(tools, always_include="get_time"),
        lambda: SelectedToolset(tools, max_tools=0),
        lambda: SelectedToolset(tools, max_tools=True),  # type: ignore[arg-type]
        lambda: SelectedToolset(tools, sync="yes"),  # type: ignore[arg-type]
        lambda: SelectedToolset(tools, embedding_model="x"),  # type: ignore[call-arg]
        lambda: SelectedToolset(tools, selector, max_tools=3),
        lambda: SelectedToolset(tools, selector, cache_dir=False),
        lambda: stash_toolset("stash.db"),  # type: ignore[arg-type]
    ]
    for make in bad:
        with pytest.raises(InputError):
            make()
    with StashStore.open(tmp_path / "s.db", int8) as store:
        for kw in ({"session": ""}, {"max_segments": 0, "session": "s"}, {"cross_session": "no", "session": "s"}):
            with pytest.raises(InputError):
                stash_toolset(store, **kw)
    # an always_include name the wrapped toolset lacks fails the first step's choice: by default the
    # step gets every tool (the InputError kept); with fail_open=False the run fails before the model
    model = Scripted()
    toolset = SelectedToolset(tools, always_include=["get_tiem"], embedder=int8, cache_dir=False)
    Agent(FunctionModel(model), toolsets=[toolset]).run_sync("What time is it?")
    assert model.sent == [list(tools.tools)]  # every tool, in its order
    assert isinstance(toolset.last_error, InputError) and "get_tiem" in str(toolset.last_error)
    assert toolset.last_choice is not None and toolset.last_choice.failed_open
    model = Scripted()
    strict = SelectedToolset(tools, always_include=["get_tiem"], embedder=int8, cache_dir=False, fail_open=False)
    with pytest.raises(ToolChoiceError, match="get_tiem") as raised:
        Agent(FunctionModel(model), toolsets=[strict]).run_sync("What time is it?")
    assert isinstance(raised.value.__cause__, InputError)
    assert model.sent == []


def test_missing_pydantic_ai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "contextsieve.integrations.pydantic_ai")
    for name in [m for m in sys.modules if m == "pydantic_ai" or m.startswith("pydantic_ai.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'contextsieve\[pydantic-ai\]'") as e:
        importlib.import_module("contextsieve.integrations.pydantic_ai")
    assert isinstance(e.value.__cause__, ImportError)


def test_options_and_segment_types_match_the_library() -> None:
    from contextsieve.integrations import selector

    # from_tools' options are one TypedDict, defined with ToolSelector and importable from here too
    assert SelectorOptions is selector.SelectorOptions
    assert set(SelectorOptions.__annotations__) == selector.SELECTOR_OPTIONS
