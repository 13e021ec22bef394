"""The OpenAI Agents SDK integration: contextsieve's tool choice as a dynamic MCP ``tool_filter`` (two
real MCP servers over stdio), as function tools' ``is_enabled`` and as dynamic instructions, and the
stash as function tools; every run drives a scripted model (no network) through ``Runner.run`` and
checks what was actually sent to it and what actually ran. Selection runs on the real MiniLM."""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

from contextsieve.agent.items import IncludeMode, Rule  # noqa: E402
from contextsieve.errors import InputError, MissingExtraError, ToolChoiceError  # noqa: E402
from contextsieve.integrations.openai_agents import (  # noqa: E402
    ContextSieveHooks,
    ContextSieveToolFilter,
    latest_user_message,
    stash_tools,
)
from contextsieve.integrations.selector import ToolSelector, ToolSpec  # noqa: E402
from contextsieve.stash.store import StashStore  # noqa: E402

set_tracing_disabled(True)

# A workspace MCP server with 16 tools; every call is appended to the JSONL file named by WORKSPACE_LOG.
WORKSPACE_SERVER = '''
import json, os
from mcp.server.mcpserver import MCPServer

server = MCPServer("workspace")

def log(tool, **args):
    with open(os.environ["WORKSPACE_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "args": args}) + "\\n")

@server.tool()
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a recipient with a subject and body."""
    log("send_email", to=to, subject=subject)
    return f"Email sent to {to}."

@server.tool()
def search_email(query: str) -> str:
    """Search the mailbox for emails matching a query."""
    log("search_email", query=query)
    return "No emails found."

@server.tool()
def create_calendar_event(title: str, start: str, duration_minutes: int = 30) -> str:
    """Schedule a meeting or event on the calendar at a start time."""
    log("create_calendar_event", title=title, start=start, duration_minutes=duration_minutes)
    return (f"Created event '{title}' at {start} ({duration_minutes} min). The attendees were not notified "
            "yet: post the invite to the #team Slack channel.")

@server.tool()
def list_calendar_events(day: str) -> str:
    """List the meetings and events on the calendar for a day."""
    log("list_calendar_events", day=day)
    return "No events."

@server.tool()
def get_weather_forecast(city: str) -> str:
    """Get the weather forecast for a city."""
    log("get_weather_forecast", city=city)
    return f"Sunny in {city}, 21 C."

@server.tool()
def convert_currency(amount: float, source: str, target: str) -> str:
    """Convert an amount of money from one currency to another."""
    log("convert_currency", amount=amount)
    return "92.1"

@server.tool()
def read_file(path: str) -> str:
    """Read a text file from the workspace."""
    log("read_file", path=path)
    return ""

@server.tool()
def write_file(path: str, content: str) -> str:
    """Write text to a file in the workspace."""
    log("write_file", path=path)
    return "written"

@server.tool()
def search_web(query: str) -> str:
    """Search the web and return result snippets."""
    log("search_web", query=query)
    return "no results"

@server.tool()
def create_github_issue(repo: str, title: str, body: str) -> str:
    """Open an issue in a GitHub repository."""
    log("create_github_issue", repo=repo)
    return "issue #1"

@server.tool()
def query_database(sql: str) -> str:
    """Run a read-only SQL query against the analytics database."""
    log("query_database", sql=sql)
    return "[]"

@server.tool()
def translate_text(text: str, target_language: str) -> str:
    """Translate text into another language."""
    log("translate_text", target_language=target_language)
    return text

@server.tool()
def book_flight(origin: str, destination: str, date: str) -> str:
    """Book a flight between two airports on a date."""
    log("book_flight", origin=origin)
    return "booked"

@server.tool()
def get_stock_price(ticker: str) -> str:
    """Get the latest stock price for a ticker symbol."""
    log("get_stock_price", ticker=ticker)
    return "100.0"

@server.tool()
def set_reminder(text: str, at: str) -> str:
    """Set a reminder that notifies the user at a given time."""
    log("set_reminder", text=text)
    return "reminder set"

@server.tool()
def post_slack_message(channel: str, text: str) -> str:
    """Post a message to a Slack channel."""
    log("post_slack_message", channel=channel, text=text)
    return f"Posted to {channel}."

server.run()
'''

WORKSPACE_TOOLS = {
    "send_email",
    "search_email",
    "create_calendar_event",
    "list_calendar_events",
    "get_weather_forecast",
    "convert_currency",
    "read_file",
    "write_file",
    "search_web",
    "create_github_issue",
    "query_database",
    "translate_text",
    "book_flight",
    "get_stock_price",
    "set_reminder",
    "post_slack_message",
}
TIME_TOOLS = {"get_current_time", "convert_time"}
UNRELATED = {"book_flight", "get_stock_price", "convert_currency", "translate_text", "query_database", "search_web"}


@pytest.fixture(autouse=True)
def _seeded() -> None:
    random.seed(0)
    np.random.seed(0)


def _servers(tmp_path: Path, sieve: ContextSieveToolFilter) -> tuple[MCPServerStdio, MCPServerStdio, Path]:
    script = tmp_path / "workspace_server.py"
    script.write_text(WORKSPACE_SERVER, encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    workspace = MCPServerStdio(
        params={"command": sys.executable, "args": [str(script)], "env": {"WORKSPACE_LOG": str(log)}, "cwd": tmp_path},
        name="workspace",
        tool_filter=sieve,
        client_session_timeout_seconds=60,
    )
    time_server = MCPServerStdio(
        params={"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        name="time",
        tool_filter=sieve,
        client_session_timeout_seconds=60,
    )
    return workspace, time_server, log


def _names(call: Any) -> set[str]:
    return {t.name for t in call.tools}


def _calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _outputs(call: Any) -> dict[str, str]:
    """The tool outputs the model got in a call, by call id."""
    return {
        i["call_id"]: str(i["output"])
        for i in call.input
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


def test_mcp_tool_filter_multi_step_run(tmp_path: Path, int8: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real MCP servers behind one filter: each model call gets only the chosen tools (plus the
    always-included one), the model calls a tool only the selection offered, the tool result makes the
    next call offer the tool it points to, both run on the server, and each call costs one selection."""
    selections: list[str] = []
    real_choose = ToolSelector.choose

    def counting(self: ToolSelector, message: str, **kw: Any) -> Any:
        selections.append(message)
        return real_choose(self, message, **kw)

    monkeypatch.setattr(ToolSelector, "choose", counting)
    # learning from use off (its tests: test_integrations_learning.py): this test pins each call's tools
    # as chosen for the conversation alone; a recorded example of the message (score 1.0) makes the
    # selection's min_ratio relative to the next tool matched by its own text, letting weak fillers in
    monkeypatch.setattr(ToolSelector, "record_calls", lambda self, choice, called: [])
    sieve = ContextSieveToolFilter(always_include=["get_current_time"], embedder=int8, cache_dir=False)
    message = "Put a team sync on my calendar for Friday at 3pm"
    model = ScriptedModel(
        [
            [function_call("create_calendar_event", {"title": "team sync", "start": "Friday 15:00"}, call_id="c1")],
            [function_call("post_slack_message", {"channel": "#team", "text": "Team sync Friday 15:00"}, call_id="c2")],
            [assistant_message("Scheduled and announced.")],
        ]
    )

    async def main() -> Any:
        workspace, time_server, log = _servers(tmp_path, sieve)
        async with workspace, time_server:
            agent = Agent(name="assistant", instructions="Help.", model=model, mcp_servers=[workspace, time_server])
            result = await Runner.run(agent, message, hooks=ContextSieveHooks(sieve))
        return result, log

    result, log = asyncio.run(main())
    model.assert_complete()
    assert result.final_output == "Scheduled and announced."
    first, second, third = model.calls
    everything = WORKSPACE_TOOLS | TIME_TOOLS

    # step 1: the calendar tools and the always-included clock, nothing unrelated, far fewer than all
    sent = _names(first)
    assert {"create_calendar_event", "get_current_time"} <= sent <= everything
    assert not sent & UNRELATED and "post_slack_message" not in sent
    assert len(sent) <= len(everything) // 2
    # step 2: the calendar tool's result pointed to Slack, so its tool is offered now (proposed)
    assert {"post_slack_message", "create_calendar_event", "get_current_time"} <= _names(second)
    assert not _names(second) & UNRELATED
    assert "get_current_time" in _names(third)
    assert sieve.choices[1].proposed == ("post_slack_message",)
    assert [set(c.tools) for c in sieve.choices] == [_names(c) for c in model.calls]  # (in the servers' order)
    assert sieve.last_choice is sieve.choices[-1]

    # both tools really ran on the MCP server, and their results went back to the model
    assert [(c["tool"], c["args"].get("title") or c["args"].get("channel")) for c in _calls(log)] == [
        ("create_calendar_event", "team sync"),
        ("post_slack_message", "#team"),
    ]
    assert "post the invite to the #team Slack channel" in _outputs(second)["c1"]
    assert "Posted to #team." in _outputs(third)["c2"]
    # one selection per model call (18 tools asked about at each), for the run's user message
    assert selections == [message] * 3
    assert sieve.last_error is None


def test_filter_without_hooks_keeps_one_choice_per_run_and_max_tools(
    tmp_path: Path, int8: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the hooks the run's choice is made once (the message does not change); ``max_tools``
    caps the chosen tools, the always-included ones on top."""
    count = []
    real_choose = ToolSelector.choose
    monkeypatch.setattr(ToolSelector, "choose", lambda self, m, **kw: count.append(m) or real_choose(self, m, **kw))
    sieve = ContextSieveToolFilter(always_include=["convert_time"], max_tools=1, embedder=int8, cache_dir=False)
    model = ScriptedModel(
        [
            [function_call("create_calendar_event", {"title": "Dana", "start": "tomorrow 10:00"}, call_id="e1")],
            [assistant_message("Booked.")],
        ]
    )

    async def main() -> Path:
        workspace, time_server, log = _servers(tmp_path, sieve)
        async with workspace, time_server:
            agent = Agent(name="assistant", model=model, mcp_servers=[workspace, time_server])
            await Runner.run(agent, "Schedule a meeting with Dana tomorrow at 10am and email her the invitation")
        return log

    log = asyncio.run(main())
    assert _names(model.calls[0]) == {"create_calendar_event", "convert_time"}
    assert _names(model.calls[1]) == {"create_calendar_event", "convert_time"}
    assert len(count) == 1
    assert [c["tool"] for c in _calls(log)] == ["create_calendar_event"]
    assert sieve.last_choice is not None
    assert {"send_email", "list_calendar_events"} <= set(sieve.last_choice.dropped)  # selected, cut by the cap


def test_function_tools_and_instructions(int8: Any) -> None:
    """Plain function tools through ``is_enabled``, a given selector over a contextsieve agent with a
    rule, chosen into the system prompt by :meth:`instructions`; the chosen tool runs."""
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        ran.append(city)
        return f"Rain in {city}."

    @function_tool
    def get_stock_price(ticker: str) -> str:
        """Get the latest stock price for a ticker symbol."""
        return "1"

    @function_tool
    def refund_order(order_id: str) -> str:
        """Refund a customer's order."""
        return "refunded"

    @function_tool
    def translate_text(text: str, target_language: str) -> str:
        """Translate text into another language."""
        return text

    @function_tool(is_enabled=False)
    def disabled_tool() -> str:
        """Get the weather everywhere (disabled by its own setting)."""
        return ""

    tools = [get_weather, get_stock_price, refund_order, translate_text, disabled_tool]
    specs = [ToolSpec(t.name, t.description, t.params_json_schema) for t in tools]
    rule = Rule(
        "umbrella", "Always suggest an umbrella when rain is forecast.", "weather advice", include=IncludeMode.AGENT
    )
    other = Rule("refunds", "Refunds over 100 EUR need a manager.", "refund policy", include=IncludeMode.AGENT)
    selector = ToolSelector.from_tools(specs, rules=[rule, other], embedder=int8, cache_dir=False)
    sieve = ContextSieveToolFilter(selector)
    wrapped = sieve.function_tools(tools)
    assert wrapped[-1] is disabled_tool and wrapped[0] is not get_weather and get_weather.is_enabled is True
    model = ScriptedModel(
        [[function_call("get_weather", {"city": "Oslo"}, call_id="g1")], [assistant_message("Take an umbrella.")]]
    )
    agent = Agent(name="assistant", instructions=sieve.instructions("You are helpful."), model=model, tools=wrapped)
    result = asyncio.run(Runner.run(agent, "Will it rain in Oslo today?"))
    assert result.final_output == "Take an umbrella."
    assert ran == ["Oslo"]
    for call in model.calls:
        assert _names(call) == {"get_weather"}
        assert call.system_instructions is not None
        assert call.system_instructions.startswith("You are helpful.\n\nRule: Always suggest an umbrella")
        assert "Refunds" not in call.system_instructions


def test_concurrent_runs_share_one_filter(int8: Any) -> None:
    """Two runs at once through one filter: each model call gets the tools of its own run's message."""

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return "sun"

    @function_tool
    def refund_order(order_id: str) -> str:
        """Refund a customer's order and return the money."""
        return "refunded"

    @function_tool
    def get_stock_price(ticker: str) -> str:
        """Get the latest stock price for a ticker symbol."""
        return "1"

    sieve = ContextSieveToolFilter(embedder=int8, cache_dir=False)

    def respond(call: Any) -> list[Any]:  # one model, one agent, both runs: answer by the run's input
        if _outputs(call):
            return [assistant_message("done")]
        if "Rome" in str(call.input):
            return [function_call("get_weather", {"city": "Rome"}, call_id="a")]
        return [function_call("refund_order", {"order_id": "42"}, call_id="b")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(4)])
    agent = Agent(name="a", model=model, tools=sieve.function_tools([get_weather, refund_order, get_stock_price]))

    async def main() -> list[Any]:
        return await asyncio.gather(
            Runner.run(agent, "What's the weather like in Rome?"), Runner.run(agent, "Please refund my order 42")
        )

    assert [r.final_output for r in asyncio.run(main())] == ["done", "done"]
    model.assert_complete()
    for call in model.calls:
        assert _names(call) == ({"get_weather"} if "Rome" in str(call.input) else {"refund_order"})
    assert sorted(c.tools for c in sieve.choices) == [("get_weather",), ("refund_order",)]


def test_failed_choice_offers_every_tool_or_raises(int8: Any) -> None:
    """A choice that fails (here: an always-included tool nobody has) lets every tool through and
    keeps the typed error; with ``fail_open=False`` the run fails with a ToolChoiceError caused by it."""

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return "sun"

    @function_tool
    def refund_order(order_id: str) -> str:
        """Refund a customer's order."""
        return "refunded"

    sieve = ContextSieveToolFilter(always_include=["no_such_tool"], embedder=int8, cache_dir=False)
    model = ScriptedModel([[assistant_message("ok")]])
    agent = Agent(name="a", model=model, tools=sieve.function_tools([get_weather, refund_order]))
    asyncio.run(Runner.run(agent, "weather in Rome?"))
    assert _names(model.calls[0]) == {"get_weather", "refund_order"}
    assert isinstance(sieve.last_error, InputError) and "no_such_tool" in str(sieve.last_error)
    last = sieve.last_choice
    assert last is not None and last.failed_open and last.error is sieve.last_error
    assert set(last.tools) == {"get_weather", "refund_order"}

    strict = ContextSieveToolFilter(always_include=["no_such_tool"], embedder=int8, cache_dir=False, fail_open=False)
    agent = Agent(
        name="a", model=ScriptedModel([[assistant_message("ok")]]), tools=strict.function_tools([get_weather])
    )
    with pytest.raises(ToolChoiceError, match="no_such_tool") as raised:
        asyncio.run(Runner.run(agent, "weather in Rome?"))
    assert isinstance(raised.value.__cause__, InputError) and strict.last_error is raised.value.__cause__


def test_stash_tools_in_a_run(tmp_path: Path, int8: Any) -> None:
    """The model stashes, retrieves and merges through the function tools; the store holds the
    segments in the run's session (a function of the run context), another session sees none."""
    with StashStore.open(tmp_path / "stash.db", embedder=int8) as store:
        tools = stash_tools(store, session=lambda ctx: f"user-{ctx.context['user']}")
        assert [t.name for t in tools] == ["stash_context", "retrieve_stashed_context", "merge_stashed_context"]
        segments = [
            {"text": "We chose PostgreSQL 18 with pgvector for the stash backend.", "type": "decision", "topic": "db"},
            {"text": "The CI runs on two CPU cores; keep test runs short.", "type": "task_state"},
        ]

        def merge_step(call: Any) -> list[Any]:  # the model merges the best hit of the retrieval it got
            found = json.loads(_outputs(call)["r1"])
            return [
                function_call(
                    "merge_stashed_context", {"segment_ids": [found["segments"][0]["segment_id"]]}, call_id="m1"
                )
            ]

        model = ScriptedModel(
            [
                [function_call("stash_context", {"segments": segments}, call_id="s1")],
                [
                    function_call(
                        "retrieve_stashed_context", {"query": "which database did we pick?", "top_k": 2}, call_id="r1"
                    )
                ],
                ModelStep.respond(merge_step),
                [assistant_message("PostgreSQL.")],
            ]
        )
        agent = Agent(name="a", model=model, tools=tools)
        result = asyncio.run(
            Runner.run(agent, "Remember our decisions, then tell me the database.", context={"user": "ann"})
        )
        assert result.final_output == "PostgreSQL."
        stashed = json.loads(_outputs(model.calls[1])["s1"])
        assert stashed["stashed_count"] == 2 and len(stashed["segment_ids"]) == 2
        found = json.loads(_outputs(model.calls[2])["r1"])
        assert found["total_found"] == 2 and found["segments"][0]["type"] == "decision"
        merged = json.loads(_outputs(model.calls[3])["m1"])
        assert merged["merged_count"] == 1 and "pgvector" in merged["segments"][0]["text"]
        assert {s.topic for s in store.list(session="user-ann")} == {"db", None}
        assert store.list(session="default") == []


def test_latest_user_message_and_input_errors(int8: Any) -> None:
    from agents import RunContextWrapper

    ctx = RunContextWrapper(context=None)
    ctx.turn_input = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "hi"},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "second"}, {"type": "input_image", "image_url": "x"}],
        },
        {"type": "function_call_output", "call_id": "c", "output": "o"},
    ]
    assert latest_user_message(ctx) == "second"
    assert latest_user_message(RunContextWrapper(context=None)) == ""

    for kwargs in ({"max_tools": 0}, {"always_include": "get_weather"}, {"fail_open": "yes"}, {"message_of": 3}):
        with pytest.raises(InputError):
            ContextSieveToolFilter(**kwargs)
    selector = ToolSelector.from_tools([ToolSpec("t", "a tool")], embedder=int8, cache_dir=False)
    with pytest.raises(InputError, match="always_include"):
        ContextSieveToolFilter(selector, always_include=["t"])
    with pytest.raises(InputError):
        ContextSieveToolFilter("not a selector")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        ContextSieveToolFilter().function_tools([lambda: None])  # type: ignore[list-item]
    with pytest.raises(InputError):
        ContextSieveHooks(object())  # type: ignore[arg-type]
    with pytest.raises(InputError):
        stash_tools(object())  # type: ignore[arg-type]


def test_missing_extra_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the Agents SDK the module's import names the extra, the ImportError chained."""
    monkeypatch.setitem(sys.modules, "agents", None)  # import agents -> ImportError
    monkeypatch.delitem(sys.modules, "contextsieve.integrations.openai_agents")
    with pytest.raises(MissingExtraError, match=r"pip install 'contextsieve\[openai-agents\]'") as info:
        importlib.import_module("contextsieve.integrations.openai_agents")
    assert isinstance(info.value.__cause__, ImportError)
    assert isinstance(info.value, ImportError)
